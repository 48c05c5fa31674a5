//! The options of mimalloc, the binaries' global allocator.

/// `mi_option_arena_eager_commit` in mimalloc 3's `mi_option_e` (the
/// bindings name no constant for it).
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

/// Has mimalloc commit arena memory as it is used. By default it commits
/// its arenas up front (on huge pages where the kernel allows), which held
/// a million-item run ~35 MB above the memory it used, at no measurable
/// gain in speed (`cargo bench -p sandloop-tests --bench per_item` prints
/// the peak). Call first in `main`, before any thread starts; harmless when
/// mimalloc is not the global allocator. `MIMALLOC_ARENA_EAGER_COMMIT` in
/// the environment wins.
///
/// Freed pages are given back after mimalloc's own purge delay (10 ms),
/// not at once: each purge is an `madvise` that flushes the TLB of every
/// core running one of the process's threads, and a run with replay on
/// frees an isolated child's memory per item — 19,617 `madvise` calls for
/// 100,001 items with a delay of 0 against 2,518 with the default, and
/// 1.74–2.17 s against 2.51–2.92 s for the run (docs/src/performance.md).
/// `MIMALLOC_PURGE_DELAY=0` gives pages back at once.
///
/// Built with the `no_thp` feature of `libmimalloc-sys`, mimalloc also
/// never asks the kernel for transparent huge pages (`MADV_HUGEPAGE`).
/// Pages given back are faulted in again as the run allocates, and
/// on a huge page every such fault zeroes 2 MiB: with them, a million-item
/// run took ~1.3 s more system time, mostly zeroing pages, and peaked
/// ~10 MB higher (docs/src/performance.md has the figures). On a
/// kernel whose THP mode is `always` (not the default `madvise`), set
/// `MIMALLOC_ALLOW_THP=0` for the same effect.
#[allow(unsafe_code)]
pub fn configure() {
    if std::env::var_os("MIMALLOC_ARENA_EAGER_COMMIT").is_none() {
        // SAFETY: a plain option setter of the C library, called before
        // the program's threads start.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0) }
    }
}
