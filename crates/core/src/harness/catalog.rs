//! Agent-authored variant specs and frontier selection. Mirrors
//! `VariantCatalog`, `_frontier_gain` and `select_frontier_work` in
//! `harness_runtime.py` (without router state).
//!
//! Deliberate generalisation: the reference admits at most one spec per
//! seed family per epoch. Here selection makes passes over the ranked
//! families, one spec per family per pass, until `max_lanes` specs are
//! taken or no family has pending specs (`max_lanes = 0`: no limit), so a
//! seed can get several variants in one epoch.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha1::{Digest, Sha1};

use crate::episode::adapter::{Item, Record, SeedSource};
use crate::episode::clock::Clock;
use crate::episode::policy::{FailurePolicy, FatalError};
use crate::episode::records::adapter_error_record;
use crate::episode::value::{float_or_zero, py_str, round_to, str_or_empty, truthy};

/// `schema_version` of a variant catalog file (reference
/// `VARIANT_CATALOG_SCHEMA_VERSION`). A catalog file may omit it; any other
/// value is rejected.
pub const VARIANT_CATALOG_SCHEMA_VERSION: &str = "loopx_explore_variant_catalog_v0";

/// `episode_stage` of the error record of a spec that failed to compile.
pub const STAGE_COMPILE_VARIANT: &str = "compile_variant";

/// Why a catalog file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The file cannot be read.
    #[error("variant catalog {} cannot be read", path.display())]
    Read {
        /// The catalog file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not JSON (or not UTF-8); the message names the line and
    /// column where the parser stopped.
    #[error(
        "variant catalog {}:{}:{} is not valid JSON",
        path.display(),
        source.line(),
        source.column()
    )]
    Parse {
        /// The catalog file.
        path: PathBuf,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// The JSON is not `{"specs": [...]}`: not an object, no `specs` key,
    /// or `specs` not a list.
    #[error("variant catalog {} must be a JSON object with a \"specs\" list", path.display())]
    Shape {
        /// The catalog file.
        path: PathBuf,
    },
    /// The file has the right shape but its content breaks the schema: a
    /// wrong `schema_version`, or specs that are not objects, lack a
    /// non-empty string `spec_id` or `seed_family`, repeat a `spec_id`, or
    /// have a non-numeric `priority`.
    #[error("variant catalog {} is invalid: {message}", path.display())]
    Invalid {
        /// The catalog file.
        path: PathBuf,
        /// Every problem found, `; `-separated, each naming the spec as
        /// `specs[i]` (0-based) and the field.
        message: String,
    },
}

/// Agent-authored variant specs plus this arm's consumption bookkeeping
/// (reference `VariantCatalog`).
///
/// Catalog file: `{"schema_version": ..., "specs": [{"spec_id",
/// "seed_family", "intent", "ops": [...], "key_prefix", "seed_item_id"?,
/// "priority"?}]}`. Specs are opaque to the harness except `spec_id`,
/// `seed_family`, `priority` and `intent`. Each spec is consumed once; the
/// consumed set is persisted in the arm checkpoint (`catalog_consumed`)
/// and restored on resume.
///
/// Unlike the reference, which silently skips what it cannot use, a
/// catalog *file* is validated strictly ([`CatalogError::Shape`],
/// [`CatalogError::Invalid`]): `specs` must be a list; `schema_version`,
/// when present, must be `VARIANT_CATALOG_SCHEMA_VERSION`; every spec
/// must be an object with a non-blank string `spec_id` (unique in the
/// file) and `seed_family`; `priority`, when present, must be a number or
/// `null`. In-memory catalogs ([`VariantCatalog::from_specs`]) stay lenient.
#[derive(Clone, Debug, Default)]
pub struct VariantCatalog {
    path: Option<PathBuf>,
    specs: Vec<Item>,
    consumed: BTreeSet<String>,
}

