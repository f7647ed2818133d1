//! Gate scan: `scores = gate rows · query` for each requested layer, on the stored encoding
//! in place, then the top-k by |score| with the sign kept.
//!
//! A layer's gate region (`ffn_gate`, ggml shape `[hidden, ffn]`: `ffn` rows of `hidden`
//! elements) is read through [`lql_storage::codec::dot_rows`]: f32/f16/bf16 rows are read
//! where they lie in the mapping, block formats go through the fused codec dot kernels that
//! decode a block at a time in registers. No decoded copy of a matrix is ever made; the only
//! allocation is one f32 score per row. Work is split across layers and, within a layer,
//! across chunks of rows (rayon).
//!
//! The region is the effective state's (docs/editing.md): with an overlay on the layer,
//! each base score is multiplied by its feature's gate scale, and the features edits added
//! follow the base rows (numbered `ffn + i`) with their gate pre-activation
//! `(gate_i · query + gate_bias_i) × gate_scale`.

use lql_storage::codec;
use lql_storage::model::{OperandKey, OperandSource, TensorView};
use lql_storage::overlay::LayerOverlay;
use lql_storage::DType;
use rayon::prelude::*;

use super::topk::{top_k_abs, Hit};
use crate::error::{ExecError, Result};

/// Rows per parallel task: small enough to balance, large enough to amortise scheduling.
const ROWS_PER_TASK: usize = 128;

/// One layer's gate rows, validated against the execution surface.
#[derive(Debug, Clone, Copy)]
pub struct GateRegion<'a> {
    pub layer: usize,
    pub view: TensorView<'a>,
    /// The layer's overlay in the effective state (scales, added features), if any.
    pub overlay: Option<&'a LayerOverlay>,
}

impl<'a> GateRegion<'a> {
    /// The gate region of `layer`, or an error naming what is missing or malformed.
    pub fn open(src: &'a dyn OperandSource, layer: usize) -> Result<GateRegion<'a>> {
        let s = src.surface();
        if layer >= s.n_layers {
            return Err(ExecError::LayerOutOfRange {
                layer,
                n_layers: s.n_layers,
            });
        }
        let view = src
            .view(OperandKey::layer(layer, s.feature_key_role()))
            .ok_or(ExecError::MissingOperand {
                operand: "ffn_gate",
                layer: Some(layer),
            })?;
        check_matrix(&view, "ffn_gate", Some(layer), s.hidden, None)?;
        let overlay = src.ffn_overlay(layer);
        if let Some(o) = overlay {
            if o.ffn != view.rows() || o.hidden != s.hidden {
                return Err(ExecError::Internal(format!(
                    "layer {layer}'s overlay is for {}×{} features, the gate rows are {}×{}",
                    o.ffn,
                    o.hidden,
                    view.rows(),
                    s.hidden
                )));
            }
        }
        Ok(GateRegion {
            layer,
            view,
            overlay,
        })
    }

    /// Number of features: gate rows, then the features edits added.
    pub fn features(&self) -> usize {
        self.view.rows() + self.overlay.map_or(0, |o| o.added())
    }

    /// Elements per gate row (the hidden size).
    pub fn hidden(&self) -> usize {
        self.view.row_len()
    }

    pub fn encoding(&self) -> DType {
        self.view.dtype
    }

    /// Bytes a full scan of this region reads (added features' gate rows are F32).
    pub fn bytes(&self) -> usize {
        self.view.bytes.len() + self.overlay.map_or(0, |o| o.gate.len() * 4)
    }

    /// `out[f] = gate_row_f · query` for every feature, in parallel over row chunks.
    pub fn scores_into(&self, query: &[f32], out: &mut [f32]) -> Result<()> {
        if query.len() != self.hidden() || out.len() != self.features() {
            return Err(ExecError::Internal(format!(
                "gate scan of layer {}: query of {} values, {} outputs, region is {}×{}",
                self.layer,
                query.len(),
                out.len(),
                self.features(),
                self.hidden()
            )));
        }
        let rb = self.view.row_bytes();
        let dtype = self.view.dtype;
        let row_len = self.hidden();
        let bytes = self.view.bytes;
        let (base, added) = out.split_at_mut(self.view.rows());
        base.par_chunks_mut(ROWS_PER_TASK)
            .enumerate()
            .for_each(|(c, o)| {
                let start = c * ROWS_PER_TASK * rb;
                let src = &bytes[start..start + o.len() * rb];
                codec::dot_rows(dtype, src, row_len, query, o);
            });
        if let Some(o) = self.overlay {
            overlay_scores(o, query, base, added);
        }
        Ok(())
    }

    /// All scores of this layer.
    pub fn scores(&self, query: &[f32]) -> Result<Vec<f32>> {
        let mut out = vec![0.0f32; self.features()];
        self.scores_into(query, &mut out)?;
        Ok(out)
    }

    /// The `k` features of largest |score|.
    pub fn top_k(&self, query: &[f32], k: usize) -> Result<Vec<Hit>> {
        Ok(top_k_abs(&self.scores(query)?, k))
    }
}

/// Applies `o` to one layer's scores: base scores times their gate scale, and the added
/// features' gate pre-activations into `added`.
fn overlay_scores(o: &LayerOverlay, query: &[f32], base: &mut [f32], added: &mut [f32]) {
    let d = o.hidden;
    if let Some(s) = &o.gate_scale {
        for (v, k) in base.iter_mut().zip(s) {
            *v *= *k;
        }
    }
    for (i, out) in added.iter_mut().enumerate() {
        let g: f32 = o.gate[i * d..(i + 1) * d]
            .iter()
            .zip(query)
            .map(|(a, b)| a * b)
            .sum();
        let scale = o
            .gate_scale
            .as_ref()
            .and_then(|s| s.get(o.ffn + i))
            .copied()
            .unwrap_or(1.0);
        *out = (g + o.gate_bias[i]) * scale;
    }
}

/// Checks a matrix operand: `shape == [row_len, rows]` (rows unchecked when `None`), a known
/// block geometry, and a byte size equal to rows × row bytes.
pub(crate) fn check_matrix(
    view: &TensorView<'_>,
    operand: &'static str,
    layer: Option<usize>,
    row_len: usize,
    rows: Option<usize>,
) -> Result<()> {
    let bad = |message: String| {
        Err(ExecError::Shape {
            operand,
            layer,
            message,
        })
    };
    if view.shape.len() != 2 {
        return bad(format!("expected a matrix, found shape {:?}", view.shape));
    }
    if view.shape[0] != row_len {
        return bad(format!(
            "rows of {} elements, expected {row_len}",
            view.shape[0]
        ));
    }
    if let Some(r) = rows {
        if view.shape[1] != r {
            return bad(format!("{} rows, expected {r}", view.shape[1]));
        }
    }
    if !row_len.is_multiple_of(view.dtype.block_elems()) {
        return bad(format!(
            "rows of {row_len} elements are not whole {}-element {} blocks",
            view.dtype.block_elems(),
            view.dtype
        ));
    }
    let want = view.row_bytes().checked_mul(view.rows());
    if want != Some(view.bytes.len()) {
        return bad(format!(
            "{} bytes, expected {} for {:?} {}",
            view.bytes.len(),
            want.map_or("an overflowing size".to_string(), |w| w.to_string()),
            view.shape,
            view.dtype
        ));
    }
    Ok(())
}

/// The hits of one layer plus what the scan read.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerHits {
    pub layer: usize,
    pub hits: Vec<Hit>,
    pub encoding: DType,
    pub features: usize,
    /// Gate bytes read (the whole region: a scan touches every row once).
    pub bytes_read: usize,
    /// Root-mean-square of all the layer's scores.
    pub score_rms: f32,
}

