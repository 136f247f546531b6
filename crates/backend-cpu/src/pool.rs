//! A small persistent thread pool for kernels.
//!
//! A decode step runs a few hundred short parallel ops (a matmul of one row takes tens of
//! microseconds), so dispatch must cost about a microsecond: workers spin on a state word for a
//! while after each job, then yield, and only after a longer idle time sleep on a condvar.
//!
//! Tasks are claimed one at a time from a packed state word (epoch, task count, next task), and
//! the caller waits for *tasks*, not for workers: a worker that the OS has not scheduled does not
//! hold anyone up (the caller and the other workers take its share), which matters on a machine
//! shared with other work. Which thread runs which task therefore varies from run to run;
//! kernels make every output element's arithmetic independent of the task split.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

type JobFn = dyn Fn(usize, usize) + Sync;

const TASK_BITS: u32 = 20;
const MAX_TASKS: usize = (1 << TASK_BITS) - 1;
const MASK: u64 = (1 << TASK_BITS) - 1;

#[inline(always)]
fn pack(epoch: u64, n: u64, next: u64) -> u64 {
    (epoch << (2 * TASK_BITS)) | (n << TASK_BITS) | next
}

#[inline(always)]
fn unpack(s: u64) -> (u64, u64, u64) {
    (s >> (2 * TASK_BITS), (s >> TASK_BITS) & MASK, s & MASK)
}

struct Shared {
    /// epoch (24 bits) | number of tasks (20 bits) | next unclaimed task (20 bits).
    state: AtomicU64,
    /// The current job; written by `run` only while no task is outstanding.
    job: UnsafeCell<Option<JobPtr>>,
    /// Tasks of the current epoch that have finished.
    done: AtomicUsize,
    stop: AtomicBool,
    panicked: AtomicBool,
    sleeping: AtomicUsize,
    sleep_lock: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `job` is written by `run` only before it publishes a new epoch (Release on `state`) and
// while no task is claimed; workers read it only after claiming a task of that epoch (Acquire on
// `state`), and `run` does not return (nor write `job` again) until every claimed task is done.
unsafe impl Sync for Shared {}

#[derive(Clone, Copy)]
struct JobPtr(*const JobFn);

// SAFETY: see `Shared`; the pointee is `Sync`.
unsafe impl Send for JobPtr {}

pub struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    run_lock: Mutex<()>,
}

/// How long an idle worker spins before yielding, and yields before sleeping.
const SPIN: Duration = Duration::from_micros(300);
const YIELD: Duration = Duration::from_millis(5);

