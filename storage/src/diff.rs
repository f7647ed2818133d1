//! DIFF: tensor-by-tensor comparison of two [`MaterialSource`]s, streaming (a few rows of
//! each tensor are decoded at a time; no model is materialised).
//!
//! Logical rows compare decoded values across encodings: per `(layer, role)` present on
//! either side, `added`, `removed` or `changed` with the number of elements whose value
//! differs, max |Δ| and the relative Frobenius norm ‖b − a‖ / ‖a‖ (f64 accumulation).
//! Tensors with identical encoding, shape and bytes are skipped without decoding. A
//! tensor whose values are equal but whose encoding differs is a `changed` row with zero
//! elements changed (a representation change). Physical rows compare encoded bytes:
//! rows whose bytes differ and SHA-256 of both sides.

use std::sync::atomic::{AtomicBool, Ordering};

use rayon::prelude::*;

use crate::error::{Result, StorageError};
use crate::format::package::integrity::sha256_hex;
use crate::material::{MaterialSource, MaterialTensor};
use crate::model::OperandKey;

/// What changed about one tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Added,
    Removed,
    Changed,
}

impl Change {
    pub fn name(self) -> &'static str {
        match self {
            Change::Added => "added",
            Change::Removed => "removed",
            Change::Changed => "changed",
        }
    }
}

/// One logical DIFF row.
#[derive(Debug, Clone, PartialEq)]
pub struct DiffRow {
    pub key: OperandKey,
    /// The graph object the tensor belongs to (`text.decoder_stack`, …).
    pub object: &'static str,
    /// `Q4_1`, or `Q4_1 → F32` when the encoding differs.
    pub representation: String,
    pub change: Change,
    /// Elements whose decoded value differs; None for added/removed or a shape change.
    pub elements_changed: Option<u64>,
    pub max_abs_delta: Option<f64>,
    /// ‖b − a‖_F / ‖a‖_F; None where undefined (‖a‖ = 0 with a change, shape change).
    pub rel_frobenius_delta: Option<f64>,
}

/// One PHYSICAL DIFF row: a tensor whose encoded bytes differ.
#[derive(Debug, Clone, PartialEq)]
pub struct PhysicalRow {
    pub key: OperandKey,
    pub object: &'static str,
    pub change: Change,
    pub sides: ByteSides,
}

/// What PHYSICAL reports of one tensor's two sides (`None` for a side that lacks it).
#[derive(Debug, Clone, PartialEq)]
pub struct ByteSides {
    pub left_encoding: Option<String>,
    pub right_encoding: Option<String>,
    pub left_bytes: Option<u64>,
    pub right_bytes: Option<u64>,
    /// Encoded rows whose bytes differ (None when the row geometry differs).
    pub rows_differing: Option<u64>,
    pub left_sha256: Option<String>,
    pub right_sha256: Option<String>,
}

/// Which tensors to compare.
#[derive(Debug, Clone, Copy, Default)]
pub struct DiffScope {
    /// Only this layer's tensors.
    pub layer: Option<usize>,
}

/// Rows decoded at a time per side (bounded by `CHUNK_ELEMS` elements).
const CHUNK_ELEMS: usize = 1 << 16;

fn interrupted() -> StorageError {
    StorageError::Invalid("interrupted".into())
}

/// Pairs the tensors of both sides by `(layer, role)`, in key order.
fn pairs(
    a: &dyn MaterialSource,
    b: &dyn MaterialSource,
    scope: DiffScope,
) -> Vec<(OperandKey, Option<MaterialTensor>, Option<MaterialTensor>)> {
    let mut map: std::collections::BTreeMap<OperandKey, (Option<_>, Option<_>)> =
        Default::default();
    for t in a.tensors() {
        let k = t.key;
        map.entry(k).or_default().0 = Some(t);
    }
    for t in b.tensors() {
        let k = t.key;
        map.entry(k).or_default().1 = Some(t);
    }
    map.into_iter()
        .filter(|(k, _)| scope.layer.is_none() || k.layer == scope.layer)
        .map(|(k, (x, y))| (k, x, y))
        .collect()
}

/// The logical DIFF of `a` → `b`.
pub fn diff(
    a: &dyn MaterialSource,
    b: &dyn MaterialSource,
    scope: DiffScope,
    cancel: &AtomicBool,
) -> Result<Vec<DiffRow>> {
    let rows: Vec<Option<DiffRow>> = pairs(a, b, scope)
        .into_par_iter()
        .map(|(key, x, y)| compare(a, b, key, x.as_ref(), y.as_ref(), cancel))
        .collect::<Result<_>>()?;
    Ok(rows.into_iter().flatten().collect())
}

