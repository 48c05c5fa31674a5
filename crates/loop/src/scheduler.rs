//! Which workflow runs next. Mirrors `scheduler.py` in the reference rule by
//! rule; see [`choose_next_workflow`].

use super::config::WorkflowDefinition;
use super::models::{GOAL_CHECK_WORKFLOW_ID, HistoryEntry};

/// Score of a workflow that has never run: above any real score, so unrun
/// workflows go first within a priority (reference `10**9`).
pub const NEVER_RUN_SCORE: i64 = 1_000_000_000;

/// Pick the workflow to run after `iteration_count` completed iterations
/// with `history` (oldest first), or `None` when none may run (the
/// coordinator then stops with `no_eligible_workflow`). Mirrors
/// `choose_next_workflow` in the reference.
///
/// A workflow is eligible when, in this order:
/// 1. it is `enabled`;
/// 2. `iteration_count >= not_before_iteration`;
/// 3. it is not `goal_check`, or some other workflow has succeeded;
/// 4. `must_follow`, if set, is the id of the latest *successful* entry
///    (failures in between do not matter; no success means not eligible);
/// 5. `run_after_successes`, if set, is satisfied: the target workflow has
///    at least `every` successes more than it had up to this workflow's own
///    latest success (all of them if it never succeeded) — unless the
///    workflow is `run_on_start` and nothing has succeeded yet;
/// 6. `run_every`: it never ran (success or not), or
///    `iteration_count - <iteration of its latest entry> >= run_every`.
///
/// Among eligible workflows the largest `(priority, score, id)` wins, where
/// score is [`NEVER_RUN_SCORE`] for a workflow that never ran and otherwise
/// `iteration_count - <iteration of its latest entry> - run_every` (how
/// overdue it is); the final tie-break prefers the lexicographically
/// *greater* id, as Python's `max` over that tuple does.
///
/// When nothing is eligible and the latest entry is a failure, that
/// workflow is retried if it passes rules 1–5 (only `run_every` is
/// waived): a failure neither unlocks `must_follow` successors nor should
/// leave the loop with nothing to do.
pub fn choose_next_workflow<'a>(
    workflows: &'a [WorkflowDefinition],
    history: &[HistoryEntry],
    iteration_count: u32,
) -> Option<&'a WorkflowDefinition> {
    let facts = HistoryFacts::of(history);
    let mut best: Option<((i64, i64), &WorkflowDefinition)> = None;
    for workflow in workflows {
        if !eligible(workflow, history, iteration_count, &facts, false) {
            continue;
        }
        let key = (
            workflow.config.priority,
            score(workflow, history, iteration_count),
        );
        // Replace only on a strictly greater key, so the first of equal
        // keys wins as with Python's `max`.
        let better = match &best {
            None => true,
            Some((best_key, best_workflow)) => {
                (key, workflow.id.as_str()) > (*best_key, best_workflow.id.as_str())
            }
        };
        if better {
            best = Some((key, workflow));
        }
    }
    match best {
        Some((_, workflow)) => Some(workflow),
        None => failed_workflow_retry(workflows, history, iteration_count, &facts),
    }
}

/// What every eligibility check needs to know about the whole history.
struct HistoryFacts<'h> {
    /// Id of the latest successful entry.
    last_successful_workflow_id: Option<&'h str>,
    /// Some entry succeeded.
    has_successful_history: bool,
    /// Some entry of a workflow other than `goal_check` succeeded.
    has_successful_non_goal_check: bool,
}

impl<'h> HistoryFacts<'h> {
    fn of(history: &'h [HistoryEntry]) -> Self {
        let successes = || history.iter().filter(|entry| entry.success);
        Self {
            last_successful_workflow_id: successes()
                .next_back()
                .map(|entry| entry.workflow_id.as_str()),
            has_successful_history: successes().next().is_some(),
            has_successful_non_goal_check: successes()
                .any(|entry| entry.workflow_id != GOAL_CHECK_WORKFLOW_ID),
        }
    }
}

