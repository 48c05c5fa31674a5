//! [`WasmAdapter`]: one sandboxed instance of a component, seen through the
//! runtimes' [`EpisodeAdapter`] and [`SeedSource`] traits.
//!
//! The instance is created lazily and replaced after any call that traps,
//! runs past its deadline or exhausts a limit: the poisoned `Store` is
//! dropped with everything in it, and the next call starts from a fresh
//! instance. Episode groups prepared in a dropped instance are reported as
//! `instance_lost` instead of being run on a stranger's state.

use std::cell::Cell;
use std::sync::Arc;

use wasmtime::Store;
use wasmtime::component::ResourceAny;

use super::bindings::exports::sandloop::adapter::episode_groups::Prepared as PreparedGroup;
use super::bindings::exports::sandloop::adapter::{
    child_risk as child_risk_wit, counterfactual as counterfactual_wit, episode, episode_groups,
    replay as replay_wit, replay_children as replay_children_wit, seeds, variants,
};
use super::bindings::sandloop::adapter::types as wit;
use super::classify::{classify, classify_after, classify_call};
use super::component::LoadedAdapter;
use super::crash::{crash_of, with_crash};
use super::host_state::HostState;
use super::output::CallOutput;
use super::store::{arm_call, new_store};
use sandloop_core::episode::adapter::{
    AdapterError, CallContext, EpisodeAdapter, ErrorType, Item, Prepared, Protocols, Record,
    SeedSource,
};
use sandloop_core::episode::value::{MAX_INPUT_NESTING, nesting_depth};
use sandloop_core::trace::{TraceEvent, TraceLog};

mod adopted_children;
mod bind;
mod child_instance;
mod children;
mod replay;
mod replay_screen;
mod snapshot_children;
/// A replay point frozen as a compiled snapshot (the `Snapshot` of a
/// [`WasmAdapter`]'s groups under [`Replaying`](sandloop_core::replay::Replaying)).
pub use crate::snapshot::SnapshotPoint;
pub use adopted_children::{AdoptedFork, run_adopted_children};
pub use replay::{
    BindingHandle, ReplayOptions, SnapshotCompileCost, adopt_durable_point, adopt_snapshot_point,
    snapshot_replay_adapter,
};
pub use replay_screen::{screen_adopted_intent, screen_replay_intent, screens_replay_intent};
/// Most children forked at once per lane, and the point id of a group
/// (the group rules of `sandloop-core`, re-exported where they were).
pub use sandloop_core::replay::{MAX_CHILDREN_PER_FORK, point_id_for};

/// What one call left behind besides its result, handed to a
/// [`CallObserver`] after every call.
pub struct CallReport<'a> {
    /// Lane of the instance (`queue_worker_01`, or `control`).
    pub branch_id: &'a str,
    /// Epoch of the call (the last epoch seen for calls without a context).
    pub epoch: u32,
    /// The adapter function called, e.g. `execute-episode`.
    pub call: &'static str,
    /// The item the call was about, when there is one.
    pub item_id: Option<&'a str>,
    /// Captured stdout, stderr and log lines.
    pub output: &'a CallOutput,
    /// Trace events appended during the call.
    pub trace_events: &'a [TraceEvent],
    /// Trace events the host refused during the call.
    pub trace_refusals: u32,
}