fn compare(
    a: &dyn MaterialSource,
    b: &dyn MaterialSource,
    key: OperandKey,
    x: Option<&MaterialTensor>,
    y: Option<&MaterialTensor>,
    cancel: &AtomicBool,
) -> Result<Option<DiffRow>> {
    if cancel.load(Ordering::Relaxed) {
        return Err(interrupted());
    }
    let object = key.role.object();
    let row = |representation: String, change, stats: Option<(u64, f64, Option<f64>)>| DiffRow {
        key,
        object,
        representation,
        change,
        elements_changed: stats.map(|s| s.0),
        max_abs_delta: stats.map(|s| s.1),
        rel_frobenius_delta: stats.and_then(|s| s.2),
    };
    let (x, y) = match (x, y) {
        (None, None) => return Ok(None),
        (Some(x), None) => return Ok(Some(row(x.dtype.to_string(), Change::Removed, None))),
        (None, Some(y)) => return Ok(Some(row(y.dtype.to_string(), Change::Added, None))),
        (Some(x), Some(y)) => (x, y),
    };
    let representation = if x.dtype == y.dtype {
        x.dtype.to_string()
    } else {
        format!("{} → {}", x.dtype, y.dtype)
    };
    if x.shape != y.shape {
        return Ok(Some(row(
            format!("{representation} {:?} → {:?}", x.shape, y.shape),
            Change::Changed,
            None,
        )));
    }
    let (va, vb) = match (a.tensor(key), b.tensor(key)) {
        (Some(va), Some(vb)) => (va, vb),
        _ => {
            return Err(StorageError::MissingOperand {
                key: key.to_string(),
            })
        }
    };
    if x.dtype == y.dtype && va.bytes == vb.bytes {
        return Ok(None);
    }
    let row_len = x.row_len().max(1);
    let rows = x.rows();
    let step = (CHUNK_ELEMS / row_len).max(1);
    let mut da = vec![0f32; step.min(rows.max(1)) * row_len];
    let mut db = da.clone();
    let (mut changed, mut max_abs, mut sum_d2, mut sum_a2) = (0u64, 0f64, 0f64, 0f64);
    let mut start = 0;
    while start < rows {
        if cancel.load(Ordering::Relaxed) {
            return Err(interrupted());
        }
        let n = step.min(rows - start);
        let (ca, cb) = (&mut da[..n * row_len], &mut db[..n * row_len]);
        a.decode_rows(key, start, n, ca)?;
        b.decode_rows(key, start, n, cb)?;
        for (&p, &q) in ca.iter().zip(cb.iter()) {
            let (p, q) = (p as f64, q as f64);
            sum_a2 += p * p;
            // Bit patterns, so that NaN = NaN and -0 ≠ +0 count as written.
            if p.to_bits() != q.to_bits() {
                changed += 1;
                let d = (q - p).abs();
                if d > max_abs || d.is_nan() {
                    max_abs = d;
                }
                sum_d2 += d * d;
            }
        }
        start += n;
    }
    if changed == 0 && x.dtype == y.dtype {
        // Different bytes decoding to the same values (e.g. unused bits): no change.
        return Ok(None);
    }
    let rel = if sum_a2 > 0.0 {
        Some(sum_d2.sqrt() / sum_a2.sqrt())
    } else if sum_d2 == 0.0 {
        Some(0.0)
    } else {
        None
    };
    Ok(Some(row(
        representation,
        Change::Changed,
        Some((changed, max_abs, rel)),
    )))
}

/// The PHYSICAL DIFF of `a` → `b`: tensors whose encoded bytes differ.
pub fn diff_physical(
    a: &dyn MaterialSource,
    b: &dyn MaterialSource,
    scope: DiffScope,
    cancel: &AtomicBool,
) -> Result<Vec<PhysicalRow>> {
    let rows: Vec<Option<PhysicalRow>> = pairs(a, b, scope)
        .into_par_iter()
        .map(|(key, x, y)| {
            if cancel.load(Ordering::Relaxed) {
                return Err(interrupted());
            }
            let va = x.as_ref().and_then(|_| a.tensor(key));
            let vb = y.as_ref().and_then(|_| b.tensor(key));
            let change = match (&va, &vb) {
                (None, None) => return Ok(None),
                (Some(_), None) => Change::Removed,
                (None, Some(_)) => Change::Added,
                (Some(p), Some(q)) => {
                    if p.dtype == q.dtype && p.shape == q.shape && p.bytes == q.bytes {
                        return Ok(None);
                    }
                    Change::Changed
                }
            };
            let rows_differing = match (&va, &vb) {
                (Some(p), Some(q)) if p.row_bytes() == q.row_bytes() && p.rows() == q.rows() => {
                    Some((0..p.rows()).filter(|&i| p.row(i) != q.row(i)).count() as u64)
                }
                _ => None,
            };
            Ok(Some(PhysicalRow {
                key,
                object: key.role.object(),
                change,
                sides: ByteSides {
                    left_encoding: va.map(|v| v.dtype.to_string()),
                    right_encoding: vb.map(|v| v.dtype.to_string()),
                    left_bytes: va.map(|v| v.bytes.len() as u64),
                    right_bytes: vb.map(|v| v.bytes.len() as u64),
                    rows_differing,
                    left_sha256: va.map(|v| sha256_hex(v.bytes)),
                    right_sha256: vb.map(|v| sha256_hex(v.bytes)),
                },
            }))
        })
        .collect::<Result<_>>()?;
    Ok(rows.into_iter().flatten().collect())
}

