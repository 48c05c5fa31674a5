//! The coordinator's bookkeeping of units in flight: which lane waits for
//! which unit, which results were already taken (a unit delivered twice —
//! its first worker died after publishing, or was merely slow — is
//! recorded once: the first result of a unit wins, by unit id), how often
//! each unit started on a worker (a unit that keeps killing workers is
//! given up after [`MAX_STARTS`]), and the figures of the summary's
//! `distributed` block.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};

/// Starts of one unit on workers without a result before it is given up
/// (its next start withdraws it, and it is recorded as lost).
pub const MAX_STARTS: u64 = 3;

/// The `distributed` block of a distributed run's `summary.json`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DistributedSummary {
    /// The NATS server, password hidden.
    pub nats: String,
    /// This coordinator's run id: its units and results travel on
    /// `sandloop.units.<id>` and `sandloop.results.<id>` (a resumed run
    /// has a new one).
    pub run_id: String,
    /// Workers that answered the roll call or returned a result, by name.
    pub workers_seen: Vec<String>,
    /// Units whose result was recorded, by the worker that ran them.
    pub units_per_worker: BTreeMap<String, u64>,
    /// Starts beyond the first of recorded units (a worker died or stalled
    /// past the ack deadline, and the unit ran again elsewhere).
    pub redeliveries: u64,
    /// Results dropped because their unit was already recorded.
    pub duplicate_results: u64,
    /// Bytes of units and components published.
    pub bytes_sent: u64,
    /// Bytes of results received, and of replay points' states and items
    /// fetched from the object store.
    pub bytes_received: u64,
}

/// What became of a result handed to [`Ledger::settle`].
#[derive(Debug, PartialEq, Eq)]
pub enum Settled<W> {
    /// The first result of a unit a lane waits for: hand it to `W`.
    First(W),
    /// The unit was recorded already; this result is dropped.
    Duplicate,
    /// No lane of this run sent such a unit (a result of an earlier run).
    Unknown,
}

/// Units in flight and the run's distributed figures. `W` is whatever
/// wakes the waiting lane (a channel's sender).
#[derive(Debug)]
pub struct Ledger<W> {
    waiting: HashMap<String, W>,
    sequences: HashMap<String, u64>,
    starts: HashMap<String, u64>,
    recorded: HashSet<String>,
    summary: DistributedSummary,
}

impl<W> Ledger<W> {
    /// An empty ledger for a run on `nats` (shown in the summary).
    pub fn new(nats: &str, run_id: &str) -> Self {
        Self {
            waiting: HashMap::new(),
            sequences: HashMap::new(),
            starts: HashMap::new(),
            recorded: HashSet::new(),
            summary: DistributedSummary {
                nats: nats.to_owned(),
                run_id: run_id.to_owned(),
                ..DistributedSummary::default()
            },
        }
    }

    /// A lane waits for `unit_id`'s result through `waiter`.
    pub fn expect(&mut self, unit_id: &str, waiter: W) {
        self.waiting.insert(unit_id.to_owned(), waiter);
    }

    /// The units stream holds `unit_id` at `sequence` (to withdraw it when
    /// it is given up).
    pub fn published(&mut self, unit_id: &str, sequence: u64, bytes: u64) {
        self.sequences.insert(unit_id.to_owned(), sequence);
        self.summary.bytes_sent += bytes;
    }

    /// Counts `bytes` sent besides units (the component).
    pub fn sent(&mut self, bytes: u64) {
        self.summary.bytes_sent += bytes;
    }

    /// Counts `bytes` received besides results (replay points' states and
    /// items fetched from the object store).
    pub fn received(&mut self, bytes: u64) {
        self.summary.bytes_received += bytes;
    }

    /// A worker answered the roll call.
    pub fn saw_worker(&mut self, worker: &str) {
        if !self.summary.workers_seen.iter().any(|seen| seen == worker) {
            self.summary.workers_seen.push(worker.to_owned());
        }
    }

    /// A result of `unit_id` arrived from `worker` (`bytes` long): the
    /// first one of a unit in flight is handed over and counted; later ones
    /// are dropped.
    pub fn settle(&mut self, unit_id: &str, worker: &str, bytes: u64) -> Settled<W> {
        self.summary.bytes_received += bytes;
        if self.recorded.contains(unit_id) {
            self.summary.duplicate_results += 1;
            return Settled::Duplicate;
        }
        let Some(waiter) = self.waiting.remove(unit_id) else {
            return Settled::Unknown;
        };
        self.recorded.insert(unit_id.to_owned());
        self.saw_worker(worker);
        *self
            .summary
            .units_per_worker
            .entry(worker.to_owned())
            .or_default() += 1;
        let starts = self.starts.remove(unit_id).unwrap_or(0);
        self.summary.redeliveries += starts.saturating_sub(1);
        self.sequences.remove(unit_id);
        Settled::First(waiter)
    }

