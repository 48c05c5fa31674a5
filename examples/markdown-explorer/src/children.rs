//! Isolated replay children and their risk policies.
//!
//! The host forks every task of a replay point into a fresh instance of
//! this component; there:
//!
//! - `fork_child`: parse the state the parent's `export_state` wrote,
//!   exactly like `import_state`, into a [`DocChild`]; the receipt is
//!   `exact` with the document's digest and `prefix_reused: true`, the
//!   lease `thread-safe` (the child shares nothing with its siblings).
//! - `validate_child`: digest the child's document again and compare it
//!   with the digest taken at the fork (one `state-digest` check), like
//!   `validate` does for a restored working copy.
//! - `run_child`: run the task on the child's document with the same code
//!   as `execute_episode` and `run_suffix`.
//!
//! Two policies guard each child ([`ChildRisk`]):
//!
//! - intent, [`EDIT_SIZE_POLICY`] (`edit-size-budget`): a variant's spec
//!   may not ask for more than [`MAX_DOCUMENT_COPIES`] copies of the
//!   document (the product of its `duplicate` ops' `times`) nor inject more
//!   than [`MAX_INJECTED_HTML_BYTES`] bytes of raw HTML (the sum of its
//!   `inject_html` ops' `html`). A spec whose ops cannot be parsed is denied
//!   too (its size cannot be measured). A seed's intent has no ops: allowed.
//! - outcome, [`DOCUMENT_GROWTH_POLICY`] (`document-growth`): the record's
//!   `bytes` may not exceed [`MAX_GROWTH_FACTOR`] times the child's original
//!   document plus [`GROWTH_SLACK_BYTES`]. Within the intent budget only
//!   content-dependent edits (deep `nest_lists` on a list-heavy document)
//!   can grow that much.

use sandloop_guest::{
    ChildLease, ChildRisk, Context, EquivalenceReport, Error, Fidelity, ForkRequest, Item, Object,
    Record, ReplayChildren, RestoreReceipt, RiskAssessment, Value,
};

use crate::ops::Op;
use crate::replay::{digest, parse_state};
use crate::{Doc, MarkdownExplorer, run_episode};

/// Policy id of the intent policy.
pub const EDIT_SIZE_POLICY: &str = "edit-size-budget";
/// Most copies of the document a spec's `duplicate` ops may produce.
pub const MAX_DOCUMENT_COPIES: usize = 3;
/// Most raw HTML bytes a spec's `inject_html` ops may inject in total.
pub const MAX_INJECTED_HTML_BYTES: usize = 1024;

/// Policy id of the outcome policy.
pub const DOCUMENT_GROWTH_POLICY: &str = "document-growth";
/// A child's document may grow to this many times its original bytes...
pub const MAX_GROWTH_FACTOR: usize = 4;
/// ...plus this many bytes (so a tiny or empty document may gain a little).
pub const GROWTH_SLACK_BYTES: usize = 2048;

/// One isolated child: the document forked from the exported state.
#[derive(Debug)]
pub struct DocChild {
    child_id: String,
    doc: Doc,
    digest: String,
}

impl DocChild {
    /// The `child-id` the child was forked with.
    pub fn child_id(&self) -> &str {
        &self.child_id
    }

    /// The child's document.
    pub fn doc(&self) -> &Doc {
        &self.doc
    }

    /// The digest of the document as forked (the point's projection digest).
    pub fn digest(&self) -> &str {
        &self.digest
    }
}

/// How much a spec's ops ask to add, measured from the spec alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EditSize {
    /// Copies of the document after every `duplicate` (1 without one).
    pub copies: usize,
    /// Raw HTML bytes every `inject_html` injects, in total.
    pub injected_html_bytes: usize,
}

