//! Fault names and their parsing.
//!
//! An item names its faults in a `"faults"` array of strings (a variant
//! spec likewise, and `compile_variant` copies them onto the variant).
//! Parsing is strict: anything but an array of known names is an
//! `invalid-item` (or `invalid-spec`) error, so a typo in a test's items
//! fails loudly instead of silently testing nothing.

use std::collections::BTreeSet;
use std::fmt;

use sandloop_guest::{Error, Object, Value};

/// One injected fault. See the crate README for what each one breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// `capture-replay-state` returns an adapter error.
    CaptureFails,
    /// The capture is a non-replayable marker (no binding, no digest).
    CaptureNonReplayable,
    /// The capture (and every restore) is `best-effort`.
    CaptureBestEffort,
    /// The capture (and every restore) is `semantic-equivalent`; reports
    /// carry one passing check.
    CaptureSemantic,
    /// `restore-replay-state` returns an adapter error.
    RestoreFails,
    /// The receipt claims `exact` whatever the captured fidelity.
    RestoreStronger,
    /// The receipt says `non-replayable`.
    RestoreNonReplayable,
    /// The report's fidelity differs from the receipt's.
    ReportDisagrees,
    /// The restored copy differs from the capture, yet the report claims
    /// exact equivalence (observed digest != expected digest).
    DigestMismatch,
    /// The report's expected digest is not the captured one.
    ExpectedDigestWrong,
    /// Receipt and report say `semantic-equivalent` with no checks.
    SemanticWithoutChecks,
    /// The report is equivalent although one of its checks failed.
    EquivalentWithFailedCheck,
    /// The report claims a trusted fidelity with `equivalent: false`.
    Unverified,
    /// `run-replay-suffix` returns an adapter error.
    SuffixFails,
    /// `run-replay-suffix` panics (a trap).
    SuffixTraps,
    /// `finalize-replay-suffix` returns an adapter error.
    FinalizeFails,
    /// The first `release-replay-state` call fails; a retry succeeds.
    ReleaseFailsOnce,
    /// Every `release-replay-state` call fails.
    ReleaseFails,
    /// The replay binding's destructor panics (a trap when the host drops
    /// the handle after a successful release).
    BindingDropTraps,
    /// `export-replay-state` returns none.
    ExportNone,
    /// `restore-replay-state` panics (a trap).
    TrapInRestore,
    /// `import-replay-state` returns an adapter error.
    ImportFails,
    /// The imported lease's projection digest is not the captured one.
    ImportDigestWrong,
    /// `fork-replay-child` returns an adapter error.
    ForkFails,
    /// `fork-replay-child` panics (a trap).
    ForkTraps,
    /// The child's receipt claims `exact` whatever the captured fidelity.
    ForkStronger,
    /// The child lease says `serial-only`.
    ChildSerialOnly,
    /// The child lease says `process-isolated`.
    ChildProcessIsolated,
    /// The child's state really differs from the capture, yet its report
    /// claims equivalence (observed digest != expected digest).
    ChildValidateLies,
    /// `run-replay-child` fills a large heap buffer with garbage and
    /// corrupts the child's state, then returns a normal record.
    ChildScribbles,
    /// `run-replay-child` never returns (the host's deadline stops it).
    ChildLoops,
    /// `run-replay-child` allocates until the memory limit.
    ChildMemoryBomb,
    /// `run-replay-child` returns an adapter error.
    ChildFails,
    /// `run-replay-child` panics (a trap).
    ChildTraps,
    /// `release-replay-child` returns an adapter error.
    ChildReleaseFails,
    /// `assess-replay-child-intent` denies (policy `probe-policy`).
    IntentDenied,
    /// `assess-replay-child-outcome` denies (policy `probe-policy`).
    OutcomeDenied,
    /// `assess-replay-child-intent` returns an adapter error.
    IntentFails,
}

