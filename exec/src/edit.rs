//! Knowledge edits computed on the model: the added gated FFN feature behind
//! `INSERT INTO edges` (docs/editing.md has the method and the measurements).
//!
//! ```text
//!  key   k = normed FFN input at layer L, at the last token of the edit prompt
//!  centre c = mean of the same with the entity replaced by stand-ins ("it", "this", …)
//!          and by other entities of the relation; over reference text when the prompt
//!          does not name the entity
//!  gate  pre(x) = β·(û·(x − c)/‖k − c‖ − θ)      û = (k − c)/‖k − c‖   (1 at the key)
//!  up    1/act(β(1 − θ))                          (activation 1 at the key)
//!  down  m · γ⊙(E[target] − E[old]) / ‖…‖         (towards the target's head row)
//!  hat   the feature three times, opening at θ, 1 and 2 − θ, weighted +1, −2, +1:
//!        zero again for rows scoring past 2 − θ
//! ```
//!
//! `m` is found by measurement: the smallest strength (doubling, then bisection) at which
//! the edit prompt gives the target at least the asked probability, with every edit already
//! in force applied.

use lql_storage::overlay::AddedFeature;
use lql_storage::surface::Activation;

use crate::error::{ExecError, Result};
use crate::forward::PassInput;
use crate::observer::{LayerRecord, Observer};
use crate::plan::StageRange;
use crate::session::{Executor, Logits};

/// How sharp the feature's gate is (β) and where it opens (θ, in units of the key's
/// centred length).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GateShape {
    pub beta: f32,
    pub theta: f32,
}

impl Default for GateShape {
    fn default() -> Self {
        GateShape {
            beta: 100.0,
            theta: 0.85,
        }
    }
}

/// Captures one of a layer's records (`pick`: the normed FFN input, the residual after
/// it, …) at every position.
struct Capture {
    layer: usize,
    pick: for<'a> fn(&LayerRecord<'a>) -> &'a [f32],
    rows: Vec<f32>,
}

impl Capture {
    /// `pick` of `layer` over every position of `ids`, `[n × hidden]`.
    fn run(
        exec: &Executor,
        ids: &[u32],
        layer: usize,
        pick: for<'a> fn(&LayerRecord<'a>) -> &'a [f32],
    ) -> Result<Vec<f32>> {
        let mut o = Capture {
            layer,
            pick,
            rows: Vec::new(),
        };
        exec.observe_layers(ids, layer, &mut o)?;
        Ok(o.rows)
    }
}

impl Observer for Capture {
    fn on_layer(&mut self, r: &LayerRecord<'_>) {
        if r.layer == self.layer {
            self.rows = (self.pick)(r).to_vec();
        }
    }
}

/// The prompt of an edit at one layer, run once up to that layer: the strength search
/// changes only the layer's added features, so each of its trials runs the layers from
/// there on, from the hidden states before them (a pipeline stage's pass, bit-identical to
/// the whole pass), instead of the whole model.
pub struct PromptFromLayer {
    layer: usize,
    /// The residual stream before `layer` at every position, `[n × hidden]`; empty when
    /// the layer is the first, or the executor runs on a device (then trials run whole).
    hidden: Vec<f32>,
    ids: Vec<u32>,
}

impl PromptFromLayer {
    pub fn new(exec: &Executor, ids: &[u32], layer: usize) -> Result<PromptFromLayer> {
        let mut hidden = Vec::new();
        if layer > 0 && exec.device().is_none() {
            hidden = Capture::run(exec, ids, layer - 1, |r| r.residual)?;
        }
        Ok(PromptFromLayer {
            layer,
            hidden,
            ids: ids.to_vec(),
        })
    }

    /// The logits after the prompt on `exec`'s backend over `source` (a state that differs
    /// from the one the prompt was run on only at `layer` and above).
    pub fn logits(
        &self,
        exec: &Executor,
        source: std::sync::Arc<dyn lql_storage::OperandSource>,
    ) -> Result<Logits> {
        if self.hidden.is_empty() {
            return exec.with_source(source)?.session().prefill(&self.ids);
        }
        let n_layers = exec.surface().n_layers;
        let stage = StageRange {
            first: self.layer,
            last: n_layers - 1,
            input: false,
            output: true,
        };
        exec.with_stage_source(source, stage)?
            .session()
            .stage_logits(PassInput::Hidden(&self.hidden))
    }
}