/// Scans each layer of `layers` with the query `query(layer)` and keeps its top `k`.
/// Layers run in parallel; results come back in the order of `layers`.
pub fn scan_layers<'q, Q>(
    src: &dyn OperandSource,
    layers: &[usize],
    k: usize,
    query: Q,
) -> Result<Vec<LayerHits>>
where
    Q: Fn(usize) -> &'q [f32] + Sync,
{
    let regions = layers
        .iter()
        .map(|&l| GateRegion::open(src, l))
        .collect::<Result<Vec<_>>>()?;
    regions
        .par_iter()
        .map(|r| {
            let scores = r.scores(query(r.layer))?;
            let ss: f64 = scores.iter().map(|&s| (s as f64) * (s as f64)).sum();
            Ok(LayerHits {
                layer: r.layer,
                hits: top_k_abs(&scores, k),
                encoding: r.encoding(),
                features: r.features(),
                bytes_read: r.bytes(),
                score_rms: (ss / scores.len().max(1) as f64).sqrt() as f32,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scores from the stored encoding equal decode-then-dot, for scalar and block formats.
    #[test]
    fn scores_match_decoded_rows() {
        let (hidden, rows) = (64usize, 300usize);
        let vals: Vec<f32> = (0..hidden * rows)
            .map(|i| (((i * 7919) % 1013) as f32 / 1013.0 - 0.5) * 2.0)
            .collect();
        let q: Vec<f32> = (0..hidden)
            .map(|i| ((i * 31) % 17) as f32 / 17.0 - 0.4)
            .collect();
        for dtype in [
            DType::F32,
            DType::F16,
            DType::BF16,
            DType::Q8_0,
            DType::Q4_1,
            DType::Q4_0,
        ] {
            let mut bytes = Vec::new();
            codec::encode_row(dtype, &vals, &mut bytes).unwrap();
            let shape = [hidden, rows];
            let region = GateRegion {
                layer: 0,
                view: TensorView {
                    dtype,
                    shape: &shape,
                    bytes: &bytes,
                },
                overlay: None,
            };
            let got = region.scores(&q).unwrap();
            let mut dec = vec![0.0f32; hidden * rows];
            codec::decode_row(dtype, &bytes, &mut dec).unwrap();
            for (r, g) in got.iter().enumerate() {
                let want: f32 = dec[r * hidden..(r + 1) * hidden]
                    .iter()
                    .zip(&q)
                    .map(|(a, b)| a * b)
                    .sum();
                assert!((g - want).abs() < 1e-4, "{dtype} row {r}: {g} vs {want}");
            }
            let top = region.top_k(&q, 5).unwrap();
            let mut order: Vec<usize> = (0..rows).collect();
            order.sort_by(|&a, &b| got[b].abs().total_cmp(&got[a].abs()).then(a.cmp(&b)));
            assert_eq!(
                top.iter().map(|h| h.feature).collect::<Vec<_>>(),
                order[..5].to_vec(),
                "{dtype}"
            );
            assert!(
                region.scores(&q[..10]).is_err(),
                "wrong query length refuses"
            );
        }
    }

    #[test]
    fn malformed_regions_refuse() {
        let bytes = vec![0u8; 100];
        let shape = [64usize, 2];
        let v = TensorView {
            dtype: DType::F32,
            shape: &shape,
            bytes: &bytes,
        };
        assert!(check_matrix(&v, "ffn_gate", Some(0), 64, None).is_err());
        let shape = [63usize, 2];
        let v = TensorView {
            dtype: DType::Q4_1,
            shape: &shape,
            bytes: &bytes,
        };
        assert!(check_matrix(&v, "ffn_gate", Some(0), 63, None).is_err());
    }
}
