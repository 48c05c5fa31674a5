//! Host resources that are not CPU or linear memory: granted directories
//! that are swapped for symlinks, files that block, descriptors, start
//! functions, memory growth the guest can survive, the host-call copy
//! budget, and the run's own files. Each test runs the real binary on the
//! hostile adapter.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::*;
use sandloop_tests::HOSTILE_ADAPTER;

/// Run `sandloop ARGS`, killing it (and failing the test) if it has not
/// ended within `limit`: a hang is the bug these tests look for.
fn run_within(limit: Duration, args: &[&str]) -> (Output, Duration) {
    use std::io::Read;
    let started = Instant::now();
    let spawned = sandloop()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sandloop");
    let mut child = KillOnDrop(spawned);
    child.wait_within(limit, &format!("sandloop {args:?}"));
    let took = started.elapsed();
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let pipes = (child.0.stdout.take(), child.0.stderr.take());
    pipes
        .0
        .expect("piped")
        .read_to_end(&mut stdout)
        .expect("read stdout");
    pipes
        .1
        .expect("piped")
        .read_to_end(&mut stderr)
        .expect("read stderr");
    let status = child.0.wait().expect("exited");
    (
        Output {
            status,
            stdout,
            stderr,
        },
        took,
    )
}

/// What the adapter printed and the host noted in epoch 1 of the run in
/// `DIR/out`.
fn adapter_output(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("out/adapter-output/epoch-0001.jsonl")).unwrap()
}

fn error_type(record: &Value) -> &str {
    record["adapter_error"]["type"].as_str().unwrap_or("")
}

/// `sandloop run` of the hostile adapter over `items` into `DIR/out`, with
/// `extra` flags.
fn run_hostile(dir: &Path, items: &[Value], extra: &[&str]) -> (Output, Duration) {
    let items = write_items(dir, "items.jsonl", items);
    let out = dir.join("out");
    let mut args = vec![
        "run",
        "--adapter",
        HOSTILE_ADAPTER,
        "--items",
        s(&items),
        "--out",
        s(&out),
    ];
    args.extend_from_slice(extra);
    run_within(Duration::from_secs(120), &args)
}

fn item(id: &str, attack: &str) -> Value {
    json!({"item_id": id, "family": id, "attack": attack})
}

#[test]
fn a_grant_swapped_for_a_symlink_still_grants_only_what_it_granted() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(work.join("sub")).unwrap();
    std::fs::create_dir_all(dir.path().join("outside")).unwrap();
    std::fs::write(dir.path().join("outside/secret.txt"), "secret").unwrap();
    let mut swap = item("swap", "swap_for_symlink");
    swap["path"] = json!("/work/sub");
    swap["target"] = json!("../outside");
    let mut peek = item("peek", "open_path");
    peek["path"] = json!("/sub/secret.txt");
    let work_grant = format!("{}::/work", s(&work));
    let sub_grant = format!("{}::/sub:ro", s(&work.join("sub")));
    let (output, _) = run_hostile(
        dir.path(),
        &[swap, peek],
        &["--dir", &work_grant, "--dir", &sub_grant],
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        work.join("sub").is_symlink(),
        "the guest did swap the granted directory for a symlink"
    );
    let out = dir.path().join("out");
    let records = records(&out);
    let peek = find(&records, "peek", "episode_suffix");
    assert_eq!(peek["opened"], false, "read outside its grant: {peek}");
    assert_eq!(peek["error_kind"], "NotFound", "{peek}");

    // A later process opens the path again: a resume refuses the grant
    // that is now another directory, and writes nothing.
    let before = std::fs::read(out.join("records.jsonl")).unwrap();
    let items = dir.path().join("items.jsonl");
    let (output, _) = run_within(
        Duration::from_secs(120),
        &[
            "run",
            "--adapter",
            HOSTILE_ADAPTER,
            "--items",
            s(&items),
            "--out",
            s(&out),
            "--dir",
            &work_grant,
            "--dir",
            &sub_grant,
            "--epochs",
            "2",
            "--resume",
        ],
    );
    assert_exit(
        &output,
        2,
        &["is not the directory this run was granted at /sub"],
    );
    assert_eq!(std::fs::read(out.join("records.jsonl")).unwrap(), before);
}

#[test]
fn a_fifo_in_a_grant_cannot_hold_a_lane_past_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(shared.join("fifo"))
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let mut open = item("fifo", "open_path");
    open["path"] = json!("/shared/fifo");
    let grant = format!("{}::/shared:ro", s(&shared));
    let (output, took) = run_hostile(
        dir.path(),
        &[open, item("calm", "none")],
        &["--dir", &grant, "--call-timeout", "2"],
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(took < Duration::from_secs(60), "took {took:?}");
    let records = records(&dir.path().join("out"));
    let fifo = find(&records, "fifo", "episode_suffix");
    assert_eq!(fifo["opened"], false, "{fifo}");
    assert_eq!(fifo["error_kind"], "PermissionDenied", "{fifo}");
    assert_eq!(find(&records, "calm", "episode_suffix")["accepted"], true);
    let said = adapter_output(dir.path());
    assert!(said.contains("not a regular file or directory"), "{said}");
}

