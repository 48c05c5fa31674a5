//! What `sandloop replay` and `sandloop counterfactual` share in the CLI:
//! the component flags as the sandbox's [`RunComponent`], and its compile
//! with the notice. The work itself is core's
//! [`crate::finished_run::FinishedRun`] and the sandbox's
//! [`crate::sandbox::finished_run`].

use std::path::Path;

use super::CliError;
use super::args::RunComponentArgs;
use super::compile_notice::while_compiling;
use crate::sandbox::finished_run::RunComponent;
use crate::sandbox::{LoadError, LoadedAdapter};

/// The component `flags` name (`instances` left for the command to set).
///
/// # Errors
/// `--cache-dir` naming a file is bad input.
pub fn run_component(flags: &RunComponentArgs) -> Result<RunComponent, CliError> {
    if !flags.no_cache {
        super::check_cache_flag(flags.cache_dir.as_deref())?;
    }
    Ok(RunComponent {
        adapter: flags.adapter.clone(),
        cache_dir: flags.cache_dir.clone(),
        no_cache: flags.no_cache,
        instances: 0,
    })
}

/// Run `load`, the compile of the component at `path`, saying on stderr
/// while it takes long (`while_compiling`); `cached`: its code is kept.
pub fn compile_with_notice(
    path: &Path,
    cached: bool,
    load: &mut dyn FnMut() -> Result<LoadedAdapter, LoadError>,
) -> Result<LoadedAdapter, LoadError> {
    while_compiling(path, "NAME", cached, false, load)
}