/// Receives every call's captured output and trace events (the run directory
/// writes them to `adapter-output.jsonl` and `traces.jsonl`).
pub trait CallObserver: Send + Sync {
    /// Called after each adapter call that printed, logged or traced
    /// anything.
    fn on_call(&self, report: &CallReport<'_>);
}

/// Handle of an episode group prepared in a [`WasmAdapter`]'s instance.
///
/// It keeps the group's prepare arguments: when a sibling's failure drops
/// the instance, the next sibling prepares the prefix again on the fresh
/// instance (once per group) instead of losing the rest of the group.
pub struct GroupHandle {
    resource: Cell<ResourceAny>,
    generation: Cell<u64>,
    seed_json: String,
    items_json: Vec<String>,
    /// Set once the prefix was prepared again; records run on it say so.
    reprepared: Cell<bool>,
    /// Set when preparing again failed; the rest of the group is lost.
    lost: Cell<bool>,
}

struct Live {
    store: Store<HostState>,
    /// The component instance (snapshot forks read its memories).
    instance: wasmtime::component::Instance,
    episode: Option<episode::Guest>,
    seeds: Option<seeds::Guest>,
    variants: Option<variants::Guest>,
    groups: Option<episode_groups::Guest>,
    replay: Option<replay_wit::Guest>,
    replay_children: Option<replay_children_wit::Guest>,
    child_risk: Option<child_risk_wit::Guest>,
    counterfactual: Option<counterfactual_wit::Guest>,
    /// Bytes the instance's memories grew by for snapshots taken of it
    /// ([`Snapshot::parent_growth_bytes`](crate::snapshot::Snapshot::parent_growth_bytes)).
    snapshot_growth: u64,
}

/// Picks one contract interface of a live instance, as bound, beside the
/// store its calls run in: `Live::episode`, `Live::replay`, … (see
/// [`WasmAdapter::call_export`]).
type Export<G> = for<'a> fn(&'a mut Live) -> (Option<&'a G>, &'a mut Store<HostState>);

/// One accessor per contract interface, each an [`Export`].
macro_rules! exports {
    ($($field:ident: $guest:ty),* $(,)?) => {
        impl Live {
            $(
                fn $field(&mut self) -> (Option<&$guest>, &mut Store<HostState>) {
                    (self.$field.as_ref(), &mut self.store)
                }
            )*
        }
    };
}
exports!(
    episode: episode::Guest,
    seeds: seeds::Guest,
    variants: variants::Guest,
    groups: episode_groups::Guest,
    replay: replay_wit::Guest,
    replay_children: replay_children_wit::Guest,
    child_risk: child_risk_wit::Guest,
    counterfactual: counterfactual_wit::Guest,
);

/// The error of a call whose interface is not bound: the callers check the
/// component exports it before calling (a binding or a child implies it),
/// so this is the host's mistake; it fails the call, never the host.
fn unbound(name: &str) -> wasmtime::Error {
    wasmtime::Error::msg(format!(
        "{name}: the interface that declares it is not bound in this instance"
    ))
}

/// A parent instance whose snapshots grew its memory by more than this
/// fraction of `--max-memory` is replaced after its group is released:
/// wizer's accessors leave a page behind per memory read, and memories never
/// shrink, so a lane that snapshots group after group would otherwise reach
/// the limit. One in 8 of the limit (64 MiB of the default 512, about 512
/// snapshots of a one-memory component) keeps the replacements rare.
const SNAPSHOT_GROWTH_FRACTION: u64 = 8;

/// One sandboxed adapter instance (replaced when poisoned).
pub struct WasmAdapter {
    loaded: Arc<LoadedAdapter>,
    branch_id: String,
    live: Option<Live>,
    generation: u64,
    observer: Option<Arc<dyn CallObserver>>,
    /// The trace of the group being run, kept across its calls.
    group_trace: Option<(String, TraceLog)>,
    /// Epoch of the latest call that named one.
    epoch: u32,
    /// Arm of the latest `list-seed-items` call (names control traces).
    arm: String,
    /// The instrumented component this lane's instances are of, when its
    /// replay points' children fork from snapshots (`--fork snapshot`).
    snapshots: Option<Arc<crate::snapshot::Instrumented>>,
    /// Bytes the latest snapshot of this lane's instances grew the parent
    /// by (0 before the first): what the next one will need as headroom.
    snapshot_growth_estimate: u64,
}