impl EditSize {
    /// Measure `ops`.
    pub fn of(ops: &[Op]) -> EditSize {
        let mut size = EditSize {
            copies: 1,
            injected_html_bytes: 0,
        };
        for op in ops {
            match op {
                Op::Duplicate(times) => size.copies = size.copies.saturating_mul(*times),
                Op::InjectHtml(html) => {
                    size.injected_html_bytes = size.injected_html_bytes.saturating_add(html.len())
                }
                Op::Truncate(_) | Op::NestLists(_) | Op::BreakFences(_) | Op::StripHeadings => {}
            }
        }
        size
    }
}

/// The intent policy ([`EDIT_SIZE_POLICY`]) over a child's public intent:
/// a variant's spec (with `ops`), or `{"item_id": ...}` for a seed.
pub fn assess_edit_size(intent: &Object) -> RiskAssessment {
    let ops = match intent.get("ops") {
        None | Some(Value::Null) => {
            return RiskAssessment::allow(EDIT_SIZE_POLICY).with_reason("no edit: a seed task");
        }
        Some(Value::Array(ops)) => ops,
        // compile_variant treats a non-array `ops` as no ops
        Some(_) => return RiskAssessment::allow(EDIT_SIZE_POLICY).with_reason("no ops"),
    };
    let ops = match Op::parse_all(ops) {
        Ok(ops) => ops,
        Err(err) => {
            return RiskAssessment::deny(
                EDIT_SIZE_POLICY,
                format!("the edit size cannot be measured: {}", err.message),
            );
        }
    };
    let size = EditSize::of(&ops);
    if size.copies > MAX_DOCUMENT_COPIES {
        return RiskAssessment::deny(
            EDIT_SIZE_POLICY,
            format!(
                "the spec asks for {} copies of the document; the budget is {MAX_DOCUMENT_COPIES}",
                size.copies
            ),
        );
    }
    if size.injected_html_bytes > MAX_INJECTED_HTML_BYTES {
        return RiskAssessment::deny(
            EDIT_SIZE_POLICY,
            format!(
                "the spec injects {} bytes of raw HTML; the budget is {MAX_INJECTED_HTML_BYTES}",
                size.injected_html_bytes
            ),
        );
    }
    RiskAssessment::allow(EDIT_SIZE_POLICY).with_reason(format!(
        "{} cop{} of the document, {} bytes of injected HTML",
        size.copies,
        if size.copies == 1 { "y" } else { "ies" },
        size.injected_html_bytes
    ))
}

/// The largest outcome a document of `original` bytes may grow to.
pub fn growth_limit(original: usize) -> usize {
    original
        .saturating_mul(MAX_GROWTH_FACTOR)
        .saturating_add(GROWTH_SLACK_BYTES)
}

/// The outcome policy ([`DOCUMENT_GROWTH_POLICY`]): the record's `bytes`
/// against the child's original document of `original` bytes.
pub fn assess_growth(original: usize, outcome: &Record) -> RiskAssessment {
    let Some(bytes) = outcome.get("bytes").and_then(Value::as_u64) else {
        return RiskAssessment::deny(
            DOCUMENT_GROWTH_POLICY,
            "the outcome has no byte count to check",
        );
    };
    let limit = growth_limit(original);
    if bytes > limit as u64 {
        return RiskAssessment::deny(
            DOCUMENT_GROWTH_POLICY,
            format!(
                "the document grew from {original} to {bytes} bytes; the limit is {limit} \
                 ({MAX_GROWTH_FACTOR}x plus {GROWTH_SLACK_BYTES})"
            ),
        );
    }
    RiskAssessment::allow(DOCUMENT_GROWTH_POLICY)
        .with_reason(format!("{original} to {bytes} bytes, limit {limit}"))
}

impl ReplayChildren for MarkdownExplorer {
    type Child = DocChild;

    fn fork_child(
        &self,
        state: Vec<u8>,
        request: &ForkRequest,
    ) -> Result<ChildLease<DocChild>, Error> {
        let doc = parse_state(&state)?;
        let digest = digest(&doc);
        let receipt = RestoreReceipt::new(Fidelity::Exact)
            .with_digest(digest.clone())
            .with_prefix_reused(true);
        let child = DocChild {
            child_id: request.child_id.clone(),
            doc,
            digest,
        };
        Ok(ChildLease::thread_safe(child, receipt))
    }

