//! A lane's crew: the helper threads its parallel work runs on beside the
//! calling thread — a group's children, forked, then run with their
//! records built where they ran ([`run_parallel`](super::run_parallel)).
//!
//! Every thread that asks for parallel work has a crew of its own (a
//! thread-local, so two lanes never wait for each other's helpers), grown
//! to the most helpers it has asked for and at most one per core; the
//! helpers end with the thread. A helper that has finished a job spins for
//! the next one for up to [`SPIN`] before it parks, and the calling thread
//! waits for its helpers the same way, spinning, then yielding, then
//! parking until the last helper unparks it: a group's two phases (forks,
//! then runs) and its chunks follow one another within microseconds, and
//! putting a thread to sleep and waking it costs more than that on a
//! virtual machine. A general-purpose pool parks its
//! threads sooner and sleeps the caller on every join: profiled, those
//! sleeps and wake-ups were most of a parallel group's system calls.

// The crate's one `unsafe`: `run_scoped` hands its helpers a pointer to a
// borrowed closure with the lifetime erased, and returns only once no
// helper can call it (the proof is written at the `transmute`).
// `std::thread::scope` would need no `unsafe` but starts and joins threads
// on every call; the crew keeps its helpers between calls, which is the
// point of it.
#![allow(unsafe_code)]

use std::any::Any;
use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

/// How long an idle helper, or a waiting caller, looks for work (yielding
/// its core to any other runnable thread meanwhile) before it parks.
pub const SPIN: Duration = Duration::from_micros(250);

/// Polls before a waiting thread starts yielding its core.
const BUSY_POLLS: u32 = 64;

type Job = Box<dyn FnOnce() + Send + 'static>;

