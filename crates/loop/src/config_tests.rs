use std::path::{Path, PathBuf};

use tempfile::TempDir;

use super::*;

const WF: &str = ".sandloop/workflow_sets/main/workflows";

const GOOD_ROOT: &str = r#"goal_file = "sandloop-goal.txt"
workflow_set = "main"
max_turns = 20
completion_criteria = ["cargo test passes"]
"#;

const BUILD: &str = r#"plugin = "plugins/step.wasm"
description = "Build the project."
priority = 2
dirs = ["docs::/docs:ro", "./out::/out"]
env = ["RUST_LOG", "_X1"]
http_hosts = ["api.example.com:443", "10.0.0.1", "localhost:8080"]
max_memory_mib = 256
call_timeout_secs = 30
"#;

const REVIEW: &str = r#"plugin = "plugins/step.wasm"
must_follow = "build"
run_every = 2
run_on_start = true

[run_after_successes]
workflow_id = "build"
every = 2
"#;

const GOAL_CHECK: &str = r#"plugin = "plugins/step.wasm"
not_before_iteration = 1
emits_goal_check = true
"#;

struct Repo(TempDir);

impl Repo {
    /// A repo whose preflight passes: workflows build, goal_check, review.
    fn good() -> Repo {
        let repo = Repo(tempfile::tempdir().unwrap());
        repo.write("sandloop-loop.toml", GOOD_ROOT);
        repo.write(
            "sandloop-goal.txt",
            "\n  Ship a minimal working landing page \n",
        );
        repo.write("plugins/step.wasm", "");
        std::fs::create_dir_all(repo.root().join("docs")).unwrap();
        std::fs::create_dir_all(repo.root().join("out")).unwrap();
        repo.workflow("build", BUILD);
        repo.workflow("review", REVIEW);
        repo.workflow("goal_check", GOAL_CHECK);
        repo
    }

    fn root(&self) -> &Path {
        self.0.path()
    }

