//! The KV snapshots of prompt prefixes that engines share (a batch's workers, a
//! server's threads), and the prefixes being computed right now.
//!
//! A prefill starts from the longest cached prefix of its prompt. When another engine
//! is computing a longer prefix of the same prompt (four workers starting a batch on
//! the same system message and examples), it waits for that one and reuses it instead
//! of computing it again: one prefill per shared prefix. The engine that computes a
//! prefix marks it first; the mark goes when the snapshot is stored, or when the
//! computation fails (a guard drops it, also on a panic), and every waiter wakes to
//! look again. A waiter steps aside from its batch group while it waits
//! ([`formwork_models::group::step_aside`]), so the batched passes of the engine it
//! waits for do not wait for it. Nothing waits with a lock held across a forward pass.
//!
//! The tokens are fed [`PREFILL_CHUNK`] at a time ([`forward_chunked`]), and the
//! caller's `go` is asked before each chunk: a server's request whose client went away,
//! or whose deadline passed, stops within one chunk instead of after the whole prompt.
//! The logits are those of one pass over the prompt (the KV cache makes the chunks one
//! sequence; `tests/engine_prefill.rs` compares them on the real model).

use std::sync::{Condvar, Mutex, MutexGuard};

use formwork_models::runtime::LanguageModel;

/// Tokens per forward pass of a prefill: small enough that a stop waits for at most
/// one chunk (a fraction of a second on a small CPU model), large enough that the
/// passes still read each weight once per many tokens.
pub const PREFILL_CHUNK: usize = 256;

/// Feeds `ids[from..]` into `model` at positions `from..` (the cache holds `ids[..from]`,
/// or `from` is 0), `chunk` tokens per forward pass, asking `go` before each pass.
/// Returns the logits after the last token, or None when `go` said stop; the cache
/// then holds a prefix of `ids`. `ids[from..]` must not be empty.
pub fn forward_chunked(
    model: &mut dyn LanguageModel,
    ids: &[u32],
    from: usize,
    chunk: usize,
    go: &dyn Fn() -> bool,
) -> formwork_models::Result<Option<Vec<f32>>> {
    let chunk = chunk.max(1);
    let mut pos = from;
    loop {
        if !go() {
            return Ok(None);
        }
        let end = ids.len().min(pos + chunk);
        let logits = model.forward(&ids[pos..end], pos)?;
        pos = end;
        if pos >= ids.len() {
            return Ok(Some(logits));
        }
    }
}

/// One cached prefix: its tokens and the model's KV state after them.
pub(crate) struct Cached {
    pub tokens: Vec<u32>,
    pub model: Box<dyn LanguageModel>,
}

/// What the store has done, for tests and the batch summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PrefixStats {
    /// Prefix snapshots computed and stored (each one prefill of its tokens).
    pub computed: u64,
    /// Prefills that waited for a prefix another engine was computing.
    pub waited: u64,
}

#[derive(Default)]
struct State {
    /// Least recently used first.
    entries: Vec<Cached>,
    /// Prefixes an engine is computing now (one entry per mark).
    computing: Vec<Vec<u32>>,
    /// Prefills waiting now.
    waiting: usize,
    stats: PrefixStats,
}

/// Prompt-prefix KV snapshots shared by engines; see the module doc.
#[derive(Default)]
pub struct PrefixStore {
    state: Mutex<State>,
    cv: Condvar,
}

impl std::fmt::Debug for PrefixStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.lock();
        f.debug_struct("PrefixStore")
            .field("entries", &st.entries.len())
            .field("computing", &st.computing.len())
            .field("stats", &st.stats)
            .finish()
    }
}

/// Removes the marks still held (a failed or abandoned computation) and wakes the waiters.
struct Marks<'a> {
    store: &'a PrefixStore,
    held: Vec<Vec<u32>>,
}

impl Drop for Marks<'_> {
    fn drop(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let mut st = self.store.lock();
        for t in self.held.drain(..) {
            if let Some(i) = st.computing.iter().position(|c| *c == t) {
                st.computing.swap_remove(i);
            }
        }
        drop(st);
        self.store.cv.notify_all();
    }
}

impl PrefixStore {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn stats(&self) -> PrefixStats {
        self.lock().stats
    }

    /// Prefills waiting for another engine's prefix now.
    pub fn waiting(&self) -> usize {
        self.lock().waiting
    }

