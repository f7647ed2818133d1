//! Constrained decoding: a JSON schema, any JSON object, a GBNF grammar or a Lark grammar
//! restricts which tokens may come next, step by step, so the generated text is in the
//! grammar's language.
//!
//! The masks come from llguidance (docs/serve.md "Constrained decoding" says why): a
//! [`GrammarCompiler`] holds its token trie for one tokenizer (built once, on first use);
//! [`Grammar::compile`] checks and compiles a [`ConstraintSpec`] once; each generation
//! starts its own [`Constraint`] from it, which masks the logits before sampling and is told
//! each sampled token. GBNF is translated to Lark by [`gbnf`].

pub mod gbnf;

use std::sync::{Arc, OnceLock};

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};

use crate::error::{ExecError, Result};
use crate::tokenizer::{TokenKind, Tokenizer};

/// What a generation must produce.
#[derive(Debug, Clone, PartialEq)]
pub enum ConstraintSpec {
    /// Any JSON object (OpenAI's `response_format: {"type": "json_object"}`).
    JsonObject,
    /// JSON valid against this schema (`json_schema`, `GENERATE … SCHEMA`).
    JsonSchema(serde_json::Value),
    /// A GBNF grammar, as llama.cpp's server takes it (`grammar`, `GENERATE … GRAMMAR`).
    /// A grammar whose first line is `%llguidance …` is llguidance's Lark, as in llama.cpp.
    Gbnf(String),
    /// A grammar in llguidance's Lark dialect.
    Lark(String),
}

impl ConstraintSpec {
    /// A short name for messages and EXPLAIN: `json_object`, `json_schema`, `gbnf`, `lark`.
    pub fn kind(&self) -> &'static str {
        match self {
            ConstraintSpec::JsonObject => "json_object",
            ConstraintSpec::JsonSchema(_) => "json_schema",
            ConstraintSpec::Gbnf(_) => "gbnf",
            ConstraintSpec::Lark(_) => "lark",
        }
    }

    /// llguidance's grammar for this spec. JSON is written with `": "` and `", "` between
    /// items and no other white space (a schema's own `x-guidance` options win), so a model
    /// cannot pad its answer with white space without end; an object schema that lists
    /// `properties` and says nothing of `additionalProperties` gets no others (as llama.cpp's
    /// and Ollama's schema converters do), so a small model cannot invent keys without end.
    /// Both only narrow the language: every text produced still validates.
    fn top_level(&self) -> Result<TopLevelGrammar> {
        let json =
            |schema: serde_json::Value| TopLevelGrammar::from_json_schema(guided_schema(schema));
        Ok(match self {
            ConstraintSpec::JsonObject => json(serde_json::json!({"type": "object"})),
            ConstraintSpec::JsonSchema(schema) => {
                if !(schema.is_object() || schema.is_boolean()) {
                    return Err(grammar_error(
                        "json_schema",
                        "a JSON schema is an object (or true/false)",
                    ));
                }
                json(schema.clone())
            }
            ConstraintSpec::Gbnf(text) => match text.trim_start().strip_prefix("%llguidance") {
                Some(rest) => {
                    let body = rest.split_once('\n').map_or("", |(_, b)| b);
                    TopLevelGrammar::from_lark(body.to_string())
                }
                None => {
                    let g = gbnf::Gbnf::parse(text)
                        .map_err(|e| grammar_error("GBNF", e.to_string()))?;
                    TopLevelGrammar::from_lark(g.to_lark())
                }
            },
            ConstraintSpec::Lark(text) => TopLevelGrammar::from_lark(text.clone()),
        })
    }
}

