//! hostile-adapter: an adapter that misbehaves on purpose, to test the
//! sandbox (world `grouped`).
//!
//! Each item's `"attack"` field picks one misbehaviour (missing = `none`):
//!
//! | attack | what happens | the host should |
//! |---|---|---|
//! | `none` | a normal record | record it |
//! | `infinite_loop` | spins forever | stop it at the deadline |
//! | `sleep` | sleeps for an hour (`std::thread::sleep`: a blocking WASI poll) | stop it at the deadline |
//! | `memory_bomb` | allocates and touches memory until allocation fails | stop it at the memory limit |
//! | `stack_overflow` | unbounded, non-tail recursion | classify the trap |
//! | `trap_prepare` | panics in `prepare-episode-group` (seed only) | record a prepare error |
//! | `trap_execute` | panics in `execute` / `execute-episode` | classify the trap |
//! | `trap_release` | panics in `release-episode-group` | attach the release error to the prefix record |
//! | `huge_output` | returns a record with a ~64 MiB string (`"bytes"` overrides) | bound the output |
//! | `invalid_json` | returns text that is not JSON | record `invalid_output` |
//! | `read_host_file` | reads `/etc/passwd`; reports `leaked` and the error | deny it (no preopens) |
//! | `read_env` | counts `std::env::vars()`; reports whether `HOME`/`PATH` were visible | show nothing |
//! | `bad_trace` | emits trace events with a forbidden key and an absolute path | refuse both |
//! | `declared_error` | returns an `adapter-error` (kind `hostile-declared`, retryable) | record `adapter_error` |
//! | `prepare_none` | `prepare` returns none (seed only) | fall back to `execute` |
//! | `open_path` | opens `"path"` for reading (a FIFO, a device) and reads it | refuse what could block, within the deadline |
//! | `hoard_files` | opens `"path"` up to `"count"` times (default 100,000), keeping every handle | refuse opens past `--max-open-files` inside the guest |
//! | `try_reserve` | `Vec::try_reserve("bytes")` (default 256 MiB), reporting the failure | deny the growth with -1, not a trap |
//! | `swap_for_symlink` | replaces the directory `"dir"` by a symlink to `"target"`, then panics | keep every grant on the directory it granted |
//! | `plant_start_sleep` | creates `/work/sleep-on-start`, then panics | (the next instance's start function sleeps: see below) |
//! | `echo_item` | not an attack: records the item's text exactly as received, as `item_text` | send an items-file line as written |
//!
//! The start function (`_initialize`, run while the component is
//! instantiated) sleeps for an hour when the file `/work/sleep-on-start`
//! exists in a granted `/work`: the host must stop it at the deadline.
//!
//! The adapter implements the generated `Guest` traits directly (not the
//! sdk's protocol traits) so that `invalid_json` can return raw text.
//! Records never contain the content of anything read.

use std::hint::black_box;

use sandloop_guest::trace::{self, EventKind};
use sandloop_guest::wit::types::{AdapterError, Context};
use sandloop_guest::worlds::grouped::{episode, episode_groups};
use sandloop_guest::{Error, Item, Record, json, log};

/// Default size of the `huge_output` string.
const HUGE_OUTPUT_BYTES: usize = 64 << 20;

struct Hostile;

/// Group state: what the seed and its items asked for.
struct HostileGroup {
    trap_on_release: bool,
}

impl episode_groups::GuestEpisodeGroup for HostileGroup {}

fn attack_of(item: &Item) -> String {
    item.str_field("attack").unwrap_or("none").to_owned()
}

fn parse(item: &str) -> Result<Item, AdapterError> {
    Ok(Item::from_json(item)?)
}

/// Spin on a value the optimiser cannot see through.
fn infinite_loop() -> ! {
    let mut counter = 0u64;
    loop {
        counter = black_box(counter.wrapping_add(1));
    }
}

/// Allocate 1 MiB chunks, touch every page, keep them all.
fn memory_bomb() -> ! {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut chunk = vec![0u8; 1 << 20];
        for page in chunk.chunks_mut(4096) {
            page[0] = black_box(1);
        }
        hoard.push(black_box(chunk));
    }
}

/// Recursion whose frames stay live across the call: not a loop.
#[inline(never)]
fn recurse(depth: u64, parent: &[u64; 16]) -> u64 {
    if black_box(depth) == u64::MAX {
        return parent[0];
    }
    let mut frame = [0u64; 16];
    frame[(depth % 16) as usize] = depth;
    let below = recurse(black_box(depth + 1), black_box(&frame));
    below
        .wrapping_add(black_box(&frame)[3])
        .wrapping_add(parent[1])
}

fn stack_overflow() -> u64 {
    recurse(0, &[0; 16])
}