impl WasmAdapter {
    /// An adapter for lane `branch_id`. The instance is created on first
    /// use; an instantiation failure surfaces as an `instantiation` error of
    /// that call.
    pub fn new(
        loaded: Arc<LoadedAdapter>,
        branch_id: impl Into<String>,
        observer: Option<Arc<dyn CallObserver>>,
    ) -> Self {
        Self {
            loaded,
            branch_id: branch_id.into(),
            live: None,
            generation: 0,
            observer,
            group_trace: None,
            epoch: 0,
            arm: String::from("main"),
            snapshots: None,
            snapshot_growth_estimate: 0,
        }
    }

    /// Replace the instance (the next call creates a fresh one) once the
    /// snapshots taken of it have grown its memory past
    /// 1/[`SNAPSHOT_GROWTH_FRACTION`] of the limit. Called between groups,
    /// when no binding or group of the instance is alive.
    fn recycle_after_snapshots(&mut self) {
        let limit = self.loaded.config.limits.max_memory_mib << 20;
        if let Some(live) = &self.live
            && live.snapshot_growth > 0
            && (live.snapshot_growth >= limit / SNAPSHOT_GROWTH_FRACTION
                || self.snapshot_headroom().is_err())
        {
            self.live = None;
        }
    }

    /// Whether the live instance can afford the accessor pages of one
    /// more snapshot (as many as the lane's latest snapshot took) under
    /// `--max-memory`; `Err` says how short it is. Unknown (`Ok`) before
    /// the lane's first snapshot or while no memory has grown.
    pub(super) fn snapshot_headroom(&self) -> Result<(), String> {
        let Some(live) = &self.live else {
            return Ok(());
        };
        let limiter = &live.store.data().limiter;
        let (limit, largest) = (limiter.limit_bytes() as u64, limiter.largest_bytes() as u64);
        let needed = self.snapshot_growth_estimate;
        if needed == 0 || largest == 0 || largest + needed <= limit {
            return Ok(());
        }
        Err(format!(
            "the parent instance has {} KiB left under --max-memory {} MiB and a snapshot \
             grows it by {} KiB (wizer's accessors); raise --max-memory",
            limit.saturating_sub(largest) >> 10,
            limit >> 20,
            needed >> 10
        ))
    }

    /// Instantiate `loaded` once in a fresh store and drop the instance:
    /// whether the component can start at all under its limits, its start
    /// function included.
    ///
    /// Errors: the instantiation's failure, classified as a call's would be
    /// (`deadline`, `memory_limit`, `instantiation`, …).
    pub fn check_starts(loaded: Arc<LoadedAdapter>) -> Result<(), AdapterError> {
        Self::new(loaded, "control", None).instantiate()
    }

