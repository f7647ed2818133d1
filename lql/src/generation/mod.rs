//! Batched generation: many completions decoded together over one model, the service
//! behind `lql serve`'s generating routes, open to any program that embeds the engine.
//!
//! ```text
//!  GenerationModel::open(&db, threads) ── the database's default model, its tokenizer, one executor
//!     ├─ start_batcher(PrefixCache, observer) ──▶ Batcher: one decode thread
//!     │      submit(Work { reqs: [Request …], events: Box<dyn EventSink> })
//!     │      each step: sample every active sequence (its Sampling, grammar, stop strings,
//!     │      logprobs), then run the next token of all of them and the next prompt chunk of
//!     │      those just admitted in ONE batched pass ──▶ Event::Delta … Event::Done(Outcome)
//!     ├─ embed(ids) ── mean-pooled, unit-length final hidden states
//!     ├─ steering(control vector, scale, layers) ── a request's own residual-stream vectors
//!     └─ patched([PatchFile …]) ── a request's own model state (a stack of `.lqlpatch` files)
//! ```
//!
//! Each sequence samples as `GENERATE` does: the same sampler ([`Sampling`]), the model's
//! end-of-sequence and end-of-turn ids, the same grammar masks ([`ConstraintSpec`] compiled
//! into a [`Grammar`]) and the same stop-string rule (text is streamed only once no stop
//! string can still start in it). Prompts are prefilled in chunks that start at multiples
//! of the [`PrefixCache`]'s chunk size, so a prompt that starts from a cached prefix answers
//! bit for bit what it answers cold.
//!
//! The scheduler needs no async runtime: it runs on a thread of its own, takes work over a
//! standard channel, and reports to an [`EventSink`] and a [`BatchObserver`] its caller
//! implements (a server puts its async channel and its decoding slot in the sink, its
//! metrics behind the observer).
//!
//! ```no_run
//! use std::sync::{mpsc, Arc, Mutex};
//! use lql::generation::{
//!     Event, EventSink, GenerationModel, NoObserver, PrefixCache, Request, Sampling, Work,
//! };
//!
//! struct Channel(Mutex<mpsc::Sender<Event>>);
//! impl EventSink for Channel {
//!     fn send(&self, event: Event) -> bool {
//!         self.0.lock().map_or(false, |tx| tx.send(event).is_ok())
//!     }
//!     fn is_closed(&self) -> bool {
//!         false
//!     }
//! }
//!
//! let db = lql::Database::open("smollm2-135m-instruct")?;
//! let model = GenerationModel::open(&db, 0)?;
//! let batcher = model.start_batcher(PrefixCache::new(64 << 20, 256), Arc::new(NoObserver))?;
//! let request = |prompt: &str| -> lql::Result<Request> {
//!     Ok(Request {
//!         prompt_ids: model.tokenizer().encode(prompt, true)?,
//!         max_tokens: 16,
//!         sampling: Sampling { temperature: 0.0, ..Sampling::default() },
//!         stop: vec!["\n".into()],
//!         logprobs: None,
//!         steering: None,
//!         grammar: None,
//!         cache_prompt: true,
//!         patched: None,
//!     })
//! };
//! let (tx, rx) = mpsc::channel();
//! // Two completions of one request (decoded one after the other); other requests
//! // submitted meanwhile decode in the same batched steps.
//! let work = Work {
//!     reqs: vec![request("The capital of France is")?, request("2 + 2 =")?],
//!     events: Box::new(Channel(Mutex::new(tx))),
//! };
//! batcher.submit(work).map_err(lql::Error::internal)?;
//! for event in rx {
//!     match event {
//!         Event::Delta { index, text, .. } => print!("[{index}] {text}"),
//!         Event::Done { index, outcome } => println!("\n[{index}] {:?}", outcome.finish),
//!         Event::Failed(why) => eprintln!("failed: {why}"),
//!     }
//! }
//! # Ok::<(), lql::Error>(())
//! ```

mod batcher;
mod decoding;
mod model;
mod patches;
mod prefix_cache;

pub use batcher::{BatchObserver, Batcher, Event, EventSink, NoObserver, Work};
pub use decoding::{Alt, Finish, Outcome, Request, TokenLogprob};
pub use model::{read_chat_template, GenerationModel};
pub use patches::{PatchFile, PatchedModel};
pub use prefix_cache::PrefixCache;

/// Structured output: what a completion's text must be (a JSON schema, any JSON object, a
/// GBNF or Lark grammar), compiled for a tokenizer into the masks applied before sampling.
pub use lql_exec::constrain::{guided_schema, ConstraintSpec, Grammar};
/// How each token is drawn, and the longest penalty window ([`Sampling::repeat_last_n`]).
pub use lql_exec::sample::MAX_REPEAT_LAST_N;
/// Vectors added to the residual stream in one request's passes.
pub use lql_exec::steer::Steering;
/// The model's tokenizer: text to ids and back.
pub use lql_exec::tokenizer::Tokenizer;
pub use lql_exec::Sampling;
