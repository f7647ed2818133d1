//! One completion's sampling side: after each decode step, choose the next token with
//! GENERATE's own step (`lql_exec::generate::NextToken`: grammar mask, sampler, end ids;
//! `StopStrings`: the stop string rule), and report each token's log-probability and the text completed so far to a callback
//! (streaming), which may stop it (a client gone). The model runs in the batch scheduler
//! ([`super::batcher`]), which steps every active completion together.

use std::sync::Arc;

use lql_exec::constrain::Grammar;
use lql_exec::generate::{floor_char, NextToken, Pick, StopStrings};
use lql_exec::steer::Steering;
use lql_exec::tokenizer::{StreamDecoder, Tokenizer};
use lql_exec::{ExecError, Logits, Sampling};

use super::patches::PatchedModel;

/// What to generate.
#[derive(Debug, Clone)]
pub struct Request {
    pub prompt_ids: Vec<u32>,
    pub max_tokens: usize,
    pub sampling: Sampling,
    pub stop: Vec<String>,
    /// Report log-probabilities, with this many alternatives per token.
    pub logprobs: Option<usize>,
    /// Vectors added to the residual stream in this request's passes only.
    pub steering: Option<Arc<Steering>>,
    /// The text must be in this grammar's language (`response_format`, `grammar`).
    pub grammar: Option<Arc<Grammar>>,
    /// The prompt may start from, and fill, the prompt-prefix cache (`cache_prompt`).
    pub cache_prompt: bool,
    /// The model state this request decodes with (a stack of patches), or `None` for the
    /// base model.
    pub patched: Option<PatchedModel>,
}

/// One alternative token and its log-probability.
#[derive(Debug, Clone, PartialEq)]
pub struct Alt {
    pub token: String,
    pub bytes: Vec<u8>,
    pub logprob: f64,
}

/// A generated token's log-probability and the best alternatives at its position.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub id: u32,
    pub token: String,
    pub bytes: Vec<u8>,
    pub logprob: f64,
    pub top: Vec<Alt>,
}

/// Why a completion ended, in OpenAI's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// End of sequence or a stop string.
    Stop,
    /// `max_tokens` or the context limit.
    Length,
    /// The client went away or the server is shutting down.
    Cancelled,
}

impl Finish {
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
            Finish::Cancelled => "cancelled",
        }
    }
}

/// A finished completion.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub text: String,
    pub token_ids: Vec<u32>,
    pub finish: Finish,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub logprobs: Vec<TokenLogprob>,
}

/// Text newly safe to send (no stop string can still start in it) and the tokens that
/// produced it.
pub struct Delta<'a> {
    pub text: &'a str,
    pub logprobs: &'a [TokenLogprob],
}

/// `log softmax` of the logits at `id` (f64 sums, as INFER's probabilities are computed).
pub struct LogSoftmax {
    lse: f64,
}

impl LogSoftmax {
    pub fn new(values: &[f32]) -> LogSoftmax {
        let max = values.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = values.iter().map(|&x| ((x - max) as f64).exp()).sum();
        LogSoftmax {
            lse: max as f64 + sum.ln(),
        }
    }

    pub fn of(&self, values: &[f32], id: u32) -> f64 {
        values
            .get(id as usize)
            .map_or(f64::NEG_INFINITY, |&x| x as f64 - self.lse)
    }
}

fn token_logprob(tok: &Tokenizer, logits: &Logits, id: u32, top: usize) -> TokenLogprob {
    let ls = LogSoftmax::new(&logits.values);
    let text = |id: u32| tok.token_text(id).unwrap_or_else(|| format!("<{id}>"));
    let bytes = |id: u32| tok.token_bytes(id).map(<[u8]>::to_vec).unwrap_or_default();
    let alts = if top > 0 {
        logits
            .top(top)
            .into_iter()
            .filter(|t| logits.values[t.token_id as usize].is_finite())
            .map(|t| Alt {
                token: text(t.token_id),
                bytes: bytes(t.token_id),
                logprob: ls.of(&logits.values, t.token_id),
            })
            .collect()
    } else {
        Vec::new()
    };
    TokenLogprob {
        id,
        token: text(id),
        bytes: bytes(id),
        logprob: ls.of(&logits.values, id),
        top: alts,
    }
}

/// One completion being decoded, one token at a time, by the batch scheduler
/// ([`super::batcher`]): the sampler, the end-of-sequence ids, the stop strings and the
/// text streamed so far. The scheduler runs the model; [`Decoding::step`] turns the logits
/// after the last token into the next token (or the end), exactly as `GENERATE` samples.
pub struct Decoding<'t> {
    tok: &'t Tokenizer,
    max_tokens: usize,
    stops: StopStrings,
    logprobs: Option<usize>,
    /// The choice of each token, as GENERATE makes it.
    next: NextToken,
    stream: StreamDecoder<'t>,
    out: Outcome,
    /// Bytes of `out.text` already sent, and logprobs already sent.
    sent: usize,
    sent_lp: usize,
    cut_by_stop: bool,
}

