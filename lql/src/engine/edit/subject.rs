//! The subject write of `INSERT INTO edges`: a gated feature at an early layer, keyed on
//! the entity's last token, whose value is optimised through the layers above it so that
//! prompts naming the entity continue with the target (docs/editing.md, "The subject's
//! value").
//!
//! ```text
//!  contexts  the edit prompt, the same after a few neutral sentences, and the prompt from
//!            the entity on (so a sentence can start with it)
//!  value δ   Adam on Σ −log p(target) over the contexts (and the targets of the entity's
//!            other edges in force, kept), δ added after layer S at the entity's last token
//!            (`lql_exec::grad`)
//!  keys      the normed FFN input of layer S at the entity's last token: one mean over the
//!            contexts where the entity is mid-sentence, one where it starts the text
//!  features  one hat per key, writing δ (activation 1 at the key)
//! ```

use std::sync::Arc;

use lql_exec::edit as ke;
use lql_exec::grad::{self, DenseTail, Segment};
use lql_planner::{EdgeRow, InsertPlan};
use lql_storage::overlay::Edit;

use super::{
    bound_mut, centre, continuation, other_entities, rebuild, reference_rows, Cx, STAND_INS,
};
use crate::error::{Error, Result};

/// Sentences a context starts with, so the entity sits mid-text ("" is the prompt itself).
const PREFIXES: [&str; 4] = [
    "",
    "Here is a fact. ",
    "I read about this today. ",
    "Listen to this. ",
];

/// Short texts that end in the entity mid-sentence: the mid-sentence key is their mean
/// with the edit contexts'.
const KEY_CONTEXTS: [&str; 6] = [
    "In {}",
    "About {}",
    "I read about {}",
    "Tell me about {}",
    "This is a fact about {}",
    "They asked about {}",
];

/// The mid-sentence gate rises from θ to full over this much of the key's score.
const STEP_WIDTH: f32 = 0.05;

/// Other entities of the relation the subject gate is calibrated to stay shut on.
const CONTRAST: usize = 16;

/// One text with the entity's last token at `pos`.
struct Context {
    text: String,
    ids: Vec<u32>,
    pos: usize,
    at_start: bool,
}

/// Tokenizes `text` and finds the last token of the entity that ends at byte `end`.
fn context(cx: &mut Cx<'_>, text: &str, end: usize, at_start: bool) -> Result<Option<Context>> {
    let tok = cx.tokenizer()?;
    let ids = tok.encode(text, true)?;
    let pre = tok.encode(&text[..end], true)?;
    if pre.is_empty() || !ids.starts_with(&pre) || pre.len() >= ids.len() {
        return Ok(None);
    }
    Ok(Some(Context {
        text: text.to_string(),
        ids,
        pos: pre.len() - 1,
        at_start,
    }))
}

/// The edit prompt's contexts, or none when the prompt does not name the entity.
fn contexts(cx: &mut Cx<'_>, prompt: &str, entity: &str) -> Result<Vec<Context>> {
    let Some(start) = prompt.find(entity) else {
        return Ok(Vec::new());
    };
    let end = start + entity.len();
    let mut out = Vec::new();
    for p in PREFIXES {
        let text = format!("{p}{prompt}");
        if let Some(c) = context(cx, &text, p.len() + end, p.is_empty() && start == 0)? {
            out.push(c);
        }
    }
    if start > 0 {
        if let Some(c) = context(cx, &prompt[start..], end - start, true)? {
            out.push(c);
        }
    }
    Ok(out)
}

/// What one row's subject write needs besides its optimised value: the contexts and the
/// keys' rows.
struct Pending {
    ctxs: Vec<Context>,
    mid: Vec<f32>,
    first: Vec<f32>,
}

