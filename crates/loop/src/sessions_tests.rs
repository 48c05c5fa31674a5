use std::collections::HashSet;

use super::*;

const GOAL_HASH: &str = "3f2a9c1d0b7e";

fn new_session<'a>(session_id: &'a str, parent: Option<&'a str>) -> NewSession<'a> {
    NewSession {
        session_id,
        goal_hash: GOAL_HASH,
        goal: "Ship the thing.  \n\n",
        workflow_set: "main",
        parent_session_id: parent,
    }
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn is_rfc3339_seconds(stamp: &str) -> bool {
    let b = stamp.as_bytes();
    b.len() == 20
        && stamp.char_indices().all(|(i, c)| match i {
            4 | 7 => c == '-',
            10 => c == 'T',
            13 | 16 => c == ':',
            19 => c == 'Z',
            _ => c.is_ascii_digit(),
        })
}

#[test]
fn session_id_has_stamp_goal_hash_and_hex_suffix() {
    let id = create_session_id(GOAL_HASH);
    let parts: Vec<&str> = id.split('_').collect();
    assert_eq!(parts.len(), 4, "{id}");
    assert_eq!(parts[0].len(), 8, "{id}");
    assert_eq!(parts[1].len(), 6, "{id}");
    assert!(
        parts[0]
            .bytes()
            .chain(parts[1].bytes())
            .all(|b| b.is_ascii_digit()),
        "{id}"
    );
    assert!(parts[0].starts_with("20"), "{id}");
    assert_eq!(parts[2], GOAL_HASH);
    assert_eq!(parts[3].len(), SESSION_ID_SUFFIX_LEN, "{id}");
    assert!(
        parts[3]
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        "{id}"
    );
}

#[test]
fn stamps_are_derived_from_rfc3339_utc_seconds() {
    assert_eq!(compact_stamp("2026-11-29T23:30:05Z"), "20261129_233005");
    let basic = basic_utc_stamp();
    assert_eq!(basic.len(), 16, "{basic}");
    assert_eq!(&basic[8..9], "T");
    assert!(basic.ends_with('Z'));
}

#[test]
fn ten_thousand_session_ids_are_distinct_even_in_one_second() {
    let ids: Vec<String> = (0..10_000).map(|_| create_session_id(GOAL_HASH)).collect();
    let distinct: HashSet<&str> = ids.iter().map(String::as_str).collect();
    assert_eq!(distinct.len(), ids.len());
    // The suffixes alone are distinct too, so ids of one second never clash.
    let suffixes: HashSet<&str> = ids
        .iter()
        .map(|id| &id[id.len() - SESSION_ID_SUFFIX_LEN..])
        .collect();
    assert_eq!(suffixes.len(), ids.len());
}

#[test]
fn session_ids_from_several_threads_are_distinct() {
    let handles: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(|| {
                (0..2_500)
                    .map(|_| create_session_id(GOAL_HASH))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut all = HashSet::new();
    for handle in handles {
        for id in handle.join().unwrap() {
            assert!(all.insert(id.clone()), "duplicate {id}");
        }
    }
    assert_eq!(all.len(), 10_000);
}

#[test]
fn top_level_session_layout() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    let dir = create_session_dir(root, &new_session("s1", None)).unwrap();
    assert_eq!(dir, root.join(".sandloop/sessions/s1"));
    assert_eq!(session_dir_path(root, "s1"), dir);

    let metadata: SessionMetadata = serde_json::from_str(&read(&dir.join("session.json"))).unwrap();
    assert_eq!(metadata.session_id, "s1");
    assert_eq!(metadata.goal_hash, GOAL_HASH);
    assert_eq!(metadata.workflow_set, "main");
    assert_eq!(metadata.parent_session_id, None);
    assert!(
        is_rfc3339_seconds(&metadata.created_at),
        "{}",
        metadata.created_at
    );
    // Key order and formatting are the reference's json.dumps(indent=2).
    assert_eq!(
        read(&dir.join("session.json")),
        format!(
            "{{\n  \"session_id\": \"s1\",\n  \"goal_hash\": \"{GOAL_HASH}\",\n  \"workflow_set\": \"main\",\n  \"parent_session_id\": null,\n  \"created_at\": \"{}\"\n}}",
            metadata.created_at
        )
    );
    assert!(!dir.join("parent.json").exists());
    assert_eq!(read(&dir.join("goal.md")), "Ship the thing.\n");
    assert_eq!(
        read(&dir.join("children.json")),
        "{\n  \"schema_version\": 1,\n  \"children\": []\n}"
    );
    assert_eq!(
        read(&dir.join("control.json")),
        "{\n  \"state\": \"running\",\n  \"reason\": \"session active\",\n  \"stop_reason\": null,\n  \"schema_version\": 1\n}"
    );
    assert_eq!(read(&dir.join("events.jsonl")), "");
    assert_eq!(read(&dir.join("updates_from_user.md")), "");
    assert_eq!(
        read(&dir.join("project_state/finished.md")),
        "# Finished Work\n"
    );
    for sub in [
        "child_requests",
        "project_state",
        "eval_checks",
        "harness_outputs",
        "iterations",
    ] {
        assert!(dir.join(sub).is_dir(), "{sub}");
    }
    assert!(!dir.join("state.json").exists());
    assert!(!dir.join("children").exists());

    assert_eq!(state_path(root, "s1"), dir.join("state.json"));
    assert_eq!(session_metadata_path(root, "s1"), dir.join("session.json"));
    assert_eq!(children_path(root, "s1"), dir.join("children.json"));
    assert_eq!(parent_path(root, "s1"), dir.join("parent.json"));
    assert_eq!(
        child_requests_dir_path(root, "s1"),
        dir.join("child_requests")
    );
    assert_eq!(child_sessions_dir_path(root, "s1"), dir.join("children"));
    assert_eq!(session_goal_path(root, "s1"), dir.join("goal.md"));
    assert_eq!(events_path(root, "s1"), dir.join("events.jsonl"));
    assert_eq!(iterations_dir_path(root, "s1"), dir.join("iterations"));
    assert_eq!(
        project_state_dir_path(root, "s1"),
        dir.join("project_state")
    );
    assert_eq!(eval_checks_dir_path(root, "s1"), dir.join("eval_checks"));
    assert_eq!(
        harness_outputs_dir_path(root, "s1"),
        dir.join("harness_outputs")
    );
    assert_eq!(
        updates_from_user_path(root, "s1"),
        dir.join("updates_from_user.md")
    );
    assert_eq!(
        finished_path(root, "s1"),
        dir.join("project_state/finished.md")
    );
    assert_eq!(control_path(root, "s1"), dir.join("control.json"));
}

#[test]
fn child_sessions_nest_under_their_parent_and_are_found_by_id() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    let parent = create_session_dir(root, &new_session("p", None)).unwrap();
    let child = create_session_dir(root, &new_session("c", Some("p"))).unwrap();
    assert_eq!(child, parent.join("children/c"));
    let grandchild = create_session_dir(root, &new_session("g", Some("c"))).unwrap();
    assert_eq!(grandchild, parent.join("children/c/children/g"));

    assert_eq!(session_dir_path(root, "c"), child);
    assert_eq!(session_dir_path(root, "g"), grandchild);
    assert_eq!(state_path(root, "g"), grandchild.join("state.json"));
    assert_eq!(child_sessions_dir_path(root, "p"), parent.join("children"));
    // Unknown ids fall back to the (missing) top-level path.
    assert_eq!(
        session_dir_path(root, "nope"),
        root.join(".sandloop/sessions/nope")
    );

    let metadata: SessionMetadata =
        serde_json::from_str(&read(&child.join("session.json"))).unwrap();
    assert_eq!(metadata.parent_session_id.as_deref(), Some("p"));
    let link: ParentLink = serde_json::from_str(&read(&child.join("parent.json"))).unwrap();
    assert_eq!(link.schema_version, 1);
    assert_eq!(link.parent_session_id, "p");
    assert_eq!(link.parent_relative_path, "../..");
    assert_eq!(link.created_at, metadata.created_at);
    assert_eq!(
        read(&child.join("parent.json")),
        format!(
            "{{\n  \"schema_version\": 1,\n  \"parent_session_id\": \"p\",\n  \"parent_relative_path\": \"../..\",\n  \"created_at\": \"{}\"\n}}",
            link.created_at
        )
    );
    assert_eq!(
        child
            .join(&link.parent_relative_path)
            .canonicalize()
            .unwrap(),
        parent.canonicalize().unwrap()
    );
    for sub in [
        "child_requests",
        "project_state",
        "eval_checks",
        "harness_outputs",
        "iterations",
    ] {
        assert!(child.join(sub).is_dir(), "{sub}");
    }
    assert!(child.join("control.json").is_file());
}

#[test]
fn session_files_are_written_once() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    let dir = create_session_dir(root, &new_session("s1", None)).unwrap();
    let files = [
        "session.json",
        "goal.md",
        "children.json",
        "events.jsonl",
        "control.json",
        "updates_from_user.md",
        "project_state/finished.md",
    ];
    for name in files {
        fs::write(dir.join(name), format!("edited {name}")).unwrap();
    }
    let again = NewSession {
        goal: "a different goal",
        workflow_set: "other",
        goal_hash: "000000000000",
        ..new_session("s1", None)
    };
    assert_eq!(create_session_dir(root, &again).unwrap(), dir);
    for name in files {
        assert_eq!(read(&dir.join(name)), format!("edited {name}"));
    }

    // A child's parent.json is kept as well.
    let child = create_session_dir(root, &new_session("c", Some("s1"))).unwrap();
    fs::write(child.join("parent.json"), "edited").unwrap();
    create_session_dir(root, &new_session("c", Some("s1"))).unwrap();
    assert_eq!(read(&child.join("parent.json")), "edited");
}

