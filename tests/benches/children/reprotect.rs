//! What this machine charges for the change to the process's memory map
//! that an isolated child brings when its instance grows its linear memory
//! past the module's initial size (replay-probe's children do, adopting
//! their padded state; bench-adapter's no-op children do not): the next
//! instance in the same pooling-allocator slot must make those pages
//! inaccessible again (`mprotect(PROT_NONE)` of pages that are present, in
//! `MemoryImageSlot::instantiate`). Taking access away from present pages
//! flushes their TLB entries on every core that runs a thread of the
//! process: with a second thread running — as in a parallel group — that
//! is an inter-processor interrupt, which a virtual machine may charge far
//! more for than the change itself. `strace -f` on this bench counts one
//! such `mprotect` per replay-probe child, none per no-op child.
//!
//! The probe makes the same change to its own anonymous mapping (64 KiB
//! per slot, as many slots as a batch has children), first with this
//! thread alone, then while a sibling thread spins (timed once the sibling
//! runs), and returns the p50 of each.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use super::samples::Samples;

/// Bytes re-protected each time: one WebAssembly page.
const PAGE: usize = 64 << 10;

/// p50 cost of re-protecting one touched page, µs.
pub struct Reprotect {
    /// With no other thread of this process running.
    pub alone_us: f64,
    /// While a sibling thread of this process runs on another core.
    pub busy_sibling_us: f64,
    /// The sibling ended on this thread's core (one core only, or the
    /// scheduler put them together): `busy_sibling_us` then shows no
    /// cross-core flush.
    pub shared_core: bool,
}

/// Time `rounds` re-protections of a touched page over `slots` slots,
/// alone and beside a spinning sibling thread. `None` when the mapping
/// cannot be made or a page cannot be made writable.
pub fn measure(slots: usize, rounds: usize) -> Option<Reprotect> {
    let slots = slots.max(1);
    let len = slots * 2 * PAGE;
    // SAFETY: a fresh private anonymous mapping, unmapped below; nothing
    // else refers to it.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return None;
    }
    let base = base.cast::<u8>();
    let time = |rounds: usize| {
        let mut samples = Samples::default();
        for round in 0..rounds {
            // SAFETY: every slot lies inside the mapping made above, and
            // its page is written only once it is readable and writable.
            unsafe {
                let page = base.add((round % slots) * 2 * PAGE);
                if libc::mprotect(page.cast(), PAGE, libc::PROT_READ | libc::PROT_WRITE) != 0 {
                    return None;
                }
                page.write_volatile(1);
                samples.time(|| libc::mprotect(page.cast(), PAGE, libc::PROT_NONE));
            }
        }
        Some(samples.p50_us())
    };
    // Fault the page tables in first.
    let Some(alone_us) = time(rounds.min(100)).and_then(|_| time(rounds)) else {
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(base.cast(), len) };
        return None;
    };
    let stop = Arc::new(AtomicBool::new(false));
    // The core the sibling last ran on; -1 until it runs.
    let sibling_cpu = Arc::new(AtomicI32::new(-1));
    let sibling = {
        let (stop, sibling_cpu) = (Arc::clone(&stop), Arc::clone(&sibling_cpu));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: no arguments; reads the calling thread's core.
                sibling_cpu.store(unsafe { libc::sched_getcpu() }, Ordering::Relaxed);
                std::hint::spin_loop();
            }
        })
    };
    while sibling_cpu.load(Ordering::Relaxed) < 0 {
        std::thread::yield_now();
    }
    let busy_sibling_us = time(rounds);
    // SAFETY: as above.
    let own_cpu = unsafe { libc::sched_getcpu() };
    let shared_core = sibling_cpu.load(Ordering::Relaxed) == own_cpu;
    stop.store(true, Ordering::Relaxed);
    let _ = sibling.join();
    // SAFETY: the mapping made above, no longer used.
    unsafe { libc::munmap(base.cast(), len) };
    Some(Reprotect {
        alone_us,
        busy_sibling_us: busy_sibling_us?,
        shared_core,
    })
}