fn huge_output(item: &Item) -> String {
    let bytes = item
        .get("bytes")
        .and_then(|v| v.as_u64())
        .map(|n| n as usize)
        .unwrap_or(HUGE_OUTPUT_BYTES);
    let head = r#"{"observation_keys":["attack:huge_output"],"accepted":true,"blob":""#;
    let tail = r#""}"#;
    // Filled as bytes (a memset), not pushed a char at a time: the attack is
    // the size of the output, so it reaches the host's limit in a few
    // milliseconds and never races the call deadline.
    let mut out = Vec::with_capacity(head.len() + bytes + tail.len());
    out.extend_from_slice(head.as_bytes());
    out.resize(head.len() + bytes, b'x');
    out.extend_from_slice(tail.as_bytes());
    String::from_utf8(out).expect("ASCII is UTF-8")
}

fn read_host_file() -> Record {
    let mut record = Record::with_keys(["attack:read_host_file"]);
    match std::fs::read_to_string("/etc/passwd") {
        Ok(text) => {
            record.observe("leak:host_file");
            record.flag("sandbox_leak", 10.0);
            record.set("leaked", true).set("bytes_read", text.len());
        }
        Err(err) => {
            record
                .set("leaked", false)
                .set("error", err.to_string())
                .set("error_kind", format!("{:?}", err.kind()));
        }
    }
    record
}

fn read_env() -> Record {
    let vars: Vec<(String, String)> = std::env::vars().collect();
    let visible = |name: &str| vars.iter().any(|(key, _)| key == name);
    let mut record = Record::with_keys(["attack:read_env"]);
    if !vars.is_empty() {
        record.observe("leak:environment");
    }
    record
        .set("var_count", vars.len())
        .set("home_visible", visible("HOME"))
        .set("path_visible", visible("PATH"))
        .set("leaked", visible("HOME") || visible("PATH"));
    record
}

fn bad_trace() -> Record {
    let attempt = |payload| match trace::emit(EventKind::Lifecycle, payload) {
        Ok(event_id) => json!({"refused": false, "event_id": event_id}),
        Err(reason) => json!({"refused": true, "reason": reason}),
    };
    let forbidden_key = attempt(json!({"stage": "attack", "token": "hunter2"}));
    let absolute_path = attempt(json!({"stage": "attack", "where": "/etc/passwd"}));
    let both_refused = forbidden_key["refused"] == true && absolute_path["refused"] == true;
    let mut record = Record::with_keys(["attack:bad_trace"]);
    if !both_refused {
        record.observe("leak:trace");
        record.flag("trace_validation_gap", 10.0);
    }
    record
        .set("forbidden_key", forbidden_key)
        .set("absolute_path", absolute_path)
        .set("refused", both_refused);
    record
}

/// Where `plant_start_sleep` leaves its marker (in a granted `/work`).
const START_SLEEP_MARKER: &str = "/work/sleep-on-start";

unsafe extern "C" {
    /// The static constructors, as the linker collects them.
    fn __wasm_call_ctors();
}

