//! The corpus-statistics file (`.lqlstats`, version 1) that `ANALYZE FEATURES` writes and
//! the `contexts` and `histograms` tables read: for every feature of the analysed layers,
//! its top-activating contexts and its activation histogram, with a copy of the corpus's
//! documents so that a context can be shown without the original file.
//!
//! ```text
//!  0   magic "LQLFSTAT"
//!  8   u32 version (1)
//!  12  u32 header length H (≤ 1 MiB)
//!  16  header: JSON (StatsHeader), then zero padding to a multiple of 8
//!      contexts   [layer][feature][top] × (f32 activation, u32 document, u32 position)
//!      histograms [layer][feature][bins] × u32 count
//!      documents  (documents + 1) × u64 byte offsets into the text, ascending
//!      text       the documents' UTF-8 text, back to back
//! ```
//!
//! Little-endian throughout. A reader checks the magic, the version, the header's bounds and
//! that the file is exactly as long as the header says, before it reads a record; every
//! document slice is checked against the offsets (ascending, inside the text) and for UTF-8
//! when it is read. An empty context slot has document `u32::MAX`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;
use serde::{Deserialize, Serialize};

use crate::error::{Result, StorageError};

const MAGIC: &[u8; 8] = b"LQLFSTAT";
const VERSION: u32 = 1;
const MAX_HEADER: usize = 1 << 20;
/// Bounds on the header's counts, so that no size computed from them overflows.
const MAX_LAYERS: usize = 4096;
const MAX_FFN: usize = 1 << 22;
const MAX_TOP: usize = 1000;
const MAX_BINS: usize = 4096;
const MAX_DOCUMENTS: usize = 1 << 28;
/// Bytes of one context record.
const RECORD: usize = 12;

/// What a statistics file describes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatsHeader {
    /// sha256 of the model's mapped bytes (hex).
    pub model_sha256: String,
    /// sha256 of the corpus file (hex).
    pub corpus_sha256: String,
    /// The corpus as the statement named it.
    pub corpus: String,
    /// The analysed layers, ascending.
    pub layers: Vec<usize>,
    /// Features per layer.
    pub ffn: usize,
    /// Contexts kept per feature.
    pub top: usize,
    /// Histogram bins per feature.
    pub bins: usize,
    /// Documents (non-empty lines) of the corpus.
    pub documents: usize,
    /// Contexts run (a document longer than `context_tokens` is run in several).
    pub contexts: usize,
    /// Most document tokens in one context.
    pub context_tokens: usize,
    /// Document tokens observed.
    pub tokens: u64,
    /// Seconds the analysis took.
    pub seconds: f64,
}

/// One of a feature's top contexts: its largest activation in the context and where.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StoredContext {
    pub activation: f32,
    /// The document (its index in the analysed corpus).
    pub document: u32,
    /// The token position within the document.
    pub position: u32,
}

impl StoredContext {
    /// An empty slot (a feature with fewer contexts than `top`).
    pub const EMPTY: StoredContext = StoredContext {
        activation: f32::NEG_INFINITY,
        document: u32::MAX,
        position: u32::MAX,
    };
}

/// Where a file's sections start, from its header.
#[derive(Debug, Clone, Copy)]
struct Layout {
    contexts: usize,
    histograms: usize,
    documents: usize,
    text: usize,
    end_without_text: usize,
}

fn format_error(
    path: &Path,
    offset: usize,
    field: &str,
    message: impl Into<String>,
) -> StorageError {
    StorageError::Format {
        path: path.to_path_buf(),
        offset: offset as u64,
        field: field.into(),
        message: message.into(),
    }
}

