//! LYRW v2 bank files (seed 002 §6), the segments of the transitional bank shape: a
//! structural reader for inspection, VERIFY and binding: the files are parsed under
//! hostile-input limits, their region tables shown, and [`super::bank_reader`] maps the
//! regions it validated for execution.
//!
//! Layout read (all little-endian; table order as §6.1–§6.4 lists them):
//! ```text
//! header   24 B  magic u32 = 0x4C595257, format_version u32 = 2, logical_layer u32,
//!                num_banks u16, num_segments u16, flags u32, reserved u32
//! banks    num_banks × 24 B       bank_id, bank_kind, region_schema_count, flags (u16 each),
//!                                 num_entries, input_dim, intermediate_dim, output_dim (u32)
//! segments num_segments × 12 B    bank_id u16, segment_index u16, first_entry u32,
//!                                 entry_count u32  (all descriptors of this file)
//! schemas  Σ region_schema_count × 20 B, bank by bank: schema_index, role, format, packing,
//!                                 pair_id, layout (u16 each), rows u32, cols u32
//! entries  per segment descriptor: entry_count × its bank's region_schema_count ×
//!                                 {offset u64, length u64} (from the file start, 64-B aligned)
//! ```
//! Unknown role, format, packing and layout tags are kept (§6.5); only execution would
//! refuse them.

use std::path::Path;

use crate::error::{Result, StorageError};

/// `"LYRW"` read as a little-endian u32.
pub const LYRW_MAGIC: u32 = 0x4C59_5257;
const HEADER: usize = 24;
const BANK: usize = 24;
const SEGMENT: usize = 12;
const SCHEMA: usize = 20;
const ENTRY: usize = 16;

/// One bank descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bank {
    pub bank_id: u16,
    /// 0 dense, 1 routed, 2 shared.
    pub kind: u16,
    pub flags: u16,
    pub num_entries: u32,
    pub input_dim: u32,
    pub intermediate_dim: u32,
    pub output_dim: u32,
    pub schemas: Vec<RegionSchema>,
}

/// `packing` 0: row-major values.
pub const PACKING_ROW_MAJOR: u16 = 0;
/// `packing` 1: blocks with their scales inline (every block-quantized format, §6.4).
pub const PACKING_BLOCKS_WITH_SCALES_INLINE: u16 = 1;

/// The first region schema that declares `row_major` packing for a block-quantized format
/// (§6.4 requires `blocks_with_scales_inline`, or a values/scales pair), as a message.
/// Formats this build does not know are not judged.
pub fn packing_violation(f: &LyrwFile) -> Option<String> {
    f.banks.iter().find_map(|b| {
        b.schemas.iter().find_map(|s| {
            let d = super::moe_manifest::format_dtype(s.format)?;
            (d.block_elems() > 1 && s.packing == PACKING_ROW_MAJOR).then(|| {
                format!(
                    "layer {}: bank {} region schema {} (role {}) is {} (block-quantized) but \
                     declares packing 0 (row_major); §6.4 requires 1 \
                     (blocks_with_scales_inline)",
                    f.logical_layer,
                    b.bank_id,
                    s.schema_index,
                    s.role,
                    format_name(s.format)
                )
            })
        })
    })
}

/// One region schema of a bank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionSchema {
    pub schema_index: u16,
    pub role: u16,
    pub format: u16,
    pub packing: u16,
    pub pair_id: u16,
    pub layout: u16,
    pub rows: u32,
    pub cols: u32,
}

/// One segment descriptor with its entry table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentDescriptor {
    pub bank_id: u16,
    pub segment_index: u16,
    pub first_entry: u32,
    pub entry_count: u32,
    /// `entry_count × schemas` (offset, length) pairs, entry-major.
    pub regions: Vec<(u64, u64)>,
}

/// A parsed LYRW v2 file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LyrwFile {
    pub logical_layer: u32,
    pub flags: u32,
    pub banks: Vec<Bank>,
    pub segments: Vec<SegmentDescriptor>,
    pub file_len: u64,
    /// `(bank_id, index into banks)`, sorted: O(log n) lookup by id.
    bank_index: Vec<(u16, usize)>,
}

impl LyrwFile {
    /// The bank with id `bank_id`.
    pub fn bank(&self, bank_id: u16) -> Option<&Bank> {
        self.bank_index
            .binary_search_by_key(&bank_id, |&(id, _)| id)
            .ok()
            .map(|i| &self.banks[self.bank_index[i].1])
    }
}

