//! Replay points with exact fidelity.
//!
//! - `capture`: the point ([`DocPoint`]) keeps a copy of the prepared
//!   [`Doc`] (text and parse) and its [`digest`].
//! - `restore`: clone the captured document into the point's working copy;
//!   the receipt is `exact` with the copy's digest and `prefix_reused`.
//! - `validate`: digest the working copy again and compare it with the
//!   captured digest (one `state-digest` check).
//! - `run_suffix`: run the item on the working copy with the same code as
//!   `execute_episode`; `finalize_suffix` drops the copy.
//! - `export_state` / `import_state`: the relative path and the text as JSON
//!   (schema [`STATE_SCHEMA`]); an import parses the text again and
//!   recomputes the digest, so edited state yields another digest.
//!
//! Capture, restore and validate emit no trace events: a point sits at a
//! fixed trace position, and only the suffix appends to the branch.

use std::cell::RefCell;

use sandloop_guest::{
    CaptureRequest, Context, EquivalenceReport, Error, Fidelity, Item, Record, Replay,
    RestoreReceipt, RestoreRequest, StateLease, Value, json,
};
use sha2::{Digest, Sha256};

use crate::{Doc, MarkdownExplorer, corpus, run_episode};

/// `schema` of exported replay state.
pub const STATE_SCHEMA: &str = "markdown-explorer/replay-state/v1";

/// A replay point: the captured document, its digest, and the working copy
/// of the suffix in progress.
#[derive(Debug)]
pub struct DocPoint {
    captured: Doc,
    digest: String,
    working: RefCell<Option<Doc>>,
}

impl DocPoint {
    fn new(captured: Doc) -> DocPoint {
        DocPoint {
            digest: digest(&captured),
            captured,
            working: RefCell::new(None),
        }
    }

    /// The captured document.
    pub fn captured(&self) -> &Doc {
        &self.captured
    }

    /// The captured document's digest (the lease's projection digest).
    pub fn digest(&self) -> &str {
        &self.digest
    }

    fn not_restored() -> Error {
        Error::new(
            "not-restored",
            "restore-replay-state must run before this call",
        )
    }
}

/// Canonical bytes of a document's state: one JSON array (arrays keep their
/// order whatever serde_json's map ordering) of a version tag, the relative
/// path, family, text and every field of the parse, sets in sorted order.
pub fn canonical_bytes(doc: &Doc) -> Vec<u8> {
    let a = &doc.base;
    let value = json!([
        "markdown-explorer/doc/v1",
        doc.relative_path,
        doc.family,
        doc.text,
        a.bytes,
        a.elements
            .iter()
            .map(|(name, count)| json!([name, count]))
            .collect::<Vec<_>>(),
        a.heading_levels.iter().collect::<Vec<_>>(),
        a.langs.iter().collect::<Vec<_>>(),
        a.max_list_depth,
        a.anomalies.iter().collect::<Vec<_>>(),
    ]);
    // An array of strings and numbers always serialises.
    serde_json::to_vec(&value).unwrap_or_default()
}

/// SHA-256 of [`canonical_bytes`], as 64 lowercase hex characters.
pub fn digest(doc: &Doc) -> String {
    hex::encode(Sha256::digest(canonical_bytes(doc)))
}

/// Rebuild a document from [`Replay::export_state`] bytes (also what a
/// replay child is forked from).
pub(crate) fn parse_state(state: &[u8]) -> Result<Doc, Error> {
    let invalid = |message: String| Error::new("invalid-state", message);
    let value: Value = serde_json::from_slice(state)
        .map_err(|err| invalid(format!("replay state is not JSON: {err}")))?;
    let schema = value.get("schema").and_then(Value::as_str);
    if schema != Some(STATE_SCHEMA) {
        return Err(invalid(format!(
            "replay state schema is {schema:?}, expected {STATE_SCHEMA:?}"
        )));
    }
    let field = |key: &str| {
        value
            .get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| invalid(format!("replay state has no string {key:?}")))
    };
    let relative = corpus::checked_relative(field("relative_path")?)
        .map_err(|err| invalid(err.message))?
        .to_owned();
    Ok(Doc::parse(relative, field("text")?.to_owned()))
}

impl Replay for MarkdownExplorer {
    type Binding = DocPoint;

    fn capture(&self, doc: &Doc, _request: &CaptureRequest) -> Result<StateLease<DocPoint>, Error> {
        let point = DocPoint::new(doc.clone());
        let digest = point.digest.clone();
        Ok(StateLease::exact(point, digest))
    }

