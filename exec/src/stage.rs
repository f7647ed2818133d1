//! One pipeline stage of a layer package: a [`PackageModel`]'s layer range run from tokens
//! (the stage owning the input boundary) or from the previous stage's activation file,
//! to hidden states for the next stage or, on the stage owning the output boundary, to the
//! logits of the last position. Each run is a fresh continuation (positions from 0) whose
//! key/value cache holds the stage's layers only. The arithmetic is the whole-model
//! pass's, split at layer boundaries, so the final logits are bit-identical to a
//! single-process run of the same prompt.

use std::sync::Arc;

use lql_storage::format::package::activation::{ActivationFrame, ActivationHeader, Expect};
use lql_storage::format::package::{PackageModel, StageSpan};
use lql_storage::{Model, OperandSource};

use crate::error::{ExecError, Result};
use crate::forward::PassInput;
use crate::plan::StageRange;
use crate::session::{Executor, Logits};

/// What a stage produced.
#[derive(Debug, Clone)]
pub enum StageOutput {
    /// Hidden states for the next stage.
    Hidden(ActivationFrame),
    /// The last position's logits (the stage owns the output boundary).
    Logits(Logits),
}

/// A loaded stage, ready to run.
#[derive(Debug, Clone)]
pub struct StageRunner {
    exec: Executor,
    span: StageSpan,
    model_id: String,
    manifest_sha256: String,
}

impl StageRunner {
    /// Prepare `pkg`'s stage (its model shared as `model`) on `threads` CPU threads.
    pub fn new(pkg: &PackageModel, model: Arc<Model>, threads: usize) -> Result<StageRunner> {
        StageRunner::with_identity(
            model,
            pkg.span,
            pkg.manifest.model_id.clone(),
            pkg.manifest_sha256.clone(),
            threads,
        )
    }

    /// Prepare the stage `span` of `model`, which was loaded from the package identified by
    /// `model_id` and the SHA-256 of its manifest.
    pub fn with_identity(
        model: Arc<Model>,
        span: StageSpan,
        model_id: String,
        manifest_sha256: String,
        threads: usize,
    ) -> Result<StageRunner> {
        let source: Arc<dyn OperandSource> = model;
        let exec = Executor::for_stage(
            source,
            threads,
            StageRange {
                first: span.first,
                last: span.last,
                input: span.input,
                output: span.output,
            },
        )?;
        Ok(StageRunner {
            exec,
            span,
            model_id,
            manifest_sha256,
        })
    }

    pub fn executor(&self) -> &Executor {
        &self.exec
    }

    pub fn span(&self) -> StageSpan {
        self.span
    }

    /// Run from token ids (the stage must own the input boundary).
    pub fn from_tokens(&self, ids: &[u32]) -> Result<StageOutput> {
        if !self.span.input {
            return Err(ExecError::InvalidOption(format!(
                "this stage starts at layer {}: give it the previous stage's activation file, not a prompt",
                self.span.first
            )));
        }
        self.run(PassInput::Tokens(ids), ids.to_vec())
    }

    /// Run from the previous stage's activations, refused by name when they belong to
    /// another package, another boundary or another width.
    pub fn from_frame(&self, frame: &ActivationFrame) -> Result<StageOutput> {
        frame.check_for(&Expect {
            manifest_sha256: &self.manifest_sha256,
            model_id: &self.model_id,
            first_layer: self.span.first as u64,
            hidden: self.exec.surface().hidden as u64,
        })?;
        if frame.header.position_start != 0 {
            return Err(ExecError::InvalidOption(
                "not supported yet: activations that continue an earlier stage run (position_start > 0)".into(),
            ));
        }
        self.run(
            PassInput::Hidden(&frame.data),
            frame.header.token_ids.clone(),
        )
    }

    fn run(&self, input: PassInput<'_>, token_ids: Vec<u32>) -> Result<StageOutput> {
        let mut session = self.exec.session();
        if self.span.output {
            return Ok(StageOutput::Logits(session.stage_logits(input)?));
        }
        let data = session.stage_hidden(input)?;
        let hidden = self.exec.surface().hidden;
        Ok(StageOutput::Hidden(ActivationFrame {
            header: ActivationHeader {
                version: 1,
                dtype: "f32".into(),
                layout: "token-major".into(),
                tokens: (data.len() / hidden.max(1)) as u64,
                hidden: hidden as u64,
                position_start: 0,
                layer_end: self.span.last as u64 + 1,
                layer_count: self.span.n_layers as u64,
                model_id: self.model_id.clone(),
                manifest_sha256: self.manifest_sha256.clone(),
                token_ids,
            },
            data,
        }))
    }
}
