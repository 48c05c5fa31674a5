//! The loops `sandloop loop init --template NAME` scaffolds, and their
//! writing into a repository. Each template's files live under
//! `templates/NAME/` of this crate as they are written into the repository,
//! and are embedded in the binary; a path under `workflows/` goes into the
//! `main` workflow set (`.sandloop/workflow_sets/main/workflows/`), and
//! `{{plugin}}` in a file stands for the plugin's path relative to the
//! repository.

use std::path::{Path, PathBuf};

use crate::config::{ROOT_CONFIG_FILENAME, SANDLOOP_DIRNAME};

/// A loop template: its name, the file name its plugin is copied to under
/// `.sandloop/plugins/`, and its files.
pub struct LoopTemplate {
    /// `--template` value.
    pub name: &'static str,
    /// File name of the copied plugin.
    pub plugin_file: &'static str,
    /// `(path under the template's folder, content)` of every file.
    pub files: &'static [(&'static str, &'static str)],
    /// What to do next, printed after the files are written.
    pub next_steps: &'static str,
}

/// `(path, content)` of the files of template folder `$dir`, each
/// embedded from `templates/$dir/$path`.
macro_rules! template_files {
    ($dir:literal: $($path:literal),+ $(,)?) => {
        &[$(($path, include_str!(concat!("../templates/", $dir, "/", $path)))),+]
    };
}

/// Every template, the default (`count`) first.
pub const TEMPLATES: &[LoopTemplate] = &[
    LoopTemplate {
        name: "count",
        plugin_file: "loop_steps.wasm",
        // plan, work and goal_check steps of the `loop-steps` plugin,
        // counting progress lines in `work/`.
        files: template_files!("count":
            "sandloop-loop.toml",
            "sandloop-goal.txt",
            "work/.keep",
            "workflows/plan/workflow.toml",
            "workflows/plan/prompt.txt",
            "workflows/work/workflow.toml",
            "workflows/work/prompt.txt",
            "workflows/goal_check/workflow.toml",
            "workflows/goal_check/prompt.txt",
        ),
        next_steps: "run it with: sandloop loop run",
    },
    LoopTemplate {
        name: "openai",
        plugin_file: "llm_steps.wasm",
        // draft and goal_check steps of the `llm-steps` plugin, which ask
        // an OpenAI-compatible endpoint and keep notes in `notes/`.
        files: template_files!("openai":
            "sandloop-loop.toml",
            "sandloop-goal.txt",
            "notes/.keep",
            "workflows/draft/workflow.toml",
            "workflows/draft/prompt.txt",
            "workflows/goal_check/workflow.toml",
            "workflows/goal_check/prompt.txt",
        ),
        next_steps: "export OPENAI_API_KEY (and OPENAI_BASE_URL / OPENAI_MODEL for another server; \
                     its host:port goes in http_hosts of each workflow.toml, with \
                     allow_private_addresses = true for one on this machine or a private network), \
                     then: sandloop loop run",
    },
];

impl LoopTemplate {
    /// `(path relative to the repository, content)` of every file the
    /// template writes, given the plugin's path relative to the repository.
    pub fn files(&self, plugin: &str) -> Vec<(String, String)> {
        self.files
            .iter()
            .map(|(path, content)| {
                let path = match path.strip_prefix("workflows/") {
                    Some(rest) => format!("{SANDLOOP_DIRNAME}/workflow_sets/main/workflows/{rest}"),
                    None => (*path).to_owned(),
                };
                (path, content.replace("{{plugin}}", plugin))
            })
            .collect()
    }
}

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

/// Why [`write_loop`] wrote nothing, or stopped part-way.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// The repository already has a loop: nothing was written.
    #[error(
        "{} exists: this repository already has a loop, and nothing was written \
         (remove it to start over, or give another --repo)",
        .0.display()
    )]
    HasLoop(PathBuf),
    /// A directory could not be made; the files already written stay.
    #[error("cannot create {}: {source}", path.display())]
    Directory {
        /// The directory.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A file was refused (a link, not a regular file) or could not be
    /// written; the files already written stay.
    #[error(transparent)]
    File(#[from] sandloop_core::atomic::OutputFileError),
}

/// Write `template`'s loop into `repo`, its plugin `plugin` (the
/// component's bytes) copied to `.sandloop/plugins/`, and return the paths
/// written, relative to `repo`. A file that already exists is left as it
/// is (a repository's own `work/` survives); a root configuration that
/// exists refuses the whole scaffold, since a second template beside the
/// first would merge their workflow sets. Every file is written atomically,
/// never through a link.
///
/// # Errors
/// [`ScaffoldError::HasLoop`] before anything is written;
/// [`ScaffoldError::Directory`] or [`ScaffoldError::File`] when a
/// directory or file cannot be written.
pub fn write_loop(
    repo: &Path,
    template: &LoopTemplate,
    plugin: &[u8],
) -> Result<Vec<String>, ScaffoldError> {
    let root = repo.join(ROOT_CONFIG_FILENAME);
    if root.exists() {
        return Err(ScaffoldError::HasLoop(root));
    }
    let plugin_rel = format!("{SANDLOOP_DIRNAME}/plugins/{}", template.plugin_file);
    let mut created = Vec::new();
    let mut write = |relative: &str, content: &[u8]| -> Result<(), ScaffoldError> {
        let path = repo.join(relative);
        if path.exists() {
            return Ok(());
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| ScaffoldError::Directory {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        sandloop_core::atomic::write_output_file(&path, content, None)?;
        created.push(relative.to_owned());
        Ok(())
    };
    write(&plugin_rel, plugin)?;
    for (relative, content) in template.files(&plugin_rel) {
        write(&relative, content.as_bytes())?;
    }
    Ok(created)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::run_preflight;

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
            let files = template.files(".sandloop/plugins/p.wasm");
            assert!(
                files.iter().any(|(path, _)| path == ROOT_CONFIG_FILENAME),
                "{} writes {ROOT_CONFIG_FILENAME}",
                template.name
            );
            for (relative, content) in files {
                assert!(!content.contains("{{"), "{relative} keeps a placeholder");
                let path = repo.path().join(relative);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, content).unwrap();
            }
            let preflight = run_preflight(repo.path(), None, None)
                .unwrap_or_else(|error| panic!("{}: {error}", template.name));
            assert!(preflight.workflows.len() >= 2, "{}", template.name);
            assert!(
                preflight
                    .workflows
                    .iter()
                    .all(|w| w.plugin_path.ends_with(".sandloop/plugins/p.wasm")),
                "{}: every workflow runs the copied plugin",
                template.name
            );
        }
    }
}
