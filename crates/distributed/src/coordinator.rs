//! The coordinator's end: `sandloop run --nats` keeps its run directory,
//! epochs, checkpoint, novelty and ordering, and its queue lanes hand
//! their units to a [`Dispatcher`] through [`RemoteLane`]s (the core's
//! [`UnitRunner`] seam) instead of running them: each unit is published to
//! the units stream, and the lane waits for the first result a worker
//! publishes for it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use sandloop_core::episode::adapter::{AdapterError, CallContext, ErrorType, Protocols};
use sandloop_core::episode::clock::Clock;
use sandloop_core::episode::policy::{FailurePolicy, FatalError};
use sandloop_core::episode::unit_record::UnitRecord;
use sandloop_core::harness::work::{UnitError, UnitRunner, WorkUnit, load_stored};
use sandloop_sandbox::{CallLines, CallLog};

use crate::ledger::{DistributedSummary, Ledger, MAX_STARTS, Settled};
use crate::lock;
use crate::lost::{lost_unit_records, unit_error_records};
use crate::points::RemoteReplay;
use crate::transport::{
    Connection, NatsTarget, RESULTS_PREFIX, ROLL_CALL_SUBJECT, Runtime, TransportError,
    UNITS_PREFIX, connect,
};
use crate::wire::{
    GuestNeed, Outcome, ReplaySettings, SandboxLimits, UnitBody, UnitMessage, UnitResult,
    WIRE_VERSION, WorkerHello, decode, shown_offers,
};

/// What a distributed run sends with every unit, and how long it waits for
/// a worker at the start.
#[derive(Clone, Debug)]
pub struct RunSpec {
    /// The NATS server.
    pub target: NatsTarget,
    /// The component's bytes (stored once, by sha256).
    pub component: Vec<u8>,
    /// The sandbox limits.
    pub limits: SandboxLimits,
    /// The guest paths every unit needs.
    pub needs: Vec<GuestNeed>,
    /// The environment variables every unit needs (names).
    pub env: Vec<String>,
    /// How long to wait for a worker meeting `needs` to answer.
    pub worker_wait: Duration,
    /// The component's protocols (the records of a lost unit follow them).
    pub protocols: Protocols,
}

/// How a unit's trip ended.
enum Sent {
    /// Its first result.
    Answered(Box<UnitResult>),
    /// It started more than [`MAX_STARTS`] times without a result.
    Abandoned,
    /// It is too large to publish (why).
    Unsendable(String),
}

/// What wakes a lane waiting for its unit.
enum Delivery {
    /// The unit's first result.
    Result(Box<UnitResult>),
    /// The unit started more than [`MAX_STARTS`] times without a result:
    /// it was given up.
    Abandoned,
}

type SharedLedger = Arc<Mutex<Ledger<Sender<Delivery>>>>;

/// A distributed run's connection: publishes units, routes results to the
/// lanes waiting for them, and keeps the summary's figures.
pub struct Dispatcher {
    runtime: Arc<Runtime>,
    connection: Connection,
    run_id: String,
    results_subject: String,
    sha256: String,
    spec: RunSpec,
    next_unit: AtomicU64,
    ledger: SharedLedger,
    /// Set when the results stream or the connection failed: every lane
    /// stops waiting with this message.
    failure: Arc<Mutex<Option<String>>>,
    call_log: Option<Arc<CallLog>>,
}

impl Dispatcher {
    /// Connects, creates the streams, stores the component and waits (up to
    /// [`RunSpec::worker_wait`]) for a worker that offers the run's guest
    /// paths; the lines workers send for traces and adapter output go to
    /// `call_log`.
    ///
    /// # Errors
    /// A transport failure; no worker answering in time; workers that
    /// answered but none offering the run's guest paths (the message lists
    /// what each offers).
    pub fn open(spec: RunSpec, call_log: Option<Arc<CallLog>>) -> Result<Arc<Self>, String> {
        let runtime =
            Runtime::start().map_err(|error| format!("starting the NATS client: {error}"))?;
        let run_id = new_run_id();
        let results_subject = format!("{RESULTS_PREFIX}.{run_id}");
        let connection = runtime
            .block_on(connect(&spec.target, &format!("sandloop run {run_id}")))
            .map_err(|error| error.to_string())?;
        let ledger: SharedLedger = Arc::new(Mutex::new(Ledger::new(&connection.url, &run_id)));
        let failure = Arc::new(Mutex::new(None));
        let sha256 = runtime
            .block_on(prepare(
                &connection,
                &spec,
                &results_subject,
                &ledger,
                &failure,
            ))
            .map_err(|error| error.to_string())?;
        let hellos = runtime.block_on(roll_call(&connection, &spec))?;
        note_workers(&ledger, &hellos);
        Ok(Arc::new(Self {
            runtime,
            connection,
            run_id,
            results_subject,
            sha256,
            spec,
            next_unit: AtomicU64::new(0),
            ledger,
            failure,
            call_log,
        }))
    }

