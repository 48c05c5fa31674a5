//! The NATS side of a distributed run: connecting (user and password in
//! the URL, `tls://`, a credentials file), the streams and the object store
//! both ends use, and the component's trip through the object store, keyed
//! and checked by its sha256.
//!
//! Layout (JetStream, all created on first use by either end):
//! - stream [`UNITS_STREAM`] (work-queue retention) on
//!   `sandloop.units.<run id>` ([`UNITS_PREFIX`]; a run withdraws what it
//!   left there when it stops, [`Connection::withdraw_units`]),
//!   read by the one durable pull consumer [`WORKERS_CONSUMER`] every
//!   worker shares: each unit goes to one worker, and is redelivered after
//!   [`ACK_WAIT`] without an ack (a worker sends progress while it runs a
//!   unit), at once after a worker lacking its grants handed it back (that
//!   worker then pulls again only after a pause), or [`HAND_BACK_DELAY`]
//!   after one that could not fetch the component; the coordinator bounds how often a unit may start
//!   (`ledger::MAX_STARTS`);
//! - stream [`RESULTS_STREAM`] on `sandloop.results.<run id>`: what workers
//!   send back, purged by the coordinator once a run finished and wrote its
//!   files, else kept for [`RESULTS_MAX_AGE`] (the oldest dropped first past
//!   [`RESULTS_MAX_BYTES`]);
//! - object store bucket [`COMPONENTS_BUCKET`]: components by sha256 (at
//!   most [`COMPONENTS_MAX_BYTES`]);
//! - object store bucket [`STATES_BUCKET`]: the durable states (and items)
//!   of replay points workers captured, named `<run id>.<sha256>`, deleted
//!   by the coordinator once copied into a finished run's directory, else
//!   kept for [`RESULTS_MAX_AGE`] (at most [`STATES_MAX_BYTES`]);
//! - core subject [`ROLL_CALL_SUBJECT`]: workers answer who they are and
//!   which guest paths they offer.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, object_store, stream};
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;

/// The work-queue stream of units.
pub const UNITS_STREAM: &str = "SANDLOOP_UNITS";
/// Units of run `R` are published on `sandloop.units.R`.
pub const UNITS_PREFIX: &str = "sandloop.units";
/// The durable pull consumer all workers share.
pub const WORKERS_CONSUMER: &str = "sandloop-workers";
/// The stream of results.
pub const RESULTS_STREAM: &str = "SANDLOOP_RESULTS";
/// Results of run `R` are published on `sandloop.results.R`.
pub const RESULTS_PREFIX: &str = "sandloop.results";
/// The object store bucket of components.
pub const COMPONENTS_BUCKET: &str = "sandloop-components";
/// The object store bucket of replay points' states and items.
pub const STATES_BUCKET: &str = "sandloop-replay-states";
/// Where the coordinator asks which workers are connected.
pub const ROLL_CALL_SUBJECT: &str = "sandloop.workers.roll-call";
/// How long a delivered unit may go without an ack or progress before it
/// is delivered again (a worker sends progress every third of it while a
/// unit runs, so only a dead or stuck worker's unit goes elsewhere).
pub const ACK_WAIT: Duration = Duration::from_secs(10);
/// How long a unit handed back by a worker that could not get ready for
/// it just now (the component could not be fetched, its disk failed)
/// waits before it is offered again. Hand-backs are not bounded.
pub const HAND_BACK_DELAY: Duration = Duration::from_secs(1);
/// How long results stay in [`RESULTS_STREAM`] (and replay states in
/// [`STATES_BUCKET`]) when no finished run removed them.
pub const RESULTS_MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// One GiB, in bytes.
const GIB: i64 = 1 << 30;
/// Most bytes [`UNITS_STREAM`] holds (1 GiB); past it a new unit is
/// refused (the run stops saying so) rather than a queued one dropped.
pub const UNITS_MAX_BYTES: i64 = GIB;
/// Most bytes [`RESULTS_STREAM`] holds (4 GiB); past it the oldest results
/// are dropped.
pub const RESULTS_MAX_BYTES: i64 = 4 * GIB;
/// Most bytes [`COMPONENTS_BUCKET`] holds (1 GiB); past it storing a new
/// component fails, naming the bucket.
pub const COMPONENTS_MAX_BYTES: i64 = GIB;
/// Most bytes [`STATES_BUCKET`] holds (4 GiB); past it storing a state
/// fails and its unit is handed back until room is made.
pub const STATES_MAX_BYTES: i64 = 4 * GIB;
/// The longest a publish whose ack does not come (a server restarting, a
/// network gone for a while) is tried again before it fails.
pub const PUBLISH_RETRY_LIMIT: Duration = Duration::from_secs(120);

