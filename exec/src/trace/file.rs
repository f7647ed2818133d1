//! The `.trace` file: a captured forward pass on disk, loadable back.
//!
//! ```text
//!  offset 0   magic      8 bytes  "LQLTRACE"
//!         8   version    u32 LE   1
//!        12   reserved   u32 LE   0
//!        16   header_len u64 LE   length of the JSON header
//!        24   header     JSON     {"version":1, "tokens":[…], "positions":[…], "hidden":…,
//!                                  "ffn":…, "n_heads":…, "n_layers":…, "context":…,
//!                                  "meta":{…}, "arrays":[{"name","dtype":"f32","shape",
//!                                  "offset"}]}
//!             zero padding up to a multiple of 64: the data section starts there
//!  data       each array: raw little-endian f32, row-major, at `offset` bytes from the
//!             start of the data section (64-aligned)
//! ```
//!
//! Arrays: `embedding [k, hidden]`; `residual`, `attn_delta`, `ffn_delta`, `ffn_input`
//! `[n_layers, k, hidden]`; optionally `gate`, `activation` `[n_layers, k, ffn]` and
//! `attention [n_layers, k, n_heads, context]`; `final_logits [vocab]` when present. The
//! features edits added to a layer (numbered `ffn + i`) have their own arrays, since layers
//! differ in how many they have: `added_gate.L`, `added_activation.L` `[k, added]` for each
//! layer `L` that has any (with `gate`/`activation`).
//! Loading never trusts a size it has not checked against the file's length. Saving writes
//! a temporary file beside the target, syncs it and renames it last.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::capture::{LayerCapture, Trace};
use crate::error::{ExecError, Result};

/// The file's first 8 bytes.
pub const MAGIC: &[u8; 8] = b"LQLTRACE";
/// The version this code writes and reads.
pub const VERSION: u32 = 1;
/// Alignment of the data section and of every array in it.
const ALIGN: usize = 64;
/// A header longer than this is refused (it describes a few dozen arrays).
const MAX_HEADER: u64 = 16 << 20;
/// Largest `.trace` file read.
const MAX_FILE: u64 = 4 << 30;

/// Picks one matrix of a layer's capture.
type Pick = for<'c> fn(&'c LayerCapture) -> Option<&'c Vec<f32>>;

/// One array of a trace file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayInfo {
    pub name: String,
    /// Always `"f32"` in version 1.
    pub dtype: String,
    pub shape: Vec<usize>,
    /// Bytes from the start of the data section.
    pub offset: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Header {
    version: u32,
    tokens: Vec<u32>,
    positions: Vec<usize>,
    hidden: usize,
    ffn: usize,
    n_heads: usize,
    n_layers: usize,
    context: usize,
    #[serde(default)]
    meta: serde_json::Value,
    arrays: Vec<ArrayInfo>,
}

/// The sizes recorded in a trace file's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceDims {
    pub hidden: usize,
    pub ffn: usize,
    pub n_heads: usize,
    pub n_layers: usize,
    /// The prompt's length in tokens.
    pub context: usize,
}

/// A trace as stored: the header's facts and the arrays.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceFile {
    header: Header,
    data: Vec<Vec<f32>>,
}

fn fmt_err(path: &Path, what: impl Into<String>) -> ExecError {
    ExecError::TraceFormat {
        path: path.to_path_buf(),
        what: what.into(),
    }
}

