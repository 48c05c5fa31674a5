//! `sandloop worker`: pulls units from the units stream, runs each in its
//! own sandbox under the limits the run sent, publishes the unit's records
//! and call lines to the run's results subject, and acks the unit only
//! once the result is stored. Grants belong to the worker: a unit needing
//! a guest path this worker does not offer is handed back (nak) for
//! another worker, never run here.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::AckKind;
use async_nats::jetstream::consumer::{Consumer, pull};
use futures_util::StreamExt;
use sandloop_core::episode::clock::SystemClock;
use sandloop_core::episode::unit_record::UnitRecord;
use sandloop_core::harness::queue::branch_id;
use sandloop_core::harness::work::{UnitError, UnitRunner};
use sandloop_core::replay::Replaying;
use sandloop_sandbox::{
    CallLines, CallObserver, CallReport, DirGrant, LoadedAdapter, SandboxConfig, SandboxEngine,
    WasmAdapter, load,
};

use crate::lock;
use crate::points::LaneReplay;
use crate::transport::{
    ACK_WAIT, ComponentError, Connection, HAND_BACK_DELAY, NatsTarget, ROLL_CALL_SUBJECT, Runtime,
    connect_patiently,
};
use crate::wire::{
    GuestNeed, Outcome, ReplayShipment, UnitMessage, UnitResult, WIRE_VERSION, WorkerHello, decode,
    meets, offers_env,
};

/// Most lanes one worker runs: the lanes of all workers together wait on
/// one JetStream consumer, which takes 512 waiting pulls by default.
pub const MAX_LANES: usize = 256;

/// A worker's settings (`sandloop worker` flags).
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// The NATS server.
    pub target: NatsTarget,
    /// The name results and the run's summary show.
    pub name: String,
    /// Units run at once.
    pub lanes: usize,
    /// The directories this worker offers (`--dir HOST::GUEST[:ro]`).
    pub offers: Vec<DirGrant>,
    /// The environment variables this worker offers (`--env NAME`), read
    /// from its own environment.
    pub env: Vec<String>,
    /// Where fetched components and their compiled code are kept.
    pub cache_dir: PathBuf,
    /// Where lanes keep the durable states of replay points until a
    /// result ships them: a [`crate::scratch::Scratch`] directory, which
    /// the caller removes.
    pub scratch_dir: PathBuf,
    /// How long to keep trying to reach the server at start
    /// ([`crate::transport::connect_patiently`]); zero tries once.
    pub connect_timeout: std::time::Duration,
}

impl WorkerConfig {
    /// The settings' own rules, before the server is reached: 1 to
    /// [`MAX_LANES`] lanes ([`WorkerConfig::check_lanes`]) and a name.
    ///
    /// # Errors
    /// The first rule broken, naming the flag (the caller's bad input).
    pub fn check(&self) -> Result<(), String> {
        Self::check_lanes(self.lanes)?;
        if self.name.is_empty() {
            return Err("--name must not be empty".into());
        }
        Ok(())
    }

    /// 1 to [`MAX_LANES`] lanes.
    ///
    /// # Errors
    /// The bounds and why they are what they are.
    pub fn check_lanes(lanes: usize) -> Result<(), String> {
        if !(1..=MAX_LANES).contains(&lanes) {
            return Err(format!(
                "--lanes must be from 1 to {MAX_LANES} (the lanes of all workers together wait \
                 on one JetStream consumer, which takes 512 waiting pulls by default)"
            ));
        }
        Ok(())
    }

    /// Whether this worker can write its cache directory: a worker that
    /// cannot would hand every unit back for ever.
    ///
    /// # Errors
    /// Why not, naming the directory (this machine's failure, not the
    /// caller's input).
    pub fn check_cache(&self) -> Result<(), String> {
        let components = self.cache_dir.join("components");
        let probe = components.join(format!(".write-check-{}", std::process::id()));
        std::fs::create_dir_all(&components)
            .and_then(|()| std::fs::File::create(&probe))
            .and_then(|_| std::fs::remove_file(&probe))
            .map_err(|error| {
                format!(
                    "the cache directory {} cannot be written ({error}); give --cache-dir a \
                     writable directory",
                    self.cache_dir.display()
                )
            })
    }
}