/// Where and how to connect: `--nats URL` (`nats://user:pass@host:4222`,
/// `tls://host:4222`, several separated by commas) and `--nats-creds FILE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatsTarget {
    /// The server URL(s), as given.
    pub url: String,
    /// A NATS credentials file (nkey seed and user JWT).
    pub creds: Option<PathBuf>,
}

/// A transport failure, naming what was being done.
#[derive(Debug, thiserror::Error)]
#[error("{context}: {message}")]
pub struct TransportError {
    /// What was being done (`connecting to nats://...`, `creating stream ...`).
    pub context: String,
    /// The client's error.
    pub message: String,
}

impl TransportError {
    /// `context` failed with `error`.
    pub fn new(context: impl Into<String>, error: impl std::fmt::Display) -> Self {
        Self {
            context: context.into(),
            message: error.to_string(),
        }
    }
}

/// Why a component could not be had from the object store.
#[derive(Debug, thiserror::Error)]
pub enum ComponentError {
    /// The store could not be read (the server, the network): a later try
    /// may work.
    #[error(transparent)]
    Unavailable(#[from] TransportError),
    /// The stored bytes do not hash to their name: never run.
    #[error("{0}")]
    Tampered(String),
}

/// A connection, with its JetStream context.
#[derive(Clone)]
pub struct Connection {
    /// The core client (roll call).
    pub client: async_nats::Client,
    /// JetStream.
    pub jetstream: jetstream::Context,
    /// The URL connected to, for messages.
    pub url: String,
}

/// The URL without its password, for messages.
pub fn shown_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let user = &url[scheme + 3..at];
            let user = user.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// Checks `url` as the NATS client reads it: `nats://`, `tls://`, `ws://`
/// or `wss://` (or a bare `HOST:PORT`), a host, and a port that fits.
///
/// # Errors
/// What is wrong, without the password.
pub fn check_url(url: &str) -> Result<(), String> {
    let fail = |why: String| {
        Err(format!(
            "--nats {}: {why}; give nats://HOST:4222 (tls:// and user:password@ work too)",
            shown_url(url)
        ))
    };
    if url.trim().is_empty() {
        return fail("no server given".into());
    }
    match url.parse::<async_nats::ServerAddr>() {
        Ok(address) if address.host().is_empty() => fail("no host".into()),
        Ok(_) => Ok(()),
        Err(error) => fail(error.to_string()),
    }
}

/// Credentials written in a `--nats` URL.
#[derive(Debug, PartialEq, Eq)]
enum UrlCredentials {
    /// `nats://USER:PASSWORD@HOST`.
    Password {
        /// The user.
        user: String,
        /// The password.
        password: String,
    },
    /// `nats://TOKEN@HOST`.
    Token(String),
}

/// The credentials of `url`, percent-decoded (the client itself does not
/// read them from the URL).
fn url_credentials(url: &str) -> Option<UrlCredentials> {
    let address = url.parse::<async_nats::ServerAddr>().ok()?;
    let decode = |text: &str| {
        percent_encoding::percent_decode_str(text)
            .decode_utf8_lossy()
            .into_owned()
    };
    let user = decode(address.username()?);
    Some(match address.password() {
        Some(password) => UrlCredentials::Password {
            user,
            password: decode(password),
        },
        None => UrlCredentials::Token(user),
    })
}

async fn connect_client(
    options: async_nats::ConnectOptions,
    name: &str,
    url: &str,
) -> Result<async_nats::Client, async_nats::ConnectError> {
    options
        .name(name)
        .connection_timeout(Duration::from_secs(10))
        .connect(url)
        .await
}

/// First pause before a worker tries a server again; doubled after each
/// try, up to [`CONNECT_RETRY_MAX`].
pub const CONNECT_RETRY_FIRST: Duration = Duration::from_millis(500);
/// Longest pause between two tries to reach a server.
pub const CONNECT_RETRY_MAX: Duration = Duration::from_secs(10);

/// Connects to `target` as `name` as [`connect`] does, trying again with
/// back-off (from [`CONNECT_RETRY_FIRST`] to [`CONNECT_RETRY_MAX`]) while
/// the server cannot be reached — not up yet, restarting, a network that
/// is not there yet — for up to `patience`, and saying on stderr each time
/// it will try again. Credentials that are refused or unreadable fail at
/// once; so does everything with a zero `patience` after one try.
///
/// # Errors
/// As [`connect`]; the last error once `patience` has run out.
pub async fn connect_patiently(
    target: &NatsTarget,
    name: &str,
    patience: Duration,
) -> Result<Connection, TransportError> {
    let started = std::time::Instant::now();
    let mut pause = CONNECT_RETRY_FIRST;
    loop {
        match try_connect(target, name).await {
            Ok(connection) => return Ok(connection),
            Err((error, unreachable)) => {
                let waited = started.elapsed();
                if !unreachable || waited + pause > patience {
                    return Err(error);
                }
                tracing::info!(
                    "{error}; trying again in {:.1}s (waited {}s of at most {}s, --connect-timeout)",
                    pause.as_secs_f64(),
                    waited.as_secs(),
                    patience.as_secs()
                );
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(CONNECT_RETRY_MAX);
            }
        }
    }
}

/// The client options for `target` (`shown`: its URL without secrets):
/// credentials from `--nats-creds` or the URL.
async fn connect_options(
    target: &NatsTarget,
    shown: &str,
) -> Result<async_nats::ConnectOptions, TransportError> {
    Ok(match (&target.creds, url_credentials(&target.url)) {
        (Some(path), None) => {
            // Read as an input file: a FIFO or device is refused at once
            // instead of blocking the command.
            let reading = || format!("reading --nats-creds {}", path.display());
            let creds = sandloop_core::input_file::read_regular_to_string(path)
                .map_err(|error| TransportError::new(reading(), error))?;
            async_nats::ConnectOptions::with_credentials(&creds)
                .map_err(|error| TransportError::new(reading(), error))?
        }
        (Some(_), Some(_)) => {
            return Err(TransportError::new(
                format!("connecting to {shown}"),
                "give either a user in the URL or --nats-creds, not both",
            ));
        }
        (None, Some(UrlCredentials::Password { user, password })) => {
            async_nats::ConnectOptions::with_user_and_password(user, password)
        }
        (None, Some(UrlCredentials::Token(token))) => async_nats::ConnectOptions::with_token(token),
        (None, None) => async_nats::ConnectOptions::new(),
    })
}

/// Connects to `target` as `name`.
///
/// # Errors
/// An unreadable credentials file, or a server that cannot be reached or
/// refuses the credentials.
pub async fn connect(target: &NatsTarget, name: &str) -> Result<Connection, TransportError> {
    try_connect(target, name).await.map_err(|(error, _)| error)
}

/// [`connect`], telling apart a server that could not be reached (`true`:
/// a later try may work) from one that refused us or settings that are
/// wrong.
async fn try_connect(
    target: &NatsTarget,
    name: &str,
) -> Result<Connection, (TransportError, bool)> {
    use async_nats::ConnectErrorKind as Kind;
    let shown = shown_url(&target.url);
    let options = connect_options(target, &shown)
        .await
        .map_err(|error| (error, false))?;
    let client = connect_client(options, name, &target.url)
        .await
        .map_err(|error| {
            let unreachable = matches!(
                error.kind(),
                Kind::Io | Kind::TimedOut | Kind::Dns | Kind::MaxReconnects
            );
            (
                TransportError::new(format!("connecting to {shown}"), error),
                unreachable,
            )
        })?;
    let jetstream = jetstream::new(client.clone());
    Ok(Connection {
        client,
        jetstream,
        url: shown,
    })
}

impl Connection {
    /// The units stream (created when missing, bounded by
    /// [`UNITS_MAX_BYTES`]; one made without a byte bound gets it, as
    /// [`Connection::prepare_storage`] says).
    ///
    /// # Errors
    /// JetStream is not enabled on the server, or refuses the stream.
    pub async fn units_stream(&self) -> Result<stream::Stream, TransportError> {
        self.bounded_stream(stream::Config {
            name: UNITS_STREAM.into(),
            subjects: vec![format!("{UNITS_PREFIX}.>")],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            duplicate_window: Duration::from_secs(120),
            max_bytes: UNITS_MAX_BYTES,
            discard: stream::DiscardPolicy::New,
            ..Default::default()
        })
        .await
    }

