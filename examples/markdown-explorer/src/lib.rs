//! markdown-explorer: a full exploration adapter over a directory of
//! markdown documents (world `isolated`).
//!
//! - `list_seed_items(arm, epoch)`: the `*.md` files under the read-only
//!   directory the host grants at `/docs` (`--dir HOST::/docs:ro`), walked
//!   recursively and sorted by relative path; epoch `e` gets files
//!   `[(e-1)*P, e*P)` with page size `P` = 64 or `MARKDOWN_PAGE_SIZE` when the
//!   host grants that variable (`--env MARKDOWN_PAGE_SIZE`). An empty page
//!   ends the run.
//! - `prepare` (the shared prefix): read the document and parse it once with
//!   pulldown-cmark; the group keeps the text and its statistics.
//! - `execute_episode`: the seed reports the base document; a variant
//!   applies its spec's `ops` (see [`ops`]) to the text, re-parses, and
//!   reports keys under the spec's `key_prefix` plus what changed
//!   (`delta:*`).
//! - `compile_variant(spec, seed)`: `{seed_item_id}~{spec_id}`.
//! - `execute` (no group): the same, reading the document per item.
//! - replay points (see [`replay`]): a capture keeps a copy of the prepared
//!   document and its digest; every suffix runs, exactly like
//!   `execute_episode`, on a fresh working copy restored from it (exact
//!   fidelity). The state exports as JSON and imports in a fresh instance.
//! - isolated children (see [`children`]): a child forks from the exported
//!   state in a fresh instance and runs one task like a suffix; two risk
//!   policies guard it: `edit-size-budget` over the variant spec before the
//!   run, `document-growth` over the record after it.
//!
//! Items and trace payloads carry relative paths only, never absolute ones.

use std::cell::RefCell;
use std::path::PathBuf;

use sandloop_guest::trace::{self, EventKind};
use sandloop_guest::{
    Context, Episode, EpisodeGroups, Error, Item, Object, Prepared, Record, Seeds, Value,
    VariantSpec, Variants, json, log,
};

pub mod analysis;
pub mod children;
pub mod corpus;
pub mod ops;
pub mod replay;

use analysis::Analysis;
use corpus::DocFile;
use ops::Op;

/// Where the host mounts the documents inside the sandbox.
pub const DOCS_ROOT: &str = "/docs";
/// Seeds per epoch unless `MARKDOWN_PAGE_SIZE` says otherwise.
pub const DEFAULT_PAGE_SIZE: usize = 64;
/// Environment variable overriding the page size.
pub const PAGE_SIZE_ENV: &str = "MARKDOWN_PAGE_SIZE";

/// The adapter: the corpus root and a per-instance cache of its listing.
pub struct MarkdownExplorer {
    root: PathBuf,
    listing: RefCell<Option<Vec<DocFile>>>,
}

impl Default for MarkdownExplorer {
    fn default() -> Self {
        MarkdownExplorer::with_root(DOCS_ROOT)
    }
}

/// The state of one prepared document (the episode group, and the state a
/// replay point captures).
#[derive(Clone, Debug, PartialEq)]
pub struct Doc {
    /// Relative path inside the corpus.
    pub relative_path: String,
    /// Family of the seed.
    pub family: String,
    /// Document text.
    pub text: String,
    /// The one parse of the base document.
    pub base: Analysis,
}

impl MarkdownExplorer {
    /// An explorer over another root (tests run natively on `sample-docs`).
    pub fn with_root(root: impl Into<PathBuf>) -> Self {
        MarkdownExplorer {
            root: root.into(),
            listing: RefCell::new(None),
        }
    }

    fn listing(&self) -> Result<Vec<DocFile>, Error> {
        if let Some(files) = self.listing.borrow().as_ref() {
            return Ok(files.clone());
        }
        let files = corpus::walk(&self.root).map_err(|err| {
            if err.kind == "docs-unavailable" {
                Error::new(
                    "docs-unavailable",
                    format!(
                        "{} (grant the documents with --dir HOST::{DOCS_ROOT}:ro)",
                        err.message
                    ),
                )
            } else {
                err
            }
        })?;
        *self.listing.borrow_mut() = Some(files.clone());
        Ok(files)
    }

