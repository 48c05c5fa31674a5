//! `sandloop completions` and `sandloop man` through the real binary: the
//! scripts and pages are printed or written, and a bad shell is bad usage.

use crate::support::*;

#[test]
fn completions_print_a_script_per_shell_naming_the_commands() {
    for (shell, marker) in [
        ("bash", "complete -F _sandloop"),
        ("zsh", "#compdef sandloop"),
        ("fish", "complete -c sandloop"),
    ] {
        let output = run(&["completions", shell]);
        assert_eq!(code(&output), 0, "{}", stderr(&output));
        let script = String::from_utf8(output.stdout).unwrap();
        assert!(script.contains(marker), "{shell}: {script}");
        for command in ["run", "replay", "plan", "inspect", "loop", "new", "man"] {
            assert!(script.contains(command), "{shell} script lacks {command}");
        }
    }
    let output = run(&["completions", "powershell"]);
    assert_eq!(code(&output), 2);
    assert!(
        stderr(&output).contains("possible values: bash, zsh, fish"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn man_prints_the_page_and_writes_one_per_command() {
    let output = run(&["man"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let page = String::from_utf8(output.stdout).unwrap();
    assert!(page.contains(".TH sandloop 1"), "{page}");
    assert!(page.contains(".SH NAME"), "{page}");

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man").join("man1");
    let output = run(&["man", "--out", out.to_str().unwrap()]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let printed: Vec<&str> = std::str::from_utf8(&output.stdout)
        .unwrap()
        .lines()
        .collect();
    assert_eq!(printed.len(), std::fs::read_dir(&out).unwrap().count());
    assert!(printed[0].ends_with("man1/sandloop.1"), "{printed:?}");
    let loop_run = std::fs::read_to_string(out.join("sandloop-loop-run.1")).unwrap();
    assert!(loop_run.contains(".SH NAME"), "{loop_run}");
    assert!(loop_run.contains("\\-\\-resume"), "{loop_run}");
}
