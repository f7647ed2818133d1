//! Browse over banks of experts: feature identity, expert matrices read in place, and the
//! gate scan of a mixture-of-experts layer.
//!
//! A feature of a bank layer is `layer:feature`, numbered v1-flattened (seed 002 §15.2), the
//! order the stacked operands store them in: routed expert `e`'s row `r` is `e × expert_ffn +
//! r` (exactly the row of the 3-D `ffn_gate_exps` operand, ggml shape `[hidden, ffn, E]`,
//! read as a matrix of `E × ffn` rows), and the shared expert's rows follow all routed ones.
//! The expert is a column: a routed expert `0..E` or the layer's shared expert
//! ([`ExpertId::Shared`], `-1` in the `expert` column). Scans work per expert on its own
//! rows; [`BankLayout`] converts `(expert, row)` to the feature number and back.
//!
//! Experts are read in place: expert `e` of a stacked operand is a contiguous run of
//! encoded rows (gate/up: `ffn` rows of `hidden`; down: `hidden` rows of `ffn`), scored
//! with the same fused codec dot kernels as a dense gate region. No decoded copy is made.

use std::fmt;

use lql_storage::codec;
use lql_storage::model::{OperandKey, OperandSource, Role, TensorView};
use lql_storage::surface::Activation;
use lql_storage::DType;
use rayon::prelude::*;

use super::topk::top_k_abs;
use crate::error::{ExecError, Result};

/// Rows per parallel task of an expert scan.
const ROWS_PER_TASK: usize = 128;

/// Which expert of a bank layer a feature belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ExpertId {
    /// Routed expert `e` (`0..n_experts`), as the router and the `routes` table number it.
    Routed(usize),
    /// The layer's shared expert (runs at every position).
    Shared,
}

impl ExpertId {
    /// The `expert` column's value of the shared expert.
    pub const SHARED_COLUMN: i64 = -1;

    /// The `expert` column's value: the routed index, or -1 for the shared expert.
    pub fn column(self) -> i64 {
        match self {
            ExpertId::Routed(e) => e as i64,
            ExpertId::Shared => Self::SHARED_COLUMN,
        }
    }

    /// The inverse of [`ExpertId::column`].
    pub fn from_column(v: i64) -> Option<ExpertId> {
        match v {
            Self::SHARED_COLUMN => Some(ExpertId::Shared),
            e if e >= 0 => Some(ExpertId::Routed(e as usize)),
            _ => None,
        }
    }
}

impl fmt::Display for ExpertId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExpertId::Routed(e) => write!(f, "{e}"),
            ExpertId::Shared => f.write_str("shared"),
        }
    }
}

/// The shape of a bank layer's feature space (every bank layer of a model has the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BankLayout {
    pub n_experts: usize,
    pub expert_ffn: usize,
    /// 0 when the layer has no shared expert.
    pub shared_ffn: usize,
}

impl BankLayout {
    /// The layout of the model's banks, or `None` for a dense model.
    pub fn of(src: &dyn OperandSource) -> Option<BankLayout> {
        src.surface().moe.as_ref().map(|m| BankLayout {
            n_experts: m.n_experts,
            expert_ffn: m.expert_ffn,
            shared_ffn: m.shared_ffn,
        })
    }

    /// Every expert of a layer: the routed ones in order, then the shared one.
    pub fn experts(&self) -> Vec<ExpertId> {
        let mut v: Vec<ExpertId> = (0..self.n_experts).map(ExpertId::Routed).collect();
        if self.shared_ffn > 0 {
            v.push(ExpertId::Shared);
        }
        v
    }

    /// Features (gate rows) of one expert.
    pub fn width(&self, e: ExpertId) -> usize {
        match e {
            ExpertId::Routed(_) => self.expert_ffn,
            ExpertId::Shared => self.shared_ffn,
        }
    }

    /// Features of a whole layer (every routed expert and the shared one).
    pub fn features(&self) -> usize {
        self.n_experts * self.expert_ffn + self.shared_ffn
    }

