//! Shared test helpers: locating the real SmolLM2 model.

#![allow(dead_code)]

use std::path::PathBuf;

/// The SmolLM2 GGUF: `LQL_TEST_MODEL` if set, else the catalogue's cached copy (resolved,
/// and downloaded if missing, through the catalogue).
pub fn smollm2() -> PathBuf {
    if let Some(p) = std::env::var_os("LQL_TEST_MODEL") {
        return PathBuf::from(p);
    }
    lql_storage::catalogue::resolve("smollm2-135m-instruct", &mut |_| {})
        .expect("resolve smollm2-135m-instruct through the catalogue")
}
