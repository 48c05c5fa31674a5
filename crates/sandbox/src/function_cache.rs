//! An in-memory Cranelift incremental compilation cache: compiled function
//! artifacts by the key Cranelift derives from each function's body, shared
//! by every compile of one engine.
//!
//! A snapshot fork compiles a new component per replay point whose code is
//! the instrumented component's, function for function — only its data
//! segments and globals differ — so with this cache its functions are found
//! instead of compiled again. The cache is bounded: past [`MAX_BYTES`] of
//! artifacts, new entries are refused (Cranelift then just compiles).
//!
//! A process starts with an empty cache, so its first snapshot would compile
//! every function again. [`FunctionCache::save`] therefore writes the
//! artifacts beside a freshly compiled instrumented component in the
//! compiled-component cache, and [`FunctionCache::load`] reads them back
//! when that component comes from the cache. The artifacts are code derived
//! from the component's functions, never guest data (a snapshot's heap is
//! only in its data segments); the file is trusted like the cache's
//! compiled components, with a sha256 of its contents checked on load.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::Mutex;

use sha2::{Digest, Sha256};
use wasmtime::CacheStore;

/// Most bytes of artifacts (keys and values) one cache keeps.
pub const MAX_BYTES: usize = 512 << 20;

/// Function artifacts by key, in memory.
#[derive(Debug, Default)]
pub struct FunctionCache {
    entries: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    map: HashMap<Vec<u8>, Vec<u8>>,
    bytes: usize,
}

impl CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.map.get(key).map(|value| Cow::Owned(value.clone()))
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let size = key.len() + value.len();
        if entries.bytes + size > MAX_BYTES {
            return false;
        }
        if entries.map.insert(key.to_vec(), value).is_none() {
            entries.bytes += size;
        }
        true
    }
}

/// First bytes of a saved cache: a format tag.
const MAGIC: &[u8; 8] = b"SLFNC01\n";

impl FunctionCache {
    /// Write every artifact to `path` atomically and readable by the user
    /// only: `MAGIC`, the sha256 of
    /// the rest, then `(u32 LE key length, key, u32 LE value length,
    /// value)` per entry. Returns the entries written.
    pub fn save(&self, path: &Path) -> io::Result<usize> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let mut body = Vec::with_capacity(entries.bytes + 8 * entries.map.len());
        for (key, value) in &entries.map {
            for part in [key, value] {
                body.extend_from_slice(&(part.len() as u32).to_le_bytes());
                body.extend_from_slice(part);
            }
        }
        let count = entries.map.len();
        drop(entries);
        let mut file = Vec::with_capacity(body.len() + 40);
        file.extend_from_slice(MAGIC);
        file.extend_from_slice(&Sha256::digest(&body));
        file.extend_from_slice(&body);
        // Like the cache's compiled components: private to the user, and
        // renamed into place whole.
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let mut temporary = tempfile::NamedTempFile::new_in(dir)?;
        io::Write::write_all(&mut temporary, &file)?;
        temporary.persist(path).map_err(|error| error.error)?;
        Ok(count)
    }

    /// Add the artifacts [`FunctionCache::save`] wrote to `path` (within
    /// [`MAX_BYTES`]). Returns the entries added. Errors when the file
    /// cannot be read, is not such a file, or its sha256 does not match;
    /// nothing is added then.
    pub fn load(&self, path: &Path) -> io::Result<usize> {
        let invalid = |what: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {what}", path.display()),
            )
        };
        if !std::fs::metadata(path)?.is_file() {
            return Err(invalid("not a regular file"));
        }
        let file = std::fs::read(path)?;
        if file.len() < 40 || &file[..8] != MAGIC {
            return Err(invalid("not a saved function cache"));
        }
        let body = &file[40..];
        if Sha256::digest(body).as_slice() != &file[8..40] {
            return Err(invalid("sha256 mismatch"));
        }
        let mut parts = Vec::new();
        let mut rest = body;
        while !rest.is_empty() {
            let (len, tail) = rest
                .split_first_chunk::<4>()
                .ok_or_else(|| invalid("truncated entry"))?;
            let len = u32::from_le_bytes(*len) as usize;
            if tail.len() < len {
                return Err(invalid("truncated entry"));
            }
            parts.push(&tail[..len]);
            rest = &tail[len..];
        }
        if parts.len() % 2 != 0 {
            return Err(invalid("a key without a value"));
        }
        let mut added = 0;
        for pair in parts.chunks(2) {
            if self.get(pair[0]).is_none() && self.insert(pair[0], pair[1].to_vec()) {
                added += 1;
            }
        }
        Ok(added)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_found_and_the_bound_refuses_more() {
        let cache = FunctionCache::default();
        assert!(cache.get(b"k").is_none());
        assert!(cache.insert(b"k", vec![1, 2, 3]));
        assert_eq!(cache.get(b"k").as_deref(), Some(&[1u8, 2, 3][..]));
        assert!(!cache.insert(b"big", vec![0; MAX_BYTES]));
        assert!(cache.get(b"big").is_none());
    }

    #[test]
    fn a_saved_cache_loads_back_and_a_damaged_one_adds_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.functions");
        let cache = FunctionCache::default();
        cache.insert(b"k1", vec![1; 10]);
        cache.insert(b"k2", vec![]);
        assert_eq!(cache.save(&path).unwrap(), 2);

        let again = FunctionCache::default();
        assert_eq!(again.load(&path).unwrap(), 2);
        assert_eq!(again.get(b"k1").as_deref(), Some(&[1u8; 10][..]));
        assert_eq!(again.get(b"k2").as_deref(), Some(&[][..]));
        assert_eq!(again.load(&path).unwrap(), 0, "already there");

        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let fresh = FunctionCache::default();
        let error = fresh.load(&path).unwrap_err().to_string();
        assert!(error.contains("sha256 mismatch"), "{error}");
        assert!(fresh.get(b"k1").is_none());
        std::fs::write(&path, b"nonsense").unwrap();
        assert!(fresh.load(&path).is_err());
    }
}