/// `HOST-PID`: the machine's host name and this process's id, a worker's
/// default name.
pub fn default_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "worker".to_owned());
    format!("{host}-{}", std::process::id())
}

/// Runs the worker until the process is stopped.
///
/// # Errors
/// The server cannot be reached, or JetStream refuses the streams.
pub fn run_worker(config: WorkerConfig) -> Result<(), String> {
    let runtime = Runtime::start().map_err(|error| format!("starting the NATS client: {error}"))?;
    let connection = runtime
        .block_on(connect_patiently(
            &config.target,
            &format!("sandloop worker {}", config.name),
            config.connect_timeout,
        ))
        .map_err(|error| error.to_string())?;
    runtime
        .block_on(connection.prepare_storage())
        .map_err(|error| error.to_string())?;
    let consumer = runtime
        .block_on(connection.workers_consumer())
        .map_err(|error| error.to_string())?;
    let hello = WorkerHello {
        version: WIRE_VERSION,
        worker: config.name.clone(),
        lanes: config.lanes,
        offers: config
            .offers
            .iter()
            .map(|grant| GuestNeed::new(grant.guest.clone(), grant.read_only))
            .collect(),
        env: config.env.clone(),
    };
    refuse_taken_name(&runtime, &connection, &config.name)?;
    runtime
        .block_on(answer_roll_calls(&connection, &hello))
        .map_err(|error| format!("answering roll calls on {}: {error}", connection.url))?;
    tracing::info!(
        "worker {} ready on {} with {} lane(s), offering {}",
        config.name,
        connection.url,
        config.lanes,
        crate::wire::shown_offers(&hello.offers, &hello.env)
    );
    let shared = Shared {
        runtime,
        connection,
        consumer,
        components: Components {
            dir: config.cache_dir.clone(),
            loaded: Mutex::new(HashMap::new()),
        },
        config,
        offers: hello.offers,
    };
    std::thread::scope(|scope| {
        for lane in 0..shared.config.lanes.max(1) {
            let shared = &shared;
            scope.spawn(move || Lane::new(shared, lane).run());
        }
    });
    Ok(())
}

/// Refuses `name` when a worker of that name already answers roll calls
/// on `connection`'s server: two workers of one name would be counted as
/// one in every run's summary.
///
/// # Errors
/// The name is taken (the message says what to do), or the roll call
/// cannot be sent.
fn refuse_taken_name(runtime: &Runtime, connection: &Connection, name: &str) -> Result<(), String> {
    let hellos = runtime.block_on(crate::coordinator::gather_hellos(connection))?;
    if hellos.iter().any(|hello| hello.worker == name) {
        return Err(format!(
            "a worker named {name} already serves on {}; give each worker its own --name (or \
             leave --name out: the default is the host name and process id)",
            connection.url
        ));
    }
    Ok(())
}

/// Replies to every roll call with `hello`.
async fn answer_roll_calls(
    connection: &Connection,
    hello: &WorkerHello,
) -> Result<(), async_nats::SubscribeError> {
    let mut calls = connection.client.subscribe(ROLL_CALL_SUBJECT).await?;
    let client = connection.client.clone();
    let payload: bytes::Bytes = serde_json::to_vec(hello)
        .expect("a hello serialises")
        .into();
    tokio::spawn(async move {
        while let Some(call) = calls.next().await {
            if let Some(reply) = call.reply {
                let _ = client.publish(reply, payload.clone()).await;
            }
        }
    });
    Ok(())
}

/// What the lanes share.
struct Shared {
    runtime: Arc<Runtime>,
    connection: Connection,
    consumer: Consumer<pull::Config>,
    components: Components,
    config: WorkerConfig,
    offers: Vec<GuestNeed>,
}

/// Components fetched from the object store and loaded, by digest, limits
/// and grants.
struct Components {
    dir: PathBuf,
    loaded: Mutex<HashMap<String, Arc<LoadedAdapter>>>,
}