    fn read(&self, relative: &str) -> Result<String, Error> {
        let relative = corpus::checked_relative(relative)?;
        let bytes = std::fs::read(self.root.join(relative)).map_err(|err| {
            Error::new("read-failed", format!("cannot read {relative}: {err}"))
                .retryable(matches!(err.kind(), std::io::ErrorKind::Interrupted))
        })?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    fn load(&self, item: &Item) -> Result<Doc, Error> {
        let relative = relative_path_of(item)?;
        let text = self.read(&relative)?;
        Ok(Doc::parse(relative, text))
    }
}

impl Doc {
    /// Parse `text` once; the family follows from the relative path.
    pub fn parse(relative_path: String, text: String) -> Doc {
        Doc {
            family: corpus::family_of(&relative_path).to_owned(),
            base: Analysis::of(&text),
            relative_path,
            text,
        }
    }
}

/// The document an item refers to: `payload.relative_path`, else the
/// seed's id for a variant, else the item id.
fn relative_path_of(item: &Item) -> Result<String, Error> {
    let from_payload = item
        .payload()
        .and_then(|payload| payload.get("relative_path"))
        .and_then(Value::as_str);
    let relative = match from_payload {
        Some(path) => path,
        None if item.is_variant() => item.seed_item_id().unwrap_or(""),
        None => item.item_id(),
    };
    Ok(corpus::checked_relative(relative)?.to_owned())
}

/// Page size from the environment (only visible when the host grants it).
fn page_size() -> Result<usize, Error> {
    match std::env::var(PAGE_SIZE_ENV) {
        Err(_) => Ok(DEFAULT_PAGE_SIZE),
        Ok(raw) => match raw.trim().parse::<usize>() {
            Ok(size) if size > 0 => Ok(size),
            _ => Err(Error::new(
                "invalid-config",
                format!("{PAGE_SIZE_ENV} must be a positive integer, got {raw:?}"),
            )),
        },
    }
}

/// Join a spec's `key_prefix` and a key.
fn prefixed(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else if prefix.ends_with([':', '/', '.']) {
        format!("{prefix}{key}")
    } else {
        format!("{prefix}:{key}")
    }
}

fn emit(kind: EventKind, payload: Value) {
    if let Err(reason) = trace::emit(kind, payload) {
        log::warn!("trace event refused: {reason}");
    }
}

/// The record of a base document (prefix, seed episode, plain execute).
fn base_record(doc: &Doc, episode: &str) -> Record {
    let mut record = Record::with_keys(doc.base.keys());
    for (flag, weight) in doc.base.flags() {
        record.flag(flag, weight);
    }
    record
        .set("episode", episode)
        .set("bytes", doc.base.bytes)
        .set("elements", doc.base.elements_json())
        .set(
            "anomalies",
            doc.base.anomalies.iter().copied().collect::<Vec<_>>(),
        );
    record
}

/// Run `item` as a suffix on a prepared document: the seed reports the base
/// document, a variant its mutation. Shared by `execute_episode` (on the
/// group) and `run_suffix` (on a replay point's working copy); every call,
/// failed or not, emits one `action_outcome` trace event.
fn run_episode(doc: &Doc, item: &Item) -> Result<Record, Error> {
    if item.is_variant() {
        // variant_record emits its event last, so only on success
        return variant_record(doc, item).inspect_err(|err| {
            emit(
                EventKind::ActionOutcome,
                json!({"stage": "variant_failed", "family": doc.family, "error_kind": err.kind}),
            )
        });
    }
    let record = base_record(doc, "seed");
    emit(
        EventKind::ActionOutcome,
        json!({
            "stage": "seed_executed",
            "family": doc.family,
            "bytes": doc.base.bytes,
            "anomalies": doc.base.anomalies.iter().copied().collect::<Vec<_>>(),
        }),
    );
    Ok(record)
}

/// Apply a variant item's spec to `doc` and report the mutated document.
fn variant_record(doc: &Doc, item: &Item) -> Result<Record, Error> {
    let spec = item
        .variant_spec()
        .ok_or_else(|| Error::invalid_item("variant item has no variant_spec object"))?;
    let ops = Op::parse_all(spec.ops())?;
    let text = ops::apply_all(&ops, &doc.text)?;
    let analysis = Analysis::of(&text);

    let prefix = match spec.key_prefix() {
        "" => format!("variant:{}", spec.spec_id()),
        prefix => prefix.to_owned(),
    };
    let deltas = analysis.delta_keys(&doc.base);
    let mut record = Record::new();
    record.observe_all(analysis.keys().iter().map(|key| prefixed(&prefix, key)));
    record.observe_all(deltas.iter().map(|key| prefixed(&prefix, key)));
    for (flag, weight) in analysis.flags() {
        record.flag(flag, weight);
    }
    let new_anomalies: Vec<&str> = analysis
        .anomalies
        .difference(&doc.base.anomalies)
        .copied()
        .collect();
    for anomaly in &new_anomalies {
        record.flag(format!("new_anomaly:{anomaly}"), 1.5);
    }
    let op_names: Vec<&str> = ops.iter().map(Op::name).collect();
    record
        .set("episode", "variant")
        .set("bytes", analysis.bytes)
        .set("elements", analysis.elements_json())
        .set(
            "anomalies",
            analysis.anomalies.iter().copied().collect::<Vec<_>>(),
        )
        .set(
            "variant",
            json!({
                "spec_id": spec.spec_id(),
                "ops": op_names,
                "bytes_before": doc.base.bytes,
                "bytes_after": analysis.bytes,
                "delta": deltas,
            }),
        );
    emit(
        EventKind::ActionOutcome,
        json!({
            "stage": "variant_executed",
            "family": doc.family,
            "spec_id": spec.spec_id(),
            "ops": op_names,
            "new_anomalies": new_anomalies,
            "bytes_after": analysis.bytes,
        }),
    );
    Ok(record)
}

impl Seeds for MarkdownExplorer {
    fn list_seed_items(&self, _arm: &str, epoch: u32) -> Result<Vec<Item>, Error> {
        if epoch == 0 {
            return Err(Error::new("invalid-epoch", "epochs are 1-based"));
        }
        let size = page_size()?;
        let files = self.listing()?;
        let start = (epoch as usize - 1).saturating_mul(size);
        let page: &[DocFile] = files.get(start..).unwrap_or(&[]);
        let page = &page[..page.len().min(size)];
        let mut items = Vec::with_capacity(page.len());
        for file in page {
            let title = match self.read(&file.relative_path) {
                Ok(text) => corpus::title_of(&text),
                Err(_) => String::new(), // prepare reports the read error
            };
            let text = if title.is_empty() {
                file.relative_path.clone()
            } else {
                title
            };
            let mut payload = Object::new();
            payload.insert("relative_path".into(), json!(file.relative_path));
            payload.insert("bytes".into(), json!(file.bytes));
            items.push(
                Item::new(
                    file.relative_path.clone(),
                    corpus::family_of(&file.relative_path),
                    text,
                )
                .with("payload", payload),
            );
        }
        emit(
            EventKind::Lifecycle,
            json!({
                "stage": "seeds_listed",
                "epoch": epoch,
                "count": items.len(),
                "total": files.len(),
                "page_size": size,
            }),
        );
        Ok(items)
    }
}

impl Variants for MarkdownExplorer {
    fn compile_variant(&self, spec: VariantSpec, seed: Item) -> Result<Item, Error> {
        if spec.spec_id().is_empty() {
            return Err(Error::invalid_spec("spec has no spec_id"));
        }
        // Reject bad ops now, before the variant is scheduled.
        Op::parse_all(spec.ops())?;
        let seed_id = seed.item_id();
        if seed_id.is_empty() {
            return Err(Error::invalid_item("seed has no item_id"));
        }
        let family = match seed.family() {
            "" => spec.seed_family().to_owned(),
            family => family.to_owned(),
        };
        let mut item = Item::new(format!("{seed_id}~{}", spec.spec_id()), family, seed.text())
            .with("is_variant", true)
            .with("seed_item_id", seed_id);
        if let Some(payload) = seed.payload() {
            item.set("payload", payload.clone());
        }
        item.set("variant_spec", spec);
        Ok(item)
    }
}

impl EpisodeGroups for MarkdownExplorer {
    type Group = Doc;