    fn write(&self, relative: &str, text: &str) {
        let path = self.root().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn remove(&self, relative: &str) {
        std::fs::remove_file(self.root().join(relative)).unwrap();
    }

    /// A workflow of set `main` with its prompt.
    fn workflow(&self, id: &str, toml: &str) {
        self.write(&format!("{WF}/{id}/workflow.toml"), toml);
        self.write(&format!("{WF}/{id}/prompt.txt"), &format!("Do {id}.\n"));
    }

    fn preflight(&self) -> Result<PreflightResult, ConfigError> {
        run_preflight(self.root(), None, None)
    }

    /// Every preflight error as displayed.
    fn preflight_errors(&self) -> Vec<String> {
        let error = self.preflight().unwrap_err();
        error.errors().iter().map(ToString::to_string).collect()
    }
}

fn assert_has(errors: &[String], expected: &str) {
    assert!(
        errors.iter().any(|error| error == expected),
        "expected {expected:?} in {errors:#?}"
    );
}

fn assert_has_prefix(errors: &[String], prefix: &str) {
    assert!(
        errors.iter().any(|error| error.starts_with(prefix)),
        "expected an error starting {prefix:?} in {errors:#?}"
    );
}

#[test]
fn a_good_repo_passes_preflight() {
    let repo = Repo::good();
    let result = repo.preflight().unwrap();
    assert_eq!(result.workflow_set, "main");

    let root = &result.root_config;
    assert_eq!(root.goal, "Ship a minimal working landing page");
    assert_eq!(root.goal_hash(), "71393ee22450");
    assert_eq!(root.goal_file, repo.root().join("sandloop-goal.txt"));
    assert_eq!(root.workflow_set, "main");
    assert_eq!(root.completion_criteria, ["cargo test passes"]);
    assert!(root.stop_criteria.is_empty());
    assert_eq!(root.max_turns, 20);
    assert_eq!(root.goal_check_consecutive_failures_cap, 3);
    let snapshot = root.snapshot();
    assert_eq!(snapshot.goal_hash, "71393ee22450");
    assert_eq!(snapshot.goal, root.goal);
    assert_eq!(snapshot.max_turns, 20);

    let ids: Vec<&str> = result.workflows.iter().map(|w| w.id.as_str()).collect();
    assert_eq!(ids, ["build", "goal_check", "review"]);

    let build = &result.workflows[0];
    let dir = repo.root().join(WF).join("build");
    assert_eq!(build.workflow_set, "main");
    assert_eq!(build.dir, dir);
    assert_eq!(build.prompt_path, dir.join("prompt.txt"));
    assert_eq!(build.config_path, dir.join("workflow.toml"));
    assert_eq!(build.plugin_path, repo.root().join("plugins/step.wasm"));
    let config = &build.config;
    assert_eq!(config.description, "Build the project.");
    assert_eq!(config.priority, 2);
    assert_eq!(config.env, ["RUST_LOG", "_X1"]);
    assert_eq!(config.http_hosts.len(), 3);
    assert_eq!(config.max_memory_mib, Some(256));
    assert_eq!(config.call_timeout_secs, Some(30.0));
    let grants = build.dir_grants(repo.root()).unwrap();
    assert_eq!(grants.len(), 2);
    assert_eq!(grants[0].host, repo.root().join("docs"));
    assert_eq!(grants[0].guest, "/docs");
    assert!(grants[0].read_only);
    assert_eq!(grants[1].guest, "/out");
    assert!(!grants[1].read_only);
    assert_eq!(load_workflow_prompt(build).unwrap(), "Do build.\n");

    // Defaults as in the reference.
    let goal_check = &result.workflows[1].config;
    assert!(goal_check.enabled);
    assert_eq!(goal_check.run_every, 1);
    assert_eq!(goal_check.must_follow, None);
    assert_eq!(goal_check.not_before_iteration, 1);
    assert_eq!(goal_check.priority, 0);
    assert!(!goal_check.run_on_start);
    assert_eq!(goal_check.run_after_successes, None);
    assert!(goal_check.emits_goal_check);
    assert!(goal_check.dirs.is_empty() && goal_check.env.is_empty());
    assert_eq!(goal_check.max_memory_mib, None);
    assert_eq!(goal_check.call_timeout_secs, None);

    let review = &result.workflows[2].config;
    assert_eq!(review.must_follow.as_deref(), Some("build"));
    assert_eq!(review.run_every, 2);
    assert!(review.run_on_start);
    assert_eq!(
        review.run_after_successes,
        Some(RunAfterSuccesses {
            workflow_id: "build".into(),
            every: 2
        })
    );

    // The pieces agree with the whole.
    assert_eq!(
        load_workflow_definitions(repo.root(), "main").unwrap(),
        result.workflows
    );
    assert_eq!(load_root_config(repo.root(), None).unwrap(), *root);
    validate_workflow_graph(&result.workflows).unwrap();
}

#[test]
fn goal_hash_is_the_reference_hash() {
    // Values from Python's hashlib.sha256(goal.encode()).hexdigest()[:12].
    assert_eq!(
        derive_goal_hash("Ship a minimal working landing page"),
        "71393ee22450"
    );
    assert_eq!(derive_goal_hash("héllo — goal"), "387726006f7a");
    assert_eq!(derive_goal_hash("x"), derive_goal_hash("x"));
    assert_eq!(derive_goal_hash("x").len(), GOAL_HASH_LENGTH);
}

#[test]
fn an_inline_goal_is_refused() {
    let repo = Repo::good();
    repo.write(
        "sandloop-loop.toml",
        &format!("goal = \"Ship it\"\n{GOOD_ROOT}"),
    );
    let errors = repo.preflight_errors();
    assert_eq!(
        errors,
        [
            "sandloop-loop.toml: goal: an inline goal is not supported; write the goal to a file and name it with goal_file"
        ]
    );
    // Even with no goal_file, the inline goal is named.
    repo.write(
        "sandloop-loop.toml",
        "goal = \"Ship it\"\nworkflow_set = \"main\"\nmax_turns = 3\n",
    );
    let errors = repo.preflight_errors();
    assert_has_prefix(&errors, "sandloop-loop.toml: goal: an inline goal");
    assert_has(
        &errors,
        "sandloop-loop.toml: goal_file: missing: name the file holding the goal",
    );
}

#[test]
fn goal_file_problems_name_the_field() {
    let repo = Repo::good();
    repo.write("sandloop-goal.txt", " \n\t\n");
    let errors = repo.preflight_errors();
    assert_eq!(
        errors,
        ["sandloop-loop.toml: goal_file: sandloop-goal.txt is empty"]
    );

    repo.remove("sandloop-goal.txt");
    let errors = repo.preflight_errors();
    assert_has_prefix(
        &errors,
        "sandloop-loop.toml: goal_file: cannot read sandloop-goal.txt: ",
    );

    repo.write(
        "sandloop-loop.toml",
        &GOOD_ROOT.replace("\"sandloop-goal.txt\"", "\"  \""),
    );
    let errors = repo.preflight_errors();
    assert_eq!(
        errors,
        ["sandloop-loop.toml: goal_file: must be a non-empty path"]
    );
}

#[test]
fn a_goal_file_override_is_relative_to_the_repo_root() {
    let repo = Repo::good();
    repo.write("goals/other.md", "Other goal\n");
    let result = run_preflight(repo.root(), None, Some(Path::new("goals/other.md"))).unwrap();
    assert_eq!(result.root_config.goal, "Other goal");
    assert_eq!(
        result.root_config.goal_hash(),
        derive_goal_hash("Other goal")
    );
    // The override replaces a broken goal_file.
    repo.remove("sandloop-goal.txt");
    assert!(load_root_config(repo.root(), Some(Path::new("goals/other.md"))).is_ok());
    let error = load_root_config(repo.root(), Some(Path::new("goals/none.md"))).unwrap_err();
    assert!(
        error.to_string().starts_with(
            "sandloop-loop.toml: goal_file: cannot read goals/none.md (given on the command line): "
        ),
        "{error}"
    );
}

#[test]
fn malformed_toml_reports_line_and_column() {
    let repo = Repo::good();
    repo.write(
        "sandloop-loop.toml",
        "goal_file = \"sandloop-goal.txt\"\nworkflow_set = \"main\"\nmax_turns = = 4\n",
    );
    let errors = repo.preflight_errors();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_has_prefix(&errors, "sandloop-loop.toml:3:13: ");

    repo.write(
        &format!("{WF}/review/workflow.toml"),
        "plugin = \"a.wasm\"\n[oops\n",
    );
    repo.write("sandloop-loop.toml", GOOD_ROOT);
    let errors = repo.preflight_errors();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_has_prefix(&errors, &format!("{WF}/review/workflow.toml:2:"));
}

#[test]
fn type_errors_name_file_line_and_the_dotted_field_path() {
    let repo = Repo::good();
    repo.write(
        "sandloop-loop.toml",
        &GOOD_ROOT.replace("max_turns = 20", "max_turns = -1"),
    );
    assert_has_prefix(
        &repo.preflight_errors(),
        "sandloop-loop.toml:3:13: max_turns: invalid value: integer `-1`",
    );

    repo.write("sandloop-loop.toml", GOOD_ROOT);
    repo.write(
        &format!("{WF}/review/workflow.toml"),
        "plugin = \"plugins/step.wasm\"\n[run_after_successes]\nworkflow_id = \"build\"\nevery = -2\n",
    );
    assert_has_prefix(
        &repo.preflight_errors(),
        &format!("{WF}/review/workflow.toml:4:9: run_after_successes.every: "),
    );
    repo.write(
        &format!("{WF}/review/workflow.toml"),
        "plugin = \"plugins/step.wasm\"\ndirs = [\"docs::/docs\", 3]\n",
    );
    assert_has_prefix(
        &repo.preflight_errors(),
        &format!("{WF}/review/workflow.toml:2:24: dirs[1]: invalid type"),
    );
}

#[test]
fn wrong_types_and_missing_keys_report_line_and_column() {
    let repo = Repo::good();
    repo.write(
        "sandloop-loop.toml",
        &GOOD_ROOT.replace("max_turns = 20", "max_turns = \"20\""),
    );
    let errors = repo.preflight_errors();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_has_prefix(&errors, "sandloop-loop.toml:3:13: ");
    assert!(errors[0].contains("invalid type"), "{errors:#?}");

    repo.write(
        "sandloop-loop.toml",
        &GOOD_ROOT.replace("max_turns = 20", "max_turns = -1"),
    );
    assert_has_prefix(&repo.preflight_errors(), "sandloop-loop.toml:3:13: ");

    repo.write("sandloop-loop.toml", GOOD_ROOT);
    repo.write(
        &format!("{WF}/goal_check/workflow.toml"),
        "enabled = true\n",
    );
    let errors = repo.preflight_errors();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_has_prefix(&errors, &format!("{WF}/goal_check/workflow.toml:1:1: "));
    assert!(errors[0].contains("missing field `plugin`"), "{errors:#?}");
}

#[test]
fn unknown_keys_are_refused() {
    let repo = Repo::good();
    repo.write(
        "sandloop-loop.toml",
        &format!("{GOOD_ROOT}team_harness_model = \"gpt\"\n"),
    );
    let errors = repo.preflight_errors();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_has_prefix(
        &errors,
        "sandloop-loop.toml:5:1: team_harness_model: unknown field `team_harness_model`",
    );

    repo.write("sandloop-loop.toml", GOOD_ROOT);
    repo.workflow("review", &format!("run_evry = 2\n{REVIEW}"));
    let errors = repo.preflight_errors();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_has_prefix(
        &errors,
        &format!("{WF}/review/workflow.toml:1:1: run_evry: unknown field `run_evry`"),
    );

    repo.workflow(
        "review",
        &REVIEW.replace("\nevery = 2", "\nevery = 2\ncount = 2"),
    );
    assert_has_prefix(
        &repo.preflight_errors(),
        &format!("{WF}/review/workflow.toml:9:1: run_after_successes.count: unknown field `count`"),
    );
}

#[test]
fn field_rules_name_file_and_field() {
    let repo = Repo::good();
    repo.workflow(
        "build",
        r#"plugin = "plugins/step.txt"
run_every = 0
dirs = ["/etc::/etc:ro", "docs/../..::/up", "docs:/d", "::/d"]
env = ["BAD-NAME", "1X", ""]
http_hosts = ["https://api.example.com", "h:0", "h:99999", "*.example.com", "a..b"]
max_memory_mib = 0
call_timeout_secs = -1.5

[run_after_successes]
workflow_id = "review"
every = 0
"#,
    );
    let errors = repo.preflight_errors();
    let file = format!("{WF}/build/workflow.toml");
    let field = |name: &str| format!("{file}: {name}: ");
    for name in [
        "run_every",
        "run_after_successes.every",
        "plugin",
        "dirs[0]",
        "dirs[1]",
        "dirs[2]",
        "dirs[3]",
        "env[0]",
        "env[1]",
        "env[2]",
        "http_hosts[0]",
        "http_hosts[1]",
        "http_hosts[2]",
        "http_hosts[3]",
        "http_hosts[4]",
        "max_memory_mib",
        "call_timeout_secs",
    ] {
        assert_has_prefix(&errors, &field(name));
    }
    assert_eq!(errors.len(), 17, "{errors:#?}");
    assert_has(&errors, &format!("{file}: run_every: must be at least 1"));

    repo.write(
        "sandloop-loop.toml",
        &format!(
            "{}goal_check_consecutive_failures_cap = 0\n",
            GOOD_ROOT.replace("\"main\"", "\"../main\"")
        ),
    );
    let errors = load_root_config(repo.root(), None)
        .unwrap_err()
        .errors()
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>();
    assert_has_prefix(
        &errors,
        "sandloop-loop.toml: workflow_set: \"../main\" must be",
    );
    assert_has(
        &errors,
        "sandloop-loop.toml: goal_check_consecutive_failures_cap: must be at least 1",
    );
    assert_eq!(errors.len(), 2, "{errors:#?}");
}

#[test]
fn workflow_set_problems() {
    let repo = Repo::good();
    repo.write(".sandloop/workflow_sets/eval/README", "");
    let error = run_preflight(repo.root(), Some("nope"), None).unwrap_err();
    assert_eq!(
        error.to_string(),
        "workflow set \"nope\": no such workflow set: .sandloop/workflow_sets/nope does not exist (known sets: eval, main)"
    );
    assert!(matches!(
        load_workflow_definitions(repo.root(), "nope"),
        Err(ConfigError::WorkflowSet { .. })
    ));

    let error = run_preflight(repo.root(), Some("../main"), None).unwrap_err();
    assert!(
        error.to_string().starts_with("workflow set \"../main\": "),
        "{error}"
    );
    assert!(load_workflow_definitions(repo.root(), "..").is_err());
    assert!(load_workflow_definitions(repo.root(), " ").is_err());

    // A set without workflows loads as empty and fails preflight.
    assert_eq!(load_workflow_definitions(repo.root(), "eval").unwrap(), []);
    let error = run_preflight(repo.root(), Some("eval"), None).unwrap_err();
    assert_eq!(
        error.to_string(),
        "workflow set \"eval\": no workflows under .sandloop/workflow_sets/eval/workflows"
    );
}

#[test]
fn the_command_line_set_replaces_the_configured_one() {
    let repo = Repo::good();
    repo.write(
        ".sandloop/workflow_sets/eval/workflows/judge/workflow.toml",
        "plugin = \"plugins/step.wasm\"\n",
    );
    repo.write(
        ".sandloop/workflow_sets/eval/workflows/judge/prompt.txt",
        "Judge.\n",
    );
    let result = run_preflight(repo.root(), Some("eval"), None).unwrap();
    assert_eq!(result.workflow_set, "eval");
    assert_eq!(result.root_config.workflow_set, "eval");
    assert_eq!(result.root_config.snapshot().workflow_set, "eval");
    assert_eq!(result.workflows.len(), 1);
    assert_eq!(result.workflows[0].workflow_set, "eval");
    assert_eq!(result.workflows[0].id, "judge");
}

#[test]
fn missing_files_are_named() {
    let repo = Repo::good();
    repo.remove(&format!("{WF}/review/prompt.txt"));
    repo.remove(&format!("{WF}/goal_check/workflow.toml"));
    repo.workflow(
        "build",
        &BUILD.replace("plugins/step.wasm", "target/missing.wasm"),
    );
    std::fs::remove_dir(repo.root().join("out")).unwrap();
    let errors = repo.preflight_errors();
    assert_has(
        &errors,
        &format!("{WF}/review/prompt.txt: missing workflow prompt"),
    );
    assert_has(
        &errors,
        &format!("{WF}/goal_check/workflow.toml: missing workflow config"),
    );
    assert_has(
        &errors,
        &format!("{WF}/build/workflow.toml: plugin: target/missing.wasm is not a file"),
    );
    let dirs_error = format!("{WF}/build/workflow.toml: dirs[1]: \"");
    assert!(
        errors.iter().any(|e| e.starts_with(&dirs_error)
            && e.contains("out is not a directory inside the repository")),
        "{errors:#?}"
    );
    assert_eq!(errors.len(), 4, "{errors:#?}");

    let error = load_workflow_prompt(&repo.definition("review")).unwrap_err();
    assert!(matches!(
        error,
        ConfigError::Missing {
            what: "workflow prompt",
            ..
        }
    ));

    repo.remove("sandloop-loop.toml");
    let error = load_root_config(repo.root(), None).unwrap_err();
    assert_eq!(
        error.to_string(),
        "sandloop-loop.toml: missing root config (create one with `sandloop loop init --plugin STEPS.wasm`, or pass --repo)"
    );
}

impl Repo {
    /// One definition of set `main`, loaded without preflight.
    fn definition(&self, id: &str) -> WorkflowDefinition {
        let dir = self.root().join(WF).join(id);
        load_workflow(self.root(), "main", id, &dir).unwrap()
    }
}

#[test]
fn dangling_references_name_file_and_field() {
    let repo = Repo::good();
    repo.workflow(
        "review",
        &REVIEW
            .replace("must_follow = \"build\"", "must_follow = \"plan\"")
            .replace("workflow_id = \"build\"", "workflow_id = \"deploy\""),
    );
    let errors = repo.preflight_errors();
    assert_eq!(
        errors,
        [
            format!("{WF}/review/workflow.toml: must_follow: unknown workflow \"plan\""),
            format!(
                "{WF}/review/workflow.toml: run_after_successes.workflow_id: unknown workflow \"deploy\""
            ),
        ]
    );
    let workflows = load_workflow_definitions(repo.root(), "main").unwrap();
    let error = validate_workflow_graph(&workflows).unwrap_err();
    assert_eq!(error.errors().len(), 2);
    // Without build, references to it dangle too.
    let without_build: Vec<_> = workflows.into_iter().filter(|w| w.id != "build").collect();
    assert!(validate_workflow_graph(&without_build).is_err());
}

#[test]
fn a_broken_workflow_still_counts_as_existing() {
    let repo = Repo::good();
    repo.workflow("build", "plugin = \n");
    let errors = repo.preflight_errors();
    // review's must_follow / run_after_successes on build are not reported.
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_has_prefix(&errors, &format!("{WF}/build/workflow.toml:1:"));
}

#[test]
fn preflight_reports_every_error_at_once() {
    let repo = Repo::good();
    repo.write(
        "sandloop-loop.toml",
        &format!("goal = \"inline\"\n{GOOD_ROOT}"),
    );
    repo.remove(&format!("{WF}/goal_check/prompt.txt"));
    repo.workflow("review", &REVIEW.replace("\"build\"", "\"plan\""));
    repo.workflow("zeta", "plugin = \"plugins/step.wasm\"\nrun_every = 0\n");
    repo.workflow("alpha", "plugin = [\n");
    let error = repo.preflight().unwrap_err();
    let errors: Vec<String> = error.errors().iter().map(ToString::to_string).collect();
    assert_has_prefix(&errors, "sandloop-loop.toml: goal: ");
    assert_has_prefix(
        &errors,
        &format!("{WF}/alpha/workflow.toml:1:11: unclosed array"),
    );
    assert_has(
        &errors,
        &format!("{WF}/zeta/workflow.toml: run_every: must be at least 1"),
    );
    assert_has(
        &errors,
        &format!("{WF}/goal_check/prompt.txt: missing workflow prompt"),
    );
    assert_has(
        &errors,
        &format!("{WF}/review/workflow.toml: must_follow: unknown workflow \"plan\""),
    );
    assert_has(
        &errors,
        &format!(
            "{WF}/review/workflow.toml: run_after_successes.workflow_id: unknown workflow \"plan\""
        ),
    );
    assert_eq!(errors.len(), 6, "{errors:#?}");
    let text = error.to_string();
    assert!(text.starts_with("6 configuration errors:\n- "), "{text}");
    assert_eq!(text.lines().count(), 7, "{text}");
}

#[test]
fn from_many_flattens_and_unwraps() {
    let one = || ConfigError::Missing {
        file: PathBuf::from("a"),
        what: "workflow prompt",
    };
    assert!(matches!(
        ConfigError::from_many(vec![one()]),
        ConfigError::Missing { .. }
    ));
    let nested = ConfigError::from_many(vec![ConfigError::from_many(vec![one(), one()]), one()]);
    assert_eq!(nested.errors().len(), 3);
    assert!(
        nested
            .errors()
            .iter()
            .all(|e| !matches!(e, ConfigError::Many(_)))
    );
}

#[test]
fn a_config_that_is_not_utf8_is_named_with_its_line_and_column() {
    let repo = Repo::good();
    std::fs::write(
        repo.root().join(WF).join("build/workflow.toml"),
        b"plugin = \"plugins/step.wasm\"\ndescription = \"caf\xe9\"\n",
    )
    .unwrap();
    let errors = repo.preflight_errors();
    assert_has(
        &errors,
        ".sandloop/workflow_sets/main/workflows/build/workflow.toml:2:19: not valid UTF-8",
    );
}

mod props {
    use super::*;
    use proptest::prelude::*;
    use sandloop_core::hostile_inputs::{config, hostile_string, mutate_bytes};