fn layout(path: &Path, h: &StatsHeader, body: usize) -> Result<Layout> {
    let bound = |v: usize, max: usize, field: &str| -> Result<()> {
        if v > max {
            return Err(format_error(
                path,
                16,
                field,
                format!("{v} exceeds the limit of {max}"),
            ));
        }
        Ok(())
    };
    bound(h.layers.len(), MAX_LAYERS, "layers")?;
    bound(h.ffn, MAX_FFN, "ffn")?;
    bound(h.top, MAX_TOP, "top")?;
    bound(h.bins, MAX_BINS, "bins")?;
    bound(h.documents, MAX_DOCUMENTS, "documents")?;
    if h.top == 0 || h.bins == 0 {
        return Err(format_error(
            path,
            16,
            "top",
            "top and bins must be positive",
        ));
    }
    if h.layers.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format_error(
            path,
            16,
            "layers",
            "layers must be ascending and distinct",
        ));
    }
    // Each product is below 2^12 · 2^22 · 2^10 · 12 < 2^48: no overflow on 64-bit.
    let features = h.layers.len() * h.ffn;
    let contexts = body;
    let histograms = contexts + features * h.top * RECORD;
    let documents = histograms + features * h.bins * 4;
    let text = documents + (h.documents + 1) * 8;
    Ok(Layout {
        contexts,
        histograms,
        documents,
        text,
        end_without_text: text,
    })
}

fn pad8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// Writes a statistics file (to a temporary name, renamed last). `contexts` holds
/// `layers × ffn × top` records, `counts` `layers × ffn × bins`; `documents` the texts.
pub fn write(
    path: &Path,
    header: &StatsHeader,
    contexts: &[StoredContext],
    counts: &[u32],
    documents: &[&str],
) -> Result<()> {
    let features = header.layers.len() * header.ffn;
    if contexts.len() != features * header.top
        || counts.len() != features * header.bins
        || documents.len() != header.documents
    {
        return Err(StorageError::Internal(format!(
            "statistics of {features} features do not match their header ({} contexts, {} counts, {} documents)",
            contexts.len(),
            counts.len(),
            documents.len()
        )));
    }
    let json = serde_json::to_vec(header).map_err(|e| StorageError::Internal(e.to_string()))?;
    if json.len() > MAX_HEADER {
        return Err(StorageError::Internal("statistics header too large".into()));
    }
    crate::fsutil::write_atomic_with(path, |w| {
        w.write_all(MAGIC)?;
        w.write_all(&VERSION.to_le_bytes())?;
        w.write_all(&(json.len() as u32).to_le_bytes())?;
        w.write_all(&json)?;
        w.write_all(&vec![0u8; pad8(16 + json.len()) - 16 - json.len()])?;
        let mut buf = Vec::with_capacity(1 << 16);
        for c in contexts {
            buf.extend_from_slice(&c.activation.to_le_bytes());
            buf.extend_from_slice(&c.document.to_le_bytes());
            buf.extend_from_slice(&c.position.to_le_bytes());
            if buf.len() >= 1 << 16 {
                w.write_all(&buf)?;
                buf.clear();
            }
        }
        for c in counts {
            buf.extend_from_slice(&c.to_le_bytes());
            if buf.len() >= 1 << 16 {
                w.write_all(&buf)?;
                buf.clear();
            }
        }
        let mut offset = 0u64;
        buf.extend_from_slice(&offset.to_le_bytes());
        for d in documents {
            offset += d.len() as u64;
            buf.extend_from_slice(&offset.to_le_bytes());
        }
        w.write_all(&buf)?;
        for d in documents {
            w.write_all(d.as_bytes())?;
        }
        Ok(())
    })
}

/// An open statistics file (mapped; records are read in place).
pub struct StatsFile {
    path: PathBuf,
    map: Arc<Mmap>,
    pub header: StatsHeader,
    layout: Layout,
}

