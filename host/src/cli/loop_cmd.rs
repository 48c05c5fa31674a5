//! `sandloop loop`: scaffold a loop, run it (coordinator and one worker in
//! this process), and look at or stop it from another shell.

use std::path::Path;
use std::sync::Arc;

use sandloop_core::terminal::one_line;
use serde_json::json;

use super::args::{
    LoopCommand, LoopInitArgs, LoopRepoArgs, LoopRunArgs, LoopServeArgs, LoopTokenArgs,
    LoopWorkerArgs,
};
use super::{CliError, say};
use crate::coordinator::auth::{
    Token, create_token_file, default_token_file, loose_permissions_warning,
};
use crate::coordinator::config::SANDLOOP_DIRNAME;
use crate::coordinator::endpoints::Endpoints;
use crate::coordinator::http_server::{self, ServeOptions, Shutdown};
use crate::coordinator::http_worker::{TransportError, WorkerOptions};
use crate::coordinator::local::{self, LocalError, lock_coordinator, open_checked};
use crate::coordinator::models::LoopStatus;
use crate::coordinator::scaffold::{self, ScaffoldError};
use crate::coordinator::service::{Coordinator, Start};
use crate::coordinator::worker::StepRunner;
use crate::coordinator::worker::WorkerError;
use crate::sandbox::workflow::WorkflowSteps;

/// Run a `sandloop loop` command.
pub fn run(command: LoopCommand) -> Result<(), CliError> {
    // `init` and `token` may make a new repository's directory; the others
    // work in an existing one.
    let existing = match &command {
        LoopCommand::Init(_) | LoopCommand::Token(_) => None,
        LoopCommand::Run(args) => Some(&args.repo),
        LoopCommand::Serve(args) => Some(&args.repo),
        LoopCommand::Worker(args) => Some(&args.repo),
        LoopCommand::Status(args) | LoopCommand::Stop(args) => Some(&args.repo),
    };
    if let Some(repo) = existing {
        check_repo(repo)?;
    }
    match command {
        LoopCommand::Init(args) => init(args),
        LoopCommand::Run(args) => run_loop(args),
        LoopCommand::Serve(args) => serve(args),
        LoopCommand::Worker(args) => worker(args),
        LoopCommand::Status(args) => status(args),
        LoopCommand::Stop(args) => stop(args),
        LoopCommand::Token(args) => token(args),
    }
}

/// Refuse a `--repo` that is not an existing directory, naming it, before
/// a command that works inside one looks for its files.
fn check_repo(repo: &Path) -> Result<(), CliError> {
    match std::fs::metadata(repo) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(CliError::Input(format!(
            "--repo {}: not a directory",
            repo.display()
        ))),
        Err(error) => Err(CliError::Input(format!(
            "--repo {}: {error}",
            repo.display()
        ))),
    }
}

/// Write a new random token to `path` and say how to use it.
fn write_token(path: &Path) -> Result<(), CliError> {
    create_token_file(path).map_err(|error| match &error {
        crate::coordinator::auth::TokenError::Create { source, .. }
            if source.kind() == std::io::ErrorKind::AlreadyExists =>
        {
            CliError::Input(format!(
                "{} exists; a token file is never overwritten (remove it first to replace the token)",
                path.display()
            ))
        }
        _ => CliError::Failed(error.to_string()),
    })?;
    say(&format!(
        "token written to {} (mode 0600): serve with `sandloop loop serve --token-file {0}` \
         and give each worker the same file (`sandloop loop worker --token-file FILE`)",
        path.display()
    ));
    Ok(())
}

fn token(args: LoopTokenArgs) -> Result<(), CliError> {
    let path = match args.out {
        Some(path) => path,
        None => {
            let dir = args.repo.join(SANDLOOP_DIRNAME);
            if !dir.is_dir() {
                return Err(CliError::Input(format!(
                    "{} has no loop (no {SANDLOOP_DIRNAME}/); give --out FILE, or run \
                     `sandloop loop init` first",
                    args.repo.display()
                )));
            }
            default_token_file(&args.repo)
        }
    };
    write_token(&path)
}

/// The token of `--token-file`, read and checked (exit 2 naming the
/// file); a warning when others may read it.
fn read_token(path: Option<&Path>) -> Result<Option<Token>, CliError> {
    let Some(path) = path else {
        return Ok(None);
    };
    let token = Token::from_file(path).map_err(|error| CliError::Input(error.to_string()))?;
    if let Some(warning) = loose_permissions_warning(path) {
        tracing::warn!("{warning}");
    }
    Ok(Some(token))
}

impl From<LocalError> for CliError {
    fn from(error: LocalError) -> Self {
        match error {
            LocalError::Refused(message) => CliError::Input(message),
            LocalError::Failed(message) => CliError::Failed(message),
        }
    }
}

