//! ledger-import: an example sandloop adapter for counterfactual fixes.
//!
//! Each seed is a small CSV ledger (`data/`); preparing its episode group
//! parses it once (the shared prefix, captured as an exact replay point),
//! and the suffix imports it, checking `header-valid`, `dates-valid`,
//! `rows-kept`, `amounts-parse` and `totals-balance` in that order, with
//! one `validation` trace event each. The default importer does not read
//! `1,250.00`, so the run's `2024-q2` import fails at `amounts-parse`.
//!
//! `sandloop counterfactual` then asks whether a change would have fixed
//! it: each candidate runs as an isolated child of the point before the
//! failure ([`Counterfactual::run_counterfactual`]) with its
//! `public_change_set` applied (`amount_format`, `on_bad_amount`), and
//! reports every target's outcome. A candidate whose `target_branch_id`
//! starts with `rebuild/` asks for the prefix to be rebuilt from the
//! source text instead of restored from the captured rows — as a change
//! to the parser itself would need; a rebuilt prefix is not compared with
//! the captured one, so its restore is `best_effort` and the host only
//! observes what it reports.

use std::cell::RefCell;

use sandloop_guest::trace::{EventKind, emit};
use sandloop_guest::{
    CaptureRequest, ChildLease, ChildRisk, Context, Counterfactual, CounterfactualRequest, Episode,
    EpisodeGroups, EquivalenceReport, Error, Fidelity, ForkRequest, Item, Object, Prepared, Record,
    Replay, ReplayChildren, RestoreReceipt, RestoreRequest, RiskAssessment, Seeds, StateLease,
    ValidationOutcome, VariantSpec, Variants, json,
};

pub mod ledger;

use ledger::{Ledger, Settings, import};

/// The seeds: one ledger per quarter.
pub const DATASETS: &[(&str, &str)] = &[
    ("2024-q1", include_str!("../data/2024-q1.csv")),
    ("2024-q2", include_str!("../data/2024-q2.csv")),
    ("2024-q3", include_str!("../data/2024-q3.csv")),
];

/// The risk policy's id.
pub const CHANGE_SCOPE_POLICY: &str = "change-scope";

/// A change set may touch at most this many settings.
pub const MAX_CHANGES: usize = 2;

/// Branch prefix of a candidate that rebuilds its prefix from the source.
pub const REBUILD_PREFIX: &str = "rebuild/";

/// The adapter.
#[derive(Default)]
pub struct LedgerImport;

/// Import `ledger` as the run does (default settings), emitting one
/// `validation` event per target up to and including the first failure;
/// a failure fails the item.
pub fn run_import(ledger: &Ledger, item: &Item) -> Result<Record, Error> {
    let result = import(ledger, Settings::default());
    for outcome in &result.outcomes {
        let _ = emit(
            EventKind::Validation,
            json!({
                "validation_id": outcome.validation_id,
                "passed": outcome.passed,
                "summary": outcome.public_summary,
            }),
        );
        if !outcome.passed {
            return Err(Error::new(
                "import-failed",
                format!(
                    "{} failed: {}",
                    outcome.validation_id,
                    outcome.public_summary.as_deref().unwrap_or("")
                ),
            ));
        }
    }
    let mut record = Record::with_keys(
        ledger
            .rows
            .iter()
            .map(|row| format!("account:{}", row.account)),
    );
    record
        .set("ledger", item.item_id())
        .set("imported_rows", result.imported_rows as u64)
        .set("total_cents", result.total_cents);
    Ok(record)
}

impl Seeds for LedgerImport {
    fn list_seed_items(&self, _arm: &str, epoch: u32) -> Result<Vec<Item>, Error> {
        if epoch != 1 {
            return Ok(Vec::new());
        }
        DATASETS
            .iter()
            .map(|(name, text)| {
                Item::from_json(
                    &json!({"item_id": name, "family": "ledger", "text": text}).to_string(),
                )
            })
            .collect()
    }
}

impl Variants for LedgerImport {
    fn compile_variant(&self, _spec: VariantSpec, _seed: Item) -> Result<Item, Error> {
        Err(Error::unsupported("ledger-import has no variants"))
    }
}

