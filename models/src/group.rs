//! Sequences on several threads, decoded together: one forward pass for all of them.
//!
//! Decoding one token is memory-bound: each forward pass reads every weight once. A
//! [`BatchGroup`] lets B threads, each running its own decoding loop on its own
//! snapshot of one model, share that read. Each thread's model is a [`GroupModel`];
//! its `forward` hands the request to the group and waits. When every member thread
//! has a request waiting, the last one to arrive runs them all as one pass
//! ([`crate::runtime::forward_batch`]) and wakes the others with their logits.
//!
//! ```text
//!  thread 1: mask ─ pick ─┐                ┌─ mask ─ pick ─┐
//!  thread 2: mask ─ pick ─┼─ one pass (B) ─┼─ mask ─ pick ─┼─ one pass (B) ─ ...
//!  thread 3: mask ─ pick ─┘                └─ mask ─ pick ─┘
//! ```
//!
//! The decoding loop does not change: it calls `forward` as before, and its masks,
//! jump-forward, null look-ahead and grounding take-backs run on its own thread, in
//! parallel with the other members'. Membership is per thread: [`BatchGroup::join`]
//! returns a guard, and a thread that holds none runs its forwards alone at once
//! (so a model wrapped in a group behaves as before outside a batch). A member that
//! leaves (its guard dropped, also on a panic) no longer holds the others up. A panic
//! inside the shared pass is caught and given to every request in it as an error.
//!
//! Snapshots of a `GroupModel` stay in the group, so the prompt-prefix cache and the
//! decoding loop's checkpoints batch too.
//!
//! This module uses [`crate::runtime`] (the model trait, the batched pass, the loaded
//! model) and `runtime` knows nothing of groups: [`LoadedModel::join_group`] is defined
//! here.

use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};

use crate::runtime::{forward_batch, ForwardTimings, LanguageModel, LoadedModel};
use crate::{ModelError, Result};

/// Threads decoding together; see the module doc.
#[derive(Debug)]
pub struct BatchGroup {
    id: u64,
    state: Mutex<State>,
    cv: Condvar,
}

/// What the group's passes have been: how many, and how many sequences in all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupStats {
    pub passes: u64,
    /// Sequences over all passes (`rows / passes` is the mean batch).
    pub rows: u64,
    /// The largest batch.
    pub max_batch: usize,
}

impl GroupStats {
    pub fn mean_batch(&self) -> f64 {
        if self.passes == 0 {
            0.0
        } else {
            self.rows as f64 / self.passes as f64
        }
    }
}

struct Request {
    ticket: u64,
    model: Box<dyn LanguageModel>,
    tokens: Vec<u32>,
    pos: usize,
}

type Outcome = (Box<dyn LanguageModel>, Result<Vec<f32>>);

