//! # lql-planner: AST → LogicalPlan (bound against a Catalog) → PhysicalPlan; EXPLAIN text.
//!
//! ```text
//!  Statement (lql-grammar) ──bind(stmt, &dyn Catalog)──▶ LogicalPlan ──lower──▶ PhysicalPlan
//!                                   │ PlanError { kind, message, span, labels, help }
//! ```
//!
//! **Architecture invariant:** semantic checks live here and nowhere earlier: the bound
//! model (through [`Catalog`]), layer ranges, counts, capabilities (browse vs execute),
//! table columns. Every refusal carries the span of the clause that caused it. The
//! planner does not decide what the engine has built: every statement binds to a
//! [`LogicalPlan`], and the engine refuses unbuilt ones by [`LogicalPlan::name`].
//!
//! ```
//! use lql_planner::{bind, lower, ModelFacts};
//! let facts = ModelFacts {
//!     name: "m".into(), n_layers: 30, vocab: 49152, hidden: 576, ffn: 1536,
//!     can_execute: true, can_browse: true, can_tokenize: true, ..Default::default()
//! };
//! let stmt = lql_grammar::parse_statement("WALK 'France' TOP 5 LAYERS 20-29").unwrap();
//! let plan = bind(&stmt, &facts).unwrap();
//! assert_eq!(plan.name(), "WALK");
//! assert!(lower(&plan).to_string().contains("GateScan layers=20-29 top=5"));
//! ```

mod bind;
pub mod catalog;
pub mod effects;
pub mod error;
pub mod logical;
pub mod physical;
mod pushdown;
mod relation;
pub mod schema;
mod select;
mod typecheck;
mod unbuilt;

pub use bind::{
    bind, bind_steering, default_edit_layer, DEFAULT_ALPHA, DEFAULT_ANALYZE_TOP,
    DEFAULT_EDIT_LAYER_FRACTION, DEFAULT_INFER_TOP, DEFAULT_MAX_TOKENS, DEFAULT_WALK_TOP,
    MAX_ANALYZE_TOP, MAX_FEATURE_SCALE, MAX_WHERE_NODES, SUBJECT_LAYER_FRACTION,
};
pub use catalog::{Catalog, EmptyCatalog, ModelFacts, SourceKind};
pub use effects::{effects, steering_effects, Effects, FileRef, StateChange};
pub use error::{PlanError, PlanErrorCode, PlanErrorKind};
pub use logical::*;
pub use physical::{
    lower, Capture, GateQuery, Operator, PhysicalPlan, PlanNode, RowShape, TextRole,
};
pub use schema::{
    analyze_features_columns, evaluate_edits_columns, show_columns, statement_columns,
    table_columns, table_requires, ColumnDef, ColumnType, QUERYABLE_TABLES,
};
pub use unbuilt::check_built;