    /// The stream `wanted` names, created with `wanted` when missing. One
    /// that exists without a byte bound (made by an earlier version) is
    /// given `wanted`'s `max_bytes` and discard policy, saying so on
    /// stderr; a bound an operator set is kept. A bound that cannot be set
    /// is a warning naming the stream, not a failure.
    ///
    /// # Errors
    /// JetStream is not enabled on the server, or refuses the stream.
    async fn bounded_stream(
        &self,
        wanted: stream::Config,
    ) -> Result<stream::Stream, TransportError> {
        let name = wanted.name.clone();
        let stream = self
            .jetstream
            .get_or_create_stream(wanted.clone())
            .await
            .map_err(|error| {
                self.error(
                    format!(
                        "creating stream {name} (is JetStream enabled? start the server with \
                         `nats-server -js`)"
                    ),
                    error,
                )
            })?;
        let current = &stream.cached_info().config;
        if current.max_bytes > 0 || wanted.max_bytes <= 0 {
            return Ok(stream);
        }
        let mut bounded = current.clone();
        bounded.max_bytes = wanted.max_bytes;
        bounded.discard = wanted.discard;
        match self.jetstream.update_stream(&bounded).await {
            Ok(_) => tracing::info!(
                "stream {name} on {} had no byte limit: it now keeps at most {} MiB",
                self.url,
                wanted.max_bytes >> 20
            ),
            Err(error) => tracing::warn!(
                "stream {name} on {} has no byte limit and cannot be given one ({error}); set \
                 one with `nats stream edit {name} --max-bytes SIZE`",
                self.url
            ),
        }
        Ok(stream)
    }

