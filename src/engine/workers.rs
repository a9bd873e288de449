//! Many documents on one engine at once: worker threads, each with its own share of
//! the engine ([`Engine::share`]) and its own copy of the caller's state, all members
//! of one fresh [`BatchGroup`], so that their forward passes run as one batched pass
//! while each keeps its own decoding loop. `formwork extract --jsonl --parallel` and
//! `formwork bench --parallel` run on this; the server's pool has its own long-lived
//! threads.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError};

use formwork_models::group::{BatchGroup, GroupStats};

use super::Engine;

impl Engine {
    /// Another engine on the same weights and token trie, with its own KV state, and
    /// the same cache of prompt prefixes (a prefix any of them computed, each reuses):
    /// one per worker thread of a server or a `--parallel` batch.
    pub fn share(&self) -> Engine {
        Engine {
            loaded: self.loaded.share(),
            trie: self.trie.clone(),
            prefix: self.prefix.clone(),
            reuse_prefix: self.reuse_prefix,
            prefix_tokens_reused: 0,
            redirect: self.redirect.clone(),
        }
    }

    /// Put this engine's model in `group`: engines shared from it afterwards decode
    /// together when their threads are members ([`formwork_models::group`]).
    pub fn join_group(&mut self, group: &Arc<BatchGroup>) {
        self.loaded.join_group(group);
        // Cached prefixes hold models outside the group.
        self.prefix = Default::default();
    }
}

/// How a [`run`] ended.
#[derive(Debug)]
pub struct Finished {
    /// Prompt tokens the workers took from the shared prefix cache.
    pub prefix_tokens_reused: usize,
    /// Prefixes the workers computed, and prefills that waited for one another
    /// worker was computing (one prefill per shared prefix).
    pub prefix: super::prefix::PrefixStats,
    /// Workers that panicked (each with the job it held, whose result never came).
    pub panicked: usize,
    /// The batch group's passes and rows.
    pub stats: GroupStats,
}

/// Runs `work` on each of `jobs` on up to `threads` worker threads named `name-i`.
///
/// Each worker has its own share of `engine`, in a fresh batch group (a share is
/// joined, so `engine` itself is left as it was), and its own clone of `state`. A
/// worker checks `go_on()` before taking each job, in input order. Results reach `take`
/// on the calling thread as they are finished, in any order, with the job's index;
/// `take` returning `Break` makes the workers stop taking jobs (results already on
/// their way still reach `take`). A thread that cannot be started is an error, after
/// the others have finished what they hold.
#[allow(clippy::too_many_arguments)]
pub fn run<J: Send, S: Clone + Send, R: Send>(
    engine: &Engine,
    state: &S,
    jobs: Vec<J>,
    threads: usize,
    name: &str,
    go_on: &(dyn Fn() -> bool + Sync),
    work: &(dyn Fn(&mut Engine, &mut S, J) -> R + Sync),
    mut take: impl FnMut(usize, R) -> ControlFlow<()>,
) -> anyhow::Result<Finished> {
    let group = BatchGroup::new();
    let mut base = engine.share();
    base.join_group(&group);
    let threads = threads.min(jobs.len()).max(1);
    let queue = Mutex::new(jobs.into_iter().enumerate());
    let stop = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<(usize, R)>();
    let mut failed = None;
    let (reused, panicked) = std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(threads);
        for i in 0..threads {
            let mut engine = base.share();
            let mut state = state.clone();
            let (queue, stop, tx, group) = (&queue, &stop, tx.clone(), &group);
            let spawned = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn_scoped(scope, move || {
                    let _member = group.join();
                    while !stop.load(Ordering::SeqCst) && go_on() {
                        // Taken over if poisoned: the lock guards one `next()`, which
                        // either moved a job out or did not, so the queue is whole (a
                        // poisoned lock used to read as empty: the jobs left were
                        // dropped without a result).
                        let next = queue.lock().unwrap_or_else(PoisonError::into_inner).next();
                        let Some((idx, job)) = next else { break };
                        if tx.send((idx, work(&mut engine, &mut state, job))).is_err() {
                            break;
                        }
                    }
                    engine.prefix_tokens_reused
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    failed = Some(anyhow::anyhow!("starting worker thread {name}-{i}: {e}"));
                    stop.store(true, Ordering::SeqCst);
                    break;
                }
            }
        }
        drop(tx);
        for (idx, r) in rx {
            if take(idx, r).is_break() {
                stop.store(true, Ordering::SeqCst);
            }
        }
        let (mut reused, mut panicked) = (0, 0);
        for h in handles {
            match h.join() {
                Ok(n) => reused += n,
                Err(_) => panicked += 1,
            }
        }
        (reused, panicked)
    });
    match failed {
        Some(e) => Err(e),
        None => Ok(Finished {
            prefix_tokens_reused: reused,
            prefix: base.prefix_stats(),
            panicked,
            stats: group.stats(),
        }),
    }
}