impl TraceFile {
    /// The file form of `trace`; `meta` is free JSON kept in the header (prompt, model, …).
    pub fn from_trace(trace: &Trace, meta: serde_json::Value) -> TraceFile {
        let k = trace.positions.len();
        let l = trace.layers.len();
        let (d, f) = (trace.hidden, trace.ffn);
        let mut arrays = Vec::new();
        let mut data = Vec::new();
        let mut push = |name: &str, shape: Vec<usize>, v: Vec<f32>| {
            arrays.push(ArrayInfo {
                name: name.to_string(),
                dtype: "f32".into(),
                shape,
                offset: 0,
            });
            data.push(v);
        };
        push("embedding", vec![k, d], trace.embedding.clone());
        let stack = |get: Pick| -> Option<Vec<f32>> {
            let mut out = Vec::new();
            for layer in &trace.layers {
                out.extend_from_slice(get(layer)?);
            }
            Some(out)
        };
        let dense: [(&str, Pick); 4] = [
            ("residual", |c| Some(&c.residual)),
            ("attn_delta", |c| Some(&c.attn_delta)),
            ("ffn_delta", |c| Some(&c.ffn_delta)),
            ("ffn_input", |c| Some(&c.ffn_input)),
        ];
        for (name, get) in dense {
            if let Some(v) = stack(get) {
                push(name, vec![l, k, d], v);
            }
        }
        if l > 0 {
            if let Some(v) = stack(|c| c.gate.as_ref()) {
                push("gate", vec![l, k, f], v);
            }
            if let Some(v) = stack(|c| c.activation.as_ref()) {
                push("activation", vec![l, k, f], v);
            }
            if let Some(v) = stack(|c| c.attention.as_ref()) {
                push("attention", vec![l, k, trace.n_heads, trace.context], v);
            }
            for c in &trace.layers {
                for (name, m) in [
                    ("added_gate", &c.added_gate),
                    ("added_activation", &c.added_activation),
                ] {
                    if let Some(v) = m.as_ref().filter(|v| !v.is_empty() && k > 0) {
                        push(
                            &format!("{name}.{}", c.layer),
                            vec![k, v.len() / k],
                            v.clone(),
                        );
                    }
                }
            }
        }
        if !trace.final_logits.is_empty() {
            push(
                "final_logits",
                vec![trace.final_logits.len()],
                trace.final_logits.clone(),
            );
        }
        let mut offset = 0u64;
        for (a, v) in arrays.iter_mut().zip(&data) {
            a.offset = offset;
            offset += (v.len() * 4).next_multiple_of(ALIGN) as u64;
        }
        TraceFile {
            header: Header {
                version: VERSION,
                tokens: trace.tokens.clone(),
                positions: trace.positions.clone(),
                hidden: d,
                ffn: f,
                n_heads: trace.n_heads,
                n_layers: l,
                context: trace.context,
                meta,
                arrays,
            },
            data,
        }
    }

    /// The arrays described by the header, in file order.
    pub fn arrays(&self) -> &[ArrayInfo] {
        &self.header.arrays
    }

    /// An array's values by name.
    pub fn array(&self, name: &str) -> Option<&[f32]> {
        let i = self.header.arrays.iter().position(|a| a.name == name)?;
        Some(&self.data[i])
    }

    /// The free JSON saved with the trace.
    pub fn meta(&self) -> &serde_json::Value {
        &self.header.meta
    }

    pub fn tokens(&self) -> &[u32] {
        &self.header.tokens
    }

    pub fn positions(&self) -> &[usize] {
        &self.header.positions
    }

    /// The model's sizes the trace was captured with.
    pub fn dims(&self) -> TraceDims {
        let h = &self.header;
        TraceDims {
            hidden: h.hidden,
            ffn: h.ffn,
            n_heads: h.n_heads,
            n_layers: h.n_layers,
            context: h.context,
        }
    }

    /// The arrays with their values, in file order (the buffers move out, uncopied).
    pub fn into_arrays(self) -> Vec<(ArrayInfo, Vec<f32>)> {
        self.header.arrays.into_iter().zip(self.data).collect()
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let json = serde_json::to_vec(&self.header)
            .map_err(|e| ExecError::Internal(format!("trace header: {e}")))?;
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(json.len() as u64).to_le_bytes());
        out.extend_from_slice(&json);
        out.resize(out.len().next_multiple_of(ALIGN), 0);
        let base = out.len();
        for (a, v) in self.header.arrays.iter().zip(&self.data) {
            out.resize(base + a.offset as usize, 0);
            for x in v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
        out.resize(out.len().next_multiple_of(ALIGN), 0);
        Ok(out)
    }

    /// Writes the file: a temporary name beside `path`, synced, then renamed over `path`.
    pub fn save(&self, path: &Path) -> Result<()> {
        write_atomically(path, &self.to_bytes()?)
    }

