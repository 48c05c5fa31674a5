//! What the CLI writes and where: a failed write to stdout is a failure
//! (exit 1, saying why) unless stdout is a closed pipe (`| head`: a quiet
//! exit 0), a closed stderr never panics, and files written at paths given
//! to sandloop (a report, man pages, a loop's template) are never written
//! through a symbolic link or into a FIFO (exit 2 naming the path).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::json;

use crate::support::*;
use sandloop_tests::{HELLO_ADAPTER, LOOP_STEPS, MARKDOWN_EXPLORER};

/// `sandloop ARGS` with its stdout on `/dev/full`, where every write fails
/// with `ENOSPC`.
fn with_stdout_full(args: &[String]) -> Output {
    let full = File::options()
        .write(true)
        .open("/dev/full")
        .expect("open /dev/full");
    sandloop()
        .args(args)
        .stdout(full)
        .output()
        .expect("spawn sandloop")
}

/// `sandloop ARGS` with its stdout (and its stderr too, with
/// `stderr_too`) on a pipe whose read end is closed before it starts, as
/// `| head` closes it: every write fails with `EPIPE`.
fn with_closed_pipe(args: &[String], stderr_too: bool) -> Output {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let mut command = sandloop();
    command
        .args(args)
        .stdout(writer.try_clone().expect("clone the pipe"));
    if stderr_too {
        command.stderr(writer);
    }
    command.output().expect("spawn sandloop")
}

/// `args` as owned strings.
fn owned(args: &[&str]) -> Vec<String> {
    args.iter().map(|arg| (*arg).to_owned()).collect()
}

/// A few items for the hello adapter, in `dir`.
fn hello_items(dir: &Path) -> PathBuf {
    let lines: Vec<_> = (0..3)
        .map(|i| json!({"item_id": format!("item-{i}"), "text": "a few words"}))
        .collect();
    write_items(dir, "items.jsonl", &lines)
}

/// The commands whose stdout is what they produce; each `run` into a new
/// directory under `dir`, named by `label`.
fn printing_commands(dir: &Path, label: &str) -> Vec<Vec<String>> {
    let items = hello_items(dir);
    let out = dir.join(format!("run-{label}"));
    vec![
        owned(&["inspect", HELLO_ADAPTER, "--json"]),
        owned(&["inspect", HELLO_ADAPTER]),
        owned(&[
            "run",
            "--adapter",
            HELLO_ADAPTER,
            "--items",
            s(&items),
            "--out",
            s(&out),
            "--json",
        ]),
        owned(&["man"]),
        owned(&["completions", "bash"]),
        owned(&["--help"]),
    ]
}

#[test]
fn a_failed_write_to_stdout_exits_1_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    for args in printing_commands(dir.path(), "full") {
        let output = with_stdout_full(&args);
        let said = stderr(&output);
        assert_eq!(code(&output), 1, "{args:?}: {said}");
        assert!(
            said.contains("error: cannot write to stdout: No space left on device"),
            "{args:?}: {said}"
        );
    }
}

#[test]
fn a_closed_pipe_on_stdout_is_a_quiet_success() {
    let dir = tempfile::tempdir().unwrap();
    for args in printing_commands(dir.path(), "pipe") {
        let output = with_closed_pipe(&args, false);
        assert_eq!(code(&output), 0, "{args:?}: {}", stderr(&output));
        assert_eq!(stderr(&output), "", "{args:?}");
    }
}

#[test]
fn a_closed_pipe_on_stderr_too_keeps_the_exit_code_without_a_panic() {
    // `sandloop inspect missing.wasm 2>&1 | head`: the error line cannot be
    // written either, and the command still exits 2 (it panicked, 101).
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.wasm");
    for args in [
        owned(&["inspect", s(&missing)]),
        owned(&["report", s(&dir.path().join("no-run"))]),
    ] {
        let output = with_closed_pipe(&args, true);
        assert_eq!(code(&output), 2, "{args:?}");
    }
}

