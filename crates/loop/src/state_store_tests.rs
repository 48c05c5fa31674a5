use std::sync::Arc;
use std::sync::mpsc;
use std::thread;

use serde::{Deserialize, Serializer};

use super::*;

/// A small state with a field whose serialisation can be made to fail.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Counter {
    active_session_id: String,
    status: String,
    count: u64,
    #[serde(default, skip_serializing_if = "is_false", serialize_with = "refuse")]
    poison: bool,
}

fn is_false(value: &bool) -> bool {
    !*value
}

fn refuse<S: Serializer>(_: &bool, _: S) -> Result<S::Ok, S::Error> {
    Err(serde::ser::Error::custom("poisoned state"))
}

impl StoredState for Counter {
    fn active_session_id(&self) -> &str {
        &self.active_session_id
    }

    fn is_terminal(&self) -> bool {
        is_terminal_status(&self.status)
    }
}

fn counter(count: u64) -> Counter {
    Counter {
        active_session_id: "s1".to_owned(),
        status: "running".to_owned(),
        count,
        poison: false,
    }
}

fn session_state_path(root: &Path) -> PathBuf {
    root.join(".sandloop/sessions/s1/state.json")
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn default_timeout_is_thirty_seconds() {
    let store = StateStore::<Counter>::new("/nowhere");
    assert_eq!(store.lock_timeout(), Duration::from_secs(30));
    assert_eq!(store.state_path(), None);
}

#[test]
fn first_write_goes_to_the_active_session_and_later_stores_find_it() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    let store = StateStore::<Counter>::new(root);
    assert_eq!(store.read_state().unwrap(), None);
    // With no state yet the lock sits in .sandloop/.
    assert!(root.join(".sandloop/state.json.lock").is_file());

    store.write_state(&counter(1)).unwrap();
    let path = session_state_path(root);
    assert_eq!(store.state_path(), Some(path.clone()));
    let text = fs::read_to_string(&path).unwrap();
    assert_eq!(
        text,
        "{\n  \"active_session_id\": \"s1\",\n  \"status\": \"running\",\n  \"count\": 1\n}"
    );

    let follower = StateStore::<Counter>::new(root);
    assert_eq!(follower.read_state().unwrap(), Some(counter(1)));
    assert_eq!(follower.state_path(), Some(path.clone()));
    assert_eq!(
        names_in(path.parent().unwrap()),
        ["state.json", "state.json.lock"]
    );
}

#[test]
fn lock_timeout_names_the_lock_file() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path().to_path_buf();
    let path = session_state_path(&root);
    StateStore::<Counter>::with_state_path(&root, &path)
        .write_state(&counter(0))
        .unwrap();

    let (locked_tx, locked_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let holder = {
        let (root, path) = (root.clone(), path.clone());
        thread::spawn(move || {
            let store = StateStore::<Counter>::with_state_path(root, path);
            store
                .mutate(|state| {
                    locked_tx.send(()).unwrap();
                    release_rx.recv().unwrap();
                    let mut state = state.unwrap();
                    state.count += 1;
                    (state, ())
                })
                .unwrap();
        })
    };
    locked_rx.recv().unwrap();

    let waiter = StateStore::<Counter>::with_state_path(&root, &path)
        .with_lock_timeout(Duration::from_millis(200));
    let started = Instant::now();
    let error = waiter.read_state().unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(200));
    let lock_path = path.with_file_name("state.json.lock");
    match &error {
        StateStoreError::LockTimeout {
            lock_path: reported,
            timeout,
        } => {
            assert_eq!(reported, &lock_path);
            assert_eq!(*timeout, Duration::from_millis(200));
        }
        other => panic!("expected a lock timeout, got {other:?}"),
    }
    let message = error.to_string();
    assert!(
        message.contains(&lock_path.display().to_string()),
        "{message}"
    );
    assert!(message.contains("timed out after 0.2s"), "{message}");

    release_tx.send(()).unwrap();
    holder.join().unwrap();
    assert_eq!(waiter.read_state().unwrap().unwrap().count, 1);
}

#[test]
fn zero_timeout_tries_once() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    let path = session_state_path(root);
    let store =
        StateStore::<Counter>::with_state_path(root, &path).with_lock_timeout(Duration::ZERO);
    store.write_state(&counter(0)).unwrap();
    let lock = File::create(path.with_file_name(LOCK_FILENAME)).unwrap();
    lock.lock().unwrap();
    assert!(matches!(
        store.read_state(),
        Err(StateStoreError::LockTimeout { .. })
    ));
    lock.unlock().unwrap();
    assert_eq!(store.read_state().unwrap(), Some(counter(0)));
}