impl Episode for LedgerImport {
    fn execute(&self, item: Item, _ctx: &Context) -> Result<Record, Error> {
        run_import(&Ledger::parse(item.text())?, &item)
    }
}

impl EpisodeGroups for LedgerImport {
    type Group = Ledger;

    fn prepare(
        &self,
        seed: Item,
        _items: Vec<Item>,
        _ctx: &Context,
    ) -> Result<Option<Prepared<Ledger>>, Error> {
        let ledger = Ledger::parse(seed.text())?;
        let _ = emit(
            EventKind::Lifecycle,
            json!({"stage": "parsed", "rows": ledger.rows.len()}),
        );
        let mut record = Record::with_keys([format!("ledger:{}", seed.item_id())]);
        record.set("rows", ledger.rows.len() as u64);
        Ok(Some(Prepared::new(ledger, record)))
    }

    fn execute_episode(
        &self,
        ledger: &Ledger,
        item: Item,
        _ctx: &Context,
    ) -> Result<Record, Error> {
        run_import(ledger, &item)
    }
}

/// A restored ledger: the working copy a suffix or child runs on, and
/// whether it was rebuilt from the source instead of restored.
pub struct Restored {
    ledger: Ledger,
    rebuilt: bool,
}

/// Restore `captured` for a suffix or child on `target_branch_id`: a copy
/// of the captured rows (exact, the prefix reused), or, on a
/// [`REBUILD_PREFIX`] branch, the rows parsed again from the source
/// (best effort, the prefix rebuilt).
pub fn restore_ledger(
    captured: &Ledger,
    target_branch_id: &str,
) -> Result<(Restored, RestoreReceipt), Error> {
    if target_branch_id.starts_with(REBUILD_PREFIX) {
        let ledger = Ledger::parse(&captured.source)?;
        let receipt = RestoreReceipt::new(Fidelity::BestEffort).with_prefix_reused(false);
        return Ok((
            Restored {
                ledger,
                rebuilt: true,
            },
            receipt,
        ));
    }
    let receipt = RestoreReceipt::new(Fidelity::Exact)
        .with_digest(captured.digest())
        .with_prefix_reused(true);
    Ok((
        Restored {
            ledger: captured.clone(),
            rebuilt: false,
        },
        receipt,
    ))
}

/// The equivalence report of `restored` against the point's
/// `captured_digest`: the two digests for a restored copy; for a rebuilt
/// one, best effort and unverified (it is not compared).
pub fn equivalence(captured_digest: &str, restored: &Restored) -> EquivalenceReport {
    if restored.rebuilt {
        let mut report = EquivalenceReport::new(Fidelity::BestEffort, false)
            .with_reason("rebuilt from the source text; not compared with the captured rows");
        report.expected_digest = Some(captured_digest.to_string());
        return report;
    }
    EquivalenceReport::exact_digests(captured_digest, restored.ledger.digest())
}

/// A replay point: the captured ledger and the working copy of a suffix.
pub struct LedgerPoint {
    captured: Ledger,
    digest: String,
    working: RefCell<Option<Restored>>,
}

impl LedgerPoint {
    fn new(captured: Ledger) -> LedgerPoint {
        LedgerPoint {
            digest: captured.digest(),
            captured,
            working: RefCell::new(None),
        }
    }

    fn working(&self) -> Result<std::cell::Ref<'_, Restored>, Error> {
        std::cell::Ref::filter_map(self.working.borrow(), Option::as_ref)
            .map_err(|_| Error::new("not-restored", "restore-replay-state must run first"))
    }
}

impl Replay for LedgerImport {
    type Binding = LedgerPoint;

    fn capture(
        &self,
        ledger: &Ledger,
        _request: &CaptureRequest,
    ) -> Result<StateLease<LedgerPoint>, Error> {
        let point = LedgerPoint::new(ledger.clone());
        let digest = point.digest.clone();
        Ok(StateLease::exact(point, digest))
    }

    fn restore(
        &self,
        point: &LedgerPoint,
        request: &RestoreRequest,
    ) -> Result<RestoreReceipt, Error> {
        let (restored, receipt) = restore_ledger(&point.captured, &request.target_branch_id)?;
        *point.working.borrow_mut() = Some(restored);
        Ok(receipt)
    }

