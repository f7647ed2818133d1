//! PATCH's operator, ActivationPatch: activation patching as rows.
//!
//! `PATCH "corrupted" FROM "clean" …` (or `PATCH "prompt" NOISE ON "subject" …`) runs the
//! clean prompt once recording the component, the corrupted prompt once, then the
//! corrupted prompt once per cell — layer × position (× head) — with that cell's
//! activation restored from the clean run, and scores every run by the metric on the last
//! position's logits. One row per cell: the clean, corrupted and patched metric and the
//! fraction recovered. `BY ATTRIBUTION` estimates every cell from the clean run, the
//! corrupted run and one backward pass instead (`lql_exec::attribution_patch`), with the
//! same columns. The runs are `lql_exec::activation_patch`'s; this module resolves the
//! statement's words (tokens, the subject's positions, the metric) and builds the rows.

use lql_exec::activation_patch::{self as ap, Cell, Noise};
use lql_exec::attribution_patch;
use lql_exec::tokenizer::Tokenizer;
use lql_exec::trace::{self, HeatCell, Heatmap};
use lql_exec::{Logits, Site};
use lql_planner::{
    LayerRange, PatchComponent, PatchCorruption, PatchMethod, PatchMetric, PatchPositions,
};
use lql_storage::surface::NormPlacement;

use super::datum::Datum;
use super::interp::{wrong_input, Cost};
use super::trace::single_token;
use super::Cx;
use crate::error::{Error, Result};
use crate::progress::report_items;
use crate::rows::Rows;
use crate::value::Value;

/// The operator's parameters, as EXPLAIN prints them.
pub(crate) struct PatchSpec<'a> {
    pub corruption: &'a PatchCorruption,
    pub layers: LayerRange,
    pub positions: PatchPositions,
    pub component: PatchComponent,
    pub metric: Option<&'a PatchMetric>,
    pub method: PatchMethod,
    pub window: usize,
}

/// A metric resolved to token ids.
enum Metric {
    LogitDiff(u32, u32),
    Logit(u32),
    Prob(u32),
}

impl Metric {
    fn score(&self, l: &Logits) -> f64 {
        let v = &l.values;
        match *self {
            Metric::LogitDiff(a, b) => v[a as usize] as f64 - v[b as usize] as f64,
            Metric::Logit(a) => v[a as usize] as f64,
            Metric::Prob(a) => {
                let max = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let sum: f64 = v.iter().map(|&x| ((x - max) as f64).exp()).sum();
                ((v[a as usize] - max) as f64).exp() / sum
            }
        }
    }
}

impl Metric {
    /// ∂metric/∂logits at `logits` (one vocabulary row).
    fn gradient(&self, logits: &[f32]) -> Vec<f32> {
        let mut g = vec![0.0f32; logits.len()];
        match *self {
            Metric::LogitDiff(a, b) => {
                g[a as usize] += 1.0;
                g[b as usize] -= 1.0;
            }
            Metric::Logit(a) => g[a as usize] = 1.0,
            Metric::Prob(a) => {
                // ∂p_a/∂z_j = p_a (δ_aj − p_j)
                let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let sum: f64 = logits.iter().map(|&x| ((x - max) as f64).exp()).sum();
                let p = |j: usize| ((logits[j] - max) as f64).exp() / sum;
                let pa = p(a as usize);
                for (j, gj) in g.iter_mut().enumerate() {
                    *gj = (-pa * p(j)) as f32;
                }
                g[a as usize] += pa as f32;
            }
        }
        g
    }
}

fn resolve_metric(tok: &Tokenizer, m: Option<&PatchMetric>, clean: &Logits) -> Result<Metric> {
    Ok(match m {
        None => Metric::Prob(clean.argmax()),
        Some(PatchMetric::LogitDiff(a, b)) => Metric::LogitDiff(
            single_token(tok, a, "METRIC")?,
            single_token(tok, b, "METRIC")?,
        ),
        Some(PatchMetric::Logit(a)) => Metric::Logit(single_token(tok, a, "METRIC")?),
        Some(PatchMetric::Prob(a)) => Metric::Prob(single_token(tok, a, "METRIC")?),
    })
}