fn spec_id_of(spec: &Item) -> String {
    spec.get("spec_id")
        .map(|v| py_str(v).into_owned())
        .unwrap_or_default()
}

/// At most this many problems are spelled out in [`CatalogError::Invalid`].
const MAX_REPORTED_PROBLEMS: usize = 20;

/// A short description of a JSON value for error messages: its type and,
/// for scalars, the value (long strings shortened).
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) if s.chars().count() > 40 => {
            let head: String = s.chars().take(40).collect();
            format!("string {}...", Value::from(head))
        }
        Value::String(_) => format!("string {value}"),
        Value::Array(_) => "a list".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

/// Checks that `spec[field]` is a string that is not blank; returns it.
fn required_string<'a>(
    spec: &'a serde_json::Map<String, Value>,
    index: usize,
    field: &str,
    problems: &mut Vec<String>,
) -> Option<&'a str> {
    match spec.get(field) {
        None => problems.push(format!("specs[{index}].{field} is missing")),
        Some(Value::String(s)) if s.trim().is_empty() => {
            problems.push(format!("specs[{index}].{field} is blank"));
        }
        Some(Value::String(s)) => return Some(s),
        Some(other) => problems.push(format!(
            "specs[{index}].{field} must be a non-empty string, got {}",
            describe(other)
        )),
    }
    None
}

/// Validates a parsed catalog file (see [`VariantCatalog`]) and returns
/// its specs in file order.
fn validate_catalog(path: &Path, payload: Value) -> Result<Vec<Item>, CatalogError> {
    let Value::Object(mut payload) = payload else {
        return Err(CatalogError::Shape {
            path: path.to_owned(),
        });
    };
    let Some(Value::Array(specs)) = payload.remove("specs") else {
        return Err(CatalogError::Shape {
            path: path.to_owned(),
        });
    };
    let mut problems = Vec::new();
    match payload.get("schema_version") {
        None => {}
        Some(Value::String(v)) if v == VARIANT_CATALOG_SCHEMA_VERSION => {}
        Some(other) => problems.push(format!(
            "schema_version must be \"{VARIANT_CATALOG_SCHEMA_VERSION}\", got {}",
            describe(other)
        )),
    }
    let mut first_index: HashMap<String, usize> = HashMap::new();
    let mut items = Vec::with_capacity(specs.len());
    for (index, spec) in specs.into_iter().enumerate() {
        let Value::Object(spec) = spec else {
            problems.push(format!(
                "specs[{index}] must be a JSON object, got {}",
                describe(&spec)
            ));
            continue;
        };
        if let Some(spec_id) = required_string(&spec, index, "spec_id", &mut problems) {
            if let Some(first) = first_index.get(spec_id) {
                problems.push(format!(
                    "specs[{index}].spec_id {} duplicates specs[{first}].spec_id",
                    Value::from(spec_id)
                ));
            } else {
                first_index.insert(spec_id.to_owned(), index);
            }
        }
        required_string(&spec, index, "seed_family", &mut problems);
        match spec.get("priority") {
            None | Some(Value::Null | Value::Number(_)) => {}
            Some(other) => problems.push(format!(
                "specs[{index}].priority must be a number or null, got {}",
                describe(other)
            )),
        }
        items.push(spec.into());
    }
    if !problems.is_empty() {
        let total = problems.len();
        problems.truncate(MAX_REPORTED_PROBLEMS);
        let mut message = problems.join("; ");
        if total > MAX_REPORTED_PROBLEMS {
            message.push_str(&format!(
                "; and {} more problem(s)",
                total - MAX_REPORTED_PROBLEMS
            ));
        }
        return Err(CatalogError::Invalid {
            path: path.to_owned(),
            message,
        });
    }
    Ok(items)
}