/// The residual stream after `layer` at every position of `ids`, `[n × hidden]`.
pub fn residuals(exec: &Executor, ids: &[u32], layer: usize) -> Result<Vec<f32>> {
    Capture::run(exec, ids, layer, |r| r.residual)
}

/// The normed FFN inputs of `layer` at every position of `ids`, `[n × hidden]`.
pub fn ffn_inputs(exec: &Executor, ids: &[u32], layer: usize) -> Result<Vec<f32>> {
    Capture::run(exec, ids, layer, |r| r.ffn_input)
}

/// The mean normed FFN input of `layer` over reference texts, at the key's position: early
/// positions (1–3) have residuals of their own kind (every token there looks alike), so the
/// centre of a key at position p < 4 is the mean of the texts' rows at p; later keys are
/// centred on the mean of every row from position 4 on. Position 0 (the attention sink)
/// is never used.
pub fn centre(exec: &Executor, texts: &[Vec<u32>], layer: usize, pos: usize) -> Result<Vec<f32>> {
    let d = exec.surface().hidden;
    let mut sum = vec![0.0f64; d];
    let mut count = 0usize;
    for ids in texts {
        let rows = ffn_inputs(exec, ids, layer)?;
        for (p, r) in rows.chunks_exact(d).enumerate() {
            let take = if pos < 4 { p == pos.max(1) } else { p >= 4 };
            if take {
                for (s, v) in sum.iter_mut().zip(r) {
                    *s += *v as f64;
                }
                count += 1;
            }
        }
    }
    if count == 0 {
        return Err(ExecError::InvalidOption(
            "no reference positions to centre the key on".into(),
        ));
    }
    Ok(sum.into_iter().map(|s| (s / count as f64) as f32).collect())
}

/// The score `û·(x − c)/‖k − c‖` of each row `x` (`[n × hidden]`) for a key `k` centred on
/// `c` (the key itself scores 1); `None` when the key equals the centre.
pub fn scores(key: &[f32], centre: &[f32], rows: &[f32]) -> Option<Vec<f32>> {
    let u: Vec<f32> = key.iter().zip(centre).map(|(k, c)| k - c).collect();
    let len2 = u.iter().map(|v| v * v).sum::<f32>();
    if !(len2.is_finite() && len2 > 0.0) {
        return None;
    }
    Some(
        rows.chunks_exact(key.len())
            .map(|x| {
                x.iter()
                    .zip(centre)
                    .zip(&u)
                    .map(|((x, c), u)| (x - c) * u)
                    .sum::<f32>()
                    / len2
            })
            .collect(),
    )
}

/// The highest of the rows' [`scores`]; −∞ when there are no rows.
pub fn highest_score(key: &[f32], centre: &[f32], rows: &[f32]) -> Option<f32> {
    Some(
        scores(key, centre, rows)?
            .into_iter()
            .fold(f32::NEG_INFINITY, f32::max),
    )
}

/// Where the gate of a key opens so that it stays shut on `rows` (`[n × hidden]`, residuals
/// it must not fire on): above every row's score `û·(x − c)/‖k − c‖` by `margin`, never below
/// `shape.theta` and never above `cap` (the key itself scores 1).
pub fn calibrated_theta(
    key: &[f32],
    centre: &[f32],
    rows: &[f32],
    shape: GateShape,
    margin: f32,
    cap: f32,
) -> f32 {
    match highest_score(key, centre, rows) {
        Some(highest) => (highest + margin).clamp(shape.theta, cap.max(shape.theta)),
        None => shape.theta,
    }
}

fn act(a: Activation, x: f32) -> f32 {
    let mut g = [x];
    crate::kernels::glu(a, &mut g, &[1.0]);
    g[0]
}

/// The gate and up parts of a feature keyed on `key` (centred on `centre`); the down column
/// is left zero.
pub fn keyed_feature(
    layer: usize,
    key: &[f32],
    centre: &[f32],
    shape: GateShape,
    activation: Activation,
) -> Result<AddedFeature> {
    let u: Vec<f32> = key.iter().zip(centre).map(|(k, c)| k - c).collect();
    let len = u.iter().map(|v| v * v).sum::<f32>().sqrt();
    if !(len.is_finite() && len > 0.0) {
        return Err(ExecError::InvalidOption(
            "the key equals the reference mean: nothing to key the edit on".into(),
        ));
    }
    let s = shape.beta / (len * len);
    let gate: Vec<f32> = u.iter().map(|v| v * s).collect();
    let gate_bias =
        -(gate.iter().zip(centre).map(|(g, c)| g * c).sum::<f32>()) - shape.beta * shape.theta;
    let at_key = act(activation, shape.beta * (1.0 - shape.theta));
    Ok(AddedFeature {
        layer,
        gate,
        gate_bias,
        up: vec![0.0; key.len()],
        up_bias: 1.0 / at_key,
        down: vec![0.0; key.len()],
        edge: None,
    })
}

