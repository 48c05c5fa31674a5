//! Compiled-component cache on disk: one file per component and engine
//! configuration, named `{sha256}-{engine hash}.cwasm`.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// The sha256 of `bytes` as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Where the compiled form of a component with `sha256` lives for `engine`:
/// the engine's compatibility hash covers the wasmtime version and every
/// setting that changes generated code (fuel, epochs, memory layout).
pub fn cache_path(dir: &Path, sha256: &str, engine: &Engine) -> PathBuf {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    dir.join(format!("{sha256}-{:016x}.cwasm", hasher.finish()))
}

/// Outcome of [`load_or_compile`], for reporting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheOutcome {
    /// Loaded from the cache.
    Hit,
    /// Compiled and written to the cache.
    Miss,
    /// Compiled; caching is off or the cache could not be written.
    Uncached,
}

/// Load the compiled component for `bytes` from `cache_dir`, or compile it
/// and store the result atomically. A corrupt or stale cache file is
/// recompiled and replaced; cache write failures never fail the load.
pub fn load_or_compile(
    engine: &Engine,
    bytes: &[u8],
    sha256: &str,
    cache_dir: Option<&Path>,
) -> wasmtime::Result<(Component, CacheOutcome)> {
    let Some(dir) = cache_dir else {
        return Ok((Component::new(engine, bytes)?, CacheOutcome::Uncached));
    };
    let path = cache_path(dir, sha256, engine);
    if path.is_file() {
        // SAFETY: the file was written by `Component::serialize` for an
        // engine with the same compatibility hash, into a cache directory
        // the operator owns; wasmtime still validates its header.
        if let Ok(component) = unsafe { Component::deserialize_file(engine, &path) } {
            return Ok((component, CacheOutcome::Hit));
        }
    }
    let component = Component::new(engine, bytes)?;
    let outcome = match component
        .serialize()
        .map(|compiled| store(dir, &path, &compiled))
    {
        Ok(Ok(())) => CacheOutcome::Miss,
        _ => CacheOutcome::Uncached,
    };
    Ok((component, outcome))
}

fn store(dir: &Path, path: &Path, compiled: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(compiled)?;
    file.persist(path).map_err(|error| error.error)?;
    Ok(())
}