fn init(args: LoopInitArgs) -> Result<(), CliError> {
    let template = scaffold::find(&args.template).map_err(CliError::Input)?;
    // The plugin is loaded as `loop run` will load it, so a component that
    // is not a workflow plugin is refused before anything is written.
    let bytes = WorkflowSteps::new(crate::sandbox::config::default_cache_dir())
        .check_plugin(&args.plugin)
        .map_err(|error| CliError::Input(format!("--plugin: {error}; nothing was written")))?;
    let created =
        scaffold::write_loop(&args.repo, template, &bytes).map_err(|error| match error {
            ScaffoldError::HasLoop(_) => CliError::Input(error.to_string()),
            ScaffoldError::File(error) => error.into(),
            ScaffoldError::Directory { .. } => CliError::Failed(error.to_string()),
        })?;
    say("created:");
    for path in created {
        say(&format!("  {path}"));
    }
    say(template.next_steps);
    if args.repo != std::path::Path::new(".") {
        say(&format!("(with --repo {})", args.repo.display()));
    }
    if args.token {
        write_token(&default_token_file(&args.repo))?;
    }
    Ok(())
}

/// Say on stderr how the loop was found: a resumed session, or an ended
/// loop archived and a new session started (what `--resume` does with a
/// loop that has already ended).
fn report_start(coordinator: &Coordinator, resume: bool) {
    match coordinator.start() {
        Start::Fresh { .. } => {}
        Start::Resumed { session_id } => {
            super::complain("sandloop loop: resuming session ", session_id);
        }
        Start::AfterFinished {
            previous_session_id,
            previous_status,
            archive,
            session_id,
        } => {
            let archived = archive
                .as_ref()
                .map(|path| format!(" (state archived as {})", path.display()))
                .unwrap_or_default();
            let note = if resume {
                "; --resume continues only a running loop"
            } else {
                ""
            };
            super::complain(
                "",
                &format!(
                    "sandloop loop: the previous loop (session {previous_session_id}) had already ended \
                     ({previous_status}){archived}; starting a new session {session_id}{note}"
                ),
            );
        }
    }
}

fn run_loop(args: LoopRunArgs) -> Result<(), CliError> {
    super::check_cache_flag(args.cache_dir.as_deref())?;
    let repo = &args.repo;
    let _lock = lock_coordinator(repo)?;
    let cache = args
        .cache_dir
        .clone()
        .or_else(crate::sandbox::config::default_cache_dir);
    let runner = StepRunner::new(repo, Arc::new(WorkflowSteps::new(cache)));
    let coordinator = open_checked(
        repo,
        args.resume,
        args.workflow_set.as_deref(),
        args.goal_file.as_deref(),
        &runner,
    )?;
    report_start(&coordinator, args.resume);
    let task = local::drive(&coordinator, &runner, |finished| {
        if !args.json {
            say(&history_line(
                finished.iteration,
                &finished.workflow_id,
                finished.success,
                finished.text.as_deref(),
                finished.error.as_deref(),
            ));
        }
    })?;
    let state = coordinator.state().map_err(LocalError::from)?;
    let reason = task.stop_reason().unwrap_or_default().to_string();
    if args.json {
        say(
            &serde_json::to_string_pretty(&json!({"stop_reason": reason, "state": state}))
                .expect("serialises"),
        );
    } else {
        let (iterations, session) = state
            .as_ref()
            .map(|s| (s.iteration_count, s.active_session_id.clone()))
            .unwrap_or_default();
        say(&format!(
            "sandloop loop: stopped ({reason}) after {iterations} iterations, session {session}"
        ));
    }
    match state.map(|state| state.status) {
        Some(LoopStatus::Failed) => Err(CliError::Failed(format!("the loop failed: {reason}"))),
        Some(LoopStatus::MaxTurns) => Err(CliError::Failed(
            "the loop used all its turns without meeting the goal".into(),
        )),
        _ => Ok(()),
    }
}

/// One line of a loop's history for the terminal: iteration, workflow,
/// then the step's text (`ok` without one) or `failed: ERROR`, on one line
/// with control characters escaped.
fn history_line(
    iteration: u32,
    workflow_id: &str,
    success: bool,
    text: Option<&str>,
    error: Option<&str>,
) -> String {
    let outcome = if success {
        one_line(text.unwrap_or("ok")).into_owned()
    } else {
        format!("failed: {}", one_line(error.unwrap_or_default()))
    };
    format!("  {iteration:>4}  {:<24} {outcome}", one_line(workflow_id))
}

