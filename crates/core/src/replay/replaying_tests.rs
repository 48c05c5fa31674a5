//! [`Replaying`] around a native adapter: the `replay-probe` double of the
//! group rules' tests, given episode groups. Its faults: the seed's apply
//! to the point and the group, the target item's to its restore and suffix.

use serde_json::json;

use super::*;
use crate::episode::adapter::{ErrorType, Record};
use crate::episode::testing::obj;
use crate::replay::Lifecycle;
use crate::replay::durable::load_points;
use crate::replay::group::tests::{Probe, ctx, injected, item, settings};
use crate::replay::point_id_for;

/// A group of the probe: the instance it was prepared in.
type GroupOf = u64;

impl EpisodeAdapter for Probe {
    type Handle = GroupOf;

    fn protocols(&self) -> Protocols {
        Protocols {
            execute: true,
            episode_groups: true,
            replay: true,
            ..Protocols::default()
        }
    }

    fn execute(&mut self, item: &Item, _: &CallContext) -> Result<Record, AdapterError> {
        self.enter("execute");
        Ok(obj(json!({"item_id": item["item_id"], "via": "execute"})))
    }

    fn prepare_episode_group(
        &mut self,
        seed: &Item,
        _: &[Item],
        _: &CallContext,
    ) -> Result<Option<Prepared<GroupOf>>, AdapterError> {
        self.enter("prepare");
        if self.has("prepare_none") {
            return Ok(None);
        }
        let prefix_record = if self.has("prefix_malformed") {
            Err(AdapterError::new(
                ErrorType::InvalidOutput,
                "the prefix record must be a JSON object, got an array",
            ))
        } else {
            Ok(obj(json!({"item_id": seed["item_id"], "via": "prefix"})))
        };
        Ok(Some(Prepared {
            handle: self.generation,
            prefix_record,
            checkpoint_ref: None,
        }))
    }

    fn execute_episode(
        &mut self,
        group: &GroupOf,
        item: &Item,
        _: &CallContext,
    ) -> Result<Record, AdapterError> {
        self.enter("execute_episode");
        Ok(obj(json!({
            "item_id": item["item_id"],
            "via": "group",
            "same_instance": self.instance == Some(*group),
        })))
    }

    fn release_episode_group(
        &mut self,
        group: GroupOf,
        _: &CallContext,
    ) -> Result<(), AdapterError> {
        if self.instance != Some(group) {
            // The group died with its instance.
            return Ok(());
        }
        self.enter("release_group");
        if self.has("group_release_fails") {
            return Err(injected("group_release_fails", "release-episode-group"));
        }
        Ok(())
    }
}

fn replaying(
    faults: &[&'static str],
    settings: Option<GroupSettings>,
    forks_children: bool,
) -> Replaying<Probe> {
    let mut probe = Probe::new(faults);
    probe.forks_children = forks_children;
    Replaying::new(probe, settings)
}

fn prepared(adapter: &mut Replaying<Probe>, items: &[Item]) -> Prepared<ReplayGroup<u64, ()>> {
    adapter
        .prepare_episode_group(&items[0], items, &ctx())
        .unwrap()
        .expect("the probe prepares a group")
}

fn calls(adapter: &Replaying<Probe>) -> Vec<&str> {
    adapter.inner().calls.iter().map(String::as_str).collect()
}

fn seed_and(ids: &[&str]) -> Vec<Item> {
    std::iter::once("seed")
        .chain(ids.iter().copied())
        .map(item)
        .collect()
}

#[test]
fn prepare_captures_the_groups_point_and_settles_it_on_the_prefix_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut adapter = replaying(&[], Some(settings(Some(dir.path()), 0, false)), false);
    let group = prepared(&mut adapter, &seed_and(&["v1"]));
    let record = group.prefix_record.as_ref().unwrap();
    let id = point_id_for("main", 1, "seed");
    assert_eq!(record["via"], "prefix", "the inner prefix record");
    assert_eq!(record["replay_point_id"], id.as_str());
    assert_eq!(record["replay_fidelity"], "exact");
    assert_eq!(group.handle.point_id(), Some(id));
    assert_eq!(group.handle.inner(), &1, "the inner handle");
    // Captured right after the prefix; exported because the run keeps
    // points.
    assert_eq!(calls(&adapter), ["prepare", "capture", "export"]);
    assert_eq!(adapter.lane().unwrap().registry.points().count(), 1);
}

