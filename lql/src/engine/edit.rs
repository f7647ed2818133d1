//! Edits: the connection's patch stack over the bound model and the statements that change
//! it — `INSERT INTO edges` (an added gated FFN feature per edge, `lql_exec::edit`),
//! `DELETE FROM features|edges`, `UPDATE features SET gate_scale/down_scale`. The base files
//! are never written: every edit lands in the session patch, or in the patch being recorded
//! after `BEGIN PATCH` (engine/patch.rs), and the effective state is rebuilt with a new
//! version so that no statement prepared or cached against the old state is served.

use std::collections::HashMap;
use std::sync::Arc;

use lql_exec::edit::{self as ke, GateShape};
use lql_exec::Executor;
use lql_planner::{EdgeRow, InsertPlan, LogicalPlan};
use lql_storage::overlay::{Edge, Edit, EffectiveModel, FeatureScale, Patch, PatchOrigin};

mod subject;

use super::datum::Datum;
use super::{Bound, Cx};
use crate::error::{Error, Result};
use crate::rows::Rows;
use crate::value::Value;

/// The strength search stops here (in units of the normed residual direction).
const MAX_MAGNITUDE: f32 = 4096.0;
/// Text the key is centred on (the first eight; mean normed FFN input over their positions)
/// and every gate is calibrated to stay shut on (all of them, every position but the
/// first): ordinary sentences, unfinished prompts, questions, dialogue, lists, numbers, code.
const REFERENCE_TEXTS: [&str; 32] = [
    "The weather today is mild with a light breeze from the west.",
    "She opened the book and began to read the first chapter aloud.",
    "In 1990 the company moved its offices to a larger building downtown.",
    "Water boils at one hundred degrees Celsius at sea level.",
    "He asked whether the train would arrive before noon.",
    "A list of ingredients: flour, sugar, butter, eggs and milk.",
    "The committee will meet again next month to review the budget.",
    "Many people enjoy walking in the park on Sunday mornings.",
    "The quickest way to get to the airport is",
    "When I was a child, I always wanted to",
    "This laptop comes with a bigger battery and",
    "What time does the shop close on",
    "Q: How many legs does a spider have? A:",
    "\"Are you coming to dinner tonight?\" she asked. \"",
    "Step 1: Preheat the oven. Step 2:",
    "for i in range(10): print(",
    "The total came to 42 dollars and",
    "Dear Sir or Madam, I am writing to",
    "The reason the project failed was",
    "My grandmother used to tell me that",
    "The cat jumped onto the table and",
    "Scientists have discovered a new species of",
    "If you want to lose weight, you should",
    "The band played their final song and the crowd",
    "Tomorrow we are going to visit the",
    "The most popular sport in the world is",
    "I can't believe that you",
    "The instructions say to turn the knob to",
    "Our neighbours have a big dog named",
    "The first thing you notice about the city is",
    "Yesterday the president announced that",
    "The color of the sky at sunset is",
];

/// A cached last-token row and the fingerprint of the edits it was computed under.
type FingerprintedRow = (u64, Arc<[f32]>);

/// A connection's edits over its bound model.
#[derive(Default)]
pub(crate) struct Edits {
    /// Patch files applied (or saved), oldest first.
    pub applied: Vec<Patch>,
    /// Edits made outside BEGIN PATCH: the unsaved session patch.
    pub session: Vec<Edit>,
    /// `BEGIN PATCH path`: the path and the edits recorded since.
    pub open: Option<(String, Vec<Edit>)>,
    /// The effective state (None: no edit in force, the base model is read).
    pub state: Option<Arc<EffectiveModel>>,
    /// Per-layer key centres over reference text, computed on the base model.
    centres: HashMap<usize, Arc<Vec<f32>>>,
    /// Per-layer normed FFN inputs of the reference texts (every position but the first),
    /// on the base model: what a gate is calibrated to stay shut on.
    reference_rows: HashMap<usize, Arc<Vec<f32>>>,
    /// Last-token normed FFN inputs by (layer, prompt), with the fingerprint of the edits
    /// below the layer that can reach the prompt when they were computed.
    last_rows: HashMap<(usize, String), FingerprintedRow>,
    /// Per-layer normed FFN inputs of single-token texts (the subject write's first-token
    /// keys are calibrated on them).
    first_rows: HashMap<usize, Arc<Vec<f32>>>,
}

impl Edits {
    /// The patch stack, oldest first: applied files, the session patch, the open patch.
    pub fn patches(&self) -> Vec<Patch> {
        let mut out = self.applied.clone();
        if !self.session.is_empty() {
            out.push(Patch {
                origin: PatchOrigin::Session,
                edits: self.session.clone(),
            });
        }
        if let Some((path, edits)) = &self.open {
            out.push(Patch {
                origin: PatchOrigin::Open(path.clone()),
                edits: edits.clone(),
            });
        }
        out
    }

    /// Where new edits go.
    fn target(&mut self) -> &mut Vec<Edit> {
        match &mut self.open {
            Some((_, e)) => e,
            None => &mut self.session,
        }
    }
}

/// Edits as a user counts them: an edge once, with the features that follow it and carry
/// no edge of their own (its hat companions, [`ke::hat`], and its subject features,
/// `subject`); a feature scale once; an added feature without an edge once, with its hat
/// companions.
pub(crate) fn edit_count(edits: &[Edit]) -> usize {
    edit_groups(edits).len()
}

