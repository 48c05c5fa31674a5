//! replay-probe: an `isolated` adapter that breaks each replay and replay
//! child rule on command, for sandloop's end-to-end tests (see
//! `README.md`).
//!
//! Items come from an items file (`--items`); each names its faults in a
//! `"faults"` array (see [`faults`]). Without faults every call is honest:
//! exact fidelity, equal digests, export/import round trips.
//!
//! - State: the group holds a [`ProbeState`] (the seed's id and text and a
//!   counter, starting at 0); its projection digest is [`digest`] (FNV-1a
//!   64 over canonical bytes, 16 hex characters).
//! - Every item run (`execute`, `execute-episode`, `run-replay-suffix`,
//!   `run-replay-child`) emits one `action_outcome` trace event and returns
//!   `observation_keys: ["probe:<item_id>"]` with `counter_before` (the
//!   counter it found, then incremented) and `via` (`execute`, `episode`,
//!   `replay`, `child`). A correct restore or fork gives every suffix and
//!   child `counter_before` 0.
//! - Faults of the seed (the group's first item) apply to the whole point:
//!   capture, export, import, release. Faults of an item apply when it is
//!   the restore's target (`target-branch-id` = its `item_id`): restore,
//!   validate, finalize; and when `run-replay-suffix` runs it.
//! - Isolated children (see [`children`]) fork from the exported state; an
//!   item's faults apply to the child whose `child-id` is its `item_id`.
//! - `list_seed_items` returns no seeds; `compile_variant` makes
//!   `{seed_item_id}~{spec_id}` carrying the spec's own `"faults"`.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

use sandloop_guest::trace::{self, EventKind};
use sandloop_guest::{
    CaptureRequest, Context, Episode, EpisodeGroups, EquivalenceCheck, EquivalenceReport, Error,
    Fidelity, Item, Prepared, Record, Replay, RestoreReceipt, RestoreRequest, Seeds, StateLease,
    Value, VariantSpec, Variants, json, log,
};

pub mod children;
pub mod faults;

use faults::{Fault, Faults};

/// `schema` of exported replay state.
pub const STATE_SCHEMA: &str = "replay-probe/state/v1";

/// The adapter (stateless; all state lives in groups and bindings).
#[derive(Default)]
pub struct ReplayProbe;

/// Largest `pad_bytes` a seed may ask for (the host bounds exported state
/// by `--max-output`, 8 MiB by default).
pub const MAX_PAD_BYTES: u64 = 8 << 20;

/// The prefix state a group holds and a replay point captures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeState {
    /// `item_id` of the seed.
    pub seed_item_id: String,
    /// `text` of the seed.
    pub seed_text: String,
    /// Items run on this state so far.
    pub counter: u64,
    /// Opaque bytes the seed's `pad_bytes` asks for (empty by default).
    pub padding: Padding,
}

impl ProbeState {
    /// The state a prepare makes for `seed`, with the padding its
    /// `pad_bytes` asks for. An invalid `pad_bytes` is an `invalid-item`.
    fn of(seed: &Item) -> Result<ProbeState, Error> {
        let pad_bytes = pad_bytes_of(seed.get("pad_bytes")).ok_or_else(|| {
            Error::invalid_item(format!(
                "pad_bytes must be an integer from 0 to {MAX_PAD_BYTES}"
            ))
        })?;
        Ok(ProbeState {
            seed_item_id: seed.item_id().to_owned(),
            seed_text: seed.text().to_owned(),
            counter: 0,
            padding: Padding::generate(pad_bytes as usize, seed.item_id()),
        })
    }

    fn to_json(&self) -> Value {
        let mut value = json!({
            "seed_item_id": self.seed_item_id,
            "seed_text": self.seed_text,
            "counter": self.counter,
        });
        if !self.padding.is_empty() {
            value["pad_bytes"] = json!(self.padding.len());
        }
        value
    }

    /// The state without its padding (which follows the JSON document in
    /// exported state; see [`decode_state`]).
    fn from_json(value: &Value) -> Option<ProbeState> {
        Some(ProbeState {
            seed_item_id: value.get("seed_item_id")?.as_str()?.to_owned(),
            seed_text: value.get("seed_text")?.as_str()?.to_owned(),
            counter: value.get("counter")?.as_u64()?,
            padding: Padding::default(),
        })
    }
}

