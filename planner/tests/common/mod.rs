//! Shared test fixtures: the facts of SmolLM2-135M as the planner sees them.

use lql_planner::{ModelFacts, SourceKind};

/// SmolLM2-135M bound from its GGUF: every capability, Q4_1 gates.
pub fn smollm() -> ModelFacts {
    ModelFacts {
        name: "smollm2".into(),
        source: SourceKind::Gguf,
        n_layers: 30,
        vocab: 49152,
        hidden: 576,
        ffn: 1536,
        n_heads: 9,
        context_length: Some(8192),
        can_execute: true,
        can_browse: true,
        can_tokenize: true,
        gate_encoding: Some("Q4_1".into()),
        // Q4_1: 24 bytes per 32 values; 1536 rows of 576.
        gate_bytes_per_layer: Some(1536 * 576 / 32 * 24),
        stored_labels: None,
        ..Default::default()
    }
}