/// A JSON schema as LQL constrains to it (what [`ConstraintSpec::JsonSchema`] compiles, and
/// what a Lark grammar's `%json {…}` should embed to decode the same way): one-line JSON
/// with `": "` and `", "` between items (unless the schema's own `x-guidance` says
/// otherwise), and no properties beyond those listed where an object lists some and says
/// nothing of `additionalProperties`.
pub fn guided_schema(mut schema: serde_json::Value) -> serde_json::Value {
    no_unlisted_properties(&mut schema, 0);
    if let Some(obj) = schema.as_object_mut() {
        obj.entry("x-guidance").or_insert_with(|| {
            serde_json::json!({
                "whitespace_flexible": false,
                "key_separator": ": ",
                "item_separator": ", ",
            })
        });
    }
    schema
}

/// Deepest schema nesting [`no_unlisted_properties`] walks (deeper parts are left as given).
const MAX_SCHEMA_DEPTH: usize = 64;

/// Sets `additionalProperties: false` on every object schema with `properties` and no
/// `additionalProperties`, through `properties`, `items`, `prefixItems`, `anyOf`, `oneOf`,
/// `$defs` and `definitions` (not through `allOf`, whose parts add up to one object).
fn no_unlisted_properties(schema: &mut serde_json::Value, depth: usize) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    if depth > MAX_SCHEMA_DEPTH {
        return;
    }
    if obj.contains_key("properties") && !obj.contains_key("additionalProperties") {
        obj.insert(
            "additionalProperties".into(),
            serde_json::Value::Bool(false),
        );
    }
    for key in ["properties", "$defs", "definitions"] {
        if let Some(map) = obj.get_mut(key).and_then(|v| v.as_object_mut()) {
            for v in map.values_mut() {
                no_unlisted_properties(v, depth + 1);
            }
        }
    }
    for key in ["items", "prefixItems", "anyOf", "oneOf"] {
        match obj.get_mut(key) {
            Some(serde_json::Value::Array(list)) => {
                for v in list {
                    no_unlisted_properties(v, depth + 1);
                }
            }
            Some(v) => no_unlisted_properties(v, depth + 1),
            None => {}
        }
    }
}

fn grammar_error(kind: &str, message: impl Into<String>) -> ExecError {
    ExecError::Grammar {
        kind: kind.to_string(),
        message: message.into(),
    }
}

/// llguidance's parser factory for one tokenizer: the token trie (each id's bytes; control
/// and unused ids marked special so text never matches them) and the slices it precomputes.
pub struct GrammarCompiler {
    factory: ParserFactory,
    /// The id llguidance treats as end of text.
    eos: u32,
    /// The ids that close JSON (see [`Closers`]).
    closers: Arc<Closers>,
}

/// The tokens that end what a JSON text has open, for [`Constraint::mask`]'s closing under
/// budget: inside a string those whose text starts with `"` and holds no `,` (a `", ` would
/// close the string only to open the next item), else any that starts with `"`; outside,
/// those that start with `]` or `}`, and, second choice, with `,` (the end of a number
/// before more keys). Each token's bytes, to follow whether the text is inside a string.
#[derive(Debug, Default)]
pub struct Closers {
    quote_alone: Vec<u32>,
    quote: Vec<u32>,
    bracket: Vec<u32>,
    comma: Vec<u32>,
    bytes: Vec<Vec<u8>>,
}

/// Where a JSON text is, lexically: inside a string, after a backslash.
#[derive(Debug, Clone, Copy, Default)]
struct JsonLex {
    in_string: bool,
    escaped: bool,
}

impl JsonLex {
    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if self.escaped {
                self.escaped = false;
            } else if self.in_string && b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = !self.in_string;
            }
        }
    }
}

impl GrammarCompiler {
    /// The compiler of `tokenizer`, built on first use and kept with it.
    pub fn of(tokenizer: &Tokenizer) -> Result<&GrammarCompiler> {
        let cell: &OnceLock<std::result::Result<GrammarCompiler, String>> =
            tokenizer.grammar_compiler_cell();
        cell.get_or_init(|| GrammarCompiler::build(tokenizer))
            .as_ref()
            .map_err(|e| grammar_error("tokenizer", e.clone()))
    }

