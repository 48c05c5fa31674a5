//! A finished run opened by a command that runs part of it again
//! (`sandloop replay`, `sandloop counterfactual`): [`FinishedRun`] holds
//! the run directory's lock for the command's life, what the run was
//! started with and its durable replay points; it finds an item's record,
//! plans the point to restore and reads the point's state, and opens the
//! log the command appends its result to ([`RunLog`]). Nothing here runs
//! anything: the sandbox loads the run's component and adopts the point.

use std::fs::File;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::OfflineError;
use super::offline::{
    ItemPosition, ReplayPlan, ReplaysFile, RunSource, append_line, find_record, plan_replay,
    run_source,
};
use crate::dir_lock::{DirLock, DirLockError, Holder, lock_dir};
use crate::episode::adapter::Item;
use crate::episode::units::GroupId;
use crate::replay::counterfactual::{AddressableTrace, read_addressable_trace};
use crate::replay::durable::{POINTS_FILE, PointLine, load_numbered_points, read_durable_state};
use crate::replay::fidelity::Fidelity;

/// A finished run, locked against every other sandloop process for as long
/// as this value lives (no run writes the directory meanwhile, and two
/// commands never interleave their lines).
pub struct FinishedRun {
    dir: PathBuf,
    source: RunSource,
    points: Vec<PointLine>,
    /// Each point's line in `replay-points.jsonl`, by id (1-based).
    line_numbers: std::collections::HashMap<String, usize>,
    _lock: DirLock,
}

impl FinishedRun {
    /// Lock the run directory `dir` for `command` (named in the refusal),
    /// then read its manifest and its replay points.
    ///
    /// # Errors
    /// [`OfflineError::Input`]: `dir` is not a directory, another process
    /// holds it (naming its pid and the command to run again), the manifest
    /// or `replay-points.jsonl` is missing or damaged.
    /// [`OfflineError::Io`]: the lock or a file could not be read.
    pub fn open(dir: &Path, command: &str) -> Result<Self, OfflineError> {
        if !dir.is_dir() {
            return Err(OfflineError::Input(format!(
                "{} is not a directory",
                dir.display()
            )));
        }
        let lock = lock_dir(dir).map_err(|error| match error {
            DirLockError::Held { holder, .. } => OfflineError::Input(format!(
                "{} is in use by another sandloop process ({}); run `sandloop {command}` again once it has finished",
                dir.display(),
                Holder(holder)
            )),
            other => OfflineError::Io(other.to_string()),
        })?;
        let source = run_source(dir)?;
        let numbered =
            load_numbered_points(dir).map_err(|error| OfflineError::Input(error.to_string()))?;
        let line_numbers = numbered
            .iter()
            .map(|(number, line)| (line.point.replay_point_id.clone(), *number))
            .collect();
        let points = numbered.into_iter().map(|(_, line)| line).collect();
        Ok(Self {
            dir: dir.to_owned(),
            source,
            points,
            line_numbers,
            _lock: lock,
        })
    }

    /// The run directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What the run's last invocation was started with.
    pub fn source(&self) -> &RunSource {
        &self.source
    }

    /// The run's replay points (`replay-points.jsonl`, the last line of
    /// each id winning).
    pub fn points(&self) -> &[PointLine] {
        &self.points
    }

    /// Where `item_id` last ran (in `epoch`, when given): see
    /// [`find_record`].
    ///
    /// # Errors
    /// As [`find_record`].
    pub fn find(&self, item_id: &str, epoch: Option<u32>) -> Result<ItemPosition, OfflineError> {
        find_record(&self.dir, item_id, epoch)
    }

    /// The events of `position`'s trace on its lineage: the item's own
    /// branch and, when it ran as a child, the branch of the point it was
    /// forked from (what a counterfactual hypothesis may address).
    ///
    /// # Errors
    /// [`OfflineError::Input`]: the item's group names no epoch, or the
    /// trace cannot be read.
    pub fn addressable_trace(
        &self,
        position: &ItemPosition,
    ) -> Result<AddressableTrace, OfflineError> {
        let epoch = position
            .execution_group_id
            .parse::<GroupId>()
            .map(|id| id.epoch)
            .map_err(|_| {
                OfflineError::Input(format!(
                    "the item's execution_group_id {:?} names no epoch",
                    position.execution_group_id
                ))
            })?;
        let mut branches = vec![position.branch_id.clone()];
        let parent = position
            .record
            .get("replay")
            .and_then(|replay| replay.get("replay_point_id"))
            .and_then(serde_json::Value::as_str)
            .and_then(|id| {
                self.points
                    .iter()
                    .find(|line| line.point.replay_point_id == id)
            });
        if let Some(parent) = parent
            && !branches.contains(&parent.point.cursor.branch_id)
        {
            branches.push(parent.point.cursor.branch_id.clone());
        }
        read_addressable_trace(&self.dir, epoch, &position.trace_id, branches)
            .map_err(OfflineError::Input)
    }