    fn restore(
        &self,
        point: &DocPoint,
        _request: &RestoreRequest,
    ) -> Result<RestoreReceipt, Error> {
        // The digest of the restored copy is taken once, by `validate`.
        let working = point.captured.clone();
        let receipt = RestoreReceipt::new(Fidelity::Exact).with_prefix_reused(true);
        *point.working.borrow_mut() = Some(working);
        Ok(receipt)
    }

    fn validate(
        &self,
        point: &DocPoint,
        _receipt: &RestoreReceipt,
    ) -> Result<EquivalenceReport, Error> {
        let working = point.working.borrow();
        let working = working.as_ref().ok_or_else(DocPoint::not_restored)?;
        Ok(EquivalenceReport::exact_digests(
            point.digest.clone(),
            digest(working),
        ))
    }

    fn run_suffix(&self, point: &DocPoint, item: Item, _ctx: &Context) -> Result<Record, Error> {
        let working = point.working.borrow();
        let working = working.as_ref().ok_or_else(DocPoint::not_restored)?;
        run_episode(working, &item)
    }

    fn finalize_suffix(
        &self,
        point: &DocPoint,
        _request: &RestoreRequest,
        _suffix_succeeded: bool,
    ) -> Result<(), Error> {
        point.working.borrow_mut().take();
        Ok(())
    }

    fn release_state(&self, point: &DocPoint) -> Result<(), Error> {
        point.working.borrow_mut().take();
        Ok(())
    }

    fn export_state(&self, point: &DocPoint) -> Result<Option<Vec<u8>>, Error> {
        let state = json!({
            "schema": STATE_SCHEMA,
            "relative_path": point.captured.relative_path,
            "text": point.captured.text,
        });
        Ok(Some(serde_json::to_vec(&state)?))
    }