/// A `pad_bytes` field: absent or `null` is 0; anything but an integer
/// from 0 to [`MAX_PAD_BYTES`] is `None`.
fn pad_bytes_of(value: Option<&Value>) -> Option<u64> {
    match value {
        None | Some(Value::Null) => Some(0),
        Some(value) => value.as_u64().filter(|n| *n <= MAX_PAD_BYTES),
    }
}

/// Padding bytes of a state and their [`padding_hash`], computed once when
/// the padding is made or adopted. The bytes are never changed in place,
/// so the hash always describes them; the state's [`digest`] covers the
/// padding through it without reading 64 KiB again.
///
/// Adopted padding stays in the buffer it arrived in (after the JSON
/// document of the exported state), so a fork copies nothing.
#[derive(Clone, Default)]
pub struct Padding {
    buf: Vec<u8>,
    start: usize,
    hash: u64,
}

impl Padding {
    /// `len` deterministic pseudo-random bytes derived from `seed`.
    pub fn generate(len: usize, seed: &str) -> Padding {
        if len == 0 {
            return Padding::default();
        }
        let mut x = seed.bytes().fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
        }) | 1;
        let mut buf = Vec::with_capacity(len + 8);
        while buf.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf.extend_from_slice(&x.to_le_bytes());
        }
        buf.truncate(len);
        Padding::adopt(buf, 0)
    }

    /// The padding at `buf[start..]`, hashed once here.
    pub fn adopt(buf: Vec<u8>, start: usize) -> Padding {
        let hash = padding_hash(&buf[start..]);
        Padding { buf, start, hash }
    }

    /// The padding bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// Number of padding bytes.
    pub fn len(&self) -> usize {
        self.buf.len() - self.start
    }

    /// True without padding.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// [`padding_hash`] of [`Padding::bytes`].
    pub fn hash(&self) -> u64 {
        self.hash
    }
}

impl PartialEq for Padding {
    fn eq(&self, other: &Padding) -> bool {
        self.hash == other.hash && self.bytes() == other.bytes()
    }
}

impl Eq for Padding {}

impl std::fmt::Debug for Padding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Padding({} bytes, {:016x})", self.len(), self.hash)
    }
}

/// A fast 64-bit hash of padding: four independent multiply-rotate lanes
/// over 8-byte little-endian words (one pass, no table, no bounds checks:
/// about 1 µs for 64 KiB in the component), then the odd words and bytes.
/// Not cryptographic; it only has to change when the bytes do.
pub fn padding_hash(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mix = |lane: u64, word: &[u8; 8]| {
        (lane ^ u64::from_le_bytes(*word))
            .wrapping_mul(K)
            .rotate_left(29)
    };
    let (words, tail) = bytes.as_chunks::<8>();
    let (quads, rest) = words.as_chunks::<4>();
    let [mut a, mut b, mut c, mut d]: [u64; 4] = [
        0x243f_6a88_85a3_08d3,
        0x1319_8a2e_0370_7344,
        0xa409_3822_299f_31d0,
        0x082e_fa98_ec4e_6c89,
    ];
    for [w0, w1, w2, w3] in quads {
        a = mix(a, w0);
        b = mix(b, w1);
        c = mix(c, w2);
        d = mix(d, w3);
    }
    let mut hash = bytes.len() as u64;
    for lane in [a, b, c, d] {
        hash = (hash ^ lane).wrapping_mul(K).rotate_left(31);
    }
    for word in rest {
        hash = mix(hash, word);
    }
    for &byte in tail {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// Canonical bytes of a state: one JSON array (order-stable). With
/// padding, the array ends with its length and [`padding_hash`] (16 hex
/// characters); without, it is what it always was.
pub fn canonical_bytes(state: &ProbeState) -> Vec<u8> {
    let value = if state.padding.is_empty() {
        json!([
            STATE_SCHEMA,
            state.seed_item_id,
            state.seed_text,
            state.counter
        ])
    } else {
        json!([
            STATE_SCHEMA,
            state.seed_item_id,
            state.seed_text,
            state.counter,
            state.padding.len(),
            format!("{:016x}", state.padding.hash())
        ])
    };
    serde_json::to_vec(&value).unwrap_or_default()
}

/// FNV-1a 64 of [`canonical_bytes`], as 16 lowercase hex characters.
pub fn digest(state: &ProbeState) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in canonical_bytes(state) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// A digest that is certainly not `digest` (same shape).
fn wrong_digest(digest: &str) -> String {
    digest
        .chars()
        .map(|c| if c == 'f' { '0' } else { 'f' })
        .collect()
}

/// One prepared group: the state, the seed's faults and every item's.
#[derive(Debug)]
pub struct ProbeGroup {
    state: RefCell<ProbeState>,
    seed_faults: Faults,
    item_faults: BTreeMap<String, Faults>,
}

/// A replay point: the captured state and digest, the faults it carries,
/// and the working copy of the suffix in progress.
#[derive(Debug)]
pub struct ProbePoint {
    captured: ProbeState,
    digest: String,
    fidelity: Fidelity,
    seed_faults: Faults,
    item_faults: BTreeMap<String, Faults>,
    working: RefCell<Option<Working>>,
    release_attempts: Cell<u32>,
}

/// A restored working copy and what its restore claimed.
#[derive(Debug)]
struct Working {
    state: ProbeState,
    achieved: Fidelity,
    faults: Faults,
}

/// `binding_drop_traps` on the seed: the destructor the host runs when it
/// drops the handle panics, like a `Drop` that fails to clean up.
impl Drop for ProbePoint {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.seed_faults
                .trap(Fault::BindingDropTraps, "the replay-binding destructor");
        }
    }
}

