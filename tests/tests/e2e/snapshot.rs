//! Snapshot forks (`sandloop::sandbox::snapshot`), through the host library:
//! a parent instance of the wizer-instrumented component does some work, its
//! memories and globals are snapshotted into a new component, and children
//! instantiated from the compiled snapshot start with the parent's state,
//! each in its own store.
//!
//! State is read without resource handles (a child has none of the
//! parent's): the sdk keeps prepared groups in a per-instance registry by
//! `execution-group-id`, so `capture-replay-state` finds the group the
//! parent prepared, and `export-replay-state` of the new binding shows its
//! state (replay-probe: the seed's id and the counter of items run on it).

use std::path::Path;
use std::sync::Arc;

use sandloop::episode::adapter::{CallContext, EpisodeAdapter, Item, SeedSource};
use sandloop::sandbox::bindings::exports::sandloop::adapter::{
    episode, episode_groups, replay, seeds, variants,
};
use sandloop::sandbox::bindings::sandloop::adapter::types::Context;
use sandloop::sandbox::snapshot::{
    Instrumented, LiveInstance, SnapshotError, WIZER_INSTANCE, instrument,
};
use sandloop::sandbox::{DirGrant, LoadedAdapter, SandboxConfig, SandboxEngine, WasmAdapter, load};
use sandloop_tests::{
    BENCH_ADAPTER, HELLO_ADAPTER, HOSTILE_ADAPTER, LLM_STEPS, LOOP_STEPS, MARKDOWN_EXPLORER,
    REPLAY_PROBE,
};
use serde_json::{Value, json};

const GROUP: &str = "g-snapshot";

fn config(cache: &Path, dirs: Vec<DirGrant>) -> SandboxConfig {
    SandboxConfig {
        dirs,
        cache_dir: Some(cache.to_path_buf()),
        pool_instances: 16,
        incremental_compilation: true,
        ..SandboxConfig::default()
    }
}

fn load_adapter(path: &str, config: SandboxConfig) -> Arc<LoadedAdapter> {
    let engine = Arc::new(SandboxEngine::new(&config).unwrap());
    Arc::new(load(Path::new(path), engine, Arc::new(config)).unwrap())
}

fn ctx() -> Context {
    Context {
        arm: "main".into(),
        epoch: 1,
        branch_id: "queue_worker_01".into(),
        execution_group_id: Some(GROUP.into()),
    }
}

/// The interfaces the tests call, bound in one instance.
struct Guests {
    groups: episode_groups::Guest,
    replay: replay::Guest,
    seeds: seeds::Guest,
    variants: variants::Guest,
}

impl Guests {
    fn of(live: &mut LiveInstance) -> Guests {
        let pre = live.instance_pre();
        let pre = &pre;
        let (store, instance) = (&mut live.store, &live.instance);
        Guests {
            groups: episode_groups::GuestIndices::new(pre)
                .unwrap()
                .load(&mut *store, instance)
                .unwrap(),
            replay: replay::GuestIndices::new(pre)
                .unwrap()
                .load(&mut *store, instance)
                .unwrap(),
            seeds: seeds::GuestIndices::new(pre)
                .unwrap()
                .load(&mut *store, instance)
                .unwrap(),
            variants: variants::GuestIndices::new(pre)
                .unwrap()
                .load(&mut *store, instance)
                .unwrap(),
        }
    }

    /// `prepare-episode-group` for `seed` (alone in its group) under
    /// [`GROUP`]; its `group` handle is valid in this instance only.
    fn prepare(&self, live: &mut LiveInstance, seed: &Value) -> episode_groups::Prepared {
        let seed = seed.to_string();
        self.groups
            .call_prepare_episode_group(&mut live.store, &seed, std::slice::from_ref(&seed), &ctx())
            .unwrap()
            .unwrap_or_else(|error| panic!("prepare failed: {error:?}"))
            .expect("the adapter prepares a group")
    }

    /// `execute-episode` of `item` on `group`; the record.
    fn execute(
        &self,
        live: &mut LiveInstance,
        group: &episode_groups::Prepared,
        item: &Value,
    ) -> Value {
        let record = self
            .groups
            .call_execute_episode(&mut live.store, group.group, &item.to_string(), &ctx())
            .unwrap()
            .unwrap_or_else(|error| panic!("execute-episode failed: {error:?}"));
        serde_json::from_str(&record).unwrap()
    }