    /// Instances created so far (1 + replacements after poisoning or
    /// after snapshots grew the memory).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    fn instantiate(&mut self) -> Result<(), AdapterError> {
        let loaded = &self.loaded;
        let fail = |error: wasmtime::Error| {
            AdapterError::new(ErrorType::Instantiation, format!("{error:#}"))
        };
        let state = HostState::new(&loaded.config).map_err(fail)?;
        // The start function runs under one call's budget (store::new_store).
        let mut store = new_store(&loaded.engine, &loaded.config, state).map_err(fail)?;
        let instance = loaded.pre.instantiate(&mut store).map_err(|error| {
            let classified = classify_call(
                &error,
                &mut store,
                loaded.config.limits.call_timeout.as_secs_f64(),
            );
            // A plain trap while starting is the instantiation failure it is;
            // a deadline or a limit keeps its class.
            let mut failed = match classified.error_type {
                ErrorType::Trap => fail(error),
                _ => classified,
            };
            failed.message = format!("while starting (start function): {}", failed.message);
            failed
        })?;
        // Interfaces are bound when first called (see `bind`).
        let live = Live {
            episode: None,
            seeds: None,
            variants: None,
            groups: None,
            replay: None,
            replay_children: None,
            child_risk: None,
            counterfactual: None,
            store,
            instance,
            snapshot_growth: 0,
        };
        self.live = Some(live);
        self.generation += 1;
        Ok(())
    }

    /// Run `body` on the live instance under a fresh deadline and fuel
    /// budget. A wasmtime error drops the instance and is classified.
    fn call<R>(
        &mut self,
        name: &'static str,
        item_id: Option<&str>,
        trace: Option<TraceLog>,
        body: impl FnOnce(&mut Live) -> wasmtime::Result<R>,
    ) -> (Result<R, AdapterError>, Option<TraceLog>) {
        if self.live.is_none()
            && let Err(error) = self.instantiate()
        {
            return (Err(error), trace);
        }
        let timeout = self.loaded.config.limits.call_timeout.as_secs_f64();
        if let Err(error) = self.bind_for(name) {
            return (Err(error), trace);
        }
        let live = self.live.as_mut().expect("instantiated above");
        let traced_before = trace.as_ref().map_or(0, |log| log.events().len());
        if let Err(error) = arm_call(&mut live.store, &self.loaded.config) {
            return (Err(classify(&error, timeout)), trace);
        }
        live.store.data_mut().trace = trace;
        live.store.data_mut().trace_refusals = 0;
        live.store.data_mut().trace_emitted = 0;
        let result = body(live);
        let state = live.store.data_mut();
        let denial = state.limiter.take_denial();
        if let Some(denial) = &denial {
            let note = format!("sandloop: {denial}; memory.grow returned -1 to the guest");
            state.capture.push("log", Some("warn"), note.as_bytes());
        }
        let trace = state.trace.take();
        let refusals = state.trace_refusals;
        let output = state.capture.take();
        let new_events = trace.as_ref().map_or(&[][..], |log| {
            &log.events()[traced_before.min(log.events().len())..]
        });
        if let Some(observer) = &self.observer
            && (!output.is_empty() || !new_events.is_empty() || refusals > 0)
        {
            observer.on_call(&CallReport {
                branch_id: &self.branch_id,
                epoch: self.epoch,
                call: name,
                item_id,
                output: &output,
                trace_events: new_events,
                trace_refusals: refusals,
            });
        }
        let result = result.map_err(|error| {
            self.live = None;
            let mut classified = classify_after(&error, denial, timeout);
            if let Some(crash) = crash_of(&output) {
                classified.message = with_crash(&classified, &crash);
            }
            classified
        });
        (result, trace)
    }

    /// [`call`](Self::call) the function `name` of the interface `export`
    /// picks: `body` gets that interface, bound, and the store to call it
    /// in. The one place that binds, calls and classifies a contract call.
    fn call_export<G, R>(
        &mut self,
        name: &'static str,
        item_id: Option<&str>,
        trace: Option<TraceLog>,
        export: Export<G>,
        body: impl FnOnce(&G, &mut Store<HostState>) -> wasmtime::Result<R>,
    ) -> (Result<R, AdapterError>, Option<TraceLog>) {
        self.call(name, item_id, trace, |live| match export(live) {
            (Some(guest), store) => body(guest, store),
            (None, _) => Err(unbound(name)),
        })
    }

    /// Hand events the host appended outside an adapter call (a replay
    /// point's capture event) to the observer, like a call's own events.
    fn report_events(
        &self,
        trace: &TraceLog,
        from: u64,
        call: &'static str,
        item_id: Option<&str>,
    ) {
        let Some(observer) = &self.observer else {
            return;
        };
        let events = trace.events();
        let start = events
            .iter()
            .position(|event| event.sequence >= from)
            .unwrap_or(events.len());
        if start == events.len() {
            return;
        }
        observer.on_call(&CallReport {
            branch_id: &self.branch_id,
            epoch: self.epoch,
            call,
            item_id,
            output: &CallOutput::default(),
            trace_events: &events[start..],
            trace_refusals: 0,
        });
    }

    fn context(&mut self, ctx: &CallContext) -> wit::Context {
        self.epoch = ctx.epoch;
        wit::Context {
            arm: ctx.arm.clone(),
            epoch: ctx.epoch,
            branch_id: ctx.branch_id.clone(),
            execution_group_id: ctx.execution_group_id.clone(),
        }
    }

    fn missing(what: &str) -> AdapterError {
        AdapterError::new(
            ErrorType::MissingExport,
            format!("the adapter does not export `{what}`"),
        )
    }

    fn trace_for(&mut self, ctx: &CallContext, item: &Item) -> Option<TraceLog> {
        if let Some(group) = &ctx.execution_group_id {
            return match self.group_trace.take() {
                Some((id, log)) if &id == group => Some(log),
                _ => TraceLog::new(group, "main").ok(),
            };
        }
        let id = item.item_id_str().unwrap_or("item");
        TraceLog::new(id, "main").ok()
    }

    fn keep_group_trace(&mut self, ctx: &CallContext, trace: Option<TraceLog>) {
        if let (Some(group), Some(log)) = (&ctx.execution_group_id, trace) {
            self.group_trace = Some((group.clone(), log));
        }
    }

    /// Call `prepare-episode-group` on the live instance, inside the group's
    /// trace (used for the first prepare and for preparing again).
    fn call_prepare(
        &mut self,
        seed_json: &String,
        items_json: &[String],
        item_id: Option<&str>,
        ctx: &CallContext,
    ) -> Result<Result<Option<PreparedGroup>, wit::AdapterError>, AdapterError> {
        let wit_ctx = self.context(ctx);
        let trace = self.trace_for(ctx, &Item::new());
        let (result, trace) = self.call_export(
            "prepare-episode-group",
            item_id,
            trace,
            Live::groups,
            |guest, store| guest.call_prepare_episode_group(store, seed_json, items_json, &wit_ctx),
        );
        self.keep_group_trace(ctx, trace);
        result
    }

    /// Prepare `handle`'s prefix again on the current (fresh) instance after
    /// the one it lived in was dropped. Tried once per group; when it fails,
    /// this and every later sibling get `instance_lost`.
    fn prepare_again(
        &mut self,
        handle: &GroupHandle,
        ctx: &CallContext,
    ) -> Result<(), AdapterError> {
        let lost = |why: String| {
            AdapterError::new(
                ErrorType::InstanceLost,
                format!("the episode group's instance was dropped after an earlier failure; {why}"),
            )
        };
        if handle.lost.get() {
            return Err(lost("preparing its prefix again already failed".into()));
        }
        handle.lost.set(true);
        match self.call_prepare(&handle.seed_json, &handle.items_json, None, ctx) {
            Ok(Ok(Some(prepared))) => {
                handle.resource.set(prepared.group);
                handle.generation.set(self.generation);
                handle.reprepared.set(true);
                handle.lost.set(false);
                Ok(())
            }
            Ok(Ok(None)) => Err(lost("preparing its prefix again returned none".into())),
            Ok(Err(error)) => Err(lost(format!(
                "preparing its prefix again failed: {}",
                declared(error)
            ))),
            Err(error) => Err(lost(format!("preparing its prefix again failed: {error}"))),
        }
    }

    fn max_output(&self) -> usize {
        self.loaded.config.limits.max_output_bytes
    }
}