    fn build(tokenizer: &Tokenizer) -> std::result::Result<GrammarCompiler, String> {
        let n = tokenizer.vocab_size();
        let eos = tokenizer
            .eos_id()
            .filter(|&id| (id as usize) < n)
            .ok_or("the tokenizer has no end-of-sequence token to end a grammar with")?;
        let words: Vec<Vec<u8>> = (0..n as u32)
            .map(|id| {
                let bytes = tokenizer.token_bytes(id).unwrap_or_default();
                match tokenizer.token_kind(id) {
                    TokenKind::Normal | TokenKind::Byte | TokenKind::UserDefined => bytes.to_vec(),
                    _ => {
                        let mut special = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                        special.extend_from_slice(bytes);
                        special
                    }
                }
            })
            .collect();
        let mut closers = Closers::default();
        for (id, w) in words.iter().enumerate() {
            match w.first() {
                Some(b'"') if !w.contains(&b',') => closers.quote_alone.push(id as u32),
                Some(b'"') => closers.quote.push(id as u32),
                Some(b']' | b'}') => closers.bracket.push(id as u32),
                Some(b',') => closers.comma.push(id as u32),
                _ => {}
            }
        }
        let info = TokRxInfo::new(n as u32, eos);
        let trie = TokTrie::from(&info, &words);
        closers.bytes = words;
        let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| e.to_string())?;
        factory.quiet();
        Ok(GrammarCompiler {
            factory,
            eos,
            closers: Arc::new(closers),
        })
    }
}

/// A spec compiled for one tokenizer, checked once; each generation [`Grammar::start`]s
/// its own [`Constraint`] from it.
pub struct Grammar {
    template: Matcher,
    eos: u32,
    kind: &'static str,
    /// JSON specs: the tokens that close, for closing under budget.
    closers: Option<Arc<Closers>>,
}

impl std::fmt::Debug for Grammar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammar").field("kind", &self.kind).finish()
    }
}

impl Grammar {
    /// Compile `spec` for `tokenizer`; a grammar that does not compile, or whose language
    /// is empty, is refused with llguidance's reason.
    pub fn compile(spec: &ConstraintSpec, tokenizer: &Tokenizer) -> Result<Arc<Grammar>> {
        let compiler = GrammarCompiler::of(tokenizer)?;
        let parser = compiler
            .factory
            .create_parser(spec.top_level()?)
            .map_err(|e| grammar_error(spec.kind(), first_line(&e.to_string())))?;
        let mut template = Matcher::new(Ok(parser));
        if let Some(e) = template.get_error() {
            return Err(grammar_error(spec.kind(), first_line(&e)));
        }
        // A grammar that admits nothing fails here, not after the prompt's prefill.
        let mask = template
            .compute_mask()
            .map_err(|e| grammar_error(spec.kind(), first_line(&e.to_string())))?;
        if mask.is_zero() {
            return Err(grammar_error(spec.kind(), "the grammar admits no text"));
        }
        let json = matches!(
            spec,
            ConstraintSpec::JsonObject | ConstraintSpec::JsonSchema(_)
        );
        Ok(Arc::new(Grammar {
            template,
            eos: compiler.eos,
            kind: spec.kind(),
            closers: json.then(|| compiler.closers.clone()),
        }))
    }

    /// A fresh constraint at the start of the text.
    pub fn start(&self) -> Constraint {
        Constraint {
            matcher: self.template.clone(),
            eos: self.eos,
            kind: self.kind,
            closers: self.closers.clone(),
            lex: JsonLex::default(),
        }
    }

    pub fn kind(&self) -> &'static str {
        self.kind
    }
}

/// One generation's place in its grammar.
pub struct Constraint {
    matcher: Matcher,
    eos: u32,
    kind: &'static str,
    closers: Option<Arc<Closers>>,
    lex: JsonLex,
}

/// Whether a generation that has made `generated` of its `max_tokens` is where JSON closes
/// (see [`Constraint::mask`]): the last eighth of the budget, at least 8 and at most 64
/// tokens.
pub fn in_closing_reserve(max_tokens: usize, generated: usize) -> bool {
    max_tokens.saturating_sub(generated) <= (max_tokens / 8).clamp(8, 64)
}