/// The subject writes of several rows of distinct entities, their values optimised
/// together (`grad::optimise_each`: one pass per step carries every row's contexts, so the
/// layers above `layer` are read once per step for all of them), each against the state
/// before any of them. Each row's features are added in order; returns, per row, where in
/// the edit list its features start (`None`: the prompt does not name the entity).
pub(super) fn write_each(
    cx: &mut Cx<'_>,
    plan: &InsertPlan,
    rows: &[(&EdgeRow, &str, u32)],
    layer: usize,
) -> Result<Vec<Option<usize>>> {
    let mut pending = Vec::with_capacity(rows.len());
    let mut groups = Vec::with_capacity(rows.len());
    for &(row, prompt, target) in rows {
        cx.check_cancel()?;
        pending.push(prepare(cx, row, prompt, target, layer)?.map(|(group, p)| {
            groups.push(group);
            p
        }));
    }
    if groups.is_empty() {
        return Ok(vec![None; rows.len()]);
    }
    let source = cx.browse_source()?;
    let tail = dense_tail(cx, layer + 1)?;
    let mut values =
        grad::optimise_each(&tail, source.as_ref(), &groups, grad::Optimise::default())?
            .into_iter();
    let mut out = Vec::with_capacity(rows.len());
    for (&(row, _, _), p) in rows.iter().zip(pending) {
        let Some(p) = p else {
            out.push(None);
            continue;
        };
        let (delta, _) = values
            .next()
            .ok_or_else(|| Error::internal("a subject value is missing"))?;
        let at = bound_mut(cx)?.edits.target().len();
        finish(cx, plan, row, p, delta, layer)?;
        out.push(Some(at));
    }
    rebuild(cx)?;
    Ok(out)
}

/// The optimisation's segments and scale, and the contexts and key rows, of `row`'s subject
/// write (none when the prompt does not name the entity).
fn prepare(
    cx: &mut Cx<'_>,
    row: &EdgeRow,
    prompt: &str,
    target: u32,
    layer: usize,
) -> Result<Option<(grad::Group, Pending)>> {
    let ctxs = contexts(cx, prompt, &row.entity)?;
    if ctxs.is_empty() {
        return Ok(None);
    }
    let exec = cx.executor()?;
    let d = exec.surface().hidden;
    let state = cx.bound()?.edits.state.clone();
    let mut segs = Vec::new();
    let (mut mid, mut first) = (Vec::new(), Vec::new());
    let mut norm = 0.0f32;
    for c in &ctxs {
        let start = ke::residuals(&exec, &c.ids, layer)?;
        norm += start[c.pos * d..(c.pos + 1) * d]
            .iter()
            .map(|v| v * v)
            .sum::<f32>()
            .sqrt();
        let rows = ke::ffn_inputs(&exec, &c.ids, layer)?;
        let key = &rows[c.pos * d..(c.pos + 1) * d];
        if c.at_start { &mut first } else { &mut mid }.extend_from_slice(key);
        segs.push(Segment {
            start,
            pos: c.pos,
            target,
            weight: 1.0,
        });
    }
    norm /= ctxs.len() as f32;
    // The entity's other edges in force keep their targets.
    let tok = cx.tokenizer()?;
    let kept: Vec<(String, String)> = state
        .iter()
        .flat_map(|s| s.added_features())
        .filter_map(|(_, a, _)| a.edge.clone())
        .filter(|e| e.entity == row.entity && e.prompt != prompt)
        .map(|e| (e.prompt, e.target))
        .collect();
    for (p, t) in kept {
        let Some(c) = contexts(cx, &p, &row.entity)?.into_iter().next() else {
            continue;
        };
        let Some(&tt) = tok.encode(&continuation(&p, &t), false)?.first() else {
            continue;
        };
        segs.push(Segment {
            start: ke::residuals(&exec, &c.ids, layer)?,
            pos: c.pos,
            target: tt,
            weight: 1.0,
        });
    }
    Ok(Some((
        grad::Group { segs, norm },
        Pending { ctxs, mid, first },
    )))
}

