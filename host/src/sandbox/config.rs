//! What an operator grants and limits for every adapter instance.

use std::path::PathBuf;

/// One directory granted to the guest (`--dir HOST::GUEST[:ro]`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DirGrant {
    /// Directory on the host.
    pub host: PathBuf,
    /// Path the guest sees it at, e.g. `/docs`.
    pub guest: String,
    /// True for read-only access.
    pub read_only: bool,
}

impl DirGrant {
    /// Parse `HOST::GUEST` or `HOST::GUEST:ro` / `:rw`. The `::` separator
    /// lets host paths contain single colons.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let (host, rest) = spec
            .split_once("::")
            .ok_or_else(|| format!("--dir {spec:?}: expected HOST::GUEST[:ro]"))?;
        let (guest, read_only) = match rest.rsplit_once(':') {
            Some((guest, mode)) if mode.eq_ignore_ascii_case("ro") => (guest, true),
            Some((guest, mode)) if mode.eq_ignore_ascii_case("rw") => (guest, false),
            Some(_) => {
                return Err(format!(
                    "--dir {spec:?}: the part after GUEST must be `:ro` or `:rw`"
                ));
            }
            None => (rest, false),
        };
        if host.is_empty() || guest.is_empty() {
            return Err(format!("--dir {spec:?}: HOST and GUEST must be non-empty"));
        }
        if !guest.starts_with('/') || guest.contains(':') {
            return Err(format!(
                "--dir {spec:?}: GUEST must be an absolute guest path such as /docs, without `:`"
            ));
        }
        // One spelling per directory, so a second grant cannot hide behind
        // `/docs/` or `/docs/.`.
        let trimmed = guest.trim_end_matches('/');
        if trimmed
            .split('/')
            .skip(1)
            .any(|part| part.is_empty() || part == "." || part == "..")
        {
            return Err(format!(
                "--dir {spec:?}: GUEST must be a plain absolute path (no `//`, `.` or `..`)"
            ));
        }
        let guest = if trimmed.is_empty() { "/" } else { trimmed };
        let host = PathBuf::from(host);
        if !host.is_dir() {
            return Err(format!(
                "--dir {spec:?}: {} is not a directory",
                host.display()
            ));
        }
        Ok(Self {
            host,
            guest: guest.to_string(),
            read_only,
        })
    }

    /// Parse every spec and refuse two grants at one guest path.
    pub fn parse_all(specs: &[String]) -> Result<Vec<Self>, String> {
        let mut grants: Vec<Self> = Vec::with_capacity(specs.len());
        for spec in specs {
            let grant = Self::parse(spec)?;
            if grants.iter().any(|other| other.guest == grant.guest) {
                return Err(format!("--dir {spec:?}: {} is granted twice", grant.guest));
            }
            grants.push(grant);
        }
        Ok(grants)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dir_grants() {
        let tmp = std::env::temp_dir();
        let host = tmp.to_str().unwrap();
        let grant = DirGrant::parse(&format!("{host}::/docs:ro")).unwrap();
        assert_eq!(grant.guest, "/docs");
        assert!(grant.read_only);
        let grant = DirGrant::parse(&format!("{host}::/data")).unwrap();
        assert!(!grant.read_only);
        assert!(
            DirGrant::parse(&format!("{host}::/docs:RO"))
                .unwrap()
                .read_only
        );
        assert!(DirGrant::parse("/nonexistent-dir-xyz::/d").is_err());
        assert!(DirGrant::parse(host).is_err());
        for bad in ["::/docs:ro:ro", "::docs", "::/docs:maybe", "::/a b:x"] {
            assert!(DirGrant::parse(&format!("{host}{bad}")).is_err(), "{bad}");
        }
        for bad in ["::/docs/../etc", "::/docs/.", "::/a//b"] {
            assert!(DirGrant::parse(&format!("{host}{bad}")).is_err(), "{bad}");
        }
        assert_eq!(
            DirGrant::parse(&format!("{host}::/docs/:ro"))
                .unwrap()
                .guest,
            "/docs"
        );
        let twice = vec![format!("{host}::/d:ro"), format!("{host}::/d/")];
        assert!(
            DirGrant::parse_all(&twice)
                .unwrap_err()
                .contains("granted twice")
        );
        let twice = vec![format!("{host}::/d"), format!("{host}::/d:ro")];
        assert!(
            DirGrant::parse_all(&twice)
                .unwrap_err()
                .contains("granted twice")
        );
    }
}