/// Registered role name (§6.5), or `role <n>` for an unknown tag.
pub fn role_name(role: u16) -> String {
    match role {
        0 => "gate".into(),
        1 => "up".into(),
        2 => "gate_up_fused".into(),
        3 => "down".into(),
        4 => "bias".into(),
        5 => "scales".into(),
        6 => "latent_in".into(),
        7 => "latent_out".into(),
        n => format!("role {n}"),
    }
}

/// Registered format name (§6.4), or `format <n>` for an unknown tag.
pub fn format_name(format: u16) -> String {
    match format {
        0 => "f32".into(),
        1 => "f16".into(),
        2 => "bf16".into(),
        3 => "q4_0".into(),
        4 => "q4_k".into(),
        5 => "q6_k".into(),
        6 => "q8_0".into(),
        7 => "fp4_larql".into(),
        8 => "mxfp4".into(),
        9 => "nvfp4".into(),
        10 => "mxfp8".into(),
        n => format!("format {n}"),
    }
}

struct Cursor<'a> {
    path: &'a Path,
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let Some(end) = end else {
            return Err(StorageError::Format {
                path: self.path.to_path_buf(),
                offset: self.at as u64,
                field: field.into(),
                message: format!(
                    "file is truncated: {n} bytes needed, {} left",
                    self.b.len() - self.at
                ),
            });
        };
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u16(&mut self, field: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(
            self.take(2, field)?.try_into().expect("2"),
        ))
    }
    fn u32(&mut self, field: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4, field)?.try_into().expect("4"),
        ))
    }
    fn u64(&mut self, field: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8, field)?.try_into().expect("8"),
        ))
    }
    /// Refuse a table of `count` records of `size` bytes that the file cannot hold, before
    /// allocating anything for it.
    fn room(&self, count: u64, size: usize, field: &str) -> Result<()> {
        let need = count.saturating_mul(size as u64);
        if need > (self.b.len() - self.at) as u64 {
            return Err(StorageError::Format {
                path: self.path.to_path_buf(),
                offset: self.at as u64,
                field: field.into(),
                message: format!(
                    "{count} records of {size} bytes do not fit in the {} bytes left",
                    self.b.len() - self.at
                ),
            });
        }
        Ok(())
    }
}