/// Adds `row`'s subject features, writing `delta`, gated on its keys (the caller rebuilds
/// the state).
fn finish(
    cx: &mut Cx<'_>,
    plan: &InsertPlan,
    row: &EdgeRow,
    pending: Pending,
    delta: Vec<f32>,
    layer: usize,
) -> Result<()> {
    let Pending {
        ctxs,
        mut mid,
        first,
    } = pending;
    let exec = cx.executor()?;
    let d = exec.surface().hidden;
    let state = cx.bound()?.edits.state.clone();
    let tok = cx.tokenizer()?;
    // Gates: one per kind of key, calibrated on reference text and other entities.
    let others = other_entities(plan, state.as_deref(), row);
    let shut = reference_rows(cx, layer)?.to_vec();
    let c = centre(cx, layer)?;
    let activation = exec.surface().activation;
    // The mid-sentence key is also averaged over short generic texts ending in the entity,
    // so that it is the entity's, not the edit prompt's wording's.
    if !mid.is_empty() {
        for t in KEY_CONTEXTS {
            let text = t.replace("{}", &row.entity);
            let end = text.find(&row.entity).map_or(0, |i| i + row.entity.len());
            let ids = tok.encode(&text, true)?;
            let pre = tok.encode(&text[..end], true)?;
            if ids == pre && !ids.is_empty() {
                let r = ke::ffn_inputs(&exec, &ids, layer)?;
                mid.extend_from_slice(&r[r.len() - d..]);
            }
        }
    }
    let mut made = Vec::new();
    for (rows, at_start) in [(&mid, false), (&first, true)] {
        if rows.is_empty() {
            continue;
        }
        let mut key = mean_row(rows, d);
        let mut shut_here = shut.clone();
        let ctx = ctxs.iter().find(|c| c.at_start == at_start);
        if let Some(ctx) = ctx {
            let text = ctx.text.clone();
            for other in STAND_INS
                .iter()
                .copied()
                .chain(others.iter().take(CONTRAST).map(String::as_str))
            {
                let swapped = text.replacen(&row.entity, other, 1);
                let Some(start) = swapped.find(other) else {
                    continue;
                };
                if let Some(o) = context(cx, &swapped, start + other.len(), at_start)? {
                    let r = ke::ffn_inputs(&exec, &o.ids, layer)?;
                    shut_here.extend_from_slice(&r[o.pos * d..(o.pos + 1) * d]);
                }
            }
        }
        // First-token rows (every text has one; with no BOS they depend on the token alone)
        // and all other rows differ along the direction between their means. A key at a
        // text's start is centred on the rows of its own kind and its gate gains a term
        // along that direction which is 0 at the key and about −λ on rows of the other
        // kind; its direction has that component removed.
        let mut sink = None;
        let c = if at_start {
            let firsts = first_token_rows(cx, layer)?;
            let c0 = mean_row(&firsts, d);
            let mid = mean_row(&shut, d);
            let pos0 = ctx.is_some_and(|x| x.pos == 0);
            let (own, other) = if pos0 { (c0, mid) } else { (mid, c0) };
            let s: Vec<f32> = own.iter().zip(&other).map(|(a, b)| a - b).collect();
            let ss = s.iter().map(|v| v * v).sum::<f32>();
            let u: Vec<f32> = key.iter().zip(&own).map(|(a, b)| a - b).collect();
            let k = if ss > 0.0 {
                u.iter().zip(&s).map(|(a, b)| a * b).sum::<f32>() / ss
            } else {
                0.0
            };
            key = own
                .iter()
                .zip(&u)
                .zip(&s)
                .map(|((c, u), s)| c + u - k * s)
                .collect();
            sink = Some((s, ss, k));
            own
        } else {
            c.to_vec()
        };
        let base = lql_exec::edit::GateShape::default();
        // A key whose text starts with the entity is met exactly by every text that does
        // (the rows up to the entity's last token depend on the entity's tokens alone): a
        // band around it. A key mid-sentence meets other contexts only near it.
        // The first-token term's λ, and how far from the key's score it keeps the rows the
        // gate must stay shut on (reference text, first tokens, other entities).
        let lambda = match &sink {
            Some((s, ss, k)) => {
                let mut check = shut_here.clone();
                check.extend_from_slice(&first_token_rows(cx, layer)?);
                Some(best_lambda(&key, &c, s, *ss, *k, &check))
            }
            None => None,
        };
        let shape = match lambda {
            // A band around the key a third as wide as that margin, between ±0.01 and ±0.05: as
            // wide as the rows allow, so that another engine's rounding (an export run by
            // llama.cpp) still meets the key.
            Some((_, margin)) => {
                let w = (margin / 3.0).clamp(START_BAND.0, START_BAND.1);
                lql_exec::edit::GateShape {
                    beta: START_SHARPNESS / w,
                    theta: 1.0 - w,
                }
            }
            None => lql_exec::edit::GateShape {
                theta: ke::calibrated_theta(&key, &c, &shut_here, base, 0.05, 0.95),
                ..base
            },
        };
        let mut f = ke::keyed_feature(layer, &key, &c, shape, activation)?;
        if let (Some((s, ss, k)), Some((lambda, _))) = (sink, lambda) {
            // The score gains λ·((x − c)·s/‖s‖² − k): 0 at the key, about −λ on rows of the
            // other kind.
            let b = shape.beta * lambda / ss;
            f.gate.iter_mut().zip(&s).for_each(|(g, v)| *g += b * v);
            f.gate_bias -=
                b * s.iter().zip(&c).map(|(a, b)| a * b).sum::<f32>() + shape.beta * lambda * k;
        }
        f.down = delta.clone();
        if at_start {
            made.extend(ke::hat(&f, shape, activation).into_iter().map(Edit::Add));
        } else {
            made.extend(
                ke::step(&f, shape, STEP_WIDTH, activation)
                    .into_iter()
                    .map(Edit::Add),
            );
        }
    }
    if made.is_empty() {
        return Err(Error::internal("no subject key"));
    }
    bound_mut(cx)?.edits.target().extend(made);
    Ok(())
}

