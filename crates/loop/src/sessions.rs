//! On-disk layout of coordinator sessions: the directory names, file names
//! and path helpers of `.sandloop/sessions/`, session ids, and the creation
//! of a session directory with its initial files. Mirrors `sessions.py` in
//! the reference; file names and JSON keys are the reference's, except that
//! the reference's per-repository directory is [`SANDLOOP_DIRNAME`] here.
//!
//! Layout of one session (top-level sessions sit directly under
//! [`sessions_root_path`], child sessions under their parent's
//! [`CHILDREN_DIRNAME`], nested to any depth):
//!
//! ```text
//! .sandloop/sessions/<session_id>/
//!   session.json            SessionMetadata, written once
//!   parent.json             ParentLink, child sessions only, written once
//!   goal.md                 the goal text, written once
//!   state.json              the loop state (see super::state_store)
//!   children.json           {"schema_version": 1, "children": [...]}
//!   control.json            control signal, "running" by default
//!   events.jsonl            empty at creation
//!   updates_from_user.md    empty at creation
//!   child_requests/         child-session requests written by workflows
//!   children/<child_id>/    child sessions
//!   project_state/finished.md
//!   eval_checks/
//!   harness_outputs/<iteration dir name>/
//!   iterations/<NNNN>_<workflow_id>/
//!     result.json, result_text.txt, prompt.txt, harness_run_id.txt,
//!     pending_finished_request.json, goal_check.json
//! ```
//!
//! Path helpers that take a `session_id` find the session with
//! [`session_dir_path`], which searches nested child sessions; helpers never
//! create anything unless their name starts with `ensure_` or `create_`.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::config::SANDLOOP_DIRNAME;
use super::models::utc_now;

/// Directory under [`SANDLOOP_DIRNAME`] holding top-level sessions
/// (reference `SESSIONS_DIRNAME`).
pub const SESSIONS_DIRNAME: &str = "sessions";
/// Per-session directory of iteration directories (reference
/// `ITERATIONS_DIRNAME`).
pub const ITERATIONS_DIRNAME: &str = "iterations";
/// Per-session directory of child sessions (reference `CHILDREN_DIRNAME`).
pub const CHILDREN_DIRNAME: &str = "children";
/// Per-session directory where workflows drop child-session requests
/// (`*.json`; reference `CHILD_REQUESTS_DIRNAME`).
pub const CHILD_REQUESTS_DIRNAME: &str = "child_requests";
/// Per-session metadata file, a [`SessionMetadata`] (reference
/// `SESSION_METADATA_FILENAME`).
pub const SESSION_METADATA_FILENAME: &str = "session.json";
/// Per-session loop state file (reference `STATE_FILENAME`).
pub const STATE_FILENAME: &str = "state.json";
/// Per-session index of child sessions, `{"schema_version": 1, "children":
/// [...]}` (reference `CHILDREN_FILENAME`).
pub const CHILDREN_FILENAME: &str = "children.json";
/// Child-session link to its parent, a [`ParentLink`] (reference
/// `PARENT_FILENAME`).
pub const PARENT_FILENAME: &str = "parent.json";
/// Per-session goal text (reference `GOAL_FILENAME`).
pub const GOAL_FILENAME: &str = "goal.md";
/// Per-session event log, JSON lines (reference `EVENTS_FILENAME`).
pub const EVENTS_FILENAME: &str = "events.jsonl";
/// Per-session directory of project state kept across iterations (reference
/// `PROJECT_STATE_DIRNAME`).
pub const PROJECT_STATE_DIRNAME: &str = "project_state";
/// Per-session directory of evaluation checks (reference
/// `EVAL_CHECKS_DIRNAME`).
pub const EVAL_CHECKS_DIRNAME: &str = "eval_checks";
/// Per-session directory of per-iteration step outputs (reference
/// `HARNESS_OUTPUTS_DIRNAME`).
pub const HARNESS_OUTPUTS_DIRNAME: &str = "harness_outputs";
/// Per-session file where the user leaves updates for the workflows
/// (reference `UPDATES_FROM_USER_FILENAME`).
pub const UPDATES_FROM_USER_FILENAME: &str = "updates_from_user.md";
/// Ledger of finished work, inside [`PROJECT_STATE_DIRNAME`] (reference
/// `FINISHED_FILENAME`).
pub const FINISHED_FILENAME: &str = "finished.md";
/// Per-iteration rendered prompt (reference `PROMPT_FILENAME`).
pub const PROMPT_FILENAME: &str = "prompt.txt";
/// Per-iteration result record (reference `RESULT_FILENAME`).
pub const RESULT_FILENAME: &str = "result.json";
/// Per-iteration result text (reference `RESULT_TEXT_FILENAME`).
pub const RESULT_TEXT_FILENAME: &str = "result_text.txt";
/// Per-iteration id of the step run (reference `HARNESS_RUN_ID_FILENAME`).
pub const HARNESS_RUN_ID_FILENAME: &str = "harness_run_id.txt";
/// Per-iteration copy of a worker's `/finished` request, kept for crash
/// recovery (reference `PENDING_FINISHED_REQUEST_FILENAME`).
pub const PENDING_FINISHED_REQUEST_FILENAME: &str = "pending_finished_request.json";
/// Per-session control signal (reference `CONTROL_FILENAME`).
pub const CONTROL_FILENAME: &str = "control.json";
/// Per-iteration goal-check signal (reference `GOAL_CHECK_FILENAME`).
pub const GOAL_CHECK_FILENAME: &str = "goal_check.json";

