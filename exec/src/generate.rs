//! GENERATE: prefill, then sample and decode one token at a time until a stop condition
//! (max tokens, end of sequence, a stop string, the context limit, the callback or the
//! cancellation flag), optionally within a grammar ([`crate::constrain`]). Each token is
//! chosen by [`NextToken`] and stop strings found by [`StopStrings`], which the batch
//! scheduler of `lql serve` (`lql::generation`) decodes with too: one decoding step for
//! the shell, the library and the server.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::constrain::{Allowed, Constraint, Grammar};
use crate::error::{ExecError, Result};
use crate::sample::{Sampler, Sampling};
use crate::session::{Executor, Logits, Session};

/// Turns generated token ids into text, for stop strings.
pub trait TokenDecoder: Send + Sync {
    fn decode_ids(&self, ids: &[u32]) -> String;
}

/// What the per-token callback wants next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    Continue,
    Stop,
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// `max_tokens` generated.
    Length,
    /// An end-of-sequence / end-of-turn token was produced (not included in the output).
    EndOfSequence,
    /// A stop string appeared in the generated text.
    StopString,
    /// The model's context is full.
    ContextLimit,
    /// The callback returned [`Control::Stop`].
    Callback,
    /// The cancellation flag was set.
    Cancelled,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Length => "length",
            FinishReason::EndOfSequence => "eos",
            FinishReason::StopString => "stop",
            FinishReason::ContextLimit => "context",
            FinishReason::Callback => "callback",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

/// Options of one generation.
#[derive(Clone)]
pub struct GenerateOptions {
    pub max_tokens: usize,
    pub sampling: Sampling,
    /// Stop when the generated text contains one of these (needs `decoder`).
    pub stop: Vec<String>,
    /// Stop at the surface's end-of-sequence and end-of-turn ids.
    pub stop_at_eos: bool,
    /// Further token ids that end generation.
    pub stop_ids: Vec<u32>,
    /// Detokenizer used to match stop strings and fill [`Generation::text`].
    pub decoder: Option<Arc<dyn TokenDecoder>>,
    /// The text must be in this grammar's language: tokens it does not allow next are
    /// never sampled, and generation ends when the text is complete and nothing may follow.
    pub grammar: Option<Arc<Grammar>>,
}

impl std::fmt::Debug for GenerateOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GenerateOptions")
            .field("max_tokens", &self.max_tokens)
            .field("sampling", &self.sampling)
            .field("stop", &self.stop)
            .field("stop_at_eos", &self.stop_at_eos)
            .field("stop_ids", &self.stop_ids)
            .field("decoder", &self.decoder.is_some())
            .field("grammar", &self.grammar)
            .finish()
    }
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_tokens: 32,
            sampling: Sampling::default(),
            stop: Vec::new(),
            stop_at_eos: true,
            stop_ids: Vec::new(),
            decoder: None,
            grammar: None,
        }
    }
}

/// The result of a generation.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// Generated ids (an end-of-sequence token is not included).
    pub token_ids: Vec<u32>,
    pub finish_reason: FinishReason,
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    /// The generated text, cut before a matched stop string (when a decoder was given).
    pub text: Option<String>,
}

/// The choice of each next token, as every decoding loop makes it — GENERATE
/// ([`Executor::generate_from`]) and the batch scheduler of `lql serve`
/// (`lql::generation`): the grammar's mask (when the text must be in one), the sampler,
/// the ids that end the text, the grammar's advance and the penalties' window.
pub struct NextToken {
    sampler: Sampler,
    end_ids: Vec<u32>,
    constraint: Option<Constraint>,
    max_tokens: usize,
    /// Tokens chosen so far.
    chosen: usize,
}

/// What [`NextToken::pick`] chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// The text ends here: an end id was sampled, or the grammar's text is complete and
    /// nothing may follow.
    End,
    Token(u32),
}

impl NextToken {
    /// Choices after `prompt` (the penalties' window starts with it, as llama.cpp's
    /// server fills it) of at most `max_tokens` tokens; `end_ids` end the text.
    pub fn new(
        sampling: Sampling,
        prompt: &[u32],
        end_ids: Vec<u32>,
        grammar: Option<&Arc<Grammar>>,
        max_tokens: usize,
    ) -> Result<NextToken> {
        let mut sampler = Sampler::new(sampling)?;
        sampler.accept(prompt);
        Ok(NextToken {
            sampler,
            end_ids,
            constraint: grammar.map(|g| g.start()),
            max_tokens,
            chosen: 0,
        })
    }

    /// The token after `logits`. With a grammar, the logits of the tokens it does not
    /// allow are set to −∞ first (so log-probabilities read from them afterwards are over
    /// the tokens it allows).
    pub fn pick(&mut self, logits: &mut [f32]) -> Result<Pick> {
        if let Some(c) = self.constraint.as_mut() {
            let closing = crate::constrain::in_closing_reserve(self.max_tokens, self.chosen);
            if c.mask(logits, &self.end_ids, closing)? == Allowed::EndOnly {
                return Ok(Pick::End);
            }
        }
        let id = self.sampler.sample(logits);
        if self.end_ids.contains(&id) {
            return Ok(Pick::End);
        }
        if let Some(c) = self.constraint.as_mut() {
            c.commit(id, &self.end_ids)?;
        }
        self.sampler.accept(&[id]);
        self.chosen += 1;
        Ok(Pick::Token(id))
    }
}

/// Stop strings: where the first of them starts in a text that grows at its end.
#[derive(Debug, Clone)]
pub struct StopStrings {
    stops: Vec<String>,
    /// Bytes a stop string could still need from before the newest piece.
    hold: usize,
}