    const WORKFLOW_FILE: &str = ".sandloop/workflow_sets/main/workflows/build/workflow.toml";

    /// `depth` nested TOML arrays or inline tables as the value of `key`.
    fn deep_toml(key: &str, depth: usize, tables: bool) -> String {
        if tables {
            format!(
                "{key} = {}1{}\n",
                "{ a = ".repeat(depth),
                " }".repeat(depth)
            )
        } else {
            format!("{key} = {}1{}\n", "[".repeat(depth), "]".repeat(depth))
        }
    }

    /// Text of any kind: unicode, damaged valid configs, deep nesting.
    fn hostile_toml(valid: &'static str) -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            any::<String>().prop_map(String::into_bytes),
            mutate_bytes(valid.as_bytes().to_vec(), false),
            (
                1usize..5000,
                any::<bool>(),
                prop::sample::select(vec!["dirs", "plugin", "x"])
            )
                .prop_map(move |(depth, tables, key)| {
                    format!("{valid}{}", deep_toml(key, depth, tables)).into_bytes()
                }),
        ]
    }

    /// Each error names `file`; a TOML error's line is within the text.
    fn check_errors(error: &ConfigError, file: &str, text: &[u8]) -> Result<(), TestCaseError> {
        for each in error.errors() {
            let shown = each.to_string();
            prop_assert!(shown.starts_with(file), "{}", shown);
            // The file exists: any fault in its text has a line.
            prop_assert!(!matches!(each, ConfigError::Read { .. }), "{}", shown);
            if let ConfigError::Toml {
                position: Some((line, column)),
                ..
            } = each
            {
                prop_assert!(*line >= 1 && *line <= text.split(|b| *b == b'\n').count());
                prop_assert!(*column >= 1);
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(config(96))]

        #[test]
        fn prop_workflow_toml_hostile_text_never_panics_and_errors_name_the_file(
            text in hostile_toml(BUILD),
        ) {
            let repo = Repo::good();
            std::fs::write(repo.root().join(WORKFLOW_FILE), &text).unwrap();
            if let Err(error) = load_workflow_definitions(repo.root(), "main") {
                check_errors(&error, WORKFLOW_FILE, &text)?;
            }
        }

        #[test]
        fn prop_root_toml_hostile_text_never_panics_and_errors_name_the_file(
            text in hostile_toml(GOOD_ROOT),
        ) {
            let repo = Repo::good();
            std::fs::write(repo.root().join(ROOT_CONFIG_FILENAME), &text).unwrap();
            if let Err(error) = load_root_config(repo.root(), None) {
                check_errors(&error, ROOT_CONFIG_FILENAME, &text)?;
            }
        }

        #[test]
        fn prop_workflow_toml_a_value_of_the_wrong_type_names_its_line_or_field(
            (key, value) in prop_oneof![
                prop::sample::select(vec!["plugin", "description", "must_follow"])
                    .prop_flat_map(|key| (Just(key), prop_oneof![
                        any::<i64>().prop_map(|n| n.to_string()),
                        Just("true".to_string()),
                        Just("[1, 2]".to_string()),
                        Just("{ a = 1 }".to_string()),
                    ])),
                prop::sample::select(vec!["run_every", "not_before_iteration", "priority",
                                          "max_memory_mib", "call_timeout_secs"])
                    .prop_flat_map(|key| (Just(key), prop_oneof![
                        hostile_string().prop_map(|s| toml_string(&s)),
                        Just("true".to_string()),
                        Just("-1".to_string()),
                        Just("18446744073709551616".to_string()),
                        Just("nan".to_string()),
                        Just("inf".to_string()),
                        Just("-inf".to_string()),
                        Just("1e999".to_string()),
                        Just("[1]".to_string()),
                    ])),
                prop::sample::select(vec!["dirs", "env", "http_hosts"])
                    .prop_flat_map(|key| (Just(key), prop_oneof![
                        hostile_string().prop_map(|s| toml_string(&s)),
                        hostile_string().prop_map(|s| format!("[{}]", toml_string(&s))),
                        Just("[1]".to_string()),
                        Just("[[\"a\"]]".to_string()),
                    ])),
                prop::sample::select(vec!["enabled", "run_on_start", "emits_goal_check"])
                    .prop_flat_map(|key| (Just(key), prop_oneof![
                        hostile_string().prop_map(|s| toml_string(&s)),
                        Just("1".to_string()),
                    ])),
            ],
        ) {
            // The key goes on line 2, before the valid keys (replacing
            // theirs, so it is not a duplicate).
            let rest: String = BUILD
                .lines()
                .filter(|line| line.split('=').next().map(str::trim) != Some(key))
                .map(|line| format!("{line}\n"))
                .collect();
            let text = format!("# hostile\n{key} = {value}\n{rest}");
            let repo = Repo::good();
            std::fs::write(repo.root().join(WORKFLOW_FILE), &text).unwrap();
            if let Err(error) = load_workflow_definitions(repo.root(), "main") {
                check_errors(&error, WORKFLOW_FILE, text.as_bytes())?;
                for each in error.errors() {
                    match each {
                        ConfigError::Toml { position, message, .. } => prop_assert!(
                            position.map(|(line, _)| line) == Some(2) || message.contains(key),
                            "{}", each
                        ),
                        ConfigError::Field { field, .. } => prop_assert!(field.starts_with(key), "{}", each),
                        other => prop_assert!(false, "unexpected {}", other),
                    }
                }
            }
        }
    }

    /// `text` as a TOML basic string.
    fn toml_string(text: &str) -> String {
        // JSON string escapes are valid TOML basic-string escapes, except
        // that TOML has no `\/` (never written by serde_json).
        serde_json::to_string(text).unwrap()
    }
}

#[test]
fn the_repository_itself_and_its_loop_state_are_never_granted() {
    let repo = Repo::good();
    repo.workflow(
        "build",
        r#"plugin = "plugins/step.wasm"
dirs = [".::/repo", "./::/r2", ".sandloop::/s", "./.sandloop/sessions::/s2"]
"#,
    );
    let errors = repo.preflight_errors();
    let file = format!("{WF}/build/workflow.toml");
    for index in 0..4 {
        assert_has_prefix(&errors, &format!("{file}: dirs[{index}]: "));
    }
    assert!(
        errors
            .iter()
            .filter(|e| e.contains("not the repository itself"))
            .count()
            == 2,
        "{errors:#?}"
    );
    assert!(
        errors
            .iter()
            .filter(|e| e.contains("holds the loop's own state, workflows and plugins"))
            .count()
            == 2,
        "{errors:#?}"
    );
}
