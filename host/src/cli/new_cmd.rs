//! `sandloop new adapter NAME`: scaffold a working adapter project — in Rust,
//! Python, JavaScript, C or Zig — with its own copy of `wit/adapter.wit`, so it
//! builds outside this repository, and print the commands that build and
//! run it.
//!
//! Templates live in `host/templates/adapter/LANG/` (the files several
//! languages share, such as `items.jsonl`, in `host/templates/adapter/`)
//! and are embedded in the binary: [`TEMPLATES`] maps each language to its
//! files. File contents may
//! use the placeholders `{{name}}` (the project name, `my-adapter`) and
//! `{{crate}}` (the name with `-` turned into `_`, `my_adapter`, as in the
//! file name of a Rust component).

use std::path::{Path, PathBuf};

use super::args::{AdapterLang, NewAdapterArgs, NewCommand};
use super::{CliError, say};
use crate::sandbox::component::WIT_SOURCE;
use sandloop_core::atomic::write_output_file;

/// One file of a template: its path inside the project, and its contents
/// (with placeholders).
pub type TemplateFile = (&'static str, &'static str);

/// A language's project template.
pub struct Template {
    /// The language (`--lang`).
    pub lang: AdapterLang,
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

/// The file `WORLD` + `suffix` of guest-sdk/c/bindings/WORLD/ as
/// `bindings/WORLD` + `suffix` (`.h`, `.c`, `_component_type.c`).
macro_rules! c_bindings {
    ($world:literal, $suffix:literal) => {
        (
            concat!("bindings/", $world, $suffix),
            include_str!(concat!(
                "../../../guest-sdk/c/bindings/",
                $world,
                "/",
                $world,
                $suffix
            )),
        )
    };
}

/// The templates, one entry per language (see
/// `host/templates/adapter/README-for-cli.md` for the Python and JavaScript
/// ones). A language whose `files` is empty is not available yet.
pub const TEMPLATES: &[Template] = &[
    Template {
        lang: AdapterLang::Rust,
        files: &[
            (
                "Cargo.toml",
                include_str!("../../templates/adapter/rust/Cargo.toml.tmpl"),
            ),
            (
                "src/lib.rs",
                include_str!("../../templates/adapter/rust/src/lib.rs"),
            ),
            (
                "README.md",
                include_str!("../../templates/adapter/rust/README.md"),
            ),
            (
                ".gitignore",
                include_str!("../../templates/adapter/rust/gitignore.tmpl"),
            ),
        ],
        shared: &[ITEMS_JSONL],
        setup: &["rustup target add wasm32-wasip2"],
        build: &["cargo build --release --target wasm32-wasip2"],
        component: "target/wasm32-wasip2/release/{{crate}}.wasm",
        items: "items.jsonl",
    },
    Template {
        lang: AdapterLang::Python,
        files: &[
            (
                "app.py",
                include_str!("../../templates/adapter/python/app.py"),
            ),
            (
                "build.sh",
                include_str!("../../templates/adapter/python/build.sh"),
            ),
            (
                "requirements.txt",
                include_str!("../../templates/adapter/python/requirements.txt"),
            ),
            (
                "README.md",
                include_str!("../../templates/adapter/python/README.md"),
            ),
            (
                ".gitignore",
                include_str!("../../templates/adapter/python/gitignore.tmpl"),
            ),
        ],
        shared: &[ITEMS_JSONL],
        setup: &["python3 -m venv .venv && .venv/bin/pip install -r requirements.txt"],
        build: &["./build.sh"],
        component: "{{name}}.wasm",
        items: "items.jsonl",
    },
    Template {
        lang: AdapterLang::Js,
        files: &[
            (
                "adapter.js",
                include_str!("../../templates/adapter/js/adapter.js"),
            ),
            (
                "build.sh",
                include_str!("../../templates/adapter/js/build.sh"),
            ),
            (
                "package.json",
                include_str!("../../templates/adapter/js/package.json.tmpl"),
            ),
            (
                "package-lock.json",
                include_str!("../../templates/adapter/js/package-lock.json.tmpl"),
            ),
            (
                "README.md",
                include_str!("../../templates/adapter/js/README.md"),
            ),
            (
                ".gitignore",
                include_str!("../../templates/adapter/js/gitignore.tmpl"),
            ),
        ],
        shared: &[ITEMS_JSONL],
        setup: &["npm ci"],
        build: &["./build.sh"],
        component: "{{name}}.wasm",
        items: "items.jsonl",
    },
    Template {
        lang: AdapterLang::C,
        files: &[
            (
                "adapter.c",
                include_str!("../../templates/adapter/c/adapter.c"),
            ),
            (
                "build.sh",
                include_str!("../../templates/adapter/c/build.sh"),
            ),
            (
                "requirements.txt",
                include_str!("../../templates/adapter/c/requirements.txt"),
            ),
            (
                "README.md",
                include_str!("../../templates/adapter/c/README.md"),
            ),
        ],
        shared: PREVIEW1_PROJECT,
        setup: &[
            "sudo apt-get install -y clang-19 lld-19 libclang-rt-19-dev-wasm32 wasi-libc && ./setup.sh",
        ],
        build: &["./build.sh"],
        component: "{{name}}.wasm",
        items: "items.jsonl",
    },
    Template {
        lang: AdapterLang::Zig,
        files: &[
            (
                "adapter.zig",
                include_str!("../../templates/adapter/zig/adapter.zig"),
            ),
            (
                "build.sh",
                include_str!("../../templates/adapter/zig/build.sh"),
            ),
            (
                "requirements.txt",
                include_str!("../../templates/adapter/zig/requirements.txt"),
            ),
            (
                "README.md",
                include_str!("../../templates/adapter/zig/README.md"),
            ),
        ],
        shared: PREVIEW1_PROJECT,
        setup: &["./setup.sh"],
        build: &["./build.sh"],
        component: "{{name}}.wasm",
        items: "items.jsonl",
    },
];

/// Every project's sample items.
const ITEMS_JSONL: TemplateFile = (
    "items.jsonl",
    include_str!("../../templates/adapter/items.jsonl"),
);

/// What the C and Zig projects share: guest-sdk/c in `sandloop/`, the C
/// bindings of worlds `plain`, `grouped` and `replayable`
/// (guest-sdk/c/bindings.sh) in `bindings/` (`WORLD` in `build.sh` picks
/// one), `setup.sh` (their pinned tools and the WASI reactor adapter), the
/// sample items and a `.gitignore` for their tools, components and runs.
const PREVIEW1_PROJECT: &[TemplateFile] = &[
    (
        "sandloop/sandloop.h",
        include_str!("../../../guest-sdk/c/sandloop.h"),
    ),
    (
        "sandloop/sandloop.c",
        include_str!("../../../guest-sdk/c/sandloop.c"),
    ),
    c_bindings!("plain", ".h"),
    c_bindings!("plain", ".c"),
    c_bindings!("plain", "_component_type.c"),
    c_bindings!("grouped", ".h"),
    c_bindings!("grouped", ".c"),
    c_bindings!("grouped", "_component_type.c"),
    c_bindings!("replayable", ".h"),
    c_bindings!("replayable", ".c"),
    c_bindings!("replayable", "_component_type.c"),
    ("setup.sh", include_str!("../../templates/adapter/setup.sh")),
    ITEMS_JSONL,
    (
        ".gitignore",
        include_str!("../../templates/adapter/preview1-gitignore.tmpl"),
    ),
];

/// Where every project keeps its copy of the contract.
pub const WIT_PATH: &str = "wit/adapter.wit";

/// Run a `sandloop new` command.
pub fn run(command: NewCommand) -> Result<(), CliError> {
    match command {
        NewCommand::Adapter(args) => new_adapter(args),
    }
}

/// The template of `lang`.
pub fn template(lang: AdapterLang) -> &'static Template {
    TEMPLATES
        .iter()
        .find(|template| template.lang == lang)
        .expect("every language has a TEMPLATES entry")
}