impl StopStrings {
    /// Refuses an empty stop string (it would end every text at once).
    pub fn new(stops: &[String]) -> Result<StopStrings> {
        if stops.iter().any(|s| s.is_empty()) {
            return Err(ExecError::InvalidOption("empty stop string".into()));
        }
        Ok(StopStrings {
            stops: stops.to_vec(),
            hold: stops.iter().map(|s| s.len()).max().unwrap_or(1) - 1,
        })
    }

    /// The bytes at the end of a text that could still begin a stop string.
    pub fn hold(&self) -> usize {
        self.hold
    }

    /// Where the earliest stop string starts in `text`, once `text` has grown by a piece
    /// from `before` bytes (the text before it was searched already).
    pub fn find(&self, text: &str, before: usize) -> Option<usize> {
        let from = floor_char(text, before.saturating_sub(self.hold));
        self.stops
            .iter()
            .filter_map(|s| text[from..].find(s.as_str()).map(|i| from + i))
            .min()
    }
}

/// The largest char boundary ≤ `i`.
pub fn floor_char(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

impl Executor {
    /// Generate after `ids`; `on_token` sees every generated id as it is produced (for
    /// streaming) and may stop generation.
    pub fn generate(
        &self,
        ids: &[u32],
        opts: &GenerateOptions,
        on_token: &mut dyn FnMut(u32) -> Control,
    ) -> Result<Generation> {
        if ids.is_empty() {
            return Err(ExecError::EmptyPrompt);
        }
        check_options(opts)?;
        if opts.max_tokens == 0 {
            return Ok(Generation::ended(
                Vec::new(),
                FinishReason::Length,
                ids.len(),
                text_start(opts),
            ));
        }
        let mut session = self.session();
        let logits = match session.prefill(ids) {
            Ok(l) => l,
            Err(ExecError::Cancelled) => {
                return Ok(Generation::ended(
                    Vec::new(),
                    FinishReason::Cancelled,
                    ids.len(),
                    text_start(opts),
                ))
            }
            Err(e) => return Err(e),
        };
        self.generate_from(session, logits, opts, on_token)
    }

    /// Generate after a prefilled continuation whose next-token logits are `logits`
    /// (the prompt is what `session` holds).
    pub fn generate_from(
        &self,
        mut session: Session,
        mut logits: Logits,
        opts: &GenerateOptions,
        on_token: &mut dyn FnMut(u32) -> Control,
    ) -> Result<Generation> {
        let stops = check_options(opts)?;
        let prompt_tokens = session.tokens().len();
        let mut text = text_start(opts);
        let mut out = Vec::new();
        let finish =
            |out: Vec<u32>, reason, text| Generation::ended(out, reason, prompt_tokens, text);
        if opts.max_tokens == 0 {
            return Ok(finish(out, FinishReason::Length, text));
        }
        let special = &self.surface().special;
        let mut end_ids: Vec<u32> = opts.stop_ids.clone();
        if opts.stop_at_eos {
            end_ids.extend(special.eos);
            end_ids.extend(special.eot.iter().copied());
        }
        let mut next = NextToken::new(
            opts.sampling,
            session.tokens(),
            end_ids,
            opts.grammar.as_ref(),
            opts.max_tokens,
        )?;
        let cancel = self.cancel_flag();
        loop {
            let tok = match next.pick(&mut logits.values)? {
                Pick::End => return Ok(finish(out, FinishReason::EndOfSequence, text)),
                Pick::Token(t) => t,
            };
            out.push(tok);
            let control = on_token(tok);
            if let Some(dec) = &opts.decoder {
                // The whole text is decoded again (a piece may complete a character the
                // text before it ended in), so it is searched from its start.
                let t = dec.decode_ids(&out);
                if let Some(c) = stops.find(&t, 0) {
                    return Ok(finish(
                        out,
                        FinishReason::StopString,
                        Some(t[..c].to_string()),
                    ));
                }
                text = Some(t);
            }
            if control == Control::Stop {
                return Ok(finish(out, FinishReason::Callback, text));
            }
            if out.len() >= opts.max_tokens {
                return Ok(finish(out, FinishReason::Length, text));
            }
            if cancel.load(Ordering::Relaxed) {
                return Ok(finish(out, FinishReason::Cancelled, text));
            }
            if session.position() >= session.context_limit() {
                return Ok(finish(out, FinishReason::ContextLimit, text));
            }
            logits = match session.decode(tok) {
                Ok(l) => l,
                Err(ExecError::Cancelled) => return Ok(finish(out, FinishReason::Cancelled, text)),
                Err(e) => return Err(e),
            };
            logits.check_finite(session.position().saturating_sub(1))?;
        }
    }
}

impl Generation {
    fn ended(
        token_ids: Vec<u32>,
        reason: FinishReason,
        prompt_tokens: usize,
        text: Option<String>,
    ) -> Generation {
        Generation {
            generated_tokens: token_ids.len(),
            token_ids,
            finish_reason: reason,
            prompt_tokens,
            text,
        }
    }
}

/// The generated text before the first token: empty when a decoder is given.
fn text_start(opts: &GenerateOptions) -> Option<String> {
    opts.decoder.as_ref().map(|_| String::new())
}

/// Checks the options; their stop strings, ready to search.
fn check_options(opts: &GenerateOptions) -> Result<StopStrings> {
    if !opts.stop.is_empty() && opts.decoder.is_none() {
        return Err(ExecError::InvalidOption(
            "stop strings need a tokenizer to decode the generated text".into(),
        ));
    }
    StopStrings::new(&opts.stop)
}
