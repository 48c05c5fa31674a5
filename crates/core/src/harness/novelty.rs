//! First-seen novelty ledger. Mirrors `NoveltyLedger` in
//! `harness_runtime.py`.

use foldhash::HashSet;
use serde_json::Value;

use crate::episode::adapter::Record;
use crate::episode::unit_record::RecordFields;
use crate::episode::value::{py_float, py_str, str_or_empty};

/// Weight of one observation key (reference `DEFAULT_OBSERVATION_WEIGHT`).
pub const DEFAULT_OBSERVATION_WEIGHT: f64 = 1.0;

/// What one record was credited with by [`NoveltyLedger::credit`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Credit {
    /// First-seen keys times [`DEFAULT_OBSERVATION_WEIGHT`] plus the
    /// weights of first-seen flags.
    pub novel_value: f64,
    /// How many of the record's observation keys were first seen.
    pub novel_observation_keys: u64,
    /// [`NoveltyLedger::raw_value`] of the record, computed in the same
    /// pass.
    pub raw_value: f64,
}

/// First-seen ledger: raw observation keys are global, weighted flags are
/// family-scoped (`flag:{family}:{flag}`), so relabelling an item under
/// another family can never re-mint an already-seen key. Weights come from
/// the record itself (adapter-owned).
///
/// Records are read leniently: `observation_keys` must be an array (each
/// entry as text) and `weighted_flags` an object; anything else counts as
/// empty, and a flag weight that is not numeric counts as 0 (the reference
/// would raise). The key set uses foldhash (randomly seeded, minimally
/// DoS-resistant) rather than SipHash, for speed.
#[derive(Clone, Debug, Default)]
pub struct NoveltyLedger {
    seen: HashSet<String>,
    scratch: String,
}

impl NoveltyLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// A ledger that has already seen `keys` (as persisted in a checkpoint's
    /// `novelty_seen`).
    pub fn from_seen(keys: impl IntoIterator<Item = String>) -> Self {
        Self {
            seen: keys.into_iter().collect(),
            scratch: String::new(),
        }
    }

    /// Every key and `flag:{family}:{flag}` pseudo-key seen so far.
    pub fn seen(&self) -> &HashSet<String> {
        &self.seen
    }

    /// [`NoveltyLedger::seen`], sorted (the checkpoint's `novelty_seen`).
    pub fn seen_sorted(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.seen.iter().cloned().collect();
        keys.sort_unstable();
        keys
    }

    /// The record's value regardless of novelty (reference `raw_value`):
    /// (flag weights pass through `flag_weight`)
    /// number of observation keys times the key weight plus the sum of its
    /// flag weights.
    pub fn raw_value(&self, record: &Record) -> f64 {
        let keys = match record.get("observation_keys") {
            Some(Value::Array(keys)) => keys.len(),
            _ => 0,
        };
        let flags: f64 = match record.get("weighted_flags") {
            Some(Value::Object(flags)) => flags.values().map(flag_weight).sum(),
            _ => 0.0,
        };
        DEFAULT_OBSERVATION_WEIGHT * keys as f64 + flags
    }

    /// Credits the record's first-seen keys and flags and remembers them
    /// (reference `credit`), and computes its raw value. The family
    /// defaults to `general`.
    pub fn credit(&mut self, record: &(impl RecordFields + ?Sized)) -> Credit {
        let mut credit = Credit::default();
        if let Some(Value::Array(keys)) = record.field("observation_keys") {
            credit.raw_value += DEFAULT_OBSERVATION_WEIGHT * keys.len() as f64;
            for key in keys {
                let key = py_str(key);
                if !self.seen.contains(key.as_ref()) {
                    self.seen.insert(key.into_owned());
                    credit.novel_value += DEFAULT_OBSERVATION_WEIGHT;
                    credit.novel_observation_keys += 1;
                }
            }
        }
        if let Some(Value::Object(flags)) = record.field("weighted_flags") {
            let family = str_or_empty(record.field("family"));
            let family = if family.is_empty() {
                "general"
            } else {
                family.as_ref()
            };
            for (flag, weight) in flags {
                let weight = flag_weight(weight);
                credit.raw_value += weight;
                self.scratch.clear();
                self.scratch.push_str("flag:");
                self.scratch.push_str(family);
                self.scratch.push(':');
                self.scratch.push_str(flag);
                if !self.seen.contains(self.scratch.as_str()) {
                    self.seen.insert(self.scratch.clone());
                    credit.novel_value += weight;
                }
            }
        }
        credit
    }
}