fn serve(args: LoopServeArgs) -> Result<(), CliError> {
    let _lock = lock_coordinator(&args.repo)?;
    let token = read_token(args.token_file.as_deref())?;
    http_server::check_exposure(&args.listen, token.is_some(), &args.repo)
        .map_err(CliError::Input)?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(
            http_server::tls_config(cert, key)
                .map_err(|error| CliError::Input(error.to_string()))?,
        ),
        _ => None,
    };
    // Bind and check first: a serve that cannot start leaves no loop behind.
    let listener =
        http_server::bind(&args.listen).map_err(|error| CliError::Input(error.to_string()))?;
    let runner = StepRunner::new(
        &args.repo,
        Arc::new(WorkflowSteps::new(
            crate::sandbox::config::default_cache_dir(),
        )),
    );
    let coordinator = open_checked(
        &args.repo,
        args.resume,
        args.workflow_set.as_deref(),
        args.goal_file.as_deref(),
        &runner,
    )?;
    report_start(&coordinator, args.resume);
    let address = listener
        .local_addr()
        .map_or_else(|_| args.listen.clone(), |address| address.to_string());
    let scheme = if tls.is_some() { "https" } else { "http" };
    let guard = if token.is_some() {
        "bearer token required"
    } else {
        "no token: loopback only"
    };
    say(&format!(
        "sandloop loop: coordinator listening on {scheme}://{address} (POST /register, POST /finished, \
         GET /status; {guard}); Ctrl-C stops it"
    ));
    let shutdown = Shutdown::new();
    {
        let shutdown = shutdown.clone();
        let asked = std::sync::atomic::AtomicBool::new(false);
        super::interrupt::on_interrupt(move || {
            if asked.swap(true, std::sync::atomic::Ordering::SeqCst) {
                std::process::exit(130);
            }
            super::complain(
                "\n",
                "sandloop loop: stopping: finishing the requests in progress (again to stop at once)",
            );
            shutdown.trigger();
        });
    }
    let endpoints = Arc::new(Endpoints::new(
        Arc::new(coordinator),
        std::time::Duration::from_secs(args.lease_secs),
    ));
    let options = ServeOptions {
        token,
        tls,
        ..ServeOptions::default()
    };
    http_server::serve(endpoints, listener, options, &shutdown)
        .map_err(|error| CliError::Failed(error.to_string()))?;
    say("sandloop loop: coordinator stopped; `sandloop loop serve --resume` continues the loop");
    Ok(())
}

fn worker(args: LoopWorkerArgs) -> Result<(), CliError> {
    let url = args.coordinator.trim();
    crate::coordinator::http_worker::check_coordinator_url(url).map_err(CliError::Input)?;
    let options = WorkerOptions {
        token: read_token(args.token_file.as_deref())?,
        ca_file: args.ca_file.clone(),
    };
    super::check_cache_flag(args.cache_dir.as_deref())?;
    let cache = args
        .cache_dir
        .clone()
        .or_else(crate::sandbox::config::default_cache_dir);
    let stop = crate::coordinator::http_worker::run_worker(
        &args.repo,
        url,
        &options,
        Arc::new(WorkflowSteps::new(cache)),
    )
    .map_err(|error| match error {
        TransportError::Worker(WorkerError::UnsafeTask(_)) | TransportError::CaFile { .. } => {
            CliError::Input(error.to_string())
        }
        other => CliError::Failed(other.to_string()),
    })?;
    say(&format!(
        "sandloop loop worker: the coordinator said stop ({})",
        stop.stop_reason().unwrap_or_default()
    ));
    Ok(())
}

fn status(args: LoopRepoArgs) -> Result<(), CliError> {
    let Some(state) = local::latest_state(&args.repo)? else {
        return Err(CliError::Input(format!(
            "no loop state found in {}; start one with `sandloop loop run`",
            args.repo.display()
        )));
    };
    if args.json {
        say(&serde_json::to_string_pretty(&state).expect("serialises"));
        return Ok(());
    }
    say(&format!("status: {}", state.status));
    say(&format!("session: {}", state.active_session_id));
    say(&format!("iteration_count: {}", state.iteration_count));
    match &state.current_task {
        None => say("current_task: none"),
        Some(task) => say(&format!(
            "current_task: {} (iteration {}, session {}, started {})",
            task.workflow_id, task.iteration, task.session_id, task.started_at
        )),
    }
    say(&format!(
        "stop_reason: {}",
        state.stop_reason.as_deref().unwrap_or("none")
    ));
    for entry in state.history.iter().rev().take(5).rev() {
        say(&history_line(
            entry.iteration,
            &entry.workflow_id,
            entry.success,
            None,
            entry.error.as_deref(),
        ));
    }
    Ok(())
}

/// Asks a running loop to stop before its next step; a loop that has
/// already ended is left as it is, and says why it ended.
fn stop(args: LoopRepoArgs) -> Result<(), CliError> {
    let ended = local::request_stop(&args.repo)?;
    if args.json {
        let report = json!({"stop_requested": ended.is_none(), "stop_reason": ended});
        say(&report.to_string());
        return Ok(());
    }
    match ended {
        None => say("stop requested; the loop stops before its next step"),
        Some(reason) => say(&format!(
            "the loop has already ended ({reason}); nothing to stop"
        )),
    }
    Ok(())
}
