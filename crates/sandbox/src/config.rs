//! What an operator grants and limits for every adapter instance.

use std::path::PathBuf;

pub use sandloop_core::dir_grant::DirGrant;

/// Limits and grants applied to every instance of an adapter.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SandboxConfig {
    /// Linear-memory limit per instance, in MiB (`--max-memory`, default 512).
    pub max_memory_mib: u64,
    /// Per-call deadline in seconds, enforced by epoch interruption
    /// (`--call-timeout`, default 60).
    pub call_timeout_secs: f64,
    /// Fuel per call (`--fuel`); `None` disables fuel metering.
    pub fuel: Option<u64>,
    /// Directories granted to the guest; none by default.
    pub dirs: Vec<DirGrant>,
    /// Host environment variable names passed through (`--env NAME`);
    /// none by default. Names that are unset on the host are skipped.
    pub env: Vec<String>,
    /// Descriptors one instance may hold open through its grants
    /// (`--max-open-files`, default 256); one more open is refused by WASI.
    pub max_open_files: usize,
    /// Largest JSON text accepted from one call, in bytes (default 8 MiB).
    pub max_output_bytes: usize,
    /// Guest stdout + stderr + log bytes kept per call; the rest is counted
    /// and dropped (default 64 KiB).
    pub max_guest_output_bytes: usize,
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
            max_memory_mib: 512,
            call_timeout_secs: 60.0,
            fuel: None,
            dirs: Vec::new(),
            env: Vec::new(),
            max_open_files: super::guarded_open::DEFAULT_MAX_OPEN_FILES,
            max_output_bytes: 8 << 20,
            max_guest_output_bytes: 64 << 10,
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
