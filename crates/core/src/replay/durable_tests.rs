//! Tests of `durable.rs`: the store, the pack, resume cut-back and the
//! readers of point lines and durable bytes.

use super::*;
use crate::replay::Fidelity;
use crate::replay::point::{AgentCursor, Lifecycle, TraceCursor};

/// Why [`read_durable_state`] refuses `durable` in the run at `root` (it
/// must).
fn refusal(root: &Path, durable: &DurableState) -> String {
    read_durable_state(root, durable).unwrap_err().to_string()
}

pub(crate) fn line(id: &str, lifecycle: Lifecycle) -> PointLine {
    PointLine {
        point: ReplayPoint {
            replay_point_id: id.into(),
            cursor: TraceCursor {
                trace_id: "g".into(),
                branch_id: "main".into(),
                after_event_id: None,
                next_sequence: 0,
                agent_cursor: AgentCursor {
                    history_index: 0,
                    history_digest: "h".into(),
                    context_digest: "c".into(),
                },
            },
            fidelity: Fidelity::Exact,
            captured_projection_digest: Some("d".into()),
            lifecycle,
            created_event_id: "g/main/0".into(),
            replaces_replay_point_id: None,
        },
        arm: "main".into(),
        epoch: 1,
        execution_group_id: "g".into(),
        seed_item_id: "s".into(),
        capture_minutes: 0.001,
        durable_state: None,
        durable_error: None,
        snapshot: None,
        snapshot_error: None,
        release_error: None,
        quarantined: false,
    }
}