/// `schema_version` written into `parent.json`, `children.json` and the
/// default `control.json` (a literal `1` in the reference).
pub const SESSION_FILES_SCHEMA_VERSION: i64 = 1;
/// `parent_relative_path` of `parent.json`: the parent's directory as seen
/// from a child's (`<parent>/children/<child>`); a literal in the reference.
pub const PARENT_RELATIVE_PATH: &str = "../..";
/// Initial content of [`FINISHED_FILENAME`] (a literal in the reference).
pub const FINISHED_LEDGER_HEADER: &str = "# Finished Work\n";
/// Number of hex digits in the unique suffix of a session id (the
/// reference's `uuid4().hex[:8]`).
pub const SESSION_ID_SUFFIX_LEN: usize = 8;

/// A file or directory of a session could not be read, created or written.
#[derive(Debug, thiserror::Error)]
#[error("cannot {action} {}: {source}", path.display())]
pub struct SessionError {
    /// What was being done, e.g. `"create directory"`.
    pub action: &'static str,
    /// The file or directory concerned.
    pub path: PathBuf,
    /// The underlying I/O error.
    #[source]
    pub source: io::Error,
}

impl SessionError {
    fn new(action: &'static str, path: &Path, source: io::Error) -> Self {
        Self {
            action,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// `session.json`: who a session is, written once when its directory is
/// created. Keys and their order are the reference's (`create_session_dir`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionMetadata {
    /// The session's id (see [`create_session_id`]).
    pub session_id: String,
    /// First 12 hex digits of the goal's SHA-256.
    pub goal_hash: String,
    /// Workflow set the session runs.
    pub workflow_set: String,
    /// The parent session for a child session, `null` for a top-level one.
    pub parent_session_id: Option<String>,
    /// When the directory was created (RFC 3339 UTC seconds, e.g.
    /// `"2026-11-29T23:30:00Z"`).
    pub created_at: String,
}

/// `parent.json` of a child session: the link back to its parent, written
/// once. Keys and their order are the reference's (`create_session_dir`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentLink {
    /// Always [`SESSION_FILES_SCHEMA_VERSION`].
    pub schema_version: i64,
    /// The parent session's id.
    pub parent_session_id: String,
    /// The parent's directory relative to the child's, always
    /// [`PARENT_RELATIVE_PATH`].
    pub parent_relative_path: String,
    /// When the child directory was created (RFC 3339 UTC seconds).
    pub created_at: String,
}

/// `children.json` as created: no children yet.
#[derive(Serialize)]
struct EmptyChildren {
    schema_version: i64,
    children: [(); 0],
}

/// `control.json` as created: the session runs (the reference writes this
/// literal in `control_path`).
#[derive(Serialize)]
struct DefaultControl {
    state: &'static str,
    reason: &'static str,
    stop_reason: Option<&'static str>,
    schema_version: i64,
}

const DEFAULT_CONTROL: DefaultControl = DefaultControl {
    state: "running",
    reason: "session active",
    stop_reason: None,
    schema_version: SESSION_FILES_SCHEMA_VERSION,
};

/// What [`create_session_dir`] needs to know about a new (or resumed)
/// session; the keyword arguments of the reference's `create_session_dir`.
#[derive(Clone, Copy, Debug)]
pub struct NewSession<'a> {
    /// The session's id (see [`create_session_id`]); the directory name.
    pub session_id: &'a str,
    /// First 12 hex digits of the goal's SHA-256.
    pub goal_hash: &'a str,
    /// Goal text for `goal.md`; empty writes no `goal.md`.
    pub goal: &'a str,
    /// Workflow set the session runs.
    pub workflow_set: &'a str,
    /// `Some(parent)` creates a child session under the parent's
    /// [`CHILDREN_DIRNAME`]; `None` a top-level session.
    pub parent_session_id: Option<&'a str>,
}

