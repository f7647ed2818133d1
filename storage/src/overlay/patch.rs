//! The `.lqlpatch` file: a versioned, checksummed record of one patch's edits and the
//! identity (sha256) of the base model they were computed on.
//!
//! ```text
//!  offset  size  field
//!  0       8     magic "LQLPATCH"
//!  8       4     format version (1), little-endian u32
//!  12      32    base model identity (sha256, see `model_identity`)
//!  44      4     hidden size the vectors have
//!  48      4     layers of the base model
//!  52      4     number of edits
//!  56      …     edits: tag u8 (1 = added feature, 2 = feature scale), then
//!                  added feature: layer u32, gate_bias f32, up_bias f32,
//!                                 gate/up/down [hidden] f32, has_edge u8,
//!                                 [entity, relation, target, prompt: u32 length + UTF-8]
//!                  feature scale: layer u32, feature u32, flags u8 (1 gate, 2 down),
//!                                 gate_scale f32, down_scale f32
//!  end-32  32    sha256 of every byte before it
//! ```
//!
//! Reading never allocates by a number the file states: counts are checked against the bytes
//! that remain before anything is reserved, strings are capped, and every refusal names the
//! file and the byte offset. Writing goes through [`crate::fsutil::write_atomic`].

use std::path::Path;

use sha2::{Digest, Sha256};

use super::{AddedFeature, Edge, Edit, FeatureScale, MAX_SCALE, MAX_VALUE};
use crate::error::{Result, StorageError};
use crate::model::Model;
use crate::surface::ExecutionSurface;

const MAGIC: &[u8; 8] = b"LQLPATCH";
const VERSION: u32 = 1;
const HEADER: usize = 56;
const TRAILER: usize = 32;
/// A patch file is at most this large (docs/security.md): 1 GiB.
pub const MAX_PATCH_BYTES: u64 = 1 << 30;
/// Each text field of an edge is at most this many bytes.
pub const MAX_TEXT: usize = 4096;
/// The largest hidden size a patch may state.
pub const MAX_HIDDEN: usize = 1 << 16;

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary
/// (a text cut inside a character would not read back as UTF-8).
fn char_floor(s: &str, max: usize) -> usize {
    let mut n = s.len().min(max);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    n
}

/// What a patch file holds.
#[derive(Debug, Clone, PartialEq)]
pub struct PatchFile {
    pub base_sha256: [u8; 32],
    pub hidden: usize,
    pub n_layers: usize,
    pub edits: Vec<Edit>,
}

impl PatchFile {
    /// `edits` as a patch of the model whose identity ([`model_identity`]) and shape these
    /// are.
    pub fn new(base_sha256: [u8; 32], surface: &ExecutionSurface, edits: Vec<Edit>) -> PatchFile {
        PatchFile {
            base_sha256,
            hidden: surface.hidden,
            n_layers: surface.n_layers,
            edits,
        }
    }
}

/// The base model's identity: the sha256 of its mapped bytes (for a GGUF file, the file's
/// sha256; for several files, the sha256 of their sha256s in order).
pub fn model_identity(model: &Model) -> [u8; 32] {
    let digest = |b: &[u8]| -> [u8; 32] { Sha256::digest(b).into() };
    match model.backings.as_slice() {
        [one] => digest(one.bytes()),
        many => {
            let mut h = Sha256::new();
            for b in many {
                h.update(digest(b.bytes()));
            }
            h.finalize().into()
        }
    }
}