    /// The state of the group registered under [`GROUP`] in this instance,
    /// reached without a handle: `capture-replay-state` by
    /// `execution-group-id`, then `export-replay-state` of the new binding
    /// (dropped afterwards). Returns the lease's projection digest and the
    /// exported state's JSON document.
    fn state(&self, live: &mut LiveInstance) -> (String, Value) {
        let request = replay::CaptureRequest {
            replay_point_id: "rp-test".into(),
            trace_id: GROUP.into(),
            branch_id: "main".into(),
            after_event_id: None,
            next_sequence: 1,
            execution_group_id: GROUP.into(),
        };
        let lease = self
            .replay
            .call_capture_replay_state(&mut live.store, &request)
            .unwrap()
            .unwrap_or_else(|error| panic!("capture failed: {error:?}"));
        let binding = lease.binding.expect("an exact capture has a binding");
        let exported = self
            .replay
            .call_export_replay_state(&mut live.store, binding)
            .unwrap()
            .unwrap_or_else(|error| panic!("export failed: {error:?}"))
            .expect("the state is exportable");
        live.drop_resource(binding).unwrap();
        let document = serde_json::Deserializer::from_slice(&exported)
            .into_iter::<Value>()
            .next()
            .unwrap()
            .unwrap();
        (lease.projection_digest.expect("a digest"), document)
    }
}

/// `(seed_item_id, counter)` of replay-probe's exported state.
fn probe_state(document: &Value) -> (String, u64) {
    let state = &document["state"];
    (
        state["seed_item_id"].as_str().unwrap().to_string(),
        state["counter"].as_u64().unwrap(),
    )
}

fn probe_item(id: &str) -> Value {
    json!({"item_id": id, "family": "probe", "text": format!("text of {id}")})
}