#[test]
fn each_suffix_runs_from_the_point_and_the_point_is_released_before_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let mut adapter = replaying(&[], Some(settings(Some(dir.path()), 0, false)), false);
    let items = seed_and(&["v1"]);
    let group = prepared(&mut adapter, &items);
    for item in &items {
        let record = adapter
            .execute_episode(&group.handle, item, &ctx())
            .unwrap();
        assert_eq!(record["via"], "replay");
        assert_eq!(record["replay"]["branch_id"], item["item_id"]);
        assert_eq!(record["replay"]["promotion_eligible"], true);
    }
    adapter.release_episode_group(group.handle, &ctx()).unwrap();
    let calls = calls(&adapter);
    let tail = &calls[calls.len() - 3..];
    assert_eq!(tail, ["release", "drop", "release_group"], "{calls:?}");
    let lines = load_points(dir.path()).unwrap();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].point.lifecycle, Lifecycle::Released);
    assert!(lines[0].durable_state.is_some());
}

#[test]
fn a_group_without_a_usable_point_runs_its_items_on_the_inner_adapter() {
    // The capture failed: no point, the error on the prefix record.
    let mut adapter = replaying(&["capture_fails"], Some(settings(None, 0, false)), false);
    let group = prepared(&mut adapter, &seed_and(&[]));
    let record = group.prefix_record.as_ref().unwrap();
    assert_eq!(record["replay_capture_error"]["stage"], "capture");
    assert!(group.handle.point_id().is_none());
    let ran = adapter
        .execute_episode(&group.handle, &item("seed"), &ctx())
        .unwrap();
    assert_eq!(ran["via"], "group");

    // The point's binding died with its instance (a suffix trapped): the
    // next item runs on the group, not from the point.
    let mut adapter = replaying(&["suffix_traps"], Some(settings(None, 0, false)), false);
    let items = seed_and(&["v1"]);
    let group = prepared(&mut adapter, &items);
    let trapped = adapter
        .execute_episode(&group.handle, &items[0], &ctx())
        .unwrap_err();
    assert_eq!(trapped.error_type, ErrorType::Trap);
    let fallback = adapter
        .execute_episode(&group.handle, &items[1], &ctx())
        .unwrap();
    assert_eq!(fallback["via"], "group");
    assert_eq!(fallback.get("replay"), None);
    adapter.release_episode_group(group.handle, &ctx()).unwrap();
}

#[test]
fn without_replay_settings_every_call_passes_through() {
    let mut adapter = replaying(&[], None, false);
    assert!(!adapter.replays());
    let group = prepared(&mut adapter, &seed_and(&[]));
    let record = group.prefix_record.as_ref().unwrap();
    assert_eq!(record.get("replay_point_id"), None);
    assert!(group.handle.point_id().is_none());
    let ran = adapter
        .execute_episode(&group.handle, &item("seed"), &ctx())
        .unwrap();
    assert_eq!(ran["via"], "group");
    assert!(
        adapter
            .execute_episode_batch(&group.handle, &[item("seed")], &ctx())
            .is_none()
    );
    adapter.release_episode_group(group.handle, &ctx()).unwrap();
    assert_eq!(
        calls(&adapter),
        ["prepare", "execute_episode", "release_group"]
    );
    assert_eq!(
        adapter.execute(&item("x"), &ctx()).unwrap()["via"],
        "execute"
    );
}

#[test]
fn a_prepare_that_opts_out_or_returns_a_malformed_prefix_is_handled_like_the_inner_ones() {
    let mut adapter = replaying(&["prepare_none"], Some(settings(None, 0, false)), false);
    let items = seed_and(&[]);
    assert!(
        adapter
            .prepare_episode_group(&items[0], &items, &ctx())
            .unwrap()
            .is_none()
    );
    assert_eq!(calls(&adapter), ["prepare"], "nothing to capture");

    // A malformed prefix keeps its error; the point is still captured and
    // goes with the group's release.
    let dir = tempfile::tempdir().unwrap();
    let mut adapter = replaying(
        &["prefix_malformed"],
        Some(settings(Some(dir.path()), 0, false)),
        false,
    );
    let group = prepared(&mut adapter, &items);
    assert_eq!(
        group.prefix_record.as_ref().unwrap_err().error_type,
        ErrorType::InvalidOutput
    );
    assert!(group.handle.point_id().is_some());
    adapter.release_episode_group(group.handle, &ctx()).unwrap();
    assert_eq!(
        load_points(dir.path()).unwrap()[0].point.lifecycle,
        Lifecycle::Released
    );
}

