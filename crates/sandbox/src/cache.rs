//! Compiled-component cache on disk: one file per component and engine
//! configuration, named `{sha256}-{engine hash}.cwasm`.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use wasmtime::Engine;
use wasmtime::component::Component;

pub use sandloop_core::digest::sha256_hex;

/// Where the compiled form of a component with `sha256` lives for `engine`:
/// the engine's compatibility hash covers the wasmtime version and every
/// setting that changes generated code (fuel, epochs, memory layout).
pub fn cache_path(dir: &Path, sha256: &str, engine: &Engine) -> PathBuf {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    dir.join(format!("{sha256}-{:016x}.cwasm", hasher.finish()))
}

/// Outcome of [`load_or_compile`], for reporting (the shape is core's).
pub use sandloop_core::compile_cost::CacheOutcome;

/// Load the compiled component for `bytes` from `cache_dir`, or compile it
/// and store the result atomically with its sha256 beside it. A cache file
/// that does not match its digest, or that wasmtime refuses, is recompiled
/// and replaced; cache write failures never fail the load.
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
    if let Some(compiled) = read_verified(&path) {
        // SAFETY: the bytes were written by `Component::serialize` for an
        // engine with the same compatibility hash, and match the digest
        // written beside them, so they are what this host compiled (the
        // cache directory is trusted like the binary itself); wasmtime
        // still checks their header.
        #[allow(unsafe_code)]
        if let Ok(component) = unsafe { Component::deserialize(engine, &compiled) } {
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

/// The digest file written beside a compiled component.
fn digest_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".sha256");
    PathBuf::from(name)
}

/// The cached bytes at `path`, only when they match their digest file: a
/// truncated or corrupted file is recompiled instead of being run.
fn read_verified(path: &Path) -> Option<Vec<u8>> {
    let compiled = std::fs::read(path).ok()?;
    let expected = std::fs::read_to_string(digest_path(path)).ok()?;
    (sha256_hex(&compiled) == expected.trim()).then_some(compiled)
}

fn store(dir: &Path, path: &Path, compiled: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (target, bytes) in [
        (path.to_path_buf(), compiled.to_vec()),
        (digest_path(path), sha256_hex(compiled).into_bytes()),
    ] {
        let mut file = tempfile::NamedTempFile::new_in(dir)?;
        file.write_all(&bytes)?;
        file.persist(&target).map_err(|error| error.error)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_corrupted_cache_file_is_recompiled_not_run() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.cwasm");
        store(dir.path(), &path, b"compiled bytes").unwrap();
        assert_eq!(
            read_verified(&path).as_deref(),
            Some(&b"compiled bytes"[..])
        );
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[3] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
        assert_eq!(read_verified(&path), None);
        std::fs::remove_file(digest_path(&path)).unwrap();
        assert_eq!(read_verified(&path), None, "no digest, no trust");
    }
}