#[test]
fn a_child_starts_with_the_parents_state_and_children_are_isolated() {
    let dir = tempfile::tempdir().unwrap();
    let loaded = load_adapter(REPLAY_PROBE, config(&dir.path().join("cache"), vec![]));
    let instrumented = Instrumented::load(&loaded).unwrap();

    // The parent: a group prepared and three items run on it.
    let mut parent = instrumented.instantiate().unwrap();
    let p = Guests::of(&mut parent);
    let group = p.prepare(&mut parent, &probe_item("seed"));
    for expected in 0..3 {
        let record = p.execute(
            &mut parent,
            &group,
            &probe_item(&format!("item-{expected}")),
        );
        assert_eq!(record["counter_before"], expected, "{record}");
    }
    let (digest_at_snapshot, document) = p.state(&mut parent);
    assert_eq!(probe_state(&document), ("seed".to_string(), 3));

    let snapshot = instrumented
        .snapshot(&mut parent.store, &parent.instance)
        .unwrap();
    assert_eq!(snapshot.sha256.len(), 64);
    assert!(snapshot.accessor_calls >= 3, "{}", snapshot.accessor_calls);
    assert!(snapshot.memory_bytes_read > 0);
    let compiled = instrumented.compile_snapshot(&snapshot).unwrap();
    // The snapshot has the original's exports, not the accessors.
    assert!(
        !compiled
            .loaded()
            .info
            .exports
            .iter()
            .any(|name| name == WIZER_INSTANCE),
        "{:?}",
        compiled.loaded().info.exports
    );
    assert!(
        instrumented
            .loaded()
            .info
            .exports
            .iter()
            .any(|name| name == WIZER_INSTANCE)
    );

    // A WasmAdapter over the compiled snapshot is a child too.
    let mut adapter = WasmAdapter::new(Arc::clone(compiled.loaded()), "child", None);
    assert!(adapter.list_seed_items("main", 1).unwrap().is_empty());
    assert_eq!(adapter.generation(), 1);

    // (c) the parent keeps working after the snapshot: its group runs on.
    let record = p.execute(&mut parent, &group, &probe_item("after-snapshot"));
    assert_eq!(record["counter_before"], 3, "{record}");
    let (_, document) = p.state(&mut parent);
    assert_eq!(probe_state(&document), ("seed".to_string(), 4));

    // (a) children see the parent's state as it was at the snapshot (not
    // the parent's later write).
    let mut a = compiled.instantiate().unwrap();
    let ga = Guests::of(&mut a);
    let mut b = compiled.instantiate().unwrap();
    let gb = Guests::of(&mut b);
    for (guests, child) in [(&ga, &mut a), (&gb, &mut b)] {
        let (digest, document) = guests.state(child);
        assert_eq!(
            digest, digest_at_snapshot,
            "the group's state digest as captured in the parent at the snapshot"
        );
        assert_eq!(probe_state(&document), ("seed".to_string(), 3));
    }

    // (b) a write in one child is seen neither by the other nor by the
    // parent. A child cannot use the parent's group handle (its handle
    // table is empty), so it prepares a group of its own under the same
    // execution-group-id, which replaces the registry entry in its memory.
    let ga_group = ga.prepare(&mut a, &probe_item("child-a"));
    for expected in 0..2 {
        let record = ga.execute(&mut a, &ga_group, &probe_item("a-item"));
        assert_eq!(record["counter_before"], expected, "{record}");
    }
    assert_eq!(probe_state(&ga.state(&mut a).1), ("child-a".to_string(), 2));
    assert_eq!(
        probe_state(&gb.state(&mut b).1),
        ("seed".to_string(), 3),
        "child b does not see child a's write"
    );
    let gb_group = gb.prepare(&mut b, &probe_item("child-b"));
    gb.execute(&mut b, &gb_group, &probe_item("b-item"));
    assert_eq!(probe_state(&gb.state(&mut b).1), ("child-b".to_string(), 1));
    assert_eq!(
        probe_state(&ga.state(&mut a).1),
        ("child-a".to_string(), 2),
        "child a does not see child b's write"
    );
    assert_eq!(
        probe_state(&p.state(&mut parent).1),
        ("seed".to_string(), 4),
        "the parent sees neither child's write"
    );

    // A child made after the others were dropped (likely in a reused pool
    // slot) starts from the snapshot again.
    drop((a, b));
    for _ in 0..3 {
        let mut c = compiled.instantiate().unwrap();
        let gc = Guests::of(&mut c);
        assert_eq!(probe_state(&gc.state(&mut c).1), ("seed".to_string(), 3));
        let group = gc.prepare(&mut c, &probe_item("child-c"));
        gc.execute(&mut c, &group, &probe_item("c-item"));
    }

    // The parent can be snapshotted again; the new snapshot has its new state.
    let again = instrumented
        .snapshot(&mut parent.store, &parent.instance)
        .unwrap();
    assert_ne!(again.sha256, snapshot.sha256);
    let compiled_again = instrumented.compile_snapshot(&again).unwrap();
    let mut d = compiled_again.instantiate().unwrap();
    let gd = Guests::of(&mut d);
    assert_eq!(probe_state(&gd.state(&mut d).1), ("seed".to_string(), 4));
}

/// A generated markdown document with a few of everything the explorer
/// counts.
fn markdown_document() -> String {
    let mut text = String::from("# Snapshot test\n\nA document for snapshot forks.\n\n");
    for n in 0..20 {
        text.push_str(&format!(
            "## Section {n}\n\nParagraph {n} with *emphasis* and a [link](https://example.com/{n}).\n\n\
             - item {n}\n  - nested {n}\n\n```rust\nfn f{n}() {{}}\n```\n\n| a | b |\n|---|---|\n| {n} | x |\n\n"
        ));
    }
    text
}