#[test]
fn a_point_captured_elsewhere_is_written_as_the_capturing_store_would() {
    let item: Item = serde_json::from_str(r#"{"item_id":"s"}"#).unwrap();
    // The worker's store keeps its lines in memory.
    let worker = tempfile::tempdir().unwrap();
    let capturing = ReplayStore::capturing(worker.path());
    let durable = capturing
        .write_state(b"state", std::slice::from_ref(&item))
        .unwrap();
    let mut sent = line("rp-1", Lifecycle::Released);
    sent.durable_state = Some(durable.clone());
    capturing.append_point(&sent);
    capturing.append_point(&line("rp-2", Lifecycle::Released));
    assert!(
        !worker.path().join(POINTS_FILE).exists(),
        "lines stay in memory"
    );
    let captured = capturing.take_captured_with_states().unwrap();
    assert_eq!(captured.len(), 2);
    assert!(capturing.take_captured().is_empty(), "taken once");
    assert_eq!(
        std::fs::metadata(worker.path().join(STATES_PACK))
            .unwrap()
            .len(),
        0,
        "the worker's pack is emptied once its points are taken"
    );
    let (state, items) = captured[0].files.clone().unwrap();
    assert_eq!(state, b"state");
    assert_eq!(captured[1].files, None);
    let lines: Vec<PointLine> = captured.into_iter().map(|point| point.line).collect();
    // The next unit's points start the pack again.
    let next = capturing.write_state(b"next", &[]).unwrap();
    assert_eq!(next.offset, Some(0));

    // The coordinator's store writes them, checked, where its own
    // pack puts them: after what it already holds.
    let run = tempfile::tempdir().unwrap();
    let store = ReplayStore::new(run.path());
    let own = store.write_state(b"earlier", &[]).unwrap();
    store
        .receive_point(&lines[0], Some((&state, &items)))
        .unwrap();
    store.receive_point(&lines[1], None).unwrap();
    let points = load_points(run.path()).unwrap();
    let written = points[0].durable_state.clone().unwrap();
    assert_eq!(
        written.offset,
        Some(own.size_bytes + own.items_size_bytes.unwrap())
    );
    assert_eq!(
        (&written.sha256, &written.items_sha256),
        (&durable.sha256, &durable.items_sha256)
    );
    let mut expected = lines.clone();
    expected[0].durable_state = Some(written.clone());
    assert_eq!(points, expected);
    let (bytes, read_items) = read_durable_state(run.path(), &written).unwrap();
    assert_eq!(bytes, b"state");
    assert_eq!(read_items, vec![item]);

    // What does not match its line is refused, and nothing is written.
    let other = tempfile::tempdir().unwrap();
    let store = ReplayStore::new(other.path());
    let refused = |line: &PointLine, files: Option<(&[u8], &[u8])>| {
        store.receive_point(line, files).unwrap_err()
    };
    assert!(refused(&lines[0], Some((b"forged", &items))).contains("sha256"));
    assert!(refused(&lines[0], Some((&state, b"[]"))).contains("items_sha256"));
    assert!(refused(&lines[0], None).contains("was not sent"));
    assert!(refused(&lines[1], Some((&state, &items))).contains("without a durable_state"));
    let mut snapshot = lines[0].clone();
    snapshot.durable_state.as_mut().unwrap().kind = DurableKind::Snapshot;
    assert!(refused(&snapshot, Some((&state, &items))).contains("Snapshot"));
    assert!(!other.path().join(POINTS_FILE).exists());
    assert!(!other.path().join(STATES_DIR).exists());
    // The sender's file names are not the receiver's: one naming a
    // path outside the run is written where the receiver writes.
    let mut escaping = lines[0].clone();
    escaping.durable_state.as_mut().unwrap().file = "../outside.bin".into();
    store
        .receive_point(&escaping, Some((&state, &items)))
        .unwrap();
    assert_eq!(
        load_points(other.path()).unwrap()[0]
            .durable_state
            .as_ref()
            .unwrap()
            .file,
        STATES_PACK
    );
    assert!(!other.path().join("../outside.bin").exists());
}

#[test]
fn packed_states_follow_one_another_and_a_damaged_range_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let store = ReplayStore::new(dir.path());
    let item: Item = serde_json::from_str(r#"{"item_id":"s"}"#).unwrap();
    let first = store
        .write_state(b"one", std::slice::from_ref(&item))
        .unwrap();
    let second = store.write_state(b"second", &[]).unwrap();
    assert_eq!((first.file.as_str(), first.offset), (STATES_PACK, Some(0)));
    assert_eq!(first.items_offset, Some(3));
    let first_end = 3 + first.items_size_bytes.unwrap();
    assert_eq!(second.offset, Some(first_end));
    assert_eq!(read_durable_state(dir.path(), &first).unwrap().0, b"one");
    assert_eq!(
        read_durable_state(dir.path(), &second).unwrap().0,
        b"second"
    );

    // A store opened later (a resumed run) appends after what is there.
    let later = ReplayStore::new(dir.path());
    let third = later.write_state(b"3", &[]).unwrap();
    assert_eq!(
        third.offset,
        Some(second.items_offset.unwrap() + second.items_size_bytes.unwrap())
    );

    // One flipped byte of the second state: the second is refused,
    // naming the pack and the offset; the first still reads.
    let pack = dir.path().join(STATES_PACK);
    let mut bytes = std::fs::read(&pack).unwrap();
    bytes[first_end as usize] ^= 1;
    std::fs::write(&pack, &bytes).unwrap();
    let error = refusal(dir.path(), &second);
    assert!(
        error.contains("states.pack was changed after the run wrote it"),
        "{error}"
    );
    assert!(error.contains(&format!("at offset {first_end}")), "{error}");
    assert_eq!(read_durable_state(dir.path(), &first).unwrap().0, b"one");

    // A range past the end, or one so large it would overflow, is
    // refused without reading (or allocating) it.
    for (offset, size) in [(bytes.len() as u64, 1), (1, u64::MAX), (u64::MAX, 2)] {
        let mut past = first.clone();
        past.offset = Some(offset);
        past.size_bytes = size;
        let error = refusal(dir.path(), &past);
        assert!(error.contains("too short for the recorded"), "{error}");
    }
    // A symbolic link where the pack would be is not written through.
    let linked = tempfile::tempdir().unwrap();
    std::fs::create_dir(linked.path().join(STATES_DIR)).unwrap();
    let target = linked.path().join("elsewhere");
    std::fs::write(&target, b"").unwrap();
    std::os::unix::fs::symlink(&target, linked.path().join(STATES_PACK)).unwrap();
    let error = ReplayStore::new(linked.path())
        .write_state(b"x", &[])
        .unwrap_err()
        .to_string();
    assert!(error.contains("symbolic link"), "{error}");
    assert_eq!(std::fs::read(&target).unwrap(), b"");
}

#[test]
fn the_last_line_of_each_point_wins_and_states_are_verified() {
    let dir = tempfile::tempdir().unwrap();
    let store = ReplayStore::new(dir.path());
    let item: Item = serde_json::from_str(r#"{"item_id":"s"}"#).unwrap();
    let durable = store.write_state(b"state", &[item]).unwrap();
    assert_eq!(durable.size_bytes, 5);
    let mut first = line("rp-1", Lifecycle::Ready);
    first.durable_state = Some(durable.clone());
    store.append_point(&first);
    store.append_point(&line("rp-2", Lifecycle::Released));
    let mut again = first.clone();
    again.point.lifecycle = Lifecycle::Released;
    store.append_point(&again);
    let points = load_points(dir.path()).unwrap();
    assert_eq!(points.len(), 2);
    assert_eq!(points[0], again);
    assert_eq!(points[1].point.replay_point_id, "rp-2");

    let (bytes, items) = read_durable_state(dir.path(), &durable).unwrap();
    assert_eq!(bytes, b"state");
    assert_eq!(items[0]["item_id"], "s");
    // The items of a line written before packs, in a file of their own.
    let items_path = dir.path().join("replay-points/rp-1.items.json");
    let (_, items_json) = read_durable_bytes(dir.path(), &durable).unwrap();
    let items_text = String::from_utf8(items_json).unwrap();
    std::fs::write(&items_path, &items_text).unwrap();
    let mut own_file = durable.clone();
    own_file.items_file = "replay-points/rp-1.items.json".into();
    (own_file.items_offset, own_file.items_size_bytes) = (None, None);
    assert_eq!(read_durable_state(dir.path(), &own_file).unwrap().1, items);
    std::fs::write(&items_path, items_text.replace("\"s\"", "\"t\"")).unwrap();
    let error = refusal(dir.path(), &own_file);
    assert!(
        error.contains("items.json was changed after the run wrote it"),
        "{error}"
    );
    std::fs::write(&items_path, items_text).unwrap();
    std::fs::write(dir.path().join("replay-points/rp-1.bin"), b"stale").unwrap();
    own_file.file = "replay-points/rp-1.bin".into();
    own_file.offset = None;
    let error = refusal(dir.path(), &own_file);
    assert!(
        error.contains("was changed after the run wrote it (sha256"),
        "{error}"
    );
    for outside in [
        "/etc/hostname",
        "replay-points/../../x.bin",
        "records.jsonl",
        "replay-points/",
    ] {
        let mut escaped = durable.clone();
        escaped.file = outside.into();
        let error = refusal(dir.path(), &escaped);
        assert!(
            error.contains("which is not a file under replay-points/"),
            "{outside}: {error}"
        );
    }
}

#[test]
fn snapshot_points_keep_their_kind_and_binding_token() {
    let dir = tempfile::tempdir().unwrap();
    let store = ReplayStore::new(dir.path());
    let item: Item = serde_json::from_str(r#"{"item_id":"s"}"#).unwrap();
    let durable = store
        .write_snapshot("rp-1", b"\0asm\x0d\0\x01\0", 42, &[item])
        .unwrap();
    assert_eq!(durable.kind, DurableKind::Snapshot);
    assert_eq!(durable.file, "replay-points/rp-1.wasm");
    assert_eq!(durable.binding_token, Some(42));
    let mut point = line("rp-1", Lifecycle::Released);
    point.durable_state = Some(durable.clone());
    store.append_point(&point);
    let text = std::fs::read_to_string(dir.path().join(POINTS_FILE)).unwrap();
    assert!(text.contains(r#""kind":"snapshot""#), "{text}");
    assert!(text.contains(r#""binding_token":42"#), "{text}");
    assert_eq!(load_points(dir.path()).unwrap()[0], point);
    let (bytes, items) = read_durable_state(dir.path(), &durable).unwrap();
    assert_eq!(bytes.len(), 8);
    assert_eq!(items[0]["item_id"], "s");

    // A line without `kind` (written before snapshots) is a state, and a
    // snapshot that lost its token is refused by name.
    let legacy: DurableState = serde_json::from_value(serde_json::json!({
        "file": "replay-points/rp-0.bin", "sha256": "00", "size_bytes": 1,
        "items_file": "replay-points/rp-0.items.json", "items_sha256": "00",
    }))
    .unwrap();
    assert_eq!(legacy.kind, DurableKind::State);
    assert_eq!(legacy.binding_token, None);
    let mut tokenless = durable;
    tokenless.binding_token = None;
    let error = refusal(dir.path(), &tokenless);
    assert!(error.contains("binding_token"), "{error}");

    // A malformed field of a line is named by its path.
    let mut record = point.to_record();
    record["durable_state"]["binding_token"] = serde_json::json!(-1);
    let error = PointLine::from_record(&record).unwrap_err();
    assert!(
        error.starts_with("durable_state.binding_token: "),
        "{error}"
    );
}

#[test]
fn durable_snapshots_stop_at_the_budget_counting_a_resumed_runs_own() {
    let dir = tempfile::tempdir().unwrap();
    let store = ReplayStore::new(dir.path()).with_snapshot_budget(10);
    store.write_snapshot("rp-a", &[1; 6], 1, &[]).unwrap();
    let error = store
        .write_snapshot("rp-b", &[2; 6], 2, &[])
        .unwrap_err()
        .to_string();
    assert!(error.contains("--max-durable-snapshots"), "{error}");
    assert!(!dir.path().join("replay-points/rp-b.wasm").exists());
    store.write_snapshot("rp-c", &[3; 4], 3, &[]).unwrap();
    // Exported states do not count.
    store.write_state(&[4; 64], &[]).unwrap();

    // A resumed run starts from what is already there.
    let again = ReplayStore::new(dir.path()).with_snapshot_budget(12);
    assert!(again.write_snapshot("rp-e", &[5; 3], 5, &[]).is_err());
    again.write_snapshot("rp-e", &[5; 2], 5, &[]).unwrap();
}

#[test]
fn resume_drops_the_points_of_epochs_that_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = ReplayStore::new(dir.path());
    for (id, epoch) in [("rp-a", 1), ("rp-b", 2), ("rp-c", 3)] {
        let mut point = line(id, Lifecycle::Released);
        point.epoch = epoch;
        point.durable_state = Some(if epoch == 3 {
            store.write_snapshot(id, b"\0asm", 7, &[]).unwrap()
        } else {
            store.write_state(id.as_bytes(), &[]).unwrap()
        });
        store.append_point(&point);
    }
    assert!(dir.path().join("replay-points/rp-c.wasm").exists());
    let pack = dir.path().join(STATES_PACK);
    assert_eq!(std::fs::metadata(&pack).unwrap().len(), 2 * (4 + 2));
    assert_eq!(cut_back_points(dir.path(), 2).unwrap(), 2);
    let points = load_points(dir.path()).unwrap();
    assert_eq!(points.len(), 1);
    assert_eq!(points[0].point.replay_point_id, "rp-a");
    let kept = points[0].durable_state.as_ref().unwrap();
    assert_eq!(read_durable_state(dir.path(), kept).unwrap().0, b"rp-a");
    assert_eq!(
        std::fs::metadata(&pack).unwrap().len(),
        4 + 2,
        "rp-b's bytes are cut off the pack"
    );
    assert!(!dir.path().join("replay-points/rp-c.wasm").exists());
    assert!(!dir.path().join("replay-points/rp-c.items.json").exists());
    assert_eq!(cut_back_points(dir.path(), 2).unwrap(), 0);
}

#[test]
fn resume_refuses_a_pack_too_short_for_its_kept_points_and_cuts_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let store = ReplayStore::new(dir.path());
    for (id, epoch) in [("rp-a", 1), ("rp-b", 2)] {
        let mut point = line(id, Lifecycle::Released);
        point.epoch = epoch;
        point.durable_state = Some(store.write_state(id.as_bytes(), &[]).unwrap());
        store.append_point(&point);
    }
    drop(store);
    let (pack, points) = (dir.path().join(STATES_PACK), dir.path().join(POINTS_FILE));
    let lines_before = std::fs::read_to_string(&points).unwrap();
    // A killed run's torn tail: bytes no line names.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&pack)
        .unwrap()
        .write_all(b"torn")
        .unwrap();
    assert_eq!(cut_back_points(dir.path(), 3).unwrap(), 0, "both kept");
    assert_eq!(
        std::fs::metadata(&pack).unwrap().len(),
        12,
        "the tail is cut"
    );
    assert_eq!(std::fs::read_to_string(&points).unwrap(), lines_before);

    // rp-b's bytes lost: a resume keeping it stops and changes nothing.
    let file = std::fs::OpenOptions::new().write(true).open(&pack).unwrap();
    file.set_len(8).unwrap();
    let error = cut_back_points(dir.path(), 3).unwrap_err().to_string();
    assert!(
        error.contains(
            "states.pack is 8 bytes, but the points of the epochs the checkpoint covers \
             need its first 12 bytes: --resume stops here and changes nothing"
        ),
        "{error}"
    );
    assert_eq!(std::fs::read_to_string(&points).unwrap(), lines_before);
    assert_eq!(std::fs::metadata(&pack).unwrap().len(), 8);
    // One that runs rp-b's epoch again drops it and keeps rp-a's bytes.
    assert_eq!(cut_back_points(dir.path(), 2).unwrap(), 1);
    assert_eq!(std::fs::metadata(&pack).unwrap().len(), 6);
    // A missing pack the kept points need is refused too.
    std::fs::remove_file(&pack).unwrap();
    let error = cut_back_points(dir.path(), 2).unwrap_err().to_string();
    assert!(error.contains("states.pack is missing, but"), "{error}");
}

#[test]
fn a_fifo_or_a_directory_where_a_point_file_is_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = ReplayStore::new(dir.path());
    let durable = store.write_state(b"state", &[]).unwrap();
    let mut point = line("rp-1", Lifecycle::Released);
    point.durable_state = Some(durable.clone());
    store.append_point(&point);
    drop(store);
    let pack = dir.path().join(STATES_PACK);
    std::fs::remove_file(&pack).unwrap();
    let made = std::process::Command::new("mkfifo").arg(&pack).status();
    assert!(made.unwrap().success());
    let error = refusal(dir.path(), &durable);
    assert!(error.contains("is a FIFO, not a regular file"), "{error}");
    let points = dir.path().join(POINTS_FILE);
    std::fs::remove_file(&points).unwrap();
    std::fs::create_dir(&points).unwrap();
    let error = load_points(dir.path()).unwrap_err().to_string();
    assert!(
        error.contains("is a directory, not a regular file"),
        "{error}"
    );
    // A line naming the pack without an offset is refused, not read whole.
    let mut whole = durable;
    whole.offset = None;
    let error = refusal(dir.path(), &whole);
    assert!(error.contains("without an offset"), "{error}");
}

#[test]
fn resume_refuses_a_damaged_line_that_may_be_a_checkpointed_point() {
    let dir = tempfile::tempdir().unwrap();
    let store = ReplayStore::new(dir.path());
    for (id, epoch) in [("rp-a", 1), ("rp-b", 1), ("rp-c", 2)] {
        let mut point = line(id, Lifecycle::Released);
        point.epoch = epoch;
        point.durable_state = Some(store.write_state(b"x", &[]).unwrap());
        store.append_point(&point);
    }
    let path = dir.path().join(POINTS_FILE);
    let whole = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = whole.lines().collect();
    // The first point of epoch 1, cut in half, before other points.
    let cut = format!(
        "{}\n{}\n{}\n",
        &lines[0][..lines[0].len() / 2],
        lines[1],
        lines[2]
    );
    std::fs::write(&path, &cut).unwrap();
    let error = cut_back_points(dir.path(), 2).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("replay-points.jsonl:1: this line is damaged"),
        "{error}"
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        cut,
        "nothing changed"
    );
    assert_eq!(
        std::fs::metadata(dir.path().join(STATES_PACK))
            .unwrap()
            .len(),
        3 * 3
    );
    // The last point of epoch 1 cut in half at the end, its epoch still
    // legible: refused too.
    let cut = format!("{}\n{}\n", lines[0], &lines[1][..lines[1].len() - 3]);
    std::fs::write(&path, &cut).unwrap();
    assert!(
        cut_back_points(dir.path(), 2)
            .unwrap_err()
            .to_string()
            .contains(":2:")
    );
    // A torn tail of the epoch that runs again is dropped.
    let cut = format!(
        "{}\n{}\n{}",
        lines[0],
        lines[1],
        &lines[2][..lines[2].len() - 3]
    );
    std::fs::write(&path, &cut).unwrap();
    assert_eq!(cut_back_points(dir.path(), 2).unwrap(), 1);
    assert_eq!(load_points(dir.path()).unwrap().len(), 2);
}

#[test]
fn missing_and_malformed_point_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let error = load_points(dir.path()).unwrap_err().to_string();
    assert!(error.contains("has no replay-points.jsonl"), "{error}");
    std::fs::write(
        dir.path().join(POINTS_FILE),
        "{\"replay_point_id\": \"x\"}\n",
    )
    .unwrap();
    let error = load_points(dir.path()).unwrap_err().to_string();
    assert!(error.contains("replay-points.jsonl:1:"), "{error}");
    assert!(error.contains("trace_id"), "{error}");
}

#[test]
fn a_field_of_the_wrong_type_is_named_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut record = line("rp-1", Lifecycle::Ready).to_record();
    record["trace_id"] = serde_json::json!(5);
    let text = format!(
        "{}\n{}\n",
        serde_json::to_string(&line("rp-0", Lifecycle::Ready).to_record()).unwrap(),
        serde_json::to_string(&record).unwrap()
    );
    std::fs::write(dir.path().join(POINTS_FILE), text).unwrap();
    let error = load_points(dir.path()).unwrap_err().to_string();
    assert!(
        error.contains("replay-points.jsonl:2: trace_id: "),
        "{error}"
    );
}

#[test]
fn invalid_utf8_in_a_point_line_is_named_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = serde_json::to_vec(&line("rp-0", Lifecycle::Ready).to_record()).unwrap();
    text.extend_from_slice(b"\n{\"replay_point_id\": \"\xff\"}\n");
    std::fs::write(dir.path().join(POINTS_FILE), text).unwrap();
    let error = load_points(dir.path()).unwrap_err().to_string();
    assert!(error.contains("replay-points.jsonl:2: "), "{error}");
}

