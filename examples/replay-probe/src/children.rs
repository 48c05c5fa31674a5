//! Isolated replay children (`replay-children`, `child-risk`) and their
//! faults.
//!
//! The host forks each task into a fresh instance with the bytes the
//! parent's `export-replay-state` wrote. [`ReplayProbe::fork_child`]
//! decodes them like `import-replay-state` and looks the child's faults up
//! by the fork request's `child-id` (the task's `item_id`) in the items the
//! state carries; `run-replay-child` also honours the task item's own
//! `"faults"`. Without faults a child is honest: its receipt repeats the
//! point's fidelity with the state's digest (`prefix_reused: true`), its
//! lease is `thread-safe`, its report is the restore's honest report, its
//! record is a suffix record with `via: "child"`, `counter_before: 0` and
//! `child_id`, and both risk assessments allow (policy [`PROBE_POLICY`]).

use std::cell::RefCell;

use sandloop_guest::{
    ChildConcurrency, ChildLease, ChildRisk, Context, EquivalenceReport, Error, Fidelity,
    ForkRequest, Item, Object, Record, ReplayChildren, RestoreReceipt, RiskAssessment,
};

use crate::faults::{Fault, Faults};
use crate::{
    Decoded, ProbeState, ReplayProbe, captured_fidelity, decode_state, digest, honest_report,
    item_faults, run_item,
};

/// Policy id of every assessment the probe makes.
pub const PROBE_POLICY: &str = "probe-policy";

/// Bytes of garbage `child_scribbles` writes over the heap.
pub const SCRIBBLE_BYTES: usize = 8 << 20;

/// One forked child: the state it runs on and what its fork claimed.
#[derive(Debug)]
pub struct ProbeChild {
    child_id: String,
    /// Digest of the exported state (the point's projection digest).
    captured_digest: String,
    /// The fidelity the receipt claimed.
    achieved: Fidelity,
    /// The child's faults, from the exported state's item list.
    faults: Faults,
    state: RefCell<ProbeState>,
}

impl ProbeChild {
    /// The `child-id` the child was forked with.
    pub fn child_id(&self) -> &str {
        &self.child_id
    }

    /// The child's faults (from the exported state).
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// A copy of the child's current state.
    pub fn state(&self) -> ProbeState {
        self.state.borrow().clone()
    }
}

/// `child_scribbles`: fill a large heap buffer with pseudo-random garbage
/// (freed again, so the allocator's free memory holds it), and overwrite
/// `state` with bytes from it. Returns the bytes scribbled.
pub fn scribble(state: &mut ProbeState) -> usize {
    let mut garbage = vec![0u8; SCRIBBLE_BYTES];
    let mut x: u32 = 0x9e37_79b9;
    for byte in garbage.iter_mut() {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *byte = x as u8;
    }
    let garbage = std::hint::black_box(garbage);
    state.seed_item_id = String::from_utf8_lossy(&garbage[..64]).into_owned();
    state.seed_text = String::from_utf8_lossy(&garbage[64..4096]).into_owned();
    let mut counter = [0u8; 8];
    counter.copy_from_slice(&garbage[4096..4104]);
    state.counter = u64::from_le_bytes(counter);
    garbage.len()
}

/// `child_memory_bomb`: allocate (and touch) 1 MiB chunks until `cap`
/// bytes are held. In the component `cap` is unbounded, so the allocation
/// that crosses the instance's memory limit aborts (a trap); tests pass a
/// small cap. Returns the bytes held.
pub fn memory_bomb(cap: usize) -> usize {
    let mut hog: Vec<Vec<u8>> = Vec::new();
    let mut held = 0usize;
    while held < cap {
        let chunk = vec![0xa5u8; 1 << 20];
        held = held.saturating_add(chunk.len());
        hog.push(std::hint::black_box(chunk));
    }
    std::hint::black_box(&hog);
    held
}

