//! Browse: WALK, DESCRIBE and the virtual tables of SELECT, computed on gate regions read in
//! place.
//!
//! ```text
//!  tokens ─▶ query vector ─┬─ EMBEDDING: embedding row(s) × embedding_scale (no layer runs)
//!                          └─ RESIDUAL:  the normed FFN input of the last position, observed
//!                                        while the model runs (score = gate pre-activation)
//!        ─▶ gate_scan  (gate rows · query on the stored encoding, top-k by |score|)
//!        ─▶ labels     (unembedding · down column: the tokens a feature writes toward)
//!        ─▶ walk / describe / tables (rows for the engine)
//! ```
//!
//! Features are numbered `layer:feature` (seed 002 §15.3): `feature` is the gate row index
//! within its layer. Labels are derived metadata, computed lazily and cached per binding
//! ([`labels::LabelCache`]); see `docs/browse.md` for the measurements behind that choice.

pub mod corpus;
pub mod describe;
pub mod experts;
pub mod gate_scan;
pub mod labels;
pub mod query;
pub mod residual;
pub mod tables;
pub mod topk;
pub mod vocab;
pub mod walk;

pub use describe::{
    describe, Band, DescribeEdge, DescribeOptions, DescribeResult, Detail, REFERENCE_WORDS,
};

pub use experts::{BankLayout, ExpertHit, ExpertId};
pub use gate_scan::{scan_layers, GateRegion, LayerHits};
pub use labels::{FeatureLabel, LabelCache, LabelSource};
pub use topk::Hit;
pub use vocab::Vocab;
pub use walk::{walk, WalkHit, WalkLayer, WalkMode, WalkOptions, WalkResult};