impl Fault {
    /// Every fault with its name, in README order.
    pub const ALL: &[(Fault, &str)] = &[
        (Fault::CaptureFails, "capture_fails"),
        (Fault::CaptureNonReplayable, "capture_non_replayable"),
        (Fault::CaptureBestEffort, "capture_best_effort"),
        (Fault::CaptureSemantic, "capture_semantic"),
        (Fault::RestoreFails, "restore_fails"),
        (Fault::RestoreStronger, "restore_stronger"),
        (Fault::RestoreNonReplayable, "restore_non_replayable"),
        (Fault::ReportDisagrees, "report_disagrees"),
        (Fault::DigestMismatch, "digest_mismatch"),
        (Fault::ExpectedDigestWrong, "expected_digest_wrong"),
        (Fault::SemanticWithoutChecks, "semantic_without_checks"),
        (
            Fault::EquivalentWithFailedCheck,
            "equivalent_with_failed_check",
        ),
        (Fault::Unverified, "unverified"),
        (Fault::SuffixFails, "suffix_fails"),
        (Fault::SuffixTraps, "suffix_traps"),
        (Fault::FinalizeFails, "finalize_fails"),
        (Fault::ReleaseFailsOnce, "release_fails_once"),
        (Fault::ReleaseFails, "release_fails"),
        (Fault::BindingDropTraps, "binding_drop_traps"),
        (Fault::ExportNone, "export_none"),
        (Fault::TrapInRestore, "trap_in_restore"),
        (Fault::ImportFails, "import_fails"),
        (Fault::ImportDigestWrong, "import_digest_wrong"),
        (Fault::ForkFails, "fork_fails"),
        (Fault::ForkTraps, "fork_traps"),
        (Fault::ForkStronger, "fork_stronger"),
        (Fault::ChildSerialOnly, "child_serial_only"),
        (Fault::ChildProcessIsolated, "child_process_isolated"),
        (Fault::ChildValidateLies, "child_validate_lies"),
        (Fault::ChildScribbles, "child_scribbles"),
        (Fault::ChildLoops, "child_loops"),
        (Fault::ChildMemoryBomb, "child_memory_bomb"),
        (Fault::ChildFails, "child_fails"),
        (Fault::ChildTraps, "child_traps"),
        (Fault::ChildReleaseFails, "child_release_fails"),
        (Fault::IntentDenied, "intent_denied"),
        (Fault::OutcomeDenied, "outcome_denied"),
        (Fault::IntentFails, "intent_fails"),
    ];

