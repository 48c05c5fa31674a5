//! What `sandloop replay` and `sandloop counterfactual` share in the CLI:
//! the component flags as the sandbox's [`RunComponent`], and its load
//! with the compile notice. The work itself is core's
//! [`crate::finished_run::FinishedRun`] and the sandbox's
//! [`crate::sandbox::finished_run`].

use std::sync::Arc;

use super::CliError;
use super::args::RunComponentArgs;
use super::compile_notice::while_compiling;
use crate::finished_run::FinishedRun;
use crate::replay::durable::DurableKind;
use crate::sandbox::LoadedAdapter;
use crate::sandbox::finished_run::{RunComponent, load_run_component};

/// Load `run`'s component as `flags` say, with `instances` pool slots,
/// saying on stderr while it compiles.
///
/// # Errors
/// As [`load_run_component`]; `--cache-dir` naming a file is bad input.
pub fn load_component(
    run: &FinishedRun,
    flags: &RunComponentArgs,
    instances: u32,
    kind: DurableKind,
) -> Result<Arc<LoadedAdapter>, CliError> {
    if !flags.no_cache {
        super::check_cache_flag(flags.cache_dir.as_deref())?;
    }
    let component = RunComponent {
        adapter: flags.adapter.clone(),
        cache_dir: flags.cache_dir.clone(),
        no_cache: flags.no_cache,
        instances,
    };
    Ok(load_run_component(
        run,
        &component,
        kind,
        |path, cached, load| while_compiling(path, "NAME", cached, false, load),
    )?)
}