/// `child_loops`: never return; the host's deadline has to stop it.
pub fn spin_forever() -> ! {
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

impl ReplayChildren for ReplayProbe {
    type Child = ProbeChild;

    fn fork_child(
        &self,
        state: Vec<u8>,
        request: &ForkRequest,
    ) -> Result<ChildLease<ProbeChild>, Error> {
        let Decoded {
            captured,
            seed_faults,
            item_faults,
        } = decode_state(state)?;
        let faults = item_faults
            .get(&request.child_id)
            .cloned()
            .unwrap_or_default();
        faults.trap(Fault::ForkTraps, "fork-replay-child");
        faults.check(Fault::ForkFails, "fork-replay-child")?;
        let Some(fidelity) = captured_fidelity(&seed_faults) else {
            return Err(Error::new(
                "invalid-state",
                "a non-replayable point has no state to fork",
            ));
        };
        let captured_digest = digest(&captured);
        let mut state = captured;
        let mut state_digest = captured_digest.clone();
        if faults.has(Fault::ChildValidateLies) {
            state.counter += 1; // the child really differs from the capture
            state_digest = digest(&state);
        }
        let achieved = if faults.has(Fault::ForkStronger) {
            Fidelity::Exact
        } else {
            fidelity
        };
        let receipt = RestoreReceipt::new(achieved)
            .with_digest(state_digest)
            .with_prefix_reused(true);
        let concurrency = if faults.has(Fault::ChildSerialOnly) {
            ChildConcurrency::SerialOnly
        } else if faults.has(Fault::ChildProcessIsolated) {
            ChildConcurrency::ProcessIsolated
        } else {
            ChildConcurrency::ThreadSafe
        };
        let child = ProbeChild {
            child_id: request.child_id.clone(),
            captured_digest,
            achieved,
            faults,
            state: RefCell::new(state),
        };
        Ok(ChildLease::new(child, receipt, concurrency))
    }

    fn validate_child(
        &self,
        child: &ProbeChild,
        _receipt: &RestoreReceipt,
    ) -> Result<EquivalenceReport, Error> {
        let mut report = honest_report(
            child.achieved,
            &child.captured_digest,
            &child.state.borrow(),
        );
        if child.faults.has(Fault::ChildValidateLies) {
            report.equivalent = true;
            for check in &mut report.checks {
                check.passed = true;
            }
        }
        Ok(report)
    }

    fn run_child(&self, child: &ProbeChild, task: Item, _ctx: &Context) -> Result<Record, Error> {
        let faults = child.faults.union(&item_faults(&task)?);
        let mut state = child.state.borrow_mut();
        let mut record = run_item(&mut state, &task, "child");
        record.set("child_id", child.child_id.as_str());
        faults.check(Fault::ChildFails, "run-replay-child")?;
        faults.trap(Fault::ChildTraps, "run-replay-child");
        if faults.has(Fault::ChildLoops) {
            spin_forever();
        }
        if faults.has(Fault::ChildMemoryBomb) {
            memory_bomb(usize::MAX);
        }
        if faults.has(Fault::ChildScribbles) {
            let scribbled = scribble(&mut state);
            record.set("scribbled_bytes", scribbled);
        }
        Ok(record)
    }

    fn release_child(&self, child: &ProbeChild) -> Result<(), Error> {
        child
            .faults
            .check(Fault::ChildReleaseFails, "release-replay-child")
    }
}

impl ChildRisk for ReplayProbe {
    fn assess_intent(&self, child: &ProbeChild, _intent: &Object) -> Result<RiskAssessment, Error> {
        let faults = &child.faults;
        faults.check(Fault::IntentFails, "assess-replay-child-intent")?;
        if faults.has(Fault::IntentDenied) {
            return Ok(RiskAssessment::deny(
                PROBE_POLICY,
                "injected fault `intent_denied`",
            ));
        }
        Ok(RiskAssessment::allow(PROBE_POLICY))
    }

    fn assess_outcome(
        &self,
        child: &ProbeChild,
        _intent: &Object,
        _outcome: &Record,
    ) -> Result<RiskAssessment, Error> {
        if child.faults.has(Fault::OutcomeDenied) {
            return Ok(RiskAssessment::deny(
                PROBE_POLICY,
                "injected fault `outcome_denied`",
            ));
        }
        Ok(RiskAssessment::allow(PROBE_POLICY))
    }
}