impl StatsFile {
    /// Opens and checks a statistics file.
    pub fn open(path: &Path) -> Result<StatsFile> {
        let map = crate::mapped::map_file(path, "corpus statistics")?;
        let bytes: &[u8] = &map;
        if bytes.len() < 16 || &bytes[..8] != MAGIC {
            return Err(format_error(
                path,
                0,
                "magic",
                "not an LQL corpus-statistics file (expected LQLFSTAT)",
            ));
        }
        let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        if version != VERSION {
            return Err(format_error(
                path,
                8,
                "version",
                format!("version {version} is not supported (this build reads {VERSION})"),
            ));
        }
        let len = u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]) as usize;
        if len > MAX_HEADER || 16 + len > bytes.len() {
            return Err(format_error(
                path,
                12,
                "header length",
                format!("{len} bytes does not fit the file"),
            ));
        }
        let header: StatsHeader = serde_json::from_slice(&bytes[16..16 + len])
            .map_err(|e| format_error(path, 16, "header", e.to_string()))?;
        let layout = layout(path, &header, pad8(16 + len))?;
        if bytes.len() < layout.end_without_text {
            return Err(format_error(
                path,
                bytes.len(),
                "sections",
                format!(
                    "the file ends at byte {} but its header needs {}",
                    bytes.len(),
                    layout.end_without_text
                ),
            ));
        }
        let f = StatsFile {
            path: path.to_path_buf(),
            map,
            header,
            layout,
        };
        let end = f.offset(f.header.documents);
        if layout.text as u64 + end != f.map.len() as u64 {
            return Err(format_error(
                path,
                layout.documents,
                "documents",
                format!(
                    "the text is {} bytes but the file holds {}",
                    end,
                    f.map.len() - layout.text
                ),
            ));
        }
        Ok(f)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn word(&self, at: usize) -> [u8; 4] {
        let b = &self.map[at..at + 4];
        [b[0], b[1], b[2], b[3]]
    }

    /// Document `i`'s byte offset into the text (`i` ≤ `documents`: inside the offsets
    /// table, whose extent `open` checked).
    fn offset(&self, i: usize) -> u64 {
        let at = self.layout.documents + i * 8;
        let b = &self.map[at..at + 8];
        u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
    }

    /// Index of `layer` among the analysed layers.
    pub fn layer_index(&self, layer: usize) -> Option<usize> {
        self.header.layers.iter().position(|&l| l == layer)
    }

    /// A feature's stored contexts, best first, empty slots left out.
    pub fn contexts(&self, layer_index: usize, feature: usize) -> Vec<StoredContext> {
        let h = &self.header;
        if layer_index >= h.layers.len() || feature >= h.ffn {
            return Vec::new();
        }
        let base = self.layout.contexts + ((layer_index * h.ffn + feature) * h.top) * RECORD;
        (0..h.top)
            .map(|i| {
                let at = base + i * RECORD;
                StoredContext {
                    activation: f32::from_le_bytes(self.word(at)),
                    document: u32::from_le_bytes(self.word(at + 4)),
                    position: u32::from_le_bytes(self.word(at + 8)),
                }
            })
            .take_while(|c| c.document != u32::MAX)
            .collect()
    }

    /// A feature's histogram counts (`bins` of them).
    pub fn histogram(&self, layer_index: usize, feature: usize) -> Vec<u32> {
        let h = &self.header;
        if layer_index >= h.layers.len() || feature >= h.ffn {
            return Vec::new();
        }
        let base = self.layout.histograms + (layer_index * h.ffn + feature) * h.bins * 4;
        (0..h.bins)
            .map(|i| u32::from_le_bytes(self.word(base + i * 4)))
            .collect()
    }

    /// Document `i`'s text, checked.
    pub fn document(&self, i: usize) -> Result<&str> {
        if i >= self.header.documents {
            return Err(format_error(
                &self.path,
                self.layout.documents,
                "document",
                format!(
                    "document {i} is out of range: the file holds {}",
                    self.header.documents
                ),
            ));
        }
        let (a, b) = (self.offset(i), self.offset(i + 1));
        let text_len = (self.map.len() - self.layout.text) as u64;
        if a > b || b > text_len {
            return Err(format_error(
                &self.path,
                self.layout.documents + i * 8,
                "document offsets",
                format!("document {i} spans bytes {a}..{b} of a {text_len}-byte text"),
            ));
        }
        let slice = &self.map[self.layout.text + a as usize..self.layout.text + b as usize];
        std::str::from_utf8(slice).map_err(|e| {
            format_error(
                &self.path,
                self.layout.text + a as usize,
                "document text",
                e.to_string(),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> StatsHeader {
        StatsHeader {
            model_sha256: "ab".into(),
            corpus_sha256: "cd".into(),
            corpus: "c.txt".into(),
            layers: vec![1, 3],
            ffn: 2,
            top: 2,
            bins: 3,
            documents: 2,
            contexts: 2,
            context_tokens: 128,
            tokens: 9,
            seconds: 0.5,
        }
    }

    fn sample(dir: &Path) -> PathBuf {
        let path = dir.join("s.lqlstats");
        let c = |a: f32, d: u32, p: u32| StoredContext {
            activation: a,
            document: d,
            position: p,
        };
        let empty = StoredContext::EMPTY;
        let contexts = vec![
            c(2.0, 1, 3),
            c(1.0, 0, 0),
            c(0.5, 0, 1),
            empty,
            c(3.0, 0, 2),
            c(2.5, 1, 0),
            empty,
            empty,
        ];
        let counts: Vec<u32> = (0..12).collect();
        write(
            &path,
            &header(),
            &contexts,
            &counts,
            &["first doc", "second ✓"],
        )
        .unwrap();
        path
    }

    #[test]
    fn a_written_file_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let f = StatsFile::open(&sample(dir.path())).unwrap();
        assert_eq!(f.header, header());
        assert_eq!(f.layer_index(3), Some(1));
        assert_eq!(f.contexts(0, 0).len(), 2);
        assert_eq!(f.contexts(0, 1).len(), 1);
        assert_eq!(
            f.contexts(1, 0)[1],
            StoredContext {
                activation: 2.5,
                document: 1,
                position: 0
            }
        );
        assert!(f.contexts(1, 1).is_empty());
        assert_eq!(f.histogram(1, 1), vec![9, 10, 11]);
        assert_eq!(f.document(1).unwrap(), "second ✓");
        assert!(f.document(2).is_err());
    }

    #[test]
    fn damaged_files_are_refused_by_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = sample(dir.path());
        let good = std::fs::read(&path).unwrap();
        let bad = dir.path().join("bad.lqlstats");
        let try_open = |bytes: &[u8]| {
            std::fs::write(&bad, bytes).unwrap();
            match StatsFile::open(&bad) {
                Err(StorageError::Format { field, .. }) => field,
                Err(e) => panic!("not a format error: {e}"),
                Ok(_) => panic!("a damaged file opened"),
            }
        };
        assert_eq!(try_open(&good[..good.len() - 1]), "documents");
        assert_eq!(try_open(&good[..100]), "header length");
        // Same-length edits of the header's JSON, in place.
        let edited = |from: &[u8], to: &[u8]| {
            let at = good.windows(from.len()).position(|w| w == from).unwrap();
            let mut m = good.clone();
            m[at..at + to.len()].copy_from_slice(to);
            m
        };
        assert_eq!(try_open(&edited(b"\"top\":2", b"\"top\":x")), "header");
        let mut m = good.clone();
        m[0] = b'X';
        assert_eq!(try_open(&m), "magic");
        let mut m = good.clone();
        m[8] = 9;
        assert_eq!(try_open(&m), "version");
        let mut m = good.clone();
        m[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(try_open(&m), "header length");
        assert_eq!(try_open(&edited(b"\"ffn\":2", b"\"ffn\":9")), "sections");
        let mut m = good.clone();
        let n = m.len();
        m[n - 2] = 0xff;
        let f = std::fs::write(&bad, &m)
            .map(|_| StatsFile::open(&bad).unwrap())
            .unwrap();
        assert!(f.document(1).is_err());
    }
}