/// The component's start function: the toolchain's component wrapper calls
/// an exported `_initialize` while the component is instantiated, before
/// any export. It runs the static constructors, then sleeps when told to.
#[unsafe(no_mangle)]
pub extern "C" fn _initialize() {
    // SAFETY: called once, by the instantiation, before any other code.
    unsafe { __wasm_call_ctors() };
    if std::fs::metadata(START_SLEEP_MARKER).is_ok() {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}

fn path_of(item: &Item) -> Result<String, AdapterError> {
    item.str_field("path")
        .map(str::to_owned)
        .ok_or_else(|| Error::invalid_item("the attack needs a \"path\"").into())
}

fn error_fields(record: &mut Record, error: &std::io::Error) {
    record
        .set("error", error.to_string())
        .set("error_kind", format!("{:?}", error.kind()));
}

/// Open `path` and read it: a FIFO with no writer blocks in `open(2)`.
fn open_path(path: &str) -> Record {
    let mut record = Record::with_keys(["attack:open_path"]);
    match std::fs::File::open(path) {
        Ok(mut file) => {
            use std::io::Read;
            let mut buffer = [0u8; 64];
            let read = file.read(&mut buffer);
            record.set("opened", true).set("read_ok", read.is_ok());
        }
        Err(error) => {
            record.set("opened", false);
            error_fields(&mut record, &error);
        }
    }
    record
}

/// Open `path` up to `count` times, keeping every handle until the end.
fn hoard_files(path: &str, count: u64) -> Record {
    let mut hoard = Vec::new();
    let mut record = Record::with_keys(["attack:hoard_files"]);
    for _ in 0..count {
        match std::fs::File::open(path) {
            Ok(file) => hoard.push(file),
            Err(error) => {
                error_fields(&mut record, &error);
                break;
            }
        }
    }
    record.set("opened", hoard.len());
    record
}

/// Ask for `bytes` more memory and report instead of aborting.
fn try_reserve(bytes: usize) -> Record {
    let mut buffer: Vec<u8> = Vec::new();
    let result = buffer.try_reserve(bytes);
    let mut record = Record::with_keys(["attack:try_reserve"]);
    record.set("reserved", result.is_ok());
    if let Err(error) = result {
        record.set("error", error.to_string());
    }
    // Still alive: a small allocation works after the denied one.
    record.set("after", vec![1u8; 1024].len());
    record
}

/// Run `item`'s attack at `stage` (`execute` or `execute_episode`).
fn run(item: &Item, text: &str, stage: &str) -> Result<String, AdapterError> {
    let attack = attack_of(item);
    log::info!("{stage}: attack {attack}");
    let record = match attack.as_str() {
        "infinite_loop" => infinite_loop(),
        "sleep" => {
            std::thread::sleep(std::time::Duration::from_secs(3600));
            Record::with_keys(["attack:sleep"]).with("woke", true)
        }
        "memory_bomb" => memory_bomb(),
        "stack_overflow" => {
            let depth = stack_overflow();
            Record::with_keys(["attack:stack_overflow"])
                .with("survived", true)
                .with("depth", depth)
        }
        "trap_execute" => panic!("hostile-adapter: trap in {stage}"),
        "huge_output" => return Ok(huge_output(item)),
        "invalid_json" => return Ok("this is {not JSON".to_owned()),
        "read_host_file" => read_host_file(),
        "read_env" => read_env(),
        "bad_trace" => bad_trace(),
        "open_path" => open_path(&path_of(item)?),
        "hoard_files" => hoard_files(
            &path_of(item)?,
            item.get("count")
                .and_then(|v| v.as_u64())
                .unwrap_or(100_000),
        ),
        "try_reserve" => try_reserve(
            item.get("bytes")
                .and_then(|v| v.as_u64())
                .map_or(256 << 20, |n| n as usize),
        ),
        "swap_for_symlink" => {
            let dir = path_of(item)?;
            let target = item.str_field("target").unwrap_or("..").to_owned();
            let planted = std::fs::remove_dir_all(&dir).and_then(|()| {
                #[allow(deprecated)] // the one portable spelling on WASI
                std::fs::soft_link(&target, &dir)
            });
            if let Err(error) = planted {
                return Err(Error::infra("hostile-swap", error.to_string()).into());
            }
            panic!("hostile-adapter: {dir} now links to {target}, trapping for a fresh instance");
        }
        "plant_start_sleep" => {
            std::fs::write(START_SLEEP_MARKER, b"sleep").map_err(|error| {
                AdapterError::from(Error::infra("hostile-plant", error.to_string()))
            })?;
            panic!("hostile-adapter: planted {START_SLEEP_MARKER}, now trapping");
        }
        "declared_error" => {
            return Err(Error::infra("hostile-declared", "declared on purpose").into());
        }
        // Not an attack: the exact text the host sent, for checking it.
        "echo_item" => Record::with_keys(["attack:echo_item"]).with("item_text", text),
        // none, and the attacks that only bite in prepare/release
        "none" | "trap_prepare" | "trap_release" | "prepare_none" => {
            let mut record = Record::with_keys([format!("attack:{attack}")]);
            record.observe(format!("stage:{stage}"));
            record
        }
        other => return Err(Error::invalid_item(format!("unknown attack {other:?}")).into()),
    };
    Ok(record.with("stage", stage).to_json())
}

impl episode::Guest for Hostile {
    fn execute(item: String, _ctx: Context) -> Result<String, AdapterError> {
        run(&parse(&item)?, &item, "execute")
    }
}

impl episode_groups::Guest for Hostile {
    type EpisodeGroup = HostileGroup;

    fn prepare_episode_group(
        seed: String,
        items: Vec<String>,
        _ctx: Context,
    ) -> Result<Option<episode_groups::Prepared>, AdapterError> {
        let seed = parse(&seed)?;
        let items = items
            .iter()
            .map(|item| parse(item))
            .collect::<Result<Vec<_>, _>>()?;
        match attack_of(&seed).as_str() {
            "trap_prepare" => panic!("hostile-adapter: trap in prepare"),
            "prepare_none" => return Ok(None),
            _ => {}
        }
        let trap_on_release = attack_of(&seed) == "trap_release"
            || items.iter().any(|item| attack_of(item) == "trap_release");
        let prefix = Record::with_keys(["stage:prepare"]).with("episodes", items.len());
        Ok(Some(episode_groups::Prepared {
            group: episode_groups::EpisodeGroup::new(HostileGroup { trap_on_release }),
            prefix_record: prefix.to_json(),
            checkpoint_ref: None,
        }))
    }

    fn execute_episode(
        _group: episode_groups::EpisodeGroupBorrow<'_>,
        item: String,
        _ctx: Context,
    ) -> Result<String, AdapterError> {
        run(&parse(&item)?, &item, "execute_episode")
    }

    fn release_episode_group(
        group: episode_groups::EpisodeGroup,
        _ctx: Context,
    ) -> Result<(), AdapterError> {
        let group: HostileGroup = group.into_inner();
        if group.trap_on_release {
            panic!("hostile-adapter: trap in release");
        }
        Ok(())
    }
}

sandloop_guest::worlds::grouped::export!(Hostile);
