//! Command-line arguments (clap derive).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use sandloop_sandbox::snapshot::ForkKind;

use crate::scaffold::Lang;

/// sandloop — run sandboxed WebAssembly exploration adapters. The `about`
/// line is also the man page's NAME line (`sandloop man`).
#[derive(Debug, Parser)]
#[command(
    name = "sandloop",
    version,
    about = "Run sandboxed WebAssembly exploration adapters, and loops of workflow plugins",
    long_about = None
)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The `sandloop` commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run an adapter over seeds and variants, epoch after epoch, into a run directory.
    Run(Box<RunArgs>),
    /// Run a few items through an adapter and print each record and what
    /// its calls printed; nothing is written (an author's quick check).
    Try(TryArgs),
    /// Show a component's sha256, size, exports, imports and protocols; for
    /// one that does not fit the contract, which interface or function is
    /// missing, mistyped (expected and found WIT signature) or of another WIT
    /// version.
    Inspect(InspectArgs),
    /// Run one item of a finished run again from its nearest replay point
    /// (exit 0: the item succeeded; 1: it failed again; 2: bad input).
    Replay(ReplayArgs),
    /// Replay a failed item's suffix with candidate changes, each in its own
    /// isolated child of the nearest trusted replay point before the
    /// failure, and promote only the candidates that fix every fix target
    /// without regressing a guard (exit 0: one was promoted; 1: none was;
    /// 2: bad input).
    Counterfactual(CounterfactualArgs),
    /// Rank trace positions where new replay points would save the most replay time.
    Plan(PlanArgs),
    /// Write a run's report as one self-contained HTML file (charts inline,
    /// nothing fetched): novelty curve, value by family, economics, errors,
    /// replay, durations, manifest; several run directories are compared as
    /// arms.
    Report(ReportArgs),
    /// Drive a goal-directed loop of sandboxed workflow plugins.
    #[command(subcommand)]
    Loop(LoopCommand),
    /// Scaffold a new project (`sandloop new adapter NAME`).
    #[command(subcommand)]
    New(NewCommand),
    /// Print a shell completion script for bash, zsh or fish to stdout.
    Completions(CompletionsArgs),
    /// Print the man page (roff) to stdout, or write one page per command
    /// into a directory with `--out DIR`.
    Man(ManArgs),
    /// Run the units of distributed runs (`sandloop run --nats`), pulled
    /// from a NATS JetStream server, each in its own sandbox; runs until
    /// stopped.
    Worker(WorkerArgs),
    /// Look after what distributed runs keep on a NATS server: its
    /// streams' and buckets' figures, and removing a run's messages.
    #[command(subcommand)]
    Nats(NatsCommand),
}

/// `sandloop nats` commands.
#[derive(Debug, Subcommand)]
pub enum NatsCommand {
    /// Show, for each stream and object store bucket distributed runs use,
    /// its messages, bytes and limits, and the messages of each run.
    Status(NatsStatusArgs),
    /// Remove one run's queued units, results and replay states (--run),
    /// or those of every run older than a duration (--older-than); names
    /// what was removed.
    #[command(group(clap::ArgGroup::new("which").required(true).args(["run", "older_than"])))]
    Purge(NatsPurgeArgs),
}

/// The NATS server of a `sandloop nats` command.
#[derive(Debug, Args)]
pub struct NatsServerArgs {
    /// The NATS server (JetStream enabled): nats://HOST:4222,
    /// nats://USER:PASSWORD@HOST:4222, or tls://HOST:4222.
    #[arg(long, value_name = "URL")]
    pub nats: String,
    /// A NATS credentials file (nkey seed and user JWT).
    #[arg(long, value_name = "FILE")]
    pub nats_creds: Option<PathBuf>,
}