mod props {
    use super::*;
    use crate::hostile_inputs::{
        config, hostile_string, json_value, mutate_bytes, read_temp_file,
        with_a_leaf_of_another_type,
    };
    use proptest::prelude::*;

    fn durable_line(n: usize) -> Map<String, Value> {
        let mut point = line(&format!("rp-{n}"), Lifecycle::Released);
        point.durable_state = Some(DurableState {
            kind: DurableKind::Snapshot,
            file: format!("{STATES_DIR}/rp-{n}.wasm"),
            sha256: "00".into(),
            size_bytes: 4,
            offset: None,
            items_file: format!("{STATES_DIR}/rp-{n}.items.json"),
            items_sha256: "00".into(),
            items_offset: None,
            items_size_bytes: None,
            binding_token: Some(7),
        });
        point.snapshot = Some(serde_json::json!({"bytes": 4}));
        point.to_record()
    }

    /// Lines `0..before` valid, then `bad`, then `after` valid lines.
    fn around(before: usize, bad: &[u8], after: usize) -> Vec<u8> {
        let mut text = Vec::new();
        for n in 0..before {
            text.extend(serde_json::to_vec(&durable_line(n)).unwrap());
            text.push(b'\n');
        }
        text.extend_from_slice(bad);
        text.push(b'\n');
        for n in 0..after {
            text.extend(serde_json::to_vec(&durable_line(100 + n)).unwrap());
            text.push(b'\n');
        }
        text
    }