/// A feature's gate as a hat: three features with `f`'s gate direction opening at θ,
/// θ + w and θ + 2w (w = 1 − θ, so the middle one opens at the key), their outputs
/// weighted +1, −2, +1 through the up projection. That is the second difference of the
/// activation: `f`'s response up to the key's score, falling back to zero above it, where a
/// single gate opens ever wider (rows past 2 − θ lie farther out along the key's direction
/// than the key itself: for a short key, text the calibration never saw). Scaled so that
/// the output at the key is `f`'s. The first feature keeps `f`'s edge; the other two carry
/// none and follow it ([`is_hat_companion`]).
pub fn hat(f: &AddedFeature, shape: GateShape, activation: Activation) -> [AddedFeature; 3] {
    let w = 1.0 - shape.theta;
    let bw = shape.beta * w;
    let single = act(activation, bw);
    let hat = single - 2.0 * act(activation, 0.0) + act(activation, -bw);
    let k = if hat.is_finite() && hat > 0.0 {
        single / hat
    } else {
        1.0
    };
    [(0.0f32, 1.0f32), (1.0, -2.0), (2.0, 1.0)]
        .map(|(shift, c)| shifted(f, shift * bw, c * k, shift > 0.0))
}

/// A copy of `f` whose gate opens `by` (in gate pre-activation units) later and whose
/// output is scaled by `c` through the up projection; a `companion` carries no edge.
fn shifted(f: &AddedFeature, by: f32, c: f32, companion: bool) -> AddedFeature {
    let mut g = f.clone();
    g.gate_bias = f.gate_bias - by;
    g.up.iter_mut().for_each(|v| *v *= c);
    g.up_bias = f.up_bias * c;
    if companion {
        g.edge = None;
    }
    g
}

/// A feature's gate as a step: two features with `f`'s gate direction opening at θ and
/// θ + `width`, their outputs weighted +1 and −1: the output rises from θ to its full value
/// at θ + `width` and stays there, however far past the key a row scores (where a single
/// gate grows without bound). Scaled so that the output at the key is `f`'s; the second
/// feature carries no edge.
pub fn step(
    f: &AddedFeature,
    shape: GateShape,
    width: f32,
    activation: Activation,
) -> [AddedFeature; 2] {
    let bw = shape.beta * width;
    let x = shape.beta * (1.0 - shape.theta);
    let single = act(activation, x);
    let step = single - act(activation, x - bw);
    let k = if step.is_finite() && step > 0.0 {
        single / step
    } else {
        1.0
    };
    [(0.0f32, 1.0f32), (1.0, -1.0)].map(|(shift, c)| shifted(f, shift * bw, c * k, shift > 0.0))
}

/// True when `g` is one of the two features [`hat`] adds after `primary`: no edge of its
/// own, the same gate direction.
pub fn is_hat_companion(primary: &AddedFeature, g: &AddedFeature) -> bool {
    g.edge.is_none() && g.layer == primary.layer && g.gate == primary.gate
}

/// Most rows a feature's up projection is made blind to.
pub const MAX_BLIND_ROWS: usize = 32;