#[test]
fn a_point_release_that_takes_the_instance_down_is_the_groups_failure() {
    let dir = tempfile::tempdir().unwrap();
    let mut adapter = replaying(
        &["binding_drop_traps"],
        Some(settings(Some(dir.path()), 0, false)),
        false,
    );
    let group = prepared(&mut adapter, &seed_and(&[]));
    let failure = adapter
        .release_episode_group(group.handle, &ctx())
        .unwrap_err();
    assert_eq!(failure.error_type, ErrorType::Trap);
    assert!(failure.message.contains("binding_drop_traps"), "{failure}");
    assert!(
        !calls(&adapter).contains(&"release_group"),
        "the group died with the instance"
    );
    let line = &load_points(dir.path()).unwrap()[0];
    assert_eq!(line.point.lifecycle, Lifecycle::Failed);
}

#[test]
fn a_failed_point_release_that_leaves_the_instance_is_only_the_points() {
    let dir = tempfile::tempdir().unwrap();
    let mut adapter = replaying(
        &["release_fails"],
        Some(settings(Some(dir.path()), 0, false)),
        false,
    );
    let group = prepared(&mut adapter, &seed_and(&[]));
    adapter.release_episode_group(group.handle, &ctx()).unwrap();
    assert!(calls(&adapter).contains(&"release_group"));
    let line = &load_points(dir.path()).unwrap()[0];
    assert!(line.quarantined);
    assert_eq!(line.release_error.as_ref().unwrap()["stage"], "release");

    // The group's own failed release is still the group's.
    let mut adapter = replaying(
        &["group_release_fails"],
        Some(settings(None, 0, false)),
        false,
    );
    let group = prepared(&mut adapter, &seed_and(&[]));
    let failure = adapter
        .release_episode_group(group.handle, &ctx())
        .unwrap_err();
    assert!(failure.message.contains("group_release_fails"), "{failure}");
}

#[test]
fn a_batch_runs_every_item_as_a_child_of_the_point() {
    let mut adapter = replaying(&[], Some(settings(None, 2, false)), true);
    let items = seed_and(&["v1", "v2"]);
    let group = prepared(&mut adapter, &items);
    let results = adapter
        .execute_episode_batch(&group.handle, &items, &ctx())
        .expect("children forked from the exported state");
    assert_eq!(results.len(), 3);
    for ((result, _), item) in results.iter().zip(&items) {
        let record = result.as_ref().unwrap();
        assert_eq!(record["item_id"], item["item_id"], "in order");
        assert_eq!(record["via"], "child");
        assert_eq!(record["replay"]["fork"], "state");
    }
    adapter.release_episode_group(group.handle, &ctx()).unwrap();
    let metrics = &adapter.lane().unwrap().settings.metrics;
    assert_eq!(metrics.count("child_group_success_count"), 1);
}

#[test]
fn a_batch_that_cannot_fork_children_runs_them_serially_from_the_point() {
    // Workers, but the adapter forks no children: the group is a serial
    // fallback, its items run one by one from the point.
    let mut adapter = replaying(&[], Some(settings(None, 2, false)), false);
    let items = seed_and(&["v1"]);
    let group = prepared(&mut adapter, &items);
    assert!(
        adapter
            .execute_episode_batch(&group.handle, &items, &ctx())
            .is_none()
    );
    for item in &items {
        let record = adapter
            .execute_episode(&group.handle, item, &ctx())
            .unwrap();
        assert_eq!(record["via"], "replay");
    }
    adapter.release_episode_group(group.handle, &ctx()).unwrap();
    let metrics = &adapter.lane().unwrap().settings.metrics;
    assert_eq!(metrics.count("child_serial_fallback_group_count"), 1);
    assert_eq!(metrics.count("child_group_success_count"), 1);
}

#[test]
fn a_deferred_export_is_settled_at_the_first_batch() {
    // Forking by snapshot defers the point's export to its first fork;
    // the probe takes no snapshots, so it exports the state then.
    let dir = tempfile::tempdir().unwrap();
    let mut adapter = replaying(&[], Some(settings(Some(dir.path()), 2, true)), true);
    let items = seed_and(&["v1"]);
    let group = prepared(&mut adapter, &items);
    assert_eq!(
        calls(&adapter),
        ["prepare", "capture"],
        "nothing exported yet"
    );
    let results = adapter
        .execute_episode_batch(&group.handle, &items, &ctx())
        .unwrap();
    assert!(results.iter().all(|(result, _)| result.is_ok()));
    assert!(calls(&adapter).contains(&"export"));
    adapter.release_episode_group(group.handle, &ctx()).unwrap();
    assert!(load_points(dir.path()).unwrap()[0].durable_state.is_some());
}