#[test]
fn markdown_explorer_children_see_the_prepared_document_but_not_its_wasi_handles() {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir(&docs).unwrap();
    std::fs::write(docs.join("README.md"), markdown_document()).unwrap();
    let grants = DirGrant::parse_all(&[format!("{}::/docs:ro", docs.display())]).unwrap();
    let loaded = load_adapter(MARKDOWN_EXPLORER, config(&dir.path().join("cache"), grants));
    let instrumented = Instrumented::load(&loaded).unwrap();

    // The instrumented component still works for normal calls, through the
    // ordinary adapter path, with the same results as the original.
    let call_ctx = CallContext {
        arm: "main".into(),
        epoch: 1,
        branch_id: "queue_worker_01".into(),
        execution_group_id: Some(GROUP.into()),
    };
    let mut records = Vec::new();
    for adapter in [&loaded, instrumented.loaded()] {
        let mut adapter = WasmAdapter::new(Arc::clone(adapter), "queue_worker_01", None);
        let seeds = adapter.list_seed_items("main", 1).unwrap();
        let seed = seeds
            .iter()
            .find(|seed| seed["item_id"] == "README.md")
            .unwrap()
            .clone();
        let spec = Item::from(
            json!({"spec_id": "v1", "seed_family": "readme", "ops": []})
                .as_object()
                .unwrap()
                .clone(),
        );
        let variant = adapter.compile_variant(&spec, &seed).unwrap();
        let items = vec![seed.clone(), variant];
        let prepared = adapter
            .prepare_episode_group(&seed, &items, &call_ctx)
            .unwrap()
            .unwrap();
        let mut run = vec![
            json!(seeds),
            Value::Object(prepared.prefix_record.clone().unwrap()),
        ];
        for item in &items {
            let record = adapter
                .execute_episode(&prepared.handle, item, &call_ctx)
                .unwrap();
            run.push(Value::Object(record));
        }
        adapter
            .release_episode_group(prepared.handle, &call_ctx)
            .unwrap();
        records.push(run);
    }
    assert_eq!(
        records[0], records[1],
        "original and instrumented give the same records"
    );

    // A parent that listed the seeds and prepared README.md (both read
    // /docs through WASI).
    let mut parent = instrumented.instantiate().unwrap();
    let p = Guests::of(&mut parent);
    let listed = p
        .seeds
        .call_list_seed_items(&mut parent.store, "main", 1)
        .unwrap()
        .unwrap();
    let seed: Value = serde_json::from_str(
        listed
            .iter()
            .find(|seed| seed.contains("\"README.md\""))
            .unwrap(),
    )
    .unwrap();
    let group = p.prepare(&mut parent, &seed);
    let (digest, document) = p.state(&mut parent);
    assert_eq!(document["relative_path"], "README.md");

    let snapshot = instrumented
        .snapshot(&mut parent.store, &parent.instance)
        .unwrap();
    let compiled = instrumented.compile_snapshot(&snapshot).unwrap();

    // The child has the parsed document (same digest, same text) and runs
    // pure calls.
    let mut child = compiled.instantiate().unwrap();
    let c = Guests::of(&mut child);
    let (child_digest, child_document) = c.state(&mut child);
    assert_eq!(child_digest, digest);
    assert_eq!(child_document, document);
    let spec = json!({"spec_id": "v2", "seed_family": "readme", "ops": []}).to_string();
    let variant = c
        .variants
        .call_compile_variant(&mut child.store, &spec, &seed.to_string())
        .unwrap()
        .unwrap();
    assert!(variant.contains("README.md~v2"), "{variant}");

    // But wasi-libc's preopened `/docs` is a handle of the parent's
    // instance: the child's first file system call traps.
    let error = c
        .seeds
        .call_list_seed_items(&mut child.store, "main", 1)
        .expect_err("a child cannot use the parent's WASI handles");
    let message = format!("{error:?}");
    assert!(message.contains("unknown handle index"), "{message}");

    // The parent still reads /docs and runs its group.
    p.seeds
        .call_list_seed_items(&mut parent.store, "main", 1)
        .unwrap()
        .unwrap();
    let record = p.execute(&mut parent, &group, &seed);
    assert_eq!(record["episode"], "seed", "{record}");
    assert_eq!(record["bytes"], markdown_document().len(), "{record}");
}

