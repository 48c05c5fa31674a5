//! Native test doubles for the adapter seam: a scripted [`EpisodeAdapter`]
//! with a shared call log.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};

use super::adapter::{
    AdapterError, CallContext, EpisodeAdapter, Item, Prepared, Protocols, Record,
};
use super::clock::ManualClock;

/// Builds an item/record from a JSON object literal.
pub(crate) fn obj<T: From<Map<String, Value>>>(value: Value) -> T {
    match value {
        Value::Object(map) => T::from(map),
        other => panic!("not a JSON object: {other}"),
    }
}

/// A seed item `{item_id, family}`.
pub(crate) fn seed(id: &str, family: &str) -> Item {
    obj(json!({"item_id": id, "family": family}))
}

/// A variant item of `seed_id` with its own concurrency key and a spec.
pub(crate) fn variant(id: &str, seed_id: &str, family: &str) -> Item {
    obj(json!({
        "item_id": id, "family": family, "is_variant": true, "seed_item_id": seed_id,
        "variant_spec": {"spec_id": format!("spec-{id}")},
        "concurrency_key": format!("{family}:variant:{id}")
    }))
}

/// What `prepare_episode_group` does for one seed.
#[derive(Clone, Debug)]
pub(crate) enum PrepareScript {
    /// Returns a handle and a prefix record.
    Prepared,
    /// Returns `None` (fall back to plain execute).
    ReturnNone,
    /// Fails.
    Fail(AdapterError),
    /// Returns a handle but no valid prefix record.
    BadPrefix(AdapterError),
}

/// The scripted behaviour, shared by every instance a factory makes.
#[derive(Clone, Debug)]
pub(crate) struct Script {
    pub protocols: Protocols,
    /// Errors of `execute`/`execute_episode`, by item id.
    pub execute_errors: HashMap<String, AdapterError>,
    /// Prepare behaviour by seed id (default: prepared).
    pub prepare: HashMap<String, PrepareScript>,
    /// Release errors by seed id.
    pub release_errors: HashMap<String, AdapterError>,
    /// `checkpoint_ref` of prepared groups.
    pub checkpoint_ref: Option<String>,
    /// Minutes the shared clock advances in each call kind.
    pub prepare_minutes: f64,
    pub execute_minutes: f64,
    pub release_minutes: f64,
}

impl Script {
    /// An adapter offering `execute` and episode groups.
    pub fn episode() -> Self {
        Self {
            protocols: Protocols {
                execute: true,
                seeds: true,
                variants: true,
                episode_groups: true,
                replay: false,
                replay_children: false,
                child_risk: false,
                counterfactual: false,
            },
            execute_errors: HashMap::new(),
            prepare: HashMap::new(),
            release_errors: HashMap::new(),
            checkpoint_ref: None,
            prepare_minutes: 0.0,
            execute_minutes: 0.0,
            release_minutes: 0.0,
        }
    }

    /// An adapter offering only plain `execute`.
    pub fn standalone() -> Self {
        Self {
            protocols: Protocols {
                execute: true,
                seeds: true,
                variants: true,
                episode_groups: false,
                replay: false,
                replay_children: false,
                child_risk: false,
                counterfactual: false,
            },
            ..Self::episode()
        }
    }
}

/// One logged adapter call.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Call {
    /// Which instance (lane) made the call.
    pub lane: usize,
    /// `execute`, `prepare`, `execute_episode`, `release`.
    pub op: &'static str,
    /// Item id (or seed id for prepare/release).
    pub id: String,
    /// The context's group id.
    pub group: Option<String>,
    /// The context's branch id.
    pub branch: String,
}

/// Observer called at the start of each adapter call (for overlap tests).
pub(crate) type Hook = Arc<dyn Fn(&Call) + Send + Sync>;

/// Handle of a scripted prepared group.
#[derive(Debug)]
pub(crate) struct TestHandle {
    pub seed: String,
}

/// A scripted adapter instance.
pub(crate) struct ScriptedAdapter {
    pub script: Arc<Script>,
    pub log: Arc<Mutex<Vec<Call>>>,
    pub clock: Option<Arc<ManualClock>>,
    pub lane: usize,
    pub hook: Option<Hook>,
    /// Handles handed out and not yet released (must be 0 at the end).
    pub open_handles: Arc<Mutex<i64>>,
}

impl ScriptedAdapter {
    pub fn new(script: Script) -> Self {
        Self {
            script: Arc::new(script),
            log: Arc::new(Mutex::new(Vec::new())),
            clock: None,
            lane: 0,
            hook: None,
            open_handles: Arc::new(Mutex::new(0)),
        }
    }

    /// Another instance sharing this one's script, log, clock and hook.
    pub fn sibling(&self, lane: usize) -> Self {
        Self {
            script: Arc::clone(&self.script),
            log: Arc::clone(&self.log),
            clock: self.clock.clone(),
            lane,
            hook: self.hook.clone(),
            open_handles: Arc::clone(&self.open_handles),
        }
    }