impl Components {
    /// The key of `unit`'s sandbox: digest, limits and needs.
    fn key(unit: &UnitMessage) -> String {
        serde_json::to_string(&(&unit.component_sha256, &unit.limits, &unit.needs, &unit.env))
            .expect("the key serialises")
    }

    /// `unit`'s component, loaded under its limits with the worker's
    /// grants of the guest paths it needs.
    fn get(&self, shared: &Shared, unit: &UnitMessage) -> Result<Arc<LoadedAdapter>, Unusable> {
        let key = Self::key(unit);
        if let Some(loaded) = lock(&self.loaded).get(&key) {
            return Ok(Arc::clone(loaded));
        }
        let path = self.fetch(shared, &unit.component_sha256)?;
        unit.limits.validate().map_err(|error| {
            Unusable::Never(format!("the run's limits are out of bounds: {error}"))
        })?;
        let config = SandboxConfig {
            limits: unit.limits.clone(),
            dirs: grants_for(&shared.config.offers, &unit.needs),
            // Checked by `handle`: each is one this worker offers.
            env: unit.env.clone(),
            cache_dir: Some(self.dir.clone()),
            pool_instances: 0,
            incremental_compilation: false,
        };
        let engine = SandboxEngine::new(&config).map_err(|error| {
            Unusable::Never(format!(
                "starting wasmtime under the run's limits: {error:#}"
            ))
        })?;
        let loaded = load(&path, Arc::new(engine), Arc::new(config))
            .map_err(|error| Unusable::Never(format!("loading {}: {error}", path.display())))?;
        let loaded = Arc::new(loaded);
        lock(&self.loaded).insert(key, Arc::clone(&loaded));
        Ok(loaded)
    }

    /// The component's file in the cache, fetched (and its digest checked)
    /// when missing or not matching its name.
    fn fetch(&self, shared: &Shared, sha256: &str) -> Result<PathBuf, Unusable> {
        if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Unusable::Never(format!("{sha256:?} is not a sha256")));
        }
        let folder = self.dir.join("components");
        let path = folder.join(format!("{sha256}.wasm"));
        if let Ok(bytes) = std::fs::read(&path)
            && crate::transport::sha256_hex(&bytes) == sha256
        {
            return Ok(path);
        }
        let bytes = shared
            .runtime
            .block_on(shared.connection.get_component(sha256))
            .map_err(|error| match error {
                ComponentError::Unavailable(error) => Unusable::Later(error.to_string()),
                ComponentError::Tampered(reason) => Unusable::Never(reason),
            })?;
        write_atomically(&folder, &path, &bytes)
            .map_err(|error| Unusable::Later(format!("writing {}: {error}", path.display())))?;
        Ok(path)
    }
}

/// Why a worker cannot run a unit's component.
enum Unusable {
    /// Not now (the object store or this machine's disk failed): the unit
    /// is handed back for a later try, here or elsewhere.
    Later(String),
    /// Never (a tampered component, one that does not load under the
    /// run's limits): the run is told, and stops.
    Never(String),
}

fn write_atomically(folder: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(folder)?;
    let mut file = tempfile::NamedTempFile::new_in(folder)?;
    std::io::Write::write_all(&mut file, bytes)?;
    file.persist(path).map_err(|error| error.error)?;
    Ok(())
}

/// The worker's grants of `needs`: each needed guest path from the
/// worker's own `--dir`, read-only when the need is.
fn grants_for(offers: &[DirGrant], needs: &[GuestNeed]) -> Vec<DirGrant> {
    needs
        .iter()
        .filter_map(|need| {
            let offer = offers.iter().find(|offer| offer.guest == need.guest)?;
            let mut grant = offer.clone();
            grant.read_only |= need.read_only;
            Some(grant)
        })
        .collect()
}