/// The `--lang` value naming `lang`.
fn lang_name(lang: AdapterLang) -> &'static str {
    match lang {
        AdapterLang::Rust => "rust",
        AdapterLang::Python => "python",
        AdapterLang::Js => "js",
        AdapterLang::C => "c",
        AdapterLang::Zig => "zig",
    }
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

/// `text` quoted for a POSIX shell when it needs it.
fn shell_quote(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./:@%+=,".contains(c));
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// How to invoke this `sandloop` from another directory: the name it was
/// called by when that came from `PATH`, else its absolute path.
fn sandloop_command() -> String {
    let called = std::env::args().next().unwrap_or_default();
    if !called.is_empty() && !called.contains('/') {
        return called;
    }
    std::env::current_exe()
        .map(|path| shell_quote(&path.display().to_string()))
        .unwrap_or_else(|_| "sandloop".to_string())
}

/// Refuse an existing file, or an existing directory that is not empty.
fn check_target(project: &Path) -> Result<(), CliError> {
    match std::fs::read_dir(project) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(CliError::Input(format!(
                    "{} already exists and is not empty; choose another NAME or --dir \
                     (nothing was written)",
                    project.display()
                )));
            }
            Ok(())
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(_) if project.exists() => Err(CliError::Input(format!(
            "{} already exists and is not a directory; choose another NAME or --dir \
             (nothing was written)",
            project.display()
        ))),
        Err(error) => Err(CliError::Input(format!(
            "cannot read {}: {error}",
            project.display()
        ))),
    }
}