    /// A lane sending its units through this dispatcher, with replay
    /// points when `replay` is given.
    pub fn lane(self: &Arc<Self>, replay: Option<RemoteReplay>) -> RemoteLane {
        RemoteLane {
            dispatcher: Arc::clone(self),
            replay,
        }
    }

    /// The summary's `distributed` block so far.
    pub fn summary(&self) -> DistributedSummary {
        lock(&self.ledger).summary()
    }

    /// Units published and not yet answered.
    pub fn in_flight(&self) -> usize {
        lock(&self.ledger).in_flight()
    }

    /// The component's sha256, as stored.
    pub fn component_sha256(&self) -> &str {
        &self.sha256
    }

    /// Where this run's units are published.
    fn units_subject(&self) -> String {
        format!("{UNITS_PREFIX}.{}", self.run_id)
    }

    fn failure(&self) -> Option<String> {
        lock(&self.failure).clone()
    }

    /// Publishes `unit` and waits for its first result.
    fn run(
        &self,
        unit: &WorkUnit,
        ctx: &CallContext,
        fatal: bool,
        replay: Option<ReplaySettings>,
    ) -> Result<Sent, UnitError> {
        let body = body_of(unit)?;
        let index = self.next_unit.fetch_add(1, Ordering::Relaxed);
        let unit_id = format!("{}.e{}.u{index}", self.run_id, ctx.epoch);
        let message = UnitMessage {
            version: WIRE_VERSION,
            run_id: self.run_id.clone(),
            unit_id: unit_id.clone(),
            results_subject: self.results_subject.clone(),
            component_sha256: self.sha256.clone(),
            limits: self.spec.limits.clone(),
            needs: self.spec.needs.clone(),
            env: self.spec.env.clone(),
            arm: ctx.arm.clone(),
            epoch: ctx.epoch,
            branch_id: ctx.branch_id.clone(),
            fatal,
            replay,
            body,
        };
        let payload = serde_json::to_vec(&message).expect("a unit serialises");
        let max_payload = self.connection.client.server_info().max_payload;
        if payload.len() > max_payload {
            return Ok(Sent::Unsendable(format!(
                "its unit is {} bytes, more than the NATS server's max_payload ({max_payload} \
                 bytes); raise max_payload in the server's configuration",
                payload.len()
            )));
        }
        let (sender, receiver) = channel();
        lock(&self.ledger).expect(&unit_id, sender);
        let bytes = payload.len() as u64;
        let subject = self.units_subject();
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, unit_id.as_str());
        let published = self.runtime.block_on(self.connection.publish_stored(
            &subject,
            headers,
            payload.into(),
            &format!("publishing unit {unit_id} to {subject}"),
        ));
        match published {
            Ok(ack) => lock(&self.ledger).published(&unit_id, ack.sequence, bytes),
            Err(error) => {
                lock(&self.ledger).forget(&unit_id);
                return Err(UnitError::Remote(error.to_string()));
            }
        }
        self.wait(&unit_id, &receiver)
    }

    /// Waits for `unit_id`'s result. Every [`RunSpec::worker_wait`] without
    /// it, the connected workers are asked again: when none that could run
    /// the unit answers (they all died or left), the unit fails saying so
    /// instead of waiting forever.
    fn wait(&self, unit_id: &str, receiver: &Receiver<Delivery>) -> Result<Sent, UnitError> {
        let mut next_check = Instant::now() + self.spec.worker_wait;
        loop {
            match receiver.recv_timeout(Duration::from_millis(500)) {
                Ok(Delivery::Result(result)) => return Ok(Sent::Answered(result)),
                Ok(Delivery::Abandoned) => return Ok(Sent::Abandoned),
                Err(RecvTimeoutError::Timeout) => {
                    if let Some(reason) = self.failure() {
                        lock(&self.ledger).forget(unit_id);
                        return Err(UnitError::Remote(reason));
                    }
                    if Instant::now() >= next_check {
                        self.check_workers(unit_id)?;
                        next_check = Instant::now() + self.spec.worker_wait;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(UnitError::Remote(format!(
                        "unit {unit_id}: the dispatcher stopped"
                    )));
                }
            }
        }
    }
}