/// Reads, parses and validates a catalog file.
fn parse_specs(path: &Path) -> Result<Vec<Item>, CatalogError> {
    let bytes = crate::input_file::read_regular(path).map_err(|source| CatalogError::Read {
        path: path.to_owned(),
        source,
    })?;
    // From bytes, so text that is not UTF-8 is placed by line and column.
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(&bytes);
    let payload: Value = serde_json::from_slice(bytes).map_err(|source| CatalogError::Parse {
        path: path.to_owned(),
        source,
    })?;
    validate_catalog(path, payload)
}

impl VariantCatalog {
    /// A catalog backed by `path`, read now. Unlike the reference (which
    /// reads a missing file as empty and skips unusable entries), a file
    /// that cannot be read, parsed or validated (see [`VariantCatalog`]) is
    /// an error here, so a mistyped path or a broken spec is not silently
    /// ignored.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, CatalogError> {
        let path = path.into();
        let specs = parse_specs(&path)?;
        Ok(Self {
            path: Some(path),
            specs,
            consumed: BTreeSet::new(),
        })
    }

    /// A catalog of in-memory specs, not validated: entries without a
    /// truthy `spec_id` are ignored, as in the reference.
    pub fn from_specs(specs: Vec<Item>) -> Self {
        Self {
            path: None,
            specs: specs
                .into_iter()
                .filter(|spec| truthy(spec.get("spec_id")))
                .collect(),
            consumed: BTreeSet::new(),
        }
    }

    /// Re-reads the catalog file, so specs the agent appended during the
    /// run are seen (the reference re-reads on every look-up; the arm calls
    /// this once per epoch). The file is validated as by
    /// [`VariantCatalog::open`]; on error the previous specs stay in use
    /// and the error is returned for the caller to report. No-op without a
    /// file.
    pub fn refresh(&mut self) -> Result<(), CatalogError> {
        if let Some(path) = &self.path {
            self.specs = parse_specs(path)?;
        }
        Ok(())
    }

    /// The backing file, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Every spec, in catalog order.
    pub fn specs(&self) -> &[Item] {
        &self.specs
    }

    /// Unconsumed specs whose `seed_family` is `family`, in catalog order
    /// (reference `pending_for`).
    pub fn pending_for(&self, family: &str) -> Vec<&Item> {
        self.specs
            .iter()
            .filter(|spec| {
                str_or_empty(spec.get("seed_family")) == family
                    && !self.consumed.contains(&spec_id_of(spec))
            })
            .collect()
    }

    /// Number of unconsumed specs (reference `pending_count`).
    pub fn pending_count(&self) -> usize {
        self.specs
            .iter()
            .filter(|spec| !self.consumed.contains(&spec_id_of(spec)))
            .count()
    }

    /// Marks a spec as consumed.
    pub fn consume(&mut self, spec_id: &str) {
        self.consumed.insert(spec_id.to_owned());
    }

    /// Whether a spec was consumed.
    pub fn is_consumed(&self, spec_id: &str) -> bool {
        self.consumed.contains(spec_id)
    }

    /// The consumed spec ids, sorted (the checkpoint's `catalog_consumed`).
    pub fn consumed(&self) -> &BTreeSet<String> {
        &self.consumed
    }

    /// Replaces the consumed set (reference `restore_consumed`); blank ids
    /// are dropped.
    pub fn restore_consumed<I, S>(&mut self, spec_ids: I)
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.consumed = spec_ids
            .into_iter()
            .filter(|id| !id.as_ref().trim().is_empty())
            .map(|id| id.as_ref().to_owned())
            .collect();
    }
}

/// Expected value of a speculative slot near a family without router
/// state (reference `_frontier_gain(None, family, epoch)`): `1.0` base,
/// `+1.25` for a family no router has probed, `+min(0.5, 0.03 * (epoch -
/// 1))` age bonus, rounded to 4 places.
pub fn frontier_gain(epoch: u32) -> f64 {
    let mut score = 1.0;
    score += 1.25;
    score += (f64::from(epoch.saturating_sub(1)) * 0.03).min(0.5);
    round_to(score, 4)
}