    /// Removes the units still queued on `subject` (a run that stopped
    /// withdraws what no worker needs to run any more); returns how many.
    ///
    /// # Errors
    /// The stream cannot be reached or refuses the purge.
    pub async fn withdraw_units(&self, subject: &str) -> Result<u64, TransportError> {
        let stream = self.units_stream().await?;
        let purged =
            stream.purge().filter(subject).await.map_err(|error| {
                self.error(format!("withdrawing the units on {subject}"), error)
            })?;
        Ok(purged.purged)
    }

    /// Deletes the unit at `sequence` from the units stream (a unit given
    /// up), so that no worker starts it again.
    ///
    /// # Errors
    /// The stream cannot be reached or refuses the deletion.
    pub async fn delete_unit(&self, sequence: u64) -> Result<(), TransportError> {
        let stream = self.units_stream().await?;
        stream
            .delete_message(sequence)
            .await
            .map(|_| ())
            .map_err(|error| {
                self.error(
                    format!("deleting unit {sequence} from {UNITS_STREAM}"),
                    error,
                )
            })
    }

    /// The workers' shared pull consumer of the units stream.
    ///
    /// # Errors
    /// As [`Connection::units_stream`].
    pub async fn workers_consumer(
        &self,
    ) -> Result<consumer::Consumer<consumer::pull::Config>, TransportError> {
        let stream = self.units_stream().await?;
        stream
            .get_or_create_consumer(
                WORKERS_CONSUMER,
                consumer::pull::Config {
                    durable_name: Some(WORKERS_CONSUMER.into()),
                    ack_policy: consumer::AckPolicy::Explicit,
                    ack_wait: ACK_WAIT,
                    // Unbounded: the coordinator bounds the starts.
                    max_deliver: -1,
                    ..Default::default()
                },
            )
            .await
            .map_err(|error| self.error(format!("creating consumer {WORKERS_CONSUMER}"), error))
    }