impl Dispatcher {
    /// Asks the workers again while `unit_id` waits; `Err` when none that
    /// could run it answers within [`RunSpec::worker_wait`].
    fn check_workers(&self, unit_id: &str) -> Result<(), UnitError> {
        match self
            .runtime
            .block_on(roll_call(&self.connection, &self.spec))
        {
            Ok(hellos) => {
                note_workers(&self.ledger, &hellos);
                Ok(())
            }
            Err(reason) => {
                lock(&self.ledger).forget(unit_id);
                Err(UnitError::Remote(format!(
                    "unit {unit_id} is still waiting for a worker: {reason}"
                )))
            }
        }
    }
}

impl Dispatcher {
    /// Withdraws the units the run left queued (a unit whose workers all
    /// died, or those of a run stopped by Ctrl-C), so that no worker runs
    /// them for nobody. Waits at most 5 seconds for the server.
    pub fn withdraw_queued(&self) {
        let subject = self.units_subject();
        let withdrawn = self.runtime.block_on(async {
            tokio::time::timeout(
                Duration::from_secs(5),
                self.connection.withdraw_units(&subject),
            )
            .await
        });
        match withdrawn {
            Ok(Ok(0)) => {}
            Ok(Ok(count)) => tracing::debug!("withdrew {count} queued unit(s) from {subject}"),
            Ok(Err(error)) => tracing::warn!("{error}"),
            Err(_) => tracing::warn!("withdrawing the units on {subject}: no answer within 5 s"),
        }
    }
}

impl Dispatcher {
    /// Removes what the run left on the server once it finished and wrote
    /// its files: its results subject and its replay states (copied into
    /// the run directory). Says on stderr what was removed; what cannot be
    /// removed is a warning (the server drops it after
    /// [`crate::transport::RESULTS_MAX_AGE`]).
    pub fn finish(&self) {
        let removed = self.runtime.block_on(async {
            tokio::time::timeout(
                Duration::from_secs(30),
                crate::storage::purge_run(&self.connection, &self.run_id),
            )
            .await
        });
        match removed {
            Ok(Ok(removed)) => tracing::info!(
                "run {} finished: removed {} from {}",
                self.run_id,
                removed.shown(),
                self.connection.url
            ),
            Ok(Err(error)) => tracing::warn!("{error}"),
            Err(_) => tracing::warn!(
                "removing run {}'s results from {}: no answer within 30 s (they expire after \
                 24 h; `sandloop nats purge --run {}` removes them)",
                self.run_id,
                self.connection.url,
                self.run_id
            ),
        }
    }
}

impl Drop for Dispatcher {
    fn drop(&mut self) {
        self.withdraw_queued();
    }
}

/// A queue lane of a distributed run: runs each unit on whichever worker
/// takes it, and writes the lines its calls left into the run's traces and
/// adapter output, and its replay points into the run's store.
pub struct RemoteLane {
    dispatcher: Arc<Dispatcher>,
    replay: Option<RemoteReplay>,
}