/// The bytes of a patch file.
pub fn encode(p: &PatchFile) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + TRAILER + p.edits.len() * (13 + 12 * p.hidden));
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&p.base_sha256);
    out.extend_from_slice(&(p.hidden as u32).to_le_bytes());
    out.extend_from_slice(&(p.n_layers as u32).to_le_bytes());
    out.extend_from_slice(&(p.edits.len() as u32).to_le_bytes());
    let f32s = |out: &mut Vec<u8>, v: &[f32]| {
        for x in v {
            out.extend_from_slice(&x.to_le_bytes());
        }
    };
    for e in &p.edits {
        match e {
            Edit::Add(a) => {
                out.push(1);
                out.extend_from_slice(&(a.layer as u32).to_le_bytes());
                out.extend_from_slice(&a.gate_bias.to_le_bytes());
                out.extend_from_slice(&a.up_bias.to_le_bytes());
                f32s(&mut out, &a.gate);
                f32s(&mut out, &a.up);
                f32s(&mut out, &a.down);
                match &a.edge {
                    None => out.push(0),
                    Some(ed) => {
                        out.push(1);
                        for s in [&ed.entity, &ed.relation, &ed.target, &ed.prompt] {
                            let b = &s.as_bytes()[..char_floor(s, MAX_TEXT)];
                            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                            out.extend_from_slice(b);
                        }
                    }
                }
            }
            Edit::Scale(s) => {
                out.push(2);
                out.extend_from_slice(&(s.layer as u32).to_le_bytes());
                out.extend_from_slice(&(s.feature as u32).to_le_bytes());
                out.push(
                    u8::from(s.gate_scale.is_some()) | (u8::from(s.down_scale.is_some()) << 1),
                );
                out.extend_from_slice(&s.gate_scale.unwrap_or(1.0).to_le_bytes());
                out.extend_from_slice(&s.down_scale.unwrap_or(1.0).to_le_bytes());
            }
        }
    }
    let sum: [u8; 32] = Sha256::digest(&out).into();
    out.extend_from_slice(&sum);
    out
}

/// Writes `p` to `path` atomically (exclusive temp file, fsync, rename); returns the sha256
/// of the file's bytes.
pub fn write(path: &Path, p: &PatchFile) -> Result<[u8; 32]> {
    let bytes = encode(p);
    crate::fsutil::write_atomic(path, &bytes)?;
    Ok(Sha256::digest(&bytes).into())
}

/// Reads and checks a patch file; returns it and the sha256 of its bytes.
pub fn read(path: &Path) -> Result<(PatchFile, [u8; 32])> {
    let bytes = crate::fsutil::read_capped(path, "patch file", MAX_PATCH_BYTES)?;
    let p = decode(path, &bytes)?;
    Ok((p, Sha256::digest(&bytes).into()))
}

/// A patch value is finite and at most [`MAX_VALUE`] in magnitude: a value that would
/// overflow the forward pass is refused where it is read, naming its offset.
fn in_range(v: f32) -> bool {
    v.is_finite() && v.abs() <= MAX_VALUE
}

fn out_of_range(v: f32) -> String {
    if v.is_finite() {
        format!("{v:e} is beyond the ±{MAX_VALUE:e} a patch value may hold")
    } else {
        "not a finite number".into()
    }
}

struct Cursor<'a> {
    path: &'a Path,
    b: &'a [u8],
    at: usize,
    end: usize,
}