thread_local! {
    static CREW: RefCell<Crew> = const { RefCell::new(Crew { helpers: Vec::new() }) };
    /// On a helper thread, its index in its crew.
    static HELPER: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// The index of the crew helper the calling thread is (`0..` the most
/// helpers a crew has, one per core), or `None` on any thread that is not
/// a helper — a lane's own thread among them. What a worker keeps for
/// itself, such as an engine of its own, is looked up by it.
pub fn helper_index() -> Option<usize> {
    HELPER.with(std::cell::Cell::get)
}

/// The helpers of one calling thread.
struct Crew {
    helpers: Vec<Helper>,
}

/// One helper thread and the slot its jobs are posted to.
struct Helper {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// What a helper and its caller share.
struct Shared {
    slot: Mutex<Slot>,
    /// Signalled when a job is posted to a parked helper.
    wake: Condvar,
    /// A job waits in the slot (what an idle helper polls).
    posted: AtomicBool,
    /// From a job's posting until the helper has finished it.
    busy: AtomicBool,
}

struct Slot {
    job: Option<Job>,
    /// The helper is parked on `wake`.
    parked: bool,
    /// The crew is gone: the helper ends.
    stop: bool,
}

fn lock(slot: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    slot.lock().unwrap_or_else(|p| p.into_inner())
}

/// Helpers a crew may have: one per core (the calling thread is one more
/// worker); every [`helper_index`] is below it.
pub fn most_helpers() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

impl Crew {
    /// The shared slots of the first `count` helpers, starting the missing
    /// ones; fewer when a thread cannot be started (the work then runs on
    /// the helpers there are, or on the calling thread alone).
    fn helpers(&mut self, count: usize) -> Vec<Arc<Shared>> {
        let count = count.min(most_helpers());
        while self.helpers.len() < count {
            match Helper::start(self.helpers.len()) {
                Ok(helper) => self.helpers.push(helper),
                Err(_) => break,
            }
        }
        self.helpers
            .iter()
            .take(count)
            .map(|helper| Arc::clone(&helper.shared))
            .collect()
    }
}

impl Drop for Crew {
    fn drop(&mut self) {
        for helper in &self.helpers {
            let mut slot = lock(&helper.shared.slot);
            slot.stop = true;
            helper.shared.posted.store(true, Ordering::Release);
            helper.shared.wake.notify_one();
        }
        for helper in &mut self.helpers {
            if let Some(thread) = helper.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

impl Helper {
    fn start(index: usize) -> std::io::Result<Helper> {
        let shared = Arc::new(Shared {
            slot: Mutex::new(Slot {
                job: None,
                parked: false,
                stop: false,
            }),
            wake: Condvar::new(),
            posted: AtomicBool::new(false),
            busy: AtomicBool::new(false),
        });
        let thread = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("sandloop-crew-{index}"))
                .spawn(move || {
                    HELPER.with(|helper| helper.set(Some(index)));
                    serve(&shared)
                })?
        };
        Ok(Helper {
            shared,
            thread: Some(thread),
        })
    }
}

impl Shared {
    /// Hand `job` to this helper once it has finished its previous one.
    fn post(&self, job: Job) {
        let idle = || !self.busy.load(Ordering::Acquire);
        if !spin_until(idle) {
            while !idle() {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        self.busy.store(true, Ordering::Relaxed);
        let mut slot = lock(&self.slot);
        slot.job = Some(job);
        self.posted.store(true, Ordering::Release);
        if slot.parked {
            self.wake.notify_one();
        }
    }

    /// The next job, or `None` when the crew is gone: polled for
    /// [`SPIN`], then waited for parked.
    fn next_job(&self) -> Option<Job> {
        spin_until(|| self.posted.load(Ordering::Acquire));
        let mut slot = lock(&self.slot);
        while slot.job.is_none() && !slot.stop {
            slot.parked = true;
            slot = self.wake.wait(slot).unwrap_or_else(|p| p.into_inner());
        }
        slot.parked = false;
        self.posted.store(false, Ordering::Relaxed);
        if slot.stop { None } else { slot.job.take() }
    }
}

/// A helper's life: run each job posted to it until its crew is gone. A
/// panic ends the job, not the helper (a scoped job carries its panic to
/// its caller itself).
fn serve(shared: &Shared) {
    while let Some(job) = shared.next_job() {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(job)) {
            drop_payload(payload);
        }
        shared.busy.store(false, Ordering::Release);
    }
}

/// Drop a panic's payload without letting a panicking `Drop` of it end the
/// thread (such a payload is leaked instead).
fn drop_payload(payload: Box<dyn Any + Send>) {
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(again);
    }
}

/// Poll `ready`, then yield the core between polls, for up to [`SPIN`];
/// whether it came to hold (the caller then parks or sleeps when not).
fn spin_until(ready: impl Fn() -> bool) -> bool {
    let mut polls = 0u32;
    let mut since: Option<Instant> = None;
    while !ready() {
        polls = polls.saturating_add(1);
        if polls < BUSY_POLLS {
            std::hint::spin_loop();
            continue;
        }
        let since = *since.get_or_insert_with(Instant::now);
        if since.elapsed() >= SPIN {
            return false;
        }
        std::thread::yield_now();
    }
    true
}

/// How many scoped jobs are still running, and the first panic among them.
/// Each job holds its own reference, so a helper can still be inside
/// [`finish`](Latch::finish) after the caller has seen the count reach
/// zero and returned.
struct Latch {
    remaining: AtomicUsize,
    caller: Thread,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

impl Latch {
    fn finish(&self, outcome: std::thread::Result<()>) {
        let mut later = None;
        if let Err(panic) = outcome {
            let mut first = self.panic.lock().unwrap_or_else(|p| p.into_inner());
            match &*first {
                None => *first = Some(panic),
                Some(_) => later = Some(panic),
            }
        }
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.caller.unpark();
        }
        // A second panic's payload goes only after the count: its `Drop`
        // cannot keep the caller waiting.
        if let Some(panic) = later {
            drop_payload(panic);
        }
    }

    /// Wait for every job: spinning, then parked until the last one
    /// unparks this thread.
    fn wait(&self) {
        let done = || self.remaining.load(Ordering::Acquire) == 0;
        spin_until(done);
        while !done() {
            std::thread::park();
        }
    }
}

/// `run_scoped`'s `work`, its lifetime erased, for the helpers to call.
#[derive(Clone, Copy)]
struct WorkPtr(*const (dyn Fn() + Sync + 'static));

// SAFETY: the pointee is `Sync`, so calling it from another thread is
// allowed; `run_scoped` keeps it alive while any helper may call it.
unsafe impl Send for WorkPtr {}

/// Waits for a scoped run's posted jobs when dropped — on return and on
/// unwinding alike — after taking the jobs never posted off the count.
struct Join<'a> {
    latch: &'a Latch,
    unposted: usize,
}

impl Drop for Join<'_> {
    fn drop(&mut self) {
        if self.unposted > 0 {
            self.latch
                .remaining
                .fetch_sub(self.unposted, Ordering::AcqRel);
        }
        self.latch.wait();
    }
}

/// The calling thread's first `count` helpers; none when it asks for
/// none, or while the thread is ending (its crew is gone: the work then
/// runs on the calling thread alone).
fn crew_helpers(count: usize) -> Vec<Arc<Shared>> {
    if count == 0 {
        return Vec::new();
    }
    CREW.try_with(|crew| crew.borrow_mut().helpers(count))
        .unwrap_or_default()
}

/// Run `work` on the calling thread and, at the same time, on `helpers`
/// helper threads of its crew (fewer when the machine has fewer cores, or
/// a thread cannot be started); return once every copy has returned. A
/// panic in any copy is resumed here, after all of them have returned.
/// `work` that itself runs scoped work on the calling thread waits for the
/// outer run's helpers to be free: nested runs take turns, they do not
/// overlap.
pub fn run_scoped(helpers: usize, work: &(dyn Fn() + Sync)) {
    let shared = crew_helpers(helpers);
    if shared.is_empty() {
        work();
        return;
    }
    let latch = Arc::new(Latch {
        remaining: AtomicUsize::new(shared.len()),
        caller: std::thread::current(),
        panic: Mutex::new(None),
    });
    // SAFETY: only the lifetime is erased. Every job that calls the
    // pointer is waited for by `join` before this frame (and `work`) can
    // go, whether it returns or unwinds; a job turns the pointer back into
    // a reference only for the call, before it counts itself finished.
    let erased = WorkPtr(unsafe {
        std::mem::transmute::<*const (dyn Fn() + Sync + '_), *const (dyn Fn() + Sync + 'static)>(
            work,
        )
    });
    let mut join = Join {
        latch: &latch,
        unposted: shared.len(),
    };
    for helper in &shared {
        let latch = Arc::clone(&latch);
        helper.post(Box::new(move || {
            let work = erased;
            // SAFETY: see `erased` above.
            let outcome = catch_unwind(AssertUnwindSafe(|| unsafe { (*work.0)() }));
            latch.finish(outcome);
        }));
        join.unposted -= 1;
    }
    let own = catch_unwind(AssertUnwindSafe(work));
    drop(join);
    if let Err(panic) = own {
        resume_unwind(panic);
    }
    let first = latch.panic.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(panic) = first {
        resume_unwind(panic);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn scoped_work_runs_on_the_caller_and_its_helpers_and_returns_after_them() {
        let threads = Mutex::new(HashSet::new());
        let runs = AtomicUsize::new(0);
        run_scoped(1, &|| {
            threads.lock().unwrap().insert(std::thread::current().id());
            std::thread::sleep(Duration::from_millis(5));
            runs.fetch_add(1, Ordering::SeqCst);
        });
        let expected = 1 + 1usize.min(most_helpers());
        assert_eq!(
            runs.load(Ordering::SeqCst),
            expected,
            "every copy ran before the return"
        );
        assert_eq!(threads.lock().unwrap().len(), expected);
        assert_eq!(helper_index(), None, "the calling thread is no helper");
        let indices = Mutex::new(HashSet::new());
        run_scoped(1, &|| {
            indices.lock().unwrap().insert(helper_index());
        });
        assert_eq!(
            indices.into_inner().unwrap(),
            HashSet::from([None, Some(0)]),
            "the caller's copy ran on no helper, the other on helper 0"
        );
        // Again, after the helper parked: it wakes for the next job.
        std::thread::sleep(SPIN * 3);
        run_scoped(1, &|| {
            runs.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(runs.load(Ordering::SeqCst), 2 * expected);
    }

    #[test]
    fn a_helpers_panic_reaches_the_caller_after_every_copy_returned() {
        let finished = AtomicUsize::new(0);
        let caller = std::thread::current().id();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            run_scoped(1, &|| {
                if std::thread::current().id() != caller {
                    panic!("helper failed");
                }
                std::thread::sleep(Duration::from_millis(5));
                finished.fetch_add(1, Ordering::SeqCst);
            })
        }));
        let panic = outcome.expect_err("the helper's panic is resumed");
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"helper failed"));
        assert_eq!(
            finished.load(Ordering::SeqCst),
            1,
            "the caller's copy finished first"
        );
        // The helper survived its job's panic.
        let runs = AtomicUsize::new(0);
        run_scoped(1, &|| {
            runs.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }
}
