//! The loops `sandloop loop init --template NAME` scaffolds: every file a
//! template writes, relative to the repository, given where its plugin is
//! copied.

use crate::coordinator::config::{ROOT_CONFIG_FILENAME, SANDLOOP_DIRNAME};

/// A loop template: its name, the file name its plugin is copied to under
/// `.sandloop/plugins/`, and its files.
pub struct LoopTemplate {
    /// `--template` value.
    pub name: &'static str,
    /// File name of the copied plugin.
    pub plugin_file: &'static str,
    /// `(relative path, content)` of every file, given the plugin's path
    /// relative to the repository.
    pub files: fn(plugin: &str) -> Vec<(String, String)>,
    /// What to do next, printed after the files are written.
    pub next_steps: &'static str,
}

/// Every template, the default (`count`) first.
pub const TEMPLATES: &[LoopTemplate] = &[
    LoopTemplate {
        name: "count",
        plugin_file: "loop_steps.wasm",
        files: count,
        next_steps: "run it with: sandloop loop run",
    },
    LoopTemplate {
        name: "openai",
        plugin_file: "llm_steps.wasm",
        files: openai,
        next_steps: "export OPENAI_API_KEY (and OPENAI_BASE_URL / OPENAI_MODEL for another server; \
                     its host:port goes in http_hosts of each workflow.toml, with \
                     allow_private_addresses = true for one on this machine or a private network), \
                     then: sandloop loop run",
    },
];

/// The template called `name`; the error lists the known ones.
pub fn find(name: &str) -> Result<&'static LoopTemplate, String> {
    TEMPLATES
        .iter()
        .find(|template| template.name == name)
        .ok_or_else(|| {
            let known: Vec<&str> = TEMPLATES.iter().map(|template| template.name).collect();
            format!(
                "--template {name:?}: unknown template; known: {}",
                known.join(", ")
            )
        })
}

fn workflow_dir() -> String {
    format!("{SANDLOOP_DIRNAME}/workflow_sets/main/workflows")
}

fn root_config(max_turns: u32, completion: &str, stop: &str) -> String {
    format!(
        "goal_file = \"sandloop-goal.txt\"\nworkflow_set = \"main\"\nmax_turns = {max_turns}\ncompletion_criteria = [\"{completion}\"]\nstop_criteria = [\"{stop}\"]\n"
    )
}

/// plan, work and goal_check steps of the `loop-steps` plugin counting
/// progress lines in `work/`.
fn count(plugin: &str) -> Vec<(String, String)> {
    let workflow = |description: &str, extra: &str| {
        format!(
            "plugin = \"{plugin}\"\ndescription = \"{description}\"\ndirs = [\"work::/work\"]\n{extra}"
        )
    };
    let base = workflow_dir();
    vec![
        (
            ROOT_CONFIG_FILENAME.to_string(),
            root_config(
                20,
                "work/progress.txt holds the target number of lines",
                "a step fails three times in a row",
            ),
        ),
        (
            "sandloop-goal.txt".to_string(),
            "Write 3 progress lines, then stop.\n".to_string(),
        ),
        ("work/.keep".to_string(), String::new()),
        (
            format!("{base}/plan/workflow.toml"),
            workflow(
                "Write the plan.",
                "run_on_start = true\npriority = 10\nrun_every = 1000\n",
            ),
        ),
        (
            format!("{base}/plan/prompt.txt"),
            "Plan the work toward the goal.\n".to_string(),
        ),
        (
            format!("{base}/work/workflow.toml"),
            workflow(
                "Do one step of the work.",
                "not_before_iteration = 1\npriority = 1\n",
            ),
        ),
        (
            format!("{base}/work/prompt.txt"),
            "Do one step of the work.\n".to_string(),
        ),
        (
            format!("{base}/goal_check/workflow.toml"),
            workflow(
                "Check whether the goal is met.",
                "emits_goal_check = true\npriority = 5\n\n[run_after_successes]\nworkflow_id = \"work\"\nevery = 1\n",
            ),
        ),
        (
            format!("{base}/goal_check/prompt.txt"),
            "Report whether the goal is met.\n".to_string(),
        ),
    ]
}

/// draft and goal_check steps of the `llm-steps` plugin, which ask an
/// OpenAI-compatible endpoint and keep notes in `notes/`.
fn openai(plugin: &str) -> Vec<(String, String)> {
    let workflow = |description: &str, extra: &str| {
        format!(
            "plugin = \"{plugin}\"\n\
             description = \"{description}\"\n\
             dirs = [\"notes::/notes\"]\n\
             # The endpoint is $OPENAI_BASE_URL (default https://api.openai.com/v1).\n\
             # For another OpenAI-compatible server, e.g. one on http://127.0.0.1:8080/v1,\n\
             # export OPENAI_BASE_URL and put its host:port here instead, and set\n\
             # allow_private_addresses = true (a private address is refused otherwise).\n\
             http_hosts = [\"api.openai.com\"]\n\
             allow_private_addresses = false\n\
             env = [\"OPENAI_BASE_URL\", \"OPENAI_API_KEY\", \"OPENAI_MODEL\"]\n\
             call_timeout_secs = 120\n\
             {extra}"
        )
    };
    let base = workflow_dir();
    vec![
        (
            ROOT_CONFIG_FILENAME.to_string(),
            root_config(
                10,
                "notes/log.md holds a haiku the goal check accepts",
                "the model cannot be reached",
            ),
        ),
        (
            "sandloop-goal.txt".to_string(),
            "Write a haiku about sandboxed plugins: three lines of 5, 7 and 5 syllables.\n"
                .to_string(),
        ),
        ("notes/.keep".to_string(), String::new()),
        (
            format!("{base}/draft/workflow.toml"),
            workflow(
                "Draft or improve the answer.",
                "run_on_start = true\npriority = 1\n",
            ),
        ),
        (
            format!("{base}/draft/prompt.txt"),
            "Write the answer the goal asks for, improving on the notes from earlier steps if there are any. Reply with the answer only.\n".to_string(),
        ),
        (
            format!("{base}/goal_check/workflow.toml"),
            workflow(
                "Check whether the goal is met.",
                "emits_goal_check = true\npriority = 5\n\n[run_after_successes]\nworkflow_id = \"draft\"\nevery = 1\n",
            ),
        ),
        (
            format!("{base}/goal_check/prompt.txt"),
            "Judge the latest answer in the notes against the goal.\n".to_string(),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator::config::run_preflight;

    #[test]
    fn unknown_templates_are_refused_with_the_known_ones() {
        assert_eq!(find("openai").unwrap().plugin_file, "llm_steps.wasm");
        let error = find("gpt").err().unwrap();
        assert!(error.contains("count, openai"), "{error}");
    }

    #[test]
    fn every_template_scaffolds_a_valid_loop() {
        for template in TEMPLATES {
            let repo = tempfile::tempdir().unwrap();
            std::fs::create_dir_all(repo.path().join(".sandloop/plugins")).unwrap();
            std::fs::write(repo.path().join(".sandloop/plugins/p.wasm"), b"\0asm").unwrap();
            for (relative, content) in (template.files)(".sandloop/plugins/p.wasm") {
                let path = repo.path().join(relative);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, content).unwrap();
            }
            let preflight = run_preflight(repo.path(), None, None)
                .unwrap_or_else(|error| panic!("{}: {error}", template.name));
            assert!(preflight.workflows.len() >= 2, "{}", template.name);
        }
    }
}