    fn prepare(
        &self,
        seed: Item,
        items: Vec<Item>,
        _ctx: &Context,
    ) -> Result<Option<Prepared<Doc>>, Error> {
        let doc = self.load(&seed)?;
        let record = base_record(&doc, "shared_prefix");
        emit(
            EventKind::Lifecycle,
            json!({
                "stage": "prepared",
                "family": doc.family,
                "bytes": doc.base.bytes,
                "elements": doc.base.elements_json(),
                "anomalies": doc.base.anomalies.iter().copied().collect::<Vec<_>>(),
                "episodes": items.len(),
            }),
        );
        Ok(Some(Prepared::new(doc, record)))
    }

    fn execute_episode(&self, doc: &Doc, item: Item, _ctx: &Context) -> Result<Record, Error> {
        run_episode(doc, &item)
    }

    fn release(&self, doc: Doc, _ctx: &Context) -> Result<(), Error> {
        emit(
            EventKind::Lifecycle,
            json!({"stage": "released", "family": doc.family}),
        );
        Ok(())
    }
}

impl Episode for MarkdownExplorer {
    fn execute(&self, item: Item, _ctx: &Context) -> Result<Record, Error> {
        let doc = self.load(&item)?;
        if item.is_variant() {
            variant_record(&doc, &item)
        } else {
            Ok(base_record(&doc, "standalone"))
        }
    }
}

sandloop_guest::export_adapter!(MarkdownExplorer, world = isolated);

#[cfg(test)]
mod tests {
    use super::*;

