//! Adapter projects for `sandloop new adapter NAME`: a working project in
//! Rust, Python, JavaScript, C or Zig, with its own copy of
//! `wit/adapter.wit` so it builds outside this repository.
//!
//! Templates live in `host/templates/adapter/LANG/` (the files several
//! languages share, such as `items.jsonl`, in `host/templates/adapter/`)
//! and are embedded in the binary: [`TEMPLATES`] maps each language to its
//! files. File contents may use the placeholders `{{name}}` (the project
//! name, `my-adapter`) and `{{crate}}` (the name with `-` turned into `_`,
//! `my_adapter`, as in the file name of a Rust component).

mod templates;

use std::path::Path;

use clap::ValueEnum;

use crate::sandbox::component::WIT_SOURCE;
use sandloop_core::atomic::{OutputFileError, write_output_file};

pub use templates::TEMPLATES;

/// The language of a scaffolded adapter (`--lang`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    /// A Rust crate built with `cargo build --target wasm32-wasip2`.
    Rust,
    /// A Python module built with componentize-py.
    Python,
    /// A JavaScript module built into a component.
    Js,
    /// A C file built with clang-19, wasi-libc and wasm-tools.
    C,
    /// A Zig file built with Zig and wasm-tools, using the C helper.
    Zig,
}

impl Lang {
    /// The `--lang` value naming this language.
    pub fn name(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Js => "js",
            Lang::C => "c",
            Lang::Zig => "zig",
        }
    }
}

/// One file of a template: its path inside the project, and its contents
/// (with placeholders).
pub type TemplateFile = (&'static str, &'static str);

/// A language's project template.
pub struct Template {
    /// The language (`--lang`).
    pub lang: Lang,
    /// The language's own files (not `wit/adapter.wit`, which every
    /// project gets).
    pub files: &'static [TemplateFile],
    /// The files it shares with other languages' templates.
    pub shared: &'static [TemplateFile],
    /// What to install once before the first build, run in the project
    /// directory.
    pub setup: &'static [&'static str],
    /// The build commands, run in the project directory (placeholders allowed).
    pub build: &'static [&'static str],
    /// The component the build writes, relative to the project directory.
    pub component: &'static str,
    /// The sample items, relative to the project directory.
    pub items: &'static str,
}

/// Where every project keeps its copy of the contract.
pub const WIT_PATH: &str = "wit/adapter.wit";

/// Why a project was not written.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// A bad name, a language not available, a target that exists: nothing
    /// was written.
    #[error("{0}")]
    Refused(String),
    /// A directory or file of the project could not be written.
    #[error("{0}")]
    Io(String),
}

impl From<OutputFileError> for ScaffoldError {
    fn from(error: OutputFileError) -> Self {
        if error.is_refusal() {
            ScaffoldError::Refused(error.to_string())
        } else {
            ScaffoldError::Io(error.to_string())
        }
    }
}

/// The template of `lang`.
pub fn template(lang: Lang) -> &'static Template {
    TEMPLATES
        .iter()
        .find(|template| template.lang == lang)
        .expect("every language has a TEMPLATES entry")
}

/// Check a project name: `[a-z][a-z0-9-]*`. The error names the argument
/// and says what is allowed.
pub fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let valid = chars.next().is_some_and(|first| first.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "invalid NAME `{name}`: an adapter name is lowercase letters, digits and `-`, \
             starting with a letter (e.g. `my-adapter`); it names the project's directory \
             and package"
        ))
    }
}

/// `text` with the placeholders filled in for project `name`.
pub fn render(text: &str, name: &str) -> String {
    text.replace("{{name}}", name)
        .replace("{{crate}}", &name.replace('-', "_"))
}

/// Every file of `template`'s project `name`, rendered: (relative path,
/// contents), `wit/adapter.wit` included.
pub fn project_files(template: &Template, name: &str) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = template
        .files
        .iter()
        .chain(template.shared)
        .map(|(path, text)| (render(path, name), render(text, name)))
        .collect();
    files.push((WIT_PATH.to_string(), WIT_SOURCE.to_string()));
    files
}