impl Cursor<'_> {
    fn err(&self, field: &str, message: impl Into<String>) -> StorageError {
        StorageError::Format {
            path: self.path.to_path_buf(),
            offset: self.at as u64,
            field: field.to_string(),
            message: message.into(),
        }
    }
    fn take(&mut self, n: usize, field: &str) -> Result<&[u8]> {
        if self.end - self.at < n {
            return Err(self.err(
                field,
                format!(
                    "truncated: needs {n} bytes, {} remain before the checksum",
                    self.end - self.at
                ),
            ));
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self, field: &str) -> Result<u8> {
        Ok(self.take(1, field)?[0])
    }
    fn u32(&mut self, field: &str) -> Result<u32> {
        let s = self.take(4, field)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn f32(&mut self, field: &str) -> Result<f32> {
        let at = self.at;
        let v = f32::from_bits(self.u32(field)?);
        if !in_range(v) {
            self.at = at;
            return Err(self.err(field, out_of_range(v)));
        }
        Ok(v)
    }
    fn vec(&mut self, n: usize, field: &str) -> Result<Vec<f32>> {
        // `n` is the validated hidden size and `take` checks the bytes exist first.
        let at = self.at;
        let s = self.take(n * 4, field)?;
        let v: Vec<f32> = s
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        if let Some(i) = v.iter().position(|x| !in_range(*x)) {
            self.at = at + 4 * i;
            return Err(self.err(field, out_of_range(v[i])));
        }
        Ok(v)
    }
    fn text(&mut self, field: &str) -> Result<String> {
        let at = self.at;
        let n = self.u32(field)? as usize;
        if n > MAX_TEXT {
            self.at = at;
            return Err(self.err(
                field,
                format!("{n} bytes exceeds the {MAX_TEXT}-byte limit"),
            ));
        }
        let s = self.take(n, field)?;
        String::from_utf8(s.to_vec()).map_err(|_| {
            let e = self.err(field, "not UTF-8");
            self.at = at;
            e
        })
    }
}

/// Parses patch-file bytes (`path` names the file in errors).
pub fn decode(path: &Path, bytes: &[u8]) -> Result<PatchFile> {
    let fmt = |offset: usize, field: &str, message: String| StorageError::Format {
        path: path.to_path_buf(),
        offset: offset as u64,
        field: field.to_string(),
        message,
    };
    if bytes.len() < 8 || &bytes[..8] != MAGIC {
        return Err(fmt(
            0,
            "magic",
            "not an LQL patch file (no LQLPATCH magic)".into(),
        ));
    }
    if bytes.len() < HEADER + TRAILER {
        return Err(fmt(
            bytes.len(),
            "header",
            format!(
                "truncated: {} bytes, a patch file has at least {}",
                bytes.len(),
                HEADER + TRAILER
            ),
        ));
    }
    let end = bytes.len() - TRAILER;
    let sum: [u8; 32] = Sha256::digest(&bytes[..end]).into();
    let mut c = Cursor {
        path,
        b: bytes,
        at: 8,
        end,
    };
    let version = c.u32("version")?;
    if version != VERSION {
        c.at = 8;
        return Err(c.err(
            "version",
            format!("format version {version}; this build reads version {VERSION}"),
        ));
    }
    if sum[..] != bytes[end..] {
        return Err(fmt(
            end,
            "checksum",
            "sha256 does not match the contents (truncated or corrupt)".into(),
        ));
    }
    let mut base_sha256 = [0u8; 32];
    base_sha256.copy_from_slice(c.take(32, "base_sha256")?);
    let at = c.at;
    let hidden = c.u32("hidden")? as usize;
    if hidden == 0 || hidden > MAX_HIDDEN {
        c.at = at;
        return Err(c.err("hidden", format!("{hidden} is not a plausible hidden size")));
    }
    let n_layers = c.u32("n_layers")? as usize;
    let at = c.at;
    let n_edits = c.u32("edits")? as usize;
    // The smallest edit is a feature scale: 18 bytes.
    if n_edits > (end - c.at) / 18 {
        c.at = at;
        return Err(c.err(
            "edits",
            format!("{n_edits} edits cannot fit in {} bytes", end - c.at),
        ));
    }
    let mut edits = Vec::with_capacity(n_edits);
    for _ in 0..n_edits {
        let at = c.at;
        match c.u8("edit tag")? {
            1 => {
                let layer = c.u32("layer")? as usize;
                let gate_bias = c.f32("gate_bias")?;
                let up_bias = c.f32("up_bias")?;
                let gate = c.vec(hidden, "gate")?;
                let up = c.vec(hidden, "up")?;
                let down = c.vec(hidden, "down")?;
                let edge = match c.u8("has_edge")? {
                    0 => None,
                    1 => Some(Edge {
                        entity: c.text("entity")?,
                        relation: c.text("relation")?,
                        target: c.text("target")?,
                        prompt: c.text("prompt")?,
                    }),
                    t => {
                        c.at -= 1;
                        return Err(c.err("has_edge", format!("{t} is neither 0 nor 1")));
                    }
                };
                edits.push(Edit::Add(AddedFeature {
                    layer,
                    gate,
                    gate_bias,
                    up,
                    up_bias,
                    down,
                    edge,
                }));
            }
            2 => {
                let layer = c.u32("layer")? as usize;
                let feature = c.u32("feature")? as usize;
                let flags = c.u8("flags")?;
                if flags & !3 != 0 {
                    c.at -= 1;
                    return Err(c.err("flags", format!("unknown scale flags {flags:#04x}")));
                }
                let mut scale = |field: &str, present: bool| -> Result<f32> {
                    let v = c.f32(field)?;
                    // One encoding per patch: an absent scale is stored as 1.0.
                    if !present && v != 1.0 {
                        c.at -= 4;
                        return Err(c.err(field, format!("{v} is not a valid scale here")));
                    }
                    if v.abs() > MAX_SCALE {
                        c.at -= 4;
                        return Err(c.err(
                            field,
                            format!("{v:e} is beyond the ±{MAX_SCALE:e} a scale may be"),
                        ));
                    }
                    Ok(v)
                };
                let g = scale("gate_scale", flags & 1 != 0)?;
                let d = scale("down_scale", flags & 2 != 0)?;
                edits.push(Edit::Scale(FeatureScale {
                    layer,
                    feature,
                    gate_scale: (flags & 1 != 0).then_some(g),
                    down_scale: (flags & 2 != 0).then_some(d),
                }));
            }
            t => {
                c.at = at;
                return Err(c.err("edit tag", format!("unknown edit kind {t}")));
            }
        }
    }
    if c.at != end {
        return Err(c.err(
            "edits",
            format!("{} bytes left after the last edit", end - c.at),
        ));
    }
    Ok(PatchFile {
        base_sha256,
        hidden,
        n_layers,
        edits,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> PatchFile {
        PatchFile {
            base_sha256: [7; 32],
            hidden: 4,
            n_layers: 2,
            edits: vec![
                Edit::Add(AddedFeature {
                    layer: 1,
                    gate: vec![1.0, 2.0, 3.0, 4.0],
                    gate_bias: -0.5,
                    up: vec![0.0; 4],
                    up_bias: 1.0,
                    down: vec![0.25; 4],
                    edge: Some(Edge {
                        entity: "France".into(),
                        relation: "capital".into(),
                        target: "Rome".into(),
                        prompt: "The capital of France is".into(),
                    }),
                }),
                Edit::Scale(FeatureScale {
                    layer: 0,
                    feature: 3,
                    gate_scale: None,
                    down_scale: Some(0.0),
                }),
            ],
        }
    }

    #[test]
    fn round_trip() {
        let p = sample();
        let b = encode(&p);
        assert_eq!(decode(Path::new("x"), &b).unwrap(), p);
    }

    /// A text longer than `MAX_TEXT` whose limit falls inside a character is cut before
    /// that character, so the patch still reads back (it used to fail as "not UTF-8").
    #[test]
    fn a_long_text_is_cut_on_a_character_boundary() {
        let mut p = sample();
        let long = format!("a{}", "é".repeat(MAX_TEXT));
        if let Edit::Add(a) = &mut p.edits[0] {
            a.edge.as_mut().unwrap().target = long.clone();
        }
        let back = decode(Path::new("x"), &encode(&p)).unwrap();
        let Edit::Add(a) = &back.edits[0] else {
            panic!()
        };
        let target = &a.edge.as_ref().unwrap().target;
        assert_eq!(target.len(), MAX_TEXT - 1);
        assert!(long.starts_with(target.as_str()));
    }

    /// Values a forward pass cannot carry are refused where they are read: a down vector
    /// of 3e38 and a gate scale of -1e30 (written with a valid checksum).
    #[test]
    fn values_beyond_the_range_are_refused() {
        let mut p = sample();
        if let Edit::Add(a) = &mut p.edits[0] {
            a.down[2] = 3e38;
        }
        let e = decode(Path::new("d"), &encode(&p)).unwrap_err().to_string();
        assert!(e.contains("down") && e.contains("beyond"), "{e}");
        let mut p = sample();
        if let Edit::Scale(s) = &mut p.edits[1] {
            s.gate_scale = Some(-1e30);
        }
        let e = decode(Path::new("g"), &encode(&p)).unwrap_err().to_string();
        assert!(e.contains("gate_scale") && e.contains("beyond"), "{e}");
    }

    #[test]
    fn every_truncation_is_refused_by_name() {
        let b = encode(&sample());
        for n in 0..b.len() {
            let e = decode(Path::new("t.lqlpatch"), &b[..n]).unwrap_err();
            assert!(e.to_string().starts_with("t.lqlpatch: at byte"), "{e}");
        }
    }

    #[test]
    fn a_flipped_byte_is_refused() {
        let mut b = encode(&sample());
        b[70] ^= 1;
        let e = decode(Path::new("c"), &b).unwrap_err().to_string();
        assert!(e.contains("checksum"), "{e}");
    }

    #[test]
    fn absurd_counts_allocate_nothing() {
        let mut b = encode(&sample());
        b[52..56].copy_from_slice(&u32::MAX.to_le_bytes());
        let n = b.len() - 32;
        let sum: [u8; 32] = Sha256::digest(&b[..n]).into();
        b[n..].copy_from_slice(&sum);
        let e = decode(Path::new("a"), &b).unwrap_err().to_string();
        assert!(e.contains("cannot fit"), "{e}");
    }
}