impl ProbePoint {
    fn target_faults(&self, target: &str) -> Faults {
        self.item_faults.get(target).cloned().unwrap_or_default()
    }

    fn lease(self, digest: String) -> StateLease<ProbePoint> {
        let fidelity = self.fidelity;
        StateLease::new(self, fidelity).with_digest(digest)
    }
}

/// The point-wide fidelity the seed's faults ask for (`None`: non-replayable).
fn captured_fidelity(seed_faults: &Faults) -> Option<Fidelity> {
    if seed_faults.has(Fault::CaptureNonReplayable) {
        None
    } else if seed_faults.has(Fault::CaptureBestEffort) {
        Some(Fidelity::BestEffort)
    } else if seed_faults.has(Fault::CaptureSemantic) {
        Some(Fidelity::SemanticEquivalent)
    } else {
        Some(Fidelity::Exact)
    }
}

/// Run `item` on `state`: one trace event, the record, the counter bumped.
fn run_item(state: &mut ProbeState, item: &Item, via: &str) -> Record {
    let counter_before = state.counter;
    emit(
        EventKind::ActionOutcome,
        json!({
            "stage": "probe_item",
            "item_id": item.item_id(),
            "via": via,
            "counter_before": counter_before,
        }),
    );
    state.counter += 1;
    let mut record = Record::with_keys([format!("probe:{}", item.item_id())]);
    record
        .set("via", via)
        .set("counter_before", counter_before)
        .set("seed_item_id", state.seed_item_id.as_str());
    record
}

fn emit(kind: EventKind, payload: Value) {
    if let Err(reason) = trace::emit(kind, payload) {
        log::warn!("trace event refused: {reason}");
    }
}

fn item_faults(item: &Item) -> Result<Faults, Error> {
    Faults::parse(item, Error::INVALID_ITEM)
}

impl Episode for ReplayProbe {
    fn execute(&self, item: Item, _ctx: &Context) -> Result<Record, Error> {
        item_faults(&item)?;
        Ok(run_item(&mut ProbeState::of(&item)?, &item, "execute"))
    }
}

impl Seeds for ReplayProbe {
    /// None: the probe's items come from an items file.
    fn list_seed_items(&self, _arm: &str, _epoch: u32) -> Result<Vec<Item>, Error> {
        Ok(Vec::new())
    }
}

impl Variants for ReplayProbe {
    fn compile_variant(&self, spec: VariantSpec, seed: Item) -> Result<Item, Error> {
        if spec.spec_id().is_empty() {
            return Err(Error::invalid_spec("spec has no spec_id"));
        }
        let faults = Faults::parse(&spec, Error::INVALID_SPEC)?;
        let family = match seed.family() {
            "" => spec.seed_family().to_owned(),
            family => family.to_owned(),
        };
        let mut item = Item::new(
            format!("{}~{}", seed.item_id(), spec.spec_id()),
            family,
            seed.text(),
        )
        .with("is_variant", true)
        .with("seed_item_id", seed.item_id())
        .with("faults", faults.names());
        item.set("variant_spec", spec);
        Ok(item)
    }
}