    /// The flat number of `(e, f)`; `None` when `e` or `f` is outside the bank.
    pub fn flat(&self, e: ExpertId, f: usize) -> Option<usize> {
        if f >= self.width(e) {
            return None;
        }
        match e {
            ExpertId::Routed(i) if i < self.n_experts => Some(i * self.expert_ffn + f),
            ExpertId::Routed(_) => None,
            ExpertId::Shared => Some(self.n_experts * self.expert_ffn + f),
        }
    }

    /// The `(expert, feature)` of a flat number.
    pub fn split(&self, flat: usize) -> Option<(ExpertId, usize)> {
        let routed = self.n_experts * self.expert_ffn;
        if flat < routed {
            Some((
                ExpertId::Routed(flat / self.expert_ffn),
                flat % self.expert_ffn,
            ))
        } else if flat < routed + self.shared_ffn {
            Some((ExpertId::Shared, flat - routed))
        } else {
            None
        }
    }
}

/// One expert's matrix, read in place: `rows` encoded rows of `row_len` elements.
#[derive(Debug, Clone, Copy)]
pub struct ExpertMatrix<'a> {
    pub expert: ExpertId,
    pub dtype: DType,
    pub row_len: usize,
    pub rows: usize,
    pub bytes: &'a [u8],
}

impl<'a> ExpertMatrix<'a> {
    pub fn row_bytes(&self) -> usize {
        self.row_len / self.dtype.block_elems() * self.dtype.block_bytes()
    }

    pub fn row(&self, i: usize) -> &'a [u8] {
        let rb = self.row_bytes();
        &self.bytes[i * rb..(i + 1) * rb]
    }

    /// `out[r] = row_r · x` for every row, in parallel over row chunks.
    pub fn dot_rows(&self, x: &[f32], out: &mut [f32]) -> Result<()> {
        if x.len() != self.row_len || out.len() != self.rows {
            return Err(ExecError::Internal(format!(
                "expert {} scan: query of {} values, {} outputs, matrix is {}×{}",
                self.expert,
                x.len(),
                out.len(),
                self.rows,
                self.row_len
            )));
        }
        let rb = self.row_bytes();
        out.par_chunks_mut(ROWS_PER_TASK)
            .enumerate()
            .for_each(|(c, o)| {
                let start = c * ROWS_PER_TASK * rb;
                let src = &self.bytes[start..start + o.len() * rb];
                codec::dot_rows(self.dtype, src, self.row_len, x, o);
            });
        Ok(())
    }
}

/// The three matrices of an expert's gated FFN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpertRole {
    Gate,
    Up,
    Down,
}

impl ExpertRole {
    fn roles(self) -> (Role, &'static str, Role, &'static str) {
        match self {
            ExpertRole::Gate => (
                Role::FfnGateExps,
                "ffn_gate_exps",
                Role::FfnGateShexp,
                "ffn_gate_shexp",
            ),
            ExpertRole::Up => (
                Role::FfnUpExps,
                "ffn_up_exps",
                Role::FfnUpShexp,
                "ffn_up_shexp",
            ),
            ExpertRole::Down => (
                Role::FfnDownExps,
                "ffn_down_exps",
                Role::FfnDownShexp,
                "ffn_down_shexp",
            ),
        }
    }
}

