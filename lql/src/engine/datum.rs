//! The typed values that flow between operators of a running plan.

use std::sync::Arc;

use lql_exec::browse::residual::CapturedLayer;
use lql_exec::browse::{FeatureLabel, WalkResult};
use lql_exec::trace::{LogitLens, Trace, TraceCapture};
use lql_exec::{Generation, Logits, Session, TopToken};

use crate::rows::{Column, Rows};
use crate::value::Value;

/// What one operator hands to the next.
pub(crate) enum Datum {
    /// Token ids of a prompt.
    Tokens(Vec<u32>),
    /// One query vector for every layer (EMBEDDING browse).
    Query {
        tokens: Vec<u32>,
        query: Vec<f32>,
    },
    /// A prefilled continuation and its last position's residual (before the final norm);
    /// a trace capture rides along when TRACE (or EXPLAIN INFER's tap) asked for one.
    Prefilled {
        session: Session,
        residual: Vec<f32>,
        capture: Option<TraceCapture>,
        tokens: Vec<u32>,
    },
    /// The normed FFN inputs (and activations) of the last position, per layer run.
    FfnCaptures {
        tokens: Vec<u32>,
        layers: Vec<usize>,
        caps: Vec<CapturedLayer>,
    },
    Logits(Logits),
    Top(Vec<TopToken>),
    Generation(Generation),
    /// Gate-scan hits per layer.
    Hits(WalkResult),
    /// Hits with their labels, in hit order.
    Labeled {
        hits: WalkResult,
        labels: Vec<Arc<FeatureLabel>>,
    },
    /// A captured trace and, once LogitLens ran, its lens.
    Trace {
        trace: Trace,
        lens: Option<LogitLens>,
        decompose: bool,
    },
    /// Rows of a table scan, in the table's full column shape.
    Table {
        columns: Vec<Column>,
        rows: Vec<Vec<Value>>,
    },
    /// A model opened as the source of a write (EXTRACT).
    Source(Box<lql_storage::Model>),
    /// A model state DIFF or COMPILE reads (the bound model's state, or a model opened by path).
    Material(Arc<dyn lql_storage::material::MaterialSource>),
    /// Finished rows.
    Rows(Rows),
    /// Rows pulled on demand (`stream.rs`).
    Stream(super::stream::Stream),
}

impl Datum {
    /// Rows (or items) this value holds, for EXPLAIN ANALYZE.
    pub fn count(&self) -> usize {
        match self {
            Datum::Tokens(t) => t.len(),
            Datum::Query { .. } => 1,
            Datum::Prefilled { tokens, .. } => tokens.len(),
            Datum::FfnCaptures { caps, .. } => caps.len(),
            Datum::Logits(_) => 1,
            Datum::Top(t) => t.len(),
            Datum::Generation(g) => g.generated_tokens,
            Datum::Hits(h) | Datum::Labeled { hits: h, .. } => h.hits().count(),
            Datum::Trace { trace, .. } => trace.positions.len() * (trace.n_layers() + 1),
            Datum::Table { rows, .. } => rows.len(),
            Datum::Source(_) | Datum::Material(_) => 1,
            Datum::Rows(r) => r.len(),
            // Counted as they are pulled.
            Datum::Stream(_) => 0,
        }
    }

    /// The kind of value, for internal errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Datum::Tokens(_) => "tokens",
            Datum::Query { .. } => "query",
            Datum::Prefilled { .. } => "prefilled",
            Datum::FfnCaptures { .. } => "ffn captures",
            Datum::Logits(_) => "logits",
            Datum::Top(_) => "top tokens",
            Datum::Generation(_) => "generation",
            Datum::Hits(_) => "hits",
            Datum::Labeled { .. } => "labeled hits",
            Datum::Trace { .. } => "trace",
            Datum::Table { .. } => "table",
            Datum::Source(_) => "source model",
            Datum::Material(_) => "model state",
            Datum::Rows(_) => "rows",
            Datum::Stream(_) => "row stream",
        }
    }
}
