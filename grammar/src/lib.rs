//! # lql-grammar: LQL text → AST (every node carries a byte span) → syntax diagnostics.
