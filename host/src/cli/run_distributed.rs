//! What `sandloop run --nats` prints: the progress message of a
//! distributed run's epoch and its closing line.

use crate::distributed::{Dispatcher, DistributedSummary};

/// The progress bar's message during a distributed run's epoch, with
/// `remaining` of its units not yet done: how many wait in the queue, how
/// many are in flight on how many workers, and how many were redelivered.
pub(super) fn progress_message(dispatcher: &Dispatcher, remaining: usize) -> String {
    progress_text(&dispatcher.summary(), dispatcher.in_flight(), remaining)
}

fn progress_text(summary: &DistributedSummary, in_flight: usize, remaining: usize) -> String {
    format!(
        "{} unit(s) queued, {in_flight} in flight on {} worker(s), {} redelivered",
        remaining.saturating_sub(in_flight),
        summary.workers_seen.len(),
        summary.redeliveries
    )
}

/// The closing line of a distributed run: workers and their units.
pub(super) fn summary_line(summary: &DistributedSummary) -> String {
    let per_worker: Vec<String> = summary
        .units_per_worker
        .iter()
        .map(|(worker, units)| format!("{worker} {units}"))
        .collect();
    format!(
        "  workers    {} seen on {}; units: {}; {} redelivered, {} duplicate result(s) dropped",
        summary.workers_seen.len(),
        summary.nats,
        if per_worker.is_empty() {
            "none".to_owned()
        } else {
            per_worker.join(", ")
        },
        summary.redeliveries,
        summary.duplicate_results
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_message_counts_queued_in_flight_workers_and_redeliveries() {
        let summary = DistributedSummary {
            workers_seen: vec!["w1".into(), "w2".into()],
            redeliveries: 1,
            ..DistributedSummary::default()
        };
        assert_eq!(
            progress_text(&summary, 2, 5),
            "3 unit(s) queued, 2 in flight on 2 worker(s), 1 redelivered"
        );
        assert_eq!(
            progress_text(&summary, 2, 1),
            "0 unit(s) queued, 2 in flight on 2 worker(s), 1 redelivered"
        );
    }
}
