//! bench-adapter: the cheapest possible adapter, to measure host overhead.
//!
//! Exports `episode`, `episode-groups`, `replay`, `replay-children` and
//! `child-risk` (the `isolated` world without `seeds` and `variants`).
//! Every call returns a fixed value: records from static strings, one
//! constant projection digest, a replay binding and a replay child that
//! hold nothing. No JSON parsing, no allocation beyond the copies the
//! canonical ABI needs. Two exceptions, for items that cost something: an
//! item whose text ends with the field `"wait_ms":N` sleeps N milliseconds
//! each time it runs (`execute`, `execute-episode`, `run-replay-suffix`,
//! `run-replay-child`; a group's shared prefix does not wait), in a
//! blocking WASI poll as a network call would; one that ends with
//! `"work":N` spends N rounds of arithmetic there instead, as an adapter's
//! own work would. Only the text's last bytes are looked at ([`load`]), so
//! the other items cost nothing for it. It implements the
//! generated `Guest` traits directly instead of the sdk's serde-based
//! protocol traits, so the guest's share of a call is as close to zero as
//! a component can get.
//!
//! The replay exports honour the contract at `exact` fidelity: a capture's
//! lease carries the binding and [`DIGEST`]; a restore or a fork receipt
//! claims `exact` with [`DIGEST`]; every equivalence report is `exact`,
//! equivalent, with [`DIGEST`] expected and observed (equal digests are the
//! only check `exact` needs); exported state is [`STATE`] (16 bytes) and an
//! import or fork accepts any bytes; children are `thread-safe`; both risk
//! assessments allow (policy [`POLICY`]); a binding's token is 0 and resumes
//! into a new, equally empty binding.

use sandloop_guest::wit::types::{
    AdapterError, Context, EquivalenceReport, Fidelity, RestoreReceipt,
};
use sandloop_guest::worlds::isolated::{
    child_risk, episode, episode_groups, replay, replay_children,
};

/// Observation record of every item.
const RECORD: &str = r#"{"observation_keys":["k"],"accepted":true}"#;
/// Observation record of every shared prefix.
const PREFIX: &str = r#"{"observation_keys":["prefix"],"accepted":true}"#;
/// Projection digest of every captured, restored and forked state.
pub const DIGEST: &str = "bench-noop-state";
/// What `export-replay-state` returns: a tiny fixed state.
pub const STATE: &[u8] = b"bench-noop-state";
/// Policy id of every risk assessment.
pub const POLICY: &str = "bench-allow-all";

struct Bench;

/// The group state: nothing.
struct BenchGroup;

impl episode_groups::GuestEpisodeGroup for BenchGroup {}

/// A replay point's state: nothing.
struct BenchBinding;

impl replay::GuestReplayBinding for BenchBinding {}

/// A forked child's state: nothing.
struct BenchChild;

impl replay_children::GuestReplayChild for BenchChild {}

/// The receipt of every restore and fork.
fn receipt() -> RestoreReceipt {
    RestoreReceipt {
        achieved_fidelity: Fidelity::Exact,
        restored_projection_digest: Some(DIGEST.to_owned()),
        prefix_reused: Some(true),
    }
}

/// The report of every equivalence validation.
fn report() -> EquivalenceReport {
    EquivalenceReport {
        achieved_fidelity: Fidelity::Exact,
        equivalent: true,
        expected_digest: Some(DIGEST.to_owned()),
        observed_digest: Some(DIGEST.to_owned()),
        checks: Vec::new(),
        sanitized_reason: None,
    }
}

/// The lease of every capture and import.
fn lease() -> replay::StateLease {
    replay::StateLease {
        binding: Some(replay::ReplayBinding::new(BenchBinding)),
        fidelity: Fidelity::Exact,
        projection_digest: Some(DIGEST.to_owned()),
    }
}

/// The verdict of every risk assessment.
fn allow() -> child_risk::RiskAssessment {
    child_risk::RiskAssessment {
        disposition: child_risk::Disposition::Allow,
        policy_id: POLICY.to_owned(),
        sanitized_reason: None,
    }
}