/// A fresh session id, `YYYYmmdd_HHMMSS_{goal_hash}_{8 hex}`, e.g.
/// `20261129_233000_3f2a9c1d0b7e_5e0c91aa`: the current UTC time to the
/// second, the goal hash as given, and [`SESSION_ID_SUFFIX_LEN`] lowercase hex
/// digits. Ids sort by creation second. Mirrors `create_session_id` in the
/// reference, which takes the suffix from a random UUID.
///
/// The suffix is a keyed permutation of a process-wide counter, the key
/// derived once from a SHA-256 of the clock (nanoseconds) and the process
/// id: within one process no suffix repeats for 2^32 calls (8 hex digits
/// drawn at random would collide in about 1% of runs of 10,000 ids in one
/// second); across processes two ids of one second and one goal collide with
/// the odds of random suffixes.
pub fn create_session_id(goal_hash: &str) -> String {
    let stamp = compact_stamp(&utc_now());
    format!("{stamp}_{goal_hash}_{:08x}", unique_suffix())
}

/// `YYYYmmdd_HHMMSS` from an RFC 3339 UTC seconds stamp such as
/// `2026-11-29T23:30:00Z` (the reference's `strftime("%Y%m%d_%H%M%S")`).
fn compact_stamp(rfc3339: &str) -> String {
    rfc3339
        .chars()
        .filter_map(|c| match c {
            '-' | ':' | 'Z' => None,
            'T' => Some('_'),
            other => Some(other),
        })
        .collect()
}

/// `YYYYmmddTHHMMSSZ` for the current UTC second (the reference's
/// `strftime("%Y%m%dT%H%M%SZ")`), used in state archive names.
pub(crate) fn basic_utc_stamp() -> String {
    utc_now()
        .chars()
        .filter(|c| !matches!(c, '-' | ':'))
        .collect()
}

