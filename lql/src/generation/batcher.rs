//! The decode scheduler: one thread with one executor (one backend thread pool over the
//! shared, mapped model) that decodes every active completion together. A caller hands a
//! request's choices here ([`Batcher::submit`]); each step samples every active sequence
//! with its own sampler, stop strings, logprobs and `max_tokens` ([`Decoding::step`]),
//! then runs the next token of all of them, and the prompts of choices just started, as
//! one batched step (`Executor::extend_batch`: the weights are read once per step). A
//! finished sequence, or one whose receiver is gone, leaves the batch at once, and the
//! request's [`EventSink`] (with whatever it holds, such as a server's slot) is dropped
//! when its last choice ends.
//!
//! The scheduler knows nothing of its callers' transport: events go to an [`EventSink`]
//! the caller implements (a server wraps its async channel in one), and what it counts
//! goes to a [`BatchObserver`] (a server's metrics). No async runtime is needed.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use lql_exec::tokenizer::Tokenizer;
use lql_exec::{ExecError, Executor, Logits, Session};

use super::decoding::{Decoding, Delta, Finish, Outcome, Request, TokenLogprob};
use super::patches::PatchedModel;
use super::prefix_cache::PrefixCache;

/// What the scheduler reports about one request's choices.
#[derive(Debug)]
pub enum Event {
    /// Text of choice `index` that is final (no stop string can still start in it), and
    /// the log-probabilities of the tokens that made it (when asked for).
    Delta {
        index: usize,
        text: String,
        logprobs: Vec<TokenLogprob>,
    },
    /// Choice `index` ended.
    Done { index: usize, outcome: Outcome },
    /// The request failed; no further event follows.
    Failed(String),
}

/// Where a request's events go. Implemented by the caller over its own channel; the sink
/// is dropped when the request's last choice ends, so anything it holds (a server's
/// decoding slot) is released then.
pub trait EventSink: Send {
    /// Delivers `event`; `false` when the receiver is gone (the request then stops).
    fn send(&self, event: Event) -> bool;
    /// The receiver is gone (a client that left): the request leaves the batch at the
    /// next step.
    fn is_closed(&self) -> bool;
}

/// What the scheduler counts, for a caller's metrics. Every method does nothing unless
/// implemented.
pub trait BatchObserver: Send + Sync {
    /// A batched step runs the next token of `decoding` sequences and `prefilling` prompt
    /// positions.
    fn step(&self, decoding: usize, prefilling: usize) {
        let _ = (decoding, prefilling);
    }
    /// A prompt starts from `positions` positions held in the prompt-prefix cache.
    fn prompt_cache_hit(&self, positions: usize) {
        let _ = positions;
    }
    /// A choice ended after generating `tokens` tokens.
    fn choice_ended(&self, tokens: usize) {
        let _ = tokens;
    }
    /// A choice was cancelled: its receiver left, or [`Batcher::cancel_all`].
    fn cancelled(&self) {}
}

/// An observer that counts nothing.
pub struct NoObserver;

impl BatchObserver for NoObserver {}

/// One request's choices, decoded one after another (choice `i + 1` starts when `i` ends).
pub struct Work {
    pub reqs: Vec<Request>,
    /// Where the request's events go; dropped when its last choice ends.
    pub events: Box<dyn EventSink>,
}

/// The handle to the decode thread.
pub struct Batcher {
    submit: std::sync::Mutex<mpsc::Sender<Work>>,
    cancel: Arc<AtomicBool>,
}

impl Batcher {
    /// Starts the decode thread over `exec` (its cancel flag stops every pass), with its
    /// prompt-prefix cache.
    pub(crate) fn start(
        exec: Executor,
        tokenizer: Arc<Tokenizer>,
        observer: Arc<dyn BatchObserver>,
        cache: PrefixCache,
    ) -> Result<Batcher, String> {
        let (tx, rx) = mpsc::channel::<Work>();
        let cancel = exec.cancel_flag();
        std::thread::Builder::new()
            .name("lql-decode".into())
            .spawn(move || Scheduler::new(&exec, &tokenizer, observer.as_ref(), cache).run(&rx))
            .map_err(|e| format!("cannot start the decode thread: {e}"))?;
        Ok(Batcher {
            submit: std::sync::Mutex::new(tx),
            cancel,
        })
    }

    /// Hands a request to the decode thread. On failure the work (and its sink) is
    /// dropped, so its receiver sees the channel close.
    pub fn submit(&self, work: Work) -> Result<(), String> {
        let tx = self
            .submit
            .lock()
            .map_err(|_| "the decode scheduler is poisoned".to_string())?;
        tx.send(work)
            .map_err(|_| "the decode thread has stopped".to_string())
    }