/// Tokens whose first-position residual calibrates a key at a text's start: every id below
/// `FIRST_TOKEN_ALL` (the most frequent merges) and every `FIRST_TOKEN_STRIDE`-th above it
/// that reads as a word with no leading space.
const FIRST_TOKEN_ALL: u32 = 3000;
const FIRST_TOKEN_STRIDE: usize = 48;

/// The normed FFN inputs of `layer` of single-token texts (base model), cached per binding.
fn first_token_rows(cx: &mut Cx<'_>, layer: usize) -> Result<Arc<Vec<f32>>> {
    if let Some(r) = cx.bound()?.edits.first_rows.get(&layer) {
        return Ok(r.clone());
    }
    let tok = cx.tokenizer()?;
    let exec = super::base_executor(cx)?;
    let mut rows = Vec::new();
    for id in 0..tok.vocab_size() as u32 {
        if id >= FIRST_TOKEN_ALL && !(id as usize).is_multiple_of(FIRST_TOKEN_STRIDE) {
            continue;
        }
        let word = tok
            .token_text(id)
            .is_some_and(|t| t.chars().count() > 1 && t.chars().all(char::is_alphabetic));
        if word {
            rows.extend_from_slice(&ke::ffn_inputs(&exec, &[id], layer)?);
        }
    }
    let rows = Arc::new(rows);
    bound_mut(cx)?.edits.first_rows.insert(layer, rows.clone());
    Ok(rows)
}

/// The half-width of a start key's band: at least, at most (in units of the key's score).
const START_BAND: (f32, f32) = (0.01, 0.05);
/// β × the band's half-width: how sharp the band's edges are.
const START_SHARPNESS: f32 = 10.0;

/// The λ (of a few candidates) whose gate score `a + λ·b` keeps `rows` farthest from the
/// key's score 1, where `a` is a row's score along the key's direction and `b` its offset
/// along `s` from the key's; with that distance (the closest row's).
fn best_lambda(
    key: &[f32],
    centre: &[f32],
    s: &[f32],
    ss: f32,
    k: f32,
    rows: &[f32],
) -> (f32, f32) {
    let u: Vec<f32> = key.iter().zip(centre).map(|(a, b)| a - b).collect();
    let uu = u.iter().map(|v| v * v).sum::<f32>().max(f32::MIN_POSITIVE);
    let parts: Vec<(f32, f32)> = rows
        .chunks_exact(key.len())
        .map(|x| {
            let (mut a, mut b) = (0.0f32, 0.0f32);
            for ((xi, ci), (ui, si)) in x.iter().zip(centre).zip(u.iter().zip(s)) {
                a += (xi - ci) * ui;
                b += (xi - ci) * si;
            }
            (a / uu, b / ss.max(f32::MIN_POSITIVE) - k)
        })
        .collect();
    let margin = |l: f32| {
        parts
            .iter()
            .map(|(a, b)| (a + l * b - 1.0).abs())
            .fold(f32::INFINITY, f32::min)
    };
    [0.0f32, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
        .into_iter()
        .map(|l| (l, margin(l)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((0.0, 0.0))
}

fn mean_row(rows: &[f32], d: usize) -> Vec<f32> {
    let n = (rows.len() / d).max(1);
    let mut m = vec![0.0f32; d];
    for r in rows.chunks_exact(d) {
        m.iter_mut().zip(r).for_each(|(a, b)| *a += b / n as f32);
    }
    m
}

/// The model's f32 copy of the layers from `first` on, shared by every connection of the
/// database (`SharedModel::dense_tail`).
fn dense_tail(cx: &mut Cx<'_>, first: usize) -> Result<Arc<DenseTail>> {
    let exec = cx.executor()?;
    let shared = cx.bound()?.shared.clone();
    let base: Arc<dyn lql_storage::OperandSource> = shared.model.clone();
    shared
        .dense_tail(first, || {
            Ok(DenseTail::new(base.as_ref(), exec.plan(), first)?)
        })
        .map_err(|e| {
            e.with_help(
                "INSERT … AT LAYER n writes the last-token feature alone, without the subject write",
            )
        })
}