/// `result` as JSON, or — when that is more than the server's
/// `max_payload` bytes — a [`Outcome::TooLarge`] saying so (a result that
/// cannot be published would only be run again and again).
fn encode_within(mut result: UnitResult, max_payload: usize) -> Vec<u8> {
    let payload = serde_json::to_vec(&result).expect("a result serialises");
    if payload.len() <= max_payload {
        return payload;
    }
    result.outcome = Outcome::TooLarge {
        reason: format!(
            "its result is {} bytes, more than the NATS server's max_payload ({max_payload} \
             bytes); raise max_payload in the server's configuration",
            payload.len()
        ),
    };
    result.calls.clear();
    result.replay = None;
    serde_json::to_vec(&result).expect("a result serialises")
}

/// Headers naming a message about `unit_id`'s delivery `attempt`
/// (`kind`: `started` or `result`), so that one tried again after a lost
/// ack is stored once.
fn message_id(unit_id: &str, attempt: u64, kind: &str) -> async_nats::HeaderMap {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(
        async_nats::header::NATS_MESSAGE_ID,
        format!("{unit_id}.{attempt}.{kind}").as_str(),
    );
    headers
}

/// Collects the call lines of one lane's adapter, per unit.
#[derive(Default)]
struct Collector(Mutex<Vec<CallLines>>);

impl CallObserver for Collector {
    fn on_call(&self, report: &CallReport<'_>) {
        match CallLines::of(report) {
            Ok(Some(lines)) => lock(&self.0).push(lines),
            Ok(None) => {}
            Err(error) => tracing::warn!("a trace event could not be serialised: {error}"),
        }
    }
}

/// The first pause of a lane before it pulls again after a unit needing
/// guest paths or variables this worker does not offer; doubled after each
/// such unit in a row, up to [`UNOFFERED_PAUSE_MAX`].
const UNOFFERED_PAUSE_FIRST: Duration = Duration::from_millis(250);
/// The longest such pause.
const UNOFFERED_PAUSE_MAX: Duration = Duration::from_secs(5);

/// What became of a unit a lane pulled.
#[derive(Debug, PartialEq, Eq)]
enum Handled {
    /// Run (or refused, or handed back for a later try).
    Done,
    /// Handed back at once: it needs what this worker does not offer.
    NotOffered,
}

/// One worker lane: its adapter lives for one run's epoch, as a local
/// lane's does.
struct Lane<'a> {
    shared: &'a Shared,
    branch_id: String,
    collector: Arc<Collector>,
    adapter: Option<(String, LaneAdapter)>,
    /// How long the lane last paused after a unit it cannot run.
    pause: Duration,
}

/// A lane's adapter, and where its replay points go until they are sent.
struct LaneAdapter {
    adapter: Replaying<WasmAdapter>,
    replay: Option<LaneReplay>,
}

impl<'a> Lane<'a> {
    fn new(shared: &'a Shared, lane: usize) -> Self {
        Self {
            shared,
            branch_id: branch_id(lane),
            collector: Arc::new(Collector::default()),
            adapter: None,
            pause: Duration::ZERO,
        }
    }

