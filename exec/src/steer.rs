//! Steering: vectors added to the residual stream leaving chosen layers, in every pass an
//! executor runs (prompt, decode step, batched step, TRACE and WALK's observed passes).
//!
//! A [`Steering`] is per executor, so per connection or per statement: the weights and the
//! overlay are untouched, and an executor without one runs exactly as before (removing a
//! steering restores every logit bit for bit). The convention is llama.cpp's control
//! vectors': the vector of layer `l` is added to every row after layer `l`'s last residual
//! add ([`crate::block::Block::run`]). Vectors come from llama.cpp control-vector files
//! ([`lql_storage::format::control_vector`]) or from prompts ([`Steering::difference`],
//! activation addition).

use lql_storage::format::control_vector::ControlVector;
use lql_storage::surface::ExecutionSurface;

use crate::error::{ExecError, Result};

/// Per layer, the vector added to the residual stream leaving it.
#[derive(Debug, Clone, PartialEq)]
pub struct Steering {
    hidden: usize,
    layers: Vec<Option<Vec<f32>>>,
    /// Where it came from, as SHOW STEERING prints it.
    pub source: String,
    /// The scale its vectors were multiplied by.
    pub scale: f32,
}

/// Refuses a vector of the wrong width or with a value that is not finite.
fn check_row(v: &[f32], hidden: usize, what: &str) -> Result<()> {
    if v.len() != hidden {
        return Err(ExecError::InvalidOption(format!(
            "{what} has {} values, but the model's residual stream is {hidden} wide",
            v.len()
        )));
    }
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        return Err(ExecError::InvalidOption(format!(
            "{what}: value {i} is {} (not finite)",
            v[i]
        )));
    }
    Ok(())
}

/// Families whose control vectors another family's model reads unchanged (same block,
/// another name): Mistral's files were made on the llama architecture.
fn same_family(hint: &str, arch: &str) -> bool {
    let norm = |s: &str| match s.to_ascii_lowercase().as_str() {
        "mistral" | "llama" => "llama".to_string(),
        other => other.to_string(),
    };
    norm(hint) == norm(arch)
}

impl Steering {
    /// No vectors yet, for a model of this surface.
    pub fn empty(surface: &ExecutionSurface, source: impl Into<String>, scale: f32) -> Steering {
        Steering {
            hidden: surface.hidden,
            layers: vec![None; surface.n_layers],
            source: source.into(),
            scale,
        }
    }

    /// A llama.cpp control vector times `scale`, its layers limited to `layers` when given.
    /// Refused: another family's vector, another width, a layer the model lacks.
    pub fn from_control_vector(
        surface: &ExecutionSurface,
        cv: &ControlVector,
        scale: f32,
        layers: Option<std::ops::RangeInclusive<usize>>,
        source: impl Into<String>,
    ) -> Result<Steering> {
        if let Some(hint) = &cv.model_hint {
            if !same_family(hint, &surface.source_architecture) {
                return Err(ExecError::InvalidOption(format!(
                    "the control vector was made for {hint:?}, and this model is {:?}",
                    surface.source_architecture
                )));
            }
        }
        let mut s = Steering::empty(surface, source, scale);
        for (&l, v) in &cv.directions {
            if l >= surface.n_layers {
                return Err(ExecError::InvalidOption(format!(
                    "the control vector steers layer {l}, and the model has layers 0-{}",
                    surface.n_layers - 1
                )));
            }
            if layers.as_ref().is_some_and(|r| !r.contains(&l)) {
                continue;
            }
            s.add(l, v, scale)?;
        }
        Ok(s)
    }

    /// [`Steering::from_control_vector`] of the control-vector file at `path` (its source).
    pub fn read_control_vector(
        surface: &ExecutionSurface,
        path: &str,
        scale: f32,
        layers: Option<std::ops::RangeInclusive<usize>>,
    ) -> Result<Steering> {
        let cv = ControlVector::read(std::path::Path::new(path))?;
        Steering::from_control_vector(surface, &cv, scale, layers, path)
    }

