//! The operators that run the model: Tokenize, Forward, Head, TopK, DecodeLoop and
//! Detokenize (INFER, GENERATE, TOKENIZE; Forward also serves WALK RESIDUAL and TRACE).
//! Raw prompts, no chat template; BOS as the tokenizer's `add_bos` says. Every operator
//! stops early when the interrupt handle is used.

use std::sync::Arc;

use lql_exec::trace::{self, CaptureOptions, TraceCapture};
use lql_exec::{Control, FinishReason, GenerateOptions, Sampling};
use lql_planner::{Capture, LayerRange, Positions, TextRole};

use super::datum::Datum;
use super::interp::{wrong_input, Mode, Run};
use super::Cx;
use crate::error::{Error, Result};
use crate::rows::Rows;
use crate::value::Value;

/// `Tokenize "text"`: the text's ids, with BOS when the tokenizer adds one (TOKENIZE,
/// INFER, GENERATE, WALK, TRACE); DESCRIBE's entity is tokenized without it.
pub(crate) fn tokenize(cx: &mut Cx<'_>, text: &str, role: TextRole) -> Result<Datum> {
    let tok = cx.tokenizer()?;
    let ids = tok.encode(text, role.bos())?;
    if ids.is_empty() {
        match role {
            TextRole::Text => {}
            TextRole::Entity => {
                return Err(Error::semantic(format!(
                    "{text:?} tokenizes to no tokens: nothing to describe"
                )))
            }
            TextRole::Prompt => {
                return Err(Error::semantic(
                    "the prompt is empty: at least one token is needed",
                ))
            }
        }
    }
    Ok(Datum::Tokens(ids))
}

/// `Forward layers=a-b capture=…`: runs exactly those layers over the prompt.
///
/// - no capture (INFER, GENERATE): a continuation prefilled through every layer, and the
///   last position's residual for Head (with EXPLAIN INFER's tap, a trace capture too);
/// - `ffn_input` (WALK RESIDUAL): layers 0 through the last scanned, capturing each
///   layer's normed FFN input and activation at the last position; no later layer runs;
/// - `residual` (TRACE): a trace capture of every layer at the positions asked for.
pub(crate) fn forward(
    cx: &mut Cx<'_>,
    input: Datum,
    layers: LayerRange,
    capture: &[Capture],
    positions: Positions,
    r: &mut Run,
) -> Result<Datum> {
    let Datum::Tokens(ids) = input else {
        return Err(wrong_input("Forward", &input));
    };
    let exec = cx.executor()?;
    let model = cx.model()?;
    let ffn_input = capture.iter().find_map(|c| match c {
        Capture::FfnInput(l) => Some(*l),
        _ => None,
    });
    if let Some(at) = ffn_input {
        let scanned: Vec<usize> = at.iter().collect();
        let caps = lql_exec::browse::residual::capture(&exec, &ids, &scanned)?;
        return Ok(Datum::FfnCaptures {
            tokens: ids,
            layers: scanned,
            caps,
        });
    }
    let n_layers = model.surface.n_layers;
    let residual_capture = capture.contains(&Capture::Residual).then(|| {
        let activity = capture.contains(&Capture::Activity);
        CaptureOptions {
            positions: match positions {
                Positions::All => trace::Positions::All,
                Positions::Last => trace::Positions::Last,
            },
            attention: activity,
            ffn_activity: activity,
        }
    });
    let whole = layers.first == 0 && layers.last + 1 == n_layers;
    if !whole {
        // A trace whose LIMIT needs only the first layers: the pass stops after them and
        // yields the trace itself (no head runs; the rows read the lens alone).
        return match residual_capture {
            Some(opts) if layers.first == 0 && layers.last < n_layers => {
                let mut cap = TraceCapture::new(opts);
                exec.observe_layers(&ids, layers.last, &mut cap)?;
                let trace = cap
                    .finish(&ids, Vec::new())
                    ?;
                Ok(Datum::Trace {
                    trace,
                    lens: None,
                    decompose: false,
                })
            }
            _ => Err(Error::unsupported(format!(
                "not supported yet: a forward pass over layers {layers} alone (the model has {n_layers})"
            ))),
        };
    }
    // EXPLAIN INFER's tap captures the last position's layers, attention and activity.
    let capture_opts = residual_capture.or_else(|| {
        (r.mode == Mode::TapTrace).then_some(CaptureOptions {
            positions: trace::Positions::Last,
            attention: true,
            ffn_activity: true,
        })
    });
    let mut capture = capture_opts.map(TraceCapture::new);
    let mut session = exec.session();
    let residual = session.extend_to_residual(
        &ids,
        capture.as_mut().map(|c| c as &mut dyn lql_exec::Observer),
    )?;
    Ok(Datum::Prefilled {
        session,
        residual,
        capture,
        tokens: ids,
    })
}