/// Parse what the adapter returned as one JSON object within `max_bytes`
/// and [`MAX_INPUT_NESTING`] levels of arrays and objects; errors
/// (`invalid_output`, `output_too_large`) begin with `what`. A record's
/// host-owned fields are left where they are: quarantining them is the
/// episode runtime's rule, for every adapter alike
/// (`sandloop_core::episode::records::quarantine_host_owned`).
pub fn parse_object(text: &str, max_bytes: usize, what: &str) -> Result<Record, AdapterError> {
    if text.len() > max_bytes {
        return Err(AdapterError::new(
            ErrorType::OutputTooLarge,
            format!(
                "{what} is {} bytes, over the limit of {max_bytes}",
                text.len()
            ),
        ));
    }
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(map)) => {
            let depth = 1 + map.values().map(nesting_depth).max().unwrap_or(0);
            if depth > MAX_INPUT_NESTING {
                return Err(AdapterError::new(
                    ErrorType::InvalidOutput,
                    format!(
                        "{what} nests arrays and objects {depth} levels deep, over the limit of {MAX_INPUT_NESTING}"
                    ),
                ));
            }
            Ok(map)
        }
        Ok(other) => Err(AdapterError::new(
            ErrorType::InvalidOutput,
            format!("{what} must be a JSON object, got {}", json_kind(&other)),
        )),
        Err(error) => Err(AdapterError::new(
            ErrorType::InvalidOutput,
            format!("{what} is not valid JSON: {error}"),
        )),
    }
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

