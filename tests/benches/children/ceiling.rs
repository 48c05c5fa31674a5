//! What two threads can get out of this machine at all, measured in the
//! same run as the parallel children it bounds: the throughput of two
//! threads working at once over one thread working alone.
//!
//! - **Arithmetic**: a dependent multiply-add chain, no memory traffic,
//!   nothing shared. On two idle physical cores it gives ~2.0×; two
//!   hyper-threads of one core, or a hypervisor that takes time from the
//!   guest's second CPU while both run, give less. No host design can make
//!   two child workers go faster than this.
//! - **Two processes** (in `noop.rs`): two copies of this bench, each
//!   running one serial lane of no-op children, at once. They share the
//!   machine only: no address space, allocator or engine.
//! - **Two serial lanes** (in `noop.rs`, with the same component and group
//!   as the no-op section): two lanes running their own groups of isolated
//!   children at once, each on its own thread, sharing nothing but the
//!   engine, the pooling allocator and the metrics. One group's children
//!   on two workers share the same, and more (the group's lane, its
//!   hand-offs), so this is what the engine lets them reach: whatever keeps
//!   it below the arithmetic ceiling is in the engine, the allocator or the
//!   machine's memory system, and whatever keeps a group below it is in
//!   the group runtime.

use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Multiply-add steps per timed round: ~60 ms on this 2-core machine.
const STEPS: u64 = 40_000_000;

/// One round of arithmetic; the result is returned so it is not elided.
fn arithmetic(seed: u64) -> u64 {
    let mut x = seed | 1;
    for _ in 0..STEPS {
        x = x
            .wrapping_mul(2_862_933_555_777_941_757)
            .wrapping_add(3_037_000_493);
    }
    std::hint::black_box(x)
}

/// Throughput of two threads doing [`arithmetic`] at once over one thread
/// doing it alone: the median over `rounds` alternating rounds (a round
/// alone, then one round on each of two threads started together).
pub fn arithmetic_two_over_one(rounds: usize) -> f64 {
    let mut seeds = (1u64, 2u64);
    median_ratio((0..rounds).map(|_| {
        let started = Instant::now();
        arithmetic(seeds.0);
        let alone = started.elapsed();
        let together = pair_at_once(&mut seeds.0, &mut seeds.1, |seed| {
            *seed = arithmetic(*seed);
        });
        (alone, together)
    }))
}

/// The median of `2 × alone / together` over `rounds`, each the wall time
/// of one unit of work done alone and of two done at once (NaN when there
/// are none).
pub fn median_ratio(rounds: impl IntoIterator<Item = (Duration, Duration)>) -> f64 {
    let mut ratios: Vec<f64> = rounds
        .into_iter()
        .map(|(alone, together)| 2.0 * alone.as_secs_f64() / together.as_secs_f64())
        .collect();
    ratios.sort_by(f64::total_cmp);
    ratios.get(ratios.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Wall time of `work` run on `first` (this thread) and on `second` (a
/// scoped thread) released together, from the release until both are
/// done.
pub fn pair_at_once<T: Send>(
    first: &mut T,
    second: &mut T,
    work: impl Fn(&mut T) + Sync,
) -> Duration {
    let gate = Barrier::new(2);
    std::thread::scope(|scope| {
        let sibling = scope.spawn(|| {
            gate.wait();
            work(second);
        });
        gate.wait();
        let started = Instant::now();
        work(first);
        sibling.join().expect("the sibling thread finished");
        started.elapsed()
    })
}
