//! Errors by class: the failed records of `records.jsonl` grouped by
//! `adapter_error.type`, with the first examples' item ids and messages.

use std::collections::BTreeMap;

use super::record_facts::RecordFacts;

/// How many examples each class keeps.
pub const EXAMPLES_PER_CLASS: usize = 3;

/// One example of an error class.
#[derive(Clone, Debug, PartialEq)]
pub struct ErrorExample {
    /// The failed record's `item_id`.
    pub item_id: String,
    /// Its epoch.
    pub epoch: u32,
    /// `adapter_error.kind`, when the adapter declared one.
    pub kind: Option<String>,
    /// `adapter_error.message`.
    pub message: String,
    /// The first lines its item's calls printed in its epoch (filled by
    /// [`super::guest_output::attach`]; empty when it printed nothing).
    pub guest_output: Vec<String>,
}

/// One error class (`deadline`, `memory_limit`, `trap`, ...).
#[derive(Clone, Debug, PartialEq)]
pub struct ErrorClass {
    /// `adapter_error.type`.
    pub class: String,
    /// Failed records of this class.
    pub count: u64,
    /// The first `EXAMPLES_PER_CLASS` of them, in file order.
    pub examples: Vec<ErrorExample>,
}

/// Every error class, by count descending, then name.
pub fn errors_by_class(records: &[RecordFacts]) -> Vec<ErrorClass> {
    let mut classes: BTreeMap<&str, ErrorClass> = BTreeMap::new();
    for record in records {
        let Some(error) = &record.error else { continue };
        let class = classes
            .entry(error.error_type.as_str())
            .or_insert_with(|| ErrorClass {
                class: error.error_type.clone(),
                count: 0,
                examples: Vec::new(),
            });
        class.count += 1;
        if class.examples.len() < EXAMPLES_PER_CLASS {
            class.examples.push(ErrorExample {
                item_id: record.item_id.clone(),
                epoch: record.epoch,
                kind: error.kind.clone(),
                message: error.message.clone(),
                guest_output: Vec::new(),
            });
        }
    }
    let mut classes: Vec<ErrorClass> = classes.into_values().collect();
    classes.sort_by_key(|class| std::cmp::Reverse(class.count));
    classes
}
