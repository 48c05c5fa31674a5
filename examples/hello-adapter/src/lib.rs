//! hello-adapter: the smallest useful sandloop adapter.
//!
//! World `plain`: the component exports only `episode.execute`. The host
//! hands it one work item at a time (a JSON object with `item_id`, `family`
//! and `text`) and expects an observation record back.

// The sdk gives us the protocol as a trait over JSON objects.
use sandloop_guest::{Context, Episode, Error, Item, Record, log};

/// The adapter. The sdk builds it once per component instance with
/// `Default::default()`; it holds no state.
#[derive(Default)]
struct Hello;

impl Episode for Hello {
    /// Observe the item's text: which word lengths occur in it.
    fn execute(&self, item: Item, ctx: &Context) -> Result<Record, Error> {
        // A declared error: the host records it with
        // `adapter_error.type = "adapter_error"` and our kind
        // `invalid-item`, and the run goes on with the next item.
        let text = item.text();
        if text.trim().is_empty() {
            return Err(Error::invalid_item("item has no text"));
        }

        // Log lines are captured per item into the run directory.
        log::debug!("epoch {}: {} bytes of text", ctx.epoch, text.len());

        // `Record::new()` starts as
        // {"observation_keys": [], "weighted_flags": {}, "accepted": true}.
        let mut record = Record::new();
        let mut words = 0;
        for word in text.split_whitespace() {
            words += 1;
            // Observation keys are the novelty currency: the host credits
            // every key the run has not seen before. `observe` keeps each key
            // once.
            record.observe(format!("word_len:{}", bucket(word.chars().count())));
        }
        // A rarer fact can carry a weight: credited once per family.
        if words > 50 {
            record.flag("long_text", 2.0);
        }
        // Any other field is private to the adapter and kept in the record.
        record.set("word_count", words);
        Ok(record)
    }
}

/// Word-length buckets: 1, 2, 3, 4-5, 6-8, 9+.
fn bucket(len: usize) -> &'static str {
    match len {
        0 | 1 => "1",
        2 => "2",
        3 => "3",
        4 | 5 => "4-5",
        6..=8 => "6-8",
        _ => "9+",
    }
}

// Export `Hello` as a component of world `plain` (it exports `episode`).
sandloop_guest::export_adapter!(Hello, world = plain);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_words() {
        let item = Item::new("a", "greeting", "hi there wonderful world");
        let record = Hello.execute(item, &Context::default()).unwrap();
        assert_eq!(
            record.observation_keys(),
            vec!["word_len:2", "word_len:4-5", "word_len:9+"]
        );
        assert!(record.is_accepted());
        assert_eq!(record["word_count"], 4);
    }

    #[test]
    fn empty_text_is_declared_error() {
        let err = Hello
            .execute(Item::new("a", "f", "  "), &Context::default())
            .unwrap_err();
        assert_eq!(err.kind, "invalid-item");
    }
}
