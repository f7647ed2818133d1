//! Llama 3 RoPE scaling from `config.json`'s `rope_scaling` (`rope_type: llama3`): the
//! per-dimension frequency divisors llama.cpp's converter stores as `rope_freqs.weight`,
//! computed the same way (f64, then f32), so an HF folder runs the block its GGUF conversion
//! runs.

use std::path::Path;

use serde_json::Value;

use crate::error::{Result, StorageError};
use crate::format::safetensors::HfConfig;

/// The divisors of the `rotary_dims / 2` frequencies of a head: 1 for wavelengths shorter
/// than `original / high_freq_factor`, `factor` for those longer than
/// `original / low_freq_factor`, and a smooth blend between.
pub fn llama3_divisors(
    cfg_path: &Path,
    cfg: &HfConfig,
    rope_theta: f64,
    rotary_dims: usize,
) -> Result<Vec<f32>> {
    let scaling = cfg.rope_scaling.as_ref();
    let number = |field: &str, default: f64| -> Result<f64> {
        match scaling
            .and_then(|s| s.get(field))
            .or_else(|| cfg.raw.get(field))
        {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v
                .as_f64()
                .filter(|x| x.is_finite() && *x > 0.0)
                .ok_or_else(|| StorageError::Format {
                    path: cfg_path.to_path_buf(),
                    offset: 0,
                    field: format!("rope_scaling.{field}"),
                    message: format!("{v} is not a positive number"),
                }),
        }
    };
    let factor = number("factor", 8.0)?;
    let low = number("low_freq_factor", 1.0)?;
    let high = number("high_freq_factor", 4.0)?;
    let original = number("original_max_position_embeddings", 8192.0)?;
    if high <= low {
        return Err(StorageError::Format {
            path: cfg_path.to_path_buf(),
            offset: 0,
            field: "rope_scaling.high_freq_factor".into(),
            message: format!("{high} is not above low_freq_factor {low}"),
        });
    }
    Ok((0..rotary_dims)
        .step_by(2)
        .map(|i| {
            let freq = 1.0 / rope_theta.powf(i as f64 / rotary_dims as f64);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            let d = if wavelen < original / high {
                1.0
            } else if wavelen > original / low {
                factor
            } else {
                let smooth = (original / wavelen - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            };
            d as f32
        })
        .collect())
}