    fn validate(
        &self,
        point: &LedgerPoint,
        _receipt: &RestoreReceipt,
    ) -> Result<EquivalenceReport, Error> {
        Ok(equivalence(&point.digest, &*point.working()?))
    }

    fn run_suffix(&self, point: &LedgerPoint, item: Item, _ctx: &Context) -> Result<Record, Error> {
        run_import(&point.working()?.ledger, &item)
    }

    fn finalize_suffix(
        &self,
        point: &LedgerPoint,
        _request: &RestoreRequest,
        _suffix_succeeded: bool,
    ) -> Result<(), Error> {
        point.working.borrow_mut().take();
        Ok(())
    }

    fn export_state(&self, point: &LedgerPoint) -> Result<Option<Vec<u8>>, Error> {
        Ok(Some(point.captured.to_state()))
    }

    fn import_state(
        &self,
        state: Vec<u8>,
        _request: &CaptureRequest,
    ) -> Result<StateLease<LedgerPoint>, Error> {
        let point = LedgerPoint::new(Ledger::from_state(&state)?);
        let digest = point.digest.clone();
        Ok(StateLease::exact(point, digest))
    }
}

/// One isolated child: its restored ledger and the point's digest.
pub struct LedgerChild {
    restored: Restored,
    captured_digest: String,
}

impl ReplayChildren for LedgerImport {
    type Child = LedgerChild;

    fn fork_child(
        &self,
        state: Vec<u8>,
        request: &ForkRequest,
    ) -> Result<ChildLease<LedgerChild>, Error> {
        let captured = Ledger::from_state(&state)?;
        let (restored, receipt) = restore_ledger(&captured, &request.target_branch_id)?;
        let child = LedgerChild {
            restored,
            captured_digest: captured.digest(),
        };
        Ok(ChildLease::thread_safe(child, receipt))
    }

    fn validate_child(
        &self,
        child: &LedgerChild,
        _receipt: &RestoreReceipt,
    ) -> Result<EquivalenceReport, Error> {
        Ok(equivalence(&child.captured_digest, &child.restored))
    }

    fn run_child(&self, child: &LedgerChild, task: Item, _ctx: &Context) -> Result<Record, Error> {
        run_import(&child.restored.ledger, &task)
    }
}

impl ChildRisk for LedgerImport {
    /// A change set may touch at most [`MAX_CHANGES`] settings; a plain
    /// task (no change set) is always allowed.
    fn assess_intent(
        &self,
        _child: &LedgerChild,
        intent: &Object,
    ) -> Result<RiskAssessment, Error> {
        let changes = intent
            .get("public_change_set")
            .and_then(|change| change.as_object())
            .map_or(0, |change| change.len());
        if changes > MAX_CHANGES {
            return Ok(RiskAssessment::deny(
                CHANGE_SCOPE_POLICY,
                format!("the change touches {changes} settings; at most {MAX_CHANGES} at once"),
            ));
        }
        Ok(RiskAssessment::allow(CHANGE_SCOPE_POLICY))
    }

    fn assess_outcome(
        &self,
        _child: &LedgerChild,
        _intent: &Object,
        _outcome: &Record,
    ) -> Result<RiskAssessment, Error> {
        Ok(RiskAssessment::allow(CHANGE_SCOPE_POLICY))
    }
}

impl Counterfactual for LedgerImport {
    fn run_counterfactual(
        &self,
        child: &LedgerChild,
        _item: Item,
        _request: &CounterfactualRequest,
        change: &Object,
        _ctx: &Context,
    ) -> Result<Vec<ValidationOutcome>, Error> {
        let settings = Settings::from_change(change)?;
        let result = import(&child.restored.ledger, settings);
        for outcome in &result.outcomes {
            let _ = emit(
                EventKind::Validation,
                json!({"validation_id": outcome.validation_id, "passed": outcome.passed}),
            );
        }
        Ok(result.outcomes)
    }
}

sandloop_guest::export_adapter!(LedgerImport, world = counterfactual_fixes);

#[cfg(test)]
mod tests;