fn declared(error: wit::AdapterError) -> AdapterError {
    AdapterError::declared(error.kind, error.message, error.retryable_infra_error)
}

impl EpisodeAdapter for WasmAdapter {
    type Handle = GroupHandle;

    fn protocols(&self) -> Protocols {
        self.loaded.protocols
    }

    fn execute(&mut self, item: &Item, ctx: &CallContext) -> Result<Record, AdapterError> {
        if self.loaded.indices.episode.is_none() {
            return Err(Self::missing("episode.execute"));
        }
        let json = item.json_text();
        let wit_ctx = self.context(ctx);
        let trace = self.trace_for(ctx, item);
        let (result, _) = self.call_export(
            "execute",
            item.item_id_str(),
            trace,
            Live::episode,
            |guest, store| guest.call_execute(store, &json, &wit_ctx),
        );
        let text = result?.map_err(declared)?;
        parse_object(&text, self.max_output(), "the observation record")
    }

    fn prepare_episode_group(
        &mut self,
        seed: &Item,
        items: &[Item],
        ctx: &CallContext,
    ) -> Result<Option<Prepared<GroupHandle>>, AdapterError> {
        if self.loaded.indices.groups.is_none() {
            return Err(Self::missing("episode-groups.prepare-episode-group"));
        }
        let seed_json = seed.json_text().into_owned();
        let item_json: Vec<String> = items
            .iter()
            .map(|item| item.json_text().into_owned())
            .collect();
        let result = self.call_prepare(&seed_json, &item_json, seed.item_id_str(), ctx);
        let Some(prepared) = result?.map_err(declared)? else {
            return Ok(None);
        };
        let handle = GroupHandle {
            resource: Cell::new(prepared.group),
            generation: Cell::new(self.generation),
            seed_json,
            items_json: item_json,
            reprepared: Cell::new(false),
            lost: Cell::new(false),
        };
        let prefix_record = parse_object(
            &prepared.prefix_record,
            self.max_output(),
            "the prefix record",
        );
        Ok(Some(Prepared {
            prefix_record,
            checkpoint_ref: prepared.checkpoint_ref,
            handle,
        }))
    }

    /// `execute-episode` of `item` on the prepared group, prepared again
    /// first when its instance was replaced (once per group).
    fn execute_episode(
        &mut self,
        handle: &GroupHandle,
        item: &Item,
        ctx: &CallContext,
    ) -> Result<Record, AdapterError> {
        if handle.generation.get() != self.generation || self.live.is_none() {
            self.prepare_again(handle, ctx)?;
        }
        let json = item.json_text();
        let wit_ctx = self.context(ctx);
        let trace = self.trace_for(ctx, item);
        let resource = handle.resource.get();
        let (result, trace) = self.call_export(
            "execute-episode",
            item.item_id_str(),
            trace,
            Live::groups,
            |guest, store| guest.call_execute_episode(store, resource, &json, &wit_ctx),
        );
        self.keep_group_trace(ctx, trace);
        let text = result?.map_err(declared)?;
        let mut record = parse_object(&text, self.max_output(), "the observation record")?;
        if handle.reprepared.get() {
            record.insert("prefix_reprepared".into(), serde_json::Value::Bool(true));
        }
        Ok(record)
    }