/// The reference's epoch-rotating tie-break: the first 8 hex digits of
/// `sha1(family)` as an integer, times `2 * epoch + 1`, modulo 1_000_003.
pub fn frontier_tie_break(family: &str, epoch: u32) -> u64 {
    let digest = Sha1::digest(family.as_bytes());
    let prefix = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
    let product = u128::from(prefix) * (2 * u128::from(epoch) + 1);
    (product % 1_000_003) as u64
}

/// One admitted (or failed) spec in the frontier audit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FrontierSpecAudit {
    /// The spec's `spec_id`.
    pub spec_id: Value,
    /// The family whose seed it was compiled against.
    pub seed_family: String,
    /// The spec's `intent` (`null` when absent).
    pub intent: Value,
    /// [`frontier_gain`] of the family.
    pub gain: f64,
    /// True when `compile_variant` failed (record policy).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compile_error: bool,
}

/// What [`select_frontier_work`] did in one epoch (reference audit object
/// plus `compile_error_count` and `passes`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FrontierAudit {
    /// `max_lanes` as requested (0 = unlimited).
    pub requested_lanes: usize,
    /// Specs compiled into variant items.
    pub admitted: usize,
    /// Specs whose compilation failed (consumed, recorded).
    #[serde(default)]
    pub compile_error_count: usize,
    /// Passes made over the ranked families.
    #[serde(default)]
    pub passes: usize,
    /// Unconsumed specs left in the catalog.
    pub catalog_pending_after: usize,
    /// Every spec taken this epoch, in order.
    pub specs: Vec<FrontierSpecAudit>,
}

/// The variants chosen for one epoch.
#[derive(Clone, Debug, Default)]
pub struct FrontierSelection {
    /// Compiled variant items, to append to the epoch's queue.
    pub items: Vec<Item>,
    /// Error records of specs whose compilation failed (record policy).
    pub error_records: Vec<Record>,
    /// The audit object for the epoch summary's `frontier`.
    pub audit: FrontierAudit,
}

