//! Activation patching: run a prompt with some of its activations replaced by another run's.
//!
//! A *clean* run records the activations at the [`Site`]s a study needs ([`record`]); a
//! *corrupted* run — another prompt of the same length, or the same prompt with Gaussian
//! noise on some positions' embeddings ([`Noise`], ROME's causal tracing) — then runs once
//! per [`Cell`] with that cell's activations restored from the clean recording
//! ([`run_patched`]). Everything happens inside the ordinary forward pass, through
//! [`Observer::at_site`]: the same block every family and every statement runs, so a patched
//! run with nothing to restore is bit-identical to a plain one, and restoring a prompt's own
//! activations changes nothing.

use std::collections::HashMap;
use std::ops::Range;

use crate::block;
use crate::error::{ExecError, Result};
use crate::forward::LogitsWanted;
use crate::observer::{Observer, Site};
use crate::sample::SplitMix64;
use crate::session::{Executor, Logits};

/// Most embedding rows read to estimate their standard deviation.
const STD_SAMPLE_ROWS: usize = 4096;

/// Gaussian noise added to some positions' layer-0 input (the embedding as the first layer
/// sees it).
#[derive(Debug, Clone, PartialEq)]
pub struct Noise {
    /// The positions noised, ascending.
    pub positions: Vec<usize>,
    /// `[positions.len() × hidden]`: what each noised row gets added.
    pub values: Vec<f32>,
}

impl Noise {
    /// Noise of standard deviation `std` on `positions` (`hidden` values each), drawn from
    /// `seed` with a Box–Muller transform over SplitMix64: the same seed gives the same
    /// noise on every machine.
    pub fn gaussian(hidden: usize, positions: &[usize], std: f32, seed: u64) -> Noise {
        let mut rng = SplitMix64::new(seed);
        let mut values = Vec::with_capacity(positions.len() * hidden);
        while values.len() < positions.len() * hidden {
            // u1 in (0, 1]: ln(u1) is finite.
            let u1 = 1.0 - rng.next_f64();
            let u2 = rng.next_f64();
            let r = (-2.0 * u1.ln()).sqrt();
            let a = 2.0 * std::f64::consts::PI * u2;
            values.push((r * a.cos()) as f32 * std);
            values.push((r * a.sin()) as f32 * std);
        }
        values.truncate(positions.len() * hidden);
        Noise {
            positions: positions.to_vec(),
            values,
        }
    }
}

/// The standard deviation of the model's embedding rows as layer 0 sees them (after the
/// family's embedding scale), over at most 4096 rows spread evenly over the vocabulary:
/// the unit of ROME's noise (it uses 3×).
pub fn embedding_std(exec: &Executor) -> Result<f32> {
    let plan = exec.plan();
    let vocab = plan.surface.vocab;
    let n = vocab.min(STD_SAMPLE_ROWS);
    if n == 0 {
        return Err(ExecError::Surface("the vocabulary is empty".into()));
    }
    let ids: Vec<u32> = (0..n).map(|i| (i * vocab / n) as u32).collect();
    let x = block::embed(exec.source().as_ref(), plan, &ids, &vec![0; n])?;
    let len = x.len() as f64;
    let mean = x.iter().map(|&v| v as f64).sum::<f64>() / len;
    let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / len;
    Ok(var.sqrt() as f32)
}

/// One place a patched run restores from the clean run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    pub layer: usize,
    pub site: Site,
    /// One position, or every position at once.
    pub position: Option<usize>,
    /// One attention head ([`Site::HeadOutputs`] only): its `head_dim` columns.
    pub head: Option<usize>,
    /// Layers restored together, centred on `layer` as ROME's window is (1: `layer` alone).
    pub window: usize,
}

impl Cell {
    /// The layers the cell restores: `window` of them around `layer` (ROME's
    /// `max(0, l − w/2) .. min(n, l + ⌈w/2⌉)`), within the model's `n_layers`.
    pub fn layers(&self, n_layers: usize) -> Range<usize> {
        let w = self.window.max(1);
        let lo = self.layer.saturating_sub(w / 2);
        let hi = (self.layer + w - w / 2).min(n_layers);
        lo..hi.max(lo)
    }
}

/// The activations of one run at the sites asked for, every layer and position.
#[derive(Debug, Clone, Default)]
pub struct Recording {
    sites: Vec<Site>,
    rows: HashMap<(Site, usize), Vec<f32>>,
}

impl Recording {
    /// The rows `[n × width]` recorded at `site` of `layer`.
    pub fn rows(&self, site: Site, layer: usize) -> Option<&[f32]> {
        self.rows.get(&(site, layer)).map(Vec::as_slice)
    }
}

/// The observer every patching run attaches: adds the noise, records, restores.
struct Intervention<'a> {
    noise: Option<&'a Noise>,
    record: Option<&'a mut Recording>,
    restore: Option<(&'a Recording, Cell)>,
    /// The layers `restore`'s cell covers.
    restore_layers: Range<usize>,
    head_dim: usize,
    first_layer: usize,
}