    /// Adds `scale · v` to layer `layer`'s vector.
    pub fn add(&mut self, layer: usize, v: &[f32], scale: f32) -> Result<()> {
        check_row(v, self.hidden, &format!("the vector for layer {layer}"))?;
        if !scale.is_finite() {
            return Err(ExecError::InvalidOption(format!(
                "the scale {scale} is not finite"
            )));
        }
        let n = self.layers.len();
        let slot = self.layers.get_mut(layer).ok_or_else(|| {
            ExecError::InvalidOption(format!(
                "layer {layer} does not exist: the model has layers 0-{}",
                n - 1
            ))
        })?;
        let dst = slot.get_or_insert_with(|| vec![0.0; v.len()]);
        dst.iter_mut().zip(v).for_each(|(d, x)| *d += scale * x);
        Ok(())
    }

    /// The vector added after `layer`, if any.
    pub fn at(&self, layer: usize) -> Option<&[f32]> {
        self.layers.get(layer).and_then(|v| v.as_deref())
    }

    /// The steered layers and their vectors, ascending.
    pub fn layers(&self) -> impl Iterator<Item = (usize, &[f32])> {
        self.layers
            .iter()
            .enumerate()
            .filter_map(|(l, v)| v.as_deref().map(|v| (l, v)))
    }

    /// The residual stream's width the vectors have.
    pub fn hidden(&self) -> usize {
        self.hidden
    }

    /// Whether it steers no layer.
    pub fn is_empty(&self) -> bool {
        self.layers.iter().all(Option::is_none)
    }

    /// Checks it against the surface a pass runs (width and layer count).
    pub fn check(&self, surface: &ExecutionSurface) -> Result<()> {
        if self.hidden != surface.hidden || self.layers.len() != surface.n_layers {
            return Err(ExecError::InvalidOption(format!(
                "the steering was made for a model {} wide with {} layers; this one is {} \
                 wide with {}",
                self.hidden,
                self.layers.len(),
                surface.hidden,
                surface.n_layers
            )));
        }
        Ok(())
    }

    /// Activation addition at one layer: the mean over `positive` texts of their residual
    /// stream leaving the layer (each text's `[T × hidden]` rows averaged first) minus the
    /// same over `negative`.
    pub fn difference(
        hidden: usize,
        positive: &[Vec<f32>],
        negative: &[Vec<f32>],
    ) -> Result<Vec<f32>> {
        let mean = |texts: &[Vec<f32>]| -> Result<Vec<f32>> {
            let mut m = vec![0.0f64; hidden];
            for rows in texts {
                let t = rows.len() / hidden;
                if t == 0 || rows.len() != t * hidden {
                    return Err(ExecError::Internal("residual rows are not whole".into()));
                }
                for r in rows.chunks_exact(hidden) {
                    m.iter_mut()
                        .zip(r)
                        .for_each(|(a, &b)| *a += b as f64 / (t * texts.len()) as f64);
                }
            }
            Ok(m.into_iter().map(|v| v as f32).collect())
        };
        if positive.is_empty() || negative.is_empty() {
            return Err(ExecError::InvalidOption(
                "activation addition needs texts on both sides of MINUS".into(),
            ));
        }
        let (p, n) = (mean(positive)?, mean(negative)?);
        Ok(p.iter().zip(&n).map(|(a, b)| a - b).collect())
    }

    /// The vectors as a llama.cpp control vector (unscaled by nothing: what is added),
    /// for `model_hint`'s family. Layer 0 has no place in the format and is refused.
    pub fn to_control_vector(&self, model_hint: &str) -> Result<ControlVector> {
        if self.at(0).is_some() {
            return Err(ExecError::InvalidOption(
                "llama.cpp's control vectors cannot steer layer 0; steer layers from 1".into(),
            ));
        }
        Ok(ControlVector {
            model_hint: Some(model_hint.to_string()),
            directions: self.layers().map(|(l, v)| (l, v.to_vec())).collect(),
            width: self.hidden,
        })
    }
}