/// Parse the tables of a LYRW v2 file held in `bytes`.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<LyrwFile> {
    let mut c = Cursor {
        path,
        b: bytes,
        at: 0,
    };
    if bytes.len() < HEADER {
        return Err(StorageError::Format {
            path: path.to_path_buf(),
            offset: 0,
            field: "header".into(),
            message: format!(
                "file is truncated: {} bytes, header needs {HEADER}",
                bytes.len()
            ),
        });
    }
    let magic = c.u32("magic")?;
    if magic != LYRW_MAGIC {
        return Err(StorageError::Format {
            path: path.to_path_buf(),
            offset: 0,
            field: "magic".into(),
            message: format!("not an LYRW file (its magic is not {LYRW_MAGIC:#010x})"),
        });
    }
    let version = c.u32("format_version")?;
    if version != 2 {
        return Err(StorageError::Unsupported(format!(
            "{}: LYRW format_version {version}; a VINDEX3 bank container holds LYRW v2 files{}",
            path.display(),
            if version == 1 {
                " (v1 is a VINDEX2 layer file and requires the VINDEX2 loader)"
            } else {
                ""
            }
        )));
    }
    let logical_layer = c.u32("logical_layer")?;
    let num_banks = c.u16("num_banks")?;
    let num_segments = c.u16("num_segments")?;
    let flags = c.u32("flags")?;
    let _reserved = c.u32("reserved")?;
    if num_segments == 0 {
        return Err(StorageError::Format {
            path: path.to_path_buf(),
            offset: 14,
            field: "num_segments".into(),
            message: "a LYRW v2 file describes at least one segment".into(),
        });
    }
    c.room(num_banks as u64, BANK, "bank descriptors")?;
    let mut banks = Vec::with_capacity(num_banks as usize);
    let mut schema_counts = Vec::with_capacity(num_banks as usize);
    for i in 0..num_banks {
        crate::interrupt::every(i as u64, || "LYRW bank descriptors".to_string())?;
        let bank_id = c.u16("bank_id")?;
        let kind = c.u16("bank_kind")?;
        let schema_count = c.u16("region_schema_count")?;
        let bflags = c.u16("bank flags")?;
        banks.push(Bank {
            bank_id,
            kind,
            flags: bflags,
            num_entries: c.u32("num_entries")?,
            input_dim: c.u32("input_dim")?,
            intermediate_dim: c.u32("intermediate_dim")?,
            output_dim: c.u32("output_dim")?,
            schemas: Vec::new(),
        });
        schema_counts.push(schema_count);
    }
    c.room(num_segments as u64, SEGMENT, "segment descriptors")?;
    let mut segments = Vec::with_capacity(num_segments as usize);
    for i in 0..num_segments {
        crate::interrupt::every(i as u64, || "LYRW segment descriptors".to_string())?;
        segments.push(SegmentDescriptor {
            bank_id: c.u16("segment bank_id")?,
            segment_index: c.u16("segment_index")?,
            first_entry: c.u32("first_entry")?,
            entry_count: c.u32("entry_count")?,
            regions: Vec::new(),
        });
    }
    let total_schemas: u64 = schema_counts.iter().map(|&n| n as u64).sum();
    c.room(total_schemas, SCHEMA, "region schemas")?;
    for (bank, &n) in banks.iter_mut().zip(&schema_counts) {
        for i in 0..n {
            crate::interrupt::every(i as u64, || "LYRW region schemas".to_string())?;
            bank.schemas.push(RegionSchema {
                schema_index: c.u16("schema_index")?,
                role: c.u16("role")?,
                format: c.u16("format")?,
                packing: c.u16("packing")?,
                pair_id: c.u16("pair_id")?,
                layout: c.u16("layout")?,
                rows: c.u32("rows")?,
                cols: c.u32("cols")?,
            });
        }
    }
    // Banks by id, sorted: each segment finds its bank in O(log n) (a file may declare
    // 65,535 banks and as many segments). A repeated id is refused.
    let mut bank_index: Vec<(u16, usize)> = banks
        .iter()
        .enumerate()
        .map(|(i, b)| (b.bank_id, i))
        .collect();
    bank_index.sort_unstable();
    if let Some(w) = bank_index.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(StorageError::Format {
            path: path.to_path_buf(),
            offset: (HEADER + w[1].1 * BANK) as u64,
            field: "bank_id".into(),
            message: format!("bank id {} appears twice", w[0].0),
        });
    }
    let file_len = bytes.len() as u64;
    for seg in &mut segments {
        let bank = bank_index
            .binary_search_by_key(&seg.bank_id, |&(id, _)| id)
            .ok()
            .map(|i| &banks[bank_index[i].1])
            .ok_or_else(|| StorageError::Format {
                path: path.to_path_buf(),
                offset: c.at as u64,
                field: "segment bank_id".into(),
                message: format!("segment names bank {} which the file lacks", seg.bank_id),
            })?;
        let end = seg.first_entry as u64 + seg.entry_count as u64;
        if end > bank.num_entries as u64 {
            return Err(StorageError::Format {
                path: path.to_path_buf(),
                offset: c.at as u64,
                field: format!("segment {} of bank {}", seg.segment_index, seg.bank_id),
                message: format!(
                    "entries [{}, {end}) exceed the bank's {} entries",
                    seg.first_entry, bank.num_entries
                ),
            });
        }
        let n = seg.entry_count as u64 * bank.schemas.len() as u64;
        c.room(n, ENTRY, "entry table")?;
        seg.regions.reserve(n as usize);
        for i in 0..n {
            crate::interrupt::every(i, || "LYRW entry table".to_string())?;
            let at = c.at as u64;
            let offset = c.u64("region offset")?;
            let length = c.u64("region length")?;
            let inside = offset.checked_add(length).is_some_and(|e| e <= file_len);
            if !inside || offset % 64 != 0 {
                return Err(StorageError::Format {
                    path: path.to_path_buf(),
                    offset: at,
                    field: format!("region of bank {}", seg.bank_id),
                    message: format!(
                        "region [{offset}, +{length}) is not a 64-byte-aligned range inside \
                         the {file_len}-byte file"
                    ),
                });
            }
            seg.regions.push((offset, length));
        }
    }
    check_overlaps(path, c.at as u64, &segments)?;
    Ok(LyrwFile {
        logical_layer,
        flags,
        banks,
        segments,
        file_len,
        bank_index,
    })
}