/// The edit list split into what [`edit_count`] counts as one edit each.
fn edit_groups(edits: &[Edit]) -> Vec<std::ops::Range<usize>> {
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    let mut primary: Option<&lql_storage::overlay::AddedFeature> = None;
    for (i, e) in edits.iter().enumerate() {
        let joins = match (e, primary) {
            (Edit::Add(a), Some(p)) => {
                a.edge.is_none() && (p.edge.is_some() || ke::is_hat_companion(p, a))
            }
            _ => false,
        };
        match out.last_mut() {
            Some(r) if joins => r.end = i + 1,
            _ => {
                out.push(i..i + 1);
                primary = match e {
                    Edit::Add(a) => Some(a),
                    _ => None,
                };
            }
        }
    }
    out
}

/// Rebuilds the effective state after the patch stack changed: a new version, the
/// executor rebuilt on next use, prepared statements re-bound.
pub(crate) fn rebuild(cx: &mut Cx<'_>) -> Result<()> {
    cx.engine.version += 1;
    let b = bound_mut(cx)?;
    let patches = b.edits.patches();
    b.executor = None;
    b.edits.state = if patches.iter().all(|p| p.edits.is_empty()) {
        None
    } else {
        Some(Arc::new(
            EffectiveModel::new(b.model().clone(), patches).map_err(Error::semantic)?,
        ))
    };
    // The planner's feature domain follows the widest layer of the state (added features).
    let base = b.model().clone();
    b.facts.ffn = match &b.edits.state {
        Some(st) => super::planner_catalog::widest(base.surface.ffn, st.layers().values()),
        None => super::planner_catalog::widest(base.surface.ffn, base.overlays.values()),
    };
    Ok(())
}

pub(crate) fn bound_mut<'a>(cx: &'a mut Cx<'_>) -> Result<&'a mut Bound> {
    cx.bound()?;
    cx.engine
        .bound
        .as_mut()
        .ok_or_else(|| Error::internal("bound model vanished"))
}

pub(crate) fn status(statement: &str, edits: usize, detail: String) -> Datum {
    let mut rows = Rows::new(super::result_columns(&LogicalPlan::SavePatch {
        path: None,
    }));
    rows.push(vec![
        Value::from(statement),
        Value::from(edits),
        Value::from(detail),
    ]);
    Datum::Rows(rows)
}

/// The prompt an edge is keyed on: the one given, or one built from entity and relation.
pub(crate) fn edge_prompt(row: &EdgeRow) -> (String, bool) {
    match &row.prompt {
        Some(p) => (p.clone(), false),
        None => (format!("The {} of {} is", row.relation, row.entity), true),
    }
}

/// The target's continuation text: a leading space is implied when the prompt does not end
/// in whitespace and the target does not begin with one.
pub(crate) fn continuation(prompt: &str, target: &str) -> String {
    if prompt.ends_with(char::is_whitespace) || target.starts_with(char::is_whitespace) {
        target.to_string()
    } else {
        format!(" {target}")
    }
}

/// `OverlayInsert`: one added feature per row, at the layers the binder decided. Every row
/// is checked before any is written, and a row that fails part-way takes the statement's
/// earlier rows with it: an INSERT applies all its rows or none.
pub(crate) fn insert(cx: &mut Cx<'_>, plan: &InsertPlan) -> Result<Datum> {
    if let Some(file) = &plan.file {
        let rows = super::facts::read(file, None)?
            .iter()
            .map(super::facts::Fact::edge_row)
            .collect();
        return insert(
            cx,
            &InsertPlan {
                rows,
                file: None,
                ..plan.clone()
            },
        );
    }
    refuse_long_text(&plan.rows)?;
    let batch = plan.rows.len() > 1;
    let tokens = check_rows(cx, &plan.rows, batch, |n, row| {
        if batch {
            format!("row {} ({} → {})", n + 1, row.entity, row.target)
        } else {
            format!("the edge {} → {}", row.entity, row.target)
        }
    })?;
    all_or_nothing(cx, |cx| insert_rows(cx, plan, &tokens))
}

/// `OverlayInsert` over a query (INSERT … SELECT): the query's rows as edges, each value
/// non-empty text (a NULL prompt: the row's default prompt), then inserted as VALUES rows.
pub(crate) fn insert_queried(cx: &mut Cx<'_>, plan: &InsertPlan, query: Datum) -> Result<Datum> {
    let (Datum::Rows(rows), Some(q)) = (&query, &plan.query) else {
        return Err(super::interp::wrong_input("OverlayInsert", &query));
    };
    if rows.rows.is_empty() {
        return Err(
            Error::semantic("INSERT INTO edges … SELECT: the query gave no rows")
                .with_help("check its WHERE clause: an INSERT with nothing to write is refused"),
        );
    }
    let names = rows.column_names();
    let text = |n: usize, row: &[Value], k: usize| -> Result<Option<String>> {
        match row.get(k) {
            Some(Value::Null) | None => Ok(None),
            Some(Value::Text(s)) if !s.trim().is_empty() => Ok(Some(s.clone())),
            Some(Value::Text(_)) => Err(Error::semantic(format!(
                "INSERT INTO edges … SELECT: row {}: {} is empty",
                n + 1,
                names.get(k).copied().unwrap_or("?")
            ))),
            Some(v) => Err(Error::semantic(format!(
                "INSERT INTO edges … SELECT: row {}: {} is {v}, not text",
                n + 1,
                names.get(k).copied().unwrap_or("?")
            ))),
        }
    };
    let need = |n: usize, row: &[Value], k: usize| -> Result<String> {
        text(n, row, k)?.ok_or_else(|| {
            Error::semantic(format!(
                "INSERT INTO edges … SELECT: row {}: {} is NULL",
                n + 1,
                names.get(k).copied().unwrap_or("?")
            ))
        })
    };
    let edges = rows
        .rows
        .iter()
        .enumerate()
        .map(|(n, row)| {
            Ok(EdgeRow {
                entity: need(n, row, q.entity)?,
                relation: need(n, row, q.relation)?,
                target: need(n, row, q.target)?,
                prompt: match q.prompt {
                    Some(k) => text(n, row, k)?,
                    None => None,
                },
            })
        })
        .collect::<Result<Vec<_>>>()?;
    insert(
        cx,
        &InsertPlan {
            rows: edges,
            query: None,
            ..plan.clone()
        },
    )
}

