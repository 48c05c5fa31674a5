use std::path::PathBuf;

use super::*;
use crate::config::{RunAfterSuccesses, WorkflowConfig};

fn workflow(id: &str) -> WorkflowDefinition {
    WorkflowDefinition {
        workflow_set: "main".into(),
        id: id.into(),
        dir: PathBuf::from(id),
        prompt_path: PathBuf::from(id).join("prompt.txt"),
        config_path: PathBuf::from(id).join("workflow.toml"),
        plugin_path: PathBuf::from("step.wasm"),
        config: WorkflowConfig {
            enabled: true,
            run_every: 1,
            must_follow: None,
            not_before_iteration: 0,
            description: String::new(),
            priority: 0,
            run_on_start: false,
            run_after_successes: None,
            emits_goal_check: false,
            plugin: PathBuf::from("step.wasm"),
            dirs: Vec::new(),
            env: Vec::new(),
            http_hosts: Vec::new(),
            allow_private_addresses: false,
            max_memory_mib: None,
            call_timeout_secs: None,
        },
    }
}

fn with(id: &str, change: impl FnOnce(&mut WorkflowConfig)) -> WorkflowDefinition {
    let mut definition = workflow(id);
    change(&mut definition.config);
    definition
}

/// History from `(workflow_id, success)` pairs, iterations 1, 2, ….
fn history(runs: &[(&str, bool)]) -> Vec<HistoryEntry> {
    runs.iter()
        .enumerate()
        .map(|(index, (id, success))| HistoryEntry {
            iteration: index as u32 + 1,
            workflow_set: "main".into(),
            workflow_id: (*id).into(),
            session_id: "s1".into(),
            success: *success,
            error: (!success).then(|| "failed".into()),
            started_at: "2026-11-29T23:30:00Z".into(),
            finished_at: "2026-11-29T23:31:00Z".into(),
        })
        .collect()
}

/// The chosen id after the whole history (iteration_count = its length).
fn next(workflows: &[WorkflowDefinition], runs: &[(&str, bool)]) -> Option<String> {
    let history = history(runs);
    choose_next_workflow(workflows, &history, history.len() as u32).map(|w| w.id.clone())
}

fn some(id: &str) -> Option<String> {
    Some(id.into())
}

#[test]
fn nothing_to_choose_from() {
    assert_eq!(next(&[], &[]), None);
    assert_eq!(next(&[], &[("plan", false)]), None);
}

#[test]
fn disabled_workflows_never_run() {
    let workflows = [workflow("a"), with("b", |c| c.enabled = false)];
    // b would win the tie-break on id if it were enabled.
    assert_eq!(next(&workflows, &[]), some("a"));
    assert_eq!(next(&[with("b", |c| c.enabled = false)], &[]), None);
}

#[test]
fn not_before_iteration_waits_for_completed_iterations() {
    let late = [workflow("a"), with("z", |c| c.not_before_iteration = 2)];
    assert_eq!(next(&late, &[]), some("a"));
    // At 1 completed iteration a is blocked by run_every (it just ran)
    // and z by not_before_iteration.
    assert_eq!(next(&late, &[("a", true)]), None);
    // At 2 completed iterations z is eligible, and unrun it scores highest.
    assert_eq!(next(&late, &[("a", true), ("a", true)]), some("z"));
}

#[test]
fn goal_check_needs_another_workflow_to_have_succeeded() {
    let workflows = [workflow(GOAL_CHECK_WORKFLOW_ID)];
    assert_eq!(next(&workflows, &[]), None);
    assert_eq!(next(&workflows, &[("build", false)]), None);
    assert_eq!(
        next(&workflows, &[("goal_check", true), ("x", false)]),
        None
    );
    assert_eq!(next(&workflows, &[("build", true)]), some("goal_check"));
    // A failed goal_check after a success elsewhere is retried (the
    // fallback, as run_every blocks it).
    assert_eq!(
        next(&workflows, &[("build", true), ("goal_check", false)]),
        some("goal_check")
    );
    // The rule is about the id, not emits_goal_check.
    let emitter = [with("check", |c| c.emits_goal_check = true)];
    assert_eq!(next(&emitter, &[]), some("check"));
}

#[test]
fn must_follow_needs_the_latest_success() {
    let review = [with("review", |c| c.must_follow = Some("build".into()))];
    assert_eq!(next(&review, &[]), None);
    assert_eq!(next(&review, &[("build", true)]), some("review"));
    assert_eq!(next(&review, &[("build", true), ("plan", true)]), None);
    // A failure after the predecessor does not change the latest success.
    assert_eq!(
        next(&review, &[("build", true), ("plan", false)]),
        some("review")
    );
    assert_eq!(next(&review, &[("build", false)]), None);
}

