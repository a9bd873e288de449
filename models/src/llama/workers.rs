//! The CPU file's worker threads: one parallel step of a forward pass (the rows of a
//! matrix product, the heads of attention) is split over the caller and `n - 1` helpers
//! that wait for the next step by spinning, not by sleeping.
//!
//! A decode step runs a few hundred short parallel steps (each projection of each
//! layer), with a little serial work between them. A pool whose idle threads sleep
//! (rayon's) pays a wake-up per step: on the 7B file on 2 threads that was 150
//! context switches a token against llama.cpp's 5, whose threads also spin. Here a
//! helper spins for [`SPIN`] after its last step before it parks, so within a pass it
//! is awake when the next step comes, and an idle engine costs no CPU after that.
//!
//! One caller at a time uses the helpers; a second caller that finds them taken (two
//! engines of a server in one process) runs its step on its own thread, with the same
//! result, since every step's parts write disjoint places and are summed by no one.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Condvar, Mutex, TryLockError};
use std::time::{Duration, Instant};

/// How long a helper spins for the next step before it parks.
pub const SPIN: Duration = Duration::from_millis(2);

/// `state`: the helpers inside the current step (low bits), whether the step takes
/// helpers (`OPEN`), and the step's number (above).
const BUSY: u64 = (1 << 16) - 1;
const OPEN: u64 = 1 << 16;
const EPOCH: u64 = 1 << 17;

/// `state` holds an open step that a helper which last joined step `seen` has not joined.
fn new_step(state: u64, seen: u64) -> bool {
    state & OPEN != 0 && state / EPOCH != seen
}

/// A step: its parts `0..count`, handed out in order.
struct Job {
    f: *const (dyn Fn(usize) + Sync),
    count: usize,
}

struct Shared {
    state: AtomicU64,
    next: AtomicUsize,
    /// Written by the caller while no helper is inside a step (`state` closed, busy 0);
    /// read by a helper only after it joined an open step.
    job: UnsafeCell<Job>,
    parked: AtomicUsize,
    sleep: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `job` is written only while no helper can read it (see `Shared::job`), and
// the closure it points to is `Sync` and outlives the step (the caller waits for every
// helper to leave before it returns).
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

/// `n - 1` helper threads and the caller's lock.
pub struct Workers {
    shared: Arc<Shared>,
    caller: Mutex<()>,
    threads: usize,
}

impl Workers {
    /// A pool of `threads` (the caller counts as one): `threads - 1` helpers named
    /// `formwork-cpu-{i}`.
    pub fn new(threads: usize) -> std::io::Result<Workers> {
        let threads = threads.max(1);
        fn noop(_: usize) {}
        let noop: &'static (dyn Fn(usize) + Sync) = &noop;
        let shared = Arc::new(Shared {
            state: AtomicU64::new(0),
            next: AtomicUsize::new(0),
            job: UnsafeCell::new(Job { f: noop, count: 0 }),
            parked: AtomicUsize::new(0),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
        });
        for i in 1..threads {
            let s = shared.clone();
            std::thread::Builder::new()
                .name(format!("formwork-cpu-{i}"))
                .spawn(move || helper(&s))?;
        }
        Ok(Workers {
            shared,
            caller: Mutex::new(()),
            threads,
        })
    }