    /// Cancels every pass and completion now (shutdown after the grace period); the flag
    /// stays set.
    pub fn cancel_all(&self) {
        self.cancel.store(true, Ordering::SeqCst);
    }
}

/// A choice being decoded.
struct Seq<'t> {
    session: Session,
    dec: Decoding<'t>,
    /// The logits after the last token run (what the next token is sampled from);
    /// `None` until the prompt is prefilled.
    logits: Option<Logits>,
    /// Prompt positions the session holds (from the prefix cache, then chunk by chunk).
    prompt_done: usize,
    /// The prompt may use and fill the prefix cache (not steered, `cache_prompt` on).
    cacheable: bool,
}

/// A request in the scheduler: its current choice, started (prefilled) or not.
struct Active<'t> {
    work: Work,
    index: usize,
    seq: Option<Seq<'t>>,
    /// Over: remove it (dropping its sink).
    done: bool,
}

struct Scheduler<'t> {
    exec: &'t Executor,
    tok: &'t Tokenizer,
    observer: &'t dyn BatchObserver,
    end_ids: Vec<u32>,
    cancel: Arc<AtomicBool>,
    cache: RefCell<PrefixCache>,
}

/// A callback that streams one choice's deltas to its request's sink.
fn sender(events: &dyn EventSink, index: usize) -> impl FnMut(Delta<'_>) -> bool + '_ {
    move |d: Delta<'_>| {
        events.send(Event::Delta {
            index,
            text: d.text.to_string(),
            logprobs: d.logprobs.to_vec(),
        })
    }
}

impl<'t> Scheduler<'t> {
    fn new(
        exec: &'t Executor,
        tok: &'t Tokenizer,
        observer: &'t dyn BatchObserver,
        cache: PrefixCache,
    ) -> Self {
        let special = &exec.surface().special;
        let mut end_ids: Vec<u32> = Vec::new();
        end_ids.extend(special.eos);
        end_ids.extend(special.eot.iter().copied());
        Scheduler {
            exec,
            tok,
            observer,
            end_ids,
            cancel: exec.cancel_flag(),
            cache: RefCell::new(cache),
        }
    }

    /// Until every handle is dropped: admit new work, start choices, step the batch.
    fn run(&self, rx: &mpsc::Receiver<Work>) {
        let mut active: Vec<Active<'t>> = Vec::new();
        loop {
            if active.is_empty() {
                match rx.recv() {
                    Ok(w) => active.push(Active::new(w)),
                    Err(_) => return,
                }
            }
            while let Ok(w) = rx.try_recv() {
                active.push(Active::new(w));
            }
            for a in active.iter_mut() {
                self.start(a);
            }
            self.step(&mut active);
            active.retain(|a| !a.done);
        }
    }

    /// Ends the current choice with `outcome` and moves to the next one.
    fn finished(&self, a: &mut Active<'t>, outcome: Outcome) {
        let cancelled = outcome.finish == Finish::Cancelled;
        self.observer.choice_ended(outcome.completion_tokens);
        if cancelled {
            self.observer.cancelled();
        }
        let index = a.index;
        a.seq = None;
        a.index += 1;
        if !a.work.events.send(Event::Done { index, outcome }) || cancelled {
            a.done = true;
        }
    }

    fn failed(&self, a: &mut Active<'t>, e: &ExecError) {
        a.work.events.send(Event::Failed(e.to_string()));
        a.seq = None;
        a.done = true;
    }

    /// Starts the request's current choice if none is running: its prompt joins the next
    /// step (choices that want no tokens finish at once).
    fn start(&self, a: &mut Active<'t>) {
        while !a.done && a.seq.is_none() {
            if a.work.events.is_closed() {
                a.done = true;
                return;
            }
            let Some(req) = a.work.reqs.get(a.index) else {
                a.done = true;
                return;
            };
            let dec = match Decoding::new(self.tok, req, &self.end_ids) {
                Ok(d) => d,
                Err(e) => return self.failed(a, &e),
            };
            if dec.wants_nothing() {
                let outcome = dec.finish(None, &mut sender(a.work.events.as_ref(), a.index));
                self.finished(a, outcome);
                continue;
            }
            // A steered or patched request decodes on its own steering and overlay (still in
            // the shared batch); a plain one starts from the longest cached prefix of its
            // prompt.
            let base = req
                .patched
                .as_ref()
                .map_or(self.exec, PatchedModel::executor);
            let cacheable = req.steering.is_none() && req.patched.is_none() && req.cache_prompt;
            let (session, prompt_done) = match &req.steering {
                None if cacheable => match self.cache.borrow_mut().lookup(&req.prompt_ids) {
                    Some(hit) => {
                        self.observer.prompt_cache_hit(hit.len);
                        (hit.session, hit.len)
                    }
                    None => (base.session(), 0),
                },
                None => (base.session(), 0),
                Some(s) => match base.clone().with_steering(Some(s.clone())) {
                    Ok(e) => (e.session(), 0),
                    Err(e) => return self.failed(a, &e),
                },
            };
            a.seq = Some(Seq {
                session,
                dec,
                logits: None,
                prompt_done,
                cacheable,
            });
        }
    }