impl EpisodeGroups for ReplayProbe {
    type Group = ProbeGroup;

    fn prepare(
        &self,
        seed: Item,
        items: Vec<Item>,
        _ctx: &Context,
    ) -> Result<Option<Prepared<ProbeGroup>>, Error> {
        let seed_faults = item_faults(&seed)?;
        let mut faults_by_item = BTreeMap::new();
        for item in &items {
            faults_by_item.insert(item.item_id().to_owned(), item_faults(item)?);
        }
        let state = ProbeState::of(&seed)?;
        emit(
            EventKind::Lifecycle,
            json!({"stage": "prepared", "items": items.len(), "seed_faults": seed_faults.names()}),
        );
        let mut record = Record::with_keys(["probe:prefix"]);
        record.set("state_digest", digest(&state));
        let group = ProbeGroup {
            state: RefCell::new(state),
            seed_faults,
            item_faults: faults_by_item,
        };
        Ok(Some(Prepared::new(group, record)))
    }

    fn execute_episode(
        &self,
        group: &ProbeGroup,
        item: Item,
        _ctx: &Context,
    ) -> Result<Record, Error> {
        item_faults(&item)?;
        Ok(run_item(&mut group.state.borrow_mut(), &item, "episode"))
    }

    /// Traces the group's digest as it is released, so a test can check
    /// that nothing its children did reached the parent's state.
    fn release(&self, group: ProbeGroup, _ctx: &Context) -> Result<(), Error> {
        emit(
            EventKind::Lifecycle,
            json!({"stage": "group_released", "state_digest": digest(&group.state.borrow())}),
        );
        Ok(())
    }
}

/// The honest report on `state` against the captured `expected` digest, for
/// the fidelity a restore (or fork) claimed.
fn honest_report(achieved: Fidelity, expected: &str, state: &ProbeState) -> EquivalenceReport {
    let observed = digest(state);
    let equal = observed == expected;
    match achieved {
        Fidelity::Exact => EquivalenceReport::exact_digests(expected, observed),
        Fidelity::SemanticEquivalent => EquivalenceReport::new(achieved, equal)
            .with_digests(expected, observed)
            .with_check(
                EquivalenceCheck::new("probe-state", equal)
                    .with_summary("seed id, seed text and counter compared"),
            ),
        Fidelity::BestEffort | Fidelity::NonReplayable => {
            let mut report = EquivalenceReport::new(achieved, false)
                .with_reason("best-effort restore: nothing verified");
            report.expected_digest = Some(expected.to_owned());
            report
        }
    }
}

/// What exported state carries: the captured state, the seed's faults and
/// every item's.
#[derive(Debug)]
struct Decoded {
    captured: ProbeState,
    seed_faults: Faults,
    item_faults: BTreeMap<String, Faults>,
}