/// Largest flag weight credited, in either direction. Totals must stay
/// finite: a non-finite total could not be written to the checkpoint, and
/// the run could never be resumed.
pub const MAX_FLAG_WEIGHT: f64 = 1e12;

/// A flag weight as credited: numeric (as the reference reads it), 0 when
/// it is not a finite number, clamped to ±[`MAX_FLAG_WEIGHT`]. A deviation
/// from the reference, which would carry `inf`/`nan` into every total.
pub fn flag_weight(value: &Value) -> f64 {
    match py_float(value) {
        Some(weight) if weight.is_finite() => weight.clamp(-MAX_FLAG_WEIGHT, MAX_FLAG_WEIGHT),
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::episode::testing::obj;
    use serde_json::json;

    #[test]
    fn raw_keys_are_global_and_flags_family_scoped() {
        let mut ledger = NoveltyLedger::new();
        let first = obj(json!({"family": "a", "observation_keys": ["k1", "k2"],
                                "weighted_flags": {"crash": 2.5}}));
        assert_eq!(ledger.raw_value(&first), 4.5);
        assert_eq!(
            ledger.credit(&first),
            Credit {
                novel_value: 4.5,
                novel_observation_keys: 2,
                raw_value: 4.5,
            }
        );
        // Same keys under another family: keys are not novel again, the flag
        // is (family-scoped).
        let relabelled = obj(json!({"family": "b", "observation_keys": ["k1", "k2"],
                                     "weighted_flags": {"crash": 2.5}}));
        assert_eq!(
            ledger.credit(&relabelled),
            Credit {
                novel_value: 2.5,
                novel_observation_keys: 0,
                raw_value: 4.5,
            }
        );
        assert_eq!(
            ledger.raw_value(&relabelled),
            4.5,
            "raw value ignores novelty"
        );
        // Nothing new the third time.
        assert_eq!(ledger.credit(&first).novel_value, 0.0);
        assert_eq!(ledger.credit(&first).novel_observation_keys, 0);
        assert_eq!(
            ledger.seen_sorted(),
            vec!["flag:a:crash", "flag:b:crash", "k1", "k2"]
        );
    }

    #[test]
    fn keys_are_text_family_defaults_to_general_and_odd_shapes_count_as_empty() {
        let mut ledger = NoveltyLedger::new();
        let record = obj(json!({"observation_keys": [1, "1", true],
                                 "weighted_flags": {"f": "2", "bad": "x"}}));
        let credit = ledger.credit(&record);
        // 1 and "1" are the same key as text; True is another.
        assert_eq!(credit.novel_observation_keys, 2);
        assert_eq!(credit.novel_value, 4.0);
        assert!(ledger.seen().contains("flag:general:f"));
        assert!(ledger.seen().contains("flag:general:bad"));
        assert_eq!(ledger.raw_value(&record), 5.0);
        assert_eq!(credit.raw_value, 5.0);
        let odd = obj(json!({"observation_keys": "abc", "weighted_flags": [1]}));
        assert_eq!(ledger.raw_value(&odd), 0.0);
        assert_eq!(ledger.credit(&odd), Credit::default());
    }

    #[test]
    fn a_restored_ledger_remembers_what_it_saw() {
        let mut ledger = NoveltyLedger::from_seen(["k".to_owned(), "flag:f:x".to_owned()]);
        let record: Record = obj(json!({"family": "f", "observation_keys": ["k", "new"],
                                 "weighted_flags": {"x": 1.0}}));
        assert_eq!(
            ledger.credit(&record),
            Credit {
                novel_value: 1.0,
                novel_observation_keys: 1,
                raw_value: 3.0,
            }
        );
    }

    #[test]
    fn huge_and_non_finite_weights_keep_totals_finite() {
        let mut ledger = NoveltyLedger::new();
        let record = obj(json!({"family": "f", "observation_keys": [],
                                 "weighted_flags": {"a": 1e308, "b": 1e308, "c": "NaN", "d": "inf"}}));
        let credit = ledger.credit(&record);
        assert!(credit.raw_value.is_finite() && credit.novel_value.is_finite());
        assert_eq!(credit.raw_value, 2.0 * MAX_FLAG_WEIGHT);
        assert_eq!(ledger.raw_value(&record), 2.0 * MAX_FLAG_WEIGHT);
    }
}