/// Picks catalog specs for this epoch's seeds and compiles them (reference
/// `select_frontier_work`, generalised to several passes; see the module
/// docs).
///
/// Families are those of `seed_items` (first seed per non-empty family),
/// ranked by `frontier_gain` descending, then `frontier_tie_break`,
/// then name. Within a family, specs go by `priority` descending, then
/// `spec_id`. Each taken spec is compiled with
/// `source.compile_variant(spec, seed)` and the item gets, where missing:
/// `is_variant = true`, `variant_spec = spec`, `family`, `seed_item_id`
/// (the seed's `item_id`) and `concurrency_key =
/// "{family}:variant:{spec_id}"`. Every taken spec is consumed.
///
/// `max_lanes` bounds the specs taken (compiled or failed) per call; 0
/// means no bound. A compile failure under [`FailurePolicy::Record`]
/// consumes the spec and yields an error record (`item_id` = the spec id,
/// the seed family, `is_variant = true`, `variant_spec_id`,
/// `episode_stage = "compile_variant"`, host-measured duration); under
/// [`FailurePolicy::Fatal`] it is returned and the spec is not consumed.
pub fn select_frontier_work<S: SeedSource + ?Sized>(
    seed_items: &[Item],
    catalog: &mut VariantCatalog,
    source: &mut S,
    epoch: u32,
    max_lanes: usize,
    policy: FailurePolicy,
    clock: &dyn Clock,
) -> Result<FrontierSelection, FatalError> {
    let gain = frontier_gain(epoch);
    let mut families: Vec<(String, &Item)> = Vec::new();
    for item in seed_items {
        let family = str_or_empty(item.get("family"));
        if !family.is_empty() && !families.iter().any(|(f, _)| f == family.as_ref()) {
            families.push((family.into_owned(), item));
        }
    }
    // Every family has the same gain without router state; the tuple is
    // kept so the ranking reads like the reference's.
    families.sort_by(|(a, _), (b, _)| {
        (frontier_tie_break(a, epoch), a.as_str()).cmp(&(frontier_tie_break(b, epoch), b.as_str()))
    });

    let mut queues: Vec<(String, &Item, std::vec::IntoIter<Item>)> = families
        .into_iter()
        .map(|(family, seed)| {
            let mut pending: Vec<Item> =
                catalog.pending_for(&family).into_iter().cloned().collect();
            pending.sort_by(|a, b| {
                let pa = float_or_zero(a.get("priority")).unwrap_or(0.0);
                let pb = float_or_zero(b.get("priority")).unwrap_or(0.0);
                pb.total_cmp(&pa)
                    .then_with(|| spec_id_of(a).cmp(&spec_id_of(b)))
            });
            (family, seed, pending.into_iter())
        })
        .collect();

    let limit = if max_lanes == 0 {
        usize::MAX
    } else {
        max_lanes
    };
    let mut selection = FrontierSelection {
        audit: FrontierAudit {
            requested_lanes: max_lanes,
            ..FrontierAudit::default()
        },
        ..FrontierSelection::default()
    };
    let mut taken = 0usize;
    'passes: loop {
        let mut took_any = false;
        for (family, seed, pending) in queues.iter_mut() {
            if taken >= limit {
                break 'passes;
            }
            // Skip specs consumed meanwhile (a spec id listed twice).
            let Some(spec) = pending.find(|spec| !catalog.is_consumed(&spec_id_of(spec))) else {
                continue;
            };
            if !took_any {
                selection.audit.passes += 1;
            }
            took_any = true;
            taken += 1;
            let spec_id = spec_id_of(&spec);
            let started = clock.now();
            let compiled = source.compile_variant(&spec, seed);
            let minutes = clock.minutes_since(started);
            let mut audit = FrontierSpecAudit {
                spec_id: spec.get("spec_id").cloned().unwrap_or(Value::Null),
                seed_family: family.clone(),
                intent: spec.get("intent").cloned().unwrap_or(Value::Null),
                gain,
                compile_error: false,
            };
            match compiled {
                Ok(mut item) => {
                    let defaults = [
                        ("is_variant", Value::Bool(true)),
                        ("variant_spec", Value::Object(spec.to_map())),
                        ("family", Value::from(family.as_str())),
                        (
                            "seed_item_id",
                            seed.get("item_id").cloned().unwrap_or(Value::Null),
                        ),
                        (
                            "concurrency_key",
                            Value::from(format!("{family}:variant:{spec_id}")),
                        ),
                    ];
                    for (key, value) in defaults {
                        if !item.contains_key(key) {
                            item.insert(key.into(), value);
                        }
                    }
                    selection.items.push(item);
                    selection.audit.admitted += 1;
                }
                Err(error) if policy.is_fatal() => return Err(FatalError::new(error)),
                Err(error) => {
                    let mut pseudo = Item::new();
                    pseudo.insert("item_id".into(), Value::from(spec_id.as_str()));
                    pseudo.insert("family".into(), Value::from(family.as_str()));
                    pseudo.insert("is_variant".into(), Value::Bool(true));
                    pseudo.insert("variant_spec".into(), Value::Object(spec.to_map()));
                    let mut record = adapter_error_record(&pseudo, &error, minutes);
                    record.insert("episode_stage".into(), Value::from(STAGE_COMPILE_VARIANT));
                    selection.error_records.push(record);
                    selection.audit.compile_error_count += 1;
                    audit.compile_error = true;
                }
            }
            catalog.consume(&spec_id);
            selection.audit.specs.push(audit);
        }
        if !took_any {
            break;
        }
    }
    selection.audit.catalog_pending_after = catalog.pending_count();
    Ok(selection)
}

#[cfg(test)]
#[path = "catalog_tests.rs"]
mod tests;
