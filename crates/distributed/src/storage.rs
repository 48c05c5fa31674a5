//! What distributed runs keep on the NATS server, for operators: the
//! figures of each stream and bucket ([`status`], `sandloop nats status`)
//! and removing one run's messages ([`purge_run`]) or those of runs older
//! than a duration ([`purge_older_than`]), `sandloop nats purge`.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::context::GetStreamErrorKind;
use futures_util::StreamExt;

use crate::points::state_prefix;
use crate::transport::{
    COMPONENTS_BUCKET, Connection, RESULTS_PREFIX, RESULTS_STREAM, STATES_BUCKET, TransportError,
    UNITS_PREFIX, UNITS_STREAM, bucket_stream,
};

/// The figures of one stream or bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreFigures {
    /// The stream's or bucket's name.
    pub name: String,
    /// `stream` or `object store`.
    pub kind: &'static str,
    /// False when nothing created it yet (every figure is then 0).
    pub exists: bool,
    /// Messages held (a bucket's objects take a message per chunk and one
    /// for their description).
    pub messages: u64,
    /// Bytes held.
    pub bytes: u64,
    /// The byte limit; `None` when unbounded.
    pub max_bytes: Option<u64>,
    /// How long a message is kept; `None` when for ever.
    pub max_age: Option<Duration>,
    /// Messages (streams) or objects (the replay states bucket) per run id.
    pub runs: BTreeMap<String, u64>,
}

/// What [`purge_run`] or [`purge_older_than`] removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Removed {
    /// Queued units removed from [`UNITS_STREAM`].
    pub units: u64,
    /// Results and start notices removed from [`RESULTS_STREAM`].
    pub results: u64,
    /// Objects removed from [`STATES_BUCKET`].
    pub states: u64,
    /// The runs they belonged to, where known.
    pub runs: Vec<String>,
}

impl Removed {
    /// `N queued unit(s) from SANDLOOP_UNITS, N result message(s) from
    /// SANDLOOP_RESULTS, N replay state object(s) from sandloop-replay-states`.
    pub fn shown(&self) -> String {
        format!(
            "{} queued unit(s) from {UNITS_STREAM}, {} result message(s) from \
             {RESULTS_STREAM}, {} replay state object(s) from {STATES_BUCKET}",
            self.units, self.results, self.states
        )
    }
}

/// The figures of the units and results streams and of the components and
/// states buckets on `connection`'s server; nothing is created.
///
/// # Errors
/// The server cannot be reached or does not answer JetStream requests.
pub async fn status(connection: &Connection) -> Result<Vec<StoreFigures>, TransportError> {
    let mut figures = Vec::new();
    for (name, prefix) in [
        (UNITS_STREAM, UNITS_PREFIX),
        (RESULTS_STREAM, RESULTS_PREFIX),
    ] {
        let mut store = stream_figures(connection, name, name, "stream").await?;
        if store.exists {
            store.runs = run_counts(connection, name, prefix).await?;
        }
        figures.push(store);
    }
    for bucket in [COMPONENTS_BUCKET, STATES_BUCKET] {
        let mut store =
            stream_figures(connection, &bucket_stream(bucket), bucket, "object store").await?;
        if store.exists && bucket == STATES_BUCKET {
            for name in object_names(connection, bucket).await? {
                if let Some((run, _)) = name.split_once('.') {
                    *store.runs.entry(run.to_owned()).or_default() += 1;
                }
            }
        }
        figures.push(store);
    }
    Ok(figures)
}