impl UnitRunner for RemoteLane {
    fn run_unit(
        &mut self,
        unit: &WorkUnit,
        ctx: &CallContext,
        policy: FailurePolicy,
        _clock: &dyn Clock,
    ) -> Result<Vec<UnitRecord>, UnitError> {
        let settings = self.replay.as_ref().map(|replay| replay.settings);
        let protocols = self.dispatcher.spec.protocols;
        let mut result = match self
            .dispatcher
            .run(unit, ctx, policy.is_fatal(), settings)?
        {
            Sent::Answered(result) => result,
            Sent::Abandoned => {
                let why = format!(
                    "a unit of {} started {} times on workers without a result (they died \
                     running it); see the workers' logs",
                    ctx.branch_id,
                    MAX_STARTS + 1
                );
                tracing::warn!("{why}");
                return lost_unit_records(unit, ctx, policy, protocols, why);
            }
            Sent::Unsendable(why) => {
                tracing::warn!("a unit of {}: {why}", ctx.branch_id);
                let error = AdapterError::new(ErrorType::InvalidItem, why);
                return unit_error_records(unit, ctx, policy, protocols, error);
            }
        };
        if let Some(log) = &self.dispatcher.call_log {
            for lines in &mut result.calls {
                let dropped = keep_json_objects(lines);
                if dropped > 0 {
                    tracing::warn!(
                        "unit {} on worker {}: dropped {dropped} trace or output line(s) that \
                         are not one JSON object each",
                        result.unit_id,
                        result.worker
                    );
                }
                log.write_lines(lines);
            }
        }
        if let (Some(replay), Some(shipment)) = (&self.replay, result.replay.take()) {
            let dispatcher = &self.dispatcher;
            replay.receive(
                &dispatcher.runtime,
                &dispatcher.connection,
                &dispatcher.run_id,
                &result.unit_id,
                shipment,
                |bytes| lock(&dispatcher.ledger).received(bytes),
            );
        }
        let remote = |message: String| {
            UnitError::Remote(format!(
                "unit {} on worker {}: {message}",
                result.unit_id, result.worker
            ))
        };
        match result.outcome {
            Outcome::Records { records } => Ok(records.into_iter().map(UnitRecord::from).collect()),
            Outcome::Fatal { error, cause } => {
                let error = error.into_adapter_error().map_err(remote)?;
                let fatal = match cause {
                    Some(cause) => {
                        FatalError::chained(error, cause.into_adapter_error().map_err(remote)?)
                    }
                    None => FatalError::new(error),
                };
                Err(UnitError::Fatal(fatal.at(|| unit.place())))
            }
            Outcome::Failed { reason } => Err(remote(reason)),
            Outcome::TooLarge { reason } => {
                tracing::warn!(
                    "unit {} on worker {}: {reason}",
                    result.unit_id,
                    result.worker
                );
                let error = AdapterError::new(ErrorType::OutputTooLarge, reason);
                unit_error_records(unit, ctx, policy, protocols, error)
            }
            // Never handed to a lane: `route` counts starts.
            Outcome::Started => Err(remote("a start notice where a result belongs".into())),
        }
    }
}

/// Keeps of `lines` (a worker's, untrusted) only the trace and output lines
/// that are one JSON object each on one line, as the run's files hold them;
/// returns how many it dropped. Checked without building the objects.
fn keep_json_objects(lines: &mut CallLines) -> usize {
    let one_object = |line: &str| {
        !line.contains(['\n', '\r'])
            && line.trim_start().starts_with('{')
            && serde_json::from_str::<serde::de::IgnoredAny>(line).is_ok()
    };
    let before = lines.traces.len();
    lines.traces.retain(|line| one_object(line));
    let mut dropped = before - lines.traces.len();
    if lines
        .output
        .as_deref()
        .is_some_and(|line| !one_object(line))
    {
        lines.output = None;
        dropped += 1;
    }
    dropped
}

/// The body of `unit`, a stored group's items read from its file.
fn body_of(unit: &WorkUnit) -> Result<UnitBody, UnitError> {
    Ok(match unit {
        WorkUnit::Episode(unit) => UnitBody::of(unit),
        WorkUnit::Stored(group) => UnitBody::of(&load_stored(group)?),
        WorkUnit::Standalone(item) => UnitBody::standalone(item),
    })
}

