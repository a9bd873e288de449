//! The engine threads. `Engine` is not `Sync`: each of `--parallel` threads owns one,
//! all sharing one set of weights ([`Engine::share`]). Running requests decode
//! together: their engines are in one [`BatchGroup`], and a thread is a member while
//! it runs a job, so the forward passes of all running requests are one batched pass
//! (a new request's prefill rides along with the others' decode steps). Jobs come through one queue;
//! admission (the semaphore of `--parallel + --max-queue` permits) happens before a
//! job is sent, in the handler.
//!
//! A job carries a cancel flag. The handler sets it when its future is dropped (the
//! client went away) and the engine's [`Watch`] reads it before every step and every
//! chunk of the prompt's prefill, so a disconnect frees its thread within one forward
//! pass. A panic inside the engine
//! is caught here, answered as a 500, and the thread goes on with a fresh engine.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use formwork_models::chat::ChatMessage;
use tokio::sync::{mpsc as tmpsc, oneshot};

use super::lock;
use super::schemas::{Compiled, CompiledTools};
use crate::engine::chat::{ChatAnswer, ChatError, ChatOptions, Constraint};
use crate::engine::decode::Watch;
use crate::engine::Engine;
use formwork_models::group::{panic_message, BatchGroup};

/// One request for an engine thread.
pub struct Job {
    pub messages: Vec<ChatMessage>,
    pub schema: Option<Arc<Compiled>>,
    /// The request's tools: the turn runs under their grammar (which holds the
    /// answer's schema too).
    pub tools: Option<Arc<CompiledTools>>,
    pub opts: ChatOptions,
    /// The run must end by then (`--request-timeout`, counted from arrival).
    pub deadline: Option<Instant>,
    pub cancel: Arc<AtomicBool>,
    /// Whole UTF-8 text as it is produced (streaming only).
    pub deltas: Option<tmpsc::UnboundedSender<String>>,
    pub reply: oneshot::Sender<Result<ChatAnswer, JobError>>,
    /// Test hook (debug builds, `FORMWORK_SERVE_TEST_HOOKS=1`): panic inside the engine
    /// thread.
    pub panic: bool,
    /// Test hook (the same): wait this long before the first forward pass, so that a
    /// stream is idle for a known time (its keep-alive comments are then certain).
    pub pause: Option<std::time::Duration>,
}

#[derive(Debug)]
pub enum JobError {
    Chat(ChatError),
    Panic(String),
    /// Cancelled before it started, or the deadline passed in the queue.
    Dropped,
}

pub struct Pool {
    tx: Mutex<mpsc::Sender<Job>>,
    /// Jobs running on an engine thread now.
    pub running: Arc<AtomicUsize>,
}

impl Pool {
    /// Start `n` threads on engines shared from `base`.
    pub fn start(mut base: Engine, n: usize) -> Pool {
        let group = BatchGroup::new();
        if n > 1 {
            base.join_group(&group);
        }
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let base = Arc::new(Mutex::new(base));
        let running = Arc::new(AtomicUsize::new(0));
        for i in 0..n.max(1) {
            let rx = rx.clone();
            let base = base.clone();
            let running = running.clone();
            let group = group.clone();
            let engine = lock(&base).share();
            let _ = std::thread::Builder::new()
                .name(format!("formwork-engine-{i}"))
                .spawn(move || worker(engine, base, rx, running, group));
        }
        Pool {
            tx: Mutex::new(tx),
            running,
        }
    }

    pub fn submit(&self, job: Job) -> Result<(), Job> {
        lock(&self.tx).send(job).map_err(|e| e.0)
    }

    /// Test hook: poisons the queue's lock.
    #[cfg(debug_assertions)]
    pub fn poison(&self) {
        super::poison(&self.tx);
    }
}

fn worker(
    mut engine: Engine,
    base: Arc<Mutex<Engine>>,
    rx: Arc<Mutex<mpsc::Receiver<Job>>>,
    running: Arc<AtomicUsize>,
    group: Arc<BatchGroup>,
) {
    loop {
        let job = {
            let guard = lock(&rx);
            match guard.recv() {
                Ok(j) => j,
                Err(_) => return,
            }
        };
        if job.cancel.load(Ordering::SeqCst) || job.deadline.is_some_and(|d| Instant::now() >= d) {
            let _ = job.reply.send(Err(JobError::Dropped));
            continue;
        }
        running.fetch_add(1, Ordering::SeqCst);
        metrics::gauge!("formwork_requests_running").increment(1.0);
        let Job {
            messages,
            schema,
            tools,
            mut opts,
            deadline,
            cancel,
            deltas,
            reply,
            panic,
            pause,
        } = job;
        opts.timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        opts.think_watch = Some(watch(cancel.clone(), deltas.clone(), THOUGHT));
        opts.watch = Some(watch(cancel, deltas, ANSWER));
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
            // Decode with the other running requests until this one ends (the guard
            // also leaves on a panic).
            let _member = group.join();
            if panic {
                panic!("test hook: a panic inside the engine thread");
            }
            if let Some(p) = pause {
                std::thread::sleep(p);
            }
            let constraint = match (&tools, &schema) {
                (Some(t), _) => Constraint::Tools(&t.toolbox),
                (None, Some(c)) => Constraint::Schema {
                    grammar: c.grammar.clone(),
                    validator: &c.validator,
                },
                (None, None) => Constraint::Text,
            };
            engine.chat(&messages, &constraint, &opts)
        }));
        let out = match result {
            Ok(Ok(a)) => Ok(a),
            Ok(Err(e)) => Err(JobError::Chat(e)),
            Err(p) => {
                let msg = panic_message(p.as_ref());
                // The engine may be half-way through a step: start from a fresh one.
                engine = lock(&base).share();
                Err(JobError::Panic(msg))
            }
        };
        running.fetch_sub(1, Ordering::SeqCst);
        metrics::gauge!("formwork_requests_running").decrement(1.0);
        // How well running requests shared their forward passes (sequences / passes).
        let st = group.stats();
        metrics::counter!("formwork_batched_forward_passes_total").absolute(st.passes);
        metrics::counter!("formwork_batched_forward_sequences_total").absolute(st.rows);
        let _ = reply.send(out);
    }
}

/// The engine's watch for one job: stop when cancelled or when the stream's reader
/// is gone; send every whole UTF-8 character once.
/// Each piece on the stream's channel starts with one of these: which text it extends.
pub(super) const ANSWER: char = 'A';
pub(super) const THOUGHT: char = 'T';

fn watch(
    cancel: Arc<AtomicBool>,
    deltas: Option<tmpsc::UnboundedSender<String>>,
    tag: char,
) -> Watch {
    let sent = Mutex::new(0usize);
    Watch(Arc::new(move |bytes: &[u8]| {
        if cancel.load(Ordering::SeqCst) {
            return false;
        }
        let Some(tx) = &deltas else { return true };
        if tx.is_closed() {
            cancel.store(true, Ordering::SeqCst);
            return false;
        }
        let mut n = lock(&sent);
        if bytes.len() > *n {
            let fresh = &bytes[*n..];
            let whole = match std::str::from_utf8(fresh) {
                Ok(t) => t,
                Err(e) => std::str::from_utf8(&fresh[..e.valid_up_to()]).unwrap_or(""),
            };
            if !whole.is_empty() {
                if tx.send(format!("{tag}{whole}")).is_err() {
                    cancel.store(true, Ordering::SeqCst);
                    return false;
                }
                *n += whole.len();
            }
        }
        true
    }))
}