/// `Head`: final norm and output projection of the last position.
pub(crate) fn head(cx: &mut Cx<'_>, input: Datum, r: &mut Run) -> Result<Datum> {
    let Datum::Prefilled {
        residual,
        capture,
        tokens,
        ..
    } = input
    else {
        return Err(wrong_input("Head", &input));
    };
    let exec = cx.executor()?;
    let logits = finite_head(&exec, &residual, &tokens)?;
    let Some(cap) = capture else {
        return Ok(Datum::Logits(logits));
    };
    let trace = cap.finish(&tokens, logits.values.clone())?;
    // EXPLAIN INFER keeps the capture beside the plan's logits.
    if r.mode == Mode::TapTrace {
        r.tapped = Some(trace);
        return Ok(Datum::Logits(logits));
    }
    Ok(Datum::Trace {
        trace,
        lens: None,
        decompose: false,
    })
}

/// Refuses values that are not finite (NaN or infinite weights, an absurd scale).
pub(crate) fn check_finite(values: &[f32], what: &str) -> Result<()> {
    match values.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(i) => Err(Error::new(
            crate::error::ErrorKind::Format,
            format!(
                "{what} are not finite (element {i} is {}): the model's weights or scales produce NaN or infinity",
                values[i]
            ),
        )
        .with_code(crate::Code::Numeric)),
    }
}

/// The head's logits over `residual`, refused when not finite, naming where the pass over
/// `ids` first stopped being finite (Head and DecodeLoop both end their pass here).
fn finite_head(
    exec: &lql_exec::Executor,
    residual: &[f32],
    ids: &[u32],
) -> Result<lql_exec::Logits> {
    let logits = exec.head(residual)?;
    if let Err(e) = check_finite(&logits.values, "the output head's logits") {
        return Err(locate_non_finite(exec, ids).unwrap_or(e));
    }
    Ok(logits)
}

/// Finds where a forward pass over `ids` first stops being finite (the embedding, a layer's
/// attention or FFN block, or the final norm) and words the error after it.
fn locate_non_finite(exec: &lql_exec::Executor, ids: &[u32]) -> Option<Error> {
    struct Finder {
        at: Option<String>,
    }
    fn bad(v: &[f32]) -> bool {
        v.iter().any(|x| !x.is_finite())
    }
    impl lql_exec::Observer for Finder {
        fn on_embedding(&mut self, _: std::ops::Range<usize>, rows: &[f32]) {
            if self.at.is_none() && bad(rows) {
                self.at = Some("the token embedding (token_embd × embedding scale)".into());
            }
        }
        fn on_layer(&mut self, r: &lql_exec::LayerRecord<'_>) {
            if self.at.is_some() {
                return;
            }
            if bad(r.attn_delta) {
                self.at = Some(format!(
                    "layer {} attention (attn_norm, attn_q/k/v, attn_output)",
                    r.layer
                ));
            } else if bad(r.ffn_delta) {
                self.at = Some(format!(
                    "layer {} FFN (ffn_norm, ffn_gate/up, ffn_down)",
                    r.layer
                ));
            }
        }
    }
    let mut f = Finder { at: None };
    let n = exec.surface().n_layers.checked_sub(1)?;
    exec.observe_layers(ids, n, &mut f).ok()?;
    let at =
        f.at.unwrap_or_else(|| "the output head (output_norm, output)".into());
    Some(
        Error::new(
            crate::error::ErrorKind::Format,
            format!("the forward pass stops being finite at {at}: the model's weights or scales produce NaN or infinity"),
        )
        .with_code(crate::Code::Numeric),
    )
}

/// `TopK k softmax`.
pub(crate) fn top_k(input: Datum, k: usize) -> Result<Datum> {
    match input {
        Datum::Logits(l) => Ok(Datum::Top(l.top(k))),
        other => Err(wrong_input("TopK", &other)),
    }
}

