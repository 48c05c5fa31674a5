//! An in-memory Cranelift incremental compilation cache: compiled function
//! artifacts by the key Cranelift derives from each function's body, shared
//! by every compile of one engine.
//!
//! A snapshot fork compiles a new component per replay point whose code is
//! the instrumented component's, function for function — only its data
//! segments and globals differ — so with this cache its functions are found
//! instead of compiled again. The cache is bounded: past [`MAX_BYTES`] of
//! artifacts, new entries are refused (Cranelift then just compiles).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;

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
}