/// Creates the streams, stores the component, and starts routing results
/// to the ledger (withdrawing the units it gives up). Returns the
/// component's sha256.
async fn prepare(
    connection: &Connection,
    spec: &RunSpec,
    results_subject: &str,
    ledger: &SharedLedger,
    failure: &Arc<Mutex<Option<String>>>,
) -> Result<String, TransportError> {
    connection.prepare_storage().await?;
    connection.workers_consumer().await?;
    let results = connection.results_stream().await?;
    let (sha256, sent) = connection.put_component(&spec.component).await?;
    lock(ledger).sent(sent);
    let consumer = results
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            filter_subject: results_subject.to_owned(),
            ack_policy: async_nats::jetstream::consumer::AckPolicy::Explicit,
            inactive_threshold: Duration::from_secs(300),
            ..Default::default()
        })
        .await
        .map_err(|error| TransportError::new(format!("reading {results_subject}"), error))?;
    let mut messages = consumer
        .messages()
        .await
        .map_err(|error| TransportError::new(format!("reading {results_subject}"), error))?;
    let (routing, failing) = (Arc::clone(ledger), Arc::clone(failure));
    let withdrawing = connection.clone();
    let shown = connection.url.clone();
    tokio::spawn(async move {
        while let Some(message) = messages.next().await {
            let message = match message {
                Ok(message) => message,
                Err(error) => {
                    tracing::warn!("reading results on {shown}: {error}");
                    continue;
                }
            };
            let _ = message.ack().await;
            if let Some(sequence) = route(&routing, &message.payload)
                && let Err(error) = withdrawing.delete_unit(sequence).await
            {
                tracing::warn!("{error}");
            }
        }
        *lock(&failing) = Some(format!("the results stream on {shown} ended"));
    });
    Ok(sha256)
}

/// Hands one result to the lane waiting for its unit (once).
///
/// A unit starting on a worker is counted; past [`MAX_STARTS`] its lane is
/// told it was given up, and its stream sequence is returned, to withdraw
/// it.
fn route(ledger: &SharedLedger, payload: &[u8]) -> Option<u64> {
    let result: UnitResult = match decode("a unit result", payload) {
        Ok(result) => result,
        Err(error) => {
            tracing::warn!("{error}");
            return None;
        }
    };
    if result.outcome == Outcome::Started {
        let (sequence, waiter) = {
            let mut ledger = lock(ledger);
            // A worker that dies on the unit was seen all the same.
            ledger.saw_worker(&result.worker);
            ledger.started(&result.unit_id)?
        };
        tracing::warn!(
            "unit {} started {} times without a result; giving it up",
            result.unit_id,
            MAX_STARTS + 1
        );
        let _ = waiter.send(Delivery::Abandoned);
        return Some(sequence);
    }
    let settled = lock(ledger).settle(&result.unit_id, &result.worker, payload.len() as u64);
    match settled {
        Settled::First(waiter) => {
            let _ = waiter.send(Delivery::Result(Box::new(result)));
        }
        Settled::Duplicate => tracing::info!(
            "unit {} ran again on {} (delivery {}); its first result stands",
            result.unit_id,
            result.worker,
            result.attempt
        ),
        Settled::Unknown => {}
    }
    None
}

/// Asks the connected workers who they are until one offers every guest
/// path the run needs, or [`RunSpec::worker_wait`] passes.
async fn roll_call(connection: &Connection, spec: &RunSpec) -> Result<Vec<WorkerHello>, String> {
    let deadline = Instant::now() + spec.worker_wait;
    loop {
        let hellos = gather_hellos(connection).await?;
        if hellos
            .iter()
            .any(|hello| hello.meets(&spec.needs, &spec.env))
        {
            return Ok(hellos);
        }
        if !hellos.is_empty() {
            return Err(unmet(&hellos, &spec.needs, &spec.env));
        }
        if Instant::now() >= deadline {
            // No answer from a server this client is not connected to says
            // nothing about the workers: name the server instead.
            if connection.client.connection_state() != async_nats::connection::State::Connected {
                return Err(format!(
                    "lost the connection to the NATS server at {} and could not reach it again \
                     within {} s: no worker could be asked (is the server running?)",
                    connection.url,
                    spec.worker_wait.as_secs()
                ));
            }
            return Err(format!(
                "no sandloop worker answered on {} within {} s; start one with `sandloop worker \
                 --nats {}`",
                connection.url,
                spec.worker_wait.as_secs(),
                connection.url
            ));
        }
    }
}