/// The next 32-bit session id suffix: a keyed bijection of a process-wide
/// counter, so suffixes never repeat within 2^32 calls of one process.
fn unique_suffix() -> u32 {
    static KEY: OnceLock<(u32, u32)> = OnceLock::new();
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let &(k0, k1) = KEY.get_or_init(|| {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let mut hasher = Sha256::new();
        hasher.update(nanos.to_le_bytes());
        hasher.update(std::process::id().to_le_bytes());
        hasher.update((&COUNTER as *const AtomicU32 as usize).to_le_bytes());
        let digest = hasher.finalize();
        let word =
            |i: usize| u32::from_le_bytes([digest[i], digest[i + 1], digest[i + 2], digest[i + 3]]);
        (word(0), word(4))
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    // Each step (xor, add, the murmur3 finaliser) is a bijection on u32.
    fmix32(fmix32(n ^ k0).wrapping_add(k1))
}

/// The murmur3 32-bit finaliser (invertible: xor-shifts and odd multipliers).
fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

/// Creates (or completes) the directory of `session` and returns it.
/// A top-level session goes to `<sessions root>/<session_id>`, a child to
/// `<parent dir>/children/<session_id>` (the parent found with
/// [`session_dir_path`]). Files that already exist are left untouched, so
/// resuming a session never rewrites its metadata:
/// `session.json` ([`SessionMetadata`]), `parent.json` ([`ParentLink`], child
/// sessions only), `goal.md` (the goal with trailing whitespace trimmed plus
/// one newline; skipped when the goal is empty), `children.json` (no
/// children), `events.jsonl` and `updates_from_user.md` (empty),
/// `control.json` (running, see [`ensure_control_path`]) and
/// `project_state/finished.md` ([`FINISHED_LEDGER_HEADER`]); the directories
/// `child_requests/`, `project_state/`, `eval_checks/`, `harness_outputs/`
/// and `iterations/` are created. JSON files are written pretty-printed with
/// two-space indents and no trailing newline, as the reference's
/// `json.dumps(..., indent=2)`. Mirrors `create_session_dir` in the
/// reference, which reaches the new directory's subpaths through
/// [`session_dir_path`]; here they are built from the directory just made.
///
/// Each file is created with `create_new`, so two creators racing on one
/// session never overwrite each other. Errors: any directory or file that
/// cannot be created or written, naming the path.
pub fn create_session_dir(
    repo_root: &Path,
    session: &NewSession<'_>,
) -> Result<PathBuf, SessionError> {
    let created_at = utc_now();
    let session_dir = match session.parent_session_id {
        None => sessions_root_path(repo_root).join(session.session_id),
        Some(parent) => session_dir_path(repo_root, parent)
            .join(CHILDREN_DIRNAME)
            .join(session.session_id),
    };
    create_dir_all(&session_dir)?;

    let metadata = SessionMetadata {
        session_id: session.session_id.to_owned(),
        goal_hash: session.goal_hash.to_owned(),
        workflow_set: session.workflow_set.to_owned(),
        parent_session_id: session.parent_session_id.map(str::to_owned),
        created_at: created_at.clone(),
    };
    write_json_if_missing(&session_dir.join(SESSION_METADATA_FILENAME), &metadata)?;
    if let Some(parent) = session.parent_session_id {
        let link = ParentLink {
            schema_version: SESSION_FILES_SCHEMA_VERSION,
            parent_session_id: parent.to_owned(),
            parent_relative_path: PARENT_RELATIVE_PATH.to_owned(),
            created_at,
        };
        write_json_if_missing(&session_dir.join(PARENT_FILENAME), &link)?;
    }
    if !session.goal.is_empty() {
        let goal = format!("{}\n", session.goal.trim_end());
        write_if_missing(&session_dir.join(GOAL_FILENAME), goal.as_bytes())?;
    }
    let children = EmptyChildren {
        schema_version: SESSION_FILES_SCHEMA_VERSION,
        children: [],
    };
    write_json_if_missing(&session_dir.join(CHILDREN_FILENAME), &children)?;
    create_dir_all(&session_dir.join(CHILD_REQUESTS_DIRNAME))?;
    write_if_missing(&session_dir.join(EVENTS_FILENAME), b"")?;
    write_json_if_missing(&session_dir.join(CONTROL_FILENAME), &DEFAULT_CONTROL)?;
    write_if_missing(&session_dir.join(UPDATES_FROM_USER_FILENAME), b"")?;
    let project_state = session_dir.join(PROJECT_STATE_DIRNAME);
    create_dir_all(&project_state)?;
    write_if_missing(
        &project_state.join(FINISHED_FILENAME),
        FINISHED_LEDGER_HEADER.as_bytes(),
    )?;
    create_dir_all(&session_dir.join(EVAL_CHECKS_DIRNAME))?;
    create_dir_all(&session_dir.join(HARNESS_OUTPUTS_DIRNAME))?;
    create_dir_all(&session_dir.join(ITERATIONS_DIRNAME))?;
    Ok(session_dir)
}

fn create_dir_all(path: &Path) -> Result<(), SessionError> {
    fs::create_dir_all(path).map_err(|e| SessionError::new("create directory", path, e))
}

/// Writes `value` as two-space pretty JSON to `path` unless something exists
/// there; true when written.
fn write_json_if_missing<T: Serialize>(path: &Path, value: &T) -> Result<bool, SessionError> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| SessionError::new("serialise", path, e.into()))?;
    write_if_missing(path, text.as_bytes())
}