    /// Threads that take part in a step, the caller's included.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// `f(i)` for every `i` in `0..count`, over the caller and the helpers; returns when
    /// all are done. The parts must not depend on each other's order.
    pub fn for_each(&self, count: usize, f: &(dyn Fn(usize) + Sync)) {
        if self.threads == 1 || count <= 1 {
            return (0..count).for_each(f);
        }
        let _held = match self.caller.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return (0..count).for_each(f),
        };
        let s = &*self.shared;
        // SAFETY: closed with no helper inside (the last step waited for them), so no
        // helper reads `job` now. The lifetime is erased: the closure outlives the step,
        // since this returns only once every helper has left it.
        unsafe {
            let f: *const (dyn Fn(usize) + Sync + '_) = f;
            *s.job.get() = Job {
                f: std::mem::transmute::<
                    *const (dyn Fn(usize) + Sync + '_),
                    *const (dyn Fn(usize) + Sync + 'static),
                >(f),
                count,
            };
        }
        s.next.store(0, Relaxed);
        s.state.fetch_add(EPOCH | OPEN, SeqCst);
        if s.parked.load(SeqCst) > 0 {
            let _g = s.sleep.lock().unwrap_or_else(|p| p.into_inner());
            s.wake.notify_all();
        }
        // A part that panics here still closes the step and waits for the helpers
        // before the panic leaves (the closure must outlive them).
        let guard = Close(s);
        run_parts(s, f, count);
        drop(guard);
    }
}

/// Closes the step and waits for the helpers inside it to leave.
struct Close<'a>(&'a Shared);

impl Drop for Close<'_> {
    fn drop(&mut self) {
        let s = self.0;
        s.state.fetch_and(!OPEN, SeqCst);
        while s.state.load(Acquire) & BUSY != 0 {
            std::hint::spin_loop();
        }
    }
}

fn run_parts(s: &Shared, f: &(dyn Fn(usize) + Sync), count: usize) {
    loop {
        let i = s.next.fetch_add(1, Relaxed);
        if i >= count {
            break;
        }
        f(i);
    }
}

fn helper(s: &Shared) {
    let mut seen = 0u64;
    loop {
        let mut idle = Instant::now();
        let mut spins = 0u32;
        loop {
            let st = s.state.load(SeqCst);
            if new_step(st, seen) {
                if s.state
                    .compare_exchange_weak(st, st + 1, SeqCst, Relaxed)
                    .is_ok()
                {
                    seen = st / EPOCH;
                    break;
                }
                continue;
            }
            spins += 1;
            if !spins.is_multiple_of(256) {
                std::hint::spin_loop();
                continue;
            }
            if idle.elapsed() < SPIN {
                continue;
            }
            // Park until the next step opens.
            let mut g = s.sleep.lock().unwrap_or_else(|p| p.into_inner());
            s.parked.fetch_add(1, SeqCst);
            while !new_step(s.state.load(SeqCst), seen) {
                g = s.wake.wait(g).unwrap_or_else(|p| p.into_inner());
            }
            s.parked.fetch_sub(1, SeqCst);
            drop(g);
            idle = Instant::now();
        }
        // SAFETY: joined an open step: `job` was written before it opened and stays
        // valid until this helper leaves (the caller waits for busy to reach 0).
        let (f, count) = unsafe {
            let j = &*s.job.get();
            (&*j.f, j.count)
        };
        // A panic in a part would leave the caller waiting: end the process instead,
        // as a panic on a rayon worker does.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_parts(s, f, count)));
        s.state.fetch_sub(1, SeqCst);
        if r.is_err() {
            std::process::abort();
        }
    }
}

/// `f(i, chunk)` for each `chunk`-long piece `i` of `out` (the last may be shorter),
/// over the workers.
pub fn for_each_chunk_mut<T: Send>(
    workers: &Workers,
    out: &mut [T],
    chunk: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let len = out.len();
    let chunk = chunk.max(1);
    let base = SendPtr(out.as_mut_ptr());
    let base = &base;
    workers.for_each(len.div_ceil(chunk), &|i| {
        let start = i * chunk;
        let n = chunk.min(len - start);
        // SAFETY: the pieces are disjoint, each index is given out once, and `out`
        // is borrowed mutably for the whole call.
        let piece = unsafe { std::slice::from_raw_parts_mut(base.0.add(start), n) };
        f(i, piece)
    });
}

struct SendPtr<T>(*mut T);
// SAFETY: used only to hand disjoint pieces of one slice to the workers.
unsafe impl<T: Send> Sync for SendPtr<T> {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn every_part_runs_once_over_many_steps() {
        let w = Workers::new(3).unwrap();
        for count in [0usize, 1, 2, 7, 64, 1000] {
            let hits: Vec<AtomicU32> = (0..count).map(|_| AtomicU32::new(0)).collect();
            for _ in 0..50 {
                w.for_each(count, &|i| {
                    hits[i].fetch_add(1, Relaxed);
                });
            }
            assert!(hits.iter().all(|h| h.load(Relaxed) == 50), "count {count}");
        }
    }

    #[test]
    fn helpers_wake_after_parking() {
        let w = Workers::new(2).unwrap();
        let sum = AtomicUsize::new(0);
        w.for_each(8, &|i| {
            sum.fetch_add(i, Relaxed);
        });
        std::thread::sleep(SPIN * 3);
        w.for_each(8, &|i| {
            sum.fetch_add(i, Relaxed);
        });
        assert_eq!(sum.load(Relaxed), 2 * 28);
    }

    #[test]
    fn two_callers_at_once_both_finish() {
        let w = Arc::new(Workers::new(2).unwrap());
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let w = w.clone();
                std::thread::spawn(move || {
                    let mut v = vec![0u64; 4096];
                    for round in 0..200u64 {
                        for_each_chunk_mut(&w, &mut v, 100, |i, c| {
                            c.iter_mut().for_each(|x| *x += round + i as u64)
                        });
                    }
                    v
                })
            })
            .collect();
        for h in handles {
            let v = h.join().unwrap();
            let want = |j: usize| (0..200u64).sum::<u64>() + 200 * (j / 100) as u64;
            assert!(v.iter().enumerate().all(|(j, &x)| x == want(j)));
        }
    }
}