    /// `unit_id` started on a worker. Past [`MAX_STARTS`] starts of a unit
    /// still in flight, it is given up: its stream sequence (to withdraw
    /// it) and its waiter.
    pub fn started(&mut self, unit_id: &str) -> Option<(u64, W)> {
        if !self.waiting.contains_key(unit_id) {
            return None;
        }
        let starts = self.starts.entry(unit_id.to_owned()).or_default();
        *starts += 1;
        if *starts <= MAX_STARTS {
            return None;
        }
        let waiter = self.waiting.remove(unit_id)?;
        self.starts.remove(unit_id);
        let sequence = self.sequences.remove(unit_id)?;
        Some((sequence, waiter))
    }

    /// A lane stopped waiting for `unit_id` (it gave up).
    pub fn forget(&mut self, unit_id: &str) {
        self.waiting.remove(unit_id);
    }

    /// Units still in flight.
    pub fn in_flight(&self) -> usize {
        self.waiting.len()
    }

    /// The figures so far.
    pub fn summary(&self) -> DistributedSummary {
        self.summary.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_result_of_a_unit_is_recorded_once_and_later_ones_are_dropped() {
        let mut ledger = Ledger::new("nats://h:4222", "r");
        ledger.expect("r.e1.u0", 'a');
        ledger.expect("r.e1.u1", 'b');
        ledger.published("r.e1.u0", 7, 100);
        assert_eq!(ledger.in_flight(), 2);
        // The first worker died after publishing; the unit started again
        // elsewhere, and both results arrive.
        assert_eq!(ledger.started("r.e1.u0"), None);
        assert_eq!(ledger.started("r.e1.u0"), None);
        assert_eq!(ledger.settle("r.e1.u0", "w2", 10), Settled::First('a'));
        assert_eq!(ledger.settle("r.e1.u0", "w1", 10), Settled::Duplicate);
        assert_eq!(
            ledger.started("r.e1.u0"),
            None,
            "recorded: no longer counted"
        );
        assert_eq!(ledger.settle("r.e1.u1", "w1", 5), Settled::First('b'));
        assert_eq!(ledger.settle("other.e1.u0", "w1", 5), Settled::Unknown);
        assert_eq!(ledger.in_flight(), 0);
        let summary = ledger.summary();
        assert_eq!(
            summary.units_per_worker,
            BTreeMap::from([("w1".into(), 1), ("w2".into(), 1)])
        );
        assert_eq!(summary.redeliveries, 1);
        assert_eq!(summary.duplicate_results, 1);
        assert_eq!(summary.bytes_sent, 100);
        assert_eq!(summary.bytes_received, 30);
        assert_eq!(summary.workers_seen, ["w2", "w1"]);
        ledger.received(7);
        assert_eq!(ledger.summary().bytes_received, 37, "states fetched count");
    }

    #[test]
    fn a_unit_that_keeps_starting_without_a_result_is_given_up_once() {
        let mut ledger = Ledger::new("n", "r");
        ledger.expect("u0", 1);
        ledger.published("u0", 3, 0);
        for _ in 0..MAX_STARTS {
            assert_eq!(ledger.started("u0"), None);
        }
        assert_eq!(
            ledger.started("u0"),
            Some((3, 1)),
            "given up past the bound"
        );
        assert_eq!(ledger.started("u0"), None, "once");
        assert_eq!(ledger.in_flight(), 0);
        assert_eq!(
            ledger.settle("u0", "w", 0),
            Settled::Unknown,
            "a late result is dropped"
        );
        assert_eq!(ledger.started("not-ours"), None);
    }

    #[test]
    fn the_summary_block_round_trips() {
        let mut ledger = Ledger::<()>::new("n", "r");
        ledger.saw_worker("w1");
        ledger.saw_worker("w1");
        ledger.sent(42);
        let summary = ledger.summary();
        assert_eq!(summary.workers_seen, ["w1"]);
        let text = serde_json::to_string(&summary).unwrap();
        assert_eq!(
            serde_json::from_str::<DistributedSummary>(&text).unwrap(),
            summary
        );
    }
}