    /// Reads and checks a `.trace` file.
    pub fn load(path: &Path) -> Result<TraceFile> {
        // A regular file only (a FIFO would hang the read), under a size cap.
        let bytes = lql_storage::fsutil::read_capped(path, "trace file", MAX_FILE)?;
        TraceFile::from_bytes(path, &bytes)
    }

    /// Parses a file's bytes (`path` only names it in errors).
    pub fn from_bytes(path: &Path, bytes: &[u8]) -> Result<TraceFile> {
        if bytes.len() < 24 || &bytes[..8] != MAGIC {
            return Err(fmt_err(path, "missing the LQLTRACE magic"));
        }
        let u32_at =
            |o: usize| u32::from_le_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
        let version = u32_at(8);
        if version != VERSION {
            return Err(fmt_err(
                path,
                format!("version {version} (this build reads version {VERSION})"),
            ));
        }
        let mut hl = [0u8; 8];
        hl.copy_from_slice(&bytes[16..24]);
        let header_len = u64::from_le_bytes(hl);
        if header_len > MAX_HEADER || header_len > (bytes.len() - 24) as u64 {
            return Err(fmt_err(
                path,
                format!(
                    "header length {header_len} at offset 16 exceeds the file ({} bytes)",
                    bytes.len()
                ),
            ));
        }
        let hend = 24 + header_len as usize;
        let header: Header = serde_json::from_slice(&bytes[24..hend])
            .map_err(|e| fmt_err(path, format!("header JSON at offset 24: {e}")))?;
        if header.version != VERSION {
            return Err(fmt_err(
                path,
                format!("header version {} (expected {VERSION})", header.version),
            ));
        }
        let base = hend.next_multiple_of(ALIGN);
        let data_len = bytes.len().saturating_sub(base);
        let mut data = Vec::with_capacity(header.arrays.len().min(64));
        for (i, a) in header.arrays.iter().enumerate() {
            if header.arrays[..i].iter().any(|b| b.name == a.name) {
                return Err(fmt_err(path, format!("array {:?} appears twice", a.name)));
            }
            if a.dtype != "f32" {
                return Err(fmt_err(
                    path,
                    format!(
                        "array {:?}: dtype {:?} (only f32 is defined)",
                        a.name, a.dtype
                    ),
                ));
            }
            let count = a
                .shape
                .iter()
                .try_fold(1usize, |acc, &x| acc.checked_mul(x))
                .ok_or_else(|| fmt_err(path, format!("array {:?}: shape overflows", a.name)))?;
            let nbytes = count
                .checked_mul(4)
                .ok_or_else(|| fmt_err(path, format!("array {:?}: size overflows", a.name)))?;
            let start = usize::try_from(a.offset).unwrap_or(usize::MAX);
            let end = start.checked_add(nbytes);
            let Some(end) = end.filter(|&e| e <= data_len && start % 4 == 0) else {
                return Err(fmt_err(
                    path,
                    format!(
                        "array {:?}: {nbytes} bytes at data offset {} do not fit the {data_len}-byte data section",
                        a.name, a.offset
                    ),
                ));
            };
            let raw = &bytes[base + start..base + end];
            data.push(
                raw.chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            );
        }
        Ok(TraceFile { header, data })
    }