/// Creates `path` with `contents` unless something (a file or a directory)
/// exists there; true when written. `create_new` makes the check and the
/// creation one step.
fn write_if_missing(path: &Path, contents: &[u8]) -> Result<bool, SessionError> {
    let mut file = match OpenOptions::new().write(true).create_new(true).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
        Err(e) => return Err(SessionError::new("create", path, e)),
    };
    file.write_all(contents)
        .map_err(|e| SessionError::new("write", path, e))?;
    Ok(true)
}

/// An id that came over the wire (`session_id`, `workflow_id`,
/// `workflow_set`) and is not one plain path component; see
/// [`check_path_component`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field} {value:?} is not a plain name: {why}")]
pub struct UnsafeIdError {
    /// The JSON key, e.g. `session_id`.
    pub field: &'static str,
    /// The value as received.
    pub value: String,
    /// Which part of the rule it breaks.
    pub why: &'static str,
}

/// Longest id accepted as a path component, bytes (most file systems'
/// `NAME_MAX`).
pub const MAX_ID_BYTES: usize = 255;

/// Check that `value`, received as `field`, can be joined onto a session
/// path as exactly one plain component: not empty, at most
/// [`MAX_ID_BYTES`] bytes, not `.` or `..`, and without `/`, `\`, NUL or
/// another control character. The coordinator applies it to every
/// `/finished` it is sent, and a worker to every task it is handed before
/// it writes anything: one rule on both sides of the wire.
pub fn check_path_component(field: &'static str, value: &str) -> Result<(), UnsafeIdError> {
    let why = if value.is_empty() {
        Some("it is empty")
    } else if value.len() > MAX_ID_BYTES {
        Some("it is longer than 255 bytes")
    } else if value == "." || value == ".." {
        Some("it names a directory itself or its parent")
    } else if value.contains(['/', '\\']) {
        Some("it holds a path separator")
    } else if value.chars().any(char::is_control) {
        Some("it holds a control character")
    } else {
        None
    };
    match why {
        None => Ok(()),
        Some(why) => Err(UnsafeIdError {
            field,
            value: value.to_string(),
            why,
        }),
    }
}

/// `<repo_root>/.sandloop/sessions`, the directory of top-level sessions
/// (reference `sessions_root_path`).
pub fn sessions_root_path(repo_root: &Path) -> PathBuf {
    repo_root.join(SANDLOOP_DIRNAME).join(SESSIONS_DIRNAME)
}

/// The directory of session `session_id`, top-level or a child at any
/// depth: `<sessions root>/<session_id>` when that exists; otherwise the
/// first (in path order) directory named `session_id` anywhere below the
/// sessions root; otherwise (nothing found) the top-level path, which does
/// not exist. Mirrors `session_dir_path` in the reference (a `rglob` there):
/// the search does not descend into symlinked directories and skips
/// directories it cannot read. Every helper below that takes a `session_id`
/// goes through this lookup.
pub fn session_dir_path(repo_root: &Path, session_id: &str) -> PathBuf {
    let root = sessions_root_path(repo_root);
    let direct = root.join(session_id);
    if direct.exists() {
        return direct;
    }
    let mut found = Vec::new();
    find_dirs_named(&root, session_id, &mut found);
    found.sort();
    found.into_iter().next().unwrap_or(direct)
}