/// Expert `e`'s `role` matrix of `layer`, in place. Gate and up are `width` rows of
/// `hidden`; down is `hidden` rows of `width`. The stored operand's shape and size are
/// checked against the surface before any row is sliced.
pub fn matrix<'a>(
    src: &'a dyn OperandSource,
    layout: &BankLayout,
    layer: usize,
    e: ExpertId,
    role: ExpertRole,
) -> Result<ExpertMatrix<'a>> {
    let s = src.surface();
    if layer >= s.n_layers {
        return Err(ExecError::LayerOutOfRange {
            layer,
            n_layers: s.n_layers,
        });
    }
    let (routed, rname, shared, sname) = role.roles();
    let (key_role, name, stacked) = match e {
        ExpertId::Routed(i) => {
            if i >= layout.n_experts {
                return Err(ExecError::Internal(format!(
                    "expert {i} of layer {layer} is out of range: the bank has {}",
                    layout.n_experts
                )));
            }
            (routed, rname, layout.n_experts)
        }
        ExpertId::Shared => {
            if layout.shared_ffn == 0 {
                return Err(ExecError::Internal(format!(
                    "layer {layer} has no shared expert"
                )));
            }
            (shared, sname, 1)
        }
    };
    let width = layout.width(e);
    let (row_len, rows) = match role {
        ExpertRole::Down => (width, s.hidden),
        _ => (s.hidden, width),
    };
    let view = src
        .view(OperandKey::layer(layer, key_role))
        .ok_or(ExecError::MissingOperand {
            operand: name,
            layer: Some(layer),
        })?;
    check_stacked(&view, name, layer, [row_len, rows, stacked])?;
    let per = rows * view.row_bytes();
    let index = match e {
        ExpertId::Routed(i) => i,
        ExpertId::Shared => 0,
    };
    Ok(ExpertMatrix {
        expert: e,
        dtype: view.dtype,
        row_len,
        rows,
        bytes: &view.bytes[index * per..(index + 1) * per],
    })
}

/// Checks a (possibly stacked) expert operand: shape `[row_len, rows]` or `[row_len, rows,
/// n]` (a 2-D shape stands for `n` = 1), whole blocks per row, and a byte size equal to
/// the rows' bytes.
fn check_stacked(
    view: &TensorView<'_>,
    operand: &'static str,
    layer: usize,
    [row_len, rows, n]: [usize; 3],
) -> Result<()> {
    let bad = |message: String| {
        Err(ExecError::Shape {
            operand,
            layer: Some(layer),
            message,
        })
    };
    let ok_shape = match view.shape {
        [a, b] => n == 1 && *a == row_len && *b == rows,
        [a, b, c] => *a == row_len && *b == rows && *c == n,
        _ => false,
    };
    if !ok_shape {
        return bad(format!(
            "shape {:?}, expected [{row_len}, {rows}, {n}] from the surface",
            view.shape
        ));
    }
    if !row_len.is_multiple_of(view.dtype.block_elems()) {
        return bad(format!(
            "rows of {row_len} elements are not whole {}-element {} blocks",
            view.dtype.block_elems(),
            view.dtype
        ));
    }
    let want = view
        .row_bytes()
        .checked_mul(rows)
        .and_then(|b| b.checked_mul(n));
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

/// One scored feature of a bank layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExpertHit {
    pub expert: ExpertId,
    /// Row of the expert's gate matrix.
    pub feature: usize,
    /// Gate row · query.
    pub score: f32,
}

/// What the scan of one bank layer found and read.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpertScan {
    pub layer: usize,
    /// The experts scanned, in scan order.
    pub experts: Vec<ExpertId>,
    /// Encoding of the routed gate rows (of the shared ones when only those were read).
    pub encoding: DType,
    /// Gate rows scored.
    pub features: usize,
    /// Gate bytes read.
    pub bytes_read: usize,
    /// Best first by |score| (ties: the expert scanned first, then the lower row).
    pub hits: Vec<ExpertHit>,
    /// Root-mean-square of all the scores.
    pub score_rms: f32,
}

/// Scores every gate row of `experts` of `layer` against `query`, concatenated in the
/// order of `experts`, with the matrices read.
pub fn scores<'a>(
    src: &'a dyn OperandSource,
    layout: &BankLayout,
    layer: usize,
    experts: &[ExpertId],
    query: &[f32],
) -> Result<(Vec<ExpertMatrix<'a>>, Vec<f32>)> {
    let mats = experts
        .iter()
        .map(|&e| matrix(src, layout, layer, e, ExpertRole::Gate))
        .collect::<Result<Vec<_>>>()?;
    let mut out = vec![0.0f32; mats.iter().map(|m| m.rows).sum()];
    let mut at = 0;
    for m in &mats {
        m.dot_rows(query, &mut out[at..at + m.rows])?;
        at += m.rows;
    }
    Ok((mats, out))
}