#[test]
fn empty_goal_writes_no_goal_file() {
    let repo = tempfile::tempdir().unwrap();
    let session = NewSession {
        goal: "",
        ..new_session("s1", None)
    };
    let dir = create_session_dir(repo.path(), &session).unwrap();
    assert!(!dir.join("goal.md").exists());
    assert!(dir.join("session.json").is_file());
}

#[test]
fn creation_errors_name_the_path() {
    let repo = tempfile::tempdir().unwrap();
    // A file where the .sandloop directory should be.
    fs::write(repo.path().join(".sandloop"), "").unwrap();
    let error = create_session_dir(repo.path(), &new_session("s1", None)).unwrap_err();
    assert_eq!(error.action, "create directory");
    assert!(error.to_string().contains(".sandloop"), "{error}");
}

#[test]
fn iteration_paths() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    let dir = create_session_dir(root, &new_session("s1", None)).unwrap();
    assert_eq!(iteration_dir_name(7, "plan"), "0007_plan");
    assert_eq!(iteration_dir_name(12_345, "plan"), "12345_plan");
    let iteration = dir.join("iterations/0003_build");
    assert_eq!(iteration_dir_path(root, "s1", 3, "build"), iteration);
    assert_eq!(
        iteration_harness_output_root(root, "s1", 3, "build"),
        dir.join("harness_outputs/0003_build")
    );
    assert_eq!(
        result_path(root, "s1", 3, "build"),
        iteration.join("result.json")
    );
    assert_eq!(
        result_text_path(root, "s1", 3, "build"),
        iteration.join("result_text.txt")
    );
    assert_eq!(
        prompt_path(root, "s1", 3, "build"),
        iteration.join("prompt.txt")
    );
    assert_eq!(
        harness_run_id_path(root, "s1", 3, "build"),
        iteration.join("harness_run_id.txt")
    );
    assert_eq!(
        pending_finished_request_path(root, "s1", 3, "build"),
        iteration.join("pending_finished_request.json")
    );
    let goal_check = goal_check_path(root, "s1", 4, super::super::models::GOAL_CHECK_WORKFLOW_ID);
    assert_eq!(
        goal_check,
        dir.join("iterations/0004_goal_check/goal_check.json")
    );
    assert!(!iteration.exists());
    assert!(!dir.join("iterations/0004_goal_check").exists());

    assert_eq!(
        ensure_iteration_dir(root, "s1", 3, "build").unwrap(),
        iteration
    );
    assert!(iteration.is_dir());
    assert_eq!(
        ensure_goal_check_path(root, "s1", 4, "goal_check").unwrap(),
        goal_check
    );
    assert!(dir.join("iterations/0004_goal_check").is_dir());
    assert!(!goal_check.exists());
}