#[test]
fn run_every_counts_iterations_since_the_latest_entry() {
    let slow = [with("lint", |c| c.run_every = 3)];
    assert_eq!(next(&slow, &[]), some("lint"));
    assert_eq!(next(&slow, &[("lint", true), ("x", true)]), None);
    assert_eq!(
        next(&slow, &[("lint", true), ("x", true), ("x", true)]),
        None
    );
    assert_eq!(
        next(
            &slow,
            &[("lint", true), ("x", true), ("x", true), ("x", true)]
        ),
        some("lint")
    );
    // A failed run counts as the latest entry too.
    assert_eq!(next(&slow, &[("lint", false), ("x", true)]), None);
    // Iterations come from the entries, not their positions.
    let mut gap = history(&[("lint", true)]);
    gap[0].iteration = 2;
    assert_eq!(
        choose_next_workflow(&slow, &gap, 4).map(|w| w.id.as_str()),
        None
    );
    assert_eq!(
        choose_next_workflow(&slow, &gap, 5).map(|w| w.id.as_str()),
        Some("lint")
    );
}

#[test]
fn run_after_successes_counts_new_target_successes() {
    let report = with("report", |c| {
        c.run_after_successes = Some(RunAfterSuccesses {
            workflow_id: "build".into(),
            every: 2,
        });
    });
    let workflows = [report];
    assert_eq!(next(&workflows, &[]), None);
    assert_eq!(next(&workflows, &[("build", true)]), None);
    // Failures of the target do not count.
    assert_eq!(next(&workflows, &[("build", true), ("build", false)]), None);
    assert_eq!(
        next(&workflows, &[("build", true), ("build", true)]),
        some("report")
    );
    // After report succeeds, only later build successes count …
    let after = [
        ("build", true),
        ("build", true),
        ("report", true),
        ("build", true),
    ];
    assert_eq!(next(&workflows, &after), None);
    let after = [
        ("build", true),
        ("build", true),
        ("report", true),
        ("build", true),
        ("build", true),
    ];
    assert_eq!(next(&workflows, &after), some("report"));
    // … but a failed report does not reset the count.
    let failed = [
        ("build", true),
        ("build", true),
        ("report", false),
        ("x", true),
    ];
    assert_eq!(next(&workflows, &failed), some("report"));
}

#[test]
fn run_after_successes_on_itself_counts_its_own_latest_success() {
    // The reference counts target successes up to and including the
    // candidate's latest success, so a workflow gated on its own
    // successes never runs again once it has succeeded.
    let selfish = [with("poll", |c| {
        c.run_after_successes = Some(RunAfterSuccesses {
            workflow_id: "poll".into(),
            every: 1,
        });
        c.run_on_start = true;
    })];
    assert_eq!(next(&selfish, &[]), some("poll"));
    assert_eq!(next(&selfish, &[("poll", true), ("x", true)]), None);
}

#[test]
fn run_on_start_waives_run_after_successes_until_anything_succeeds() {
    let start = |on_start: bool| {
        [with("report", |c| {
            c.run_on_start = on_start;
            c.run_after_successes = Some(RunAfterSuccesses {
                workflow_id: "build".into(),
                every: 1,
            });
        })]
    };
    assert_eq!(next(&start(false), &[]), None);
    assert_eq!(next(&start(true), &[]), some("report"));
    // Only failures so far: still at the start.
    assert_eq!(next(&start(true), &[("build", false)]), some("report"));
    // After any success the cadence applies again.
    assert_eq!(next(&start(true), &[("other", true)]), None);
    assert_eq!(next(&start(true), &[("build", true)]), some("report"));
    // run_on_start does not waive must_follow.
    let both = [with("report", |c| {
        c.run_on_start = true;
        c.must_follow = Some("build".into());
    })];
    assert_eq!(next(&both, &[]), None);
}