/// An up projection for a feature keyed on `key` (centred on `centre`) that is `at_key` at
/// the key and 0 at each of `rows` (`[n × hidden]`: residuals the gate cannot be kept shut
/// on), so the feature's output vanishes there whatever its gate does: the key's centred
/// direction with the rows' centred directions projected out (Gram–Schmidt, at most
/// [`MAX_BLIND_ROWS`] rows). Returns `(up, up_bias)`, or `None` when the key lies (nearly)
/// in the rows' span and nothing is left to tell it apart.
pub fn blind_up(key: &[f32], centre: &[f32], rows: &[f32], at_key: f32) -> Option<(Vec<f32>, f32)> {
    let d = key.len();
    let sub =
        |x: &[f32]| -> Vec<f64> { x.iter().zip(centre).map(|(a, c)| (a - c) as f64).collect() };
    let dot = |a: &[f64], b: &[f64]| -> f64 { a.iter().zip(b).map(|(x, y)| x * y).sum() };
    let mut basis: Vec<Vec<f64>> = Vec::new();
    for r in rows.chunks_exact(d).take(MAX_BLIND_ROWS) {
        let mut v = sub(r);
        for b in &basis {
            let p = dot(&v, b);
            v.iter_mut().zip(b).for_each(|(x, y)| *x -= p * y);
        }
        let n = dot(&v, &v).sqrt();
        if n > 1e-6 {
            v.iter_mut().for_each(|x| *x /= n);
            basis.push(v);
        }
    }
    let u = sub(key);
    let mut w = u.clone();
    for b in &basis {
        let p = dot(&w, b);
        w.iter_mut().zip(b).for_each(|(x, y)| *x -= p * y);
    }
    // What is left of the key after the rows are projected out: too little, no blind up.
    let at = dot(&w, &u);
    if !(at.is_finite() && at > 0.05 * dot(&u, &u)) {
        return None;
    }
    let scale = at_key as f64 / at;
    let up: Vec<f32> = w.iter().map(|x| (x * scale) as f32).collect();
    let bias = -(up
        .iter()
        .zip(centre)
        .map(|(a, c)| (a * c) as f64)
        .sum::<f64>()) as f32;
    Some((up, bias))
}

/// The unit direction in the residual stream that raises `target`'s logit over `old`'s
/// through the final norm's weights and the head.
pub fn target_direction(exec: &Executor, target: u32, old: u32) -> Result<Vec<f32>> {
    let plan = exec.plan();
    let head = exec
        .source()
        .view(plan.head)
        .ok_or(ExecError::MissingOperand {
            operand: "output",
            layer: None,
        })?;
    let d = plan.surface.hidden;
    let row = |id: u32| -> Result<Vec<f32>> {
        let mut r = vec![0.0f32; d];
        crate::backend::encoded::decode_row(head.dtype, head.row(id as usize), &mut r)
            .map_err(ExecError::Unsupported)?;
        Ok(r)
    };
    let (t, o) = (row(target)?, row(old)?);
    let mut w: Vec<f32> = t
        .iter()
        .zip(&o)
        .zip(&plan.output_norm)
        .map(|((t, o), g)| (t - if target == old { 0.0 } else { *o }) * g)
        .collect();
    let n = w.iter().map(|v| v * v).sum::<f32>().sqrt();
    if !(n.is_finite() && n > 0.0) {
        return Err(ExecError::InvalidOption(
            "the target's head row is zero".into(),
        ));
    }
    w.iter_mut().for_each(|v| *v /= n);
    Ok(w)
}

/// Softmax probability of `id` in `logits`.
pub fn prob(l: &Logits, id: u32) -> f32 {
    let max = l.values.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = l.values.iter().map(|&x| ((x - max) as f64).exp()).sum();
    (((l.values[id as usize] - max) as f64).exp() / sum) as f32
}

/// The strength search's outcome.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Strength {
    pub magnitude: f32,
    /// The target's probability on the edit prompt at that strength.
    pub prob: f32,
    /// Forward passes the search ran.
    pub passes: usize,
}