/// Runs `work`, which adds edits; when it fails, every edit it added is taken back.
pub(crate) fn all_or_nothing<T>(
    cx: &mut Cx<'_>,
    work: impl FnOnce(&mut Cx<'_>) -> Result<T>,
) -> Result<T> {
    let mark = bound_mut(cx)?.edits.target().len();
    let done = work(cx);
    if done.is_err() {
        let edits = bound_mut(cx)?.edits.target();
        if edits.len() > mark {
            edits.truncate(mark);
            rebuild(cx)?;
        }
    }
    done
}

/// Writes the rows of `plan`, whose prompts' tokens and targets' first tokens are
/// `tokens` ([`check_rows`]).
fn insert_rows(cx: &mut Cx<'_>, plan: &InsertPlan, tokens: &[(Vec<u32>, u32)]) -> Result<Datum> {
    let layer = plan.settings.layer;
    let aim = plan.settings.alpha as f32;
    let subject = plan.settings.subject_layer;
    let n = plan.rows.len();
    let prompts: Vec<(String, bool)> = plan.rows.iter().map(edge_prompt).collect();
    let mut strengths: Vec<Option<ke::Strength>> = vec![None; n];
    let mut built = 0usize;
    let joint = match subject {
        Some(_) => plan.settings.joint_rows,
        None => 1,
    };
    for wave in waves(&plan.rows, joint) {
        cx.check_cancel()?;
        // The wave's subject features go in first (the strength searches below must see
        // them), their values optimised together.
        let marks: Vec<Option<usize>> = match subject {
            Some(sl) => {
                let rows: Vec<(&EdgeRow, &str, u32)> = wave
                    .iter()
                    .map(|&i| (&plan.rows[i], prompts[i].0.as_str(), tokens[i].1))
                    .collect();
                subject::write_each(cx, plan, &rows, sl)?
            }
            None => vec![None; wave.len()],
        };
        // Each edge's own feature goes before its subject features (`edit_groups`): last
        // row first, so that the earlier rows' positions stay where they were.
        for (k, &i) in wave.iter().enumerate().rev() {
            cx.check_cancel()?;
            let mark = match marks[k] {
                Some(at) => at,
                None => bound_mut(cx)?.edits.target().len(),
            };
            let (ids, target) = &tokens[i];
            let row = &plan.rows[i];
            strengths[i] = Some(edge_feature(
                cx,
                plan,
                row,
                &prompts[i].0,
                ids,
                *target,
                layer,
                aim,
                mark,
            )?);
            built += 1;
            if n > 1 {
                crate::progress::report_items(
                    cx.engine.progress.as_ref(),
                    "INSERT",
                    built as u64,
                    n as u64,
                    built == n,
                );
            }
        }
    }
    let mut notes = Vec::new();
    for ((row, (prompt, made)), p) in plan.rows.iter().zip(&prompts).zip(&strengths) {
        let p = p
            .as_ref()
            .ok_or_else(|| Error::internal("a row of the INSERT was not written"))?;
        if *made {
            notes.push(format!("built the prompt {prompt:?}"));
        }
        let at = match (subject, prompt.contains(&row.entity)) {
            (Some(sl), true) => format!("layers {sl} (subject) and {layer}"),
            _ => format!("layer {layer}"),
        };
        notes.push(format!(
            "{} → {}: {at}, P={:.2} at strength {:.1}",
            row.entity, row.target, p.prob, p.magnitude
        ));
    }
    let detail = if notes.len() <= 4 {
        notes.join("; ")
    } else {
        match subject {
            Some(sl) => format!("{built} edges at layers {sl} (subject) and {layer}"),
            None => format!("{built} edges at layer {layer}"),
        }
    };
    Ok(status("INSERT", built, detail))
}

/// The rows of an INSERT in the groups whose subject values are optimised together:
/// consecutive rows of distinct entities, at most `joint` — a row whose entity is already in
/// the group starts the next, so that its value is optimised with the earlier edge of its
/// entity in force, as its own INSERT would be.
fn waves(rows: &[EdgeRow], joint: usize) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let fits = out
            .last()
            .is_some_and(|w| w.len() < joint && w.iter().all(|&j| rows[j].entity != row.entity));
        match out.last_mut() {
            Some(w) if fits => w.push(i),
            _ => out.push(vec![i]),
        }
    }
    out
}

/// Refuses, before anything is written, a row that cannot be edited, naming it as `name`
/// does: a target of only whitespace or one that tokenizes to nothing, a prompt that
/// tokenizes to nothing, and — in a batch — a prompt that does not name its entity (a
/// batch's rows are told apart by their entities: each row's key is contrasted with the
/// prompt under the other rows' entities). Returns each row's prompt tokens and the first
/// token of its target (the one the edit acts on).
pub(crate) fn check_rows(
    cx: &mut Cx<'_>,
    rows: &[EdgeRow],
    batch: bool,
    name: impl Fn(usize, &EdgeRow) -> String,
) -> Result<Vec<(Vec<u32>, u32)>> {
    let tok = cx.tokenizer()?;
    let mut out = Vec::with_capacity(rows.len());
    for (n, row) in rows.iter().enumerate() {
        let (prompt, _) = edge_prompt(row);
        let refuse = |why: String| {
            Err(Error::semantic(format!(
                "{}: {why}; nothing was inserted",
                name(n, row)
            )))
        };
        if row.target.trim().is_empty() {
            return refuse("the target is empty".into());
        }
        let ids = tok.encode(&prompt, true)?;
        if ids.is_empty() {
            return refuse("the prompt tokenizes to nothing".into());
        }
        let Some(&target) = tok
            .encode(&continuation(&prompt, &row.target), false)?
            .first()
        else {
            return refuse(format!("the target {:?} tokenizes to nothing", row.target));
        };
        if batch && !prompt.contains(&row.entity) {
            return refuse(format!(
                "the prompt {prompt:?} does not name the entity {:?}",
                row.entity
            ));
        }
        out.push((ids, target));
    }
    Ok(out)
}

