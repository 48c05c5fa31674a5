//! {{name}}: a sandloop adapter.
//!
//! World `plain` of `wit/adapter.wit`: the component exports one interface,
//! `sandloop:adapter/episode@0.2.0`, with one function, `execute`. The host
//! calls it once per work item — a JSON object such as
//! `{"item_id": "a", "text": "some words"}`, one line of items.jsonl — and
//! expects an observation record back (a JSON object).

// Generate the bindings for world `plain` from the WIT in ./wit.
wit_bindgen::generate!({ path: "wit", world: "plain" });

use exports::sandloop::adapter::episode::Guest;
use sandloop::adapter::log::{Level, log};
use sandloop::adapter::types::{AdapterError, Context};
use serde_json::{Value, json};

/// The adapter. It holds no state; every call gets one item.
struct Adapter;

impl Guest for Adapter {
    /// Observe one item: which distinct words its `text` holds.
    fn execute(item: String, ctx: Context) -> Result<String, AdapterError> {
        let item: Value = serde_json::from_str(&item)
            .map_err(|error| invalid_item(format!("item is not JSON: {error}")))?;
        let item_id = item["item_id"].as_str().unwrap_or("?");

        // A declared error: the host records it as an error record with
        // `adapter_error.type = "adapter_error"` and our `kind`, and the run
        // goes on with the next item.
        let Some(text) = item["text"].as_str() else {
            return Err(invalid_item(format!("item {item_id} has no `text`")));
        };

        // Log lines are captured per item into the run directory
        // (adapter-output/epoch-NNNN.jsonl).
        log(
            Level::Debug,
            &format!("epoch {}: item {item_id}, {} bytes", ctx.epoch, text.len()),
        );

        // Observation keys are the novelty currency: the host credits every
        // key the run has not seen before.
        let mut keys: Vec<String> = text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|word| !word.is_empty())
            .map(|word| format!("word:{}", word.to_lowercase()))
            .collect();
        keys.sort();
        keys.dedup();

        // Any other field is the adapter's own and is kept in the record.
        let record = json!({
            "observation_keys": keys,
            "accepted": true,
            "word_count": text.split_whitespace().count(),
        });
        Ok(record.to_string())
    }
}

/// An `adapter-error` for an item this adapter cannot run.
fn invalid_item(message: String) -> AdapterError {
    AdapterError {
        kind: "invalid-item".to_string(),
        message,
        retryable_infra_error: false,
    }
}

// Export `Adapter` as the component's implementation of world `plain`.
export!(Adapter);