    fn validate_child(
        &self,
        child: &DocChild,
        _receipt: &RestoreReceipt,
    ) -> Result<EquivalenceReport, Error> {
        Ok(EquivalenceReport::exact_digests(
            child.digest.clone(),
            digest(&child.doc),
        ))
    }

    fn run_child(&self, child: &DocChild, task: Item, _ctx: &Context) -> Result<Record, Error> {
        run_episode(&child.doc, &task)
    }
}

impl ChildRisk for MarkdownExplorer {
    fn assess_intent(&self, _child: &DocChild, intent: &Object) -> Result<RiskAssessment, Error> {
        Ok(assess_edit_size(intent))
    }

    fn assess_outcome(
        &self,
        child: &DocChild,
        _intent: &Object,
        outcome: &Record,
    ) -> Result<RiskAssessment, Error> {
        Ok(assess_growth(child.doc.base.bytes, outcome))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandloop_guest::trace::{self, EventKind};
    use sandloop_guest::{CaptureRequest, EpisodeGroups, Replay, VariantSpec, Variants, json};

    fn explorer() -> MarkdownExplorer {
        MarkdownExplorer::with_root(concat!(env!("CARGO_MANIFEST_DIR"), "/sample-docs"))
    }

    fn object(value: Value) -> Object {
        value.as_object().unwrap().clone()
    }

    fn catalog() -> Vec<VariantSpec> {
        let catalog: Value = serde_json::from_str(include_str!("../catalog.json")).unwrap();
        catalog["specs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|spec| VariantSpec(object(spec.clone())))
            .collect()
    }

    fn seed(relative: &str) -> Item {
        Item::new(relative, crate::corpus::family_of(relative), "title")
            .with("payload", json!({"relative_path": relative}))
    }

    /// The state a parent instance exports for `relative`'s replay point.
    fn exported_state(explorer: &MarkdownExplorer, relative: &str) -> (Vec<u8>, String) {
        let doc = explorer
            .prepare(seed(relative), vec![seed(relative)], &Context::default())
            .unwrap()
            .unwrap()
            .group;
        let request = CaptureRequest {
            replay_point_id: "rp-1".into(),
            trace_id: "g-1".into(),
            branch_id: "main".into(),
            after_event_id: None,
            next_sequence: 1,
            execution_group_id: "g-1".into(),
        };
        let lease = explorer.capture(&doc, &request).unwrap();
        let digest = lease.projection_digest.unwrap();
        let state = explorer
            .export_state(&lease.binding.unwrap())
            .unwrap()
            .unwrap();
        trace::take_recorded();
        (state, digest)
    }

    fn fork_request(child_id: &str) -> ForkRequest {
        ForkRequest {
            replay_point_id: "rp-1".into(),
            child_id: child_id.into(),
            target_branch_id: child_id.into(),
            minimum_fidelity: Fidelity::Exact,
        }
    }

    #[test]
    fn a_child_forks_from_exported_state_and_runs_like_a_suffix() {
        let parent = explorer();
        let (state, captured) = exported_state(&parent, "README.md");
        let spec = catalog()
            .into_iter()
            .find(|spec| spec.spec_id() == "readme-break-fences")
            .unwrap();
        let variant = parent.compile_variant(spec, seed("README.md")).unwrap();

        // a fresh instance: no group, no point, just the bytes
        let child_instance = MarkdownExplorer::with_root("/nonexistent-sandloop-docs");
        for task in [seed("README.md"), variant] {
            let lease = child_instance
                .fork_child(state.clone(), &fork_request(task.item_id()))
                .unwrap();
            assert_eq!(
                lease.concurrency,
                sandloop_guest::ChildConcurrency::ThreadSafe
            );
            assert_eq!(lease.receipt.achieved_fidelity, Fidelity::Exact);
            assert_eq!(lease.receipt.prefix_reused, Some(true));
            assert_eq!(lease.receipt.check_against(Fidelity::Exact), Ok(()));
            let child = lease.child;
            assert_eq!(child.child_id(), task.item_id());
            assert_eq!(child.digest(), captured);
            let report = child_instance
                .validate_child(&child, &lease.receipt)
                .unwrap();
            assert_eq!(
                report.check_contract(&lease.receipt, Some(&captured), Fidelity::Exact),
                Ok(true)
            );
            assert_eq!(report.checks[0].check_id, "state-digest");
            assert!(
                trace::take_recorded().is_empty(),
                "fork and validate trace nothing"
            );

            let record = child_instance
                .run_child(&child, task.clone(), &Context::default())
                .unwrap();
            let events = trace::take_recorded();
            assert_eq!(events.len(), 1, "{events:?}");
            assert_eq!(events[0].kind, EventKind::ActionOutcome);
            // exactly what the group would have reported
            let direct = parent
                .execute_episode(child.doc(), task, &Context::default())
                .unwrap();
            assert_eq!(record, direct);
            trace::take_recorded();
            child_instance.release_child(&child).unwrap();
        }

        // a corrupted child no longer validates
        let mut child = child_instance
            .fork_child(state.clone(), &fork_request("x"))
            .unwrap()
            .child;
        child.doc.text.push_str("\n<div>changed</div>\n");
        child.doc = Doc::parse(child.doc.relative_path.clone(), child.doc.text.clone());
        let receipt = RestoreReceipt::new(Fidelity::Exact).with_digest(captured.clone());
        let report = child_instance.validate_child(&child, &receipt).unwrap();
        assert!(!report.equivalent);
        assert!(
            report
                .check_contract(&receipt, Some(&captured), Fidelity::Exact)
                .is_err()
        );

        // bad state is a declared error, as for import
        let err = child_instance
            .fork_child(b"nope".to_vec(), &fork_request("x"))
            .unwrap_err();
        assert_eq!(err.kind, "invalid-state");
    }

    #[test]
    fn intent_policy_measures_copies_and_injected_html() {
        // a seed's intent has no ops
        let seed = assess_edit_size(&object(json!({"item_id": "README.md"})));
        assert!(seed.is_allowed());
        assert_eq!(seed.policy_id, EDIT_SIZE_POLICY);

        let allowed = [
            json!({"ops": [{"op": "duplicate", "times": 3}]}),
            json!({"ops": [{"op": "duplicate"}, {"op": "truncate", "fraction": 0.1}]}),
            json!({"ops": [{"op": "inject_html", "html": "x".repeat(MAX_INJECTED_HTML_BYTES)}]}),
            json!({"ops": ["inject_html", {"op": "nest_lists", "depth": 32}]}),
            json!({"ops": []}),
        ];
        for intent in allowed {
            let assessment = assess_edit_size(&object(intent.clone()));
            assert!(assessment.is_allowed(), "{intent}: {assessment:?}");
        }
        let denied = [
            (
                json!({"ops": [{"op": "duplicate", "times": 4}]}),
                "4 copies",
            ),
            (
                json!({"ops": [{"op": "duplicate", "times": 2}, {"op": "duplicate", "times": 2}]}),
                "4 copies",
            ),
            (
                json!({"ops": [{"op": "inject_html", "html": "x".repeat(600)}, {"op": "inject_html", "html": "y".repeat(600)}]}),
                "1200 bytes of raw HTML",
            ),
            (json!({"ops": [{"op": "explode"}]}), "cannot be measured"),
        ];
        for (intent, reason) in denied {
            let assessment = assess_edit_size(&object(intent.clone()));
            assert!(assessment.is_denied(), "{intent}");
            assert_eq!(assessment.policy_id, EDIT_SIZE_POLICY);
            let text = assessment.sanitized_reason.unwrap();
            assert!(text.contains(reason), "{intent}: {text}");
        }
    }

    #[test]
    fn the_catalog_has_exactly_one_spec_beyond_the_edit_budget() {
        let denied: Vec<String> = catalog()
            .iter()
            .filter(|spec| assess_edit_size(spec).is_denied())
            .map(|spec| spec.spec_id().to_owned())
            .collect();
        assert_eq!(denied, ["license-duplicate-eight"]);
        // duplicating specs within the budget are allowed
        for allowed in ["changelog-duplicate", "license-duplicate-three"] {
            let spec = catalog()
                .into_iter()
                .find(|spec| spec.spec_id() == allowed)
                .unwrap();
            assert!(assess_edit_size(&spec).is_allowed(), "{allowed}");
        }
    }

    #[test]
    fn outcome_policy_denies_a_document_that_blew_up() {
        assert!(assess_growth(100, &Record::new().with("bytes", 400 + 2048)).is_allowed());
        let denied = assess_growth(100, &Record::new().with("bytes", 400 + 2049));
        assert!(denied.is_denied());
        assert_eq!(denied.policy_id, DOCUMENT_GROWTH_POLICY);
        assert!(
            denied
                .sanitized_reason
                .unwrap()
                .contains("from 100 to 2449")
        );
        assert!(assess_growth(0, &Record::new().with("bytes", 2048)).is_allowed());
        assert!(
            assess_growth(10, &Record::new()).is_denied(),
            "no byte count"
        );

        // a real blow-up: a long flat list nested 32 levels deep
        let parent = explorer();
        let text: String = (0..400).map(|i| format!("- {i}\n")).collect();
        let doc = Doc::parse("docs/list.md".into(), text);
        let state = serde_json::to_vec(&json!({
            "schema": crate::replay::STATE_SCHEMA,
            "relative_path": doc.relative_path,
            "text": doc.text,
        }))
        .unwrap();
        let child = parent
            .fork_child(state, &fork_request("docs/list.md~deep"))
            .unwrap()
            .child;
        let spec = json!({"spec_id": "deep", "key_prefix": "deep:", "ops": [{"op": "nest_lists", "depth": 32}]});
        let intent = object(spec.clone());
        assert!(parent.assess_intent(&child, &intent).unwrap().is_allowed());
        let task = Item::new("docs/list.md~deep", "docs", "list")
            .with("is_variant", true)
            .with("variant_spec", spec);
        let outcome = parent.run_child(&child, task, &Context::default()).unwrap();
        let verdict = parent.assess_outcome(&child, &intent, &outcome).unwrap();
        assert!(verdict.is_denied(), "{verdict:?} for {}", outcome["bytes"]);
        trace::take_recorded();
    }

    #[test]
    fn every_allowed_catalog_spec_stays_within_the_growth_limit_on_the_samples() {
        let parent = explorer();
        let specs = catalog();
        for relative in [
            "README.md",
            "CHANGELOG.md",
            "CONTRIBUTING.md",
            "docs/guide.md",
        ] {
            let (state, _) = exported_state(&parent, relative);
            for spec in specs
                .iter()
                .filter(|spec| assess_edit_size(spec).is_allowed())
            {
                let task = parent
                    .compile_variant(spec.clone(), seed(relative))
                    .unwrap();
                let child = parent
                    .fork_child(state.clone(), &fork_request(task.item_id()))
                    .unwrap()
                    .child;
                let intent = task.variant_spec().unwrap().into_inner();
                assert!(parent.assess_intent(&child, &intent).unwrap().is_allowed());
                let outcome = parent.run_child(&child, task, &Context::default()).unwrap();
                let verdict = parent.assess_outcome(&child, &intent, &outcome).unwrap();
                assert!(
                    verdict.is_allowed(),
                    "{relative} {}: {verdict:?}",
                    spec.spec_id()
                );
            }
        }
        trace::take_recorded();
    }
}