impl Pool {
    /// A pool of `n_threads` threads in total: the caller of [`Pool::run`] is worker 0.
    pub fn new(n_threads: usize) -> Pool {
        let shared = Arc::new(Shared {
            state: AtomicU64::new(0),
            job: UnsafeCell::new(None),
            done: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
            sleeping: AtomicUsize::new(0),
            sleep_lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let workers = (1..n_threads.max(1))
            .map(|id| {
                let s = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("lockstep-cpu-{id}"))
                    .spawn(move || worker(s, id))
                    .expect("spawn a kernel thread")
            })
            .collect();
        Pool {
            shared,
            workers,
            run_lock: Mutex::new(()),
        }
    }

    pub fn n_threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `f(task, worker)` for every task in `0..n_tasks`, spread over the pool's threads;
    /// returns when all tasks are done. `worker` is in `0..n_threads()` and unique among
    /// concurrently running tasks (use it to index per-thread scratch).
    pub fn run(&self, n_tasks: usize, f: &(dyn Fn(usize, usize) + Sync)) {
        if self.workers.is_empty() || n_tasks <= 1 {
            for t in 0..n_tasks {
                f(t, 0);
            }
            return;
        }
        if n_tasks > MAX_TASKS {
            for start in (0..n_tasks).step_by(MAX_TASKS) {
                let n = MAX_TASKS.min(n_tasks - start);
                self.run(n, &|t, w| f(start + t, w));
            }
            return;
        }
        let _guard = self.run_lock.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        // SAFETY: erasing the lifetime of `f` is sound because this function returns only after
        // every task of this epoch is done, and workers dereference the job only while holding a
        // claimed task of this epoch (see `Shared`).
        let ptr: *const JobFn =
            unsafe { std::mem::transmute::<&(dyn Fn(usize, usize) + Sync), &'static JobFn>(f) };
        let (epoch, _, _) = unpack(s.state.load(Ordering::Acquire));
        let epoch = (epoch + 1) & ((1 << (64 - 2 * TASK_BITS)) - 1);
        // SAFETY: no task is outstanding (the previous `run` waited for all of them) and the new
        // epoch is not yet published, so no worker reads `job` now.
        unsafe { *s.job.get() = Some(JobPtr(ptr)) };
        s.done.store(0, Ordering::Relaxed);
        s.state
            .store(pack(epoch, n_tasks as u64, 0), Ordering::Release);
        if s.sleeping.load(Ordering::SeqCst) > 0 {
            let _l = s.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| {
            while let Some(t) = claim(s, epoch) {
                f(t, 0);
                s.done.fetch_add(1, Ordering::Release);
            }
        }));
        let start = Instant::now();
        while s.done.load(Ordering::Acquire) < n_tasks {
            if start.elapsed() < SPIN {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if s.panicked.swap(false, Ordering::SeqCst) {
            panic!("a kernel thread panicked");
        }
    }
}

/// Claims the next task of `epoch`, if any is left.
#[inline]
fn claim(s: &Shared, epoch: u64) -> Option<usize> {
    let mut cur = s.state.load(Ordering::Acquire);
    loop {
        let (e, n, next) = unpack(cur);
        if e != epoch || next >= n {
            return None;
        }
        match s
            .state
            .compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => return Some(next as usize),
            Err(v) => cur = v,
        }
    }
}

fn worker(s: Arc<Shared>, id: usize) {
    let mut seen = unpack(s.state.load(Ordering::Acquire)).0;
    loop {
        // Wait for a new epoch: spin, then yield, then sleep.
        let start = Instant::now();
        let epoch = loop {
            let e = unpack(s.state.load(Ordering::Acquire)).0;
            if e != seen || s.stop.load(Ordering::Relaxed) {
                break e;
            }
            let el = start.elapsed();
            if el < SPIN {
                std::hint::spin_loop();
            } else if el < YIELD {
                std::thread::yield_now();
            } else {
                let mut g = s.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
                s.sleeping.fetch_add(1, Ordering::SeqCst);
                while unpack(s.state.load(Ordering::SeqCst)).0 == seen
                    && !s.stop.load(Ordering::SeqCst)
                {
                    g = s.wake.wait(g).unwrap_or_else(|e| e.into_inner());
                }
                s.sleeping.fetch_sub(1, Ordering::SeqCst);
            }
        };
        if s.stop.load(Ordering::SeqCst) {
            return;
        }
        seen = epoch;
        while let Some(t) = claim(&s, epoch) {
            // SAFETY: we hold a claimed task of `epoch`, so `run` is waiting and `job` holds this
            // epoch's job (see `Shared`).
            let job = unsafe { *s.job.get() };
            if let Some(JobPtr(p)) = job {
                // SAFETY: as above, the pointee outlives this task.
                let f = unsafe { &*p };
                if catch_unwind(AssertUnwindSafe(|| f(t, id))).is_err() {
                    s.panicked.store(true, Ordering::SeqCst);
                }
            }
            s.done.fetch_add(1, Ordering::Release);
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let s = &*self.shared;
        s.stop.store(true, Ordering::SeqCst);
        {
            let _l = s.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_every_task_once() {
        let pool = Pool::new(3);
        for n in [0usize, 1, 2, 7, 100, 5000] {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            pool.run(n, &|t, w| {
                assert!(w < 3);
                hits[t].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
    }

    #[test]
    fn packs_state() {
        let s = pack(5, 1000, 7);
        assert_eq!(unpack(s), (5, 1000, 7));
        assert_eq!(unpack(s + 1), (5, 1000, 8));
    }
}
