//! `sandloop loop run` killed with `kill -9` while a child session runs —
//! during the child's step, right after it, and while the parent runs
//! again — and resumed with `--resume` each time: no iteration of either
//! session is lost or counted twice, the child ends, then the parent.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::loops::{assert_each_iteration_once, init};
use crate::support::*;

/// How long one kill point (or the final run) may take before the test
/// fails: generous for a loaded machine, but bounded.
const PATIENCE: Duration = Duration::from_secs(120);

/// A running `sandloop loop run`; killed if the test fails on the way.
struct Coordinator(KillOnDrop);

impl Coordinator {
    /// `sandloop loop run --repo REPO [--resume]`, stderr appended to `log`.
    fn start(repo: &Path, resume: bool, log: &Path) -> Self {
        let mut args = vec!["loop", "run", "--repo", s(repo)];
        if resume {
            args.push("--resume");
        }
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let child = sandloop()
            .args(&args)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        Coordinator(KillOnDrop(child))
    }

    /// `kill -9` it and reap it.
    fn kill(mut self) {
        let process = &mut self.0.0;
        assert!(
            process.try_wait().unwrap().is_none(),
            "the coordinator ended before it could be killed"
        );
        process.kill().unwrap();
        process.wait().unwrap();
    }

    /// Wait (bounded) for it to exit on its own; its exit code.
    fn finish(mut self) -> i32 {
        self.0.wait_within(PATIENCE, "the resumed loop")
    }
}

/// Poll (every 10 ms, at most [`PATIENCE`]) until `found` returns `Some`.
fn wait_for<T>(what: &str, mut found: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = found() {
            return value;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "waited {PATIENCE:?} for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A JSON file, or `None` while it is missing or unreadable.
fn read_json(path: &Path) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// Where the one top-level session and its one child live.
struct Sessions {
    repo: PathBuf,
}

impl Sessions {
    fn parent_dir(&self) -> Option<PathBuf> {
        let root = self.repo.join(".sandloop/sessions");
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
            .ok()?
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.is_dir())
            .collect();
        assert!(dirs.len() <= 1, "one top-level session: {dirs:?}");
        dirs.pop()
    }

    fn parent(&self) -> Option<Value> {
        read_json(&self.parent_dir()?.join("state.json"))
    }

    /// The parent's `children.json` entries.
    fn records(&self) -> Vec<Value> {
        self.parent_dir()
            .and_then(|dir| read_json(&dir.join("children.json")))
            .and_then(|children| children["children"].as_array().cloned())
            .unwrap_or_default()
    }

    fn child_dir(&self) -> Option<PathBuf> {
        let records = self.records();
        let id = records.first()?["session_id"].as_str()?.to_owned();
        Some(self.parent_dir()?.join("children").join(id))
    }

    fn child(&self) -> Option<Value> {
        read_json(&self.child_dir()?.join("state.json"))
    }
}

/// `(workflow_id, iteration)` of a state's current task.
fn current(state: &Value) -> Option<(String, u64)> {
    let task = state["current_task"].as_object()?;
    Some((
        task["workflow_id"].as_str()?.to_owned(),
        task["iteration"].as_u64()?,
    ))
}

/// Iterations of the successful `work` steps in a state's history.
fn work_done(state: &Value) -> Vec<u64> {
    state["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|entry| entry["workflow_id"] == "work" && entry["success"] == true)
        .map(|entry| entry["iteration"].as_u64().unwrap())
        .collect()
}

/// A child work step of an iteration after `after` has finished: its
/// report is written (pending) or recorded.
fn child_work_finished_after(sessions: &Sessions, after: u64) -> Option<u64> {
    let dir = sessions.child_dir()?;
    let pending = std::fs::read_dir(dir.join("iterations"))
        .ok()?
        .flatten()
        .filter(|entry| entry.path().join("pending_finished_request.json").exists())
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let (iteration, workflow) = name.split_once('_')?;
            (workflow == "work").then(|| iteration.parse::<u64>().ok())?
        })
        .find(|&iteration| iteration > after);
    pending.or_else(|| {
        work_done(&sessions.child()?)
            .into_iter()
            .find(|&iteration| iteration > after)
    })
}

/// Asserts a session's history holds iterations 1..=n, each once, and
/// its `iteration_count` agrees.
fn assert_contiguous(state: &Value, who: &str) {
    let history = state["history"].as_array().unwrap();
    assert_each_iteration_once(history, who);
    assert_eq!(
        state["iteration_count"].as_u64(),
        Some(history.len() as u64),
        "{who}: {state}"
    );
}