    fn explorer() -> MarkdownExplorer {
        MarkdownExplorer::with_root(concat!(env!("CARGO_MANIFEST_DIR"), "/sample-docs"))
    }

    fn catalog() -> Vec<VariantSpec> {
        let text = include_str!("../catalog.json");
        let catalog: Value = serde_json::from_str(text).unwrap();
        assert_eq!(
            catalog["schema_version"],
            "loopx_explore_variant_catalog_v0"
        );
        catalog["specs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|spec| VariantSpec(spec.as_object().unwrap().clone()))
            .collect()
    }

    #[test]
    fn seeds_are_paged_relative_and_sorted() {
        let explorer = explorer();
        let seeds = explorer.list_seed_items("main", 1).unwrap();
        let ids: Vec<_> = seeds.iter().map(Item::item_id).collect();
        assert_eq!(
            ids,
            vec![
                "CHANGELOG.md",
                "CONTRIBUTING.md",
                "README.md",
                "docs/guide.md"
            ]
        );
        let families: Vec<_> = seeds.iter().map(Item::family).collect();
        assert_eq!(
            families,
            vec!["changelog", "contributing", "readme", "docs"]
        );
        assert_eq!(seeds[2].text(), "Widget Toolkit");
        let payload = seeds[3].payload().unwrap();
        assert_eq!(payload["relative_path"], "docs/guide.md");
        assert!(payload["bytes"].as_u64().unwrap() > 0);
        for seed in &seeds {
            assert!(!seed.to_json().contains("\"/"), "{}", seed.to_json());
        }
        assert!(explorer.list_seed_items("main", 2).unwrap().is_empty());
        assert_eq!(
            explorer.list_seed_items("main", 0).unwrap_err().kind,
            "invalid-epoch"
        );
        let events = trace::take_recorded();
        assert!(
            events
                .iter()
                .all(|e| !e.payload.to_string().contains("\"/"))
        );
    }

    #[test]
    fn missing_docs_dir_is_a_declared_error() {
        let err = MarkdownExplorer::with_root("/nonexistent-sandloop-docs")
            .list_seed_items("main", 1)
            .unwrap_err();
        assert_eq!(err.kind, "docs-unavailable");
        assert!(!err.message.contains("nonexistent"), "{}", err.message);
    }

    #[test]
    fn catalog_covers_every_family_and_compiles() {
        let explorer = explorer();
        let specs = catalog();
        for family in ["readme", "changelog", "docs", "license", "contributing"] {
            let count = specs.iter().filter(|s| s.seed_family() == family).count();
            assert!((3..=4).contains(&count), "{family}: {count} specs");
        }
        let mut ids: Vec<_> = specs.iter().map(VariantSpec::spec_id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), specs.len(), "spec ids are unique");
        let seed = Item::new("README.md", "readme", "Widget Toolkit")
            .with("payload", json!({"relative_path": "README.md", "bytes": 1}));
        for spec in specs {
            assert!(!spec.key_prefix().is_empty());
            let variant = explorer
                .compile_variant(spec.clone(), seed.clone())
                .unwrap();
            assert_eq!(variant.item_id(), format!("README.md~{}", spec.spec_id()));
            assert!(variant.is_variant());
        }
    }

