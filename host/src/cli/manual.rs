//! `sandloop completions` and `sandloop man`: a shell completion script and
//! roff man pages, both generated from the clap definition in
//! [`super::args`], so they always list the commands and flags the binary
//! accepts. The book's command-line reference (`docs/src/cli.md`) is
//! generated from the same definition by a test of this module, which
//! fails when the file is stale and names the command that rewrites it.

use std::path::{Path, PathBuf};

use clap::CommandFactory;

use super::args::{Cli, CompletionsArgs, ManArgs, Shell};
use super::{CliError, write_stdout};
use sandloop_core::atomic::write_output_file;

/// The completion script of `shell` for the `sandloop` binary.
pub fn completion_script(shell: Shell) -> Vec<u8> {
    use clap_complete::aot::{Bash, Fish, Zsh};
    let mut command = Cli::command();
    let mut script = Vec::new();
    match shell {
        Shell::Bash => clap_complete::generate(Bash, &mut command, "sandloop", &mut script),
        Shell::Zsh => clap_complete::generate(Zsh, &mut command, "sandloop", &mut script),
        Shell::Fish => clap_complete::generate(Fish, &mut command, "sandloop", &mut script),
    }
    script
}

/// The top-level man page (`sandloop.1`) as roff.
///
/// # Errors
/// Only a failure of the writer, which a `Vec` never has.
pub fn man_page() -> std::io::Result<Vec<u8>> {
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command()).render(&mut page)?;
    Ok(page)
}

/// Write `sandloop.1` and one page per (visible) subcommand at any depth
/// into `dir`, creating it; returns the paths written, parents first. Each
/// page replaces a regular file only, never writing through a link
/// ([`write_output_file`]).
///
/// # Errors
/// The directory or a page that could not be written, or a page's path
/// that is a link or not a regular file (bad input), naming its path.
pub fn write_man_pages(dir: &Path) -> Result<Vec<PathBuf>, CliError> {
    std::fs::create_dir_all(dir)
        .map_err(|error| CliError::Input(format!("cannot create {}: {error}", dir.display())))?;
    let mut command = Cli::command().disable_help_subcommand(true);
    command.build();
    let mut written = Vec::new();
    write_pages(command, dir, &mut written)?;
    Ok(written)
}

/// One page for `command`, then its subcommands' (clap_mangen names each
/// page after the command's display name, `sandloop-loop-run.1`).
fn write_pages(
    command: clap::Command,
    dir: &Path,
    written: &mut Vec<PathBuf>,
) -> Result<(), CliError> {
    let subcommands: Vec<clap::Command> = command
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set())
        .cloned()
        .collect();
    let man = clap_mangen::Man::new(command);
    let path = dir.join(man.get_filename());
    let mut page = Vec::new();
    man.render(&mut page)
        .map_err(|error| CliError::Failed(format!("cannot render {}: {error}", path.display())))?;
    write_output_file(&path, &page, None)?;
    written.push(path);
    for sub in subcommands {
        write_pages(sub, dir, written)?;
    }
    Ok(())
}

/// `sandloop completions SHELL`: print the script to stdout.
///
/// # Errors
/// None: a failed write to stdout ends the process (exit 0 on a closed
/// pipe, 1 otherwise).
pub fn completions(args: &CompletionsArgs) -> Result<(), CliError> {
    write_stdout(&completion_script(args.shell));
    Ok(())
}

/// `sandloop man [--out DIR]`: print `sandloop.1` to stdout, or write
/// every page into DIR and print each path written.
///
/// # Errors
/// [`CliError::Input`] when DIR cannot be created or a page's path is a
/// link or not a regular file, [`CliError::Failed`] when a page cannot be
/// written.
pub fn man(args: &ManArgs) -> Result<(), CliError> {
    match &args.out {
        None => {
            let page = man_page().map_err(|error| CliError::Failed(error.to_string()))?;
            write_stdout(&page);
        }
        Some(dir) => {
            for path in write_man_pages(dir)? {
                super::say(&path.display().to_string());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "manual_tests.rs"]
mod tests;
