//! How many descriptors an instance may hold ([`OpenFiles`], counted by
//! the guarded `open-at` of [`crate::guarded_open`]) and how large its
//! resource table may grow ([`resource_table_capacity`]).

use std::collections::BTreeSet;

use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi::filesystem::Descriptor;

/// Entries an instance's resource table may hold for a limit of
/// `max_open_files` descriptors: room for a stream and a pollable per file,
/// plus the preopens, stdio and clocks.
pub fn resource_table_capacity(max_open_files: usize) -> usize {
    max_open_files.saturating_mul(4).saturating_add(64)
}

/// The descriptors an instance opened through `open-at`, bounded.
#[derive(Debug)]
pub struct OpenFiles {
    limit: usize,
    /// Table keys of descriptors opened, some perhaps closed since (checked
    /// again only when the limit is reached).
    keys: BTreeSet<u32>,
}

impl OpenFiles {
    /// No descriptors yet; at most `limit` at once.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            keys: BTreeSet::new(),
        }
    }

    /// Whether one more descriptor may be opened: forgets the keys whose
    /// descriptors the guest dropped, when the count says the limit is
    /// reached.
    pub(crate) fn has_room(&mut self, table: &ResourceTable) -> bool {
        if self.keys.len() >= self.limit {
            self.keys
                .retain(|key| table.get(&Resource::<Descriptor>::new_own(*key)).is_ok());
        }
        self.keys.len() < self.limit
    }

    /// At most this many at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Count the descriptor at table key `rep` as open.
    pub(crate) fn opened(&mut self, rep: u32) {
        self.keys.insert(rep);
    }

    /// Descriptors currently counted as open (an upper bound).
    pub fn count(&self) -> usize {
        self.keys.len()
    }
}

#[cfg(test)]
mod tests {
    use std::fs::File;

    use wasmtime_wasi::OpenMode;
    use wasmtime_wasi::filesystem::Dir as WasiDir;

    use super::*;

    #[test]
    fn the_count_forgets_descriptors_the_guest_dropped() {
        let mut table = ResourceTable::new();
        let mut files = OpenFiles::new(2);
        let dir = || {
            let file = File::open(std::env::temp_dir()).unwrap();
            Descriptor::Dir(WasiDir::new(
                file,
                wasmtime_wasi::FsPerms::ReadOnly,
                OpenMode::READ,
                false,
            ))
        };
        let first = table.push(dir()).unwrap();
        files.opened(first.rep());
        assert!(files.has_room(&table));
        let second = table.push(dir()).unwrap();
        files.opened(second.rep());
        assert!(!files.has_room(&table), "two of two are open");
        table.delete(first).unwrap();
        assert!(files.has_room(&table), "one was dropped");
        assert_eq!(files.count(), 1);
    }
}