    #[test]
    fn group_prefix_seed_and_variants() {
        let explorer = explorer();
        let ctx = Context::default();
        let seeds = explorer.list_seed_items("main", 1).unwrap();
        let readme = seeds
            .iter()
            .find(|s| s.family() == "readme")
            .unwrap()
            .clone();
        let variants: Vec<Item> = catalog()
            .into_iter()
            .filter(|spec| spec.seed_family() == "readme")
            .map(|spec| explorer.compile_variant(spec, readme.clone()).unwrap())
            .collect();
        let mut items = vec![readme.clone()];
        items.extend(variants.iter().cloned());
        let prepared = explorer
            .prepare(readme.clone(), items.clone(), &ctx)
            .unwrap()
            .unwrap();
        let prefix_keys = prepared.prefix_record.observation_keys();
        for key in [
            "element:heading",
            "element:code_block",
            "element:table",
            "element:link",
            "lang:rust",
            "lang:sh",
        ] {
            assert!(prefix_keys.contains(&key), "missing {key}: {prefix_keys:?}");
        }
        let seed_record = explorer
            .execute_episode(&prepared.group, readme.clone(), &ctx)
            .unwrap();
        assert_eq!(seed_record.observation_keys(), prefix_keys);
        let mut all_keys = Vec::new();
        for variant in &variants {
            let record = explorer
                .execute_episode(&prepared.group, variant.clone(), &ctx)
                .unwrap();
            let prefix = variant.variant_spec().unwrap().key_prefix().to_owned();
            assert!(
                record
                    .observation_keys()
                    .iter()
                    .all(|k| k.starts_with(&prefix)),
                "{:?}",
                record.observation_keys()
            );
            all_keys.extend(record.observation_keys().into_iter().map(str::to_owned));
        }
        assert!(
            all_keys
                .iter()
                .any(|k| k.ends_with("delta:new_anomaly:unclosed_fence")),
            "{all_keys:?}"
        );
        assert!(
            all_keys.iter().any(|k| k.ends_with("delta:lost_heading")),
            "{all_keys:?}"
        );
        explorer.release(prepared.group, &ctx).unwrap();
        for event in trace::take_recorded() {
            let text = event.payload.to_string();
            assert!(
                !text.contains("\"/") && !text.contains("\"path\""),
                "{text}"
            );
        }
    }

    #[test]
    fn sample_docs_show_anomalies() {
        let explorer = explorer();
        let ctx = Context::default();
        let guide = explorer
            .execute(Item::new("docs/guide.md", "docs", "Guide"), &ctx)
            .unwrap();
        assert!(guide.observation_keys().contains(&"anomaly:unclosed_fence"));
        let changelog = explorer
            .execute(Item::new("CHANGELOG.md", "changelog", "Changelog"), &ctx)
            .unwrap();
        let keys = changelog.observation_keys();
        assert!(keys.contains(&"anomaly:heading_jump"), "{keys:?}");
        assert!(keys.contains(&"anomaly:empty_link"), "{keys:?}");
        let contributing = explorer
            .execute(Item::new("CONTRIBUTING.md", "contributing", "C"), &ctx)
            .unwrap();
        assert!(
            contributing
                .observation_keys()
                .contains(&"anomaly:raw_html")
        );
        assert_eq!(contributing.weighted_flags().unwrap()["raw_html"], 2.0);
    }

    #[test]
    fn escaping_paths_are_rejected() {
        let explorer = explorer();
        for bad in ["../Cargo.toml", "/etc/passwd"] {
            let err = explorer
                .execute(Item::new(bad, "docs", "x"), &Context::default())
                .unwrap_err();
            assert_eq!(err.kind, "invalid-item");
        }
        let err = explorer
            .execute(Item::new("nope.md", "docs", "x"), &Context::default())
            .unwrap_err();
        assert_eq!(err.kind, "read-failed");
    }
}