/// What the grammar allows next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowed {
    /// Some tokens; the logits of all others are now −∞.
    Tokens,
    /// Only the end: the text is complete.
    EndOnly,
}

impl Constraint {
    /// Set the logits of every token the grammar does not allow next to −∞. The end ids
    /// (`end_ids`: end of sequence, end of turn) are allowed exactly when the text so far
    /// is complete; ids past the tokenizer's vocabulary are never allowed.
    ///
    /// **Closing under budget** (JSON specs): when `closing` is true — the generation is in
    /// the last tokens of its budget ([`in_closing_reserve`]) — and the grammar allows a
    /// token that closes what is open (inside a string: one that starts with `"`,
    /// preferably without a `,`; outside: one that starts with `]` or `}`, or the end),
    /// only those stay allowed; outside a string, failing those, the tokens that start
    /// with `,`. So a model that keeps writing inside an unbounded string or array is led
    /// to close it, and the schema's required keys (which the grammar forces) follow,
    /// instead of being cut mid-text at `max_tokens`. Only the choice among allowed tokens
    /// narrows: the text is still in the language.
    pub fn mask(&mut self, logits: &mut [f32], end_ids: &[u32], closing: bool) -> Result<Allowed> {
        // A stopped matcher (the text is complete and nothing may follow) allows the end only.
        let mask = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| self.failure(e.to_string()))?;
        let end_ok = mask.is_allowed(self.eos);
        if end_ok && mask.num_set() == 1 {
            return Ok(Allowed::EndOnly);
        }
        let n = mask.len();
        for (id, l) in logits.iter_mut().enumerate() {
            let id = id as u32;
            let allowed = if end_ids.contains(&id) {
                end_ok
            } else {
                id != self.eos && (id as usize) < n && mask.is_allowed(id)
            };
            if !allowed {
                *l = f32::NEG_INFINITY;
            }
        }
        if closing {
            if let Some(c) = &self.closers {
                if self.lex.in_string {
                    if !narrow_to(logits, &[&c.quote_alone]) {
                        narrow_to(logits, &[&c.quote]);
                    }
                } else if !narrow_to(logits, &[&c.bracket, end_ids]) {
                    narrow_to(logits, &[&c.comma]);
                }
            }
        }
        Ok(Allowed::Tokens)
    }

    /// Advance past `token`, which [`Constraint::mask`] allowed (an end id counts as the
    /// end of the text).
    pub fn commit(&mut self, token: u32, end_ids: &[u32]) -> Result<()> {
        let t = if end_ids.contains(&token) {
            self.eos
        } else {
            token
        };
        if let Some(bytes) = self.closers.as_ref().and_then(|c| c.bytes.get(t as usize)) {
            self.lex.feed(bytes);
        }
        self.matcher
            .consume_token(t)
            .map_err(|e| self.failure(e.to_string()))
    }

    /// The text so far is complete and nothing may follow it.
    pub fn is_finished(&self) -> bool {
        self.matcher.is_stopped()
    }

    fn failure(&self, message: String) -> ExecError {
        grammar_error(self.kind, first_line(&message))
    }
}

/// Keeps only the allowed (finite) logits of the ids in `sets`, when there is one; says
/// whether it narrowed.
fn narrow_to(logits: &mut [f32], sets: &[&[u32]]) -> bool {
    let kept: Vec<(usize, f32)> = sets
        .iter()
        .flat_map(|s| s.iter())
        .filter_map(|&id| {
            let l = *logits.get(id as usize)?;
            l.is_finite().then_some((id as usize, l))
        })
        .collect();
    if kept.is_empty() {
        return false;
    }
    logits.iter_mut().for_each(|l| *l = f32::NEG_INFINITY);
    for (id, l) in kept {
        logits[id] = l;
    }
    true
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or(s).to_string()
}