/// How many bytes at the end of an item [`tail_number`] searches: the
/// field `"wait_ms":N` or `"work":N` and the closing brace.
const TAIL: usize = 32;

/// N of the field `key` (`"wait_ms":`, `"work":`) when it is `item`'s last
/// field (serde_json's compact form of a map whose other keys sort before
/// it, as the benches write their items): only the last [`TAIL`] bytes are
/// searched.
fn tail_number(item: &str, key: &str) -> Option<u64> {
    let mut from = item.len().saturating_sub(TAIL);
    while !item.is_char_boundary(from) {
        from += 1;
    }
    let tail = &item[from..];
    let digits = &tail[tail.rfind(key)? + key.len()..];
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse().ok()
}

/// What an item costs when it runs (`execute`, `execute-episode`,
/// `run-replay-suffix`, `run-replay-child`): nothing, unless its last field
/// is `"wait_ms":N` — it then sleeps N milliseconds in a blocking WASI
/// poll, as a network call would — or `"work":N` — it then spends N rounds
/// of a 64-bit multiply-add on the CPU (about a nanosecond each), an
/// adapter's own work.
fn load(item: &str) {
    if let Some(ms) = tail_number(item, "\"wait_ms\":") {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
    if let Some(rounds) = tail_number(item, "\"work\":") {
        let mut x = rounds;
        for _ in 0..rounds {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005))
                .wrapping_add(1_442_695_040_888_963_407);
        }
        std::hint::black_box(x);
    }
}

impl episode::Guest for Bench {
    fn execute(item: String, _ctx: Context) -> Result<String, AdapterError> {
        load(&item);
        Ok(RECORD.to_owned())
    }
}

impl episode_groups::Guest for Bench {
    type EpisodeGroup = BenchGroup;

    fn prepare_episode_group(
        _seed: String,
        _items: Vec<String>,
        _ctx: Context,
    ) -> Result<Option<episode_groups::Prepared>, AdapterError> {
        Ok(Some(episode_groups::Prepared {
            group: episode_groups::EpisodeGroup::new(BenchGroup),
            prefix_record: PREFIX.to_owned(),
            checkpoint_ref: None,
        }))
    }

    fn execute_episode(
        _group: episode_groups::EpisodeGroupBorrow<'_>,
        item: String,
        _ctx: Context,
    ) -> Result<String, AdapterError> {
        load(&item);
        Ok(RECORD.to_owned())
    }

    fn release_episode_group(
        _group: episode_groups::EpisodeGroup,
        _ctx: Context,
    ) -> Result<(), AdapterError> {
        Ok(())
    }
}

impl replay::Guest for Bench {
    type ReplayBinding = BenchBinding;

    fn capture_replay_state(
        _request: replay::CaptureRequest,
    ) -> Result<replay::StateLease, AdapterError> {
        Ok(lease())
    }

    fn restore_replay_state(
        _binding: replay::ReplayBindingBorrow<'_>,
        _request: replay::RestoreRequest,
    ) -> Result<RestoreReceipt, AdapterError> {
        Ok(receipt())
    }

    fn validate_replay_equivalence(
        _binding: replay::ReplayBindingBorrow<'_>,
        _receipt: RestoreReceipt,
    ) -> Result<EquivalenceReport, AdapterError> {
        Ok(report())
    }

    fn run_replay_suffix(
        _binding: replay::ReplayBindingBorrow<'_>,
        item: String,
        _ctx: Context,
    ) -> Result<String, AdapterError> {
        load(&item);
        Ok(RECORD.to_owned())
    }

    fn finalize_replay_suffix(
        _binding: replay::ReplayBindingBorrow<'_>,
        _request: replay::RestoreRequest,
        _suffix_succeeded: bool,
    ) -> Result<(), AdapterError> {
        Ok(())
    }