/// Options of `sandloop nats status`.
#[derive(Debug, Args)]
pub struct NatsStatusArgs {
    /// The server.
    #[command(flatten)]
    pub server: NatsServerArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Options of `sandloop nats purge` (give --run or --older-than).
#[derive(Debug, Args)]
pub struct NatsPurgeArgs {
    /// The server.
    #[command(flatten)]
    pub server: NatsServerArgs,
    /// The run whose messages to remove: summary.json's
    /// `distributed.run_id`, or a run `sandloop nats status` lists.
    #[arg(long, value_name = "ID")]
    pub run: Option<String>,
    /// Remove every run whose newest message is older than this (its
    /// queued units and results), and replay states stored before then:
    /// a number with s, m, h or d (`90m`, `2d`).
    #[arg(long, value_name = "DURATION")]
    pub older_than: Option<String>,
}

/// Options of `sandloop worker`.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The NATS server (JetStream enabled): nats://HOST:4222,
    /// nats://USER:PASSWORD@HOST:4222, or tls://HOST:4222.
    #[arg(long, value_name = "URL")]
    pub nats: String,
    /// A NATS credentials file (nkey seed and user JWT).
    #[arg(long, value_name = "FILE")]
    pub nats_creds: Option<PathBuf>,
    /// Offer a host directory to the units that need its guest path
    /// (repeatable): HOST::GUEST read-write, HOST::GUEST:ro read-only. A
    /// unit needing a guest path this worker does not offer is left to
    /// other workers.
    #[arg(long = "dir", value_name = "HOST::GUEST[:ro]")]
    pub dirs: Vec<String>,
    /// Offer this machine's environment variable NAME to the units that
    /// need it (a run's --env NAME; repeatable). A unit needing a variable
    /// this worker does not offer is left to other workers.
    #[arg(long = "env", value_name = "NAME")]
    pub env: Vec<String>,
    /// Units run at once, each in its own sandboxed instance (1 to 256).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub lanes: usize,
    /// Where fetched components and their compiled code are kept
    /// (default: $SANDLOOP_CACHE_DIR, $XDG_CACHE_HOME/sandloop or
    /// ~/.cache/sandloop).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// The name results and the run's summary show (default: host name and
    /// process id).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// How long to keep trying to reach the NATS server at start (not up
    /// yet, restarting), seconds; each try is said on stderr. 0 tries once.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub connect_timeout: u64,
}

/// `sandloop new` commands.
#[derive(Debug, Subcommand)]
pub enum NewCommand {
    /// Scaffold a working adapter project in PARENT/NAME (Rust, Python or
    /// JavaScript) with its own copy of wit/adapter.wit, sample items, and
    /// the commands to build and run it.
    Adapter(NewAdapterArgs),
}

/// Options of `sandloop new adapter`.
#[derive(Debug, Args)]
pub struct NewAdapterArgs {
    /// The project's name and directory: lowercase letters, digits and `-`,
    /// starting with a letter (e.g. `my-adapter`).
    #[arg(value_name = "NAME")]
    pub name: String,
    /// The language to write the adapter in.
    #[arg(long, value_enum, default_value_t = Lang::Rust)]
    pub lang: Lang,
    /// The directory to create the project in (default: the current directory).
    #[arg(long, value_name = "PARENT", default_value = ".")]
    pub dir: PathBuf,
}

/// `sandloop loop` commands.
#[derive(Debug, Subcommand)]
pub enum LoopCommand {
    /// Scaffold `sandloop-loop.toml`, a goal file and a workflow set using a plugin.
    Init(LoopInitArgs),
    /// Run the loop until its goal is met, a stop is asked for, or it runs out of turns.
    Run(LoopRunArgs),
    /// Serve the coordinator over HTTP for `sandloop loop worker` processes.
    Serve(LoopServeArgs),
    /// Pull tasks from a coordinator served over HTTP and run them.
    Worker(LoopWorkerArgs),
    /// Show the loop's state (works while it runs).
    Status(LoopRepoArgs),
    /// Ask a running loop to stop after its current step.
    Stop(LoopRepoArgs),
    /// Create a random bearer token file (mode 0600) for `loop serve` and
    /// its workers.
    Token(LoopTokenArgs),
}

