//! `sandloop report`: read run directories, write one self-contained HTML
//! report (one run, or several compared as arms), optionally open it.

use std::path::{Path, PathBuf};

use super::args::ReportArgs;
use super::{CliError, say};
use crate::report::{RunReport, html};
use sandloop_core::atomic::write_output_file;

/// The file the report goes to: `--out`, else `RUN_DIR/report.html` for
/// one run and `./report.html` for several.
pub fn report_path(args: &ReportArgs) -> PathBuf {
    match (&args.out, args.runs.as_slice()) {
        (Some(out), _) => out.clone(),
        (None, [run]) => run.join("report.html"),
        (None, _) => PathBuf::from("report.html"),
    }
}

/// Run `sandloop report`. A missing or damaged run file is bad input
/// (exit 2), naming the file, line and field; so is a report path that is
/// a symbolic link or not a regular file (a FIFO, a directory), which is
/// never written through. A report that cannot be written fails the
/// command (exit 1).
pub fn report(args: ReportArgs) -> Result<(), CliError> {
    crate::report::check_distinct_runs(&args.runs).map_err(CliError::Input)?;
    let out = report_path(&args);
    let mut opened = false;
    loop {
        let runs = match load_runs(&args.runs) {
            Ok(runs) => runs,
            // A run being written can be caught between two files; the
            // next round reads it again.
            Err(error) if args.watch.is_some() && opened => {
                super::complain("warning: ", &format!("{error}; drawing again shortly"));
                std::thread::sleep(std::time::Duration::from_secs(1));
                continue;
            }
            Err(error) => return Err(error),
        };
        let partial = runs
            .iter()
            .filter(|run| run.head.state.is_partial())
            .count();
        // Only a run that is still going can change: a stopped or failed
        // one stays as it is until it is resumed.
        let running = runs
            .iter()
            .filter(|run| run.head.state == crate::report::RunState::Running)
            .count();
        let watching = args.watch.filter(|_| running > 0);
        if args.watch.is_some() && running == 0 && partial > 0 {
            super::complain(
                "note: ",
                "no run is still going (the partial ones stopped or failed): drawn once; \
                 --resume a run, then watch it again",
            );
        }
        let drawing = html::Drawing {
            at: std::time::SystemTime::now(),
            refresh_secs: watching,
        };
        let page = match runs.as_slice() {
            [run] => html::render_run(run, &drawing),
            runs => html::render_arms(runs, &drawing),
        };
        write_output_file(&out, page.as_bytes(), None)?;
        let state = match partial {
            0 => String::new(),
            n => format!(", {n} partial"),
        };
        say(&format!(
            "sandloop report: {} ({} bytes, {} run{}{state})",
            out.display(),
            page.len(),
            runs.len(),
            if runs.len() == 1 { "" } else { "s" }
        ));
        if args.open && !opened {
            open(&out);
        }
        opened = true;
        match watching {
            Some(secs) => std::thread::sleep(std::time::Duration::from_secs(secs.into())),
            None => return Ok(()),
        }
    }
}

/// Every run directory's report figures; a missing or damaged file is bad
/// input naming it.
fn load_runs(dirs: &[PathBuf]) -> Result<Vec<RunReport>, CliError> {
    dirs.iter()
        .map(|dir| RunReport::load(dir).map_err(|error| CliError::Input(error.to_string())))
        .collect()
}

/// Open `path` with `xdg-open`, or say where it is when that cannot run.
fn open(path: &Path) {
    let opened = std::process::Command::new("xdg-open")
        .arg(path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !opened {
        say(&format!(
            "open {} in a browser (xdg-open is unavailable)",
            path.display()
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(runs: &[&str], out: Option<&str>) -> ReportArgs {
        ReportArgs {
            runs: runs.iter().map(PathBuf::from).collect(),
            out: out.map(PathBuf::from),
            open: false,
            watch: None,
        }
    }

    #[test]
    fn the_report_goes_beside_one_run_or_to_the_current_directory_for_several() {
        assert_eq!(
            report_path(&args(&["runs/a"], None)),
            Path::new("runs/a/report.html")
        );
        assert_eq!(
            report_path(&args(&["a", "b"], None)),
            Path::new("report.html")
        );
        assert_eq!(
            report_path(&args(&["a", "b"], Some("x.html"))),
            Path::new("x.html")
        );
    }

    #[test]
    fn a_missing_run_directory_is_bad_input_naming_its_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nothing");
        let error = report(ReportArgs {
            runs: vec![missing.clone()],
            out: None,
            open: false,
            watch: Some(1),
        })
        .unwrap_err();
        match error {
            CliError::Input(message) => assert!(
                message.contains(&missing.join("manifest.json").display().to_string()),
                "{message}"
            ),
            other => panic!("expected bad input, got {other:?}"),
        }
    }
}
