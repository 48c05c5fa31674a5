//! What a guest said as it crashed: the exception or panic and the
//! innermost place it names, read from the stderr the guest wrote during
//! the failed call.
//!
//! Each language's runtime prints its crash to stderr before the call
//! traps, in its own shape:
//!
//! - **Python** (componentize-py): a traceback, then the runtime's own
//!   panic "Python function threw an unexpected exception". The traceback's
//!   last exception line and innermost frame are kept (`KeyError: 'text'`
//!   at `app.py:42`), not the runtime's panic.
//! - **JavaScript** (componentize-js): the engine prints nothing for an
//!   uncaught exception, so the guest glue (`guard` in `sandloop-replay.js`
//!   and in the scaffold) prints `uncaught exception: TypeError: …` followed
//!   by the stack, one `function@file:line:column` frame a line.
//! - **Rust**: the panic hook's `panicked at src/lib.rs:9:5:` and the
//!   message on the next lines.
//! - **C and Zig** (guest-sdk/c): `SL_PANIC` and `sl_panic_at` print
//!   `adapter.c:42: panic: MESSAGE`; wasi-libc's failed `assert` prints
//!   `Assertion failed: EXPR (FILE: FUNCTION: LINE)`.
//!
//! Anything else keeps its last two non-empty stderr lines. The summary
//! leads the error record's `adapter_error.message`, which keeps 240
//! characters, so the place comes first and the exception's own message is
//! cut at [`MAX_WHAT_CHARS`].

use std::fmt;

use super::output::CallOutput;
use sandloop_core::ellipsis::cut_chars;
use sandloop_core::episode::adapter::{AdapterError, ErrorType};

/// The longest exception or panic message kept, in characters.
pub const MAX_WHAT_CHARS: usize = 160;

/// A crash read from a guest's stderr.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Crash {
    /// `file:line` of the innermost frame in the adapter's own code, when
    /// the output names one (`app.py:42`, `adapter.js:209`,
    /// `src/lib.rs:9`).
    pub place: Option<String>,
    /// The exception's type and message (`KeyError: 'text'`), the panic
    /// (`panic: index out of bounds`), or the last stderr lines.
    pub what: String,
}

impl fmt::Display for Crash {
    /// `PLACE: WHAT`, or `WHAT` without a place.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.place {
            Some(place) => write!(f, "{place}: {}", self.what),
            None => f.write_str(&self.what),
        }
    }
}

/// The crash the guest reported on stderr during one call, if it wrote
/// anything there. Stdout and `log` entries are not read.
pub fn crash_of(output: &CallOutput) -> Option<Crash> {
    let stderr: String = output
        .entries
        .iter()
        .filter(|entry| entry.stream == "stderr")
        .map(|entry| entry.text.as_str())
        .collect();
    read_crash(&stderr)
}

/// A failed call's message with what the guest said as it crashed: a trap
/// leads with the crash (`app.py:42: KeyError: 'text'; wasm trap: …`),
/// which is what the author needs; a deadline or a limit keeps its own
/// message first.
pub fn with_crash(classified: &AdapterError, crash: &Crash) -> String {
    match classified.error_type {
        ErrorType::Trap => format!("{crash}; {}", classified.message),
        _ => format!("{} (guest stderr: {crash})", classified.message),
    }
}

/// [`crash_of`] on stderr's text.
pub fn read_crash(stderr: &str) -> Option<Crash> {
    python_traceback(stderr)
        .or_else(|| js_uncaught(stderr))
        .or_else(|| rust_panic(stderr))
        .or_else(|| c_panic(stderr))
        .or_else(|| c_assert(stderr))
        .or_else(|| last_lines(stderr))
}

/// The last traceback's exception line and its innermost frame outside
/// the standard library.
fn python_traceback(stderr: &str) -> Option<Crash> {
    const HEADER: &str = "Traceback (most recent call last):";
    let start = stderr.rfind(HEADER)? + HEADER.len();
    let mut frames = Vec::new();
    let mut what = None;
    for line in stderr[start..].lines() {
        if let Some(frame) = line.trim_start().strip_prefix("File \"") {
            frames.push(frame);
        } else if !line.is_empty() && !line.starts_with(char::is_whitespace) {
            what = Some(line);
            break;
        }
    }
    let place_of = |frame: &&str| {
        let (path, rest) = frame.split_once('"')?;
        let line = rest.strip_prefix(", line ")?;
        let number: String = line.chars().take_while(char::is_ascii_digit).collect();
        (!number.is_empty()).then(|| format!("{}:{number}", short_path(path)))
    };
    let own = |frame: &&&str| {
        let path = frame.split('"').next().unwrap_or_default();
        // componentize-py bundles the standard library under `/python/`;
        // a CPython install keeps it under `lib/python3.x`.
        !path.starts_with('<') && !path.starts_with("/python/") && !path.contains("/lib/python")
    };
    let place = frames
        .iter()
        .rev()
        .find(own)
        .or(frames.last())
        .and_then(place_of);
    Some(Crash {
        place,
        what: cut(what?.trim()),
    })
}

