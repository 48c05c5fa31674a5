//! A notice while a component compiles. The first load of a component
//! compiles it to native code — 10 to 40 s for one that embeds an
//! interpreter — and that much silence reads as a hang.
//!
//! Nothing is said when the work is done within [`NOTICE_AFTER`] (a
//! component loaded from the cache). Past it, stderr says what is being
//! compiled and whether the result is kept: a spinner with the elapsed time
//! on a terminal, one line otherwise; when the work ends, one line says how
//! long it took.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// How long a load may take before the notice appears.
pub const NOTICE_AFTER: Duration = Duration::from_millis(800);

/// [`NOTICE_AFTER`], or the milliseconds `SANDLOOP_COMPILE_NOTICE_MS` gives
/// (`0`: always say it).
fn notice_after() -> Duration {
    std::env::var("SANDLOOP_COMPILE_NOTICE_MS")
        .ok()
        .and_then(|ms| ms.trim().parse().ok())
        .map_or(NOTICE_AFTER, Duration::from_millis)
}

/// Runs `work` (the load of `component`), saying on stderr that it is
/// compiling when it takes longer than [`NOTICE_AFTER`] (or
/// `SANDLOOP_COMPILE_NOTICE_MS`). `what` names the
/// compile (`NAME` or `NAME for snapshot forks`); `cached` says whether the
/// result is kept for later runs (not with `--no-cache`); `quiet` (`--json`)
/// says nothing.
pub fn while_compiling<T>(
    component: &Path,
    what: &str,
    cached: bool,
    quiet: bool,
    work: impl FnOnce() -> T,
) -> T {
    if quiet {
        return work();
    }
    let name = component
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| component.display().to_string());
    let name = sandloop_core::terminal::for_terminal(&name);
    let what = what.replace("NAME", &name);
    let kept = if cached {
        "first run; cached afterwards"
    } else {
        "--no-cache: compiled every run"
    };
    let after = notice_after();
    let doing = format!("compiling {what}");
    let (done, finished) = mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let notice = scope.spawn(move || {
            let started = Instant::now();
            if finished.recv_timeout(after) != Err(mpsc::RecvTimeoutError::Timeout) {
                return;
            }
            let heading = format!("compiling {what} ({kept})");
            if std::io::stderr().is_terminal() {
                let bar = ProgressBar::new_spinner().with_message(heading);
                bar.set_style(
                    ProgressStyle::with_template("{spinner} {msg} · {elapsed}")
                        .expect("static template"),
                );
                bar.enable_steady_tick(Duration::from_millis(120));
                super::interrupt::set_spinner(Some(bar.clone()));
                let _ = finished.recv();
                super::interrupt::set_spinner(None);
                bar.finish_and_clear();
            } else {
                eprintln!("{heading}…");
                let _ = finished.recv();
            }
            eprintln!(
                "compiled {what} in {:.1} s",
                started.elapsed().as_secs_f64()
            );
        });
        let result = super::interrupt::while_interruptible(&doing, work);
        let _ = done.send(());
        let _ = notice.join();
        result
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_and_slow_work_both_return_their_result() {
        let path = Path::new("/tmp/adapter.wasm");
        assert_eq!(while_compiling(path, "NAME", true, false, || 7), 7);
        assert_eq!(while_compiling(path, "NAME", true, true, || 8), 8);
        let slow = while_compiling(path, "NAME", false, false, || {
            std::thread::sleep(NOTICE_AFTER + Duration::from_millis(100));
            9
        });
        assert_eq!(slow, 9);
    }
}