    /// Feed `ids` into `model` and return the logits after the last token, with how
    /// many leading tokens came from a cached snapshot. Starts from the longest cached
    /// prefix of `ids` (after waiting for any longer one being computed), and stores a
    /// snapshot at each of `cuts` (ascending prefix lengths) that it passes, keeping at
    /// most `room` entries. Feeds [`PREFILL_CHUNK`] tokens at a time and asks `go`
    /// before each chunk; the logits are None when it said stop.
    pub(crate) fn prefill(
        &self,
        model: &mut Box<dyn LanguageModel>,
        ids: &[u32],
        cuts: &[usize],
        room: usize,
        go: &dyn Fn() -> bool,
    ) -> formwork_models::Result<(Option<Vec<f32>>, usize)> {
        let usable = |t: &[u32]| ids.len() > t.len() && ids.starts_with(t);
        let mut st = self.lock();
        let mut pos = 0;
        loop {
            let best = (st.entries.iter().enumerate())
                .filter(|(_, p)| usable(&p.tokens))
                .max_by_key(|(_, p)| p.tokens.len())
                .map(|(i, p)| (i, p.tokens.len()));
            let best_len = best.map_or(0, |b| b.1);
            let longer_coming = st.computing.iter().any(|c| c.len() > best_len && usable(c));
            if longer_coming {
                // Nothing between the count going up and down can panic (a poisoned
                // lock is taken over: every change under it is whole), so `waiting`
                // stays exact.
                let aside = formwork_models::group::step_aside();
                st.stats.waited += 1;
                st.waiting += 1;
                st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
                st.waiting -= 1;
                drop(aside);
                continue;
            }
            if let Some((i, len)) = best {
                let p = st.entries.remove(i);
                *model = p.model.snapshot();
                st.entries.push(p);
                pos = len;
            }
            break;
        }
        let mut marks = Marks {
            store: self,
            held: Vec::new(),
        };
        for &cut in cuts {
            if cut > pos && cut < ids.len() && !st.computing.iter().any(|c| c[..] == ids[..cut]) {
                st.computing.push(ids[..cut].to_vec());
                marks.held.push(ids[..cut].to_vec());
            }
        }
        drop(st);
        let reused = pos;
        if pos == 0 {
            model.clear_kv_cache();
        }
        for &cut in cuts {
            if cut <= pos || cut >= ids.len() {
                continue;
            }
            if forward_chunked(model.as_mut(), &ids[..cut], pos, PREFILL_CHUNK, go)?.is_none() {
                // Stopped: the marks still held go with `marks`.
                return Ok((None, reused));
            }
            pos = cut;
            let snapshot = model.snapshot();
            let mut st = self.lock();
            if let Some(i) = marks.held.iter().position(|t| t[..] == ids[..cut]) {
                let t = marks.held.swap_remove(i);
                if let Some(j) = st.computing.iter().position(|c| *c == t) {
                    st.computing.swap_remove(j);
                }
            }
            if !st.entries.iter().any(|p| p.tokens[..] == ids[..cut]) {
                while st.entries.len() >= room.max(1) {
                    st.entries.remove(0);
                }
                st.entries.push(Cached {
                    tokens: ids[..cut].to_vec(),
                    model: snapshot,
                });
                st.stats.computed += 1;
            }
            drop(st);
            self.cv.notify_all();
        }
        drop(marks);
        let logits = forward_chunked(model.as_mut(), ids, pos, PREFILL_CHUNK, go)?;
        Ok((logits, reused))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use formwork_models::group::BatchGroup;
    use formwork_models::ModelError;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Barrier};

    /// Logits that depend on every token fed so far; counts the tokens it is fed, and
    /// holds a forward of `gate_len` tokens until `gate` says so (then fails it once
    /// when `fail_once` is set).
    #[derive(Clone)]
    struct Fake {
        fed: Vec<u32>,
        tokens_fed: Arc<AtomicUsize>,
        gate_len: usize,
        gate: Arc<dyn Fn() + Send + Sync>,
        fail_once: Arc<AtomicBool>,
    }

    impl LanguageModel for Fake {
        fn forward(&mut self, tokens: &[u32], pos: usize) -> formwork_models::Result<Vec<f32>> {
            assert_eq!(pos, self.fed.len(), "KV state and position agree");
            if tokens.len() == self.gate_len {
                (self.gate)();
                if self.fail_once.swap(false, Ordering::SeqCst) {
                    return Err(ModelError::Device("scripted failure".into()));
                }
            }
            self.tokens_fed.fetch_add(tokens.len(), Ordering::SeqCst);
            self.fed.extend_from_slice(tokens);
            let h = self
                .fed
                .iter()
                .fold(7u64, |h, &t| h.wrapping_mul(31).wrapping_add(t as u64));
            Ok(vec![(h % 1000) as f32, self.fed.len() as f32])
        }
        fn vocab_size(&self) -> usize {
            2
        }
        fn clear_kv_cache(&mut self) {
            self.fed.clear();
        }
        fn snapshot(&self) -> Box<dyn LanguageModel> {
            Box::new(self.clone())
        }
    }

    const PREFIX: usize = 40;

