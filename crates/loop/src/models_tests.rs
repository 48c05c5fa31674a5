use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Value, json};

use super::*;

fn snapshot() -> RootConfigSnapshot {
    RootConfigSnapshot {
        goal: "Ship it".into(),
        goal_hash: "abcdef012345".into(),
        workflow_set: "main".into(),
        completion_criteria: vec!["tests pass".into()],
        stop_criteria: vec![],
        max_turns: 20,
        goal_check_consecutive_failures_cap: 3,
        team_harness: TeamHarnessFields::default(),
    }
}

fn control(value: serde_json::Value) -> Result<ControlSignal, String> {
    serde_json::from_value(value).map_err(|e| e.to_string())
}

#[test]
fn timestamps_are_rfc3339_utc_seconds() {
    let at = UNIX_EPOCH + Duration::from_millis(1_795_995_000_750);
    assert_eq!(format_utc_seconds(at), "2026-11-29T23:30:00Z");
    let leap = UNIX_EPOCH + Duration::from_secs(1_709_164_801);
    assert_eq!(format_utc_seconds(leap), "2024-02-29T00:00:01Z");
    let now = utc_now();
    assert_eq!(now.len(), 20, "{now}");
    assert!(now.ends_with('Z') && now.as_bytes()[10] == b'T', "{now}");
}

#[test]
fn control_signal_accepts_the_two_valid_shapes() {
    let running = control(json!({"state": "running", "reason": "keep going",
            "schema_version": 1}))
    .unwrap();
    assert_eq!(running.state, ControlState::Running);
    assert_eq!(running.stop_reason, None);
    let stopped = control(json!({"state": "stopped", "reason": "done",
            "stop_reason": "goal_met", "schema_version": 1, "extra": "ignored"}))
    .unwrap();
    assert_eq!(stopped.stop_reason, Some(ControlStopReason::GoalMet));
    let failed = control(json!({"state": "stopped", "reason": "stuck",
            "stop_reason": "unresolvable_error", "schema_version": 1}))
    .unwrap();
    assert_eq!(
        failed.stop_reason,
        Some(ControlStopReason::UnresolvableError)
    );
    // Round trip keeps the reference's keys.
    let text = serde_json::to_value(&stopped).unwrap();
    assert_eq!(
        text,
        json!({"state": "stopped", "reason": "done", "stop_reason": "goal_met",
                "schema_version": 1})
    );
}

#[test]
fn control_signal_rules_name_the_field() {
    let err = control(json!({"state": "running", "reason": "r", "schema_version": 2})).unwrap_err();
    assert!(err.starts_with("schema_version: must equal 1"), "{err}");
    let err = control(json!({"state": "running", "reason": "r",
            "stop_reason": "goal_met", "schema_version": 1}))
    .unwrap_err();
    assert!(err.starts_with("stop_reason: a running control state must not set"));
    let err = control(json!({"state": "stopped", "reason": "r", "schema_version": 1})).unwrap_err();
    assert!(err.starts_with("stop_reason: a stopped control state must set"));
    let err = control(json!({"state": "stopped", "reason": "r",
            "stop_reason": null, "schema_version": 1}))
    .unwrap_err();
    assert!(err.contains("must set stop_reason"), "{err}");
    // schema_version is required; state and stop_reason are closed sets.
    assert!(control(json!({"state": "running", "reason": "r"})).is_err());
    assert!(control(json!({"state": "paused", "reason": "r", "schema_version": 1})).is_err());
    assert!(
        control(
            json!({"state": "stopped", "reason": "r", "stop_reason": "bored",
                "schema_version": 1})
        )
        .is_err()
    );
    // validate() holds for values built in code too.
    let built = ControlSignal {
        state: ControlState::Stopped,
        reason: "r".into(),
        stop_reason: None,
        schema_version: 1,
    };
    assert_eq!(built.validate().unwrap_err().field, "stop_reason");
}

#[test]
fn goal_check_signal_defaults_and_refuses_other_versions() {
    let signal: GoalCheckSignal =
        serde_json::from_value(json!({"goal_met": false, "reason": "not yet"})).unwrap();
    assert_eq!(signal.schema_version, GOAL_CHECK_SCHEMA_VERSION);
    assert!(!signal.goal_met);
    let err = serde_json::from_value::<GoalCheckSignal>(
        json!({"goal_met": true, "reason": "r", "schema_version": 2}),
    )
    .unwrap_err()
    .to_string();
    assert!(err.starts_with("schema_version: must equal 1"), "{err}");
    assert!(serde_json::from_value::<GoalCheckSignal>(json!({"goal_met": true})).is_err());
    assert!(
        serde_json::from_value::<GoalCheckSignal>(json!({"goal_met": "yes", "reason": "r"}))
            .is_err()
    );
}

