//! Importers: judge a source's architecture once and produce a [`crate::Model`].
//!
//! [`open`] detects the kind of source (a GGUF file by its magic, a Hugging Face folder by
//! its `config.json`, a VINDEX3 container by its `index.json`, a layer package by its
//! `model-package.json`) and hands it to the importer
//! for that kind. Family knowledge (tensor names, RoPE pairing, biases, tied head) lives
//! here and nowhere else.

pub mod experts;
pub mod family;
pub mod fused;
pub mod gguf;
pub mod hf;
pub mod metadata;
pub mod operand_table;
pub mod validate;

use std::io::Read;
use std::path::Path;

use crate::error::{Result, StorageError};
use crate::model::Model;

/// What kind of source a path holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceFormat {
    Gguf,
    HfFolder,
    Vindex3,
    /// A layer package folder (seed 000).
    Package,
}

/// Detect the kind of source at `path`.
pub fn detect(path: &Path) -> Result<SourceFormat> {
    let meta = std::fs::metadata(path).map_err(|e| StorageError::io(path, e))?;
    if meta.is_dir() {
        // Presence decides the kind; the reader then refuses a FIFO, a directory or a
        // symlink out of the folder by name.
        let present = |name: &str| std::fs::symlink_metadata(path.join(name)).is_ok();
        if present("index.json") {
            return Ok(SourceFormat::Vindex3);
        }
        if present(crate::format::package::MANIFEST_NAME) {
            return Ok(SourceFormat::Package);
        }
        if present("config.json") {
            return Ok(SourceFormat::HfFolder);
        }
        return Err(StorageError::Unsupported(format!(
            "{}: a folder with no index.json (VINDEX3), config.json (Hugging Face) or model-package.json (layer package)",
            path.display()
        )));
    }
    let mut magic = [0u8; 4];
    // A regular file only: a FIFO or a device is refused before a byte is read.
    let (mut f, _) = crate::fsutil::open_regular(path, "model file")?;
    let n = f.read(&mut magic).map_err(|e| StorageError::io(path, e))?;
    if n == 4 && magic == crate::format::gguf::MAGIC {
        return Ok(SourceFormat::Gguf);
    }
    Err(StorageError::Format {
        path: path.to_path_buf(),
        offset: 0,
        field: "magic".into(),
        // The file's bytes are not quoted: the caller may not be allowed to read them.
        message: "not a model LQL can open (expected a GGUF file, a Hugging Face folder or a VINDEX3 container)".into(),
    })
}

/// Open any supported model source.
pub fn open(path: &Path) -> Result<Model> {
    match detect(path)? {
        SourceFormat::Gguf => gguf::open(path),
        SourceFormat::HfFolder => hf::open(path),
        SourceFormat::Vindex3 => crate::format::vindex3::open_model(path),
        SourceFormat::Package => {
            let verify = crate::format::package::VerifyMode::default_local();
            crate::format::package::open_package(path, None, &verify).map(|p| p.model)
        }
    }
}
