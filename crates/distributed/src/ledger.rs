//! The coordinator's bookkeeping of units in flight: which lane waits for
//! which unit, which results were already taken (a unit delivered twice —
//! its first worker died after publishing, or was merely slow — is
//! recorded once: the first result of a unit wins, by unit id), and the
//! figures of the summary's `distributed` block.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};

/// The `distributed` block of a distributed run's `summary.json`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DistributedSummary {
    /// The NATS server, password hidden.
    pub nats: String,
    /// Workers that answered the roll call or returned a result, by name.
    pub workers_seen: Vec<String>,
    /// Units whose result was recorded, by the worker that ran them.
    pub units_per_worker: BTreeMap<String, u64>,
    /// Deliveries beyond the first of recorded units (a worker died or
    /// stalled past the ack deadline, and the unit ran again).
    pub redeliveries: u64,
    /// Results dropped because their unit was already recorded.
    pub duplicate_results: u64,
    /// Bytes of units and components published.
    pub bytes_sent: u64,
    /// Bytes of results received.
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
    by_sequence: HashMap<u64, String>,
    recorded: HashSet<String>,
    summary: DistributedSummary,
}

impl<W> Ledger<W> {
    /// An empty ledger for a run on `nats` (shown in the summary).
    pub fn new(nats: &str) -> Self {
        Self {
            waiting: HashMap::new(),
            by_sequence: HashMap::new(),
            recorded: HashSet::new(),
            summary: DistributedSummary {
                nats: nats.to_owned(),
                ..DistributedSummary::default()
            },
        }
    }

    /// A lane waits for `unit_id`'s result through `waiter`.
    pub fn expect(&mut self, unit_id: &str, waiter: W) {
        self.waiting.insert(unit_id.to_owned(), waiter);
    }

    /// The units stream holds `unit_id` at `sequence` (for JetStream's
    /// advisories, which name sequences).
    pub fn published(&mut self, unit_id: &str, sequence: u64, bytes: u64) {
        self.by_sequence.insert(sequence, unit_id.to_owned());
        self.summary.bytes_sent += bytes;
    }

    /// Counts `bytes` sent besides units (the component).
    pub fn sent(&mut self, bytes: u64) {
        self.summary.bytes_sent += bytes;
    }

    /// A worker answered the roll call.
    pub fn saw_worker(&mut self, worker: &str) {
        if !self.summary.workers_seen.iter().any(|seen| seen == worker) {
            self.summary.workers_seen.push(worker.to_owned());
        }
    }

    /// A result of `unit_id` arrived from `worker` at delivery `attempt`
    /// (`bytes` long): the first one of a unit in flight is handed over
    /// and counted; later ones are dropped.
    pub fn settle(&mut self, unit_id: &str, attempt: u64, worker: &str, bytes: u64) -> Settled<W> {
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
        self.summary.redeliveries += attempt.saturating_sub(1);
        Settled::First(waiter)
    }

    /// JetStream gave up on the unit at `sequence`: its waiter, if the
    /// unit is still in flight, with the unit's id.
    pub fn abandoned(&mut self, sequence: u64) -> Option<(String, W)> {
        let unit_id = self.by_sequence.get(&sequence)?.clone();
        let waiter = self.waiting.remove(&unit_id)?;
        Some((unit_id, waiter))
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
        let mut ledger = Ledger::new("nats://h:4222");
        ledger.expect("r.e1.u0", 'a');
        ledger.expect("r.e1.u1", 'b');
        ledger.published("r.e1.u0", 7, 100);
        assert_eq!(ledger.in_flight(), 2);
        // The first worker died after publishing; the redelivery ran too.
        assert_eq!(ledger.settle("r.e1.u0", 2, "w2", 10), Settled::First('a'));
        assert_eq!(ledger.settle("r.e1.u0", 1, "w1", 10), Settled::Duplicate);
        assert_eq!(ledger.settle("r.e1.u1", 1, "w1", 5), Settled::First('b'));
        assert_eq!(ledger.settle("other.e1.u0", 1, "w1", 5), Settled::Unknown);
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
    }

    #[test]
    fn an_abandoned_sequence_wakes_its_unit_once_and_only_while_in_flight() {
        let mut ledger = Ledger::new("n");
        ledger.expect("u0", 1);
        ledger.published("u0", 3, 0);
        ledger.expect("u1", 2);
        ledger.published("u1", 4, 0);
        assert_eq!(ledger.abandoned(3), Some(("u0".into(), 1)));
        assert_eq!(ledger.abandoned(3), None, "woken once");
        assert_eq!(ledger.settle("u1", 1, "w", 0), Settled::First(2));
        assert_eq!(ledger.abandoned(4), None, "already recorded");
        assert_eq!(ledger.abandoned(99), None, "not ours");
    }

    #[test]
    fn the_summary_block_round_trips() {
        let mut ledger = Ledger::<()>::new("n");
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