    fn release_episode_group(
        &mut self,
        handle: GroupHandle,
        ctx: &CallContext,
    ) -> Result<(), AdapterError> {
        let group_trace = self.group_trace.take();
        if handle.generation.get() != self.generation || self.live.is_none() {
            // The resource died with its store; there is nothing to release.
            return Ok(());
        }
        let wit_ctx = self.context(ctx);
        let trace = group_trace.map(|(_, log)| log);
        let (result, _) = self.call_export(
            "release-episode-group",
            None,
            trace,
            Live::groups,
            |guest, store| guest.call_release_episode_group(store, handle.resource.get(), &wit_ctx),
        );
        self.recycle_after_snapshots();
        result?.map_err(declared)
    }
}

impl SeedSource for WasmAdapter {
    fn list_seed_items(&mut self, arm: &str, epoch: u32) -> Result<Vec<Item>, AdapterError> {
        if self.loaded.indices.seeds.is_none() {
            return Err(Self::missing("seeds.list-seed-items"));
        }
        self.epoch = epoch;
        self.arm = arm.to_string();
        let trace = TraceLog::new(&format!("{arm}:epoch-{epoch}:seeds"), "main").ok();
        let (result, _) = self.call_export(
            "list-seed-items",
            None,
            trace,
            Live::seeds,
            |guest, store| guest.call_list_seed_items(store, arm, epoch),
        );
        let texts = result?.map_err(declared)?;
        let max = self.max_output();
        texts
            .iter()
            .enumerate()
            .map(|(index, text)| {
                parse_object(text, max, &format!("seed item {index}")).map(Item::from)
            })
            .collect()
    }

