//! The user's catalogue file: named models added without recompiling.
//!
//! `$LQL_HOME/catalogue.json` (default `~/.cache/lql/catalogue.json`, beside the `models/`
//! cache) lists models in the same shape as the built-in catalogue
//! ([`crate::catalogue::ENTRIES`]): a file shipped as a member of a PyPI package wheel,
//! with its size and SHA-256. A missing file is an empty list. A malformed one is refused
//! whole, naming the file, the entry and the field (no entry of a bad file is used):
//!
//! ```json
//! { "models": [
//!   { "name": "my-model", "package": "llm-mine", "version": "1.0.0",
//!     "member": "llm_mine/model.Q8_0.gguf", "sha256": "<64 lower-case hex digits>",
//!     "size": 123456789, "licence": "MIT", "file_name": "my-model.gguf" } ] }
//! ```
//!
//! Rules: `name` is 1–64 characters of `a-z 0-9 . _ -` and names no built-in or earlier
//! entry (case-insensitive); `file_name` is a plain file name (no folder, not hidden) used
//! by no other entry; `member` is a relative path inside the wheel; `size` is 1 byte to
//! [`MAX_MODEL_BYTES`]; every text field is non-empty; unknown keys are refused; the file
//! holds at most [`MAX_ENTRIES`] models and [`MAX_FILE_BYTES`] bytes.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::catalogue::CatalogueEntry;
use crate::error::{Result, StorageError};

/// The name of the file in `$LQL_HOME`.
pub const FILE_NAME: &str = "catalogue.json";
/// Largest catalogue file read.
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// Most entries a catalogue file may hold.
pub const MAX_ENTRIES: usize = 1000;
/// Largest model size an entry may declare (1 TiB).
pub const MAX_MODEL_BYTES: u64 = 1 << 40;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileShape {
    models: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryShape {
    name: String,
    package: String,
    version: String,
    member: String,
    sha256: String,
    size: u64,
    licence: String,
    file_name: String,
}

/// Where the user's catalogue file is: `$LQL_HOME/catalogue.json`, else
/// `~/.cache/lql/catalogue.json`.
pub fn path() -> Result<PathBuf> {
    if let Some(h) = std::env::var_os("LQL_HOME").filter(|h| !h.is_empty()) {
        return Ok(PathBuf::from(h).join(FILE_NAME));
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".cache").join("lql").join(FILE_NAME)),
        None => Err(StorageError::Invalid(
            "cannot locate the catalogue file: neither LQL_HOME nor HOME is set".into(),
        )),
    }
}

fn bad(path: &Path, field: String, message: String) -> StorageError {
    StorageError::Format {
        path: path.to_path_buf(),
        offset: 0,
        field,
        message,
    }
}

/// The entries of the catalogue file at `path` (none when it does not exist), checked
/// against `builtin` and each other.
pub fn load(path: &Path, builtin: &[CatalogueEntry]) -> Result<Vec<CatalogueEntry>> {
    let Some(text) = crate::fsutil::read_optional_text(path, "catalogue file", MAX_FILE_BYTES)?
    else {
        return Ok(Vec::new());
    };
    let doc = crate::json_strict::parse(text.as_bytes())
        .map_err(|e| bad(path, "catalogue".into(), e.to_string()))?;
    let shape: FileShape = serde_json::from_value(doc).map_err(|e| {
        bad(
            path,
            "catalogue".into(),
            format!("{e} (expected {{\"models\": [ … ]}})"),
        )
    })?;
    if shape.models.len() > MAX_ENTRIES {
        return Err(bad(
            path,
            "models".into(),
            format!(
                "{} models; at most {MAX_ENTRIES} are allowed",
                shape.models.len()
            ),
        ));
    }
    let mut out: Vec<CatalogueEntry> = Vec::with_capacity(shape.models.len());
    for (i, v) in shape.models.into_iter().enumerate() {
        let label = v.get("name").and_then(|n| n.as_str()).map_or_else(
            || format!("models[{i}]"),
            |n| format!("models[{i}] ({n:?})"),
        );
        let e: EntryShape =
            serde_json::from_value(v).map_err(|e| bad(path, label.clone(), e.to_string()))?;
        let field = |f: &str| format!("{label}.{f}");
        for (f, val) in [
            ("package", &e.package),
            ("version", &e.version),
            ("licence", &e.licence),
        ] {
            if val.trim().is_empty() {
                return Err(bad(path, field(f), "must not be empty".into()));
            }
        }
        let name_ok = !e.name.is_empty()
            && e.name.len() <= 64
            && e.name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c));
        if !name_ok {
            return Err(bad(
                path,
                field("name"),
                format!(
                    "{:?} is not a model name (1-64 characters of a-z 0-9 . _ -)",
                    e.name
                ),
            ));
        }
        if builtin
            .iter()
            .chain(&out)
            .any(|b| b.name.eq_ignore_ascii_case(&e.name))
        {
            return Err(bad(
                path,
                field("name"),
                format!("{:?} is already in the catalogue", e.name),
            ));
        }
        let plain = Path::new(&e.file_name)
            .file_name()
            .is_some_and(|f| f == e.file_name.as_str());
        if !plain || e.file_name.starts_with('.') {
            return Err(bad(
                path,
                field("file_name"),
                format!(
                    "{:?} is not a plain file name (no folder, not hidden)",
                    e.file_name
                ),
            ));
        }
        if builtin
            .iter()
            .chain(&out)
            .any(|b| b.file_name == e.file_name)
        {
            return Err(bad(
                path,
                field("file_name"),
                format!("{:?} is already used by another model", e.file_name),
            ));
        }
        let member_ok = !e.member.is_empty()
            && Path::new(&e.member)
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !member_ok {
            return Err(bad(
                path,
                field("member"),
                format!("{:?} is not a relative path inside the wheel", e.member),
            ));
        }
        if e.sha256.len() != 64
            || !e
                .sha256
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
        {
            return Err(bad(
                path,
                field("sha256"),
                "must be 64 lower-case hex digits".into(),
            ));
        }
        if e.size == 0 || e.size > MAX_MODEL_BYTES {
            return Err(bad(
                path,
                field("size"),
                format!("{} bytes is outside 1..={MAX_MODEL_BYTES}", e.size),
            ));
        }
        out.push(CatalogueEntry {
            name: e.name,
            package: e.package,
            version: e.version,
            member: e.member,
            continued: Vec::new(),
            sha256: e.sha256,
            size: e.size,
            licence: e.licence,
            file_name: e.file_name,
        });
    }
    Ok(out)
}
