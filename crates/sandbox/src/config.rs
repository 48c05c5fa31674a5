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
    /// compiles ([`super::function_cache`]): a snapshot fork's component
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