    fn compile_variant(&mut self, spec: &Item, seed: &Item) -> Result<Item, AdapterError> {
        if self.loaded.indices.variants.is_none() {
            return Err(Self::missing("variants.compile-variant"));
        }
        let spec_json = spec.json_text();
        let seed_json = seed.json_text();
        let spec_id = spec
            .get("spec_id")
            .and_then(|v| v.as_str())
            .unwrap_or("spec");
        let trace_id = format!("{}:epoch-{}:variant:{spec_id}", self.arm, self.epoch);
        let trace = TraceLog::new(&trace_id, "main").ok();
        let (result, _) = self.call_export(
            "compile-variant",
            seed.item_id_str(),
            trace,
            Live::variants,
            |guest, store| guest.call_compile_variant(store, &spec_json, &seed_json),
        );
        let text = result?.map_err(declared)?;
        parse_object(&text, self.max_output(), "the compiled variant item").map(Item::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SandboxEngine;
    use crate::output::Capture;

    #[test]
    fn returned_text_must_be_one_json_object_within_the_bound() {
        let ok = parse_object(r#"{"accepted": true}"#, 100, "the record").unwrap();
        assert_eq!(ok["accepted"], true);
        let too_large = parse_object(r#"{"a": 1}"#, 4, "the record").unwrap_err();
        assert_eq!(too_large.error_type, ErrorType::OutputTooLarge);
        assert!(
            too_large.message.contains("8 bytes, over the limit of 4"),
            "{too_large}"
        );
        let not_object = parse_object("[1]", 100, "the record").unwrap_err();
        assert_eq!(not_object.error_type, ErrorType::InvalidOutput);
        assert!(
            not_object
                .message
                .contains("must be a JSON object, got an array")
        );
        let not_json = parse_object("{oops", 100, "the record").unwrap_err();
        assert_eq!(not_json.error_type, ErrorType::InvalidOutput);
        assert!(not_json.message.starts_with("the record is not valid JSON"));
    }

    #[test]
    fn a_guest_panic_leads_its_traps_message_and_follows_a_deadlines() {
        let capture = Capture::new(1024);
        capture.push("stdout", None, b"ignored\n");
        capture.push(
            "stderr",
            None,
            b"\nthread '<unnamed>' panicked at src/lib.rs:9:5:\ntrap_execute requested\nnote: run with `RUST_BACKTRACE=1`\n",
        );
        let crash = crash_of(&capture.take()).unwrap();
        let trap = AdapterError::new(ErrorType::Trap, "wasm trap: unreachable");
        assert_eq!(
            with_crash(&trap, &crash),
            "src/lib.rs:9: panic: trap_execute requested; wasm trap: unreachable"
        );
        let deadline = AdapterError::new(ErrorType::Deadline, "call exceeded its deadline");
        assert_eq!(
            with_crash(&deadline, &crash),
            "call exceeded its deadline (guest stderr: src/lib.rs:9: panic: trap_execute requested)"
        );
        capture.push("stdout", None, b"only stdout");
        assert_eq!(crash_of(&capture.take()), None);
    }

    #[test]
    fn a_record_nested_too_deeply_to_be_read_back_is_refused() {
        // 127 levels, the most serde_json reads; with the host-owned field
        // moved under `adapter_claimed` the record would be 128 levels deep
        // in records.jsonl, where no reader could parse it again.
        let text = format!(
            "{{\"adapter_error\":{}}}",
            sandloop_core::hostile_inputs::deep_json(126, true)
        );
        let error = parse_object(&text, 1 << 20, "the record").unwrap_err();
        assert_eq!(error.error_type, ErrorType::InvalidOutput);
        assert!(
            error
                .message
                .starts_with("the record nests arrays and objects 127 levels deep"),
            "{error}"
        );
        let shallow = format!(
            "{{\"a\":{}}}",
            sandloop_core::hostile_inputs::deep_json(98, true)
        );
        assert!(parse_object(&shallow, 1 << 20, "the record").is_ok());
    }

    #[test]
    fn deadlines_are_whole_epoch_ticks() {
        assert_eq!(SandboxEngine::deadline_ticks(60.0), 6000);
        assert_eq!(SandboxEngine::deadline_ticks(0.001), 1, "at least one tick");
        assert_eq!(SandboxEngine::deadline_ticks(0.015), 2, "rounded up");
    }

    mod props {
        use super::*;
        use proptest::prelude::*;
        use sandloop_core::hostile_inputs::{config, deep_json, json_value, mutate_bytes};
        use serde_json::Value;

        /// What a guest may return as a record: any text, any JSON, deep
        /// nesting (also under a field the host moves), damaged records.
        fn guest_text() -> impl Strategy<Value = String> {
            let record =
                r#"{"item_id":"a","accepted":true,"adapter_error":{"type":"trap"},"n":1.5}"#;
            prop_oneof![
                any::<String>(),
                json_value().prop_map(|v| v.to_string()),
                (1usize..4000, any::<bool>())
                    .prop_map(|(depth, objects)| deep_json(depth, objects)),
                (
                    120usize..130,
                    prop::sample::select(sandloop_contract::HOST_OWNED_FIELDS)
                )
                    .prop_map(|(depth, field)| {
                        format!("{{\"{field}\":{}}}", deep_json(depth, true))
                    }),
                mutate_bytes(record.as_bytes().to_vec(), false)
                    .prop_map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
            ]
        }

        proptest! {
            #![proptest_config(config(256))]

            #[test]
            fn prop_guest_json_is_one_object_or_an_error_naming_what_was_returned(
                text in guest_text(),
                max in prop_oneof![Just(8usize << 20), 0usize..64],
            ) {
                match parse_object(&text, max, "the observation record") {
                    Ok(mut record) => {
                        prop_assert!(text.len() <= max);
                        // As the episode runtime takes it.
                        sandloop_core::episode::records::quarantine_host_owned(&mut record);
                        for field in sandloop_contract::HOST_OWNED_FIELDS {
                            prop_assert!(!record.contains_key(*field));
                        }
                        // What the host writes of it, its readers can read back.
                        let line = serde_json::to_string(&record).unwrap();
                        prop_assert!(serde_json::from_str::<Value>(&line).is_ok(), "{}", line.len());
                    }
                    Err(error) => {
                        prop_assert!(matches!(
                            error.error_type,
                            ErrorType::InvalidOutput | ErrorType::OutputTooLarge
                        ));
                        prop_assert!(error.message.starts_with("the observation record "), "{}", error);
                    }
                }
            }
        }
    }
}
