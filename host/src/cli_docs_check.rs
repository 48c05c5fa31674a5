//! The guide against the commands, checked by `cargo test -p sandloop
//! --lib cli_docs_check`: `docs/src/cli.md` is the reference
//! clap generates from today's definitions (`SANDLOOP_BLESS=1` rewrites
//! it), and every `sandloop …` command in the book and README.md is one
//! the parser accepts.

use std::path::PathBuf;

use crate::cli::args::Cli;

/// The command that rewrites `docs/src/cli.md`.
const BLESS: &str = "SANDLOOP_BLESS=1 cargo test -p sandloop --lib cli_reference";

/// The book's command-line reference, generated from [`Cli`].
fn cli_reference() -> String {
    let options = clap_markdown::MarkdownOptions::new()
        .title("Command-line reference".to_string())
        .show_footer(false);
    let body = clap_markdown::help_markdown_custom::<Cli>(&options);
    format!(
        "<!-- Generated from the clap definition in host/src/cli/; do not edit. \
         Regenerate with: {BLESS} -->\n\n{body}"
    )
}

fn cli_reference_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/src/cli.md")
}

#[test]
fn cli_reference_in_docs_matches_the_commands() {
    let generated = cli_reference();
    let path = cli_reference_path();
    if std::env::var_os("SANDLOOP_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "docs/src/cli.md is not the reference of today's commands; regenerate it with: {BLESS}"
    );
}

#[test]
fn cli_reference_has_a_section_per_command() {
    let reference = cli_reference();
    for heading in [
        "## `sandloop run`",
        "## `sandloop loop serve`",
        "## `sandloop new adapter`",
        "## `sandloop completions`",
        "## `sandloop man`",
    ] {
        assert!(reference.contains(heading), "no {heading}");
    }
    assert!(reference.contains("`--child-workers <N>`"));
}

/// A `sandloop` command of the guide: where it is, and its words.
struct GuideCommand {
    place: String,
    words: Vec<String>,
}

/// Every `sandloop …` command in the shell blocks of the guide
/// (`docs/src/*.md`) and README.md: continued lines joined, cut at the
/// first pipe, redirection, `&&`, `;` or comment; usage lines with
/// `[OPTIONAL]` parts or `...` left out (they are syntax, not commands).
fn guide_commands() -> Vec<GuideCommand> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("docs/src"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    files.push(root.join("README.md"));
    files.sort();
    let mut commands = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let mut in_shell = false;
        let mut pending: Option<(usize, String)> = None;
        for (number, line) in text.lines().enumerate() {
            let fence = line.trim_start();
            if let Some(info) = fence.strip_prefix("```") {
                in_shell = !in_shell && matches!(info.trim(), "sh" | "bash" | "console" | "shell");
                continue;
            }
            if !in_shell {
                continue;
            }
            let (start, mut joined) = pending.take().unwrap_or((number + 1, String::new()));
            joined.push_str(line.trim_start_matches("$ "));
            if let Some(cut) = joined.strip_suffix('\\') {
                pending = Some((start, format!("{cut} ")));
                continue;
            }
            let Some(words) = shlex::split(&joined) else {
                continue;
            };
            // Each `sandloop` command of the line (`a && sandloop b`): a
            // segment between separators whose program, after any
            // `NAME=value` settings, is sandloop.
            for segment in words.split(|w| matches!(w.as_str(), "|" | "&&" | "||" | ";" | "&")) {
                let segment: Vec<&String> = segment
                    .iter()
                    .skip_while(|w| w.contains('=') && !w.starts_with('-'))
                    .take_while(|w| !w.starts_with('#') && !w.starts_with('>') && *w != "2>&1")
                    .collect();
                let Some(program) = segment.first() else {
                    continue;
                };
                if !(*program == "sandloop" || program.ends_with("/sandloop")) {
                    continue;
                }
                let words: Vec<String> = segment.into_iter().cloned().collect();
                if words
                    .iter()
                    .any(|w| w.starts_with('[') || w.contains("...") || w == "…")
                {
                    continue;
                }
                commands.push(GuideCommand {
                    place: format!("{name}:{start}"),
                    words,
                });
            }
        }
    }
    commands
}

#[test]
fn every_sandloop_command_in_the_guide_is_one_the_cli_accepts() {
    use clap::Parser;
    use clap::error::ErrorKind;
    let commands = guide_commands();
    assert!(commands.len() > 40, "{} commands found", commands.len());
    let mut wrong = Vec::new();
    for command in &commands {
        let mut words = command.words.clone();
        words[0] = "sandloop".to_owned();
        match Cli::try_parse_from(&words) {
            Ok(_) => {}
            // Placeholders (`--epochs N`) are not values; what matters is
            // that every command and flag exists and fits together.
            Err(error)
                if matches!(
                    error.kind(),
                    ErrorKind::InvalidValue
                        | ErrorKind::ValueValidation
                        | ErrorKind::DisplayHelp
                        | ErrorKind::DisplayVersion
                ) => {}
            Err(error) => wrong.push(format!(
                "{}: `{}`: {}",
                command.place,
                words.join(" "),
                error
                    .render()
                    .to_string()
                    .lines()
                    .next()
                    .unwrap_or_default()
            )),
        }
    }
    assert!(
        wrong.is_empty(),
        "guide commands the CLI refuses:\n{}",
        wrong.join("\n")
    );
}