#[test]
fn a_loop_killed_around_a_child_session_resumes_with_no_iteration_lost_or_counted_twice() {
    let dir = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("stderr.txt");
    // The parent wants 3 lines and, at its first work step, asks for a
    // child session (same workflow set) that wants 2; every step is slow.
    init(
        dir.path(),
        "Write 3 slow progress lines, then child: write 2 slow progress lines.\n",
    );
    let sessions = Sessions {
        repo: dir.path().to_path_buf(),
    };

    // 1. Killed while the child's first work step runs.
    let running = Coordinator::start(dir.path(), false, &log);
    let (_, killed_in) = wait_for("the child's work step", || {
        current(&sessions.child()?).filter(|(workflow, _)| workflow == "work")
    });
    running.kill();
    let child_before = sessions.child().unwrap();
    assert_eq!(child_before["status"], "running", "{child_before}");

    // 2. Resumed (the child first), killed right after a child work step
    //    finished: its report written or just recorded.
    let running = Coordinator::start(dir.path(), true, &log);
    let finished = wait_for("a child work step to finish after the kill", || {
        child_work_finished_after(&sessions, killed_in)
    });
    running.kill();
    assert!(finished > killed_in);

    // 3. Resumed, the child runs to its end; killed while the parent's
    //    next work step runs.
    let running = Coordinator::start(dir.path(), true, &log);
    let parent_before = sessions.parent().unwrap();
    let parent_work_before = work_done(&parent_before);
    wait_for("the parent's work step after the child ended", || {
        let records = sessions.records();
        let ended = records.first()?["status"] != "running";
        let (workflow, iteration) = current(&sessions.parent()?)?;
        (ended && workflow == "work" && iteration > parent_work_before[0]).then_some(())
    });
    running.kill();

    // 4. Resumed once more, the parent runs to its goal.
    let code = Coordinator::start(dir.path(), true, &log).finish();
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(code, 0, "{log_text}");
    assert!(
        log_text.matches("resuming child session").count() >= 2,
        "the child was resumed before the parent: {log_text}"
    );

    let parent = sessions.parent().unwrap();
    let child = sessions.child().unwrap();
    assert_eq!(
        parent["status"], "goal_met",
        "the parent ran to its end: {parent}"
    );
    assert_eq!(parent["current_task"], Value::Null);
    assert_contiguous(&parent, "parent");
    assert_eq!(child["status"], "goal_met", "the child ended: {child}");
    assert_eq!(child["current_task"], Value::Null);
    assert_contiguous(&child, "child");
    let records = sessions.records();
    assert_eq!(records.len(), 1, "one child, dispatched once: {records:?}");
    assert_eq!(records[0]["status"], "goal_met", "{records:?}");
    assert!(records[0]["completed_at"].is_string(), "{records:?}");
    assert_eq!(
        std::fs::read_dir(sessions.parent_dir().unwrap().join("child_requests"))
            .map(|entries| entries.count())
            .unwrap_or(0),
        0,
        "the child request was consumed"
    );

    // Each work step wrote its line once ("step N in SESSION"); every
    // recorded success has its line, and no line comes from an iteration
    // that was not recorded.
    let progress = std::fs::read_to_string(dir.path().join("work/progress.txt")).unwrap();
    let mut lines: BTreeMap<&str, usize> = BTreeMap::new();
    for line in progress.lines() {
        *lines.entry(line).or_default() += 1;
    }
    assert!(
        lines.values().all(|&count| count == 1),
        "no step ran twice: {progress}"
    );
    for state in [&parent, &child] {
        let session = state["active_session_id"].as_str().unwrap();
        let recorded: Vec<u64> = state["history"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|entry| entry["workflow_id"] == "work")
            .map(|entry| entry["iteration"].as_u64().unwrap())
            .collect();
        for iteration in work_done(state) {
            let line = format!("step {iteration} in {session}");
            assert!(
                lines.contains_key(line.as_str()),
                "{line} missing: {progress}"
            );
        }
        let suffix = format!(" in {session}");
        for line in lines.keys().filter(|line| line.ends_with(&suffix)) {
            let iteration: u64 = line["step ".len()..line.len() - suffix.len()]
                .parse()
                .unwrap();
            assert!(
                recorded.contains(&iteration),
                "{line} was written by an iteration never recorded: {state}"
            );
        }
    }
    assert!(work_done(&child).len() >= 2, "{child}");
    assert!(
        work_done(&parent).len() >= 3,
        "the parent went on after its child: {parent}"
    );
    let ids = [&parent, &child].map(|state| state["active_session_id"].as_str().unwrap());
    assert!(
        lines
            .keys()
            .all(|line| ids.iter().any(|id| line.ends_with(&format!(" in {id}")))),
        "every line is the parent's or the child's: {progress}"
    );
}