/// The positions of the tokens that spell the first occurrence of `subject` in the
/// prompt as it decodes (a token counts when any of its bytes fall inside).
fn subject_positions(tok: &Tokenizer, ids: &[u32], subject: &str) -> Result<Vec<usize>> {
    let text = tok.decode_bytes(ids)?;
    let needle = subject.as_bytes();
    let start = text
        .windows(needle.len())
        .position(|w| w == needle)
        .ok_or_else(|| {
            Error::semantic(format!(
                "NOISE ON {subject:?}: the prompt does not contain it (it reads {:?})",
                String::from_utf8_lossy(&text)
            ))
            .with_help("name words of the prompt exactly as written, spaces and case included")
        })?;
    let end = start + needle.len();
    let mut positions = Vec::new();
    let mut from = 0usize;
    for i in 0..ids.len() {
        let to = tok.decode_bytes(&ids[..=i])?.len();
        if to > from && from < end && to > start {
            positions.push(i);
        }
        from = to;
    }
    if positions.is_empty() {
        return Err(Error::internal(format!(
            "NOISE ON {subject:?} was found but maps to no token"
        )));
    }
    Ok(positions)
}

fn site_of(c: PatchComponent) -> Site {
    match c {
        PatchComponent::ResidPre => Site::ResidPre,
        PatchComponent::ResidMid => Site::ResidMid,
        PatchComponent::AttnOut => Site::AttnOut,
        PatchComponent::MlpOut => Site::MlpOut,
        PatchComponent::Head(_) => Site::HeadOutputs,
    }
}