    /// Samples every running choice, then runs in one batched step the next token of
    /// those that go on and the prompts of those just started.
    fn step(&self, active: &mut [Active<'t>]) {
        let cancelled = self.cancel.load(Ordering::Relaxed);
        // (request, new tokens) of each row group of the step, in order of `active`.
        let mut rows: Vec<(usize, Vec<u32>)> = Vec::new();
        for (ai, a) in active.iter_mut().enumerate() {
            let Some(seq) = a.seq.as_mut() else { continue };
            if a.work.events.is_closed() {
                // The client is gone: leave the batch now.
                self.observer.cancelled();
                a.seq = None;
                a.done = true;
                continue;
            }
            let Some(logits) = seq.logits.as_mut() else {
                // The prompt's next chunk (chunks start at multiples of the chunk size, so
                // cached and cold prefills compute every position alike).
                let prompt = &a.work.reqs[a.index].prompt_ids;
                let end = self
                    .cache
                    .borrow()
                    .next_chunk(seq.prompt_done, prompt.len());
                rows.push((ai, prompt[seq.prompt_done..end].to_vec()));
                continue;
            };
            let room = seq.session.position() < seq.session.context_limit();
            let next = seq.dec.step(
                logits,
                room,
                cancelled,
                &mut sender(a.work.events.as_ref(), a.index),
            );
            match next {
                Ok(Some(id)) => rows.push((ai, vec![id])),
                Ok(None) => {
                    if let Some(seq) = a.seq.take() {
                        let outcome = seq
                            .dec
                            .finish(None, &mut sender(a.work.events.as_ref(), a.index));
                        self.finished(a, outcome);
                    }
                }
                Err(e) => self.failed(a, &e),
            }
        }
        if rows.is_empty() {
            return;
        }
        let lists: Vec<&[u32]> = rows.iter().map(|(_, t)| t.as_slice()).collect();
        // Prompt chunks are the rows whose sequence has no logits yet.
        let (mut next, mut prefill) = (0, 0);
        for (ai, t) in &rows {
            match active[*ai].seq.as_ref().is_some_and(|s| s.logits.is_none()) {
                true => prefill += t.len(),
                false => next += 1,
            }
        }
        // Exactly the choices in `rows` still run (in the same order): the others ended.
        let mut sessions: Vec<&mut Session> = active
            .iter_mut()
            .filter_map(|a| a.seq.as_mut().map(|s| &mut s.session))
            .collect();
        if sessions.len() != lists.len() {
            let e = ExecError::Internal("the decode batch lost track of a sequence".into());
            drop(sessions);
            for &(ai, _) in &rows {
                self.failed(&mut active[ai], &e);
            }
            return;
        }
        self.observer.step(next, prefill);
        // Steered and patched sessions share the base's plan (each keeps its own steering
        // and overlay), so every sequence runs in this one batched step.
        let result = self.exec.extend_batch(&mut sessions, &lists);
        drop(sessions);
        match result {
            Ok(logits) => {
                for ((ai, _), l) in rows.iter().zip(logits) {
                    let a = &mut active[*ai];
                    let Some(seq) = a.seq.as_mut() else { continue };
                    // An overflowing model or edit ends the choice with an error, never
                    // with a token sampled from NaN.
                    if let Err(e) = l.check_finite(seq.session.position().saturating_sub(1)) {
                        self.failed(a, &e);
                        continue;
                    }
                    if seq.logits.is_none() {
                        // A prompt chunk ran: the next chunk, or the prompt is done.
                        let prompt = &a.work.reqs[a.index].prompt_ids;
                        seq.prompt_done = seq.session.position();
                        if seq.prompt_done < prompt.len() {
                            continue;
                        }
                        if seq.cacheable {
                            self.cache.borrow_mut().insert(prompt, &seq.session);
                        }
                    }
                    seq.logits = Some(l);
                }
            }
            Err(e) => {
                for &(ai, _) in &rows {
                    let a = &mut active[ai];
                    if let Some(seq) = a.seq.take() {
                        if matches!(e, ExecError::Cancelled) {
                            let outcome = seq.dec.finish(
                                Some(Finish::Cancelled),
                                &mut sender(a.work.events.as_ref(), a.index),
                            );
                            self.finished(a, outcome);
                        } else {
                            self.failed(a, &e);
                        }
                    }
                }
            }
        }
    }
}

impl Active<'_> {
    fn new(work: Work) -> Self {
        Active {
            work,
            index: 0,
            seq: None,
            done: false,
        }
    }
}