    fn load_bytes(bytes: &[u8]) -> (tempfile::TempDir, Result<Vec<PointLine>, DurableError>) {
        let (dir, _, result) = read_temp_file(POINTS_FILE, bytes, |path| {
            load_points(path.parent().expect("in a directory"))
        });
        (dir, result)
    }

    proptest! {
        #![proptest_config(config(128))]

        #[test]
        fn prop_replay_points_any_bytes_never_panic_and_errors_name_file_and_line(
            bytes in prop::collection::vec(any::<u8>(), 0..512),
            next_epoch in any::<u32>(),
        ) {
            let (dir, result) = load_bytes(&bytes);
            if let Err(error) = result {
                let shown = dir.path().join(POINTS_FILE).display().to_string();
                let text = error.to_string();
                prop_assert!(text.starts_with(&shown), "{}", text);
                let DurableError::Malformed { line, .. } = error else {
                    return Err(TestCaseError::fail(format!("no line in {text}")));
                };
                prop_assert!(line >= 1 && line <= bytes.split(|b| *b == b'\n').count());
            }
            // Resume's cut-back reads the same file leniently.
            let _ = cut_back_points(dir.path(), next_epoch);
        }

        #[test]
        fn prop_replay_points_a_damaged_line_is_named_by_number(
            before in 0usize..3,
            after in 0usize..3,
            bad in (0usize..50).prop_flat_map(|n| {
                mutate_bytes(serde_json::to_vec(&durable_line(n)).unwrap(), true)
            }),
        ) {
            let (dir, result) = load_bytes(&around(before, &bad, after));
            if let Err(error) = result {
                let shown = format!("{}:{}: ", dir.path().join(POINTS_FILE).display(), before + 1);
                let text = error.to_string();
                prop_assert!(text.starts_with(&shown), "{}", text);
            }
        }

        #[test]
        fn prop_replay_points_a_field_of_another_type_names_line_and_field(
            before in 0usize..3,
            (record, key) in with_a_leaf_of_another_type(
                Value::Object(durable_line(0)),
                // `snapshot` holds any JSON.
                |pointer| !pointer.starts_with("/snapshot"),
            ),
        ) {
            let (dir, result) = load_bytes(&around(before, &serde_json::to_vec(&record).unwrap(), 1));
            let text = result.unwrap_err().to_string();
            let shown = format!("{}:{}: ", dir.path().join(POINTS_FILE).display(), before + 1);
            prop_assert!(text.starts_with(&shown), "{}", text);
            prop_assert!(text[shown.len()..].contains(&key), "{} not named in {}", key, text);
        }

        #[test]
        fn prop_durable_state_files_stay_under_the_points_folder(
            file in prop_oneof![hostile_string(), hostile_string().prop_map(|s| format!("{STATES_DIR}/{s}"))],
            items_file in prop_oneof![hostile_string(), hostile_string().prop_map(|s| format!("{STATES_DIR}/{s}"))],
            size_bytes in any::<u64>(),
            offset in any::<Option<u64>>(),
            items_range in any::<Option<(u64, u64)>>(),
            snapshot in any::<bool>(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let durable = DurableState {
                kind: if snapshot { DurableKind::Snapshot } else { DurableKind::State },
                file,
                sha256: String::new(),
                size_bytes,
                offset,
                items_file,
                items_sha256: String::new(),
                items_offset: items_range.map(|(offset, _)| offset),
                items_size_bytes: items_range.map(|(_, size)| size),
                binding_token: Some(1),
            };
            match read_durable_state(dir.path(), &durable) {
                Ok(_) => prop_assert!(false, "nothing was written, nothing can be read"),
                Err(DurableError::Tampered { .. }) => {}
                Err(error) => {
                    prop_assert!(is_state_file_name(&durable.file), "{}", error);
                    prop_assert!(is_state_file_name(&durable.items_file), "{}", error);
                    prop_assert!(error.to_string().contains(&dir.path().display().to_string()));
                }
            }
        }

        #[test]
        fn prop_durable_items_a_damaged_file_is_named_with_its_line(
            items in prop::collection::vec(json_value(), 0..4).prop_flat_map(|items| {
                mutate_bytes(serde_json::to_vec_pretty(&items).unwrap(), false)
            }),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let store = ReplayStore::new(dir.path());
            let mut durable = store.write_state(b"state", &[]).unwrap();
            // Items in a file of their own (a line written before packs).
            durable.items_file = format!("{STATES_DIR}/rp-1.items.json");
            (durable.items_offset, durable.items_size_bytes) = (None, None);
            let items_path = dir.path().join(&durable.items_file);
            std::fs::write(&items_path, &items).unwrap();
            // A tamperer who also rewrites the recorded digest.
            durable.items_sha256 = crate::digest::sha256_hex(&items);
            if let Err(error) = read_durable_state(dir.path(), &durable) {
                let text = error.to_string();
                prop_assert!(text.contains(&items_path.display().to_string()), "{}", text);
                if let DurableError::Malformed { line, .. } = error {
                    prop_assert!(line >= 1 && line <= items.split(|b| *b == b'\n').count());
                }
            }
        }
    }
}