/// The glue's `uncaught exception: …` line and the first stack frame in
/// the adapter's own files (not the bindings' generated `initializer.js`).
fn js_uncaught(stderr: &str) -> Option<Crash> {
    const MARK: &str = "uncaught exception: ";
    let start = stderr.rfind(MARK)?;
    let mut lines = stderr[start + MARK.len()..].lines();
    let what = lines.next()?.trim();
    let place = lines
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.trim().rsplit_once('@').map(|(_, at)| at))
        .find(|at| !at.contains("initializer.js"))
        .and_then(|at| {
            // file:line:column; the file may itself hold colons (a URL).
            let (file_line, _column) = at.rsplit_once(':')?;
            let (file, line) = file_line.rsplit_once(':')?;
            line.parse::<u64>()
                .ok()
                .map(|line| format!("{}:{line}", short_path(file)))
        });
    Some(Crash {
        place,
        what: cut(what),
    })
}

/// A Rust panic: `panicked at FILE:LINE:COL:` and the message below it.
fn rust_panic(stderr: &str) -> Option<Crash> {
    const MARK: &str = "panicked at ";
    let start = stderr.rfind(MARK)? + MARK.len();
    let mut lines = stderr[start..].lines();
    let at = lines.next()?.trim().strip_suffix(':')?;
    let mut parts = at.rsplitn(3, ':');
    let (_column, line, file) = (parts.next()?, parts.next()?, parts.next()?);
    line.parse::<u64>().ok()?;
    let message: Vec<&str> = lines
        .map(str::trim)
        .take_while(|line| !line.is_empty() && !line.starts_with("note:"))
        .collect();
    Some(Crash {
        place: Some(format!("{file}:{line}")),
        what: cut(&format!("panic: {}", message.join(" "))),
    })
}

/// The last `FILE:LINE: panic: MESSAGE` line (guest-sdk/c's `SL_PANIC`).
fn c_panic(stderr: &str) -> Option<Crash> {
    stderr.lines().rev().find_map(|line| {
        let (at, message) = line.trim().split_once(": panic: ")?;
        let (file, number) = at.rsplit_once(':')?;
        number.parse::<u64>().ok()?;
        (!file.is_empty() && !file.contains(' ')).then(|| Crash {
            place: Some(format!("{file}:{number}")),
            what: cut(&format!("panic: {message}")),
        })
    })
}

/// wasi-libc's failed `assert`: `Assertion failed: EXPR (FILE: FUNCTION:
/// LINE)`.
fn c_assert(stderr: &str) -> Option<Crash> {
    const MARK: &str = "Assertion failed: ";
    let line = stderr.lines().rev().find(|line| line.contains(MARK))?;
    let rest = &line[line.find(MARK)? + MARK.len()..];
    let open = rest.rfind(" (")?;
    let (expression, place) = (
        &rest[..open],
        rest[open + 2..].trim_end().strip_suffix(')')?,
    );
    let mut parts = place.split(": ");
    let (file, _function, number) = (parts.next()?, parts.next()?, parts.next()?);
    number.parse::<u64>().ok()?;
    Some(Crash {
        place: Some(format!("{file}:{number}")),
        what: cut(&format!("assertion failed: {expression}")),
    })
}

/// The last two non-empty stderr lines (a `note:` line is the runtime's
/// advice, not the crash).
fn last_lines(stderr: &str) -> Option<Crash> {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("note:"))
        .collect();
    let tail = &lines[lines.len().saturating_sub(2)..];
    (!tail.is_empty()).then(|| Crash {
        place: None,
        what: cut(&tail.join(" ")),
    })
}

/// A source path as the author knows it: componentize-py's `/0/app.py`
/// (its numbered source root) is `app.py`.
fn short_path(path: &str) -> &str {
    path.strip_prefix('/')
        .and_then(|rest| rest.split_once('/'))
        .filter(|(root, _)| !root.is_empty() && root.bytes().all(|b| b.is_ascii_digit()))
        .map_or(path, |(_, rest)| rest)
}