/// Options of `sandloop loop token`.
#[derive(Debug, Args)]
pub struct LoopTokenArgs {
    /// The repository (default: the current directory).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub repo: PathBuf,
    /// Where to write the token (default: `.sandloop/token` in the
    /// repository). An existing file is never overwritten.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// The repository a loop lives in.
#[derive(Debug, Args)]
pub struct LoopRepoArgs {
    /// The repository (default: the current directory).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub repo: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Options of `sandloop loop init`.
#[derive(Debug, Args)]
pub struct LoopInitArgs {
    /// The repository (default: the current directory).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub repo: PathBuf,
    /// The workflow plugin component the template's workflows run (the
    /// `loop-steps` example for `count`, `llm-steps` for `openai`); copied
    /// to `.sandloop/plugins/`.
    #[arg(long, value_name = "FILE.wasm")]
    pub plugin: PathBuf,
    /// The template: `count` (plan, work, goal_check until a count is
    /// reached) or `openai` (draft and goal_check steps that ask an
    /// OpenAI-compatible chat-completions endpoint over HTTP).
    #[arg(long, default_value = "count")]
    pub template: String,
    /// Also create a random bearer token in `.sandloop/token` (mode 0600),
    /// for `loop serve --token-file` and its workers.
    #[arg(long)]
    pub token: bool,
}

/// Options of `sandloop loop serve`.
#[derive(Debug, Args)]
pub struct LoopServeArgs {
    /// The repository (default: the current directory).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub repo: PathBuf,
    /// Address to listen on. Any address but loopback needs --token-file.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// Require this bearer token (a file holding it; `sandloop loop token`
    /// creates one) on every request: `Authorization: Bearer TOKEN`.
    #[arg(long, value_name = "FILE", env = "SANDLOOP_LOOP_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Serve HTTPS with this PEM certificate chain (with --tls-key).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// How long a handed-out task belongs to its worker before another
    /// worker may take it over, seconds.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub lease_secs: u64,
    /// Continue a running loop (a child session that was running is
    /// resumed first). A loop that has already ended is not continued: its
    /// state is archived and a new session starts, as without --resume.
    #[arg(long)]
    pub resume: bool,
    /// Run this workflow set instead of the config's.
    #[arg(long, value_name = "SET")]
    pub workflow_set: Option<String>,
    /// Goal file instead of the config's (relative to the repository).
    #[arg(long, value_name = "FILE")]
    pub goal_file: Option<PathBuf>,
}

/// Options of `sandloop loop worker`.
#[derive(Debug, Args)]
pub struct LoopWorkerArgs {
    /// The repository, as this machine sees it (default: the current directory).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub repo: PathBuf,
    /// The coordinator's URL, e.g. http://127.0.0.1:8080.
    #[arg(long, value_name = "URL")]
    pub coordinator: String,
    /// Send the bearer token in this file (the coordinator's --token-file).
    #[arg(long, value_name = "FILE", env = "SANDLOOP_LOOP_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Trust only the PEM certificates in this file for an https://
    /// coordinator (e.g. its self-signed certificate); default: the public
    /// web's roots.
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Directory for compiled plugins (default: $SANDLOOP_CACHE_DIR, else the
    /// user cache dir).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

/// Options of `sandloop loop run`.
#[derive(Debug, Args)]
pub struct LoopRunArgs {
    /// The repository (default: the current directory).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub repo: PathBuf,
    /// Continue a running loop after a crash or Ctrl-C (a child session
    /// that was running is resumed first). A loop that has already ended is
    /// not continued: its state is archived and a new session starts, as
    /// without --resume.
    #[arg(long)]
    pub resume: bool,
    /// Run this workflow set instead of the config's.
    #[arg(long, value_name = "SET")]
    pub workflow_set: Option<String>,
    /// Goal file instead of the config's (relative to the repository).
    #[arg(long, value_name = "FILE")]
    pub goal_file: Option<PathBuf>,
    /// Directory for compiled plugins (default: $SANDLOOP_CACHE_DIR, else the
    /// user cache dir).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Print the final state as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Options of `sandloop replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The run directory (`--out` of `sandloop run`).
    #[arg(long = "run", value_name = "DIR")]
    pub run: PathBuf,
    /// The item to run again (its `item_id` in records.jsonl).
    #[arg(long, value_name = "ITEM_ID")]
    pub item: String,
    /// First trace sequence the replay must redo; default: where the item's suffix began.
    #[arg(long, value_name = "N")]
    pub from_sequence: Option<u64>,
    /// Replay the item as it ran in epoch N; default: its last epoch.
    #[arg(long, value_name = "N")]
    pub epoch: Option<u32>,
    /// Fidelity the result needs to be promotion eligible: exact,
    /// semantic_equivalent or best_effort. Points meeting it are chosen
    /// first; else the nearest weaker one (an observed-only replay).
    #[arg(long, value_name = "FIDELITY", default_value = "semantic_equivalent")]
    pub min_fidelity: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// The run's component, and where it is compiled.
    #[command(flatten)]
    pub component: RunComponentArgs,
}

/// Options of `sandloop counterfactual`.
#[derive(Debug, Args)]
pub struct CounterfactualArgs {
    /// The run directory (`--out` of `sandloop run`).
    #[arg(long = "run", value_name = "DIR")]
    pub run: PathBuf,
    /// The hypothesis (JSON): `hypothesis_id`, the failed `item_id` (and
    /// optionally its `epoch`), `first_affected_event_id` and
    /// `first_affected_sequence` on its trace, `fix_set`, `guard_set`,
    /// `candidates` and optionally `minimum_fidelity`.
    #[arg(long, value_name = "FILE")]
    pub hypothesis: PathBuf,
    /// Threads the candidates' children run on (1: one after another).
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub child_workers: u32,
    /// Print the result as JSON (the line appended to counterfactuals.jsonl).
    #[arg(long)]
    pub json: bool,
    /// The run's component, and where it is compiled.
    #[command(flatten)]
    pub component: RunComponentArgs,
}

/// The component a command that runs part of a finished run again
/// (`replay`, `counterfactual`) loads, and where it compiles it.
#[derive(Debug, Args)]
pub struct RunComponentArgs {
    /// The component; default: the one the run used (its sha256 must match).
    #[arg(long, value_name = "FILE")]
    pub adapter: Option<PathBuf>,
    /// Directory for compiled components (default: $SANDLOOP_CACHE_DIR, else
    /// the user cache dir).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Compile the component in memory only.
    #[arg(long)]
    pub no_cache: bool,
}

/// Options of `sandloop report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Run directories (`--out` of `sandloop run`); two or more are compared
    /// as arms side by side.
    #[arg(value_name = "RUN_DIR", required = true)]
    pub runs: Vec<PathBuf>,
    /// The HTML file to write; default: RUN_DIR/report.html for one run,
    /// ./report.html for several.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Open the report with xdg-open once written (prints its path when
    /// xdg-open is unavailable).
    #[arg(long)]
    pub open: bool,
    /// Draw the report again every SECS seconds (default 5) while a run is
    /// still going (a process holds its lock); the page reloads itself as
    /// often. Ends once no run is going: drawn one last time (or Ctrl-C).
    #[arg(
        long,
        value_name = "SECS",
        num_args = 0..=1,
        default_missing_value = "5",
        value_parser = clap::value_parser!(u32).range(1..=3600)
    )]
    pub watch: Option<u32>,
}

/// Options of `sandloop plan`: a run directory, or explicit JSON inputs.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["run", "trace"])))]
pub struct PlanArgs {
    /// A run directory: trace, candidates and failure observations come from it.
    #[arg(long = "run", value_name = "DIR")]
    pub run: Option<PathBuf>,
    /// Trace events (JSONL, one branch) instead of a run directory.
    #[arg(long, value_name = "FILE.jsonl", requires_all = ["candidates", "observations"], conflicts_with = "run")]
    pub trace: Option<PathBuf>,
    /// Candidate positions with their costs (JSON array), with --trace.
    #[arg(long, value_name = "FILE.json")]
    pub candidates: Option<PathBuf>,
    /// Failure observations (JSON array), with --trace.
    #[arg(long, value_name = "FILE.json")]
    pub observations: Option<PathBuf>,
    /// Most proposals to print.
    #[arg(long, value_name = "K", default_value_t = 3)]
    pub max_proposals: usize,
    /// Fidelity a replay must reach for a failure to count (run mode).
    #[arg(long, value_name = "FIDELITY", default_value = "semantic_equivalent")]
    pub min_fidelity: String,
    /// Smallest score (minutes saved minus capture cost) worth proposing.
    #[arg(
        long,
        value_name = "MINUTES",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub min_score: f64,
    /// Print the proposals as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The item failure policy (reference `ItemFailurePolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FailurePolicyArg {
    /// A failing item becomes a structured error record; the run goes on.
    Record,
    /// The first failure stops the run with exit code 1.
    Fatal,
}

/// How isolated children are forked (`sandloop run --fork`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ForkArg {
    /// `state` when the adapter exports `replay-children`, else `snapshot`.
    Auto,
    /// The adapter's own state transfer (`replay-children`).
    State,
    /// A snapshot of the live instance, compiled once per replay point.
    Snapshot,
}