#[test]
fn concurrent_mutations_are_never_lost() {
    const THREADS: u64 = 8;
    const EACH: u64 = 40;
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path().to_path_buf();
    let path = session_state_path(&root);
    let shared = Arc::new(StateStore::<Counter>::with_state_path(&root, &path));
    shared.write_state(&counter(0)).unwrap();

    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let shared = Arc::clone(&shared);
            let (root, path) = (root.clone(), path.clone());
            thread::spawn(move || {
                // Half the threads share one store, half have their own
                // handle on the same file.
                let own = StateStore::<Counter>::with_state_path(root, path);
                let store: &StateStore<Counter> = if i % 2 == 0 { &shared } else { &own };
                for _ in 0..EACH {
                    let seen = store
                        .mutate(|state| {
                            let mut state = state.expect("state exists");
                            state.count += 1;
                            let seen = state.count;
                            (state, seen)
                        })
                        .unwrap();
                    assert!(seen >= 1);
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    assert_eq!(shared.read_state().unwrap().unwrap().count, THREADS * EACH);
    assert_eq!(
        names_in(path.parent().unwrap()),
        ["state.json", "state.json.lock"]
    );
}

#[test]
fn a_failed_serialisation_leaves_the_old_file_intact() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    let path = session_state_path(root);
    let store = StateStore::<Counter>::with_state_path(root, &path);
    store.write_state(&counter(1)).unwrap();
    let before = fs::read(&path).unwrap();

    let poisoned = Counter {
        poison: true,
        ..counter(2)
    };
    let error = store.write_state(&poisoned).unwrap_err();
    assert!(
        matches!(error, StateStoreError::Serialize { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("poisoned state"), "{error}");
    let error = store.mutate(|_| (poisoned.clone(), ())).unwrap_err();
    assert!(
        matches!(error, StateStoreError::Serialize { .. }),
        "{error:?}"
    );

    assert_eq!(fs::read(&path).unwrap(), before);
    assert!(!path.with_file_name(TEMP_FILENAME).exists());
}

#[test]
fn writes_go_through_the_temporary_file() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    let path = session_state_path(root);
    let store = StateStore::<Counter>::with_state_path(root, &path);
    store.write_state(&counter(1)).unwrap();
    let before = fs::read(&path).unwrap();
    let temp = path.with_file_name("state.json.tmp");

    // The temporary file cannot be created: the write fails before the
    // state file is touched.
    fs::create_dir(&temp).unwrap();
    let error = store.write_state(&counter(2)).unwrap_err();
    match &error {
        StateStoreError::Io {
            action,
            path: failed,
            ..
        } => {
            assert_eq!(*action, "create");
            assert_eq!(failed, &temp);
        }
        other => panic!("expected an I/O error, got {other:?}"),
    }
    assert_eq!(fs::read(&path).unwrap(), before);
    fs::remove_dir(&temp).unwrap();

    // A stray temporary file left by a crash is neither read nor kept.
    fs::write(&temp, "{half a st").unwrap();
    assert_eq!(store.read_state().unwrap(), Some(counter(1)));
    store.write_state(&counter(3)).unwrap();
    assert!(!temp.exists());
    assert_eq!(store.read_state().unwrap(), Some(counter(3)));
}

#[test]
fn a_failing_mutator_writes_nothing() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    let path = session_state_path(root);
    let store = StateStore::<Counter>::with_state_path(root, &path);
    store.write_state(&counter(1)).unwrap();

    #[derive(Debug, thiserror::Error)]
    enum Refused {
        #[error("refused")]
        No,
        #[error(transparent)]
        Store(#[from] StateStoreError),
    }
    let result: Result<(), Refused> = store.try_mutate(|_| Err(Refused::No));
    assert!(matches!(result, Err(Refused::No)));
    assert_eq!(store.read_state().unwrap(), Some(counter(1)));
    let value = store
        .try_mutate(|state| {
            Ok::<_, Refused>((
                Counter {
                    count: 5,
                    ..state.unwrap()
                },
                "done",
            ))
        })
        .unwrap();
    assert_eq!(value, "done");
    assert_eq!(store.read_state().unwrap(), Some(counter(5)));
}

#[test]
fn archive_moves_the_state_aside_with_a_utc_stamp() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    let path = session_state_path(root);
    let store = StateStore::<Counter>::with_state_path(root, &path);
    assert_eq!(store.archive_state().unwrap(), None);

    let finished = Counter {
        status: "goal_met".to_owned(),
        ..counter(4)
    };
    store.write_state(&finished).unwrap();
    assert!(store.is_terminal_state(&finished));
    let archive = store.archive_state().unwrap().expect("archived");
    let name = archive.file_name().unwrap().to_str().unwrap().to_owned();
    let stamp = name
        .strip_prefix("state.json.archive_")
        .and_then(|rest| rest.strip_suffix(".json"))
        .unwrap_or_else(|| panic!("{name}"));
    assert_eq!(stamp.len(), 16, "{name}");
    assert!(
        stamp.char_indices().all(|(i, c)| match i {
            8 => c == 'T',
            15 => c == 'Z',
            _ => c.is_ascii_digit(),
        }),
        "{name}"
    );
    assert_eq!(archive.parent(), path.parent());
    assert!(!path.exists());
    let archived: Counter = serde_json::from_slice(&fs::read(&archive).unwrap()).unwrap();
    assert_eq!(archived, finished);
    assert_eq!(store.read_state().unwrap(), None);
}

#[test]
fn archives_of_one_second_do_not_overwrite_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let first = archive_path(&state, "20261129T233000Z");
    assert_eq!(
        first,
        dir.path().join("state.json.archive_20261129T233000Z.json")
    );
    fs::write(&first, "").unwrap();
    let second = archive_path(&state, "20261129T233000Z");
    assert_eq!(
        second,
        dir.path()
            .join("state.json.archive_20261129T233000Z_1.json")
    );
    fs::write(&second, "").unwrap();
    assert_eq!(
        archive_path(&state, "20261129T233000Z"),
        dir.path()
            .join("state.json.archive_20261129T233000Z_2.json")
    );
}

#[test]
fn terminal_statuses() {
    for status in ["stopped", "goal_met", "failed", "max_turns"] {
        assert!(is_terminal_status(status), "{status}");
    }
    assert!(!is_terminal_status("running"));
    assert!(!is_terminal_status(""));
}

#[test]
fn corrupt_state_files_are_reported_with_path_and_position() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    let path = session_state_path(root);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let store = StateStore::<Counter>::with_state_path(root, &path);

    fs::write(&path, "{\n  \"count\": 1,\n  oops\n}").unwrap();
    let error = store.read_state().unwrap_err();
    match &error {
        StateStoreError::Corrupt {
            path: reported,
            line,
            column,
            ..
        } => {
            assert_eq!(reported, &path);
            assert_eq!((*line, *column), (3, 3));
        }
        other => panic!("expected a corrupt-file error, got {other:?}"),
    }
    let message = error.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("line 3 column 3"), "{message}");

    // Valid JSON of the wrong shape.
    fs::write(
        &path,
        "{\"active_session_id\": \"s1\", \"status\": \"running\", \"count\": \"x\"}",
    )
    .unwrap();
    let error = store.read_state().unwrap_err();
    assert!(
        matches!(error, StateStoreError::Corrupt { line: 1, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("invalid type"), "{error}");

    // An empty file, and a mutation over a corrupt file, which writes nothing.
    fs::write(&path, "").unwrap();
    assert!(matches!(
        store.read_state(),
        Err(StateStoreError::Corrupt { .. })
    ));
    assert!(store.mutate(|_| (counter(9), ())).is_err());
    assert!(matches!(
        store.archive_state(),
        Err(StateStoreError::Corrupt { .. })
    ));
    assert_eq!(fs::read(&path).unwrap(), b"");
}

#[test]
fn clear_removes_only_a_pinned_state() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    StateStore::<Counter>::new(root)
        .write_state(&counter(1))
        .unwrap();
    let path = session_state_path(root);

    // Not pinned yet: nothing is removed (as in the reference).
    StateStore::<Counter>::new(root).clear_state().unwrap();
    assert!(path.exists());

    let store = StateStore::<Counter>::new(root);
    store.read_state().unwrap();
    store.clear_state().unwrap();
    assert!(!path.exists());
    store.clear_state().unwrap();
    assert_eq!(store.read_state().unwrap(), None);
}