/// The gate scan of one bank layer over `experts`: the `top` features by |score|.
pub fn scan_layer(
    src: &dyn OperandSource,
    layout: &BankLayout,
    layer: usize,
    experts: &[ExpertId],
    query: &[f32],
    top: usize,
) -> Result<ExpertScan> {
    let (mats, all) = scores(src, layout, layer, experts, query)?;
    let mut owner = Vec::with_capacity(all.len());
    for m in &mats {
        owner.extend((0..m.rows).map(|f| (m.expert, f)));
    }
    let ss: f64 = all.iter().map(|&s| (s as f64) * (s as f64)).sum();
    let hits = top_k_abs(&all, top)
        .into_iter()
        .map(|h| {
            let (expert, feature) = owner[h.feature];
            ExpertHit {
                expert,
                feature,
                score: h.score,
            }
        })
        .collect();
    let encoding = mats
        .iter()
        .find(|m| m.expert != ExpertId::Shared)
        .or(mats.first())
        .map_or(DType::F32, |m| m.dtype);
    Ok(ExpertScan {
        layer,
        experts: experts.to_vec(),
        encoding,
        features: all.len(),
        bytes_read: mats.iter().map(|m| m.bytes.len()).sum(),
        hits,
        score_rms: (ss / all.len().max(1) as f64).sqrt() as f32,
    })
}

/// Every feature's score of a bank layer, in flat order (all routed experts, then the
/// shared one): what DESCRIBE contrasts.
pub fn flat_scores(
    src: &dyn OperandSource,
    layout: &BankLayout,
    layer: usize,
    query: &[f32],
) -> Result<Vec<f32>> {
    Ok(scores(src, layout, layer, &layout.experts(), query)?.1)
}

/// `act(gate_f · x) × (up_f · x)` of expert `e`'s feature `f`: the activation the expert's
/// down projection reads, had it run on `x` (RESIDUAL WALK reports it for the experts that
/// did run; the router weight is not applied).
pub fn activation(
    src: &dyn OperandSource,
    layout: &BankLayout,
    layer: usize,
    e: ExpertId,
    f: usize,
    x: &[f32],
    act: Activation,
) -> Result<f32> {
    let mut g = [0.0f32];
    let mut u = [0.0f32];
    for (role, out) in [(ExpertRole::Gate, &mut g), (ExpertRole::Up, &mut u)] {
        let m = matrix(src, layout, layer, e, role)?;
        if f >= m.rows || x.len() != m.row_len {
            return Err(ExecError::Internal(format!(
                "feature {layer}:{e}:{f} is outside its expert ({} rows)",
                m.rows
            )));
        }
        codec::dot_rows(m.dtype, m.row(f), m.row_len, x, out);
    }
    crate::kernels::glu(act, &mut g, &u);
    Ok(g[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_numbers_round_trip() {
        let l = BankLayout {
            n_experts: 4,
            expert_ffn: 32,
            shared_ffn: 128,
        };
        assert_eq!(l.features(), 4 * 32 + 128);
        for flat in 0..l.features() {
            let (e, f) = l.split(flat).unwrap();
            assert_eq!(l.flat(e, f), Some(flat));
        }
        assert_eq!(l.split(l.features()), None);
        assert_eq!(l.flat(ExpertId::Routed(4), 0), None);
        assert_eq!(l.flat(ExpertId::Routed(0), 32), None);
        assert_eq!(l.flat(ExpertId::Shared, 127), Some(255));
        assert_eq!(ExpertId::from_column(-1), Some(ExpertId::Shared));
        assert_eq!(ExpertId::from_column(3), Some(ExpertId::Routed(3)));
        assert_eq!(ExpertId::from_column(-2), None);
        assert_eq!(ExpertId::Shared.to_string(), "shared");
        let no_shared = BankLayout { shared_ffn: 0, ..l };
        assert_eq!(no_shared.experts().len(), 4);
        assert_eq!(no_shared.split(128), None);
    }
}