#[derive(Default)]
struct State {
    members: usize,
    next_ticket: u64,
    pending: Vec<Request>,
    done: HashMap<u64, Outcome>,
    stats: GroupStats,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("members", &self.members)
            .field("pending", &self.pending.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

thread_local! {
    /// The groups this thread is a member of, with how many guards it holds of each.
    static MEMBER_OF: RefCell<Vec<(u64, usize, Weak<BatchGroup>)>> = const { RefCell::new(Vec::new()) };
}

fn is_member(id: u64) -> bool {
    MEMBER_OF.with(|m| m.borrow().iter().any(|&(g, _, _)| g == id))
}

/// While it lives, the calling thread does not hold up the groups it is a member of
/// (their passes run without waiting for its next request); made by [`step_aside`].
#[derive(Debug)]
pub struct Aside {
    groups: Vec<Arc<BatchGroup>>,
    /// Bound to the thread that stepped aside.
    _thread: std::marker::PhantomData<*const ()>,
}

/// Step aside from this thread's groups while it waits for something other than a
/// forward pass (another member computing a prompt prefix it needs): a member that
/// waits on anything but its group would hold the group's passes up, and the member
/// it waits for could never finish. The guard's drop takes the thread back in; its
/// next forward then batches with the others' again.
pub fn step_aside() -> Aside {
    let groups: Vec<Arc<BatchGroup>> = MEMBER_OF.with(|m| {
        m.borrow()
            .iter()
            .filter_map(|(_, _, g)| g.upgrade())
            .collect()
    });
    for g in &groups {
        let mut st = g.lock();
        st.members = st.members.saturating_sub(1);
        drop(st);
        // A waiting request may now be the last one the group waits for.
        g.cv.notify_all();
    }
    Aside {
        groups,
        _thread: std::marker::PhantomData,
    }
}

impl Drop for Aside {
    fn drop(&mut self) {
        for g in &self.groups {
            g.lock().members += 1;
        }
    }
}

/// A thread's membership of a [`BatchGroup`]; dropping it leaves the group.
#[derive(Debug)]
pub struct Membership {
    group: Arc<BatchGroup>,
}

impl Drop for Membership {
    fn drop(&mut self) {
        let id = self.group.id;
        let last = MEMBER_OF.with(|m| {
            let mut m = m.borrow_mut();
            match m.iter().position(|&(g, _, _)| g == id) {
                Some(i) if m[i].1 > 1 => {
                    m[i].1 -= 1;
                    false
                }
                Some(i) => {
                    m.remove(i);
                    true
                }
                None => false,
            }
        });
        if last {
            let mut st = self.group.lock();
            st.members = st.members.saturating_sub(1);
            drop(st);
            // A waiting request may now be the last one the group waits for.
            self.group.cv.notify_all();
        }
    }
}

impl BatchGroup {
    pub fn new() -> Arc<BatchGroup> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Arc::new(BatchGroup {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Make this thread a member until the guard drops: its forwards through the
    /// group's models wait for the other members' and run with them. Joining twice on
    /// one thread counts once.
    pub fn join(self: &Arc<Self>) -> Membership {
        let first = MEMBER_OF.with(|m| {
            let mut m = m.borrow_mut();
            match m.iter_mut().find(|(g, _, _)| *g == self.id) {
                Some(e) => {
                    e.1 += 1;
                    false
                }
                None => {
                    m.push((self.id, 1, Arc::downgrade(self)));
                    true
                }
            }
        });
        if first {
            self.lock().members += 1;
        }
        Membership {
            group: self.clone(),
        }
    }

    /// Member threads now.
    pub fn members(&self) -> usize {
        self.lock().members
    }

    pub fn stats(&self) -> GroupStats {
        self.lock().stats
    }

    /// `model` into this group: its forwards batch with the other members' when the
    /// calling thread is a member.
    pub fn wrap(self: &Arc<Self>, model: Box<dyn LanguageModel>) -> Box<dyn LanguageModel> {
        Box::new(GroupModel {
            vocab: model.vocab_size(),
            inner: Some(model),
            group: self.clone(),
        })
    }

    /// Queue one member's request; run the pass when it completes the batch; wait.
    fn forward(&self, model: Box<dyn LanguageModel>, tokens: &[u32], pos: usize) -> Outcome {
        let mut st = self.lock();
        let ticket = st.next_ticket;
        st.next_ticket += 1;
        st.pending.push(Request {
            ticket,
            model,
            tokens: tokens.to_vec(),
            pos,
        });
        loop {
            if let Some(out) = st.done.remove(&ticket) {
                return out;
            }
            let mine_waits = st.pending.iter().any(|r| r.ticket == ticket);
            if mine_waits && st.pending.len() >= st.members {
                let batch = std::mem::take(&mut st.pending);
                drop(st);
                let outcomes = run(batch);
                st = self.lock();
                st.stats.passes += 1;
                st.stats.rows += outcomes.len() as u64;
                st.stats.max_batch = st.stats.max_batch.max(outcomes.len());
                for (t, out) in outcomes {
                    st.done.insert(t, out);
                }
                self.cv.notify_all();
                continue;
            }
            st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// One pass over `batch`; a panic inside it becomes every request's error.
fn run(batch: Vec<Request>) -> Vec<(u64, Outcome)> {
    let mut tickets = Vec::with_capacity(batch.len());
    let mut models = Vec::with_capacity(batch.len());
    let mut feeds = Vec::with_capacity(batch.len());
    for r in batch {
        tickets.push(r.ticket);
        models.push(r.model);
        feeds.push((r.tokens, r.pos));
    }
    let results = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let refs: Vec<(&[u32], usize)> = feeds.iter().map(|(t, p)| (&t[..], *p)).collect();
        forward_batch(&mut models, &refs)
    }));
    let results: Vec<Result<Vec<f32>>> = match results {
        Ok(r) => r,
        Err(p) => {
            let msg = panic_message(p.as_ref());
            models.iter_mut().for_each(|m| m.clear_kv_cache());
            (0..models.len())
                .map(|_| {
                    Err(ModelError::Candle(candle_core::Error::Msg(format!(
                        "a batched forward pass panicked: {msg}"
                    ))))
                })
                .collect()
        }
    };
    tickets
        .into_iter()
        .zip(models.into_iter().zip(results))
        .collect()
}

/// The message of a caught panic (`&str` or `String` payloads), else `"panic"`.
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}

/// A model in a [`BatchGroup`]: forwards from member threads run together.
pub struct GroupModel {
    /// `None` only while a request of this model is inside the group.
    inner: Option<Box<dyn LanguageModel>>,
    group: Arc<BatchGroup>,
    vocab: usize,
}

fn gone() -> ModelError {
    ModelError::Candle(candle_core::Error::Msg(
        "the model was lost in an earlier batched forward".into(),
    ))
}

impl LanguageModel for GroupModel {
    fn forward(&mut self, tokens: &[u32], pos: usize) -> Result<Vec<f32>> {
        let Some(mut model) = self.inner.take() else {
            return Err(gone());
        };
        if !is_member(self.group.id) {
            let out = model.forward(tokens, pos);
            self.inner = Some(model);
            return out;
        }
        let (model, out) = self.group.forward(model, tokens, pos);
        self.inner = Some(model);
        out
    }

    fn vocab_size(&self) -> usize {
        self.vocab
    }

    fn clear_kv_cache(&mut self) {
        if let Some(m) = self.inner.as_mut() {
            m.clear_kv_cache();
        }
    }

    fn truncate(&mut self, len: usize) -> bool {
        self.inner.as_mut().is_some_and(|m| m.truncate(len))
    }

    fn snapshot(&self) -> Box<dyn LanguageModel> {
        Box::new(GroupModel {
            inner: self.inner.as_ref().map(|m| m.snapshot()),
            group: self.group.clone(),
            vocab: self.vocab,
        })
    }

    fn timings(&self) -> ForwardTimings {
        self.inner.as_ref().map(|m| m.timings()).unwrap_or_default()
    }
}

impl LoadedModel {
    /// This model in `group`: forwards from the group's member threads run as one
    /// batched pass; snapshots (and so [`LoadedModel::share`]) stay in it.
    pub fn join_group(&mut self, group: &Arc<BatchGroup>) {
        let lent = Box::new(GroupModel {
            inner: None,
            group: group.clone(),
            vocab: 0,
        });
        let model = std::mem::replace(&mut self.model, lent);
        self.model = group.wrap(model);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;

    /// Logits that depend on every token fed so far (and the position), so a result
    /// given to the wrong sequence, or a cache mixed up, shows.
    #[derive(Clone, Default)]
    struct Fake {
        fed: Vec<u32>,
    }

    const VOCAB: usize = 8;

    impl LanguageModel for Fake {
        fn forward(&mut self, tokens: &[u32], pos: usize) -> Result<Vec<f32>> {
            if tokens.contains(&999) {
                panic!("token 999");
            }
            if pos == 0 {
                self.fed.clear();
            } else if pos != self.fed.len() {
                return Err(ModelError::Candle(candle_core::Error::Msg(format!(
                    "pos {pos}, cache {}",
                    self.fed.len()
                ))));
            }
            self.fed.extend_from_slice(tokens);
            let h = self.fed.iter().enumerate().fold(0u64, |h, (i, &t)| {
                h.wrapping_mul(31).wrapping_add(t as u64 * (i as u64 + 7))
            });
            Ok((0..VOCAB).map(|i| ((h >> (i * 4)) & 0xff) as f32).collect())
        }
        fn vocab_size(&self) -> usize {
            VOCAB
        }
        fn clear_kv_cache(&mut self) {
            self.fed.clear();
        }
        fn snapshot(&self) -> Box<dyn LanguageModel> {
            Box::new(self.clone())
        }
    }

    /// Ten forwards of thread `k`'s own tokens; the logits of each.
    fn steps(model: &mut dyn LanguageModel, k: u32) -> Vec<Result<Vec<f32>>> {
        let first = (k as usize % 3) + 1;
        let mut out = vec![model.forward(&[k, k + 1, k + 2][..first], 0)];
        for (i, pos) in (first..first + 9).enumerate() {
            out.push(model.forward(&[k * 10 + i as u32], pos));
        }
        out
    }

    fn alone(k: u32) -> Vec<Vec<f32>> {
        steps(&mut Fake::default(), k)
            .into_iter()
            .map(|r| r.unwrap())
            .collect()
    }

    #[test]
    fn members_run_together_and_each_gets_its_own_logits() {
        let group = BatchGroup::new();
        let base = group.wrap(Box::new(Fake::default()));
        let barrier = Arc::new(Barrier::new(4));
        let handles: Vec<_> = (0..4u32)
            .map(|k| {
                let mut m = base.snapshot();
                let group = group.clone();
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    let _member = group.join();
                    barrier.wait();
                    steps(m.as_mut(), k)
                })
            })
            .collect();
        for (k, h) in handles.into_iter().enumerate() {
            let got: Vec<Vec<f32>> = h.join().unwrap().into_iter().map(|r| r.unwrap()).collect();
            assert_eq!(got, alone(k as u32), "thread {k}");
        }
        let st = group.stats();
        assert_eq!((st.passes, st.rows, st.max_batch), (10, 40, 4), "{st:?}");
        assert_eq!(group.members(), 0);
    }

    #[test]
    fn a_thread_outside_the_group_runs_alone() {
        let group = BatchGroup::new();
        let mut m = group.wrap(Box::new(Fake::default()));
        let got: Vec<Vec<f32>> = steps(m.as_mut(), 5)
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(got, alone(5));
        assert_eq!(group.stats().passes, 0);
        // Joining twice on one thread counts once; leaving twice leaves once.
        let a = group.join();
        let b = group.join();
        assert_eq!(group.members(), 1);
        drop(a);
        assert_eq!(group.members(), 1);
        drop(b);
        assert_eq!(group.members(), 0);
    }

    #[test]
    fn a_member_that_leaves_does_not_hold_the_others() {
        let group = BatchGroup::new();
        let mut m = group.wrap(Box::new(Fake::default()));
        let joined = Arc::new(Barrier::new(2));
        let idle = {
            let group = group.clone();
            let joined = joined.clone();
            std::thread::spawn(move || {
                let member = group.join();
                joined.wait();
                std::thread::sleep(std::time::Duration::from_millis(50));
                drop(member);
            })
        };
        let _member = group.join();
        joined.wait();
        // Waits for the idle member until it leaves, then runs alone.
        let got: Vec<Vec<f32>> = steps(m.as_mut(), 2)
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(got, alone(2));
        idle.join().unwrap();
    }

    #[test]
    fn a_member_that_steps_aside_does_not_hold_the_others() {
        let group = BatchGroup::new();
        let mut m = group.wrap(Box::new(Fake::default()));
        let (ran_tx, ran_rx) = std::sync::mpsc::channel::<Vec<Vec<f32>>>();
        let (aside_tx, aside_rx) = std::sync::mpsc::channel::<()>();
        let _member = group.join();
        let other = {
            let group = group.clone();
            let mut m = m.snapshot();
            std::thread::spawn(move || {
                let _member = group.join();
                // Waits for the other member's result outside the group: without
                // stepping aside, the other's forwards would wait for this thread.
                let got = {
                    let _aside = step_aside();
                    aside_tx.send(()).unwrap();
                    ran_rx.recv().unwrap()
                };
                // Back in: its forwards still work (alone, once the other has left).
                (got, m.forward(&[4], 0).unwrap())
            })
        };
        // Two members, one of them aside: only this one is counted, so these passes
        // run with one row and do not wait for the other.
        aside_rx.recv().unwrap();
        assert_eq!(group.members(), 1);
        let got: Vec<Vec<f32>> = steps(m.as_mut(), 2)
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(got, alone(2));
        ran_tx.send(got).unwrap();
        drop(_member);
        let (seen, fourth) = other.join().unwrap();
        assert_eq!(seen, alone(2));
        assert_eq!(fourth, Fake::default().forward(&[4], 0).unwrap());
        assert_eq!(group.stats().max_batch, 1);
    }

    #[test]
    fn a_panic_in_the_pass_is_each_requests_error_and_the_group_goes_on() {
        let group = BatchGroup::new();
        let base = group.wrap(Box::new(Fake::default()));
        let barrier = Arc::new(Barrier::new(2));
        let handles: Vec<_> = [999u32, 1]
            .into_iter()
            .map(|t| {
                let mut m = base.snapshot();
                let group = group.clone();
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    let _member = group.join();
                    barrier.wait();
                    let first = m.forward(&[t], 0);
                    barrier.wait();
                    // The model survives its pass: it decodes again from the start.
                    let again = m.forward(&[3], 0);
                    (first, again)
                })
            })
            .collect();
        for h in handles {
            let (first, again) = h.join().unwrap();
            let e = first.unwrap_err().to_string();
            assert!(e.contains("panicked: token 999"), "{e}");
            assert_eq!(again.unwrap(), Fake::default().forward(&[3], 0).unwrap());
        }
    }
}