/// Make a FIFO at `path`.
fn mkfifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: `name` is a NUL-terminated string that outlives the call.
    let made = unsafe { libc::mkfifo(name.as_ptr(), 0o600) };
    assert_eq!(made, 0, "mkfifo {}", path.display());
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn report_writes_no_file_through_a_link_nor_into_a_fifo() {
    let dir = tempfile::tempdir().unwrap();
    let items = hello_items(dir.path());
    let run_dir = dir.path().join("run");
    let output = run(&[
        "run",
        "--adapter",
        HELLO_ADAPTER,
        "--items",
        s(&items),
        "--out",
        s(&run_dir),
    ]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));

    // RUN/report.html -> ../outside.txt: the file outside stays as it was.
    let outside = dir.path().join("outside.txt");
    std::fs::write(&outside, "keep").unwrap();
    let link = run_dir.join("report.html");
    std::os::unix::fs::symlink("../outside.txt", &link).unwrap();
    let output = run(&["report", s(&run_dir)]);
    assert_exit(&output, 2, &[&format!("{} is a symbolic link", s(&link))]);
    assert_eq!(stdout(&output), "");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep");

    // --out a link to nowhere: nothing is created where it points.
    let dangling = dir.path().join("dangling.html");
    std::os::unix::fs::symlink("nowhere.html", &dangling).unwrap();
    let output = run(&["report", s(&run_dir), "--out", s(&dangling)]);
    assert_exit(
        &output,
        2,
        &[&format!("{} is a symbolic link", s(&dangling))],
    );
    assert!(!dir.path().join("nowhere.html").exists());

    // --out a FIFO no one reads: refused at once, not waited on for ever.
    let fifo = dir.path().join("fifo.html");
    mkfifo(&fifo);
    let mut report = KillOnDrop(
        sandloop()
            .args(["report", s(&run_dir), "--out", s(&fifo)])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sandloop"),
    );
    let exit = report.wait_within(Duration::from_secs(60), "report --out FIFO");
    let mut said = String::new();
    std::io::Read::read_to_string(&mut report.0.stderr.take().unwrap(), &mut said).unwrap();
    assert_eq!(exit, 2, "{said}");
    assert!(
        said.contains(&format!("{} is not a regular file (a FIFO)", s(&fifo))),
        "{said}"
    );

    // A regular file is replaced, and no temporary file is left beside it.
    let page = dir.path().join("page.html");
    std::fs::write(&page, "old").unwrap();
    let output = run(&["report", s(&run_dir), "--out", s(&page)]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(std::fs::read_to_string(&page).unwrap().contains("<html"));
    assert_eq!(
        names(dir.path()),
        [
            "dangling.html",
            "fifo.html",
            "items.jsonl",
            "outside.txt",
            "page.html",
            "run"
        ]
    );
}

#[test]
fn man_pages_are_never_written_through_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let pages = dir.path().join("man1");
    std::fs::create_dir(&pages).unwrap();
    let outside = dir.path().join("outside.1");
    std::fs::write(&outside, "keep").unwrap();
    let link = pages.join("sandloop.1");
    std::os::unix::fs::symlink("../outside.1", &link).unwrap();
    let output = run(&["man", "--out", s(&pages)]);
    assert_exit(&output, 2, &[&format!("{} is a symbolic link", s(&link))]);
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep");
}

#[test]
fn loop_init_writes_no_file_through_a_dangling_link() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    let link = repo.join("sandloop-loop.toml");
    std::os::unix::fs::symlink("../elsewhere.toml", &link).unwrap();
    let output = run(&["loop", "init", "--repo", s(&repo), "--plugin", LOOP_STEPS]);
    assert_exit(&output, 2, &[&format!("{} is a symbolic link", s(&link))]);
    assert!(!dir.path().join("elsewhere.toml").exists());
}

#[test]
fn a_fifo_given_as_an_input_file_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let items = hello_items(dir.path());
    let fifo = dir.path().join("input.fifo");
    mkfifo(&fifo);
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    let out = dir.path().join("out");
    let docs = format!(
        "{}::/docs:ro",
        s(&workspace_file("examples/markdown-explorer/sample-docs"))
    );
    let cases: [(&str, Vec<&str>); 5] = [
        (
            "run --adapter",
            vec![
                "run",
                "--adapter",
                s(&fifo),
                "--items",
                s(&items),
                "--out",
                s(&out),
            ],
        ),
        (
            "run --variants",
            vec![
                "run",
                "--adapter",
                MARKDOWN_EXPLORER,
                "--dir",
                &docs,
                "--variants",
                s(&fifo),
                "--out",
                s(&out),
            ],
        ),
        ("inspect", vec!["inspect", s(&fifo)]),
        (
            "loop init --plugin",
            vec!["loop", "init", "--repo", s(&repo), "--plugin", s(&fifo)],
        ),
        (
            "nats status --nats-creds",
            vec![
                "nats",
                "status",
                "--nats",
                "nats://127.0.0.1:1",
                "--nats-creds",
                s(&fifo),
            ],
        ),
    ];
    for (what, args) in cases {
        let mut command = KillOnDrop(
            sandloop()
                .args(&args)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn sandloop"),
        );
        let exit = command.wait_within(Duration::from_secs(60), what);
        let mut said = String::new();
        std::io::Read::read_to_string(&mut command.0.stderr.take().unwrap(), &mut said).unwrap();
        assert_ne!(exit, 0, "{what}: {said}");
        assert!(
            said.contains("is a FIFO, not a regular file") && said.contains(s(&fifo)),
            "{what}: {said}"
        );
    }
    assert!(!out.exists(), "nothing written");
}
