//! Batched decoding: one step that runs the next token of several independent sequences
//! together (or any number of new tokens each: a prompt prefilled beside the next tokens of
//! others). Each sequence keeps its own key/value cache and position; the projections,
//! the FFN and the head run as one matrix product over the B rows (the weights are read
//! once per step, and the CPU backend switches to decoded tiles + GEMM from its batch
//! threshold on); RoPE rotates each row at its own position; attention runs per sequence
//! over its own cache.
//!
//! Same arithmetic as a pass of one token per sequence wherever the backend computes a
//! batch row by row (B below the CPU backend's GEMM threshold, or a backend built
//! `without_batched_gemm`): then every sequence's logits are bit-identical to
//! [`Session::decode`]'s. Through GEMM they differ by the summation order only.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use lql_storage::model::{OperandKey, OperandSource, TensorView};

use crate::backend::{encoded, AttnGeometry, AttnStep, Backend};
use crate::error::{ExecError, Result};
use crate::ffn::{self, FfnBuffers, FfnCtx};
use crate::kernels::{add_in_place, RopeTable};
use crate::kv::KvCache;
use crate::plan::Plan;
use crate::session::{Executor, Logits, Session};

fn view<'s>(source: &'s dyn OperandSource, key: OperandKey) -> Result<TensorView<'s>> {
    source.view(key).ok_or(ExecError::MissingOperand {
        operand: key.role.name(),
        layer: key.layer,
    })
}

fn add_bias_rows(x: &mut [f32], bias: Option<&Vec<f32>>) {
    if let Some(b) = bias {
        for row in x.chunks_exact_mut(b.len()) {
            add_in_place(row, b);
        }
    }
}

/// One RoPE table whose row `i` is position `positions[i]` (rows of
/// [`RopeTable::new`], so each row's angles are exactly a one-position table's).
fn rope_rows(positions: &[usize], head_dim: usize, theta: f32) -> RopeTable {
    let half = head_dim / 2;
    let mut cos = Vec::with_capacity(positions.len() * half);
    let mut sin = Vec::with_capacity(positions.len() * half);
    for &p in positions {
        let t = RopeTable::new(p, 1, head_dim, theta);
        cos.extend_from_slice(&t.cos);
        sin.extend_from_slice(&t.sin);
    }
    RopeTable { half, cos, sin }
}

impl Executor {
    /// Runs one new token for each session (`ids[i]` after the tokens `sessions[i]` holds,
    /// at its own position) in one batched step; the logits of each, in order. The
    /// sessions must be continuations of this executor (or a clone of it) over a whole
    /// model. On error every session is left as it was.
    pub fn decode_batch(&self, sessions: &mut [&mut Session], ids: &[u32]) -> Result<Vec<Logits>> {
        let each: Vec<&[u32]> = ids.iter().map(std::slice::from_ref).collect();
        self.extend_batch(sessions, &each)
    }

    /// [`Executor::decode_batch`] with any number of new tokens per session (a prompt to
    /// prefill beside the next tokens of others): all rows of all sessions go through the
    /// same matrix products; the logits of each session's last new token, in order.
    pub fn extend_batch(
        &self,
        sessions: &mut [&mut Session],
        ids: &[&[u32]],
    ) -> Result<Vec<Logits>> {
        if sessions.len() != ids.len() {
            return Err(ExecError::Internal(format!(
                "batched step of {} sessions with {} token lists",
                sessions.len(),
                ids.len()
            )));
        }
        if sessions.is_empty() {
            return Ok(Vec::new());
        }
        if ids.iter().any(|t| t.is_empty()) {
            return Err(ExecError::EmptyPrompt);
        }
        let plan = self.plan_arc();
        if !plan.stage.input || !plan.stage.output {
            return Err(ExecError::Unsupported(
                "not supported yet: batched decoding of one pipeline stage".into(),
            ));
        }
        if let Some(i) = sessions
            .iter()
            .position(|s| !Arc::ptr_eq(s.executor().plan_arc(), plan))
        {
            return Err(ExecError::InvalidOption(format!(
                "batched decode: session {i} belongs to another executor"
            )));
        }
        let starts: Vec<usize> = sessions.iter().map(|s| s.position()).collect();
        let mut kvs: Vec<&mut KvCache> = sessions.iter_mut().map(|s| s.kv_mut()).collect();
        let step = Step {
            source: self.source().as_ref(),
            plan,
            backend: self.backend(),
        };
        let mut result = Err(ExecError::Internal("batched step did not run".into()));
        let cancel = self.cancel_flag();
        self.backend().scope(&mut || {
            result = step.run(&mut kvs, ids, &cancel);
        });
        drop(kvs);
        let flat = match result {
            Ok(f) => f,
            Err(e) => {
                for (s, &p) in sessions.iter_mut().zip(&starts) {
                    s.kv_mut().truncate(p);
                }
                return Err(e);
            }
        };
        let vocab = plan.surface.vocab;
        for (s, t) in sessions.iter_mut().zip(ids) {
            for &id in *t {
                s.push_token(id);
            }
        }
        Ok(flat
            .chunks_exact(vocab)
            .map(|c| Logits { values: c.to_vec() })
            .collect())
    }
}

/// Everything a batched step reads.
struct Step<'a> {
    source: &'a dyn OperandSource,
    plan: &'a Plan,
    backend: &'a dyn Backend,
}