    pub fn with_clock(mut self, clock: Arc<ManualClock>) -> Self {
        self.clock = Some(clock);
        self
    }

    pub fn with_hook(mut self, hook: Hook) -> Self {
        self.hook = Some(hook);
        self
    }

    /// The logged calls as `op:id` strings.
    pub fn ops(&self) -> Vec<String> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .map(|c| format!("{}:{}", c.op, c.id))
            .collect()
    }

    fn log_call(&self, op: &'static str, id: &str, ctx: &CallContext, minutes: f64) {
        let call = Call {
            lane: self.lane,
            op,
            id: id.to_owned(),
            group: ctx.execution_group_id.clone(),
            branch: ctx.branch_id.clone(),
        };
        if let Some(hook) = &self.hook {
            hook(&call);
        }
        self.log.lock().unwrap().push(call);
        if let Some(clock) = &self.clock {
            clock.advance_minutes(minutes);
        }
    }

    /// The record an item produces: its `obs` keys (default
    /// `["obs:{item_id}"]`), its `flags`, the fields of its `claims` object
    /// (what an adapter claims of itself), and fields the runtime must
    /// overwrite (`duration_minutes`, `item_id`).
    fn record_for(item: &Item, via: &str) -> Record {
        let id = item_id(item);
        let keys = item
            .get("obs")
            .cloned()
            .unwrap_or_else(|| json!([format!("obs:{id}")]));
        let mut record: Record = obj(json!({
            "item_id": "forged-by-adapter",
            "observation_keys": keys,
            "weighted_flags": item.get("flags").cloned().unwrap_or_else(|| json!({})),
            "accepted": true,
            "duration_minutes": 999.0,
            "via": via,
        }));
        with_claims(&mut record, item);
        record
    }
}

/// `record` with the fields of `item`'s `claims` object added.
fn with_claims(record: &mut Record, item: &Item) {
    if let Some(Value::Object(claims)) = item.get("claims") {
        record.extend(claims.clone());
    }
}

pub(crate) fn item_id(item: &Item) -> String {
    match item.get("item_id") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

impl EpisodeAdapter for ScriptedAdapter {
    type Handle = TestHandle;

    fn protocols(&self) -> Protocols {
        self.script.protocols
    }

    fn execute(&mut self, item: &Item, ctx: &CallContext) -> Result<Record, AdapterError> {
        let id = item_id(item);
        self.log_call("execute", &id, ctx, self.script.execute_minutes);
        if let Some(error) = self.script.execute_errors.get(&id) {
            return Err(error.clone());
        }
        Ok(Self::record_for(item, "execute"))
    }

    fn prepare_episode_group(
        &mut self,
        seed: &Item,
        items: &[Item],
        ctx: &CallContext,
    ) -> Result<Option<Prepared<TestHandle>>, AdapterError> {
        let id = item_id(seed);
        assert_eq!(item_id(&items[0]), id, "the seed comes first in the items");
        self.log_call("prepare", &id, ctx, self.script.prepare_minutes);
        let script = self
            .script
            .prepare
            .get(&id)
            .cloned()
            .unwrap_or(PrepareScript::Prepared);
        let prefix_record = match script {
            PrepareScript::Fail(error) => return Err(error),
            PrepareScript::ReturnNone => return Ok(None),
            PrepareScript::BadPrefix(error) => Err(error),
            PrepareScript::Prepared => {
                let mut prefix: Record = obj(json!({
                    "observation_keys": [format!("prefix:{id}")],
                    "weighted_flags": {},
                    "duration_minutes": 999.0,
                    "variant_spec_id": "must-be-removed",
                }));
                with_claims(&mut prefix, seed);
                Ok(prefix)
            }
        };
        *self.open_handles.lock().unwrap() += 1;
        Ok(Some(Prepared {
            handle: TestHandle { seed: id },
            prefix_record,
            checkpoint_ref: self.script.checkpoint_ref.clone(),
        }))
    }

    fn execute_episode(
        &mut self,
        handle: &TestHandle,
        item: &Item,
        ctx: &CallContext,
    ) -> Result<Record, AdapterError> {
        let id = item_id(item);
        self.log_call("execute_episode", &id, ctx, self.script.execute_minutes);
        assert!(!handle.seed.is_empty());
        if let Some(error) = self.script.execute_errors.get(&id) {
            return Err(error.clone());
        }
        Ok(Self::record_for(item, "execute_episode"))
    }

    fn release_episode_group(
        &mut self,
        handle: TestHandle,
        ctx: &CallContext,
    ) -> Result<(), AdapterError> {
        self.log_call("release", &handle.seed, ctx, self.script.release_minutes);
        *self.open_handles.lock().unwrap() -= 1;
        match self.script.release_errors.get(&handle.seed) {
            Some(error) => Err(error.clone()),
            None => Ok(()),
        }
    }
}
