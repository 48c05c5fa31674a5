//! The options of mimalloc, the binaries' global allocator.

/// `mi_option_arena_eager_commit` in mimalloc 3's `mi_option_e` (the
/// bindings name no constant for it).
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
/// `mi_option_purge_delay` in mimalloc 3's `mi_option_e`.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Has mimalloc commit arena memory as it is used and give freed pages
/// back at once. By default it commits its arenas up front (on huge pages
/// where the kernel allows) and keeps freed pages for a while, which held a
/// million-item run ~35 MB above the memory it used, at no measurable gain
/// in speed (`cargo bench -p sandloop-tests --bench per_item` prints the
/// peak). Call first in `main`, before any thread starts; harmless when
/// mimalloc is not the global allocator.
///
/// Built with the `no_thp` feature of `libmimalloc-sys`, mimalloc also
/// never asks the kernel for transparent huge pages (`MADV_HUGEPAGE`).
/// Pages given back at once are faulted in again as the run allocates, and
/// on a huge page every such fault zeroes 2 MiB: with them, a million-item
/// run took ~1.3 s more system time, mostly zeroing pages, and peaked
/// ~10 MB higher (docs/src/performance.md has the figures). On a
/// kernel whose THP mode is `always` (not the default `madvise`), set
/// `MIMALLOC_ALLOW_THP=0` for the same effect.
#[allow(unsafe_code)]
pub fn configure() {
    // SAFETY: plain option setters of the C library, called before the
    // program's threads start.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0);
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0);
    }
}