/// `DecodeLoop`: head → sample → one more position, until a stop condition.
pub(crate) fn decode_loop(
    cx: &mut Cx<'_>,
    input: Datum,
    max_tokens: usize,
    s: &lql_planner::Sampling,
    stop: &[String],
    constraint: Option<&lql_planner::OutputConstraint>,
) -> Result<Datum> {
    let Datum::Prefilled {
        session, residual, ..
    } = input
    else {
        return Err(wrong_input("DecodeLoop", &input));
    };
    let exec = cx.executor()?;
    let tok = cx.tokenizer()?;
    let grammar = match constraint {
        Some(c) => Some(compile_constraint(c, &tok)?),
        None => None,
    };
    let first = finite_head(&exec, &residual, session.tokens())?;
    let opts = GenerateOptions {
        max_tokens,
        sampling: Sampling {
            temperature: s.temperature as f32,
            top_k: s.top_k.unwrap_or(0),
            top_p: s.top_p.map_or(1.0, |p| p as f32),
            seed: s.seed.unwrap_or(0),
            repeat_penalty: s.repeat_penalty.map_or(1.0, |r| r as f32),
            frequency_penalty: s.frequency_penalty.unwrap_or(0.0) as f32,
            presence_penalty: s.presence_penalty.unwrap_or(0.0) as f32,
            ..Sampling::default()
        },
        stop: stop.to_vec(),
        stop_at_eos: true,
        stop_ids: Vec::new(),
        decoder: Some(tok.clone() as Arc<dyn lql_exec::TokenDecoder>),
        grammar,
    };
    let handler = cx.engine.tokens.clone();
    let mut stream = tok.stream_decoder();
    let mut on_token = |id: u32| {
        if let Some(h) = &handler {
            match stream.push(id) {
                Ok(piece) if !piece.is_empty() => h(&piece),
                _ => {}
            }
        }
        Control::Continue
    };
    let g = exec.generate_from(session, first, &opts, &mut on_token)?;
    if let Some(h) = &handler {
        let rest = stream.flush();
        if !rest.is_empty() {
            h(&rest);
        }
    }
    if g.finish_reason == FinishReason::Cancelled {
        // The text so far rides on the error: callers that interrupted get it back.
        let rows = generation_rows(cx, g, "interrupted")?;
        return Err(Error::interrupted().with_partial_rows(rows));
    }
    Ok(Datum::Generation(g))
}

/// GENERATE's SCHEMA (already checked to be JSON) or GRAMMAR, compiled for the model's
/// tokenizer; a fault names the clause.
fn compile_constraint(
    c: &lql_planner::OutputConstraint,
    tok: &lql_exec::tokenizer::Tokenizer,
) -> Result<Arc<lql_exec::constrain::Grammar>> {
    use lql_exec::constrain::{ConstraintSpec, Grammar};
    use lql_planner::OutputConstraint as O;
    let (spec, clause) = match c {
        O::Schema(text) => {
            let schema = serde_json::from_str(text)
                .map_err(|e| Error::semantic(format!("SCHEMA is not valid JSON: {e}")))?;
            (ConstraintSpec::JsonSchema(schema), "SCHEMA")
        }
        O::Grammar(text) => (ConstraintSpec::Gbnf(text.clone()), "GRAMMAR"),
    };
    Grammar::compile(&spec, tok).map_err(|e| Error::semantic(format!("{clause}: {e}")))
}

/// `Detokenize`: ids → text, into the statement's rows.
pub(crate) fn detokenize(cx: &mut Cx<'_>, input: Datum) -> Result<Datum> {
    let tok = cx.tokenizer()?;
    let columns = cx.result_columns();
    let mut rows = Rows::new(columns);
    match input {
        Datum::Top(top) => {
            for t in top {
                rows.push(vec![
                    Value::from(t.rank),
                    Value::from(tok.token_text(t.token_id)),
                    Value::from(t.token_id),
                    Value::from(t.prob),
                    Value::from(t.logit),
                ]);
            }
        }
        Datum::Generation(g) => {
            let reason = g.finish_reason.as_str();
            return Ok(Datum::Rows(generation_rows(cx, g, reason)?));
        }
        Datum::Tokens(ids) => {
            for (i, id) in ids.into_iter().enumerate() {
                rows.push(vec![
                    Value::from(i),
                    Value::from(id),
                    Value::from(tok.token_text(id)),
                ]);
            }
        }
        other => return Err(wrong_input("Detokenize", &other)),
    }
    Ok(Datum::Rows(rows))
}

/// GENERATE's one row, with `reason` as its finish_reason.
fn generation_rows(cx: &mut Cx<'_>, g: lql_exec::Generation, reason: &str) -> Result<Rows> {
    let tok = cx.tokenizer()?;
    let mut rows = Rows::new(cx.result_columns());
    let text = match g.text {
        Some(t) => t,
        None => tok.decode(&g.token_ids)?,
    };
    rows.push(vec![
        Value::from(text),
        Value::from(g.token_ids),
        Value::from(reason),
        Value::from(g.prompt_tokens),
        Value::from(g.generated_tokens),
    ]);
    Ok(rows)
}