fn cut(text: &str) -> String {
    cut_chars(text, MAX_WHAT_CHARS).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crash(stderr: &str) -> String {
        read_crash(stderr).expect("a crash").to_string()
    }

    #[test]
    fn a_python_traceback_gives_its_exception_and_innermost_own_frame() {
        let stderr = "Traceback (most recent call last):\n  \
            File \"/0/sandloop_replay.py\", line 448, in run_replay_suffix\n  \
            File \"/0/app.py\", line 218, in episode_record\n  \
            File \"/python/lib/python3.12/json/__init__.py\", line 346, in loads\n  \
            File \"/python/json/decoder.py\", line 361, in raw_decode\n\
            KeyError: 'text'\n\n\
            thread '<unnamed>' (1) panicked at runtime/src/lib.rs:1293:29:\n\
            Python function threw an unexpected exception\n\
            note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(crash(stderr), "app.py:218: KeyError: 'text'");
    }

    #[test]
    fn a_chained_python_exception_reports_the_last_one_and_its_source_lines_are_skipped() {
        let stderr = "Traceback (most recent call last):\n  \
            File \"/0/app.py\", line 10, in execute\n\
            KeyError: 'x'\n\n\
            During handling of the above exception, another exception occurred:\n\n\
            Traceback (most recent call last):\n  \
            File \"/0/app.py\", line 12, in execute\n    \
            raise ValueError(\"no x\")\n    \
            ^^^^^^^^^^^^^^^^^^^^^^\n\
            ValueError: no x\n";
        assert_eq!(crash(stderr), "app.py:12: ValueError: no x");
    }

    #[test]
    fn a_guarded_javascript_exception_gives_its_error_and_first_own_frame() {
        let stderr = "uncaught exception: TypeError: item.text is undefined\n\
            wordsOf@adapter.js:61:9\n\
            execute@adapter.js:40:17\n\
            export_episode_0_2_0$execute@/tmp/33059b6ee1cb/sources/initializer.js:1409:28\n\n\
            expected a string, received [undefined]\n\
            Redirecting call to abort() to mozalloc_abort\n";
        assert_eq!(
            crash(stderr),
            "adapter.js:61: TypeError: item.text is undefined"
        );
        let thrown_string = "uncaught exception: just a string\n\nRedirecting call to abort()\n";
        assert_eq!(crash(thrown_string), "just a string");
    }

    #[test]
    fn a_rust_panic_gives_its_message_and_place() {
        let stderr = "\nthread '<unnamed>' panicked at src/lib.rs:9:5:\n\
            trap_execute requested\nnote: run with `RUST_BACKTRACE=1`\n";
        assert_eq!(crash(stderr), "src/lib.rs:9: panic: trap_execute requested");
    }

    #[test]
    fn a_c_panic_or_failed_assert_gives_its_place_whatever_was_printed_before() {
        let stderr = "reading item a\nadapter.c:86: panic: asked to crash on 'x: y'\n";
        assert_eq!(
            crash(stderr),
            "adapter.c:86: panic: asked to crash on 'x: y'"
        );
        let stderr = "some log\nAssertion failed: n > 0 (adapter.c: count_words: 42)\n";
        assert_eq!(crash(stderr), "adapter.c:42: assertion failed: n > 0");
        // Prose that merely contains ": panic: " is not a place.
        assert_eq!(
            crash("the word was: panic: no\n"),
            "the word was: panic: no"
        );
    }

    #[test]
    fn other_output_keeps_its_last_two_lines_and_silence_is_none() {
        assert_eq!(crash("one\ntwo\n\nthree\nnote: advice\n"), "two three");
        assert_eq!(read_crash("\n  \n"), None);
    }

    #[test]
    fn a_long_message_is_cut_so_the_place_survives_the_records_limit() {
        let long = "x".repeat(500);
        let text = crash(&format!(
            "Traceback (most recent call last):\n  File \"/0/app.py\", line 3, in f\nValueError: {long}\n"
        ));
        assert!(text.starts_with("app.py:3: ValueError: xxx"), "{text}");
        assert_eq!(
            text.chars().count(),
            "app.py:3: ".len() + MAX_WHAT_CHARS + 1
        );
    }

    #[test]
    fn only_a_numbered_source_root_is_taken_off_a_path() {
        assert_eq!(short_path("/0/app.py"), "app.py");
        assert_eq!(short_path("/12/pkg/util.py"), "pkg/util.py");
        assert_eq!(short_path("/home/me/app.py"), "/home/me/app.py");
        assert_eq!(short_path("adapter.js"), "adapter.js");
    }
}
