//! Ctrl-C (and `SIGTERM`): one process-wide handler, installed on first
//! use, that clears a compile spinner still on the terminal and then runs
//! what the command asked for.
//!
//! A command names its action with [`on_interrupt`]; the first one named
//! wins, so `sandloop try` (which runs `run` inside) keeps its own. Before
//! any action is named — while a component compiles, say — Ctrl-C prints
//! what it stopped ([`while_interruptible`]) and exits 130, instead of
//! dying by the signal with a spinner line left half drawn.

use std::sync::{Mutex, Once, OnceLock};

use indicatif::ProgressBar;

type Action = Box<dyn Fn() + Send + Sync>;

/// The command's action, set once.
static ACTION: OnceLock<Action> = OnceLock::new();
/// The spinner on the terminal now, cleared before anything is printed.
static SPINNER: Mutex<Option<ProgressBar>> = Mutex::new(None);
/// What is being done before an action is named (`compiling NAME`).
static DOING: Mutex<Option<String>> = Mutex::new(None);

static INSTALL: Once = Once::new();

/// Installs the handler (once per process).
fn install() {
    INSTALL.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            if let Some(bar) = SPINNER.lock().unwrap_or_else(|p| p.into_inner()).take() {
                bar.finish_and_clear();
            }
            if let Some(action) = ACTION.get() {
                action();
                return;
            }
            let doing = DOING.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let message = match doing {
                Some(doing) => format!("while {doing}; nothing was written"),
                None => "nothing was written".to_owned(),
            };
            super::complain("\ninterrupted ", &message);
            std::process::exit(130);
        });
    });
}

/// Runs `action` on Ctrl-C or `SIGTERM` from now on, unless an action was
/// named before (the first wins). The action exits the process or lets
/// the command stop on its own.
pub fn on_interrupt(action: impl Fn() + Send + Sync + 'static) {
    install();
    let _ = ACTION.set(Box::new(action));
}

/// Runs `work`, saying `interrupted while DOING; nothing was written`
/// (exit 130) if Ctrl-C comes first and no action is named yet.
pub fn while_interruptible<T>(doing: &str, work: impl FnOnce() -> T) -> T {
    install();
    *DOING.lock().unwrap_or_else(|p| p.into_inner()) = Some(doing.to_owned());
    let result = work();
    *DOING.lock().unwrap_or_else(|p| p.into_inner()) = None;
    result
}

/// Registers `bar` as the spinner on the terminal (cleared on Ctrl-C);
/// `None` when it is gone.
pub fn set_spinner(bar: Option<ProgressBar>) {
    *SPINNER.lock().unwrap_or_else(|p| p.into_inner()) = bar;
}
