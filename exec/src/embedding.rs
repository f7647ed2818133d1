//! Sentence embeddings from a decoder: the final-normed hidden state of every position of a
//! text, mean-pooled and scaled to unit length (llama.cpp's `--pooling mean` with
//! `--embd-normalize 2`, what OpenAI's clients expect of `/v1/embeddings`).

use crate::block;
use crate::error::{ExecError, Result};
use crate::forward::PassInput;
use crate::session::Executor;

/// The unit-length mean of the final-normed hidden states of `ids` (a fresh sequence),
/// `[hidden]`. Refuses an empty text.
pub fn mean_pooled(exec: &Executor, ids: &[u32]) -> Result<Vec<f32>> {
    if ids.is_empty() {
        return Err(ExecError::InvalidOption(
            "an embedding needs at least one token".into(),
        ));
    }
    let plan = exec.plan();
    let d = plan.surface.hidden;
    let mut session = exec.session();
    let x = session.stage_hidden(PassInput::Tokens(ids))?;
    if x.len() != ids.len() * d {
        return Err(ExecError::Internal(
            "the pass gave no hidden state per position".into(),
        ));
    }
    let mut normed = vec![0.0f32; x.len()];
    block::final_norm(exec.backend(), plan, &x, &mut normed);
    let mut mean = vec![0.0f64; d];
    for row in normed.chunks_exact(d) {
        mean.iter_mut().zip(row).for_each(|(m, &v)| *m += v as f64);
    }
    let len = mean.iter().map(|v| v * v).sum::<f64>().sqrt();
    if !(len.is_finite() && len > 0.0) {
        return Err(ExecError::Internal(format!(
            "the pooled hidden state has norm {len}"
        )));
    }
    Ok(mean.iter().map(|v| (v / len) as f32).collect())
}