    fn run(mut self) {
        loop {
            let next = self.shared.runtime.block_on(async {
                let mut batch = self
                    .shared
                    .consumer
                    .batch()
                    .max_messages(1)
                    .expires(Duration::from_secs(5))
                    .messages()
                    .await?;
                batch.next().await.transpose()
            });
            match next {
                Ok(Some(message)) => {
                    if self.handle(message) == Handled::NotOffered {
                        // Leave the units this worker cannot run to those
                        // that can, pulling again later and later.
                        self.pause =
                            (self.pause * 2).clamp(UNOFFERED_PAUSE_FIRST, UNOFFERED_PAUSE_MAX);
                        std::thread::sleep(self.pause);
                    } else {
                        self.pause = Duration::ZERO;
                    }
                }
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!("pulling units: {error}");
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        }
    }

    /// Runs or hands back the unit of `message`.
    fn handle(&mut self, message: async_nats::jetstream::Message) -> Handled {
        let runtime = &self.shared.runtime;
        let unit: UnitMessage = match decode("a unit", &message.payload) {
            Ok(unit) => unit,
            Err(error) => {
                tracing::warn!("{error}; dropping it");
                let _ = runtime.block_on(message.ack_with(AckKind::Term));
                return Handled::Done;
            }
        };
        let attempt = message
            .info()
            .map(|info| info.delivered.max(1) as u64)
            .unwrap_or(1);
        if !meets(&self.shared.offers, &unit.needs)
            || !offers_env(&self.shared.config.env, &unit.env)
        {
            tracing::info!(
                "unit {} needs guest paths or environment variables this worker does not \
                 offer; handing it back",
                unit.unit_id
            );
            // At once: a worker that offers them may be waiting for it.
            let _ = runtime.block_on(message.ack_with(AckKind::Nak(None)));
            return Handled::NotOffered;
        }
        let heartbeat = {
            let message = message.clone();
            runtime.handle().spawn(async move {
                loop {
                    tokio::time::sleep(ACK_WAIT / 3).await;
                    let _ = message.ack_with(AckKind::Progress).await;
                }
            })
        };
        // Fetching and compiling the component count as running the unit
        // (the heartbeat covers them); a start is told once it can run.
        // `Err`: not now (the object store, this disk, the unit's replay
        // points), hand the unit back for a later try, here or elsewhere.
        let ran = match self.shared.components.get(self.shared, &unit) {
            Err(Unusable::Later(reason)) => Err(reason),
            Err(Unusable::Never(reason)) => {
                tracing::warn!("unit {}: {reason}", unit.unit_id);
                Ok((Outcome::Failed { reason }, None))
            }
            Ok(loaded) => {
                self.publish_started(&unit, attempt);
                tracing::debug!("unit {}: running (delivery {attempt})", unit.unit_id);
                self.execute(&unit, loaded)
            }
        };
        heartbeat.abort();
        let (outcome, replay) = match ran {
            Ok(ran) => ran,
            Err(reason) => {
                std::mem::take(&mut *lock(&self.collector.0));
                tracing::warn!("unit {}: {reason}; handing it back", unit.unit_id);
                let nak = AckKind::Nak(Some(HAND_BACK_DELAY));
                let _ = runtime.block_on(message.ack_with(nak));
                return Handled::Done;
            }
        };
        let calls = std::mem::take(&mut *lock(&self.collector.0));
        let mut result = self.result(&unit, attempt, outcome, calls);
        result.replay = replay;
        let payload = encode_within(
            result,
            self.shared.connection.client.server_info().max_payload,
        );
        let stored = runtime.block_on(async {
            self.shared
                .connection
                .publish_stored(
                    &unit.results_subject,
                    message_id(&unit.unit_id, attempt, "result"),
                    payload.into(),
                    &format!("publishing the result of unit {}", unit.unit_id),
                )
                .await
                .map_err(|error| error.to_string())?;
            message
                .double_ack()
                .await
                .map_err(|error| format!("acking the unit: {error}"))
        });
        match stored {
            Ok(()) => tracing::debug!("unit {} done (delivery {attempt})", unit.unit_id),
            // Not acked: the unit is delivered again after the ack deadline.
            Err(error) => tracing::warn!("unit {}: storing its result: {error}", unit.unit_id),
        }
        Handled::Done
    }

    /// The result message of `unit`'s delivery `attempt`.
    fn result(
        &self,
        unit: &UnitMessage,
        attempt: u64,
        outcome: Outcome,
        calls: Vec<CallLines>,
    ) -> UnitResult {
        UnitResult {
            version: WIRE_VERSION,
            unit_id: unit.unit_id.clone(),
            attempt,
            worker: self.shared.config.name.clone(),
            outcome,
            calls,
            replay: None,
        }
    }

    /// Tells the coordinator that `unit` starts (stored before it runs, so
    /// a unit that kills its workers is counted); a failure is only logged.
    fn publish_started(&self, unit: &UnitMessage, attempt: u64) {
        let started = self.result(unit, attempt, Outcome::Started, Vec::new());
        let payload = serde_json::to_vec(&started).expect("a result serialises");
        let stored = self
            .shared
            .runtime
            .block_on(self.shared.connection.publish_stored(
                &unit.results_subject,
                message_id(&unit.unit_id, attempt, "started"),
                payload.into(),
                &format!("telling that unit {} starts", unit.unit_id),
            ));
        if let Err(error) = stored {
            tracing::warn!("{error}");
        }
    }

    /// Runs `unit` on this lane's adapter of `loaded` (a new one for each
    /// run's epoch), with what its replay points left.
    ///
    /// # Errors
    /// The unit's replay points could not be kept or stored: it is handed
    /// back.
    fn execute(
        &mut self,
        unit: &UnitMessage,
        loaded: Arc<LoadedAdapter>,
    ) -> Result<(Outcome, Option<ReplayShipment>), String> {
        let key = format!(
            "{}/{}/{}/{:?}",
            unit.run_id,
            unit.epoch,
            Components::key(unit),
            unit.replay
        );
        if self.adapter.as_ref().is_none_or(|(held, _)| *held != key) {
            self.adapter = None;
            let observer: Arc<dyn CallObserver> = self.collector.clone();
            let adapter = WasmAdapter::new(loaded, self.branch_id.clone(), Some(observer));
            let lane = match unit.replay {
                None => LaneAdapter {
                    adapter: adapter.without_replay(),
                    replay: None,
                },
                Some(settings) => {
                    let (replay, options) =
                        LaneReplay::new(&unit.run_id, settings, &self.shared.config.scratch_dir)
                            .map_err(|error| format!("a directory for replay points: {error}"))?;
                    LaneAdapter {
                        adapter: adapter.with_replay(options),
                        replay: Some(replay),
                    }
                }
            };
            self.adapter = Some((key, lane));
        }
        let (_, lane) = self.adapter.as_mut().expect("just set");
        let work = unit.body.clone().into_work_unit();
        let outcome =
            match lane
                .adapter
                .run_unit(&work, &unit.context(), unit.policy(), &SystemClock)
            {
                Ok(records) => Outcome::Records {
                    records: records.into_iter().map(UnitRecord::into_map).collect(),
                },
                Err(UnitError::Fatal(error)) => Outcome::fatal(&error),
                Err(error) => Outcome::Failed {
                    reason: error.to_string(),
                },
            };
        let shipment = match &lane.replay {
            Some(replay) => Some(replay.ship(&self.shared.runtime, &self.shared.connection)?),
            None => None,
        };
        Ok((outcome, shipment))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_too_large_to_publish_becomes_a_failure_that_says_so() {
        let record: sandloop_core::episode::adapter::Record =
            serde_json::from_str(r#"{"text": "0123456789012345678901234567890123456789"}"#)
                .unwrap();
        let result = UnitResult {
            version: WIRE_VERSION,
            unit_id: "r.e1.u0".into(),
            attempt: 1,
            worker: "w".into(),
            outcome: Outcome::Records {
                records: vec![record],
            },
            calls: vec![CallLines::default()],
            replay: None,
        };
        let whole = serde_json::to_vec(&result).unwrap();
        assert_eq!(encode_within(result.clone(), whole.len()), whole);
        let shrunk: UnitResult = decode("r", &encode_within(result, 40)).unwrap();
        let Outcome::TooLarge { reason } = shrunk.outcome else {
            panic!("a result too large");
        };
        assert!(
            reason.contains(&format!("{} bytes", whole.len())),
            "{reason}"
        );
        assert!(reason.contains("max_payload (40 bytes)"), "{reason}");
        assert!(shrunk.calls.is_empty());
        assert_eq!(shrunk.unit_id, "r.e1.u0");
    }

    #[test]
    fn a_need_is_granted_from_the_workers_own_directory_read_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let spec = format!("{}::/docs", dir.path().display());
        let offers = DirGrant::parse_all(&[spec]).unwrap();
        let need = |read_only| GuestNeed::new("/docs", read_only);
        let granted = grants_for(&offers, &[need(true)]);
        assert_eq!(granted.len(), 1);
        assert!(granted[0].read_only);
        assert_eq!(granted[0].host, offers[0].host);
        assert!(!grants_for(&offers, &[need(false)])[0].read_only);
        let other = GuestNeed::new("/other", true);
        assert!(grants_for(&offers, &[other]).is_empty());
    }
}