/// Write project `name` in `lang` into `project` (created; it must not
/// exist or be an empty directory). Returns the files written, relative
/// to `project`; `*.sh` files are executable.
///
/// # Errors
/// [`ScaffoldError::Refused`] for a bad name, a language not available
/// yet or a `project` that exists and is not an empty directory;
/// [`ScaffoldError::Io`] when a file cannot be written.
pub fn write_project(project: &Path, name: &str, lang: Lang) -> Result<Vec<String>, ScaffoldError> {
    check_name(name).map_err(ScaffoldError::Refused)?;
    let template = template(lang);
    if template.files.is_empty() {
        let lang = lang.name();
        return Err(ScaffoldError::Refused(format!(
            "--lang {lang}: the {lang} adapter template is not available yet in this \
             sandloop; use --lang rust"
        )));
    }
    check_target(project)?;
    let files = project_files(template, name);
    for (relative, contents) in &files {
        let path = project.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|error| {
                ScaffoldError::Io(format!("cannot create {}: {error}", parent.display()))
            })?;
        }
        let executable = relative.ends_with(".sh").then_some(0o755);
        write_output_file(&path, contents.as_bytes(), executable)?;
    }
    Ok(files.into_iter().map(|(relative, _)| relative).collect())
}

/// Refuse an existing file, or an existing directory that is not empty.
fn check_target(project: &Path) -> Result<(), ScaffoldError> {
    match std::fs::read_dir(project) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(ScaffoldError::Refused(format!(
                    "{} already exists and is not empty; choose another NAME or --dir \
                     (nothing was written)",
                    project.display()
                )));
            }
            Ok(())
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(_) if project.exists() => Err(ScaffoldError::Refused(format!(
            "{} already exists and is not a directory; choose another NAME or --dir \
             (nothing was written)",
            project.display()
        ))),
        Err(error) => Err(ScaffoldError::Refused(format!(
            "cannot read {}: {error}",
            project.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lowercase_letters_digits_and_dashes() {
        for good in ["a", "demo-adapter", "x1", "my-2nd-adapter"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "Demo", "1st", "-a", "my_adapter", "a b", "../x", "é"] {
            let error = check_name(bad).unwrap_err();
            assert!(
                error.starts_with(&format!("invalid NAME `{bad}`")),
                "{error}"
            );
        }
    }

    #[test]
    fn every_available_template_renders_completely_and_carries_the_wit() {
        let mut available = 0;
        for template in TEMPLATES {
            if template.files.is_empty() {
                continue;
            }
            available += 1;
            let files = project_files(template, "demo-adapter");
            let paths: Vec<&str> = files.iter().map(|(path, _)| path.as_str()).collect();
            assert!(paths.contains(&WIT_PATH), "{paths:?}");
            assert!(paths.contains(&template.items), "{paths:?}");
            for (path, text) in &files {
                assert!(!text.contains("{{"), "{path} keeps a placeholder");
            }
            assert!(!render(template.component, "demo-adapter").contains("{{"));
            assert!(!template.build.is_empty());
        }
        assert!(available >= 1);
    }

    #[test]
    fn the_rust_template_is_a_standalone_cdylib_of_world_plain() {
        let files = project_files(template(Lang::Rust), "demo-adapter");
        let file = |name: &str| {
            files
                .iter()
                .find(|(path, _)| path == name)
                .map(|(_, text)| text.clone())
                .unwrap()
        };
        let manifest = file("Cargo.toml");
        assert!(manifest.contains("name = \"demo-adapter\""), "{manifest}");
        assert!(manifest.contains("crate-type = [\"cdylib\"]"));
        assert!(manifest.contains("\n[workspace]"));
        assert!(manifest.contains("wit-bindgen = { version = \"0.46\""));
        let lib = file("src/lib.rs");
        assert!(lib.contains(r#"generate!({ path: "wit", world: "plain" })"#));
        assert!(WIT_SOURCE.contains("world plain {"));
        assert!(file("README.md").contains("target/wasm32-wasip2/release/demo_adapter.wasm"));
        assert_eq!(
            render(template(Lang::Rust).component, "demo-adapter"),
            "target/wasm32-wasip2/release/demo_adapter.wasm"
        );
    }
}