    /// The results stream (created when missing, bounded by
    /// [`RESULTS_MAX_BYTES`], the oldest dropped first).
    ///
    /// # Errors
    /// As [`Connection::units_stream`].
    pub async fn results_stream(&self) -> Result<stream::Stream, TransportError> {
        self.bounded_stream(stream::Config {
            name: RESULTS_STREAM.into(),
            subjects: vec![format!("{RESULTS_PREFIX}.>")],
            storage: stream::StorageType::File,
            max_age: RESULTS_MAX_AGE,
            max_bytes: RESULTS_MAX_BYTES,
            duplicate_window: Duration::from_secs(120),
            discard: stream::DiscardPolicy::Old,
            ..Default::default()
        })
        .await
    }

    /// The object store `bucket`, created on first use: the states bucket
    /// with [`RESULTS_MAX_AGE`] and [`STATES_MAX_BYTES`], the components
    /// bucket with [`COMPONENTS_MAX_BYTES`].
    async fn bucket(&self, bucket: &str) -> Result<object_store::ObjectStore, TransportError> {
        if let Ok(store) = self.jetstream.get_object_store(bucket).await {
            return Ok(store);
        }
        let (max_age, max_bytes) = bucket_limits(bucket);
        self.jetstream
            .create_object_store(object_store::Config {
                bucket: bucket.into(),
                max_age,
                max_bytes,
                ..Default::default()
            })
            .await
            .map_err(|error| self.error(format!("creating object store {bucket}"), error))
    }

    /// Creates the streams and buckets both ends use, and gives those that
    /// exist without a byte bound (made by an earlier version) theirs,
    /// saying so on stderr; a bound an operator set is kept, and one that
    /// cannot be set is a warning naming the stream, not a failure.
    ///
    /// # Errors
    /// JetStream is not enabled on the server, or refuses a stream or
    /// bucket.
    pub async fn prepare_storage(&self) -> Result<(), TransportError> {
        self.units_stream().await?;
        self.results_stream().await?;
        for bucket in [COMPONENTS_BUCKET, STATES_BUCKET] {
            self.bucket(bucket).await?;
            let (max_age, max_bytes) = bucket_limits(bucket);
            self.bounded_stream(stream::Config {
                name: bucket_stream(bucket),
                max_age,
                max_bytes,
                discard: stream::DiscardPolicy::New,
                ..Default::default()
            })
            .await?;
        }
        Ok(())
    }