    fn release_replay_state(_binding: replay::ReplayBindingBorrow<'_>) -> Result<(), AdapterError> {
        Ok(())
    }

    fn export_replay_state(
        _binding: replay::ReplayBindingBorrow<'_>,
    ) -> Result<Option<Vec<u8>>, AdapterError> {
        Ok(Some(STATE.to_vec()))
    }

    fn import_replay_state(
        _state: Vec<u8>,
        _request: replay::CaptureRequest,
    ) -> Result<replay::StateLease, AdapterError> {
        Ok(lease())
    }

    fn binding_token(
        _binding: replay::ReplayBindingBorrow<'_>,
    ) -> Result<Option<u64>, AdapterError> {
        Ok(Some(0))
    }

    fn resume_binding(_token: u64) -> Result<replay::ReplayBinding, AdapterError> {
        Ok(replay::ReplayBinding::new(BenchBinding))
    }
}

impl replay_children::Guest for Bench {
    type ReplayChild = BenchChild;

    fn fork_replay_child(
        _state: Vec<u8>,
        _request: replay_children::ForkRequest,
    ) -> Result<replay_children::ChildLease, AdapterError> {
        Ok(replay_children::ChildLease {
            child: replay_children::ReplayChild::new(BenchChild),
            receipt: receipt(),
            concurrency: replay_children::ChildConcurrency::ThreadSafe,
        })
    }

    fn validate_replay_child_equivalence(
        _child: replay_children::ReplayChildBorrow<'_>,
        _receipt: RestoreReceipt,
    ) -> Result<EquivalenceReport, AdapterError> {
        Ok(report())
    }

    fn run_replay_child(
        _child: replay_children::ReplayChildBorrow<'_>,
        task: String,
        _ctx: Context,
    ) -> Result<String, AdapterError> {
        load(&task);
        Ok(RECORD.to_owned())
    }

    fn release_replay_child(
        _child: replay_children::ReplayChildBorrow<'_>,
    ) -> Result<(), AdapterError> {
        Ok(())
    }
}

impl child_risk::Guest for Bench {
    fn assess_replay_child_intent(
        _child_id: String,
        _intent: String,
    ) -> Result<child_risk::RiskAssessment, AdapterError> {
        Ok(allow())
    }

    fn assess_replay_child_outcome(
        _child_id: String,
        _intent: String,
        _outcome: String,
    ) -> Result<child_risk::RiskAssessment, AdapterError> {
        Ok(allow())
    }
}

// The `isolated` world's exports except `seeds` and `variants`: items come
// from the host's benchmarks, never from the adapter.
sandloop_guest::__sandloop_export_interface!(episode, Bench);
sandloop_guest::__sandloop_export_interface!(episode_groups, Bench);
sandloop_guest::__sandloop_export_interface!(replay, Bench);
sandloop_guest::__sandloop_export_interface!(replay_children, Bench);
sandloop_guest::__sandloop_export_interface!(child_risk, Bench);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_items_cost_is_read_from_its_last_field_only() {
        let item = r#"{"family":"noop","item_id":"c00","text":"x","work":30000}"#;
        assert_eq!(tail_number(item, "\"work\":"), Some(30000));
        assert_eq!(tail_number(item, "\"wait_ms\":"), None);
        let waiting = r#"{"item_id":"c00","wait_ms":5}"#;
        assert_eq!(tail_number(waiting, "\"wait_ms\":"), Some(5));
        // Only the last TAIL bytes are searched: a field further in is not
        // looked at, so a long item costs nothing to check.
        let early = format!(r#"{{"work":7,"text":"{}"}}"#, "y".repeat(TAIL));
        assert_eq!(tail_number(&early, "\"work\":"), None);
        assert_eq!(tail_number(r#"{"work":"many"}"#, "\"work\":"), None);
        // A tail that starts inside a multi-byte character is still read.
        let wide = format!(r#"{{"text":"{}","work":3}}"#, "é".repeat(TAIL));
        assert_eq!(tail_number(&wide, "\"work\":"), Some(3));
    }
}