/// Appends every directory named `name` strictly below `dir` to `found`.
fn find_dirs_named(dir: &Path, name: &str, found: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_name() == name && path.is_dir() {
            found.push(path.clone());
        }
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            find_dirs_named(&path, name, found);
        }
    }
}

/// `<session dir>/state.json` (reference `state_path`).
pub fn state_path(repo_root: &Path, session_id: &str) -> PathBuf {
    session_dir_path(repo_root, session_id).join(STATE_FILENAME)
}

/// `<session dir>/session.json`, the [`SessionMetadata`] (no helper in the
/// reference, which builds it inline in `create_session_dir`).
pub fn session_metadata_path(repo_root: &Path, session_id: &str) -> PathBuf {
    session_dir_path(repo_root, session_id).join(SESSION_METADATA_FILENAME)
}

/// `<session dir>/children.json` (reference `children_path`).
pub fn children_path(repo_root: &Path, session_id: &str) -> PathBuf {
    session_dir_path(repo_root, session_id).join(CHILDREN_FILENAME)
}

/// `<session dir>/parent.json`, present for child sessions only (reference
/// `parent_path`).
pub fn parent_path(repo_root: &Path, session_id: &str) -> PathBuf {
    session_dir_path(repo_root, session_id).join(PARENT_FILENAME)
}

/// `<session dir>/child_requests` (reference `child_requests_dir_path`).
pub fn child_requests_dir_path(repo_root: &Path, session_id: &str) -> PathBuf {
    session_dir_path(repo_root, session_id).join(CHILD_REQUESTS_DIRNAME)
}

/// `<session dir>/children`, where child sessions live (reference
/// `child_sessions_dir_path`).
pub fn child_sessions_dir_path(repo_root: &Path, session_id: &str) -> PathBuf {
    session_dir_path(repo_root, session_id).join(CHILDREN_DIRNAME)
}

/// `<session dir>/goal.md` (reference `session_goal_path`).
pub fn session_goal_path(repo_root: &Path, session_id: &str) -> PathBuf {
    session_dir_path(repo_root, session_id).join(GOAL_FILENAME)
}

/// `<session dir>/events.jsonl` (no helper in the reference, which builds
/// it inline in `create_session_dir`).
pub fn events_path(repo_root: &Path, session_id: &str) -> PathBuf {
    session_dir_path(repo_root, session_id).join(EVENTS_FILENAME)
}

/// The `state.json` of the latest top-level session that has one: the
/// greatest path (session ids start with their UTC creation second, so the
/// newest second wins; ties within a second go by goal hash, then suffix)
/// among `<sessions root>/*/state.json`; child sessions are not considered.
/// `Ok(None)` when the sessions root or any such file is missing. Mirrors
/// `latest_top_level_state_path` in the reference. Errors: the sessions root
/// exists but cannot be listed.
pub fn latest_top_level_state_path(repo_root: &Path) -> Result<Option<PathBuf>, SessionError> {
    let root = sessions_root_path(repo_root);
    let entries = match fs::read_dir(&root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SessionError::new("list", &root, e)),
    };
    let mut latest: Option<PathBuf> = None;
    for entry in entries {
        let entry = entry.map_err(|e| SessionError::new("list", &root, e))?;
        let dir = entry.path();
        let candidate = dir.join(STATE_FILENAME);
        if dir.is_dir() && candidate.exists() && latest.as_ref().is_none_or(|l| candidate > *l) {
            latest = Some(candidate);
        }
    }
    Ok(latest)
}

/// The greatest path (in path order) of any entry named `state.json` at any
/// depth below the sessions root, child sessions included; `None` when there
/// is none or the root is missing. Mirrors `latest_state_path` in the
/// reference (a `rglob("state.json")`, so a `state.json` written by a
/// workflow inside a session's subdirectories counts too). Unreadable
/// directories are skipped; symlinked directories are not followed.
pub fn latest_state_path(repo_root: &Path) -> Option<PathBuf> {
    let mut found = Vec::new();
    find_entries_named(&sessions_root_path(repo_root), STATE_FILENAME, &mut found);
    found.into_iter().max()
}