    fn import_state(
        &self,
        state: Vec<u8>,
        _request: &CaptureRequest,
    ) -> Result<StateLease<DocPoint>, Error> {
        let point = DocPoint::new(parse_state(&state)?);
        let digest = point.digest.clone();
        Ok(StateLease::exact(point, digest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandloop_guest::trace::{self, EventKind};
    use sandloop_guest::{EpisodeGroups, VariantSpec, Variants};

    fn explorer() -> MarkdownExplorer {
        MarkdownExplorer::with_root(concat!(env!("CARGO_MANIFEST_DIR"), "/sample-docs"))
    }

    fn readme() -> Item {
        Item::new("README.md", "readme", "Widget Toolkit")
            .with("payload", json!({"relative_path": "README.md"}))
    }

    fn variant(explorer: &MarkdownExplorer) -> Item {
        let spec = VariantSpec(
            json!({"spec_id": "strip", "key_prefix": "strip", "ops": ["strip_headings"]})
                .as_object()
                .unwrap()
                .clone(),
        );
        explorer.compile_variant(spec, readme()).unwrap()
    }

    fn capture_request() -> CaptureRequest {
        CaptureRequest {
            replay_point_id: "rp-1".into(),
            trace_id: "g-1".into(),
            branch_id: "main".into(),
            after_event_id: Some("e-1".into()),
            next_sequence: 1,
            execution_group_id: "g-1".into(),
        }
    }

    fn restore_request(target: &str) -> RestoreRequest {
        RestoreRequest {
            replay_point_id: "rp-1".into(),
            target_branch_id: target.into(),
            minimum_fidelity: Fidelity::Exact,
        }
    }

    fn prepared(explorer: &MarkdownExplorer) -> Doc {
        explorer
            .prepare(readme(), vec![readme()], &Context::default())
            .unwrap()
            .unwrap()
            .group
    }

    #[test]
    fn capture_restore_validate_is_exact_and_equivalent() {
        let explorer = explorer();
        let doc = prepared(&explorer);
        trace::take_recorded();
        let lease = explorer.capture(&doc, &capture_request()).unwrap();
        assert_eq!(lease.fidelity, Fidelity::Exact);
        let captured = lease.projection_digest.clone().unwrap();
        assert_eq!(captured.len(), 64);
        assert!(captured.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(captured, digest(&doc), "digest is stable");
        let point = lease.binding.unwrap();

        let request = restore_request("README.md");
        let receipt = explorer.restore(&point, &request).unwrap();
        assert_eq!(receipt.check_against(lease.fidelity), Ok(()));
        assert_eq!(receipt.prefix_reused, Some(true));
        assert_eq!(
            receipt.restored_projection_digest, None,
            "the restored copy is digested once, by validate"
        );
        let report = explorer.validate(&point, &receipt).unwrap();
        assert!(report.equivalent);
        assert_eq!(report.expected_digest.as_deref(), Some(&*captured));
        assert_eq!(report.observed_digest.as_deref(), Some(&*captured));
        assert_eq!(report.checks.len(), 1);
        assert_eq!(report.checks[0].check_id, "state-digest");
        assert_eq!(
            report.check_contract(&receipt, Some(&captured), request.minimum_fidelity),
            Ok(true)
        );
        assert!(
            trace::take_recorded().is_empty(),
            "capture, restore and validate leave the trace alone"
        );

        // a changed working copy is detected
        point.working.borrow_mut().as_mut().unwrap().text.push('x');
        let report = explorer.validate(&point, &receipt).unwrap();
        assert!(!report.equivalent);
        assert!(
            report
                .check_contract(&receipt, Some(&captured), Fidelity::Exact)
                .is_err()
        );
    }

    #[test]
    fn suffix_runs_like_execute_episode_and_leaves_the_capture_alone() {
        let explorer = explorer();
        let ctx = Context::default();
        let doc = prepared(&explorer);
        let point = explorer
            .capture(&doc, &capture_request())
            .unwrap()
            .binding
            .unwrap();
        let before = point.digest().to_owned();
        trace::take_recorded();

        let err = explorer.run_suffix(&point, readme(), &ctx).unwrap_err();
        assert_eq!(err.kind, "not-restored");

        // a failing suffix still leaves one trace event
        let mut broken = variant(&explorer);
        broken.set(
            "variant_spec",
            json!({"spec_id": "bad", "ops": [{"op": "truncate", "fraction": 2}]}),
        );
        explorer.restore(&point, &restore_request("bad")).unwrap();
        let err = explorer.run_suffix(&point, broken, &ctx).unwrap_err();
        assert_eq!(err.kind, "invalid-spec");
        let events = trace::take_recorded();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].payload["stage"], "variant_failed");
        explorer
            .finalize_suffix(&point, &restore_request("bad"), false)
            .unwrap();

        for item in [readme(), variant(&explorer)] {
            let request = restore_request(item.item_id());
            explorer.restore(&point, &request).unwrap();
            let replayed = explorer.run_suffix(&point, item.clone(), &ctx).unwrap();
            let events = trace::take_recorded();
            assert_eq!(events.len(), 1, "one trace event per suffix: {events:?}");
            assert_eq!(events[0].kind, EventKind::ActionOutcome);
            explorer.finalize_suffix(&point, &request, true).unwrap();
            assert!(point.working.borrow().is_none(), "finalize drops the copy");

            let direct = explorer.execute_episode(&doc, item, &ctx).unwrap();
            assert_eq!(replayed, direct);
            assert_eq!(trace::take_recorded().len(), 1);
        }
        assert_eq!(point.captured(), &doc);
        assert_eq!(digest(point.captured()), before);
        explorer.release_state(&point).unwrap();
    }

    #[test]
    fn export_import_round_trips_the_digest() {
        let explorer = explorer();
        let doc = prepared(&explorer);
        let point = explorer
            .capture(&doc, &capture_request())
            .unwrap()
            .binding
            .unwrap();
        let state = explorer.export_state(&point).unwrap().unwrap();
        let text = String::from_utf8(state.clone()).unwrap();
        assert!(!text.contains("\"/"), "{text}");

        let imported = explorer
            .import_state(state.clone(), &capture_request())
            .unwrap();
        assert_eq!(imported.fidelity, Fidelity::Exact);
        assert_eq!(imported.projection_digest.as_deref(), Some(point.digest()));
        let imported = imported.binding.unwrap();
        assert_eq!(imported.captured(), &doc);

        // an imported point replays like the original
        let request = restore_request("README.md");
        let receipt = explorer.restore(&imported, &request).unwrap();
        let report = explorer.validate(&imported, &receipt).unwrap();
        assert_eq!(
            report.check_contract(&receipt, Some(point.digest()), Fidelity::Exact),
            Ok(true)
        );

        // edited but well-formed state imports under another digest
        let mut edited: Value = serde_json::from_slice(&state).unwrap();
        edited["text"] = json!(format!("{}\n<div>x</div>\n", doc.text));
        let edited = explorer
            .import_state(serde_json::to_vec(&edited).unwrap(), &capture_request())
            .unwrap();
        assert_ne!(edited.projection_digest.as_deref(), Some(point.digest()));

        for bad in [
            &b"not json"[..],
            br#"{"schema":"other","relative_path":"a.md","text":""}"#,
            br#"{"schema":"markdown-explorer/replay-state/v1","relative_path":"/etc/x.md","text":""}"#,
            br#"{"schema":"markdown-explorer/replay-state/v1","text":""}"#,
        ] {
            let err = explorer.import_state(bad.to_vec(), &capture_request()).unwrap_err();
            assert_eq!(err.kind, "invalid-state", "{}", String::from_utf8_lossy(bad));
        }
    }
}