/// Runs the patching study and returns its rows.
pub(crate) fn activation_patch(
    cx: &mut Cx<'_>,
    inputs: Vec<Datum>,
    spec: PatchSpec<'_>,
    cost: &mut Cost,
) -> Result<Datum> {
    let mut token_lists = Vec::with_capacity(2);
    for d in inputs {
        match d {
            Datum::Tokens(ids) => token_lists.push(ids),
            other => return Err(wrong_input("ActivationPatch", &other)),
        }
    }
    let tok = cx.tokenizer()?;
    let (clean_ids, corrupt_ids, noise_on) = match (spec.corruption, token_lists.as_slice()) {
        (PatchCorruption::Prompt { .. }, [clean, corrupt]) => (clean, corrupt, None),
        (
            PatchCorruption::Noise {
                subject,
                scale,
                seed,
            },
            [ids],
        ) => (ids, ids, Some((subject.as_str(), *scale, *seed))),
        _ => {
            return Err(Error::internal(
                "ActivationPatch got the wrong number of prompts",
            ))
        }
    };
    let n = corrupt_ids.len();
    if clean_ids.len() != n {
        let texts = |ids: &[u32]| -> String {
            ids.iter()
                .map(|&i| {
                    format!(
                        "{:?}",
                        tok.token_text(i).unwrap_or_else(|| format!("<{i}>"))
                    )
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        return Err(Error::semantic(format!(
            "the clean prompt is {} tokens and the corrupted prompt {n}: patching restores \
             position by position, so both need the same count (clean: {}; corrupted: {})",
            clean_ids.len(),
            texts(clean_ids),
            texts(corrupt_ids)
        ))
        .with_help(
            "reword one prompt so the two tokenize to the same length (TOKENIZE shows them)",
        ));
    }
    let exec = cx.executor()?;
    let surface = &exec.plan().surface;
    let site = site_of(spec.component);
    if site == Site::ResidMid && surface.block.placement == NormPlacement::Parallel {
        return Err(Error::semantic(format!(
            "resid_mid does not exist in {}: its attention and FFN read the same residual \
             and add to it together",
            surface.source_architecture
        ))
        .with_help("restore attn_out or mlp_out, or resid_pre of the next layer"));
    }
    let positions: Vec<Option<usize>> = match spec.positions {
        PatchPositions::All => (0..n).map(Some).collect(),
        PatchPositions::Last => vec![Some(n - 1)],
        PatchPositions::Together => vec![None],
        PatchPositions::One(p) => {
            if p >= n as u64 {
                return Err(Error::semantic(format!(
                    "POSITION {p} is past the prompt: it has {n} tokens (positions 0-{})",
                    n - 1
                )));
            }
            vec![Some(p as usize)]
        }
    };
    let heads: Vec<Option<usize>> = match spec.component {
        PatchComponent::Head(None) => (0..surface.n_heads).map(Some).collect(),
        PatchComponent::Head(Some(h)) => {
            if h >= surface.n_heads as u64 {
                return Err(Error::semantic(format!(
                    "head {h} does not exist: the model has {} heads per layer (0-{})",
                    surface.n_heads,
                    surface.n_heads.saturating_sub(1)
                )));
            }
            vec![Some(h as usize)]
        }
        _ => vec![None],
    };
    let noise = match noise_on {
        None => None,
        Some((subject, scale, seed)) => {
            let at = subject_positions(&tok, corrupt_ids, subject)?;
            let std = ap::embedding_std(&exec)? * scale as f32;
            Some(Noise::gaussian(surface.hidden, &at, std, seed))
        }
    };

    // Attribution interpolates from the corrupted input to the clean one: it records that
    // too.
    let clean_sites = match spec.method {
        PatchMethod::Runs => vec![site],
        PatchMethod::Attribution(_) => vec![site, Site::ResidPre],
    };
    let (clean_logits, recording) = ap::record(&exec, clean_ids, None, &clean_sites)?;
    let metric = resolve_metric(&tok, spec.metric, &clean_logits)?;
    let clean = metric.score(&clean_logits);

    let window = spec.window;
    let cells: Vec<Cell> = spec
        .layers
        .iter()
        .flat_map(|layer| {
            let heads = &heads;
            positions.iter().flat_map(move |&position| {
                heads.iter().map(move |&head| Cell {
                    layer,
                    site,
                    position,
                    head,
                    window,
                })
            })
        })
        .collect();
    // Exact: the corrupted run, then one per cell. Attribution: the corrupted run with its
    // backward pass, and each cell's estimate.
    let (corrupted, estimates) = match spec.method {
        PatchMethod::Runs => {
            let (logits, _) = ap::record(&exec, corrupt_ids, noise.as_ref(), &[])?;
            (metric.score(&logits), None)
        }
        PatchMethod::Attribution(steps) => {
            let grad = |l: &[f32]| metric.gradient(l);
            let a = attribution_patch::attribute(
                &exec,
                corrupt_ids,
                noise.as_ref(),
                &recording,
                &cells,
                steps.unwrap_or(1) as usize,
                &grad,
            )?;
            (metric.score(&a.corrupt_logits), Some(a.estimates))
        }
    };
    // Every run goes through the executor, which counts its layers; the gradient passes of
    // attribution (a forward and a backward per step) do not, so they are added here.
    if let PatchMethod::Attribution(steps) = spec.method {
        cost.layers_run = 2 * steps.unwrap_or(1) as usize * surface.n_layers;
    }

    let component = match spec.component {
        PatchComponent::Head(_) => "head".to_string(),
        c => c.to_string(),
    };
    let task = "PATCH cells".to_string();
    let report = |done: usize, finished: bool| {
        report_items(
            cx.engine.progress.as_ref(),
            &task,
            done as u64,
            cells.len() as u64,
            finished,
        )
    };
    report(0, false);
    let mut rows = Rows::new(cx.result_columns());
    for (i, &cell) in cells.iter().enumerate() {
        cx.check_cancel()?;
        let patched = match &estimates {
            Some(e) => corrupted + e[i],
            None => metric.score(&ap::run_patched(
                &exec,
                corrupt_ids,
                noise.as_ref(),
                &recording,
                cell,
            )?),
        };
        let gap = clean - corrupted;
        rows.push(vec![
            Value::from(cell.layer),
            cell.position.map_or(Value::Null, Value::from),
            cell.position
                .map_or(Value::Null, |p| Value::from(tok.token_text(corrupt_ids[p]))),
            Value::from(component.as_str()),
            cell.head.map_or(Value::Null, Value::from),
            Value::from(clean),
            Value::from(corrupted),
            Value::from(patched),
            if gap != 0.0 {
                Value::from((patched - corrupted) / gap)
            } else {
                Value::Null
            },
        ]);
        report(i + 1, i + 1 == cells.len());
    }
    Ok(Datum::Rows(rows))
}

/// `SaveHeatmap "x.svg"`: PATCH's rows drawn as a heat map of `recovered` — one row per
/// layer (the first at the bottom), one column per restored position (and head) — written
/// atomically; the rows pass on unchanged.
pub(crate) fn save_heatmap(cx: &mut Cx<'_>, input: Datum, path: &str) -> Result<Datum> {
    let Datum::Rows(rows) = input else {
        return Err(wrong_input("SaveHeatmap", &input));
    };
    super::protect::refuse_overwrite(cx, path, "PATCH … SAVE", &[])?;
    let map = heatmap(&rows)?;
    trace::write_svg(std::path::Path::new(path), &map)?;
    Ok(Datum::Rows(rows))
}

fn heatmap(rows: &Rows) -> Result<Heatmap> {
    type Key = (Option<i64>, Option<i64>);
    let mut layers: Vec<i64> = Vec::new();
    let mut columns: Vec<(Key, String)> = Vec::new();
    let mut component = String::new();
    for r in rows.iter() {
        let layer: i64 = r.get("layer")?;
        let key: Key = (r.get("position")?, r.get("head")?);
        if !layers.contains(&layer) {
            layers.push(layer);
        }
        if !columns.iter().any(|(k, _)| *k == key) {
            let token: Option<String> = r.get("token")?;
            columns.push((key, token.unwrap_or_default()));
        }
        component = r.get("component")?;
    }
    let positions_vary = columns
        .iter()
        .map(|((p, _), _)| *p)
        .collect::<std::collections::BTreeSet<_>>()
        .len()
        > 1;
    let label = |((p, h), tok): &(Key, String)| -> String {
        let at = match p {
            Some(p) => format!("{p}:{tok}"),
            None => "all".to_string(),
        };
        match h {
            Some(h) if positions_vary => format!("{at}/h{h}"),
            Some(h) => format!("h{h}"),
            None => at,
        }
    };
    let mut cells = vec![
        HeatCell {
            text: String::new(),
            value: 0.0,
        };
        layers.len() * columns.len()
    ];
    for r in rows.iter() {
        let layer: i64 = r.get("layer")?;
        let key: Key = (r.get("position")?, r.get("head")?);
        let (Some(li), Some(ci)) = (
            layers.iter().position(|&l| l == layer),
            columns.iter().position(|(k, _)| *k == key),
        ) else {
            continue;
        };
        let recovered: Option<f64> = r.get("recovered")?;
        cells[li * columns.len() + ci] = match recovered {
            Some(v) => HeatCell {
                text: format!("{v:.2}"),
                value: v.clamp(-1.0, 1.0) as f32,
            },
            None => HeatCell {
                text: "—".into(),
                value: 0.0,
            },
        };
    }
    Ok(Heatmap {
        title: format!("PATCH: fraction recovered by restoring {component}"),
        row_labels: layers.iter().map(|l| format!("L{l}")).collect(),
        column_labels: columns.iter().map(label).collect(),
        cells,
    })
}