/// No region may overlap the tables (which end at `tables_end`) or another region: two
/// entries (or two groups of entries) sharing bytes would alias one expert's weights into
/// another's. Empty regions occupy nothing. Sorting is O(n log n) in the regions the file
/// declares, which the table-size check already bounded by the file's length.
fn check_overlaps(path: &Path, tables_end: u64, segments: &[SegmentDescriptor]) -> Result<()> {
    let mut all: Vec<(u64, u64, u16, u32)> = Vec::new();
    for s in segments {
        let per = if s.entry_count == 0 {
            1
        } else {
            (s.regions.len() / s.entry_count as usize).max(1)
        };
        all.extend(
            s.regions
                .iter()
                .enumerate()
                .filter(|(_, r)| r.1 > 0)
                .map(|(i, r)| (r.0, r.1, s.bank_id, s.first_entry + (i / per) as u32)),
        );
    }
    all.sort_unstable();
    if let Some(r) = all.first().filter(|r| r.0 < tables_end) {
        return Err(StorageError::Format {
            path: path.to_path_buf(),
            offset: r.0,
            field: format!("region of bank {} entry {}", r.2, r.3),
            message: format!(
                "region [{}, +{}) overlaps the file's tables, which end at {tables_end}",
                r.0, r.1
            ),
        });
    }
    if let Some(w) = all.windows(2).find(|w| w[0].0 + w[0].1 > w[1].0) {
        return Err(StorageError::Format {
            path: path.to_path_buf(),
            offset: w[1].0,
            field: format!("region of bank {} entry {}", w[1].2, w[1].3),
            message: format!(
                "overlapping regions: [{}, +{}) of bank {} entry {} overlaps [{}, +{}) of bank {} \
                 entry {}",
                w[1].0, w[1].1, w[1].2, w[1].3, w[0].0, w[0].1, w[0].2, w[0].3
            ),
        });
    }
    Ok(())
}

/// Map and parse a LYRW v2 file.
pub fn read(path: &Path) -> Result<LyrwFile> {
    let map = crate::mapped::map_file(path, "LYRW bank file")?;
    parse(path, &map)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A one-bank dense file: gate, up, down regions of `rows × cols` f16.
    pub(crate) fn fixture(rows: u32, cols: u32) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&LYRW_MAGIC.to_le_bytes());
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(&7u32.to_le_bytes()); // layer
        b.extend_from_slice(&1u16.to_le_bytes()); // banks
        b.extend_from_slice(&1u16.to_le_bytes()); // segments
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        for v in [0u16, 0, 3, 1] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for v in [1u32, cols, rows, cols] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for v in [0u16, 0] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        for (i, role) in [0u16, 1, 3].into_iter().enumerate() {
            for v in [i as u16, role, 1, 0, 0xFFFF, 0] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            b.extend_from_slice(&rows.to_le_bytes());
            b.extend_from_slice(&cols.to_le_bytes());
        }
        let table_at = b.len();
        b.resize(table_at + 3 * ENTRY, 0);
        let len = (rows * cols * 2) as u64;
        let mut at = (b.len() as u64).div_ceil(64) * 64;
        for i in 0..3 {
            let e = table_at + i * ENTRY;
            b[e..e + 8].copy_from_slice(&at.to_le_bytes());
            b[e + 8..e + 16].copy_from_slice(&len.to_le_bytes());
            at = (at + len).div_ceil(64) * 64;
        }
        b.resize(at as usize, 0);
        b
    }

    #[test]
    fn parses_a_dense_bank() {
        let f = parse(Path::new("l.lyrw"), &fixture(8, 64)).unwrap();
        assert_eq!(f.logical_layer, 7);
        assert_eq!(f.banks[0].schemas.len(), 3);
        assert_eq!(role_name(f.banks[0].schemas[2].role), "down");
        assert_eq!(f.segments[0].regions.len(), 3);
    }

    #[test]
    fn hostile_files_are_refused_not_panicked_on() {
        let good = fixture(8, 64);
        for cut in 0..good.len() {
            let _ = parse(Path::new("x"), &good[..cut]);
        }
        assert!(parse(Path::new("x"), &good[..good.len() - 1]).is_err());
        let mut v1 = good.clone();
        v1[4] = 1;
        let e = parse(Path::new("x"), &v1).unwrap_err().to_string();
        assert!(e.contains("VINDEX2"), "{e}");
        let mut huge = good.clone();
        huge[12..14].copy_from_slice(&u16::MAX.to_le_bytes());
        assert!(parse(Path::new("x"), &huge).is_err());
        for i in 0..good.len().min(400) {
            let mut b = good.clone();
            b[i] ^= 0xFF;
            let _ = parse(Path::new("x"), &b);
        }
    }
}