#[test]
fn child_session_request_defaults_and_refuses_other_versions() {
    let request: ChildSessionRequest =
        serde_json::from_value(json!({"workflow_set": "eval", "goal": "Check it"})).unwrap();
    assert_eq!(request.schema_version, 1);
    let err = serde_json::from_value::<ChildSessionRequest>(
        json!({"workflow_set": "eval", "goal": "g", "schema_version": 0}),
    )
    .unwrap_err()
    .to_string();
    assert!(err.starts_with("schema_version: must equal 1"), "{err}");
    assert!(serde_json::from_value::<ChildSessionRequest>(json!({"goal": "g"})).is_err());
}

#[test]
fn loop_state_fills_defaults_and_spells_status_snake_case() {
    let state: LoopState = serde_json::from_value(json!({
        "goal_hash": "abcdef012345",
        "workflow_set": "main",
        "max_turns": 20,
        "active_session_id": "s1",
        "config_snapshot": serde_json::to_value(snapshot()).unwrap(),
    }))
    .unwrap();
    assert_eq!(state, LoopState::new("s1", None, snapshot()));
    assert_eq!(state.status, LoopStatus::Running);
    assert!(!state.status.is_terminal());

    let mut ended = state.clone();
    ended.status = LoopStatus::MaxTurns;
    let value = serde_json::to_value(&ended).unwrap();
    assert_eq!(value["status"], "max_turns");
    assert_eq!(value["current_task"], serde_json::Value::Null);
    assert_eq!(value["history"], json!([]));
    let back: LoopState = serde_json::from_value(value).unwrap();
    assert_eq!(back, ended);
    for (status, text) in [
        (LoopStatus::Stopped, "stopped"),
        (LoopStatus::GoalMet, "goal_met"),
        (LoopStatus::Failed, "failed"),
        (LoopStatus::MaxTurns, "max_turns"),
    ] {
        assert!(status.is_terminal());
        assert_eq!(serde_json::to_value(status).unwrap(), text);
        assert_eq!(status.to_string(), text);
    }
    assert!(serde_json::from_value::<LoopStatus>(json!("paused")).is_err());
}

#[test]
fn snapshot_carries_inert_team_harness_fields_and_ignores_unknown_keys() {
    let value = serde_json::to_value(snapshot()).unwrap();
    for (key, inert) in [
        ("team_harness_provider", json!("")),
        ("team_harness_model", json!("")),
        ("team_harness_agents", json!([])),
        ("team_harness_agent_models", json!({})),
        ("team_harness_agent_reasoning_efforts", json!({})),
        ("team_harness_max_retries", json!(null)),
        ("team_harness_retry_base_delay_s", json!(null)),
        ("team_harness_retry_max_delay_s", json!(null)),
        ("team_harness_api_base", json!("")),
        ("team_harness_api_key_env", json!("")),
        ("team_harness_system_prompt_extension", json!("")),
    ] {
        assert_eq!(value[key], inert, "{key}");
    }
    // A loopy-loop coordinator's snapshot, with values and a key from a
    // later version, is accepted.
    let mut theirs = value.clone();
    theirs["team_harness_provider"] = json!("openai");
    theirs["team_harness_retry_base_delay_s"] = json!(1.5);
    theirs["team_harness_new_setting"] = json!(true);
    let parsed: RootConfigSnapshot = serde_json::from_value(theirs).unwrap();
    assert_eq!(parsed.team_harness.team_harness_provider, "openai");
    assert_eq!(parsed.goal, "Ship it");
    // A state file written before these fields existed still reads.
    let mut old = value;
    old.as_object_mut()
        .unwrap()
        .retain(|key, _| !key.starts_with("team_harness_"));
    assert_eq!(
        serde_json::from_value::<RootConfigSnapshot>(old).unwrap(),
        snapshot()
    );
    // Records without extra="forbid" ignore unknown keys.
    let entry: HistoryEntry = serde_json::from_value(json!({
            "iteration": 1, "workflow_set": "main", "workflow_id": "plan",
            "session_id": "s1", "success": true, "started_at": "2026-11-29T23:30:00Z",
            "finished_at": "2026-11-29T23:31:00Z", "note": "ignored"}))
    .unwrap();
    assert_eq!(entry.error, None);
}

