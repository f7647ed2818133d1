//! The virtual tables' columns (the planner's default schema; an engine may override
//! it through [`crate::Catalog::table_columns`]).

use lql_grammar::Table;

/// The type of a column's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum ColumnType {
    Int,
    Float,
    Text,
    Bool,
}

impl std::fmt::Display for ColumnType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ColumnType::Int => "int",
            ColumnType::Float => "float",
            ColumnType::Text => "text",
            ColumnType::Bool => "bool",
        })
    }
}

/// One column of a virtual table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ColumnDef {
    pub name: String,
    pub ty: ColumnType,
}

impl ColumnDef {
    pub fn new(name: &str, ty: ColumnType) -> Self {
        ColumnDef {
            name: name.to_string(),
            ty,
        }
    }
}

/// The built-in columns of each virtual table.
pub fn default_columns(table: Table) -> Vec<ColumnDef> {
    use ColumnType::*;
    let cols: &[(&str, ColumnType)] = match table {
        // One row per FFN feature (gate row): its top output token and score.
        Table::Features => &[
            ("layer", Int),
            ("feature", Int),
            ("token", Text),
            ("score", Float),
            ("down", Text),
        ],
        // Knowledge edges: (entity) -[relation]-> (target) held by a feature.
        Table::Edges => &[
            ("entity", Text),
            ("relation", Text),
            ("target", Text),
            ("layer", Int),
            ("feature", Int),
            ("gate", Float),
            ("score", Float),
            ("source", Text),
        ],
        Table::Layers => &[
            ("layer", Int),
            ("features", Int),
            ("gate_encoding", Text),
            ("down_encoding", Text),
            ("bytes", Int),
        ],
        Table::Tokens => &[("token_id", Int), ("token", Text)],
        Table::Tensors => &[
            ("name", Text),
            ("layer", Int),
            ("role", Text),
            ("dtype", Text),
            ("shape", Text),
            ("bytes", Int),
        ],
        Table::Representations => &[
            ("object", Text),
            ("encoding", Text),
            ("fidelity", Text),
            ("bytes", Int),
        ],
    };
    cols.iter().map(|(n, t)| ColumnDef::new(n, *t)).collect()
}