#[test]
fn an_instance_holds_at_most_max_open_files_descriptors() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::write(shared.join("note.txt"), "note").unwrap();
    let hoard = |id: &str| {
        let mut hoard = item(id, "hoard_files");
        hoard["path"] = json!("/shared/note.txt");
        hoard
    };
    let grant = format!("{}::/shared:ro", s(&shared));
    let (output, _) = run_hostile(
        dir.path(),
        &[hoard("hoard"), item("calm", "none"), hoard("again")],
        &["--dir", &grant],
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let hoarded = records(&dir.path().join("out"));
    for id in ["hoard", "again"] {
        let record = find(&hoarded, id, "episode_suffix");
        assert_eq!(record["opened"], 256, "the default bound: {record}");
        assert!(record.get("adapter_error").is_none(), "{record}");
        assert_eq!(
            record["error_kind"], "OutOfMemory",
            "WASI said no: {record}"
        );
    }
    assert_eq!(find(&hoarded, "calm", "episode_suffix")["accepted"], true);

    let smaller = tempfile::tempdir().unwrap();
    let (output, _) = run_hostile(
        smaller.path(),
        &[hoard("hoard")],
        &["--dir", &grant, "--max-open-files", "10"],
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let records = records(&smaller.path().join("out"));
    assert_eq!(find(&records, "hoard", "episode_suffix")["opened"], 10);
}

#[test]
fn a_denied_memory_growth_fails_the_allocation_not_the_instance() {
    let dir = tempfile::tempdir().unwrap();
    let (output, _) = run_hostile(
        dir.path(),
        &[item("reserve", "try_reserve"), item("bomb", "memory_bomb")],
        &["--max-memory", "64"],
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let records = records(&dir.path().join("out"));
    let reserve = find(&records, "reserve", "episode_suffix");
    assert!(reserve.get("adapter_error").is_none(), "{reserve}");
    assert_eq!(reserve["reserved"], false, "{reserve}");
    assert_eq!(reserve["after"], 1024, "the guest went on: {reserve}");
    // A guest that does not handle the failure still ends as memory_limit.
    let bomb = find(&records, "bomb", "episode_suffix");
    assert_eq!(error_type(bomb), "memory_limit", "{bomb}");
    let said = adapter_output(dir.path());
    assert!(said.contains("memory.grow returned -1"), "{said}");
}

#[test]
fn a_start_function_runs_under_the_call_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let grant = format!("{}::/work", s(&work));
    // The first instance starts; `plant` makes every later start sleep.
    let (output, took) = run_hostile(
        dir.path(),
        &[
            item("first", "none"),
            item("plant", "plant_start_sleep"),
            item("after-1", "none"),
            item("after-2", "none"),
        ],
        &["--dir", &grant, "--call-timeout", "1"],
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(took < Duration::from_secs(30), "took {took:?}");
    let records = records(&dir.path().join("out"));
    assert_eq!(find(&records, "first", "episode_suffix")["accepted"], true);
    assert_eq!(
        error_type(find(&records, "plant", "episode_suffix")),
        "trap"
    );
    for id in ["after-1", "after-2"] {
        let prefix = find(&records, id, "shared_prefix");
        assert_eq!(error_type(prefix), "deadline", "{prefix}");
        let message = prefix["adapter_error"]["message"].as_str().unwrap();
        assert!(
            message.contains("while starting (start function)"),
            "{message}"
        );
    }

    // A component that can never start stops the run before it begins.
    let never = tempfile::tempdir().unwrap();
    let (output, took) = run_hostile(
        never.path(),
        &[item("a", "none"), item("b", "none")],
        &["--dir", &grant, "--call-timeout", "1"],
    );
    assert_exit(
        &output,
        1,
        &[
            "cannot be instantiated under these limits (deadline)",
            "nothing was run",
        ],
    );
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert!(!never.path().join("out/records.jsonl").exists());
}

#[test]
fn max_output_above_the_default_host_call_budget_takes_effect() {
    let dir = tempfile::tempdir().unwrap();
    // Just above wasmtime's default copy budget of 128 MiB.
    let bytes = (128u64 << 20) + (4 << 20);
    let mut huge = item("huge", "huge_output");
    huge["bytes"] = json!(bytes);
    let (output, _) = run_hostile(
        dir.path(),
        &[huge],
        &["--max-output", "1073741824", "--max-memory", "1024"],
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let text = std::fs::read_to_string(dir.path().join("out/records.jsonl")).unwrap();
    let suffix = text
        .lines()
        .find(|line| line.contains("\"episode_suffix\""))
        .expect("a suffix record");
    let record: Value = serde_json::from_str(suffix).unwrap();
    assert!(record.get("adapter_error").is_none(), "{}", &suffix[..300]);
    assert_eq!(record["blob"].as_str().unwrap().len() as u64, bytes);
}

#[test]
fn a_run_that_cannot_write_its_own_files_fails_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    // adapter-output/ cannot be made: a file stands in its way.
    std::fs::write(out.join("adapter-output"), "in the way").unwrap();
    let items = [item("a", "none"), item("b", "none")];
    let (output, _) = run_hostile(dir.path(), &items, &["--epochs", "2"]);
    assert_exit(&output, 1, &["writing the run directory", "adapter output"]);
    let failure = json_file(&out.join("failure.json"));
    assert!(
        failure["error"]
            .as_str()
            .unwrap()
            .contains("adapter output"),
        "{failure}"
    );
    assert!(
        !out.join("checkpoint.json").exists(),
        "no epoch was checkpointed"
    );

    std::fs::remove_file(out.join("adapter-output")).unwrap();
    let items_path = dir.path().join("items.jsonl");
    let (output, _) = run_within(
        Duration::from_secs(120),
        &[
            "run",
            "--adapter",
            HOSTILE_ADAPTER,
            "--items",
            s(&items_path),
            "--out",
            s(&out),
            "--epochs",
            "2",
            "--resume",
        ],
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let summary = json_file(&out.join("summary.json"));
    assert_eq!(summary["epoch_count"], 2, "{summary}");
}