/// Appends every entry (file or directory) named `name` strictly below
/// `dir` to `found`.
fn find_entries_named(dir: &Path, name: &str, found: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_name() == name {
            found.push(path.clone());
        }
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            find_entries_named(&path, name, found);
        }
    }
}

/// `<session dir>/iterations` (reference `iterations_dir_path`).
pub fn iterations_dir_path(repo_root: &Path, session_id: &str) -> PathBuf {
    session_dir_path(repo_root, session_id).join(ITERATIONS_DIRNAME)
}

/// `<session dir>/project_state` (reference `project_state_dir_path`).
pub fn project_state_dir_path(repo_root: &Path, session_id: &str) -> PathBuf {
    session_dir_path(repo_root, session_id).join(PROJECT_STATE_DIRNAME)
}

/// `<session dir>/eval_checks` (reference `eval_checks_dir_path`).
pub fn eval_checks_dir_path(repo_root: &Path, session_id: &str) -> PathBuf {
    session_dir_path(repo_root, session_id).join(EVAL_CHECKS_DIRNAME)
}

/// `<session dir>/harness_outputs` (reference `harness_outputs_dir_path`).
pub fn harness_outputs_dir_path(repo_root: &Path, session_id: &str) -> PathBuf {
    session_dir_path(repo_root, session_id).join(HARNESS_OUTPUTS_DIRNAME)
}

/// `<session dir>/updates_from_user.md` (reference
/// `updates_from_user_path`).
pub fn updates_from_user_path(repo_root: &Path, session_id: &str) -> PathBuf {
    session_dir_path(repo_root, session_id).join(UPDATES_FROM_USER_FILENAME)
}

/// `<session dir>/project_state/finished.md`, the finished-work ledger
/// (reference `finished_path`).
pub fn finished_path(repo_root: &Path, session_id: &str) -> PathBuf {
    project_state_dir_path(repo_root, session_id).join(FINISHED_FILENAME)
}

/// Name of an iteration's directory: the 1-based iteration zero-padded to
/// four digits, `_`, the workflow id, e.g. `0007_plan` (wider numbers are
/// not cut: `12345_plan`). Mirrors `iteration_dir_name` in the reference
/// (`f"{iteration:04d}_{workflow_id}"`).
pub fn iteration_dir_name(iteration: u32, workflow_id: &str) -> String {
    format!("{iteration:04}_{workflow_id}")
}

/// `<session dir>/iterations/<NNNN>_<workflow_id>` (reference
/// `iteration_dir_path`; see [`iteration_dir_name`]).
pub fn iteration_dir_path(
    repo_root: &Path,
    session_id: &str,
    iteration: u32,
    workflow_id: &str,
) -> PathBuf {
    iterations_dir_path(repo_root, session_id).join(iteration_dir_name(iteration, workflow_id))
}

/// `<session dir>/harness_outputs/<NNNN>_<workflow_id>`, where one
/// iteration's step writes its outputs (reference
/// `iteration_harness_output_root`).
pub fn iteration_harness_output_root(
    repo_root: &Path,
    session_id: &str,
    iteration: u32,
    workflow_id: &str,
) -> PathBuf {
    harness_outputs_dir_path(repo_root, session_id).join(iteration_dir_name(iteration, workflow_id))
}

/// Creates (if needed) and returns [`iteration_dir_path`] (reference
/// `ensure_iteration_dir`). Errors: the directory cannot be created.
pub fn ensure_iteration_dir(
    repo_root: &Path,
    session_id: &str,
    iteration: u32,
    workflow_id: &str,
) -> Result<PathBuf, SessionError> {
    let dir = iteration_dir_path(repo_root, session_id, iteration, workflow_id);
    create_dir_all(&dir)?;
    Ok(dir)
}

