//! What an operator grants and limits for every adapter instance.

use std::path::PathBuf;

pub use sandloop_core::dir_grant::DirGrant;
pub use sandloop_core::limits::SandboxLimits;

/// Limits and grants applied to every instance of an adapter.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SandboxConfig {
    /// The limits of every instance (`--max-memory`, `--call-timeout`,
    /// `--fuel`, `--max-output`, `--max-open-files`), checked by
    /// [`SandboxLimits::validate`] where they enter.
    #[serde(flatten)]
    pub limits: SandboxLimits,
    /// Directories granted to the guest; none by default.
    pub dirs: Vec<DirGrant>,
    /// Host environment variable names passed through (`--env NAME`);
    /// none by default. Names that are unset on the host are skipped.
    pub env: Vec<String>,
    /// Where compiled components are cached; `None` disables the cache.
    #[serde(skip)]
    pub cache_dir: Option<PathBuf>,
    /// Instance slots to reserve in the pooling allocator; `0` picks the
    /// on-demand allocator instead.
    pub pool_instances: u32,
    /// Keep Cranelift's compiled functions in memory for the engine's later
    /// compiles (`function_cache`): a snapshot fork's component
    /// reuses the functions of the component it was taken from. Default off.
    pub incremental_compilation: bool,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            limits: SandboxLimits::default(),
            dirs: Vec::new(),
            env: Vec::new(),
            cache_dir: default_cache_dir(),
            pool_instances: 64,
            incremental_compilation: false,
        }
    }
}

/// The environment names `names` passes through to instances: each
/// checked to be a variable's name, duplicates dropped (first one kept),
/// and `unset` called with each name this process does not have (its
/// instances will not see it; the caller says so in its own words).
///
/// # Errors
/// The first entry that is not a name (empty, or `NAME=VALUE`).
pub fn env_names<'a>(
    names: impl IntoIterator<Item = &'a String>,
    mut unset: impl FnMut(&str),
) -> Result<Vec<String>, &'a String> {
    let mut kept: Vec<String> = Vec::new();
    for name in names {
        if name.is_empty() || name.contains('=') {
            return Err(name);
        }
        if std::env::var_os(name).is_none() {
            unset(name);
        }
        if !kept.contains(name) {
            kept.push(name.clone());
        }
    }
    Ok(kept)
}

/// `$SANDLOOP_CACHE_DIR`, else `$XDG_CACHE_HOME/sandloop`, else
/// `$HOME/.cache/sandloop`.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("SANDLOOP_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(dir).join("sandloop"));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache").join("sandloop"))
}

#[cfg(test)]
mod tests {
    use super::env_names;

    #[test]
    fn env_names_keep_the_first_of_each_and_refuse_an_assignment() {
        let names: Vec<String> = ["PATH", "SANDLOOP_SURELY_UNSET_X", "PATH"]
            .map(String::from)
            .into();
        let mut unset = Vec::new();
        let kept = env_names(&names, |name| unset.push(name.to_owned())).unwrap();
        assert_eq!(kept, ["PATH", "SANDLOOP_SURELY_UNSET_X"]);
        assert_eq!(unset, ["SANDLOOP_SURELY_UNSET_X"]);
        let bad: Vec<String> = ["PATH", "A=1", ""].map(String::from).into();
        assert_eq!(env_names(&bad, |_| {}), Err(&bad[1]));
        let empty = vec![String::new()];
        assert_eq!(env_names(&empty, |_| {}), Err(&empty[0]));
    }
}