/// Decode [`Replay::export_state`] bytes (for an import or a child fork):
/// one JSON document, then exactly `state.pad_bytes` raw padding bytes
/// (none without `pad_bytes`), which stay in `state`'s buffer.
fn decode_state(state: Vec<u8>) -> Result<Decoded, Error> {
    let invalid = |message: &str| Error::new("invalid-state", message.to_owned());
    let (value, end) = {
        let mut stream = serde_json::Deserializer::from_slice(&state).into_iter::<Value>();
        match stream.next() {
            Some(Ok(value)) => (value, stream.byte_offset()),
            _ => return Err(invalid("replay state is not JSON")),
        }
    };
    if value.get("schema").and_then(Value::as_str) != Some(STATE_SCHEMA) {
        return Err(invalid("replay state has another schema"));
    }
    let mut captured = value
        .get("state")
        .and_then(ProbeState::from_json)
        .ok_or_else(|| invalid("replay state has no valid \"state\""))?;
    let pad_bytes = value
        .get("state")
        .and_then(|state| pad_bytes_of(state.get("pad_bytes")))
        .ok_or_else(|| invalid("replay state has an invalid \"pad_bytes\""))?;
    let rest = &state[end..];
    if pad_bytes == 0 {
        if !rest.iter().all(u8::is_ascii_whitespace) {
            return Err(invalid("replay state has bytes after its JSON document"));
        }
    } else if rest.len() as u64 != pad_bytes {
        return Err(invalid(
            "replay state's padding is not the \"pad_bytes\" it announces",
        ));
    } else {
        captured.padding = Padding::adopt(state, end);
    }
    let faults_of = |value: Option<&Value>| -> Result<Faults, Error> {
        let mut object = sandloop_guest::Object::new();
        object.insert("faults".into(), value.cloned().unwrap_or(Value::Null));
        Faults::parse(&object, "invalid-state")
    };
    let seed_faults = faults_of(value.get("seed_faults"))?;
    let mut item_faults = BTreeMap::new();
    if let Some(map) = value.get("item_faults").and_then(Value::as_object) {
        for (id, names) in map {
            item_faults.insert(id.clone(), faults_of(Some(names))?);
        }
    }
    Ok(Decoded {
        captured,
        seed_faults,
        item_faults,
    })
}

impl Replay for ReplayProbe {
    type Binding = ProbePoint;

    fn capture(
        &self,
        group: &ProbeGroup,
        _request: &CaptureRequest,
    ) -> Result<StateLease<ProbePoint>, Error> {
        let seed_faults = &group.seed_faults;
        seed_faults.check(Fault::CaptureFails, "capture-replay-state")?;
        let Some(fidelity) = captured_fidelity(seed_faults) else {
            return Ok(StateLease::non_replayable());
        };
        let captured = group.state.borrow().clone();
        let digest = digest(&captured);
        let point = ProbePoint {
            digest: digest.clone(),
            captured,
            fidelity,
            seed_faults: seed_faults.clone(),
            item_faults: group.item_faults.clone(),
            working: RefCell::new(None),
            release_attempts: Cell::new(0),
        };
        Ok(point.lease(digest))
    }

    fn restore(
        &self,
        point: &ProbePoint,
        request: &RestoreRequest,
    ) -> Result<RestoreReceipt, Error> {
        let faults = point.target_faults(&request.target_branch_id);
        faults.trap(Fault::TrapInRestore, "restore-replay-state");
        faults.check(Fault::RestoreFails, "restore-replay-state")?;
        let mut state = point.captured.clone();
        if faults.has(Fault::DigestMismatch) {
            state.counter += 1; // the copy really differs from the capture
        }
        let mut achieved = point.fidelity;
        if faults.has(Fault::SemanticWithoutChecks) && achieved.meets(Fidelity::SemanticEquivalent)
        {
            achieved = Fidelity::SemanticEquivalent;
        }
        if faults.has(Fault::RestoreStronger) {
            achieved = Fidelity::Exact;
        }
        if faults.has(Fault::RestoreNonReplayable) {
            achieved = Fidelity::NonReplayable;
        }
        let receipt = RestoreReceipt::new(achieved)
            .with_digest(digest(&state))
            .with_prefix_reused(true);
        *point.working.borrow_mut() = Some(Working {
            state,
            achieved,
            faults,
        });
        Ok(receipt)
    }

    fn validate(
        &self,
        point: &ProbePoint,
        _receipt: &RestoreReceipt,
    ) -> Result<EquivalenceReport, Error> {
        let working = point.working.borrow();
        let working = working.as_ref().ok_or_else(not_restored)?;
        let faults = &working.faults;

        // The honest report for the fidelity the restore claimed.
        let mut report = honest_report(working.achieved, &point.digest, &working.state);

        // Then the lies the target item asked for.
        if faults.has(Fault::DigestMismatch) {
            report.equivalent = true;
            for check in &mut report.checks {
                check.passed = true;
            }
        }
        if faults.has(Fault::SemanticWithoutChecks) {
            report.checks.clear();
        }
        if faults.has(Fault::EquivalentWithFailedCheck) {
            report.equivalent = true;
            report
                .checks
                .push(EquivalenceCheck::new("probe-injected", false).with_summary("injected"));
        }
        if faults.has(Fault::Unverified) {
            report.equivalent = false;
        }
        if faults.has(Fault::ExpectedDigestWrong) {
            report.expected_digest = Some(wrong_digest(&point.digest));
        }
        if faults.has(Fault::ReportDisagrees) {
            report.achieved_fidelity = match report.achieved_fidelity {
                Fidelity::Exact => Fidelity::SemanticEquivalent,
                _ => Fidelity::Exact,
            };
        }
        Ok(report)
    }