impl Observer for Intervention<'_> {
    fn wants_sites(&self) -> bool {
        true
    }

    fn at_site(&mut self, site: Site, layer: usize, positions: Range<usize>, rows: &mut [f32]) {
        let n = positions.len();
        if n == 0 {
            return;
        }
        let width = rows.len() / n;
        if let Some(noise) = self.noise {
            if site == Site::ResidPre && layer == self.first_layer {
                for (k, &p) in noise.positions.iter().enumerate() {
                    if positions.contains(&p) {
                        let at = (p - positions.start) * width;
                        let add = &noise.values[k * width..(k + 1) * width];
                        for (r, a) in rows[at..at + width].iter_mut().zip(add) {
                            *r += a;
                        }
                    }
                }
            }
        }
        if let Some(rec) = self.record.as_deref_mut() {
            if rec.sites.contains(&site) {
                let kept = rec.rows.entry((site, layer)).or_default();
                kept.truncate(positions.start * width);
                kept.extend_from_slice(rows);
            }
        }
        if let Some((clean, cell)) = self.restore {
            if cell.site != site || !self.restore_layers.contains(&layer) {
                return;
            }
            let Some(from) = clean.rows(site, layer) else {
                return;
            };
            let (cols, span) = match cell.head {
                Some(h) => (h * self.head_dim, self.head_dim),
                None => (0, width),
            };
            for p in positions.clone() {
                if cell.position.is_some_and(|q| q != p) {
                    continue;
                }
                let at = (p - positions.start) * width + cols;
                let src = p * width + cols;
                rows[at..at + span].copy_from_slice(&from[src..src + span]);
            }
        }
    }
}

/// Runs `ids` (a fresh continuation) with `noise` added, recording `sites` at every layer
/// and position; the last position's logits and the recording.
pub fn record(
    exec: &Executor,
    ids: &[u32],
    noise: Option<&Noise>,
    sites: &[Site],
) -> Result<(Logits, Recording)> {
    let mut rec = Recording {
        sites: sites.to_vec(),
        rows: HashMap::new(),
    };
    let logits = run(exec, ids, noise, Some(&mut rec), None)?;
    Ok((logits, rec))
}

/// Runs `ids` with `noise` added and `cell` restored from `clean` (recorded over a prompt
/// of the same length); the last position's logits.
pub fn run_patched(
    exec: &Executor,
    ids: &[u32],
    noise: Option<&Noise>,
    clean: &Recording,
    cell: Cell,
) -> Result<Logits> {
    check_cell(exec, ids.len(), clean, cell)?;
    run(exec, ids, noise, None, Some((clean, cell)))
}

/// Refuses a cell the run cannot restore: a layer the plan does not run, a position past
/// the prompt, a head that does not exist, a site the recording lacks.
fn check_cell(exec: &Executor, n: usize, clean: &Recording, cell: Cell) -> Result<()> {
    let plan = exec.plan();
    let s = &plan.surface;
    let first = plan.stage.first;
    if cell.layer < first || cell.layer >= first + plan.layers.len() {
        return Err(ExecError::InvalidOption(format!(
            "layer {} is not run by this model (layers {first}-{})",
            cell.layer,
            first + plan.layers.len() - 1
        )));
    }
    if let Some(p) = cell.position {
        if p >= n {
            return Err(ExecError::InvalidOption(format!(
                "position {p} is past the prompt ({n} tokens: positions 0-{})",
                n.saturating_sub(1)
            )));
        }
    }
    if let Some(h) = cell.head {
        if cell.site != Site::HeadOutputs {
            return Err(ExecError::InvalidOption(format!(
                "a head names columns of the attention heads' outputs, not of {}",
                cell.site.name()
            )));
        }
        if h >= s.n_heads {
            return Err(ExecError::InvalidOption(format!(
                "head {h} does not exist: the model has {} heads per layer (0-{})",
                s.n_heads,
                s.n_heads - 1
            )));
        }
    }
    if cell.window == 0 || cell.window > s.n_layers {
        return Err(ExecError::InvalidOption(format!(
            "a window of {} layers: the model has {} (1 restores one layer)",
            cell.window, s.n_layers
        )));
    }
    for layer in cell.layers(s.n_layers) {
        match clean.rows(cell.site, layer) {
            Some(r) if !r.is_empty() && r.len() % n == 0 => {}
            _ => {
                return Err(ExecError::InvalidOption(format!(
                    "the clean run has no {} at layer {layer} (a sequential block's resid_mid \
                     only; the recording must cover the prompt's {n} positions)",
                    cell.site.name(),
                )))
            }
        }
    }
    Ok(())
}

fn run(
    exec: &Executor,
    ids: &[u32],
    noise: Option<&Noise>,
    record: Option<&mut Recording>,
    restore: Option<(&Recording, Cell)>,
) -> Result<Logits> {
    let plan = exec.plan();
    if let Some(noise) = noise {
        if plan.stage.first != 0 {
            return Err(ExecError::InvalidOption(
                "noise goes on the embedding, but this binding starts at a later layer".into(),
            ));
        }
        let d = plan.surface.hidden;
        if noise.values.len() != noise.positions.len() * d {
            return Err(ExecError::InvalidOption(format!(
                "the noise holds {} values for {} positions of width {d}",
                noise.values.len(),
                noise.positions.len()
            )));
        }
        if let Some(&p) = noise.positions.iter().find(|&&p| p >= ids.len()) {
            return Err(ExecError::InvalidOption(format!(
                "noise on position {p}, past the prompt's {} tokens",
                ids.len()
            )));
        }
    }
    let restore_layers = restore.map_or(0..0, |(_, c)| c.layers(plan.surface.n_layers));
    let mut obs = Intervention {
        noise,
        record,
        restore,
        restore_layers,
        head_dim: plan.surface.head_dim,
        first_layer: plan.stage.first,
    };
    let mut logits = exec.observe(ids, LogitsWanted::Last, &mut obs)?;
    logits
        .pop()
        .ok_or_else(|| ExecError::Internal("a patched run gave no logits".into()))
}