    /// The trace again, checking that every array has the shape the header implies.
    pub fn to_trace(&self, path: &Path) -> Result<Trace> {
        let h = &self.header;
        let k = h.positions.len();
        let (l, d, f) = (h.n_layers, h.hidden, h.ffn);
        let get = |name: &str, shape: &[usize], required: bool| -> Result<Option<&[f32]>> {
            match self.header.arrays.iter().position(|a| a.name == name) {
                None if required => Err(fmt_err(path, format!("array {name:?} is missing"))),
                None => Ok(None),
                Some(i) if self.header.arrays[i].shape != shape => Err(fmt_err(
                    path,
                    format!(
                        "array {name:?} has shape {:?}, expected {shape:?}",
                        self.header.arrays[i].shape
                    ),
                )),
                Some(i) => Ok(Some(&self.data[i])),
            }
        };
        let embedding = get("embedding", &[k, d], true)?
            .unwrap_or_default()
            .to_vec();
        let stacked = [l, k, d];
        let residual = get("residual", &stacked, true)?.unwrap_or_default();
        let attn = get("attn_delta", &stacked, true)?.unwrap_or_default();
        let ffn_delta = get("ffn_delta", &stacked, true)?.unwrap_or_default();
        let ffn_input = get("ffn_input", &stacked, true)?.unwrap_or_default();
        let gate = get("gate", &[l, k, f], false)?;
        let activation = get("activation", &[l, k, f], false)?;
        let attention = get("attention", &[l, k, h.n_heads, h.context], false)?;
        let final_logits = self
            .header
            .arrays
            .iter()
            .position(|a| a.name == "final_logits" && a.shape.len() == 1)
            .map(|i| self.data[i].clone())
            .unwrap_or_default();
        let slice = |m: &[f32], i: usize, w: usize| m[i * k * w..(i + 1) * k * w].to_vec();
        // Added features' arrays: `[k, added]` each, named by layer.
        let added = |name: &str, i: usize| -> Result<Option<Vec<f32>>> {
            let name = format!("{name}.{i}");
            match self.header.arrays.iter().position(|a| a.name == name) {
                None => Ok(None),
                Some(j) => {
                    let shape = &self.header.arrays[j].shape;
                    if shape.len() != 2 || shape[0] != k {
                        return Err(fmt_err(
                            path,
                            format!("array {name:?} has shape {shape:?}, expected [{k}, added]"),
                        ));
                    }
                    Ok(Some(self.data[j].clone()))
                }
            }
        };
        let added_arrays = (0..l)
            .map(|i| Ok((added("added_gate", i)?, added("added_activation", i)?)))
            .collect::<Result<Vec<_>>>()?;
        let layers = (0..l)
            .map(|i| LayerCapture {
                layer: i,
                residual: slice(residual, i, d),
                attn_delta: slice(attn, i, d),
                ffn_delta: slice(ffn_delta, i, d),
                ffn_input: slice(ffn_input, i, d),
                gate: gate.map(|g| slice(g, i, f)),
                activation: activation.map(|g| slice(g, i, f)),
                added_gate: added_arrays[i].0.clone(),
                added_activation: added_arrays[i].1.clone(),
                attention: attention.map(|a| slice(a, i, h.n_heads * h.context)),
            })
            .collect();
        if h.positions.windows(2).any(|w| w[0] >= w[1]) {
            return Err(fmt_err(path, "positions are not ascending"));
        }
        Ok(Trace {
            tokens: h.tokens.clone(),
            positions: h.positions.clone(),
            hidden: d,
            ffn: f,
            n_heads: h.n_heads,
            context: h.context,
            embedding,
            layers,
            final_logits,
        })
    }
}

