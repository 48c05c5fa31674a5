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
/// when present, must be [`VARIANT_CATALOG_SCHEMA_VERSION`]; every spec
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
/// ranked by [`frontier_gain`] descending, then [`frontier_tie_break`],
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
mod tests {
    use serde_json::json;

    use super::*;
    use crate::episode::adapter::AdapterError;
    use crate::episode::clock::ManualClock;
    use crate::episode::testing::{obj, seed};
    use crate::harness::testing::{ScriptedSeeds, spec};

    fn ids(items: &[Item]) -> Vec<String> {
        items
            .iter()
            .map(|i| i["item_id"].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn gain_and_tie_break_match_the_reference_numbers() {
        assert_eq!(frontier_gain(1), 2.25);
        assert_eq!(frontier_gain(2), 2.28);
        assert_eq!(frontier_gain(4), 2.34);
        assert_eq!(frontier_gain(30), 2.75, "the age bonus is capped at 0.5");
        // Values computed with the reference's hashlib expression.
        let families = ["alpha", "beta", "gamma", "delta", "epsilon"];
        let epoch1: Vec<u64> = families.iter().map(|f| frontier_tie_break(f, 1)).collect();
        assert_eq!(epoch1, vec![223355, 169618, 739745, 101254, 140424]);
        let epoch7: Vec<u64> = families.iter().map(|f| frontier_tie_break(f, 7)).collect();
        assert_eq!(epoch7, vec![116772, 848090, 698716, 506270, 702120]);
    }

    #[test]
    fn families_rank_by_the_epoch_rotating_tie_break() {
        let families = ["alpha", "beta", "gamma", "delta", "epsilon"];
        let seeds: Vec<Item> = families
            .iter()
            .map(|f| seed(&format!("s-{f}"), f))
            .collect();
        let expected = [
            (1, ["delta", "epsilon", "beta", "alpha", "gamma"]),
            (2, ["alpha", "epsilon", "delta", "beta", "gamma"]),
            (3, ["gamma", "beta", "epsilon", "alpha", "delta"]),
        ];
        for (epoch, order) in expected {
            let mut catalog = VariantCatalog::from_specs(
                families
                    .iter()
                    .map(|f| spec(&format!("x-{f}"), f, 0.0))
                    .collect(),
            );
            let mut source = ScriptedSeeds::new(vec![]);
            let selection = select_frontier_work(
                &seeds,
                &mut catalog,
                &mut source,
                epoch,
                0,
                FailurePolicy::Record,
                &ManualClock::new(),
            )
            .unwrap();
            let chosen: Vec<&str> = selection
                .audit
                .specs
                .iter()
                .map(|s| s.seed_family.as_str())
                .collect();
            assert_eq!(chosen, order, "epoch {epoch}");
            assert!(
                selection
                    .audit
                    .specs
                    .iter()
                    .all(|s| s.gain == frontier_gain(epoch))
            );
        }
    }

    #[test]
    fn passes_give_a_seed_several_variants_until_max_lanes() {
        // Epoch 1 ranks delta before alpha.
        let seeds = vec![
            seed("sa", "alpha"),
            seed("sd", "delta"),
            seed("sa2", "alpha"),
        ];
        let specs = vec![
            spec("a-low", "alpha", 0.0),
            spec("a-high", "alpha", 5.0),
            spec("a-mid", "alpha", 1.0),
            spec("d-1", "delta", 0.0),
            spec("z-orphan", "zeta", 9.0), // no seed of that family this epoch
        ];
        let mut catalog = VariantCatalog::from_specs(specs.clone());
        let mut source = ScriptedSeeds::new(vec![]);
        let clock = ManualClock::new();
        let selection = select_frontier_work(
            &seeds,
            &mut catalog,
            &mut source,
            1,
            0,
            FailurePolicy::Record,
            &clock,
        )
        .unwrap();
        // Pass 1: delta then alpha's best; pass 2 and 3: alpha's others.
        assert_eq!(
            source.compiled(),
            vec![
                "compile:d-1@sd",
                "compile:a-high@sa",
                "compile:a-mid@sa",
                "compile:a-low@sa"
            ]
        );
        assert_eq!(selection.audit.admitted, 4);
        assert_eq!(selection.audit.passes, 3);
        assert_eq!(selection.audit.catalog_pending_after, 1);
        assert_eq!(selection.audit.requested_lanes, 0);

        // max_lanes = 3 stops inside the second pass.
        let mut catalog = VariantCatalog::from_specs(specs);
        let mut source = ScriptedSeeds::new(vec![]);
        let selection = select_frontier_work(
            &seeds,
            &mut catalog,
            &mut source,
            1,
            3,
            FailurePolicy::Record,
            &clock,
        )
        .unwrap();
        assert_eq!(
            ids(&selection.items),
            vec!["sd~d-1", "sa~a-high", "sa~a-mid"]
        );
        assert_eq!(selection.audit.catalog_pending_after, 2);
        assert!(!catalog.is_consumed("a-low"));
    }

    #[test]
    fn compiled_items_get_the_reference_defaults_without_overwriting() {
        let seeds = vec![seed("s1", "fam")];
        let mut custom = spec("c", "fam", 0.0);
        custom.insert(
            "compiled".into(),
            json!({"concurrency_key": "own-key", "family": "adapter-family"}),
        );
        let mut catalog = VariantCatalog::from_specs(vec![spec("p", "fam", 1.0), custom]);
        let mut source = ScriptedSeeds::new(vec![]);
        let selection = select_frontier_work(
            &seeds,
            &mut catalog,
            &mut source,
            1,
            0,
            FailurePolicy::Record,
            &ManualClock::new(),
        )
        .unwrap();
        let plain = &selection.items[0];
        assert_eq!(plain["item_id"], json!("s1~p"));
        assert_eq!(plain["is_variant"], json!(true));
        assert_eq!(plain["variant_spec"]["spec_id"], json!("p"));
        assert_eq!(plain["family"], json!("fam"));
        assert_eq!(plain["seed_item_id"], json!("s1"));
        assert_eq!(plain["concurrency_key"], json!("fam:variant:p"));
        let custom = &selection.items[1];
        assert_eq!(custom["concurrency_key"], json!("own-key"));
        assert_eq!(custom["family"], json!("adapter-family"));
    }

    #[test]
    fn compile_errors_are_recorded_and_consumed_or_fatal_and_kept() {
        let seeds = vec![seed("s1", "fam")];
        let mut source = ScriptedSeeds::new(vec![]);
        source.compile_errors.insert(
            "bad".into(),
            AdapterError::declared("unsupported_op", "op 'x' unknown", false),
        );
        let clock = ManualClock::new();
        let mut catalog =
            VariantCatalog::from_specs(vec![spec("bad", "fam", 2.0), spec("ok", "fam", 1.0)]);
        let selection = select_frontier_work(
            &seeds,
            &mut catalog,
            &mut source,
            1,
            0,
            FailurePolicy::Record,
            &clock,
        )
        .unwrap();
        assert_eq!(ids(&selection.items), vec!["s1~ok"]);
        assert_eq!(selection.error_records.len(), 1);
        let record = &selection.error_records[0];
        assert_eq!(record["item_id"], json!("bad"));
        assert_eq!(record["family"], json!("fam"));
        assert_eq!(record["is_variant"], json!(true));
        assert_eq!(record["variant_spec_id"], json!("bad"));
        assert_eq!(record["episode_stage"], json!("compile_variant"));
        assert_eq!(record["adapter_error"]["kind"], json!("unsupported_op"));
        assert!(catalog.is_consumed("bad"), "a failed spec is not retried");
        assert_eq!(selection.audit.compile_error_count, 1);
        assert_eq!(selection.audit.admitted, 1);
        assert!(selection.audit.specs[0].compile_error);

        let mut catalog =
            VariantCatalog::from_specs(vec![spec("bad", "fam", 2.0), spec("ok", "fam", 1.0)]);
        let fatal = select_frontier_work(
            &seeds,
            &mut catalog,
            &mut source,
            1,
            0,
            FailurePolicy::Fatal,
            &clock,
        )
        .unwrap_err();
        assert_eq!(fatal.error.message, "op 'x' unknown");
        assert!(!catalog.is_consumed("bad"));
        assert!(!catalog.is_consumed("ok"), "nothing after the failure ran");
    }

    #[test]
    fn each_spec_is_consumed_once_including_duplicated_ids_and_restores() {
        let seeds = vec![seed("s1", "fam")];
        let mut catalog = VariantCatalog::from_specs(vec![
            spec("dup", "fam", 0.0),
            spec("dup", "fam", 0.0),
            obj(json!({"seed_family": "fam"})), // no spec_id: ignored
            obj(json!({"spec_id": "", "seed_family": "fam"})),
        ]);
        assert_eq!(catalog.specs().len(), 2);
        let mut source = ScriptedSeeds::new(vec![]);
        let clock = ManualClock::new();
        let first = select_frontier_work(
            &seeds,
            &mut catalog,
            &mut source,
            1,
            0,
            FailurePolicy::Record,
            &clock,
        )
        .unwrap();
        assert_eq!(ids(&first.items), vec!["s1~dup"]);
        assert_eq!(first.audit.catalog_pending_after, 0);
        let second = select_frontier_work(
            &seeds,
            &mut catalog,
            &mut source,
            2,
            0,
            FailurePolicy::Record,
            &clock,
        )
        .unwrap();
        assert!(second.items.is_empty());
        assert_eq!(second.audit.passes, 0);
        assert_eq!(catalog.consumed().iter().collect::<Vec<_>>(), vec!["dup"]);

        catalog.restore_consumed(["", "  ", "other"]);
        assert_eq!(catalog.consumed().len(), 1);
        assert_eq!(catalog.pending_for("fam").len(), 2);
        catalog.restore_consumed(Vec::<String>::new());
        assert_eq!(catalog.pending_count(), 2);
    }

    #[test]
    fn a_catalog_file_is_reread_and_a_broken_rewrite_keeps_the_last_good_specs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("variant_catalog.json");
        assert!(matches!(
            VariantCatalog::open(&path),
            Err(CatalogError::Read { .. })
        ));
        std::fs::write(
            &path,
            serde_json::to_string(&json!({"schema_version": VARIANT_CATALOG_SCHEMA_VERSION,
                                           "specs": [spec("a", "fam", 0.0)]}))
            .unwrap(),
        )
        .unwrap();
        let mut catalog = VariantCatalog::open(&path).unwrap();
        assert_eq!(catalog.specs().len(), 1);
        assert_eq!(catalog.path(), Some(path.as_path()));
        std::fs::write(
            &path,
            serde_json::to_string(
                &json!({"specs": [spec("a", "fam", 0.0), spec("b", "fam", 0.0)]}),
            )
            .unwrap(),
        )
        .unwrap();
        catalog.refresh().unwrap();
        assert_eq!(catalog.specs().len(), 2);
        std::fs::write(&path, "{\"specs\": [").unwrap();
        assert!(matches!(catalog.refresh(), Err(CatalogError::Parse { .. })));
        assert_eq!(catalog.specs().len(), 2, "the last good specs stay in use");
        std::fs::write(&path, "[1, 2]").unwrap();
        assert!(matches!(catalog.refresh(), Err(CatalogError::Shape { .. })));
    }

    /// Writes `payload` as the catalog file in a fresh directory and opens
    /// it; returns the open error, checking that it names the file.
    fn open_error(payload: Value) -> CatalogError {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("variant_catalog.json");
        std::fs::write(&path, serde_json::to_string(&payload).unwrap()).unwrap();
        let error = VariantCatalog::open(&path).unwrap_err();
        let text = error.to_string();
        assert!(text.contains(&path.display().to_string()), "{text}");
        error
    }

    /// The message of an [`CatalogError::Invalid`] error for `payload`.
    fn invalid(payload: Value) -> String {
        match open_error(payload) {
            CatalogError::Invalid { message, .. } => message,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn a_catalog_file_without_a_specs_list_is_rejected() {
        for payload in [
            json!({}),
            json!({"schema_version": VARIANT_CATALOG_SCHEMA_VERSION}),
            json!({"specs": null}),
            json!({"specs": {"a": spec("a", "fam", 0.0)}}),
            json!({"specs": "a"}),
            json!([spec("a", "fam", 0.0)]),
            json!(null),
        ] {
            assert!(
                matches!(open_error(payload.clone()), CatalogError::Shape { .. }),
                "{payload}"
            );
        }
        // An empty list is a valid (empty) catalog.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("variant_catalog.json");
        std::fs::write(&path, r#"{"specs": []}"#).unwrap();
        assert!(VariantCatalog::open(&path).unwrap().specs().is_empty());
    }

    #[test]
    fn a_wrong_schema_version_is_rejected_and_an_absent_one_allowed() {
        let message = invalid(json!({"schema_version": "loopx_explore_variant_catalog_v1",
                                     "specs": []}));
        assert!(message.contains("schema_version"), "{message}");
        assert!(
            message.contains("\"loopx_explore_variant_catalog_v1\""),
            "{message}"
        );
        let message = invalid(json!({"schema_version": null, "specs": []}));
        assert!(message.contains("schema_version"), "{message}");

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("variant_catalog.json");
        std::fs::write(
            &path,
            serde_json::to_string(&json!({"specs": [spec("a", "fam", 0.0)]})).unwrap(),
        )
        .unwrap();
        assert_eq!(VariantCatalog::open(&path).unwrap().specs().len(), 1);
    }

    #[test]
    fn a_spec_that_is_not_an_object_is_rejected() {
        let message = invalid(json!({"specs": [spec("a", "fam", 0.0), "b", [1]]}));
        assert!(
            message.contains("specs[1] must be a JSON object, got string \"b\""),
            "{message}"
        );
        assert!(
            message.contains("specs[2] must be a JSON object, got a list"),
            "{message}"
        );
        assert!(!message.contains("specs[0]"), "{message}");
    }

    #[test]
    fn a_missing_blank_or_non_string_spec_id_is_rejected() {
        let message = invalid(json!({"specs": [
            spec("a", "fam", 0.0),
            {"seed_family": "fam"},
            {"spec_id": "  ", "seed_family": "fam"},
            {"spec_id": 7, "seed_family": "fam"},
            {"spec_id": null, "seed_family": "fam"},
        ]}));
        for expected in [
            "specs[1].spec_id is missing",
            "specs[2].spec_id is blank",
            "specs[3].spec_id must be a non-empty string, got number 7",
            "specs[4].spec_id must be a non-empty string, got null",
        ] {
            assert!(message.contains(expected), "{expected:?} not in {message}");
        }
        assert!(!message.contains("specs[0]"), "{message}");
    }

    #[test]
    fn a_duplicated_spec_id_names_both_indices() {
        let message = invalid(json!({"specs": [
            spec("a", "fam", 0.0),
            spec("b", "fam", 0.0),
            spec("a", "other", 1.0),
            spec("a", "fam", 0.0),
        ]}));
        assert!(
            message.contains("specs[2].spec_id \"a\" duplicates specs[0].spec_id"),
            "{message}"
        );
        assert!(
            message.contains("specs[3].spec_id \"a\" duplicates specs[0].spec_id"),
            "{message}"
        );
        assert!(!message.contains("specs[1]"), "{message}");
    }

    #[test]
    fn a_missing_blank_or_non_string_seed_family_is_rejected() {
        let message = invalid(json!({"specs": [
            {"spec_id": "a"},
            {"spec_id": "b", "seed_family": ""},
            {"spec_id": "c", "seed_family": ["fam"]},
            spec("d", "fam", 0.0),
        ]}));
        for expected in [
            "specs[0].seed_family is missing",
            "specs[1].seed_family is blank",
            "specs[2].seed_family must be a non-empty string, got a list",
        ] {
            assert!(message.contains(expected), "{expected:?} not in {message}");
        }
        assert!(!message.contains("specs[3]"), "{message}");
    }

    #[test]
    fn a_non_numeric_priority_is_rejected_and_null_or_absent_allowed() {
        let message = invalid(json!({"specs": [
            {"spec_id": "a", "seed_family": "fam", "priority": "high"},
            {"spec_id": "b", "seed_family": "fam", "priority": true},
            {"spec_id": "c", "seed_family": "fam", "priority": null},
            {"spec_id": "d", "seed_family": "fam"},
            {"spec_id": "e", "seed_family": "fam", "priority": -2.5},
        ]}));
        assert_eq!(
            message,
            "specs[0].priority must be a number or null, got string \"high\"; \
             specs[1].priority must be a number or null, got boolean true"
        );

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("variant_catalog.json");
        std::fs::write(
            &path,
            r#"{"specs": [{"spec_id": "c", "seed_family": "fam", "priority": null},
                          {"spec_id": "d", "seed_family": "fam"},
                          {"spec_id": "e", "seed_family": "fam", "priority": -2.5}]}"#,
        )
        .unwrap();
        assert_eq!(VariantCatalog::open(&path).unwrap().specs().len(), 3);
    }

    #[test]
    fn many_problems_are_capped_and_an_invalid_rewrite_keeps_the_last_good_specs() {
        let specs: Vec<Value> = (0..25)
            .map(|i| json!({"spec_id": format!("s{i}")}))
            .collect();
        let message = invalid(json!({"specs": specs}));
        assert!(message.contains("specs[19].seed_family"), "{message}");
        assert!(!message.contains("specs[20]"), "{message}");
        assert!(message.ends_with("; and 5 more problem(s)"), "{message}");

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("variant_catalog.json");
        std::fs::write(
            &path,
            serde_json::to_string(&json!({"specs": [spec("a", "fam", 0.0)]})).unwrap(),
        )
        .unwrap();
        let mut catalog = VariantCatalog::open(&path).unwrap();
        std::fs::write(
            &path,
            serde_json::to_string(&json!({"specs": [spec("a", "fam", 0.0), {"spec_id": "b"}]}))
                .unwrap(),
        )
        .unwrap();
        let error = catalog.refresh().unwrap_err();
        assert!(matches!(error, CatalogError::Invalid { .. }), "{error:?}");
        assert_eq!(
            error.to_string(),
            format!(
                "variant catalog {} is invalid: specs[1].seed_family is missing",
                path.display()
            )
        );
        assert_eq!(catalog.specs().len(), 1, "the last good specs stay in use");
        std::fs::write(&path, "{}").unwrap();
        assert!(matches!(catalog.refresh(), Err(CatalogError::Shape { .. })));
        assert_eq!(catalog.specs().len(), 1);
    }

    #[test]
    fn a_catalog_that_is_not_json_names_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("variant_catalog.json");
        std::fs::write(&path, "{\"specs\": [\n  {\"spec_id\": \"a\",}\n]}").unwrap();
        let error = VariantCatalog::open(&path).unwrap_err();
        assert!(matches!(error, CatalogError::Parse { .. }), "{error:?}");
        // The arm's mid-run warning shows the error's own message only.
        let shown = format!("{}:2:", path.display());
        assert!(error.to_string().contains(&shown), "{error}");

        std::fs::write(&path, b"{\"specs\": [\n  {\"spec_id\": \"a\xff\"}]}").unwrap();
        let error = VariantCatalog::open(&path).unwrap_err();
        assert!(matches!(error, CatalogError::Parse { .. }), "{error:?}");
        assert!(error.to_string().contains(&shown), "{error}");
    }

    mod props {
        use super::*;
        use crate::hostile_inputs::{
            config, json_value, mutate_bytes, read_temp_file, value_not_of,
        };
        use proptest::prelude::*;

        /// The error and its sources, as `sandloop run` prints them.
        fn chain(error: &CatalogError) -> String {
            let mut text = error.to_string();
            let mut source = std::error::Error::source(error);
            while let Some(cause) = source {
                text.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            text
        }

        fn open_bytes(
            bytes: &[u8],
        ) -> (
            tempfile::TempDir,
            PathBuf,
            Result<VariantCatalog, CatalogError>,
        ) {
            read_temp_file("variant_catalog.json", bytes, |path| {
                VariantCatalog::open(path)
            })
        }

        fn valid_catalog(specs: usize) -> Value {
            let specs: Vec<Value> = (0..specs)
                .map(|i| {
                    json!({"spec_id": format!("s{i}"), "seed_family": "fam",
                                "intent": "x", "ops": [{"op": "append", "text": "t"}],
                                "priority": i})
                })
                .collect();
            json!({"schema_version": VARIANT_CATALOG_SCHEMA_VERSION, "specs": specs})
        }

        proptest! {
            #![proptest_config(config(128))]

            #[test]
            fn prop_catalog_any_bytes_never_panic_and_errors_name_the_file(
                bytes in prop::collection::vec(any::<u8>(), 0..512),
            ) {
                let (_dir, path, result) = open_bytes(&bytes);
                if let Err(error) = result {
                    let shown = path.display().to_string();
                    prop_assert!(chain(&error).contains(&shown), "{}", chain(&error));
                }
            }

            #[test]
            fn prop_catalog_damaged_text_is_refused_with_file_line_and_column(
                bytes in (0usize..4).prop_flat_map(|n| {
                    let text = serde_json::to_vec_pretty(&valid_catalog(n)).unwrap();
                    mutate_bytes(text, false)
                }),
            ) {
                let (_dir, path, result) = open_bytes(&bytes);
                match result {
                    Ok(catalog) => prop_assert!(catalog.specs().len() <= 3),
                    Err(CatalogError::Parse { source, .. }) => {
                        let lines = bytes.split(|b| *b == b'\n').count();
                        prop_assert!(source.line() >= 1 && source.line() <= lines);
                        let error = VariantCatalog::open(&path).unwrap_err();
                        let shown = format!("{}:{}:{}", path.display(), source.line(), source.column());
                        prop_assert!(error.to_string().contains(&shown), "{}", error);
                    }
                    Err(error) => {
                        let shown = path.display().to_string();
                        prop_assert!(chain(&error).contains(&shown), "{}", chain(&error));
                    }
                }
            }

            #[test]
            fn prop_catalog_a_spec_field_of_the_wrong_type_names_spec_and_field(
                count in 1usize..5,
                index in 0usize..5,
                (field, value) in prop_oneof![
                    value_not_of(&["string"]).prop_map(|v| ("spec_id", v)),
                    value_not_of(&["string"]).prop_map(|v| ("seed_family", v)),
                    value_not_of(&["number", "null"]).prop_map(|v| ("priority", v)),
                ],
            ) {
                let index = index % count;
                let mut catalog = valid_catalog(count);
                catalog["specs"][index][field] = value;
                let (_dir, path, result) = open_bytes(&serde_json::to_vec(&catalog).unwrap());
                let error = result.unwrap_err();
                prop_assert!(matches!(error, CatalogError::Invalid { .. }), "{:?}", error);
                let text = error.to_string();
                prop_assert!(text.contains(&path.display().to_string()), "{}", text);
                prop_assert!(text.contains(&format!("specs[{index}].{field} ")), "{}", text);
            }

            #[test]
            fn prop_catalog_any_json_is_read_or_refused_naming_what_is_wrong(
                specs in prop::collection::vec(json_value(), 0..6),
                schema in prop::option::of(json_value()),
            ) {
                let mut catalog = json!({"specs": specs});
                if let Some(schema) = schema {
                    catalog["schema_version"] = schema;
                }
                let (_dir, _path, result) = open_bytes(&serde_json::to_vec(&catalog).unwrap());
                match result {
                    Ok(opened) => prop_assert_eq!(opened.specs().len(), specs.len()),
                    Err(CatalogError::Invalid { message, .. }) => {
                        // Each problem names `specs[i].field` or `schema_version`.
                        prop_assert!(
                            message.starts_with("specs[") || message.starts_with("schema_version "),
                            "{}", message
                        );
                    }
                    Err(other) => prop_assert!(false, "unexpected {:?}", other),
                }
            }
        }
    }
}