    /// Publishes `payload` on `subject` with `headers` and waits for
    /// JetStream to store it. While the ack does not come or the server
    /// cannot be reached (it restarts, the network is gone for a while),
    /// the publish is tried again — with back-off from 0.5 s to 5 s and a
    /// line on stderr each time — for up to [`PUBLISH_RETRY_LIMIT`]; give
    /// `headers` a `Nats-Msg-Id` so that a message stored twice is kept
    /// once. `what` names the message for those lines and the error.
    ///
    /// # Errors
    /// The server refused the message (a full stream), or did not store it
    /// within [`PUBLISH_RETRY_LIMIT`].
    pub async fn publish_stored(
        &self,
        subject: &str,
        headers: async_nats::HeaderMap,
        payload: bytes::Bytes,
        what: &str,
    ) -> Result<jetstream::publish::PublishAck, TransportError> {
        use jetstream::context::PublishErrorKind as Kind;
        let started = std::time::Instant::now();
        let mut pause = CONNECT_RETRY_FIRST;
        loop {
            let attempt = async {
                self.jetstream
                    .publish_with_headers(subject.to_owned(), headers.clone(), payload.clone())
                    .await?
                    .await
            };
            match attempt.await {
                Ok(ack) => return Ok(ack),
                Err(error)
                    if matches!(
                        error.kind(),
                        Kind::TimedOut | Kind::BrokenPipe | Kind::StreamNotFound
                    ) && started.elapsed() + pause <= PUBLISH_RETRY_LIMIT =>
                {
                    tracing::warn!(
                        "{what} on {}: {error}; trying again in {:.1}s (for at most {} s while \
                         the server cannot be reached)",
                        self.url,
                        pause.as_secs_f64(),
                        PUBLISH_RETRY_LIMIT.as_secs()
                    );
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(5));
                }
                Err(error) => {
                    let waited = started.elapsed().as_secs();
                    let context = if waited > 0 {
                        format!("{what} (tried for {waited} s)")
                    } else {
                        what.to_owned()
                    };
                    return Err(self.error(context, error));
                }
            }
        }
    }

    /// Stores `bytes` in `bucket` as `prefix` followed by their sha256
    /// (lowercase hex, returned) unless an object of that name with those
    /// bytes is there already. Returns the digest and the bytes sent (0
    /// when already stored).
    ///
    /// # Errors
    /// The object store cannot be created or written (a full bucket among
    /// others).
    pub async fn put_by_digest(
        &self,
        bucket: &str,
        prefix: &str,
        bytes: &[u8],
    ) -> Result<(String, u64), TransportError> {
        let sha256 = sha256_hex(bytes);
        let name = format!("{prefix}{sha256}");
        let store = self.bucket(bucket).await?;
        if let Ok(info) = store.info(&name).await
            && info.size == bytes.len()
            && let Ok(existing) = self.read_object(&store, bucket, &name).await
            && sha256_hex(&existing) == sha256
        {
            return Ok((sha256, 0));
        }
        let mut reader = bytes;
        store
            .put(name.as_str(), &mut reader)
            .await
            .map_err(|error| {
                self.error(
                    format!(
                        "storing {name} in object store {bucket} (full? see `sandloop nats status`)"
                    ),
                    error,
                )
            })?;
        Ok((sha256, bytes.len() as u64))
    }

    /// The object of `bucket` stored as `prefix` followed by `sha256`,
    /// refused unless its bytes hash to `sha256`.
    ///
    /// # Errors
    /// [`ComponentError::Unavailable`] when it is missing or cannot be read;
    /// [`ComponentError::Tampered`] when its digest differs.
    pub async fn get_by_digest(
        &self,
        bucket: &str,
        prefix: &str,
        sha256: &str,
    ) -> Result<Vec<u8>, ComponentError> {
        let store = self.bucket(bucket).await?;
        let name = format!("{prefix}{sha256}");
        let bytes = self.read_object(&store, bucket, &name).await?;
        let found = sha256_hex(&bytes);
        if found != sha256 {
            let (kind, refusal) = if bucket == COMPONENTS_BUCKET {
                ("component", "refusing to run a tampered component")
            } else {
                ("object", "refusing a tampered object")
            };
            return Err(ComponentError::Tampered(format!(
                "{kind} {sha256} in object store {bucket} (on {}): its bytes hash to {found}, not \
                 to its name: {refusal}",
                self.url
            )));
        }
        Ok(bytes)
    }