impl Step<'_> {
    /// Appends `ids[i]` to cache `i` (committed on success) and returns the logits of
    /// each sequence's last new row, `[B × vocab]`.
    fn run(
        &self,
        kvs: &mut [&mut KvCache],
        seqs: &[&[u32]],
        cancel: &std::sync::atomic::AtomicBool,
    ) -> Result<Vec<f32>> {
        let plan = self.plan;
        let s = &plan.surface;
        let be = self.backend;
        let d = s.hidden;
        // Sequence i owns rows first[i] .. first[i] + seqs[i].len(), at positions
        // p0[i] .. p0[i] + seqs[i].len().
        let p0: Vec<usize> = kvs.iter().map(|kv| kv.len()).collect();
        let mut first = Vec::with_capacity(seqs.len());
        let mut b = 0usize;
        for t in seqs {
            first.push(b);
            b += t.len();
        }
        let ids: Vec<u32> = seqs.iter().flat_map(|t| t.iter().copied()).collect();
        let mut positions = Vec::with_capacity(b);
        for (t, &p) in seqs.iter().zip(&p0) {
            for (j, &id) in t.iter().enumerate() {
                if id as usize >= s.vocab {
                    return Err(ExecError::TokenOutOfRange {
                        id,
                        position: p + j,
                        vocab: s.vocab,
                    });
                }
                positions.push(p + j);
            }
        }
        for (kv, t) in kvs.iter_mut().zip(seqs) {
            kv.reserve(t.len())?;
        }
        let (qd, kvd, ff) = (plan.q_dim, plan.kv_dim, s.ffn);

        // Embedding.
        let emb = view(self.source, plan.embedding)?;
        let mut x = vec![0.0f32; b * d];
        for (row, &id) in x.chunks_exact_mut(d).zip(&ids) {
            encoded::decode_row(emb.dtype, emb.row(id as usize), row)
                .map_err(ExecError::Unsupported)?;
            if s.embedding_scale != 1.0 {
                row.iter_mut().for_each(|v| *v *= s.embedding_scale);
            }
        }

        let table = rope_rows(&positions, s.head_dim, s.rope_theta);
        let geom = AttnGeometry {
            n_heads: s.n_heads,
            n_kv_heads: s.n_kv_heads,
            head_dim: s.head_dim,
        };
        let mut h = vec![0.0f32; b * d];
        let mut q = vec![0.0f32; b * qd];
        let mut k = vec![0.0f32; b * kvd];
        let mut v = vec![0.0f32; b * kvd];
        let mut att = vec![0.0f32; b * qd];
        let mut attn_delta = vec![0.0f32; b * d];
        let mut ffn_delta = vec![0.0f32; b * d];
        let mut ffn_buf = FfnBuffers::new(b, ff);
        let ffn_cx = FfnCtx {
            source: self.source,
            backend: be,
            activation: s.activation,
        };

        for (kl, lp) in plan.layers.iter().enumerate() {
            if cancel.load(Ordering::Relaxed) {
                return Err(ExecError::Cancelled);
            }
            // Attention block: projections batched, attention per sequence.
            be.rmsnorm(&x, &lp.attn_norm, s.norm_eps, &mut h);
            let (wq, wk, wv) = (
                view(self.source, lp.q)?,
                view(self.source, lp.k)?,
                view(self.source, lp.v)?,
            );
            be.matmul_group(&[wq, wk, wv], &h, b, &mut [&mut q, &mut k, &mut v])?;
            add_bias_rows(&mut q, lp.q_bias.as_ref());
            add_bias_rows(&mut k, lp.k_bias.as_ref());
            add_bias_rows(&mut v, lp.v_bias.as_ref());
            be.rope(&mut q, s.n_heads, s.head_dim, &table, s.rope_pairing);
            be.rope(&mut k, s.n_kv_heads, s.head_dim, &table, s.rope_pairing);
            for (i, kv) in kvs.iter_mut().enumerate() {
                let (r, n) = (first[i], seqs[i].len());
                kv.append(kl, &k[r * kvd..(r + n) * kvd], &v[r * kvd..(r + n) * kvd]);
                let (kc, vc) = kv.layer(kl);
                let step = AttnStep {
                    q: &q[r * qd..(r + n) * qd],
                    k_cache: kc,
                    v_cache: vc,
                    p0: p0[i],
                    n,
                    geom,
                };
                be.attention(&step, &mut att[r * qd..(r + n) * qd], None);
            }
            be.matmul(&view(self.source, lp.o)?, &att, b, &mut attn_delta)?;
            add_in_place(&mut x, &attn_delta);

            // FFN block, batched.
            be.rmsnorm(&x, &lp.ffn_norm, s.norm_eps, &mut h);
            ffn::run(&ffn_cx, lp, &h, b, &mut ffn_buf, None, &mut ffn_delta)?;
            add_in_place(&mut x, &ffn_delta);
        }
        for (kv, t) in kvs.iter_mut().zip(seqs) {
            kv.commit(t.len());
        }
        // The head over each sequence's last row only.
        let last: Vec<f32> = if b == seqs.len() {
            x
        } else {
            let mut last = Vec::with_capacity(seqs.len() * d);
            for (&r, t) in first.iter().zip(seqs) {
                let row = r + t.len() - 1;
                last.extend_from_slice(&x[row * d..(row + 1) * d]);
            }
            last
        };
        crate::forward::head(self.source, plan, be, &last, 0..seqs.len(), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rope_rows_are_one_position_tables() {
        let t = rope_rows(&[7, 0, 31], 8, 10000.0);
        for (i, p) in [7usize, 0, 31].into_iter().enumerate() {
            let one = RopeTable::new(p, 1, 8, 10000.0);
            assert_eq!(&t.cos[i * 4..(i + 1) * 4], &one.cos[..]);
            assert_eq!(&t.sin[i * 4..(i + 1) * 4], &one.sin[..]);
        }
    }
}
