//! Value by family (raw vs novel, from `records.jsonl`) and the variant
//! catalog's yield per spec family (specs taken, from the frontier audits
//! of `epochs.jsonl`, against what their variant records earned).

use std::collections::BTreeMap;

use crate::harness::EpochSummary;

use super::record_facts::{RecordFacts, RecordKind};

/// Raw and novel value of one family's records.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FamilyValue {
    /// The family (`""` for records without one).
    pub family: String,
    /// Its records (shared prefixes included).
    pub records: u64,
    /// Sum of their `raw_value`.
    pub raw_value: f64,
    /// Sum of their `novel_value`.
    pub novel_value: f64,
}

/// What the catalog's specs of one seed family yielded.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpecYield {
    /// The seed family the specs were compiled against.
    pub family: String,
    /// Specs taken from the catalog (frontier audits, every epoch).
    pub specs_taken: usize,
    /// Of those, specs whose compilation failed.
    pub compile_errors: usize,
    /// Variant records of the family (prefixes excluded).
    pub variant_records: u64,
    /// Variant records that failed.
    pub variant_errors: u64,
    /// Novel value of the family's variant records.
    pub novel_value: f64,
    /// Raw value of the family's variant records.
    pub raw_value: f64,
}

impl SpecYield {
    /// Novel value per spec taken (0 when none was).
    pub fn novel_per_spec(&self) -> f64 {
        if self.specs_taken == 0 {
            0.0
        } else {
            self.novel_value / self.specs_taken as f64
        }
    }
}

/// Every family's value, by novel value descending, then name.
pub fn value_by_family(records: &[RecordFacts]) -> Vec<FamilyValue> {
    let mut families: BTreeMap<&str, FamilyValue> = BTreeMap::new();
    for record in records {
        let entry = families
            .entry(record.family.as_str())
            .or_insert_with(|| FamilyValue {
                family: record.family.clone(),
                ..FamilyValue::default()
            });
        entry.records += 1;
        entry.raw_value += record.raw_value;
        entry.novel_value += record.novel_value;
    }
    let mut families: Vec<FamilyValue> = families.into_values().collect();
    families.sort_by(|a, b| b.novel_value.total_cmp(&a.novel_value));
    families
}

/// The catalog's yield per seed family, by family name; empty when the
/// run had no catalog.
pub fn spec_yield(epochs: &[EpochSummary], records: &[RecordFacts]) -> Vec<SpecYield> {
    fn entry<'a>(families: &'a mut BTreeMap<String, SpecYield>, family: &str) -> &'a mut SpecYield {
        families
            .entry(family.to_owned())
            .or_insert_with(|| SpecYield {
                family: family.to_owned(),
                ..SpecYield::default()
            })
    }
    let mut families: BTreeMap<String, SpecYield> = BTreeMap::new();
    for frontier in epochs.iter().filter_map(|epoch| epoch.frontier.as_ref()) {
        for spec in &frontier.specs {
            let family = entry(&mut families, &spec.seed_family);
            family.specs_taken += 1;
            family.compile_errors += usize::from(spec.compile_error);
        }
    }
    let had_catalog = epochs.iter().any(|epoch| epoch.frontier.is_some());
    for record in records {
        if !had_catalog || !record.is_variant || record.kind == RecordKind::Prefix {
            continue;
        }
        let family = entry(&mut families, &record.family);
        family.variant_records += 1;
        family.variant_errors += u64::from(record.error.is_some());
        family.novel_value += record.novel_value;
        family.raw_value += record.raw_value;
    }
    families.into_values().collect()
}