#[test]
fn unrun_workflows_score_first_then_the_most_overdue() {
    let workflows = [workflow("a"), workflow("b"), workflow("c")];
    // c never ran: score 10^9 beats id order.
    assert_eq!(next(&workflows, &[("b", true), ("a", true)]), some("c"));
    // An unrun workflow beats a due one even with the smaller id.
    let pair = [workflow("a"), workflow("b")];
    assert_eq!(next(&pair, &[("b", true), ("x", true)]), some("a"));
    // a just ran, so run_every blocks it; b (3 - 1 - 1 = 1) beats c
    // (3 - 2 - 1 = 0) though c's id is greater.
    assert_eq!(
        next(&workflows, &[("b", true), ("c", true), ("a", true)]),
        some("b")
    );
    // Overdue is measured against each run_every.
    let cadence = [
        with("a", |c| c.run_every = 1),
        with("b", |c| c.run_every = 3),
    ];
    // a: 6 - 5 - 1 = 0; b: 6 - 1 - 3 = 2.
    let runs = [
        ("b", true),
        ("x", true),
        ("x", true),
        ("x", true),
        ("a", true),
        ("x", true),
    ];
    assert_eq!(next(&cadence, &runs), some("b"));
    // b ran longer ago, but a is more overdue: a: 4 - 2 - 1 = 1;
    // b: 4 - 1 - 3 = 0.
    let runs = [("b", true), ("a", true), ("x", true), ("x", true)];
    assert_eq!(next(&cadence, &runs), some("a"));
}

#[test]
fn priority_outranks_score() {
    let workflows = [workflow("fresh"), with("urgent", |c| c.priority = 5)];
    // urgent is due (score 2 - 1 - 1 = 0), fresh never ran (10^9):
    // priority wins.
    assert_eq!(
        next(&workflows, &[("urgent", true), ("x", true)]),
        some("urgent")
    );
    let negative = [workflow("a"), with("b", |c| c.priority = -1)];
    assert_eq!(next(&negative, &[]), some("a"));
}

#[test]
fn equal_priority_and_score_prefer_the_greater_id() {
    let workflows = [workflow("alpha"), workflow("beta"), workflow("Zulu")];
    // Byte order: "beta" > "alpha" > "Zulu".
    assert_eq!(next(&workflows, &[]), some("beta"));
    let reversed = [workflow("beta"), workflow("alpha")];
    assert_eq!(next(&reversed, &[]), some("beta"));
    // With equal ids the first listed wins, as Python's max does.
    let twins = [
        with("same", |c| c.description = "first".into()),
        with("same", |c| c.description = "second".into()),
    ];
    let history = history(&[]);
    let chosen = choose_next_workflow(&twins, &history, 0).unwrap();
    assert_eq!(chosen.config.description, "first");
}

#[test]
fn a_failed_workflow_is_retried_when_nothing_else_can_run() {
    let pipeline = [
        workflow("build"),
        with("review", |c| c.must_follow = Some("build".into())),
    ];
    // review failed right after build; build is eligible again
    // (2 - 1 >= 1), so the fallback is not used.
    assert_eq!(
        next(&pipeline, &[("build", true), ("review", false)]),
        some("build")
    );
    // With both slowed down nothing is eligible: review (must_follow
    // still satisfied, run_every waived) is retried.
    let slowed = [
        with("build", |c| c.run_every = 5),
        with("review", |c| {
            c.run_every = 5;
            c.must_follow = Some("build".into());
        }),
    ];
    assert_eq!(
        next(&slowed, &[("build", true), ("review", false)]),
        some("review")
    );
    // Only the latest entry is retried, and only if it failed.
    assert_eq!(next(&slowed, &[("build", true), ("review", true)]), None);
    assert_eq!(
        next(
            &slowed,
            &[("build", true), ("review", false), ("other", false)]
        ),
        None
    );
}

#[test]
fn the_retry_still_applies_every_other_rule() {
    let run_every = |c: &mut WorkflowConfig| c.run_every = 5;
    // Plain retry: run_every alone blocks it.
    let plain = [with("step", run_every)];
    assert_eq!(next(&plain, &[("step", false)]), some("step"));
    // Disabled since it failed.
    let disabled = [with("step", |c| {
        run_every(c);
        c.enabled = false;
    })];
    assert_eq!(next(&disabled, &[("step", false)]), None);
    // must_follow no longer the latest success.
    let follows = [
        with("build", run_every),
        with("step", |c| {
            run_every(c);
            c.must_follow = Some("build".into());
        }),
    ];
    assert_eq!(
        next(&follows, &[("build", true), ("x", true), ("step", false)]),
        None
    );
    // not_before_iteration above the count (history built by hand).
    let late = [with("step", |c| {
        run_every(c);
        c.not_before_iteration = 9;
    })];
    let history = history(&[("step", false)]);
    assert!(choose_next_workflow(&late, &history, 1).is_none());
    // The failed workflow is gone from the set.
    assert_eq!(
        next(
            &[with("other", run_every)],
            &[("other", true), ("gone", false)]
        ),
        None
    );
    // goal_check is retried only once another workflow succeeded.
    let check = [with(GOAL_CHECK_WORKFLOW_ID, run_every)];
    assert_eq!(
        next(&check, &[("build", true), ("goal_check", false)]),
        some("goal_check")
    );
}
