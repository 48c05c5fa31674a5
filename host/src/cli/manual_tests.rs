use clap::CommandFactory;

use super::*;

/// Every visible top-level subcommand's name.
fn top_level_commands() -> Vec<String> {
    Cli::command()
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set())
        .map(|sub| sub.get_name().to_string())
        .collect()
}

#[test]
fn the_commands_include_completions_and_man() {
    let names = top_level_commands();
    for expected in [
        "run",
        "inspect",
        "replay",
        "plan",
        "loop",
        "new",
        "completions",
        "man",
    ] {
        assert!(names.iter().any(|name| name == expected), "{names:?}");
    }
}

#[test]
fn each_completion_script_names_every_subcommand_and_run_flags() {
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let script = String::from_utf8(completion_script(shell)).unwrap();
        for name in top_level_commands() {
            assert!(script.contains(&name), "{shell:?} script lacks {name}");
        }
        for flag in ["adapter", "resume", "child-workers", "coordinator"] {
            assert!(script.contains(flag), "{shell:?} script lacks --{flag}");
        }
    }
    let bash = String::from_utf8(completion_script(Shell::Bash)).unwrap();
    assert!(bash.contains("complete -F _sandloop"), "{bash}");
    let zsh = String::from_utf8(completion_script(Shell::Zsh)).unwrap();
    assert!(zsh.starts_with("#compdef sandloop"), "{zsh}");
    let fish = String::from_utf8(completion_script(Shell::Fish)).unwrap();
    assert!(fish.contains("complete -c sandloop"), "{fish}");
}

#[test]
fn the_man_page_has_name_synopsis_and_subcommands_sections() {
    let page = String::from_utf8(man_page().unwrap()).unwrap();
    assert!(page.starts_with(".ie \\n(.g .ds Aq"), "not roff: {page}");
    assert!(page.contains(".TH sandloop 1"), "{page}");
    assert!(
        page.contains(".SH NAME\nsandloop \\- Run sandboxed WebAssembly exploration adapters"),
        "{page}"
    );
    for section in ["NAME", "SYNOPSIS", "DESCRIPTION", "SUBCOMMANDS", "VERSION"] {
        assert!(
            page.contains(&format!(".SH {section}")),
            "no {section}: {page}"
        );
    }
    assert!(page.contains("sandloop\\-run(1)"), "{page}");
    assert!(page.contains(env!("CARGO_PKG_VERSION")), "{page}");
}

#[test]
fn man_out_writes_one_page_per_command_at_every_depth() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man1");
    let written = write_man_pages(&out).unwrap();
    let names: Vec<String> = written
        .iter()
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names[0], "sandloop.1");
    for expected in [
        "sandloop-run.1",
        "sandloop-loop.1",
        "sandloop-loop-run.1",
        "sandloop-new-adapter.1",
        "sandloop-man.1",
    ] {
        assert!(names.iter().any(|name| name == expected), "{names:?}");
    }
    assert!(!names.iter().any(|name| name.contains("help")), "{names:?}");
    let run = std::fs::read_to_string(out.join("sandloop-run.1")).unwrap();
    assert!(run.contains(".SH NAME"), "{run}");
    assert!(run.contains("\\-\\-child\\-workers"), "{run}");
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), written.len());
}

#[test]
fn man_out_names_a_directory_it_cannot_create() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let Err(CliError::Input(message)) = write_man_pages(&file.join("man1")) else {
        panic!("a directory under a file was created");
    };
    assert!(message.contains("a-file/man1"), "{message}");
}