    /// The fault's name in items (`capture_fails`, ...).
    pub fn name(self) -> &'static str {
        Fault::ALL
            .iter()
            .find(|(fault, _)| *fault == self)
            .map(|(_, name)| *name)
            .unwrap_or("unknown")
    }

    /// The fault called `name`.
    pub fn from_name(name: &str) -> Option<Fault> {
        Fault::ALL
            .iter()
            .find(|(_, known)| *known == name)
            .map(|(fault, _)| *fault)
    }

    /// The declared error this fault injects.
    pub fn error(self, call: &str) -> Error {
        Error::new(
            "injected-fault",
            format!("injected fault `{}` in {call}", self.name()),
        )
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The faults one item names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Faults(BTreeSet<Fault>);

impl Faults {
    /// The `"faults"` field of `object` (an item or a variant spec);
    /// missing or `null` means none. Errors are of kind `error_kind`.
    pub fn parse(object: &Object, error_kind: &str) -> Result<Faults, Error> {
        let invalid = |message: String| Error::new(error_kind, message);
        let list = match object.get("faults") {
            None | Some(Value::Null) => return Ok(Faults::default()),
            Some(Value::Array(list)) => list,
            Some(other) => {
                return Err(invalid(format!(
                    "\"faults\" must be an array of fault names, got {other}"
                )));
            }
        };
        let mut faults = BTreeSet::new();
        for entry in list {
            let name = entry
                .as_str()
                .ok_or_else(|| invalid(format!("fault names are strings, got {entry}")))?;
            let fault = Fault::from_name(name).ok_or_else(|| {
                let known: Vec<&str> = Fault::ALL.iter().map(|(_, name)| *name).collect();
                invalid(format!(
                    "unknown fault {name:?}; known faults: {}",
                    known.join(", ")
                ))
            })?;
            faults.insert(fault);
        }
        Ok(Faults(faults))
    }

    /// Whether `fault` is named.
    pub fn has(&self, fault: Fault) -> bool {
        self.0.contains(&fault)
    }

    /// The fault names, sorted by [`Fault`] order.
    pub fn names(&self) -> Vec<&'static str> {
        self.0.iter().map(|fault| fault.name()).collect()
    }

    /// True when no fault is named.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The faults named by `self` or `other`.
    pub fn union(&self, other: &Faults) -> Faults {
        Faults(self.0.union(&other.0).copied().collect())
    }

    /// `Err(fault.error(call))` when `fault` is named.
    pub fn check(&self, fault: Fault, call: &str) -> Result<(), Error> {
        if self.has(fault) {
            Err(fault.error(call))
        } else {
            Ok(())
        }
    }

    /// Panic (a trap in the component) when `fault` is named.
    pub fn trap(&self, fault: Fault, call: &str) {
        if self.has(fault) {
            panic!("injected fault `{fault}` in {call}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandloop_guest::json;

    fn object(value: Value) -> Object {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn every_name_round_trips() {
        assert_eq!(Fault::ALL.len(), 38);
        for (fault, name) in Fault::ALL {
            assert_eq!(fault.name(), *name);
            assert_eq!(Fault::from_name(name), Some(*fault));
        }
        let mut names: Vec<&str> = Fault::ALL.iter().map(|(_, name)| *name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Fault::ALL.len(), "names are unique");
        assert_eq!(Fault::from_name("Capture_Fails"), None);
    }

    #[test]
    fn parses_lists_and_absence() {
        let faults = Faults::parse(
            &object(json!({"item_id": "a", "faults": ["suffix_fails", "capture_semantic", "suffix_fails"]})),
            "invalid-item",
        )
        .unwrap();
        assert!(faults.has(Fault::SuffixFails));
        assert!(faults.has(Fault::CaptureSemantic));
        assert!(!faults.has(Fault::SuffixTraps));
        assert_eq!(faults.names(), vec!["capture_semantic", "suffix_fails"]);
        for empty in [json!({}), json!({"faults": null}), json!({"faults": []})] {
            assert!(
                Faults::parse(&object(empty), "invalid-item")
                    .unwrap()
                    .is_empty()
            );
        }
    }

    #[test]
    fn rejects_malformed_faults() {
        for bad in [
            json!({"faults": "capture_fails"}),
            json!({"faults": [1]}),
            json!({"faults": ["capture_fails", "no_such_fault"]}),
        ] {
            let err = Faults::parse(&object(bad.clone()), "invalid-spec").unwrap_err();
            assert_eq!(err.kind, "invalid-spec", "{bad}");
        }
        let err = Faults::parse(&object(json!({"faults": ["typo"]})), "invalid-item").unwrap_err();
        assert!(err.message.contains("\"typo\""), "{}", err.message);
        assert!(
            err.message.contains("release_fails_once"),
            "{}",
            err.message
        );
    }

    #[test]
    fn injected_errors_and_traps() {
        let faults = Faults::parse(
            &object(json!({"faults": ["restore_fails", "trap_in_restore"]})),
            "x",
        )
        .unwrap();
        let err = faults
            .check(Fault::RestoreFails, "restore-replay-state")
            .unwrap_err();
        assert_eq!(err.kind, "injected-fault");
        assert_eq!(
            err.message,
            "injected fault `restore_fails` in restore-replay-state"
        );
        assert!(!err.retryable);
        assert!(faults.check(Fault::SuffixFails, "x").is_ok());
        let trapped = std::panic::catch_unwind(|| faults.trap(Fault::TrapInRestore, "restore"));
        assert!(trapped.is_err());
        faults.trap(Fault::SuffixTraps, "run");
    }

    #[test]
    fn child_faults_parse_and_combine() {
        let child_names = [
            "fork_fails",
            "fork_traps",
            "fork_stronger",
            "child_serial_only",
            "child_process_isolated",
            "child_validate_lies",
            "child_scribbles",
            "child_loops",
            "child_memory_bomb",
            "child_fails",
            "child_traps",
            "child_release_fails",
            "intent_denied",
            "outcome_denied",
            "intent_fails",
        ];
        let faults =
            Faults::parse(&object(json!({ "faults": child_names })), "invalid-item").unwrap();
        assert_eq!(faults.names(), child_names, "README order");
        for name in child_names {
            assert!(faults.has(Fault::from_name(name).unwrap()), "{name}");
        }
        assert!(!faults.has(Fault::SuffixFails));
        let err = faults
            .check(Fault::ForkFails, "fork-replay-child")
            .unwrap_err();
        assert_eq!(
            err.message,
            "injected fault `fork_fails` in fork-replay-child"
        );
        let trapped =
            std::panic::catch_unwind(|| faults.trap(Fault::ChildTraps, "run-replay-child"));
        assert!(trapped.is_err());

        // a child's faults are its state entry's plus its task's own
        let from_state = Faults::parse(
            &object(json!({"faults": ["intent_denied", "capture_semantic"]})),
            "invalid-state",
        )
        .unwrap();
        let from_task =
            Faults::parse(&object(json!({"faults": ["child_fails"]})), "invalid-item").unwrap();
        let both = from_state.union(&from_task);
        assert_eq!(
            both.names(),
            ["capture_semantic", "child_fails", "intent_denied"]
        );
        assert_eq!(Faults::default().union(&from_task), from_task);

        // near-miss spellings are refused
        for typo in ["child_loop", "fork-fails", "Intent_Denied", "outcome_deny"] {
            let err =
                Faults::parse(&object(json!({"faults": [typo]})), "invalid-item").unwrap_err();
            assert!(err.message.contains("child_memory_bomb"), "{}", err.message);
        }
    }
}