/// `<iteration dir>/pending_finished_request.json` (reference
/// `pending_finished_request_path`).
pub fn pending_finished_request_path(
    repo_root: &Path,
    session_id: &str,
    iteration: u32,
    workflow_id: &str,
) -> PathBuf {
    iteration_dir_path(repo_root, session_id, iteration, workflow_id)
        .join(PENDING_FINISHED_REQUEST_FILENAME)
}

/// `<iteration dir>/result.json` (reference `result_path`).
pub fn result_path(
    repo_root: &Path,
    session_id: &str,
    iteration: u32,
    workflow_id: &str,
) -> PathBuf {
    iteration_dir_path(repo_root, session_id, iteration, workflow_id).join(RESULT_FILENAME)
}

/// `<iteration dir>/result_text.txt` (the reference names the file,
/// `RESULT_TEXT_FILENAME`, but has no helper).
pub fn result_text_path(
    repo_root: &Path,
    session_id: &str,
    iteration: u32,
    workflow_id: &str,
) -> PathBuf {
    iteration_dir_path(repo_root, session_id, iteration, workflow_id).join(RESULT_TEXT_FILENAME)
}

/// `<iteration dir>/prompt.txt` (the reference names the file,
/// `PROMPT_FILENAME`, but has no helper).
pub fn prompt_path(
    repo_root: &Path,
    session_id: &str,
    iteration: u32,
    workflow_id: &str,
) -> PathBuf {
    iteration_dir_path(repo_root, session_id, iteration, workflow_id).join(PROMPT_FILENAME)
}

/// `<iteration dir>/harness_run_id.txt` (the reference names the file,
/// `HARNESS_RUN_ID_FILENAME`, but has no helper).
pub fn harness_run_id_path(
    repo_root: &Path,
    session_id: &str,
    iteration: u32,
    workflow_id: &str,
) -> PathBuf {
    iteration_dir_path(repo_root, session_id, iteration, workflow_id).join(HARNESS_RUN_ID_FILENAME)
}

/// `<session dir>/control.json`, without touching the disk. The
/// reference's `control_path` also creates the file when missing; that is
/// [`ensure_control_path`] here.
pub fn control_path(repo_root: &Path, session_id: &str) -> PathBuf {
    session_dir_path(repo_root, session_id).join(CONTROL_FILENAME)
}

/// [`control_path`], first creating the file (and the session directory)
/// when missing with `{"state": "running", "reason": "session active",
/// "stop_reason": null, "schema_version": 1}`; an existing file is left as
/// it is. Mirrors `control_path` in the reference, side effect included.
/// Errors: the directory or file cannot be created or written.
pub fn ensure_control_path(repo_root: &Path, session_id: &str) -> Result<PathBuf, SessionError> {
    let path = control_path(repo_root, session_id);
    if let Some(dir) = path.parent() {
        create_dir_all(dir)?;
    }
    write_json_if_missing(&path, &DEFAULT_CONTROL)?;
    Ok(path)
}

/// `<iteration dir>/goal_check.json`, without touching the disk; the
/// reference's default `workflow_id` is
/// [`super::models::GOAL_CHECK_WORKFLOW_ID`]. The reference's
/// `goal_check_path` also creates the iteration directory; that is
/// [`ensure_goal_check_path`] here.
pub fn goal_check_path(
    repo_root: &Path,
    session_id: &str,
    iteration: u32,
    workflow_id: &str,
) -> PathBuf {
    iteration_dir_path(repo_root, session_id, iteration, workflow_id).join(GOAL_CHECK_FILENAME)
}

/// [`goal_check_path`] after creating its iteration directory (see
/// [`ensure_iteration_dir`]). Mirrors `goal_check_path` in the reference,
/// side effect included. Errors: the directory cannot be created.
pub fn ensure_goal_check_path(
    repo_root: &Path,
    session_id: &str,
    iteration: u32,
    workflow_id: &str,
) -> Result<PathBuf, SessionError> {
    Ok(
        ensure_iteration_dir(repo_root, session_id, iteration, workflow_id)?
            .join(GOAL_CHECK_FILENAME),
    )
}

#[cfg(test)]
#[path = "sessions_tests.rs"]
mod tests;