    /// Stores the component (see [`Connection::put_by_digest`]).
    ///
    /// # Errors
    /// The object store cannot be created or written.
    pub async fn put_component(&self, bytes: &[u8]) -> Result<(String, u64), TransportError> {
        self.put_by_digest(COMPONENTS_BUCKET, "", bytes).await
    }

    /// The component stored under `sha256`, refused unless its bytes hash
    /// to that name.
    ///
    /// # Errors
    /// As [`Connection::get_by_digest`].
    pub async fn get_component(&self, sha256: &str) -> Result<Vec<u8>, ComponentError> {
        self.get_by_digest(COMPONENTS_BUCKET, "", sha256).await
    }

    async fn read_object(
        &self,
        store: &object_store::ObjectStore,
        bucket: &str,
        name: &str,
    ) -> Result<Vec<u8>, TransportError> {
        let context = || format!("reading {name} from object store {bucket}");
        let mut object = store
            .get(name)
            .await
            .map_err(|error| self.error(context(), error))?;
        let mut bytes = Vec::new();
        object
            .read_to_end(&mut bytes)
            .await
            .map_err(|error| self.error(context(), error))?;
        Ok(bytes)
    }

    fn error(&self, context: String, error: impl std::fmt::Display) -> TransportError {
        TransportError::new(format!("{} (on {})", context, self.url), error)
    }
}

/// The age and byte limits `bucket` is created with.
fn bucket_limits(bucket: &str) -> (Duration, i64) {
    if bucket == STATES_BUCKET {
        (RESULTS_MAX_AGE, STATES_MAX_BYTES)
    } else {
        (Duration::ZERO, COMPONENTS_MAX_BYTES)
    }
}

/// The stream that holds object store `bucket`'s objects.
pub fn bucket_stream(bucket: &str) -> String {
    format!("OBJ_{bucket}")
}

/// The lowercase hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A tokio runtime driven by its own thread, so that blocking code (queue
/// lanes, worker lanes) can wait on NATS with [`Runtime::block_on`] from any
/// thread.
pub struct Runtime {
    handle: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    driver: Option<std::thread::JoinHandle<()>>,
}

impl Runtime {
    /// Starts the runtime's thread.
    ///
    /// # Errors
    /// The runtime or its thread cannot be created.
    pub fn start() -> std::io::Result<Arc<Self>> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let driver = std::thread::Builder::new()
            .name("sandloop-nats".into())
            .spawn(move || {
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })?;
        Ok(Arc::new(Self {
            handle,
            stop: Some(stop),
            driver: Some(driver),
        }))
    }

    /// Runs `future` to completion on the runtime, blocking this thread
    /// (which must not be the runtime's own).
    pub fn block_on<F: std::future::Future + Send>(&self, future: F) -> F::Output
    where
        F::Output: Send,
    {
        self.handle.block_on(future)
    }

    /// The runtime's handle, to spawn tasks.
    pub fn handle(&self) -> &tokio::runtime::Handle {
        &self.handle
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(driver) = self.driver.take() {
            let _ = driver.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_the_url_are_read_and_decoded() {
        assert_eq!(url_credentials("nats://127.0.0.1:4222"), None);
        assert_eq!(
            url_credentials("nats://team-a:p%40ss%3Aword@nats.example:4222"),
            Some(UrlCredentials::Password {
                user: "team-a".into(),
                password: "p@ss:word".into()
            })
        );
        assert_eq!(
            url_credentials("tls://s3cr3t@nats.example"),
            Some(UrlCredentials::Token("s3cr3t".into()))
        );
        assert_eq!(url_credentials("not a url"), None);
    }

    #[test]
    fn passwords_are_not_shown() {
        assert_eq!(
            shown_url("nats://alice:s3cret@host:4222"),
            "nats://alice:***@host:4222"
        );
        assert_eq!(shown_url("tls://host:4222"), "tls://host:4222");
    }

    #[test]
    fn digests_are_lowercase_hex_sha256() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