/// One roll call: the answers of the workers connected to `connection`'s
/// server within 0.7 s.
///
/// # Errors
/// The call cannot be sent.
pub(crate) async fn gather_hellos(connection: &Connection) -> Result<Vec<WorkerHello>, String> {
    let client = &connection.client;
    let inbox = client.new_inbox();
    let mut answers = client
        .subscribe(inbox.clone())
        .await
        .map_err(|error| format!("roll call on {}: {error}", connection.url))?;
    client
        .publish_with_reply(ROLL_CALL_SUBJECT, inbox, bytes::Bytes::new())
        .await
        .map_err(|error| format!("roll call on {}: {error}", connection.url))?;
    let mut hellos: Vec<WorkerHello> = Vec::new();
    let window = tokio::time::sleep(Duration::from_millis(700));
    tokio::pin!(window);
    loop {
        tokio::select! {
            _ = &mut window => break,
            answer = answers.next() => match answer {
                // The server's "no responders" notice: nobody answered.
                Some(answer) if answer.payload.is_empty() => {}
                Some(answer) => match decode::<WorkerHello>("a worker's answer", &answer.payload) {
                    Ok(hello) => hellos.push(hello),
                    Err(error) => tracing::warn!("{error}"),
                },
                None => break,
            },
        }
    }
    Ok(hellos)
}

/// Counts the workers that answered a roll call as seen.
fn note_workers(ledger: &SharedLedger, hellos: &[WorkerHello]) {
    let mut ledger = lock(ledger);
    for hello in hellos {
        ledger.saw_worker(&hello.worker);
    }
}

/// Why none of the workers that answered can run the run's units.
fn unmet(hellos: &[WorkerHello], needs: &[GuestNeed], env: &[String]) -> String {
    let offers = hellos
        .iter()
        .map(|hello| {
            format!(
                "{} offers {}",
                hello.worker,
                shown_offers(&hello.offers, &hello.env)
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    format!(
        "no connected worker offers the guest paths and environment variables this run's units \
         need ({}): {offers}; start a worker with --dir HOST::GUEST for each path and --env NAME \
         for each variable",
        shown_offers(needs, env)
    )
}

/// A run id unique enough across coordinators: the clock's nanoseconds and
/// this process's id, in hex (subject-safe).
fn new_run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or(0);
    format!("{nanos:x}{:x}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lines_that_are_one_json_object_each_reach_the_run_files() {
        let mut lines = CallLines {
            epoch: 1,
            traces: vec![
                r#"{"event_id":"a"}"#.into(),
                "{\"a\":1}\n{\"injected\":\"line\"}".into(),
                "not json".into(),
                "[1, 2]".into(),
                r#"{"event_id":"b"}"#.into(),
            ],
            output: Some("{\"call\":\"x\"}\r".into()),
        };
        assert_eq!(keep_json_objects(&mut lines), 4);
        assert_eq!(lines.traces, [r#"{"event_id":"a"}"#, r#"{"event_id":"b"}"#]);
        assert_eq!(lines.output, None);
        let mut honest = CallLines {
            epoch: 1,
            traces: vec![],
            output: Some(r#"{"call":"execute"}"#.into()),
        };
        assert_eq!(keep_json_objects(&mut honest), 0);
        assert!(honest.output.is_some());
    }

    #[test]
    fn unmet_needs_name_what_each_worker_offers() {
        let need = GuestNeed::new;
        let hellos = [
            WorkerHello {
                version: WIRE_VERSION,
                worker: "w1".into(),
                lanes: 1,
                offers: vec![],
                env: vec![],
            },
            WorkerHello {
                version: WIRE_VERSION,
                worker: "w2".into(),
                lanes: 2,
                offers: vec![need("/docs", true)],
                env: vec!["HOME".into()],
            },
        ];
        let message = unmet(&hellos, &[need("/docs", false)], &["TOKEN".into()]);
        assert!(message.contains("(/docs, $TOKEN)"), "{message}");
        assert!(message.contains("w1 offers no directories"), "{message}");
        assert!(message.contains("w2 offers /docs:ro, $HOME"), "{message}");
    }
}
