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

use lql_storage::model::OperandSource;

use crate::backend::Backend;
use crate::block::{self, Block, BlockBuffers, Seq, Taps};
use crate::error::{ExecError, Result};
#[cfg(test)]
use crate::kernels::RopeTable;
use crate::kv::KvCache;
use crate::plan::Plan;
use crate::session::{Executor, Logits, Session};
use crate::steer::Steering;

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
        // Each sequence is steered by its own session's executor.
        let steers: Vec<Option<Arc<Steering>>> = sessions
            .iter()
            .map(|s| s.executor().steering().cloned())
            .collect();
        let steering: Vec<Option<&Steering>> = steers.iter().map(|s| s.as_deref()).collect();
        // And takes its FFN overlays from its own executor's state.
        let states: Vec<Option<Arc<dyn OperandSource>>> = sessions
            .iter()
            .map(|s| s.executor().overlay().cloned())
            .collect();
        let overlays: Vec<Option<&dyn OperandSource>> =
            states.iter().map(|s| s.as_deref()).collect();
        let mut kvs: Vec<&mut KvCache> = sessions.iter_mut().map(|s| s.kv_mut()).collect();
        let step = Step {
            source: self.source().as_ref(),
            plan,
            backend: self.backend(),
            steering: &steering,
            overlays: &overlays,
        };
        let mut result = Err(ExecError::Internal("batched step did not run".into()));
        let cancel = self.cancel_flag();
        self.backend().scope(&mut || {
            result = step.run(&mut kvs, ids, &cancel, self.layer_counter());
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
    /// Per sequence, its executor's steering.
    steering: &'a [Option<&'a Steering>],
    /// Per sequence, its executor's overlay state.
    overlays: &'a [Option<&'a dyn OperandSource>],
}

impl Step<'_> {
    /// Appends `ids[i]` to cache `i` (committed on success) and returns the logits of
    /// each sequence's last new row, `[B × vocab]`.
    fn run(
        &self,
        kvs: &mut [&mut KvCache],
        seqs: &[&[u32]],
        cancel: &std::sync::atomic::AtomicBool,
        layers_run: &std::sync::atomic::AtomicU64,
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
                        position: Some(p + j),
                        vocab: s.vocab,
                    });
                }
                positions.push(p + j);
            }
        }
        for (kv, t) in kvs.iter_mut().zip(seqs) {
            kv.reserve(t.len())?;
        }
        let x_seqs: Vec<Seq> = seqs
            .iter()
            .zip(&first)
            .zip(&p0)
            .map(|((t, &row), &p0)| Seq {
                row,
                n: t.len(),
                p0,
            })
            .collect();
        let mut x = block::embed(self.source, plan, &ids, &positions)?;
        let tables = block::rope_tables(plan, &positions);
        let layer = Block {
            source: self.source,
            plan,
            backend: be,
            tables: &tables,
            steering: self.steering,
            overlays: self.overlays,
        };
        let mut buf = BlockBuffers::new(plan, b);
        for (kl, lp) in plan.layers.iter().enumerate() {
            if cancel.load(Ordering::Relaxed) {
                return Err(ExecError::Cancelled);
            }
            layer.run(lp, kl, &mut x, &x_seqs, kvs, &mut buf, Taps::default())?;
            layers_run.fetch_add(1, Ordering::Relaxed);
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
        let spec = crate::plan::RopeSpec {
            dims: 8,
            theta: 10000.0,
            freq_scale: 1.0,
            factors: None,
        };
        let t = RopeTable::at(&[7, 0, 31], &spec);
        for (i, p) in [7usize, 0, 31].into_iter().enumerate() {
            let one = RopeTable::new(p, 1, 8, 10000.0);
            assert_eq!(&t.cos[i * 4..(i + 1) * 4], &one.cos[..]);
            assert_eq!(&t.sin[i * 4..(i + 1) * 4], &one.sin[..]);
        }
    }
}