/// Write the project and say what was written and how to build and run it.
fn new_adapter(args: NewAdapterArgs) -> Result<(), CliError> {
    check_name(&args.name).map_err(CliError::Input)?;
    let template = template(args.lang);
    let lang = lang_name(args.lang);
    if template.files.is_empty() {
        return Err(CliError::Input(format!(
            "--lang {lang}: the {lang} adapter template is not available yet in this \
             sandloop; use --lang rust"
        )));
    }
    let project: PathBuf = args.dir.join(&args.name);
    check_target(&project)?;

    let files = project_files(template, &args.name);
    for (relative, contents) in &files {
        let path = project.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|error| {
                CliError::Failed(format!("cannot create {}: {error}", parent.display()))
            })?;
        }
        let executable = relative.ends_with(".sh").then_some(0o755);
        write_output_file(&path, contents.as_bytes(), executable)?;
    }

    say(&format!(
        "created {lang} adapter `{}` in {}",
        args.name,
        project.display()
    ));
    for (relative, _) in &files {
        say(&format!("  {relative}"));
    }
    say("");
    say("build and run:");
    say(&format!(
        "  cd {}",
        shell_quote(&project.display().to_string())
    ));
    for command in template.setup {
        say(&format!(
            "  {}   # once: the toolchain",
            render(command, &args.name)
        ));
    }
    for command in template.build {
        say(&format!("  {}", render(command, &args.name)));
    }
    let component = render(template.component, &args.name);
    let sandloop = sandloop_command();
    say(&format!("  {sandloop} inspect {component}"));
    say(&format!(
        "  {sandloop} run --adapter {component} --items {} --out runs/first",
        template.items
    ));
    say(&format!(
        "the component is {}; records go to runs/first/records.jsonl",
        project.join(&component).display()
    ));
    Ok(())
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
        let files = project_files(template(AdapterLang::Rust), "demo-adapter");
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
            render(template(AdapterLang::Rust).component, "demo-adapter"),
            "target/wasm32-wasip2/release/demo_adapter.wasm"
        );
    }

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(shell_quote("/tmp/x/demo-adapter"), "/tmp/x/demo-adapter");
        assert_eq!(shell_quote("/tmp/my dir"), "'/tmp/my dir'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