/// An edge's texts are kept whole in a patch file, whose fields hold at most
/// `MAX_TEXT` bytes each: a longer one is refused here, before any work.
pub(crate) fn refuse_long_text(rows: &[EdgeRow]) -> Result<()> {
    use lql_storage::overlay::patch::MAX_TEXT;
    for row in rows {
        let (prompt, _) = edge_prompt(row);
        for (field, text) in [
            ("entity", row.entity.as_str()),
            ("relation", row.relation.as_str()),
            ("target", row.target.as_str()),
            ("prompt", prompt.as_str()),
        ] {
            if text.len() > MAX_TEXT {
                return Err(Error::semantic(format!(
                    "the edge's {field} is {} bytes; a patch keeps at most {MAX_TEXT} bytes of each text",
                    text.len()
                )));
            }
        }
    }
    Ok(())
}

/// The edge's own feature at `layer` — the last-token hat, its strength measured so that the
/// prompt gives the target with probability `aim` — inserted into the edit list at `mark`.
#[allow(clippy::too_many_arguments)]
fn edge_feature(
    cx: &mut Cx<'_>,
    plan: &InsertPlan,
    row: &EdgeRow,
    prompt: &str,
    ids: &[u32],
    target: u32,
    layer: usize,
    aim: f32,
    mark: usize,
) -> Result<ke::Strength> {
    let exec = cx.executor()?;
    // The prompt run once up to the edit's layer: the current prediction and every trial
    // of the strength search run only the layers from there on.
    let from_layer = ke::PromptFromLayer::new(&exec, ids, layer)?;
    // The current prediction: the token the edit must overtake.
    let now = from_layer.logits(&exec, exec.source().clone())?;
    let top = now.top(2);
    let old = if top[0].token_id == target {
        top[1].token_id
    } else {
        top[0].token_id
    };
    let state = cx.bound()?.edits.state.clone();
    let key = last_rows(cx, &exec, &[prompt.to_string()], layer)?;
    let others = other_prompts(plan, state.as_deref(), row);
    let mut shut_rows = last_rows(cx, &exec, &others, layer)?;
    shut_rows.extend_from_slice(&reference_rows(cx, layer)?);
    let (centre, shape) = if prompt.contains(&row.entity) {
        let entities = other_entities(plan, state.as_deref(), row);
        let contrast = contrast_rows(cx, &exec, prompt, &row.entity, &entities, layer)?;
        shut_rows.extend_from_slice(&contrast);
        best_centre(&key, &contrast, &shut_rows)
    } else {
        let c = centre(cx, layer)?;
        let shape = calibrated_shape(&key, &c, &shut_rows);
        (c.to_vec(), shape)
    };
    let mut feature = ke::keyed_feature(layer, &key, &centre, shape, exec.surface().activation)?;
    let blind = rows_at_or_above(&key, &centre, &shut_rows, shape.theta - GATE_MARGIN);
    if shape.theta >= GATE_CAP && !blind.is_empty() {
        // θ is capped and some rows still score near it: make the output blind to them.
        if let Some((up, bias)) = ke::blind_up(&key, &centre, &blind, feature.up_bias) {
            feature.up = up;
            feature.up_bias = bias;
        }
    }
    feature.edge = Some(Edge {
        entity: row.entity.clone(),
        relation: row.relation.clone(),
        target: row.target.clone(),
        prompt: prompt.to_string(),
    });
    let dir = ke::target_direction(&exec, target, old)?;
    let b = cx.bound()?;
    let base = b.model().clone();
    let patches = b.edits.patches();
    let activation = exec.surface().activation;
    // The feature as a hat (three features): it opens from θ up to the key and closes
    // again past it (docs/editing.md).
    let features = |m: f32| -> Vec<Edit> {
        let mut f = feature.clone();
        f.down = dir.iter().map(|v| v * m).collect();
        ke::hat(&f, shape, activation)
            .into_iter()
            .map(Edit::Add)
            .collect()
    };
    let trial = |m: f32| -> Result<EffectiveModel> {
        let mut ps = patches.clone();
        ps.push(Patch {
            origin: PatchOrigin::Session,
            edits: features(m),
        });
        EffectiveModel::new(base.clone(), ps).map_err(Error::semantic)
    };
    let eval = |m: f32| -> lql_exec::Result<f32> {
        let state = trial(m).map_err(|e| lql_exec::ExecError::InvalidOption(e.to_string()))?;
        Ok(ke::prob(
            &from_layer.logits(&exec, Arc::new(state))?,
            target,
        ))
    };
    let s = ke::search_strength(aim, MAX_MAGNITUDE, eval)?;
    let made = features(s.magnitude);
    bound_mut(cx)?.edits.target().splice(mark..mark, made);
    rebuild(cx)?;
    Ok(s)
}

/// Stand-ins for the entity: the mean last-token key of the prompt with the entity replaced
/// by each is the part of the key the template alone explains.
const STAND_INS: [&str; 6] = [
    "it",
    "this",
    "something",
    "the place",
    "that one",
    "someone",
];

/// At most this many other entities of the same relation join the stand-ins.
const MAX_CONTRAST_ENTITIES: usize = 48;