impl From<FailurePolicyArg> for sandloop_core::episode::policy::FailurePolicy {
    fn from(arg: FailurePolicyArg) -> Self {
        match arg {
            FailurePolicyArg::Record => Self::Record,
            FailurePolicyArg::Fatal => Self::Fatal,
        }
    }
}

impl ForkArg {
    /// The value as given on the command line (and recorded).
    pub fn as_str(self) -> &'static str {
        match self {
            ForkArg::Auto => "auto",
            ForkArg::State => "state",
            ForkArg::Snapshot => "snapshot",
        }
    }
}

/// Limits and grants for every adapter instance.
#[derive(Debug, Args, Clone)]
pub struct SandboxArgs {
    /// Linear-memory limit of each linear memory of an instance, MiB (a
    /// component with several memories may use this much in each).
    #[arg(
        long,
        value_name = "MIB",
        default_value_t = 512,
        allow_negative_numbers = true
    )]
    pub max_memory: u64,
    /// Deadline for one adapter call, seconds.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 60.0,
        allow_negative_numbers = true
    )]
    pub call_timeout: f64,
    /// Fuel per adapter call (instruction budget); off when not given.
    #[arg(long, value_name = "UNITS", allow_negative_numbers = true)]
    pub fuel: Option<u64>,
    /// Grant a host directory to the guest (repeatable): HOST::GUEST is
    /// read-write, HOST::GUEST:ro read-only; GUEST is an absolute guest
    /// path such as /docs.
    #[arg(long = "dir", value_name = "HOST::GUEST[:ro]")]
    pub dirs: Vec<String>,
    /// Pass a host environment variable through to the guest (repeatable).
    #[arg(long = "env", value_name = "NAME")]
    pub env: Vec<String>,
    /// Largest JSON text accepted from one adapter call, bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 8 << 20, allow_negative_numbers = true)]
    pub max_output: usize,
    /// Files and directories one instance may hold open through its
    /// grants at once; one more open fails inside the guest.
    #[arg(
        long,
        value_name = "N",
        default_value_t = sandloop_core::limits::DEFAULT_MAX_OPEN_FILES,
        allow_negative_numbers = true
    )]
    pub max_open_files: usize,
    /// Directory for compiled components (default: $SANDLOOP_CACHE_DIR,
    /// $XDG_CACHE_HOME/sandloop or ~/.cache/sandloop).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Do not read or write the compiled-component cache.
    #[arg(long)]
    pub no_cache: bool,
}