    fn run_suffix(&self, point: &ProbePoint, item: Item, _ctx: &Context) -> Result<Record, Error> {
        let faults = item_faults(&item)?;
        let mut working = point.working.borrow_mut();
        let working = working.as_mut().ok_or_else(not_restored)?;
        let mut record = run_item(&mut working.state, &item, "replay");
        faults.check(Fault::SuffixFails, "run-replay-suffix")?;
        faults.trap(Fault::SuffixTraps, "run-replay-suffix");
        if faults.has(Fault::ChildScribbles) {
            // In a snapshot child the heap it scribbles over is the
            // parent's, inherited; in place, only the working copy and
            // freed memory.
            let scribbled = children::scribble(&mut working.state);
            record.set("scribbled_bytes", scribbled);
        }
        Ok(record)
    }

    fn finalize_suffix(
        &self,
        point: &ProbePoint,
        request: &RestoreRequest,
        _suffix_succeeded: bool,
    ) -> Result<(), Error> {
        point.working.borrow_mut().take();
        point
            .target_faults(&request.target_branch_id)
            .check(Fault::FinalizeFails, "finalize-replay-suffix")
    }

    fn release_state(&self, point: &ProbePoint) -> Result<(), Error> {
        let attempt = point.release_attempts.get() + 1;
        point.release_attempts.set(attempt);
        let faults = &point.seed_faults;
        faults.check(Fault::ReleaseFails, "release-replay-state")?;
        if attempt == 1 {
            faults
                .check(Fault::ReleaseFailsOnce, "release-replay-state")
                .map_err(|err| err.retryable(true))?;
        }
        point.working.borrow_mut().take();
        Ok(())
    }

    /// The state as JSON (items without faults left out of `item_faults`,
    /// so a child decodes only what applies), then the raw padding.
    fn export_state(&self, point: &ProbePoint) -> Result<Option<Vec<u8>>, Error> {
        if point.seed_faults.has(Fault::ExportNone) {
            return Ok(None);
        }
        let item_faults: BTreeMap<&str, Vec<&str>> = point
            .item_faults
            .iter()
            .filter(|(_, faults)| !faults.is_empty())
            .map(|(id, faults)| (id.as_str(), faults.names()))
            .collect();
        let state = json!({
            "schema": STATE_SCHEMA,
            "state": point.captured.to_json(),
            "seed_faults": point.seed_faults.names(),
            "item_faults": item_faults,
        });
        let padding = point.captured.padding.bytes();
        let mut bytes = serde_json::to_vec(&state)?;
        bytes.reserve_exact(padding.len());
        bytes.extend_from_slice(padding);
        Ok(Some(bytes))
    }

    fn import_state(
        &self,
        state: Vec<u8>,
        _request: &CaptureRequest,
    ) -> Result<StateLease<ProbePoint>, Error> {
        let Decoded {
            captured,
            seed_faults,
            item_faults,
        } = decode_state(state)?;
        seed_faults.check(Fault::ImportFails, "import-replay-state")?;
        let Some(fidelity) = captured_fidelity(&seed_faults) else {
            return Err(Error::new(
                "invalid-state",
                "a non-replayable point has no state to import",
            ));
        };
        let digest = digest(&captured);
        let lease_digest = if seed_faults.has(Fault::ImportDigestWrong) {
            wrong_digest(&digest)
        } else {
            digest.clone()
        };
        let point = ProbePoint {
            captured,
            digest,
            fidelity,
            seed_faults,
            item_faults,
            working: RefCell::new(None),
            release_attempts: Cell::new(0),
        };
        Ok(point.lease(lease_digest))
    }
}

fn not_restored() -> Error {
    Error::new(
        "not-restored",
        "restore-replay-state must run before this call",
    )
}

sandloop_guest::export_adapter!(ReplayProbe, world = isolated);

#[cfg(test)]
mod tests;