/// The normed FFN inputs of `layer` at the last token of `prompt` with the entity replaced
/// by each stand-in, then by each of `others` (other entities of the same relation: the rest
/// of the INSERT and the edges in force), `[prompts × hidden]`: the key is centred on a
/// mean of them, so that what it keeps is what this entity has and they lack, and the gate
/// must stay shut on each.
fn contrast_rows(
    cx: &mut Cx<'_>,
    exec: &Executor,
    prompt: &str,
    entity: &str,
    others: &[String],
    layer: usize,
) -> Result<Vec<f32>> {
    let prompts: Vec<String> = STAND_INS
        .iter()
        .copied()
        .chain(others.iter().map(String::as_str))
        .map(|s| prompt.replacen(entity, s, 1))
        .collect();
    last_rows(cx, exec, &prompts, layer)
}

/// The contrast rows a key is centred on, as candidates: the stand-ins and the first
/// [`CENTRE_ENTITIES`] other entities, or every contrast row.
const CENTRE_ENTITIES: usize = 8;

/// Centres the key on each candidate mean of the contrast rows (the stand-ins and a few
/// other entities, or all of them) and keeps the one whose gate separates the key best
/// from the rows it must stay shut on (the lowest highest score), with θ calibrated on
/// those rows. A centre over many entities of the relation isolates this entity from its
/// neighbours but, for an entity close to the relation's average, leaves a short key that
/// unrelated text can score high on; the measurement picks per edit (docs/editing.md).
fn best_centre(key: &[f32], contrast: &[f32], shut: &[f32]) -> (Vec<f32>, GateShape) {
    let d = key.len();
    let n = contrast.len() / d;
    let mean = |m: usize| {
        let mut c = vec![0.0f32; d];
        for r in contrast[..m * d].chunks_exact(d) {
            for (a, b) in c.iter_mut().zip(r) {
                *a += b / m as f32;
            }
        }
        c
    };
    // A centre equal to the key scores nothing (∞): it is kept only when both are, and
    // `keyed_feature` then refuses the edit by name.
    let separation = |c: &Vec<f32>| ke::highest_score(key, c, shut).unwrap_or(f32::INFINITY);
    let c = [(STAND_INS.len() + CENTRE_ENTITIES).min(n), n]
        .map(mean)
        .into_iter()
        .min_by(|a, b| separation(a).total_cmp(&separation(b)))
        .unwrap_or_default();
    let shape = calibrated_shape(key, &c, shut);
    (c, shape)
}

/// The normed FFN inputs of `layer` at the last token of each of `prompts`, on the current
/// state, `[prompts × hidden]`. Cached per binding by prompt, valid while the edits below
/// `layer` that can reach the prompt are unchanged ([`Below`]): the keys, contrast rows and
/// calibration rows of one relation's edges are mostly the same prompts (a relation's
/// template with its entities).
fn last_rows(
    cx: &mut Cx<'_>,
    exec: &Executor,
    prompts: &[String],
    layer: usize,
) -> Result<Vec<f32>> {
    let tok = cx.tokenizer()?;
    let d = exec.surface().hidden;
    let below = Below::of(&cx.bound()?.edits.patches(), layer);
    let mut out = Vec::with_capacity(prompts.len() * d);
    for p in prompts {
        let sig = below.for_prompt(p);
        let key = (layer, p.clone());
        let cached = cx
            .bound()?
            .edits
            .last_rows
            .get(&key)
            .filter(|(s, _)| *s == sig)
            .map(|(_, r)| r.clone());
        let row = match cached {
            Some(r) => r,
            None => {
                let ids = tok.encode(p, true)?;
                if ids.is_empty() {
                    return Err(Error::semantic(format!("{p:?} tokenizes to nothing")));
                }
                let rows = ke::ffn_inputs(exec, &ids, layer)?;
                let r: Arc<[f32]> = rows[rows.len() - d..].into();
                let cache = &mut bound_mut(cx)?.edits.last_rows;
                if cache.len() >= MAX_CACHED_ROWS {
                    cache.clear();
                }
                cache.insert(key, (sig, r.clone()));
                r
            }
        };
        out.extend_from_slice(&row);
    }
    Ok(out)
}

/// The last-token row cache holds at most this many prompts (2.3 KB each on SmolLM2).
const MAX_CACHED_ROWS: usize = 16384;

/// Fingerprints of the edits below a layer, the only ones that change its FFN input: those
/// any prompt may meet, and per entity the subject features of its edges (features after
/// an edge's own, at another layer), whose gates open only on text naming the entity.
struct Below {
    common: u64,
    subjects: Vec<(String, u64)>,
}

impl Below {
    fn of(patches: &[Patch], layer: usize) -> Below {
        use std::hash::{DefaultHasher, Hash, Hasher};
        let mut common = DefaultHasher::new();
        let mut subjects: HashMap<String, DefaultHasher> = HashMap::new();
        for p in patches {
            for g in edit_groups(&p.edits) {
                let edge = match &p.edits[g.start] {
                    Edit::Add(a) => a.edge.as_ref().map(|e| (e.entity.clone(), a.layer)),
                    Edit::Scale(_) => None,
                };
                for e in p.edits[g].iter().filter(|e| e.layer() < layer) {
                    let h = match (&edge, e) {
                        (Some((entity, l)), Edit::Add(a)) if a.layer != *l => {
                            subjects.entry(entity.clone()).or_default()
                        }
                        _ => &mut common,
                    };
                    match e {
                        Edit::Add(a) => {
                            a.layer.hash(h);
                            for v in [&a.gate, &a.up, &a.down] {
                                v.iter().for_each(|x| x.to_bits().hash(h));
                            }
                            a.gate_bias.to_bits().hash(h);
                            a.up_bias.to_bits().hash(h);
                        }
                        Edit::Scale(f) => {
                            (f.layer, f.feature).hash(h);
                            f.gate_scale.map(f32::to_bits).hash(h);
                            f.down_scale.map(f32::to_bits).hash(h);
                        }
                    }
                }
            }
        }
        let mut subjects: Vec<(String, u64)> =
            subjects.into_iter().map(|(e, h)| (e, h.finish())).collect();
        subjects.sort();
        Below {
            common: common.finish(),
            subjects,
        }
    }