impl<'t> Decoding<'t> {
    /// A completion of `req`; `end_ids` are the model's end-of-sequence and end-of-turn ids.
    pub fn new(tok: &'t Tokenizer, req: &Request, end_ids: &[u32]) -> Result<Self, ExecError> {
        if req.prompt_ids.is_empty() {
            return Err(ExecError::EmptyPrompt);
        }
        Ok(Decoding {
            tok,
            max_tokens: req.max_tokens,
            stops: StopStrings::new(&req.stop)?,
            logprobs: req.logprobs,
            next: NextToken::new(
                req.sampling,
                &req.prompt_ids,
                end_ids.to_vec(),
                req.grammar.as_ref(),
                req.max_tokens,
            )?,
            stream: tok.stream_decoder(),
            out: Outcome {
                text: String::new(),
                token_ids: Vec::new(),
                finish: Finish::Length,
                prompt_tokens: req.prompt_ids.len(),
                completion_tokens: 0,
                logprobs: Vec::new(),
            },
            sent: 0,
            sent_lp: 0,
            cut_by_stop: false,
        })
    }

    /// Nothing to generate (`max_tokens: 0`): no prefill is needed.
    pub fn wants_nothing(&self) -> bool {
        self.max_tokens == 0
    }

    /// Sends the text from `sent` to `upto` and the logprobs not sent yet; `false` when the
    /// receiver is gone.
    fn emit(&mut self, upto: usize, on_delta: &mut dyn FnMut(Delta<'_>) -> bool) -> bool {
        if upto <= self.sent && self.out.logprobs.len() == self.sent_lp {
            return true;
        }
        let go = on_delta(Delta {
            text: &self.out.text[self.sent..upto.max(self.sent)],
            logprobs: &self.out.logprobs[self.sent_lp..],
        });
        self.sent = upto.max(self.sent);
        self.sent_lp = self.out.logprobs.len();
        go
    }

    /// Samples the token after `logits` and streams the text it makes final. Returns the
    /// token to run next, or `None` when the completion is over (end of sequence, a stop
    /// string, the grammar's text complete, `max_tokens`, `cancelled`, no room left in the
    /// context (`room` false), or `on_delta` returning `false`); then call
    /// [`Decoding::finish`]. With a grammar, the logits of the tokens it does not allow are
    /// set to −∞ first (so log-probabilities are over the tokens it allows).
    pub fn step(
        &mut self,
        logits: &mut Logits,
        room: bool,
        cancelled: bool,
        on_delta: &mut dyn FnMut(Delta<'_>) -> bool,
    ) -> Result<Option<u32>, ExecError> {
        let id = match self.next.pick(&mut logits.values)? {
            Pick::End => {
                self.out.finish = Finish::Stop;
                return Ok(None);
            }
            Pick::Token(id) => id,
        };
        if let Some(top) = self.logprobs {
            self.out
                .logprobs
                .push(token_logprob(self.tok, logits, id, top));
        }
        self.out.token_ids.push(id);
        let piece = self
            .stream
            .push(id)
            .map_err(|e| ExecError::Internal(format!("detokenizing a generated token: {e}")))?;
        let before = self.out.text.len();
        self.out.text.push_str(&piece);
        let cut = self.stops.find(&self.out.text, before);
        if let Some(c) = cut {
            self.out.text.truncate(c);
            self.out.finish = Finish::Stop;
            self.cut_by_stop = true;
            return Ok(None);
        }
        // Everything but a tail that could still begin a stop string is final.
        let safe = floor_char(
            &self.out.text,
            self.out.text.len().saturating_sub(self.stops.hold()),
        );
        if !self.emit(safe, on_delta) {
            self.out.finish = Finish::Cancelled;
            return Ok(None);
        }
        if self.out.token_ids.len() >= self.max_tokens {
            self.out.finish = Finish::Length;
            return Ok(None);
        }
        if cancelled {
            self.out.finish = Finish::Cancelled;
            return Ok(None);
        }
        if !room {
            self.out.finish = Finish::Length;
            return Ok(None);
        }
        Ok(Some(id))
    }

    /// Ends the completion (with `finish` when the scheduler ended it: a cancelled pass),
    /// sends what is left of the text and returns the outcome.
    pub fn finish(
        mut self,
        finish: Option<Finish>,
        on_delta: &mut dyn FnMut(Delta<'_>) -> bool,
    ) -> Outcome {
        if let Some(f) = finish {
            self.out.finish = f;
        }
        if !self.cut_by_stop {
            // Bytes of an unfinished character held back by the stream decoder.
            let rest = self.stream.flush();
            self.out.text.push_str(&rest);
        }
        self.out.completion_tokens = self.out.token_ids.len();
        let end = self.out.text.len();
        self.emit(end, on_delta);
        self.out
    }
}