#[test]
fn wizer_accepts_the_example_components_and_errors_name_the_failing_step() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    // Every example adapter instruments, compiles and snapshots.
    for path in [
        HELLO_ADAPTER,
        MARKDOWN_EXPLORER,
        HOSTILE_ADAPTER,
        BENCH_ADAPTER,
        REPLAY_PROBE,
    ] {
        let loaded = load_adapter(path, config(&cache, vec![]));
        let instrumented =
            Instrumented::load(&loaded).unwrap_or_else(|error| panic!("{path}: {error}"));
        assert!(instrumented.info.size_bytes > instrumented.info.original_bytes);
        let mut parent = instrumented.instantiate().unwrap();
        let snapshot = instrumented
            .snapshot(&mut parent.store, &parent.instance)
            .unwrap_or_else(|error| panic!("{path}: {error}"));
        let compiled = instrumented
            .compile_snapshot(&snapshot)
            .unwrap_or_else(|error| panic!("{path}: {error}"));
        compiled.instantiate().unwrap();
        // The second instrumentation comes from the cache.
        let again = Instrumented::load(&loaded).unwrap();
        assert_eq!(again.info.sha256, instrumented.info.sha256);
        assert_eq!(
            again.info.cache,
            sandloop::sandbox::cache::CacheOutcome::Hit
        );
        // A new engine (as in a later process) gets the functions saved
        // with the compiled instrumented component back, and compiles the
        // snapshot from them into a working component.
        let later = load_adapter(path, config(&cache, vec![]));
        let warm = Instrumented::load(&later).unwrap();
        assert!(warm.info.warm_functions > 0, "{path}");
        let compiled = warm
            .compile_snapshot_bytes(&snapshot.bytes, &snapshot.sha256)
            .unwrap_or_else(|error| panic!("{path}: {error}"));
        compiled.instantiate().unwrap();
        if path == REPLAY_PROBE {
            // Damaged saved functions cost one cold compile, after which
            // they are written again.
            let saved: Vec<_> = std::fs::read_dir(&cache)
                .unwrap()
                .map(|entry| entry.unwrap().path())
                .filter(|file| {
                    file.extension().is_some_and(|e| e == "functions")
                        && file.to_string_lossy().contains(&warm.info.sha256)
                })
                .collect();
            assert_eq!(saved.len(), 1, "{saved:?}");
            std::fs::write(&saved[0], b"damaged").unwrap();
            let cold = Instrumented::load(&load_adapter(path, config(&cache, vec![]))).unwrap();
            assert_eq!(cold.info.warm_functions, 0);
            cold.compile_snapshot_bytes(&snapshot.bytes, &snapshot.sha256)
                .unwrap();
            let again = Instrumented::load(&load_adapter(path, config(&cache, vec![]))).unwrap();
            assert!(again.info.warm_functions > 0, "written again");
        }
    }
    // The workflow plugins instrument too.
    for path in [LOOP_STEPS, LLM_STEPS] {
        instrument(path, &std::fs::read(path).unwrap())
            .unwrap_or_else(|error| panic!("{path}: {error}"));
    }

    // Refused: a core module, and bytes that are not WebAssembly.
    let core = instrument("core.wasm", b"\0asm\x01\0\0\0").unwrap_err();
    assert!(matches!(core, SnapshotError::Instrument { .. }));
    assert!(
        core.to_string()
            .starts_with("wizer cannot instrument core.wasm for snapshots: "),
        "{core}"
    );
    assert!(core.to_string().contains("core module"), "{core}");
    let garbage = instrument("garbage.wasm", b"not wasm").unwrap_err();
    assert!(
        matches!(garbage, SnapshotError::Instrument { .. }),
        "{garbage}"
    );

    // Instrumenting with other bytes than the loaded component's.
    let probe = load_adapter(REPLAY_PROBE, config(&cache, vec![]));
    let other = std::fs::read(BENCH_ADAPTER).unwrap();
    let error = Instrumented::new(&probe, other).err().unwrap();
    assert!(
        matches!(error, SnapshotError::NotTheLoadedComponent { .. }),
        "{error}"
    );

    // Snapshotting an instance of the original (not instrumented) component.
    let instrumented = Instrumented::load(&probe).unwrap();
    let mut plain = LiveInstance::new(&probe).unwrap();
    let error = instrumented
        .snapshot(&mut plain.store, &plain.instance)
        .err()
        .unwrap();
    assert!(
        matches!(error, SnapshotError::ForeignInstance { .. }),
        "{error}"
    );
}