    /// Four threads in one batch group prefill prompts that share a 40-token prefix,
    /// all at once. Returns each one's result, the tokens fed in all and the stats.
    fn four_at_once(fail_once: bool) -> (Vec<Result<Vec<f32>, String>>, usize, PrefixStats) {
        let store = Arc::new(PrefixStore::default());
        let fed = Arc::new(AtomicUsize::new(0));
        // The first computation of the prefix waits until the three others wait for
        // it: without the wait they would compute it too, and the counts below would
        // show it (the bound only keeps a broken build from hanging).
        let gate = {
            let store = store.clone();
            let first = AtomicBool::new(true);
            Arc::new(move || {
                let t = std::time::Instant::now();
                while first.load(Ordering::SeqCst)
                    && store.waiting() < 3
                    && t.elapsed() < std::time::Duration::from_secs(5)
                {
                    std::thread::yield_now();
                }
                first.store(false, Ordering::SeqCst);
            })
        };
        let group = BatchGroup::new();
        let base = group.wrap(Box::new(Fake {
            fed: Vec::new(),
            tokens_fed: fed.clone(),
            gate_len: PREFIX,
            gate,
            fail_once: Arc::new(AtomicBool::new(fail_once)),
        }));
        let barrier = Arc::new(Barrier::new(4));
        let handles: Vec<_> = (0..4u32)
            .map(|k| {
                let mut model = base.snapshot();
                let (store, group, barrier) = (store.clone(), group.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let _member = group.join();
                    let ids: Vec<u32> = (0..PREFIX as u32).chain([100 + k, 200 + k]).collect();
                    barrier.wait();
                    store
                        .prefill(&mut model, &ids, &[PREFIX], 8, &|| true)
                        .map(|(logits, _)| logits.expect("never stopped"))
                        .map_err(|e| e.to_string())
                })
            })
            .collect();
        let results = handles.into_iter().map(|h| h.join().unwrap()).collect();
        (results, fed.load(Ordering::SeqCst), store.stats())
    }

    fn alone(k: u32) -> Vec<f32> {
        let ids: Vec<u32> = (0..PREFIX as u32).chain([100 + k, 200 + k]).collect();
        alone_ids(&ids)
    }

    /// The Fake's logits after `ids` fed in one pass.
    fn alone_ids(ids: &[u32]) -> Vec<f32> {
        let h = ids
            .iter()
            .fold(7u64, |h, &t| h.wrapping_mul(31).wrapping_add(t as u64));
        vec![(h % 1000) as f32, ids.len() as f32]
    }

    #[test]
    fn concurrent_prefills_compute_a_shared_prefix_once() {
        let (results, fed, stats) = four_at_once(false);
        for (k, r) in results.into_iter().enumerate() {
            assert_eq!(r.unwrap(), alone(k as u32), "worker {k}");
        }
        // The prefix once, then each worker's own two tokens.
        assert_eq!(fed, PREFIX + 4 * 2);
        assert_eq!(
            stats,
            PrefixStats {
                computed: 1,
                waited: 3
            }
        );
    }

    #[test]
    fn a_failed_computation_wakes_the_waiters_and_one_of_them_computes_it() {
        let (results, fed, stats) = four_at_once(true);
        let failed: Vec<_> = results.iter().filter(|r| r.is_err()).collect();
        assert_eq!(failed.len(), 1, "{results:?}");
        assert!(failed[0].as_ref().unwrap_err().contains("scripted failure"));
        let ok: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(ok.len(), 3);
        assert_eq!(fed, PREFIX + 3 * 2);
        assert_eq!(stats.computed, 1, "{stats:?}");
    }

    /// A prefill whose `go` says stop after its first chunk feeds that chunk and no
    /// more, returns no logits, and leaves no prefix marked as being computed (a
    /// later prefill of the same prompt would wait on it for ever).
    #[test]
    fn a_stopped_prefill_feeds_one_chunk_and_leaves_no_mark() {
        let fed = Arc::new(AtomicUsize::new(0));
        let mut model: Box<dyn LanguageModel> = Box::new(Fake {
            fed: Vec::new(),
            tokens_fed: fed.clone(),
            gate_len: usize::MAX,
            gate: Arc::new(|| {}),
            fail_once: Arc::new(AtomicBool::new(false)),
        });
        let store = PrefixStore::default();
        let ids: Vec<u32> = (0..3 * PREFILL_CHUNK as u32 + 10).collect();
        let asked = AtomicUsize::new(0);
        let go = || asked.fetch_add(1, Ordering::SeqCst) == 0;
        let cut = 2 * PREFILL_CHUNK + 5;
        let (logits, reused) = store.prefill(&mut model, &ids, &[cut], 8, &go).unwrap();
        assert_eq!((logits, reused), (None, 0));
        assert_eq!(fed.load(Ordering::SeqCst), PREFILL_CHUNK);
        assert_eq!(asked.load(Ordering::SeqCst), 2);
        assert!(store.lock().computing.is_empty());
        assert_eq!(store.stats().computed, 0);
        // Let through, the same prompt is whole: 3 chunks and the rest, as one pass.
        let (logits, _) = store
            .prefill(&mut model, &ids, &[cut], 8, &|| true)
            .unwrap();
        assert_eq!(logits, Some(alone_ids(&ids)));
        assert_eq!(store.stats().computed, 1);
    }
}