#[test]
fn task_responses_keep_every_key() {
    let stop = serde_json::to_value(TaskResponse::stop("max_turns")).unwrap();
    assert_eq!(
        stop,
        json!({"action": "stop", "workflow_set": null, "workflow_id": null,
                "session_id": null, "iteration": null, "attempt_id": null,
                "config_snapshot": null, "stop_reason": "max_turns"})
    );
    let task = plan_task();
    let run = TaskResponse::run(&task, &snapshot());
    assert_eq!(run.action().as_str(), RUN_ACTION);
    assert_eq!(run.task().unwrap().iteration, 3);
    assert_eq!(run.task().unwrap().config_snapshot, snapshot());
    let request = FinishedRequest {
        workflow_id: "plan".into(),
        session_id: "s1".into(),
        iteration: 3,
        success: true,
        text: None,
        error: None,
        attempt_id: Some("0a1b2c3d4e5f".into()),
        worker: None,
    };
    assert!(request.matches_task(&task));
    assert!(
        !FinishedRequest {
            iteration: 2,
            ..request.clone()
        }
        .matches_task(&task)
    );
    // Another attempt of the same iteration is not this one.
    assert!(
        !FinishedRequest {
            attempt_id: Some("ffffffffffff".into()),
            ..request.clone()
        }
        .matches_task(&task)
    );
    // No echo: by the ids alone for a worker that never said who it is
    // (loopy-loop 0.2.0), stale for one that did.
    let unechoed = FinishedRequest {
        attempt_id: None,
        ..request
    };
    assert!(unechoed.matches_task(&task));
    let identified = CurrentTask {
        worker: Some(WorkerIdentity {
            hostname: "h".into(),
            pid: 1,
            starttime: None,
        }),
        ..task.clone()
    };
    assert!(!unechoed.matches_task(&identified));
    // State from before attempts existed: any echo matches.
    let legacy = CurrentTask {
        attempt_id: None,
        ..task
    };
    assert!(
        FinishedRequest {
            attempt_id: Some("anything".into()),
            ..unechoed
        }
        .matches_task(&legacy)
    );
}

fn plan_task() -> CurrentTask {
    CurrentTask {
        workflow_set: "main".into(),
        workflow_id: "plan".into(),
        session_id: "s1".into(),
        iteration: 3,
        started_at: "2026-11-29T23:30:00Z".into(),
        worker: None,
        attempt_id: Some("0a1b2c3d4e5f".into()),
    }
}

#[test]
fn a_run_answer_travels_flat_and_reads_back_as_the_same_task() {
    let task = plan_task();
    let run = TaskResponse::run(&task, &snapshot());
    let wire = serde_json::to_value(&run).unwrap();
    assert_eq!(wire["action"], "run");
    assert_eq!(wire["stop_reason"], Value::Null);
    assert_eq!(wire["iteration"], 3);
    assert_eq!(wire["attempt_id"], "0a1b2c3d4e5f");
    assert_eq!(wire.as_object().unwrap().len(), 8, "{wire}");
    let back: TaskResponse = serde_json::from_value(wire).unwrap();
    assert_eq!(back, run);
    // A reference coordinator may leave absent fields out altogether.
    let stop: TaskResponse =
        serde_json::from_value(json!({"action": "stop", "stop_reason": "goal_met"})).unwrap();
    assert_eq!(stop, TaskResponse::stop("goal_met"));
    assert!(!stop.is_stale_report());
    assert!(TaskResponse::stale_report().is_stale_report());
}

#[test]
fn a_run_answer_without_its_fields_is_refused_naming_them() {
    let error = serde_json::from_value::<TaskResponse>(json!({
            "action": "run", "workflow_set": "main", "workflow_id": null,
            "session_id": "s1", "iteration": 1, "config_snapshot": null,
            "stop_reason": null}))
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("a run task without workflow_id, config_snapshot"),
        "{error}"
    );
    let error = serde_json::from_value::<TaskResponse>(json!({"action": "wait"}))
        .unwrap_err()
        .to_string();
    assert!(error.contains("wait"), "{error}");
}

#[test]
fn iteration_result_defaults() {
    let result: IterationResult = serde_json::from_value(json!({"success": false,
            "error": "trap", "error_detail": {"kind": "timeout"}}))
    .unwrap();
    assert_eq!(result.harness_run_id, "");
    assert_eq!(result.harness_output_dir, "");
    assert_eq!(result.error_detail.unwrap()["kind"], "timeout");
    assert!(
        serde_json::from_value::<IterationResult>(json!({"success": true,
                "error_detail": "not an object"}))
        .is_err()
    );
}