    /// The fingerprint for one prompt: the common edits and the subject features of the
    /// entities it names.
    fn for_prompt(&self, prompt: &str) -> u64 {
        use std::hash::{DefaultHasher, Hash, Hasher};
        let mut h = DefaultHasher::new();
        self.common.hash(&mut h);
        for (e, s) in self
            .subjects
            .iter()
            .filter(|(e, _)| prompt.contains(e.as_str()))
        {
            (e, s).hash(&mut h);
        }
        h.finish()
    }
}

/// At most this many other edges' prompts calibrate a new gate.
const MAX_CALIBRATION_PROMPTS: usize = 512;

/// The prompts of the other edges (the INSERT's other rows, then the edges in force, most
/// recent first) whose entity differs from `row`'s: a new gate must stay shut on them.
fn other_prompts(plan: &InsertPlan, state: Option<&EffectiveModel>, row: &EdgeRow) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let rows = plan
        .rows
        .iter()
        .map(|r| (r.entity.clone(), edge_prompt(r).0));
    let edges = state
        .map(|s| {
            s.added_features()
                .into_iter()
                .rev()
                .filter_map(|(_, a, _)| a.edge.clone())
                .map(|e| (e.entity, e.prompt))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    for (e, p) in rows.chain(edges) {
        if out.len() == MAX_CALIBRATION_PROMPTS {
            break;
        }
        if e != row.entity && !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// The gate opens this far above the highest score of a residual it must stay shut on.
const GATE_MARGIN: f32 = 0.05;
/// ... but never higher than this (the key itself scores 1).
const GATE_CAP: f32 = 0.95;

/// The gate shape of a new key: the default, with θ raised where needed to stay shut on
/// `shut` (the reference texts at every position, the contrast prompts' and the other
/// edges' last tokens).
fn calibrated_shape(key: &[f32], centre: &[f32], shut: &[f32]) -> GateShape {
    let shape = GateShape::default();
    let theta = ke::calibrated_theta(key, centre, shut, shape, GATE_MARGIN, GATE_CAP);
    GateShape { theta, ..shape }
}

/// The rows of `rows` scoring at least `floor` against the key (`û·(x − c)/‖k − c‖`),
/// highest first, at most [`ke::MAX_BLIND_ROWS`].
fn rows_at_or_above(key: &[f32], centre: &[f32], rows: &[f32], floor: f32) -> Vec<f32> {
    let Some(scores) = ke::scores(key, centre, rows) else {
        return Vec::new();
    };
    let mut scored: Vec<(f32, &[f32])> = scores
        .into_iter()
        .zip(rows.chunks_exact(key.len()))
        .filter(|(s, _)| *s >= floor)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    scored
        .into_iter()
        .take(ke::MAX_BLIND_ROWS)
        .flat_map(|(_, r)| r.iter().copied())
        .collect()
}

/// The reference texts' normed FFN inputs of `layer` (positions 1 on, base model),
/// computed once per binding.
fn reference_rows(cx: &mut Cx<'_>, layer: usize) -> Result<Arc<Vec<f32>>> {
    if let Some(r) = cx.bound()?.edits.reference_rows.get(&layer) {
        return Ok(r.clone());
    }
    let tok = cx.tokenizer()?;
    let base_exec = base_executor(cx)?;
    let d = base_exec.surface().hidden;
    let mut rows = Vec::new();
    for t in REFERENCE_TEXTS {
        let ids = tok.encode(t, true)?;
        let r = ke::ffn_inputs(&base_exec, &ids, layer)?;
        rows.extend_from_slice(r.get(d..).unwrap_or_default());
    }
    let rows = Arc::new(rows);
    bound_mut(cx)?
        .edits
        .reference_rows
        .insert(layer, rows.clone());
    Ok(rows)
}

/// Up to [`MAX_CONTRAST_ENTITIES`] other entities of `row`'s relation: the INSERT's other rows,
/// then the edges in force.
fn other_entities(plan: &InsertPlan, state: Option<&EffectiveModel>, row: &EdgeRow) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let edges = state
        .map(|s| {
            s.added_features()
                .into_iter()
                .filter_map(|(_, a, _)| a.edge.clone())
                .map(|e| (e.entity, e.relation))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let rows = plan
        .rows
        .iter()
        .map(|r| (r.entity.clone(), r.relation.clone()));
    for (e, r) in rows.chain(edges) {
        if out.len() == MAX_CONTRAST_ENTITIES {
            break;
        }
        if r == row.relation && e != row.entity && !out.contains(&e) {
            out.push(e);
        }
    }
    out
}

/// The bound model's executor over the base model (no edits): reference residuals are
/// computed there, so they do not depend on the edits in force.
fn base_executor(cx: &mut Cx<'_>) -> Result<Executor> {
    let exec = cx.executor()?;
    let base: Arc<dyn lql_storage::OperandSource> = cx.bound()?.model().clone();
    Ok(exec.with_source(base)?)
}

/// The reference texts the centre is the mean of (the rest only calibrate gates), kept
/// as before so that keys centred on reference text do not move.
const CENTRE_TEXTS: usize = 8;

/// The key centre of `layer` when the prompt does not name the entity: the mean normed FFN
/// input over reference text (on the base model), computed once per binding.
fn centre(cx: &mut Cx<'_>, layer: usize) -> Result<Arc<Vec<f32>>> {
    if let Some(c) = cx.bound()?.edits.centres.get(&layer) {
        return Ok(c.clone());
    }
    let tok = cx.tokenizer()?;
    let base_exec = base_executor(cx)?;
    let texts: Vec<Vec<u32>> = REFERENCE_TEXTS[..CENTRE_TEXTS]
        .iter()
        .map(|t| tok.encode(t, true))
        .collect::<std::result::Result<_, _>>()?;
    let c = Arc::new(ke::centre(&base_exec, &texts, layer, 4)?);
    bound_mut(cx)?.edits.centres.insert(layer, c.clone());
    Ok(c)
}

/// Scaling the features of a mixture-of-experts model is not built: the overlay scales
/// dense features, so refuse rather than edit nothing (added features, INSERT's, sit
/// beside a bank as beside a dense FFN).
pub(crate) fn refuse_banks(cx: &mut Cx<'_>, what: &str) -> Result<()> {
    if cx.model()?.surface.moe.is_some() {
        return Err(Error::not_supported_yet(&format!(
            "{what} on a mixture-of-experts model (editing features of experts)"
        )));
    }
    Ok(())
}

/// The position of column `n` among an edit input's columns (the scan's, `what`).
fn input_column(columns: &[crate::rows::Column], n: &str, what: &str) -> Result<usize> {
    columns
        .iter()
        .position(|c| c.name == n)
        .ok_or_else(|| Error::internal(format!("{what} scan lacks {n}")))
}

/// The (layer, feature) of each input row of a features scan.
fn layer_features(input: Datum) -> Result<Vec<(usize, usize)>> {
    let Datum::Table { columns, rows } = input else {
        return Err(Error::internal("edit input is not a table"));
    };
    let col = |n: &str| input_column(&columns, n, "features");
    let (li, fi) = (col("layer")?, col("feature")?);
    rows.iter()
        .map(|r| match (&r[li], &r[fi]) {
            (Value::Int(l), Value::Int(f)) if *l >= 0 && *f >= 0 => Ok((*l as usize, *f as usize)),
            _ => Err(Error::internal("features scan row without layer/feature")),
        })
        .collect()
}

/// `OverlayDelete`: features are ablated (their activation scaled by 0); edges are removed
/// from the session or recording patch.
pub(crate) fn delete(cx: &mut Cx<'_>, input: Datum, table: lql_grammar::Table) -> Result<Datum> {
    match table {
        lql_grammar::Table::Features => {
            refuse_banks(cx, "DELETE FROM features")?;
            let keys = layer_features(input)?;
            let n = keys.len();
            let target = bound_mut(cx)?.edits.target();
            for (layer, feature) in keys {
                target.push(Edit::Scale(FeatureScale {
                    layer,
                    feature,
                    gate_scale: None,
                    down_scale: Some(0.0),
                }));
            }
            rebuild(cx)?;
            Ok(status(
                "DELETE",
                n,
                format!("{n} features ablated (activation × 0)"),
            ))
        }
        lql_grammar::Table::Edges => delete_edges(cx, input),
        t => Err(Error::not_supported_yet(&format!(
            "DELETE FROM {}",
            t.name()
        ))),
    }
}

fn delete_edges(cx: &mut Cx<'_>, input: Datum) -> Result<Datum> {
    let Datum::Table { columns, rows } = input else {
        return Err(Error::internal("edit input is not a table"));
    };
    let pos = |n: &str| input_column(&columns, n, "edges");
    let (li, fi) = (pos("layer")?, pos("feature")?);
    let mut doomed: Vec<(usize, usize)> = Vec::new();
    for r in &rows {
        if let (Value::Int(l), Value::Int(f)) = (&r[li], &r[fi]) {
            doomed.push((*l as usize, *f as usize));
        }
    }
    let state = cx.bound()?.edits.state.clone();
    let Some(state) = state else {
        return Ok(status("DELETE", 0, "no edges in force".into()));
    };
    // The edges' features to drop (every patch of the stack holds them by value): the
    // feature carrying each edge and the features following it without an edge of their own.
    let victims: Vec<lql_storage::overlay::AddedFeature> = state
        .added_features()
        .into_iter()
        .filter(|(f, a, _)| doomed.contains(&(a.layer, *f)))
        .map(|(_, a, _)| a.clone())
        .collect();
    let e = &mut bound_mut(cx)?.edits;
    let mut removed = 0;
    // The session's and the recording patch's lists, then each applied file's (named: a
    // file that loses an edge becomes its next in-memory version).
    let mut lists: Vec<(Option<&mut PatchOrigin>, &mut Vec<Edit>)> = vec![(None, &mut e.session)];
    if let Some(open) = e.open.as_mut() {
        lists.push((None, &mut open.1));
    }
    for p in e.applied.iter_mut() {
        lists.push((Some(&mut p.origin), &mut p.edits));
    }
    for (origin, list) in lists {
        let groups = edit_groups(list);
        let mut keep = vec![true; list.len()];
        let mut dropped = 0;
        for g in groups {
            if matches!(&list[g.start], Edit::Add(a) if victims.contains(a)) {
                keep[g.clone()].iter_mut().for_each(|k| *k = false);
                dropped += 1;
            }
        }
        let mut i = 0;
        list.retain(|_| {
            i += 1;
            keep[i - 1]
        });
        removed += dropped;
        if let (Some(origin), true) = (origin, dropped > 0) {
            *origin = next_version(origin);
        }
    }
    rebuild(cx)?;
    Ok(status(
        "DELETE",
        removed,
        format!("{removed} edges removed"),
    ))
}

/// The origin of an applied patch after DELETE or UPDATE changed it: the file's next
/// in-memory version.
fn next_version(origin: &PatchOrigin) -> PatchOrigin {
    match origin {
        PatchOrigin::File { path, sha256 } => PatchOrigin::Edited {
            path: path.clone(),
            from_sha256: *sha256,
            version: 2,
        },
        PatchOrigin::Edited {
            path,
            from_sha256,
            version,
        } => PatchOrigin::Edited {
            path: path.clone(),
            from_sha256: *from_sha256,
            version: version + 1,
        },
        other => other.clone(),
    }
}

/// `OverlayUpdate` on edges: `UPDATE edges SET target = …, prompt = … WHERE …` rewrites each
/// matching edge — its features removed and the edge with the new values inserted, as an
/// INSERT writes it — in one step: if the new edges cannot be written, the old ones stay.
/// Like DELETE FROM edges, it works on the edges of every patch in the stack; the rewritten
/// edges go where new edits go (the recording patch, else the session's).
pub(crate) fn update_edges(
    cx: &mut Cx<'_>,
    input: Datum,
    assignments: &[(String, lql_grammar::Value)],
    settings: Option<lql_planner::EditSettings>,
) -> Result<Datum> {
    let settings =
        settings.ok_or_else(|| Error::internal("UPDATE edges reached the engine unplanned"))?;
    let Datum::Table { columns, rows } = input else {
        return Err(Error::internal("edit input is not a table"));
    };
    let pos = |n: &str| input_column(&columns, n, "edges");
    let text = |r: &[Value], n: &str| -> Result<String> { Ok(r[pos(n)?].to_string()) };
    let mut new_rows = Vec::with_capacity(rows.len());
    for r in &rows {
        let mut row = EdgeRow {
            entity: text(r, "entity")?,
            relation: text(r, "relation")?,
            target: text(r, "target")?,
            prompt: Some(text(r, "prompt")?),
        };
        for (c, v) in assignments {
            let lql_grammar::Value::String(v) = v else {
                return Err(Error::internal(format!(
                    "{c} = {v:?} reached UPDATE unchecked"
                )));
            };
            match c.as_str() {
                "entity" => row.entity = v.clone(),
                "relation" => row.relation = v.clone(),
                "target" => row.target = v.clone(),
                "prompt" => row.prompt = Some(v.clone()),
                _ => return Err(Error::internal(format!("UPDATE edges SET {c}"))),
            }
        }
        new_rows.push(row);
    }
    if new_rows.is_empty() {
        return Ok(status("UPDATE", 0, "no edge matched".into()));
    }
    let n = new_rows.len();
    // The edges' lists as they were: restored if the new edges cannot be written.
    let saved = {
        let e = &bound_mut(cx)?.edits;
        (
            e.session.clone(),
            e.open.as_ref().map(|o| o.1.clone()),
            e.applied.clone(),
        )
    };
    let done = delete_edges(cx, Datum::Table { columns, rows }).and_then(|_| {
        insert(
            cx,
            &InsertPlan {
                table: lql_grammar::Table::Edges,
                rows: new_rows,
                file: None,
                query: None,
                settings,
                confidence: None,
            },
        )
    });
    if let Err(e) = done {
        let edits = &mut bound_mut(cx)?.edits;
        edits.session = saved.0;
        if let (Some(open), Some(list)) = (edits.open.as_mut(), saved.1) {
            open.1 = list;
        }
        edits.applied = saved.2;
        rebuild(cx)?;
        return Err(e);
    }
    Ok(status("UPDATE", n, format!("{n} edges rewritten")))
}

/// `OverlayUpdate`: `UPDATE features SET gate_scale = a, down_scale = b WHERE …`.
pub(crate) fn update(
    cx: &mut Cx<'_>,
    input: Datum,
    assignments: &[(String, lql_grammar::Value)],
) -> Result<Datum> {
    refuse_banks(cx, "UPDATE")?;
    let mut gate = None;
    let mut down = None;
    // The binder checked each scale's value (a finite number within range).
    for (c, v) in assignments {
        let x = match v {
            lql_grammar::Value::Int(i) => *i as f64,
            lql_grammar::Value::Float(f) => *f,
            other => {
                return Err(Error::internal(format!(
                    "{c} = {other:?} reached UPDATE unchecked"
                )))
            }
        };
        match c.as_str() {
            "gate_scale" => gate = Some(x as f32),
            "down_scale" => down = Some(x as f32),
            _ => {
                return Err(Error::not_supported_yet(&format!(
                    "UPDATE features SET {c}"
                )))
            }
        }
    }
    let keys = layer_features(input)?;
    let n = keys.len();
    let target = bound_mut(cx)?.edits.target();
    let before = target.len();
    for (layer, feature) in keys {
        target.push(Edit::Scale(FeatureScale {
            layer,
            feature,
            gate_scale: gate,
            down_scale: down,
        }));
    }
    // A scale that composes beyond the range is refused, and the state stays as it was.
    if let Err(e) = rebuild(cx) {
        bound_mut(cx)?.edits.target().truncate(before);
        rebuild(cx)?;
        return Err(e);
    }
    Ok(status("UPDATE", n, format!("{n} features scaled")))
}

/// `SELECT … FROM edges`: the edges in force.
pub(crate) fn edges_rows(cx: &Cx<'_>) -> Result<Vec<Vec<Value>>> {
    let Some(state) = cx.bound()?.edits.state.clone() else {
        return Ok(Vec::new());
    };
    Ok(state
        .added_features()
        .into_iter()
        .filter_map(|(f, a, patch)| {
            let e = a.edge.as_ref()?;
            Some(vec![
                Value::from(e.entity.as_str()),
                Value::from(e.relation.as_str()),
                Value::from(e.target.as_str()),
                Value::from(e.prompt.as_str()),
                Value::from(a.layer),
                Value::from(f),
                Value::from(patch),
            ])
        })
        .collect())
}