/// Writes `bytes` to `path` the way every LQL writer does (`lql_storage::fsutil`): an
/// exclusive temporary file with an unpredictable name beside `path` (a planted symlink is
/// never followed), synced, renamed over `path` only when `path` is absent or a regular
/// file (a device, a directory or a symlink is refused), then the folder synced.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    if path.file_name().is_none() {
        return Err(ExecError::Invalid(format!(
            "{} is not a file name",
            path.display()
        )));
    }
    lql_storage::fsutil::write_atomic(path, bytes).map_err(ExecError::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Trace {
        let layer = |i: usize| LayerCapture {
            layer: i,
            residual: vec![i as f32; 6],
            attn_delta: vec![1.5; 6],
            ffn_delta: vec![-2.0; 6],
            ffn_input: vec![0.25; 6],
            gate: None,
            activation: None,
            added_gate: None,
            added_activation: None,
            attention: Some(vec![0.5; 2 * 2 * 3]),
        };
        Trace {
            tokens: vec![1, 2, 3],
            positions: vec![1, 2],
            hidden: 3,
            ffn: 4,
            n_heads: 2,
            context: 3,
            embedding: vec![0.1, 0.2, 0.3, 0.4, 0.5, 0.6],
            layers: vec![layer(0), layer(1)],
            final_logits: vec![1.0, 2.0],
        }
    }

    #[test]
    fn round_trip_bytes() {
        let t = tiny();
        let f = TraceFile::from_trace(&t, serde_json::json!({"prompt": "x"}));
        let bytes = f.to_bytes().unwrap();
        let p = Path::new("mem.trace");
        let back = TraceFile::from_bytes(p, &bytes).unwrap();
        assert_eq!(back, f);
        assert_eq!(back.to_trace(p).unwrap(), t);
        assert_eq!(back.meta()["prompt"], "x");
    }

    #[test]
    fn added_features_round_trip_per_layer() {
        let mut t = tiny();
        t.layers[1].gate = Some(vec![0.5; 2 * 4]);
        t.layers[0].gate = Some(vec![0.25; 2 * 4]);
        t.layers[1].added_gate = Some(vec![3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        t.layers[1].added_activation = Some(vec![1.0; 6]);
        let f = TraceFile::from_trace(&t, serde_json::Value::Null);
        assert_eq!(
            f.arrays()
                .iter()
                .find(|a| a.name == "added_gate.1")
                .map(|a| a.shape.clone()),
            Some(vec![2, 3])
        );
        let p = Path::new("added.trace");
        let back = TraceFile::from_bytes(p, &f.to_bytes().unwrap()).unwrap();
        assert_eq!(back.to_trace(p).unwrap(), t);
    }

    #[test]
    fn hostile_headers_refused() {
        let f = TraceFile::from_trace(&tiny(), serde_json::Value::Null);
        let good = f.to_bytes().unwrap();
        let p = Path::new("bad.trace");
        // Bad magic.
        let mut b = good.clone();
        b[0] = b'X';
        assert!(TraceFile::from_bytes(p, &b).is_err());
        // Future version.
        let mut b = good.clone();
        b[8] = 9;
        assert!(format!("{}", TraceFile::from_bytes(p, &b).unwrap_err()).contains("version 9"));
        // Header length past the end.
        let mut b = good.clone();
        b[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(TraceFile::from_bytes(p, &b).is_err());
        // Truncated data section.
        let b = &good[..good.len() - 200];
        assert!(TraceFile::from_bytes(p, b).is_err());
        // Too short.
        assert!(TraceFile::from_bytes(p, &good[..10]).is_err());
    }

    #[test]
    fn huge_shape_refused_without_allocating() {
        let mut f = TraceFile::from_trace(&tiny(), serde_json::Value::Null);
        f.header.arrays[0].shape = vec![usize::MAX / 2, 3];
        let bytes = f.to_bytes().unwrap();
        let e = TraceFile::from_bytes(Path::new("x"), &bytes).unwrap_err();
        assert!(matches!(e, ExecError::TraceFormat { .. }), "{e}");
    }

    #[test]
    fn save_and_load_file() {
        let dir = std::env::temp_dir().join(format!("lql-trace-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("t.trace");
        let f = TraceFile::from_trace(&tiny(), serde_json::Value::Null);
        f.save(&p).unwrap();
        assert_eq!(TraceFile::load(&p).unwrap(), f);
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Regression (issue 20, item 2): the temporary name was `.<name>.tmp-<pid>`, created
    /// with `File::create`, and the rename replaced anything at the path.
    #[test]
    fn save_never_follows_planted_links_or_replaces_non_files() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let p = dir.path().join("t.trace");
        std::os::unix::fs::symlink(
            &victim,
            dir.path()
                .join(format!(".t.trace.tmp-{}", std::process::id())),
        )
        .unwrap();
        let f = TraceFile::from_trace(&tiny(), serde_json::Value::Null);
        f.save(&p).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(TraceFile::load(&p).unwrap(), f);
        // A symlink at the target itself, a directory, a device: refused, left alone.
        let link = dir.path().join("l.trace");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let e = f.save(&link).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert!(f.save(dir.path()).is_err());
        let e = f.save(Path::new("/dev/null")).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        {
            use std::os::unix::fs::FileTypeExt;
            assert!(std::fs::metadata("/dev/null")
                .unwrap()
                .file_type()
                .is_char_device());
        }
    }
}
