//! Replay points across machines, both ends: a worker lane keeps the
//! points of the units it runs (`LaneReplay`: lines and metrics in
//! memory, durable states in a pack in a temporary directory) and ships
//! them with each unit's result, the states by digest through the object
//! store bucket [`STATES_BUCKET`] (named [`state_prefix`] and the digest,
//! so that a finished run removes its own and no other's); the coordinator
//! ([`RemoteReplay`]) fetches and checks them and writes them into its run
//! directory as a local run would.

use std::sync::Arc;
use std::time::Duration;

use sandloop_core::replay::ReplayMetricLedger;
use sandloop_core::replay::durable::{PointLine, ReplayStore};
use sandloop_sandbox::ReplayOptions;

use crate::transport::{ComponentError, Connection, Runtime, STATES_BUCKET};
use crate::wire::{ReplaySettings, ReplayShipment};

/// The replay points of a lane's units: their lines and metrics kept in
/// memory, their durable states in a temporary directory, until the unit's
/// result carries them to the coordinator.
pub(crate) struct LaneReplay {
    /// The names of this run's objects start with it ([`state_prefix`]).
    prefix: String,
    store: Arc<ReplayStore>,
    metrics: Arc<ReplayMetricLedger>,
    /// Holds the store's pack while the lane lives; removed with it.
    _dir: tempfile::TempDir,
}

impl LaneReplay {
    /// An empty lane's store, metrics and directory (made in the worker's
    /// `scratch` directory, [`crate::scratch::Scratch`]) for units of run
    /// `run_id` run under `settings`, with the options its adapter runs
    /// with (children forked by state).
    ///
    /// # Errors
    /// The directory cannot be made.
    pub(crate) fn new(
        run_id: &str,
        settings: ReplaySettings,
        scratch: &std::path::Path,
    ) -> std::io::Result<(Self, ReplayOptions)> {
        let dir = tempfile::Builder::new()
            .prefix("points-")
            .tempdir_in(scratch)?;
        let store = Arc::new(ReplayStore::capturing(dir.path()));
        let metrics = Arc::new(ReplayMetricLedger::new());
        let options = ReplayOptions {
            metrics: Arc::clone(&metrics),
            store: Some(Arc::clone(&store)),
            minimum_fidelity: settings.minimum_fidelity,
            child_workers: settings.child_workers,
            snapshots: None,
        };
        Ok((
            Self {
                prefix: state_prefix(run_id),
                store,
                metrics,
                _dir: dir,
            },
            options,
        ))
    }

    /// What the last unit left: its points' lines (their states and items
    /// stored by digest in [`STATES_BUCKET`], the lane's pack emptied), its
    /// metrics and its write errors.
    ///
    /// # Errors
    /// A state could not be read back or stored: the unit is handed back.
    pub(crate) fn ship(
        &self,
        runtime: &Runtime,
        connection: &Connection,
    ) -> Result<ReplayShipment, String> {
        // Taken first: a unit handed back leaves nothing to the next one.
        let metrics = self.metrics.take_totals();
        let errors = self.store.take_errors();
        let captured = self
            .store
            .take_captured_with_states()
            .map_err(|error| error.to_string())?;
        let mut points = Vec::with_capacity(captured.len());
        for point in captured {
            for bytes in point.files.iter().flat_map(|(state, items)| [state, items]) {
                runtime
                    .block_on(connection.put_by_digest(STATES_BUCKET, &self.prefix, bytes))
                    .map_err(|error| error.to_string())?;
            }
            points.push(point.line.to_record());
        }
        Ok(ReplayShipment {
            points,
            metrics,
            errors,
        })
    }
}

/// The replay points of a distributed run: how workers run them, and the
/// coordinator's store and metrics they end in.
#[derive(Clone)]
pub struct RemoteReplay {
    /// Sent with every unit.
    pub settings: ReplaySettings,
    /// The run directory's `replay-points.jsonl` and `replay-points/`.
    pub store: Arc<ReplayStore>,
    /// The run's replay metrics (`summary.json`'s `replay`).
    pub metrics: Arc<ReplayMetricLedger>,
}

impl RemoteReplay {
    /// Keeps what unit `unit`'s worker sent of its replay points: the
    /// metrics added, each point's state and items fetched from
    /// [`STATES_BUCKET`] on `connection` (checked against their digests,
    /// their bytes told to `count_received`) and written with its line.
    /// What cannot be kept (a damaged line, a state missing or tampered
    /// with) is a write error of the run's store, which stops the run at
    /// the end of the epoch; the unit's records stand.
    pub(crate) fn receive(
        &self,
        runtime: &Runtime,
        connection: &Connection,
        run_id: &str,
        unit: &str,
        shipment: ReplayShipment,
        count_received: impl Fn(u64),
    ) {
        let note = |error: String| {
            self.store.note_error(format!("unit {unit}: {error}"));
        };
        if let Err(error) = self.metrics.absorb(&shipment.metrics) {
            note(error);
        }
        for error in shipment.errors {
            note(format!("on the worker: {error}"));
        }
        for record in &shipment.points {
            let line = match PointLine::from_record(record) {
                Ok(line) => line,
                Err(error) => {
                    note(format!("a replay point line: {error}"));
                    continue;
                }
            };
            let files = match &line.durable_state {
                None => Ok(None),
                Some(durable) => runtime.block_on(async {
                    let prefix = state_prefix(run_id);
                    let state = fetch_state(connection, &prefix, &durable.sha256).await?;
                    let items = fetch_state(connection, &prefix, &durable.items_sha256).await?;
                    Ok::<_, ComponentError>(Some((state, items)))
                }),
            };
            if let Ok(Some((state, items))) = &files {
                count_received((state.len() + items.len()) as u64);
            }
            let received = match files {
                Ok(files) => self.store.receive_point(
                    &line,
                    files
                        .as_ref()
                        .map(|(state, items)| (state.as_slice(), items.as_slice())),
                ),
                Err(error) => Err(format!("point {}: {error}", line.point.replay_point_id)),
            };
            if let Err(error) = received {
                note(error);
            }
        }
    }
}

/// How the names of run `run_id`'s objects in [`STATES_BUCKET`] start:
/// `<run id>.`, then the object's sha256.
pub fn state_prefix(run_id: &str) -> String {
    format!("{run_id}.")
}

/// The object `prefix` + `sha256` of [`STATES_BUCKET`], tried up to three times while
/// it cannot be read (another worker storing the same bytes replaces the
/// object's chunks under a reader); a tampered object is refused at once.
async fn fetch_state(
    connection: &Connection,
    prefix: &str,
    sha256: &str,
) -> Result<Vec<u8>, ComponentError> {
    let mut tries = 0;
    loop {
        match connection
            .get_by_digest(STATES_BUCKET, prefix, sha256)
            .await
        {
            Err(ComponentError::Unavailable(_)) if tries < 2 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(200 * tries)).await;
            }
            fetched => return fetched,
        }
    }
}
