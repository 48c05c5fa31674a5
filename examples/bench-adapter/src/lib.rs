//! bench-adapter: the cheapest possible adapter, to measure host overhead.
//!
//! World `grouped` (`episode` + `episode-groups`). Every call returns a
//! fixed record from a static string: no JSON parsing, no allocation beyond
//! the one copy the canonical ABI needs for the returned string. It
//! implements the generated `Guest` traits directly instead of the sdk's
//! serde-based protocol traits, so the guest's share of a call is as close
//! to zero as a component can get.

use sandloop_guest::wit::types::{AdapterError, Context};
use sandloop_guest::worlds::grouped::{episode, episode_groups};

/// Observation record of every item.
const RECORD: &str = r#"{"observation_keys":["k"],"accepted":true}"#;
/// Observation record of every shared prefix.
const PREFIX: &str = r#"{"observation_keys":["prefix"],"accepted":true}"#;

struct Bench;

/// The group state: nothing.
struct BenchGroup;

impl episode_groups::GuestEpisodeGroup for BenchGroup {}

impl episode::Guest for Bench {
    fn execute(_item: String, _ctx: Context) -> Result<String, AdapterError> {
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
        _item: String,
        _ctx: Context,
    ) -> Result<String, AdapterError> {
        Ok(RECORD.to_owned())
    }

    fn release_episode_group(
        _group: episode_groups::EpisodeGroup,
        _ctx: Context,
    ) -> Result<(), AdapterError> {
        Ok(())
    }
}

sandloop_guest::worlds::grouped::export!(Bench);