/// One PHYSICAL row of two models opened for inspection only (architectures LQL cannot
/// run): tensors are matched by their names as stored, having no roles.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedPhysicalRow {
    pub name: String,
    /// The layer read from a `blk.N.` name.
    pub layer: Option<usize>,
    pub change: Change,
    pub sides: ByteSides,
}

/// DIFF … PHYSICAL of two models opened for inspection: every tensor name of either side
/// whose bytes, encoding or shape differ (in name order), with `layer` keeping one layer.
/// `None` when either model is interpreted (their operands are compared by role instead).
pub fn diff_uninterpreted(
    a: &crate::Model,
    b: &crate::Model,
    layer: Option<usize>,
    cancel: &AtomicBool,
) -> Option<Result<Vec<NamedPhysicalRow>>> {
    let (ua, ub) = (a.uninterpreted.as_ref()?, b.uninterpreted.as_ref()?);
    fn bytes<'m>(m: &'m crate::Model, op: &crate::model::Operand) -> Option<&'m [u8]> {
        m.backings
            .get(op.backing)?
            .bytes()
            .get(op.offset..op.offset.checked_add(op.len)?)
    }
    let by_name = |ts: &[crate::model::Operand]| -> std::collections::BTreeMap<String, crate::model::Operand> {
        ts.iter().map(|t| (t.source_name.clone(), t.clone())).collect()
    };
    let (ta, tb) = (by_name(&ua.tensors), by_name(&ub.tensors));
    let names: std::collections::BTreeSet<&String> = ta.keys().chain(tb.keys()).collect();
    let mut out = Vec::new();
    for name in names {
        if cancel.load(Ordering::Relaxed) {
            return Some(Err(interrupted()));
        }
        let l = tensor_layer(name);
        if layer.is_some() && l != layer {
            continue;
        }
        let (x, y) = (ta.get(name), tb.get(name));
        let bx = x.and_then(|o| bytes(a, o));
        let by = y.and_then(|o| bytes(b, o));
        let change = match (x, y) {
            (None, None) => continue,
            (Some(_), None) => Change::Removed,
            (None, Some(_)) => Change::Added,
            (Some(p), Some(q)) => {
                if p.dtype == q.dtype && p.shape == q.shape && bx == by {
                    continue;
                }
                Change::Changed
            }
        };
        // Rows of the stored encoding: `len / rows` bytes each, rows = product of the
        // dimensions after the first.
        let rows_differing = match (x, y, bx, by) {
            (Some(p), Some(q), Some(u), Some(v)) if p.dtype == q.dtype && p.shape == q.shape => {
                let rows: usize = p.shape.iter().skip(1).product::<usize>().max(1);
                let row = u.len() / rows;
                (row > 0).then(|| {
                    u.chunks(row)
                        .zip(v.chunks(row))
                        .filter(|(r, s)| r != s)
                        .count() as u64
                })
            }
            _ => None,
        };
        out.push(NamedPhysicalRow {
            name: name.clone(),
            layer: l,
            change,
            sides: ByteSides {
                left_encoding: x.map(|o| o.dtype.to_string()),
                right_encoding: y.map(|o| o.dtype.to_string()),
                left_bytes: x.map(|o| o.len as u64),
                right_bytes: y.map(|o| o.len as u64),
                rows_differing,
                left_sha256: bx.map(sha256_hex),
                right_sha256: by.map(sha256_hex),
            },
        });
    }
    Some(Ok(out))
}

/// The layer a stored tensor's name gives (`blk.N.…`, as the package slicer reads it).
pub fn tensor_layer(name: &str) -> Option<usize> {
    crate::format::package::classify::layer_index(name).and_then(|l| usize::try_from(l).ok())
}
