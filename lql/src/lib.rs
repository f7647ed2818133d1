//! # lql: Connection, Statement, Rows, Value — the engine and its embedding API.
