//! `sandloop new adapter NAME`: write the project ([`crate::scaffold`]) and
//! print the commands that build and run it.

use super::args::{NewAdapterArgs, NewCommand};
use super::{CliError, say, shell_word};
use crate::scaffold::{ScaffoldError, render, template, write_project};

/// Run a `sandloop new` command.
pub fn run(command: NewCommand) -> Result<(), CliError> {
    match command {
        NewCommand::Adapter(args) => new_adapter(args),
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
        .map(|path| shell_word(&path.display().to_string()))
        .unwrap_or_else(|_| "sandloop".to_string())
}

/// Write the project and say what was written and how to build and run it.
fn new_adapter(args: NewAdapterArgs) -> Result<(), CliError> {
    let project = args.dir.join(&args.name);
    let files = write_project(&project, &args.name, args.lang).map_err(|error| match error {
        ScaffoldError::Refused(message) => CliError::Input(message),
        ScaffoldError::Io(message) => CliError::Failed(message),
    })?;
    let template = template(args.lang);
    say(&format!(
        "created {} adapter `{}` in {}",
        args.lang.name(),
        args.name,
        project.display()
    ));
    for relative in &files {
        say(&format!("  {relative}"));
    }
    say("");
    say("build and run:");
    say(&format!(
        "  cd {}",
        shell_word(&project.display().to_string())
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