/// Finds the smallest down magnitude (within 1/32 of the doubling step) at which `eval`
/// (the edit prompt's target probability with the feature's down column set to
/// `magnitude × direction`) reaches `aim`; stops at `max` and returns the best found.
pub fn search_strength(
    aim: f32,
    max: f32,
    mut eval: impl FnMut(f32) -> Result<f32>,
) -> Result<Strength> {
    let mut passes = 0;
    let mut lo = 0.0f32;
    let mut m = 1.0f32;
    let (mut hi, mut hi_p) = loop {
        let p = eval(m)?;
        passes += 1;
        if p >= aim {
            break (m, p);
        }
        lo = m;
        if m >= max {
            return Ok(Strength {
                magnitude: m,
                prob: p,
                passes,
            });
        }
        m = (m * 2.0).min(max);
    };
    for _ in 0..5 {
        let mid = 0.5 * (lo + hi);
        let p = eval(mid)?;
        passes += 1;
        if p >= aim {
            hi = mid;
            hi_p = p;
        } else {
            lo = mid;
        }
    }
    Ok(Strength {
        magnitude: hi,
        prob: hi_p,
        passes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn theta_rises_above_the_rows_it_must_stay_shut_on() {
        let (key, centre) = ([2.0f32, 0.0], [1.0f32, 0.0]);
        let shape = GateShape::default();
        let theta = |rows: &[f32]| calibrated_theta(&key, &centre, rows, shape, 0.05, 0.95);
        // Scores (x − c)·u/‖u‖²: 0.5 and 0.2 stay under the default θ.
        assert_eq!(theta(&[1.5, 0.0, 1.2, 3.0]), shape.theta);
        // 0.87 + 0.05 lifts θ to 0.92.
        assert!((theta(&[1.87, 5.0, 1.0, 0.0]) - 0.92).abs() < 1e-6);
        // A row scoring like the key itself caps θ at 0.95.
        assert_eq!(theta(&[2.0, 0.0]), 0.95);
        assert_eq!(theta(&[]), shape.theta);
    }

    #[test]
    fn the_hat_matches_the_single_gate_up_to_the_key_and_closes_past_it() {
        let (key, centre) = ([2.0f32, 0.0], [1.0f32, 0.0]);
        let shape = GateShape::default();
        let single = keyed_feature(0, &key, &centre, shape, Activation::Silu).unwrap();
        let hat = hat(&single, shape, Activation::Silu);
        let out = |f: &AddedFeature, s: f32| {
            let x = [1.0 + s, 0.0];
            let dot = |w: &[f32]| w.iter().zip(&x).map(|(a, b)| a * b).sum::<f32>();
            act(Activation::Silu, dot(&f.gate) + f.gate_bias) * (dot(&f.up) + f.up_bias)
        };
        let sum = |s: f32| hat.iter().map(|f| out(f, s)).sum::<f32>();
        assert!((out(&single, 1.0) - 1.0).abs() < 1e-4);
        assert!((sum(1.0) - 1.0).abs() < 1e-4, "{}", sum(1.0));
        // Below the key the hat is the single gate; shut below θ.
        assert!((sum(0.95) - out(&single, 0.95)).abs() < 1e-2);
        assert!(sum(0.8).abs() < 1e-2 && (sum(0.8) - out(&single, 0.8)).abs() < 1e-4);
        // Past the key it mirrors, then closes where the single gate opens wider.
        assert!(
            (sum(1.05) - sum(0.95)).abs() < 1e-2,
            "{} {}",
            sum(1.05),
            sum(0.95)
        );
        assert!(out(&single, 1.5) > 4.0);
        assert!(sum(1.5).abs() < 1e-3 && sum(3.0).abs() < 1e-3);
        // Only the first feature carries the edge; the others follow it.
        assert!(is_hat_companion(&hat[0], &hat[1]) && is_hat_companion(&hat[0], &hat[2]));
    }

    #[test]
    fn the_step_rises_to_the_key_and_stays_bounded_past_it() {
        let (key, centre) = ([2.0f32, 0.0], [1.0f32, 0.0]);
        let shape = GateShape::default();
        let single = keyed_feature(0, &key, &centre, shape, Activation::Silu).unwrap();
        let step = step(&single, shape, 0.05, Activation::Silu);
        let out = |f: &AddedFeature, s: f32| {
            let x = [1.0 + s, 0.0];
            let dot = |w: &[f32]| w.iter().zip(&x).map(|(a, b)| a * b).sum::<f32>();
            act(Activation::Silu, dot(&f.gate) + f.gate_bias) * (dot(&f.up) + f.up_bias)
        };
        let sum = |s: f32| step.iter().map(|f| out(f, s)).sum::<f32>();
        assert!((sum(1.0) - 1.0).abs() < 1e-4, "{}", sum(1.0));
        // Shut below θ, full from θ + 0.05 on, and no more than that far past the key.
        assert!(sum(0.8).abs() < 1e-2);
        assert!((sum(0.92) - 1.0).abs() < 0.05, "{}", sum(0.92));
        assert!((sum(3.0) - 1.0).abs() < 1e-3, "{}", sum(3.0));
        assert!(out(&single, 3.0) > 10.0);
        assert!(is_hat_companion(&step[0], &step[1]));
    }

    #[test]
    fn blind_up_is_one_at_the_key_and_zero_on_the_rows() {
        let (key, centre) = ([2.0f32, 1.0, 0.0], [0.5f32, 0.0, 0.0]);
        let rows = [1.5f32, 0.0, 1.0];
        let (up, bias) = blind_up(&key, &centre, &rows, 1.0).unwrap();
        let at = |x: &[f32]| up.iter().zip(x).map(|(a, b)| a * b).sum::<f32>() + bias;
        assert!((at(&key) - 1.0).abs() < 1e-5);
        assert!(at(&rows).abs() < 1e-5);
        // A row equal to the key leaves nothing to tell it apart.
        assert!(blind_up(&key, &centre, &key, 1.0).is_none());
    }
}