/// The figures of stream `stream`, shown as `name`.
async fn stream_figures(
    connection: &Connection,
    stream: &str,
    name: &str,
    kind: &'static str,
) -> Result<StoreFigures, TransportError> {
    let mut figures = StoreFigures {
        name: name.to_owned(),
        kind,
        exists: false,
        messages: 0,
        bytes: 0,
        max_bytes: None,
        max_age: None,
        runs: BTreeMap::new(),
    };
    let mut handle = match connection.jetstream.get_stream(stream).await {
        Ok(handle) => handle,
        Err(error)
            if matches!(
                error.kind(),
                GetStreamErrorKind::JetStream(inner)
                    if inner.error_code() == ErrorCode::STREAM_NOT_FOUND
            ) =>
        {
            return Ok(figures);
        }
        Err(error) => {
            return Err(failed(
                connection,
                format!("reading stream {stream}"),
                error,
            ));
        }
    };
    let info = handle
        .info()
        .await
        .map_err(|error| failed(connection, format!("reading stream {stream}"), error))?;
    figures.exists = true;
    figures.messages = info.state.messages;
    figures.bytes = info.state.bytes;
    figures.max_bytes = u64::try_from(info.config.max_bytes)
        .ok()
        .filter(|bytes| *bytes > 0);
    figures.max_age = Some(info.config.max_age).filter(|age| !age.is_zero());
    Ok(figures)
}

/// Messages per run id on `stream` (subjects `prefix.<run id>`).
async fn run_counts(
    connection: &Connection,
    stream: &str,
    prefix: &str,
) -> Result<BTreeMap<String, u64>, TransportError> {
    let context = || format!("counting the messages per run in {stream}");
    let handle = connection
        .jetstream
        .get_stream(stream)
        .await
        .map_err(|error| failed(connection, context(), error))?;
    let mut subjects = handle
        .info_with_subjects(format!("{prefix}.>"))
        .await
        .map_err(|error| failed(connection, context(), error))?;
    let mut counts = BTreeMap::new();
    while let Some(subject) = subjects.next().await {
        let (subject, count) = subject.map_err(|error| failed(connection, context(), error))?;
        if let Some(run) = subject.strip_prefix(&format!("{prefix}.")) {
            counts.insert(run.to_owned(), count as u64);
        }
    }
    Ok(counts)
}

/// The names of `bucket`'s objects (none when the bucket does not exist).
async fn object_names(
    connection: &Connection,
    bucket: &str,
) -> Result<Vec<String>, TransportError> {
    Ok(objects(connection, bucket)
        .await?
        .into_iter()
        .map(|(name, _)| name)
        .collect())
}

/// The names of `bucket`'s objects and when each was stored (seconds
/// since the Unix epoch); none when the bucket does not exist.
async fn objects(
    connection: &Connection,
    bucket: &str,
) -> Result<Vec<(String, i64)>, TransportError> {
    let Ok(store) = connection.jetstream.get_object_store(bucket).await else {
        return Ok(Vec::new());
    };
    let context = || format!("listing object store {bucket}");
    let mut list = match store.list().await {
        Ok(list) => list,
        // An empty bucket answers "no messages" rather than an empty list.
        Err(_) => return Ok(Vec::new()),
    };
    let mut names = Vec::new();
    while let Some(info) = list.next().await {
        let info = info.map_err(|error| failed(connection, context(), error))?;
        if !info.deleted {
            let stored = info.modified.map_or(0, |time| time.unix_timestamp());
            names.push((info.name, stored));
        }
    }
    Ok(names)
}

/// Checks that `run_id` names one run: letters, digits, `-` and `_`, as
/// `sandloop run --nats` makes them (`summary.json`'s `distributed.run_id`).
///
/// # Errors
/// What is wrong with it.
pub fn check_run_id(run_id: &str) -> Result<(), String> {
    if run_id.is_empty()
        || !run_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!(
            "--run {run_id:?}: not a run id (letters, digits, - and _; see summary.json's \
             distributed.run_id or `sandloop nats status`)"
        ));
    }
    Ok(())
}