/// Arguments of `sandloop run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The adapter component (.wasm).
    #[arg(long, value_name = "FILE")]
    pub adapter: PathBuf,
    /// Run directory to create (or continue with --resume).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Seed (and variant) items, one JSON object per line, offered again in
    /// every epoch (`-` reads them from standard input); without it seeds
    /// come from the adapter's `seeds` export.
    #[arg(long, value_name = "FILE.jsonl")]
    pub items: Option<PathBuf>,
    /// Variant catalog (schema loopx_explore_variant_catalog_v0).
    #[arg(long, value_name = "CATALOG.json")]
    pub variants: Option<PathBuf>,
    /// Most variant specs admitted per epoch; 0 admits every pending spec.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub variant_lanes: usize,
    /// Most epochs to run.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub epochs: u32,
    /// Wall-clock budget, minutes; no budget when not given.
    #[arg(long, value_name = "MINUTES", allow_negative_numbers = true)]
    pub budget_minutes: Option<f64>,
    /// Queue worker lanes, each with its own sandboxed instance.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub workers: usize,
    /// What a failing item does to the run.
    #[arg(long, value_enum, default_value_t = FailurePolicyArg::Record)]
    pub failure_policy: FailurePolicyArg,
    /// Arm name recorded in group ids and the checkpoint.
    #[arg(long, default_value = "main")]
    pub arm: String,
    /// Do not capture replay points, even when the adapter exports `replay`.
    #[arg(long)]
    pub no_replay: bool,
    /// Fidelity a replayed suffix needs to be promotion eligible.
    #[arg(long, value_name = "FIDELITY", default_value = "semantic_equivalent")]
    pub replay_min_fidelity: String,
    /// Threads per lane for a group's isolated children (adapters exporting
    /// `replay-children`); 0 runs each suffix from the replay point instead.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub child_workers: usize,
    /// How a group's isolated children are forked from its replay point:
    /// `state` (the adapter exports and adopts its state through
    /// `replay-children`), `snapshot` (a snapshot of the live instance,
    /// no adapter code), `auto` (state when the adapter exports
    /// `replay-children`, else snapshot).
    #[arg(long, value_enum, default_value_t = ForkArg::Auto)]
    pub fork: ForkArg,
    /// Most MiB of snapshot components the run keeps as durable replay
    /// points (`replay-points/ID.wasm`); points past it are not durable.
    /// 0 keeps none.
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    pub max_durable_snapshots: u64,
    /// Continue the run in --out from its last checkpoint.
    #[arg(long)]
    pub resume: bool,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Run the units on `sandloop worker` processes through this NATS
    /// server (JetStream enabled): nats://HOST:4222,
    /// nats://USER:PASSWORD@HOST:4222 or tls://HOST:4222. This process
    /// stays the coordinator (run directory, epochs, checkpoint, novelty);
    /// --workers is how many units are in flight at once, and the GUEST
    /// parts of --dir are what a worker must offer to run them.
    #[arg(long, value_name = "URL")]
    pub nats: Option<String>,
    /// A NATS credentials file (nkey seed and user JWT), with --nats.
    #[arg(long, value_name = "FILE", requires = "nats")]
    pub nats_creds: Option<PathBuf>,
    /// With --nats: how long to wait for a worker offering the run's guest
    /// paths to answer before giving up, seconds.
    #[arg(long, value_name = "SECS", default_value_t = 30, requires = "nats")]
    pub nats_wait: u64,
    /// Limits and grants for every instance.
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// Arguments of `sandloop try`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["item", "items"])))]
pub struct TryArgs {
    /// The adapter component (.wasm).
    #[arg(value_name = "ADAPTER")]
    pub adapter: PathBuf,
    /// One item as a JSON object; repeat for more.
    #[arg(long, value_name = "JSON")]
    pub item: Vec<String>,
    /// An items file (JSON lines; `-`: standard input), of which the first
    /// --limit items run.
    #[arg(long, value_name = "FILE.jsonl", conflicts_with = "item")]
    pub items: Option<PathBuf>,
    /// How many items of --items run (the first N, at least 1).
    #[arg(long, default_value_t = 5, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: u32,
    /// Run the items without replay points (as `run --no-replay`).
    #[arg(long)]
    pub no_replay: bool,
    /// Print the records as JSON lines (one per record) and nothing else.
    #[arg(long)]
    pub json: bool,
    /// Run the items again whenever the component file changes (rebuild
    /// it in another terminal), saying which records changed; Ctrl-C ends.
    #[arg(long, conflicts_with = "json")]
    pub watch: bool,
    /// Limits and grants for every instance.
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// Arguments of `sandloop inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The component to inspect.
    pub component: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Directory for compiled components.
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Do not read or write the compiled-component cache.
    #[arg(long)]
    pub no_cache: bool,
}

/// A shell `sandloop completions` writes a script for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    /// bash (source it, or put it in `~/.local/share/bash-completion/completions/sandloop`).
    Bash,
    /// zsh (put it as `_sandloop` in a directory of `$fpath`).
    Zsh,
    /// fish (put it in `~/.config/fish/completions/sandloop.fish`).
    Fish,
}

/// Arguments of `sandloop completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Arguments of `sandloop man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write `sandloop.1` and one page per subcommand (`sandloop-run.1`,
    /// `sandloop-loop-run.1`, …) into DIR, created if missing, instead of
    /// printing the top-level page.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

impl ForkArg {
    /// The fork `--fork` names; `None` for `auto`, which chooses by the
    /// component's exports.
    pub fn kind(self) -> Option<ForkKind> {
        match self {
            ForkArg::Auto => None,
            ForkArg::State => Some(ForkKind::State),
            ForkArg::Snapshot => Some(ForkKind::Snapshot),
        }
    }
}