    /// The durable point to replay `position` from: see [`plan_replay`].
    ///
    /// # Errors
    /// Why no point qualifies, naming each point of the trace.
    pub fn plan(
        &self,
        position: &mut ItemPosition,
        from_sequence: Option<u64>,
        minimum: Fidelity,
    ) -> Result<ReplayPlan, String> {
        plan_replay(&self.points, position, from_sequence, minimum)
    }

    /// The state of `plan`'s point (its exported bytes, or its snapshot
    /// component) and the item `item_id` among the items it was saved
    /// with.
    ///
    /// # Errors
    /// The outer error: the state or items file is unreadable or does not
    /// match its recorded sha256 ([`OfflineError::Input`]). The inner one:
    /// the item is not among the point's items (the message, for the
    /// caller to name the field it came from).
    pub fn point_state(
        &self,
        plan: &ReplayPlan,
        item_id: &str,
    ) -> Result<Result<(Vec<u8>, Item), String>, OfflineError> {
        let (state, items) = read_durable_state(&self.dir, plan.state_file()).map_err(|error| {
            let id = &plan.line.point.replay_point_id;
            let place = match self.line_numbers.get(id) {
                Some(number) => format!("{POINTS_FILE} line {number}"),
                None => POINTS_FILE.to_owned(),
            };
            OfflineError::Input(format!("replay point {id} ({place}): {error}"))
        })?;
        Ok(items
            .into_iter()
            .find(|item| item.get("item_id").and_then(|id| id.as_str()) == Some(item_id))
            .map(|item| (state, item))
            .ok_or_else(|| {
                format!(
                    "item {item_id:?} is not among the items of replay point {}",
                    plan.line.point.replay_point_id
                )
            }))
    }

    /// Open the run's log `name` (`replays.jsonl`, `counterfactuals.jsonl`)
    /// for appending and count what it already holds. A symbolic link or
    /// anything but a regular file is refused (a FIFO is never waited on):
    /// a command writes inside its run directory only
    /// ([`crate::atomic::open_regular`]).
    ///
    /// # Errors
    /// [`OfflineError::Input`]: the path is refused or cannot be opened;
    /// [`OfflineError::Io`]: it cannot be read.
    pub fn open_log(&self, name: &str) -> Result<RunLog, OfflineError> {
        let path = self.dir.join(name);
        let mut file = crate::atomic::open_regular(
            std::fs::OpenOptions::new()
                .read(true)
                .create(true)
                .append(true),
            &path,
        )
        .map_err(|error| OfflineError::Input(error.to_string()))?;
        let earlier = ReplaysFile::read(&mut file, &path)?;
        Ok(RunLog {
            file,
            path,
            earlier,
        })
    }
}

/// A run's log open for appending: one JSON line per command run.
pub struct RunLog {
    file: File,
    path: PathBuf,
    earlier: ReplaysFile,
}

impl RunLog {
    /// Where the log is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The lines earlier commands appended: this command's is number
    /// `earlier_lines() + 1`.
    pub fn earlier_lines(&self) -> usize {
        self.earlier.lines
    }

    /// Append `line` as one JSON line (after a partial one a crash left, on
    /// a line of its own): see [`append_line`].
    ///
    /// # Errors
    /// [`OfflineError::Io`]: the write failed; the log is cut back to its
    /// length before it.
    pub fn append(&mut self, line: &impl Serialize) -> Result<(), OfflineError> {
        let value = serde_json::to_value(line).expect("a log line serialises");
        append_line(&mut self.file, &self.path, self.earlier.partial, &value)?;
        self.earlier.partial = false;
        self.earlier.lines += 1;
        Ok(())
    }
}