/// Removes run `run_id`'s queued units, its results and start notices, and
/// its replay states from the server.
///
/// # Errors
/// A stream or bucket cannot be read or refuses the purge (what was
/// removed before stays removed).
pub async fn purge_run(connection: &Connection, run_id: &str) -> Result<Removed, TransportError> {
    let mut removed = Removed {
        runs: vec![run_id.to_owned()],
        ..Removed::default()
    };
    removed.units = purge_subject(connection, UNITS_STREAM, UNITS_PREFIX, run_id).await?;
    removed.results = purge_subject(connection, RESULTS_STREAM, RESULTS_PREFIX, run_id).await?;
    let prefix = state_prefix(run_id);
    let names: Vec<String> = object_names(connection, STATES_BUCKET)
        .await?
        .into_iter()
        .filter(|name| name.starts_with(&prefix))
        .collect();
    removed.states = delete_objects(connection, STATES_BUCKET, &names).await?;
    Ok(removed)
}

/// Removes the messages of every run whose newest message in a stream is
/// older than `age` (its queued units, its results), and the replay
/// states stored more than `age` ago.
///
/// # Errors
/// As [`purge_run`].
pub async fn purge_older_than(
    connection: &Connection,
    age: Duration,
) -> Result<Removed, TransportError> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs() as i64);
    let cutoff = now.saturating_sub(i64::try_from(age.as_secs()).unwrap_or(i64::MAX));
    let mut removed = Removed::default();
    for (stream, prefix) in [
        (UNITS_STREAM, UNITS_PREFIX),
        (RESULTS_STREAM, RESULTS_PREFIX),
    ] {
        let Ok(handle) = connection.jetstream.get_stream(stream).await else {
            continue;
        };
        for run in run_counts(connection, stream, prefix).await?.into_keys() {
            let subject = format!("{prefix}.{run}");
            let newest = handle
                .get_last_raw_message_by_subject(&subject)
                .await
                .map(|message| message.time.unix_timestamp());
            // Gone meanwhile (a worker took the last unit): nothing to do.
            let Ok(newest) = newest else { continue };
            if newest >= cutoff {
                continue;
            }
            let purged = purge_subject(connection, stream, prefix, &run).await?;
            if stream == UNITS_STREAM {
                removed.units += purged;
            } else {
                removed.results += purged;
            }
            if !removed.runs.contains(&run) {
                removed.runs.push(run);
            }
        }
    }
    let old: Vec<String> = objects(connection, STATES_BUCKET)
        .await?
        .into_iter()
        .filter(|(_, stored)| *stored < cutoff)
        .map(|(name, _)| name)
        .collect();
    removed.states = delete_objects(connection, STATES_BUCKET, &old).await?;
    Ok(removed)
}

/// Purges subject `prefix.<run_id>` of `stream` (0 when the stream does
/// not exist); returns how many messages went.
async fn purge_subject(
    connection: &Connection,
    stream: &str,
    prefix: &str,
    run_id: &str,
) -> Result<u64, TransportError> {
    let Ok(handle) = connection.jetstream.get_stream(stream).await else {
        return Ok(0);
    };
    let subject = format!("{prefix}.{run_id}");
    let purged = handle.purge().filter(&subject).await.map_err(|error| {
        failed(
            connection,
            format!("purging {subject} from {stream}"),
            error,
        )
    })?;
    Ok(purged.purged)
}

/// Deletes `names` from `bucket`; returns how many went.
async fn delete_objects(
    connection: &Connection,
    bucket: &str,
    names: &[String],
) -> Result<u64, TransportError> {
    if names.is_empty() {
        return Ok(0);
    }
    let store = connection
        .jetstream
        .get_object_store(bucket)
        .await
        .map_err(|error| failed(connection, format!("opening object store {bucket}"), error))?;
    let mut deleted = 0;
    for name in names {
        store.delete(name).await.map_err(|error| {
            failed(
                connection,
                format!("deleting {name} from object store {bucket}"),
                error,
            )
        })?;
        deleted += 1;
    }
    Ok(deleted)
}

fn failed(
    connection: &Connection,
    context: String,
    error: impl std::fmt::Display,
) -> TransportError {
    TransportError::new(format!("{context} (on {})", connection.url), error)
}