#[test]
fn ensure_control_path_writes_the_default_once() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    let path = control_path(root, "s1");
    assert!(!path.exists());
    assert_eq!(ensure_control_path(root, "s1").unwrap(), path);
    let control: serde_json::Value = serde_json::from_str(&read(&path)).unwrap();
    assert_eq!(
        control,
        serde_json::json!({"state": "running", "reason": "session active", "stop_reason": null, "schema_version": 1})
    );
    fs::write(&path, "{\"state\": \"stopped\"}").unwrap();
    ensure_control_path(root, "s1").unwrap();
    assert_eq!(read(&path), "{\"state\": \"stopped\"}");
}

#[test]
fn latest_state_paths() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    assert_eq!(latest_top_level_state_path(root).unwrap(), None);
    assert_eq!(latest_state_path(root), None);

    let older = create_session_dir(root, &new_session("20260101_000000_a_00000000", None)).unwrap();
    let newer = create_session_dir(root, &new_session("20260102_000000_a_00000000", None)).unwrap();
    let no_state =
        create_session_dir(root, &new_session("20260103_000000_a_00000000", None)).unwrap();
    // Without any state.json there is no latest state.
    assert_eq!(latest_top_level_state_path(root).unwrap(), None);
    fs::write(older.join("state.json"), "{}").unwrap();
    fs::write(newer.join("state.json"), "{}").unwrap();
    assert!(!no_state.join("state.json").exists());
    assert_eq!(
        latest_top_level_state_path(root).unwrap(),
        Some(newer.join("state.json"))
    );

    // A child of the older session is ignored by the top-level lookup
    // but counts for latest_state_path (path order, children included).
    let child = create_session_dir(
        root,
        &new_session("zz_child", Some("20260101_000000_a_00000000")),
    )
    .unwrap();
    fs::write(child.join("state.json"), "{}").unwrap();
    assert_eq!(
        latest_top_level_state_path(root).unwrap(),
        Some(newer.join("state.json"))
    );
    // Path order compares component by component, so a session's own
    // state.json sorts after its children/ (as in the reference).
    assert_eq!(latest_state_path(root), Some(newer.join("state.json")));
    let newest_child =
        create_session_dir(root, &new_session("c", Some("20260103_000000_a_00000000"))).unwrap();
    fs::write(newest_child.join("state.json"), "{}").unwrap();
    assert_eq!(
        latest_state_path(root),
        Some(newest_child.join("state.json"))
    );
    assert_eq!(
        latest_top_level_state_path(root).unwrap(),
        Some(newer.join("state.json"))
    );
}