#[test]
fn a_poisoned_parent_fails_at_the_accessor_call() {
    let dir = tempfile::tempdir().unwrap();
    let loaded = load_adapter(HOSTILE_ADAPTER, config(&dir.path().join("cache"), vec![]));
    let instrumented = Instrumented::load(&loaded).unwrap();
    let mut parent = instrumented.instantiate().unwrap();
    let pre = instrumented.instance_pre();
    let episode =
        sandloop::sandbox::bindings::exports::sandloop::adapter::episode::GuestIndices::new(pre)
            .unwrap()
            .load(&mut parent.store, &parent.instance)
            .unwrap();
    let item = json!({"item_id": "boom", "attack": "trap_execute"}).to_string();
    let trapped = episode.call_execute(&mut parent.store, &item, &ctx());
    assert!(trapped.is_err(), "the item traps");
    let error = instrumented
        .snapshot(&mut parent.store, &parent.instance)
        .err()
        .unwrap();
    assert!(
        matches!(error, SnapshotError::AccessorCall { .. }),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("accessor call `wasmtime:wizer/access#"),
        "{message}"
    );
    assert!(
        message.contains("cannot enter component instance"),
        "{message}"
    );
}

/// The Python and JavaScript no-op adapters (componentize-py and
/// componentize-js components, an interpreter heap each): each is
/// instrumented, a parent runs `execute` on an item, is snapshotted, and a
/// child from the compiled snapshot runs the same item with the same
/// result. Prints what wizer said and the costs. Needs the guest
/// toolchains, like the conformance suite.
#[test]
fn python_and_javascript_components_snapshot_too() {
    let components: Vec<&str> = [sandloop_tests::python_noop(), sandloop_tests::js_noop()]
        .into_iter()
        .flatten()
        .collect();
    if components.len() < 2 {
        assert!(
            std::env::var_os("SANDLOOP_SKIP_GUEST_LANGS").is_some(),
            "the Python/JavaScript components were not built; run `bash .ci/guest-toolchains.sh` \
             (or set SANDLOOP_SKIP_GUEST_LANGS=1 to skip them knowingly)"
        );
        eprintln!("SKIPPED: SANDLOOP_SKIP_GUEST_LANGS is set");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut refused = Vec::new();
    let item = json!({"item_id": "x", "family": "f", "text": "hello"}).to_string();
    for path in components.into_iter().map(std::path::PathBuf::from) {
        let shown = path.display().to_string();
        let bytes = std::fs::read(&path).unwrap();
        let started = std::time::Instant::now();
        if let Err(error) = instrument(&shown, &bytes) {
            eprintln!("{shown}: refused: {error}");
            refused.push(error.to_string());
            continue;
        }
        eprintln!("{shown}: instrumented in {:?}", started.elapsed());
        let engine = Arc::new(SandboxEngine::new(&config(dir.path(), vec![])).unwrap());
        let loaded = match load(&path, engine, Arc::new(config(dir.path(), vec![]))) {
            Ok(loaded) if loaded.protocols.execute => loaded,
            Ok(_) => panic!("{shown}: no `episode` export"),
            Err(error) => panic!("{shown}: not an adapter ({error})"),
        };
        let instrumented = Instrumented::load(&loaded).unwrap();
        let execute = |live: &mut LiveInstance| {
            let pre = live.instance_pre();
            episode::GuestIndices::new(&pre)
                .unwrap()
                .load(&mut live.store, &live.instance)
                .unwrap()
                .call_execute(&mut live.store, &item, &ctx())
                .unwrap_or_else(|error| panic!("{shown}: execute trapped: {error:?}"))
                .map_err(|error| format!("{error:?}"))
        };
        let mut parent = instrumented.instantiate().unwrap();
        let in_parent = execute(&mut parent);
        let snapshot = instrumented
            .snapshot(&mut parent.store, &parent.instance)
            .unwrap();
        let compiled = instrumented.compile_snapshot(&snapshot).unwrap();
        let mut child = compiled.instantiate().unwrap();
        assert_eq!(execute(&mut child), in_parent, "{shown}");
        eprintln!(
            "{shown}: {} bytes; snapshot of {} bytes in {:?}, compiled in {:?}; \
             the child's execute gives the parent's result",
            bytes.len(),
            snapshot.bytes.len(),
            snapshot.timing.total,
            compiled.compile
        );
    }
    assert!(refused.is_empty(), "{refused:#?}");
}