/// Rules 1–6 of [`choose_next_workflow`]; rule 6 is skipped when
/// `ignore_run_every` (reference `_workflow_eligible`).
fn eligible(
    workflow: &WorkflowDefinition,
    history: &[HistoryEntry],
    iteration_count: u32,
    facts: &HistoryFacts<'_>,
    ignore_run_every: bool,
) -> bool {
    let config = &workflow.config;
    if !config.enabled {
        return false;
    }
    if iteration_count < config.not_before_iteration {
        return false;
    }
    if workflow.id == GOAL_CHECK_WORKFLOW_ID && !facts.has_successful_non_goal_check {
        return false;
    }
    if let Some(predecessor) = &config.must_follow
        && facts.last_successful_workflow_id != Some(predecessor.as_str())
    {
        return false;
    }
    let is_run_on_start = config.run_on_start && !facts.has_successful_history;
    if config.run_after_successes.is_some()
        && !is_run_on_start
        && !run_after_successes_satisfied(workflow, history)
    {
        return false;
    }
    ignore_run_every || run_every_satisfied(workflow, history, iteration_count)
}

/// The fallback of [`choose_next_workflow`] (reference
/// `_failed_workflow_retry`): the latest entry's workflow, when that entry
/// failed and the workflow is eligible with `run_every` waived.
fn failed_workflow_retry<'a>(
    workflows: &'a [WorkflowDefinition],
    history: &[HistoryEntry],
    iteration_count: u32,
    facts: &HistoryFacts<'_>,
) -> Option<&'a WorkflowDefinition> {
    let last = history.last().filter(|entry| !entry.success)?;
    let workflow = workflows
        .iter()
        .find(|candidate| candidate.id == last.workflow_id)?;
    eligible(workflow, history, iteration_count, facts, true).then_some(workflow)
}

/// Latest entry of `workflow_id`, success or not.
fn last_entry<'h>(workflow_id: &str, history: &'h [HistoryEntry]) -> Option<&'h HistoryEntry> {
    history
        .iter()
        .rev()
        .find(|entry| entry.workflow_id == workflow_id)
}

/// `iteration_count` minus the iteration of the workflow's latest entry,
/// when it has one (reference `_steps_since_last_run`; signed, as the
/// reference's integers are).
fn steps_since_last_run(
    workflow_id: &str,
    history: &[HistoryEntry],
    iteration_count: u32,
) -> Option<i64> {
    last_entry(workflow_id, history)
        .map(|entry| i64::from(iteration_count) - i64::from(entry.iteration))
}

/// Reference `_workflow_score`.
fn score(workflow: &WorkflowDefinition, history: &[HistoryEntry], iteration_count: u32) -> i64 {
    match steps_since_last_run(&workflow.id, history, iteration_count) {
        None => NEVER_RUN_SCORE,
        Some(steps) => steps - i64::from(workflow.config.run_every),
    }
}

/// Reference `_run_every_satisfied`.
fn run_every_satisfied(
    workflow: &WorkflowDefinition,
    history: &[HistoryEntry],
    iteration_count: u32,
) -> bool {
    match steps_since_last_run(&workflow.id, history, iteration_count) {
        None => true,
        Some(steps) => steps >= i64::from(workflow.config.run_every),
    }
}

/// Reference `_run_after_successes_satisfied`: successes of the target
/// since (and not including those before or at) the candidate's latest
/// success number at least `every`.
fn run_after_successes_satisfied(workflow: &WorkflowDefinition, history: &[HistoryEntry]) -> bool {
    let Some(rule) = &workflow.config.run_after_successes else {
        return true;
    };
    let is_success_of = |entry: &HistoryEntry, id: &str| entry.success && entry.workflow_id == id;
    let target_successes = history
        .iter()
        .filter(|entry| is_success_of(entry, &rule.workflow_id))
        .count();
    let counted_before = history
        .iter()
        .rposition(|entry| is_success_of(entry, &workflow.id))
        .map_or(0, |last_candidate| {
            history[..=last_candidate]
                .iter()
                .filter(|entry| is_success_of(entry, &rule.workflow_id))
                .count()
        });
    target_successes - counted_before >= rule.every as usize
}

#[cfg(test)]
#[path = "scheduler_tests.rs"]
mod tests;
