//! One completion: prefill the prompt, then sample and decode one token at a time on a
//! slot's executor, as `GENERATE` does (same sampler, same end-of-sequence ids, same stop
//! string rule), reporting each token's log-probability and the text completed so far to a
//! callback (streaming), which may stop it (a client gone).

use std::sync::atomic::Ordering;

use lql_exec::tokenizer::Tokenizer;
use lql_exec::{ExecError, Executor, Logits, Sampler, Sampling};

/// What to generate.
#[derive(Debug, Clone)]
pub struct Request {
    pub prompt_ids: Vec<u32>,
    pub max_tokens: usize,
    pub sampling: Sampling,
    pub stop: Vec<String>,
    /// Report log-probabilities, with this many alternatives per token.
    pub logprobs: Option<usize>,
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

/// Runs one completion on `exec`. `on_delta` sees text as it becomes final and returns
/// `false` to stop (the client is gone). Cancellation through the executor's flag ends it
/// with [`Finish::Cancelled`].
pub fn run(
    exec: &Executor,
    tok: &Tokenizer,
    req: &Request,
    on_delta: &mut dyn FnMut(Delta<'_>) -> bool,
) -> Result<Outcome, ExecError> {
    if req.prompt_ids.is_empty() {
        return Err(ExecError::EmptyPrompt);
    }
    let mut sampler = Sampler::new(req.sampling)?;
    let special = &exec.surface().special;
    let mut end_ids: Vec<u32> = Vec::new();
    end_ids.extend(special.eos);
    end_ids.extend(special.eot.iter().copied());
    let cancel = exec.cancel_flag();
    let mut out = Outcome {
        text: String::new(),
        token_ids: Vec::new(),
        finish: Finish::Length,
        prompt_tokens: req.prompt_ids.len(),
        completion_tokens: 0,
        logprobs: Vec::new(),
    };
    if req.max_tokens == 0 {
        return Ok(out);
    }
    let mut session = exec.session();
    let mut logits = match session.prefill(&req.prompt_ids) {
        Ok(l) => l,
        Err(ExecError::Cancelled) => {
            out.finish = Finish::Cancelled;
            return Ok(out);
        }
        Err(e) => return Err(e),
    };
    let hold = req.stop.iter().map(|s| s.len()).max().unwrap_or(1) - 1;
    let mut stream = tok.stream_decoder();
    // Bytes of `out.text` already sent, and logprobs already sent.
    let mut sent = 0usize;
    let mut sent_lp = 0usize;
    let mut cut_by_stop = false;
    let mut emit = |out: &Outcome, upto: usize, sent: &mut usize, sent_lp: &mut usize| -> bool {
        if upto <= *sent && out.logprobs.len() == *sent_lp {
            return true;
        }
        let text = &out.text[*sent..upto.max(*sent)];
        let lps = &out.logprobs[*sent_lp..];
        let go = on_delta(Delta {
            text,
            logprobs: lps,
        });
        *sent = upto.max(*sent);
        *sent_lp = out.logprobs.len();
        go
    };
    loop {
        let id = sampler.sample(&logits.values);
        if end_ids.contains(&id) {
            out.finish = Finish::Stop;
            break;
        }
        if let Some(top) = req.logprobs {
            out.logprobs.push(token_logprob(tok, &logits, id, top));
        }
        out.token_ids.push(id);
        let piece = stream
            .push(id)
            .map_err(|e| ExecError::Internal(format!("detokenizing a generated token: {e}")))?;
        let search_from = out.text.len().saturating_sub(hold);
        out.text.push_str(&piece);
        let cut = req
            .stop
            .iter()
            .filter_map(|s| {
                let from = floor_char(&out.text, search_from);
                out.text[from..].find(s.as_str()).map(|i| from + i)
            })
            .min();
        if let Some(c) = cut {
            out.text.truncate(c);
            out.finish = Finish::Stop;
            cut_by_stop = true;
            break;
        }
        // Everything but a tail that could still begin a stop string is final.
        let safe = floor_char(&out.text, out.text.len().saturating_sub(hold));
        if !emit(&out, safe, &mut sent, &mut sent_lp) {
            out.finish = Finish::Cancelled;
            break;
        }
        if out.token_ids.len() >= req.max_tokens {
            out.finish = Finish::Length;
            break;
        }
        if cancel.load(Ordering::Relaxed) {
            out.finish = Finish::Cancelled;
            break;
        }
        if session.position() >= session.context_limit() {
            out.finish = Finish::Length;
            break;
        }
        logits = match session.decode(id) {
            Ok(l) => l,
            Err(ExecError::Cancelled) => {
                out.finish = Finish::Cancelled;
                break;
            }
            Err(e) => return Err(e),
        };
    }
    if !cut_by_stop {
        // Bytes of an unfinished character held back by the stream decoder.
        out.text.push_str(&stream.flush());
    }
    out.completion_tokens = out.token_ids.len();
    let end = out.text.len();
    emit(&out, end, &mut sent, &mut sent_lp);
    Ok(out)
}

/// The largest char boundary ≤ `i`.
fn floor_char(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}
