//! Artifact-only introspection (seed 002 §18.3): SHOW COMPONENTS, SHOW REPRESENTATIONS,
//! SHOW TENSORS and STATS answered from `index.json`, the graph and the segment headers —
//! no payload byte is read and no engine is needed. Rows are plain structs; the engine
//! turns them into `Rows`.

use std::path::Path;

use super::index::{resolve, ContainerShape};
use super::lyrw;
use super::reader::Container;
use super::segment::read_header;
use crate::error::Result;

/// One component of the system graph.
#[derive(Debug, Clone, PartialEq)]
pub struct ComponentRow {
    pub id: String,
    pub role: String,
    pub num_layers: u32,
    pub hidden_size: u32,
    /// Logical objects of this component, comma-separated.
    pub objects: String,
    pub operands: usize,
    pub source_artifact: String,
}

/// One representation (a physically present encoding of an object).
#[derive(Debug, Clone, PartialEq)]
pub struct RepresentationRow {
    pub object: String,
    pub representation: String,
    pub encoding: String,
    pub fidelity: String,
    pub segment: String,
    pub tensors: u64,
    pub payload_bytes: u64,
    pub payload_sha256: String,
    /// True for the representation the first profile selects.
    pub selected: bool,
}

/// One tensor of a segment's table.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorRow {
    pub object: String,
    pub representation: String,
    pub name: String,
    pub dtype: String,
    pub shape: Vec<u64>,
    /// Byte offset in the segment file.
    pub offset: u64,
    pub bytes: u64,
}

/// Headline facts of a container.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerStats {
    pub path: String,
    pub generation: String,
    pub schema: u32,
    pub shape: String,
    pub model: String,
    pub family: String,
    pub authority: String,
    pub num_layers: u32,
    pub hidden_size: u32,
    pub components: usize,
    pub objects: usize,
    pub representations: usize,
    pub tensors: u64,
    pub payload_bytes: u64,
    /// Bytes of every file the index references (segments, graph, capabilities, index).
    pub container_bytes: u64,
    /// Weakest fidelity across the selected representations.
    pub fidelity: String,
}

/// SHOW COMPONENTS.
pub fn show_components(dir: &Path) -> Result<Vec<ComponentRow>> {
    let c = Container::load(dir)?;
    let g = c.require_graph("SHOW COMPONENTS")?;
    Ok(g.components
        .iter()
        .map(|comp| ComponentRow {
            id: comp.id.clone(),
            role: comp.role.clone(),
            num_layers: comp.num_layers,
            hidden_size: comp.hidden_size,
            objects: g
                .objects
                .iter()
                .filter(|o| o.component == comp.id)
                .map(|o| match &o.tied_to {
                    Some(t) => format!("{} (tied to {t})", o.id),
                    None => o.id.clone(),
                })
                .collect::<Vec<_>>()
                .join(", "),
            operands: comp.operands.len(),
            source_artifact: comp.source_artifact.clone().unwrap_or_default(),
        })
        .collect())
}

/// SHOW REPRESENTATIONS.
pub fn show_representations(dir: &Path) -> Result<Vec<RepresentationRow>> {
    let c = Container::load(dir)?;
    c.require_graph("SHOW REPRESENTATIONS")?;
    Ok(c.index
        .representations
        .iter()
        .map(|(id, e)| RepresentationRow {
            object: e.object.clone(),
            representation: id.clone(),
            encoding: e.encoding.clone(),
            fidelity: e.fidelity.clone(),
            segment: e.segment.clone(),
            tensors: e.tensor_count,
            payload_bytes: e.payload_bytes,
            payload_sha256: e.payload_sha256.clone(),
            selected: c.selected_representation(&e.object).as_deref() == Some(id),
        })
        .collect())
}

/// SHOW TENSORS: every tensor of every representation, from the segment headers.
pub fn show_tensors(dir: &Path) -> Result<Vec<TensorRow>> {
    let c = Container::load(dir)?;
    if c.shape == ContainerShape::Bank {
        return bank_regions(&c);
    }
    c.require_graph("SHOW TENSORS")?;
    let mut rows = Vec::new();
    for (id, e) in &c.index.representations {
        let path = resolve(dir, &e.segment, "representations.segment")?;
        let parsed = read_header(&path)?;
        for (at, t) in parsed.header.tensors.into_iter().enumerate() {
            crate::interrupt::every(at as u64, || format!("{}: tensors", path.display()))?;
            rows.push(TensorRow {
                object: e.object.clone(),
                representation: id.clone(),
                name: t.name,
                dtype: t.dtype,
                shape: t.shape,
                offset: parsed.payload_start + t.offset,
                bytes: t.len,
            });
        }
    }
    Ok(rows)
}

/// How a bank container's index declares one of its segment files.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum BankCodec {
    /// `{"codec": "lyrw", "format_version": 2}` (or `format_version` 2 alone, the bank
    /// shape's own codec).
    LyrwV2,
    /// `{"codec": "tensor_table", "schema": 1}`: the bank shape's spine segment (plain
    /// segment framing, [`super::segment`]).
    TensorTable,
    /// Anything else: preserved, never read; the declaration as written.
    Unknown(String),
}

/// One segment file a bank container's index lists, with its declared codec and the
/// SHA-256 it records (if any).
#[derive(Debug, Clone)]
pub(crate) struct BankSegment<'a> {
    pub rel: &'a str,
    pub codec: BankCodec,
    pub sha256: Option<&'a str>,
}

/// Every segment a bank container's index lists, dispatched on its declared tags (seed 002
/// §1, §5.5: never on the file name; the loader never globs).
pub(crate) fn bank_segments(c: &Container) -> Vec<BankSegment<'_>> {
    c.index
        .segments
        .iter()
        .map(|(rel, decl)| {
            let codec = decl.get("codec").and_then(|v| v.as_str());
            let version = decl.get("format_version").and_then(|v| v.as_u64());
            let codec = match (codec, version) {
                (None | Some("lyrw"), Some(2)) => BankCodec::LyrwV2,
                (Some("tensor_table"), _)
                    if decl.get("schema").and_then(|v| v.as_u64())
                        == Some(super::SEGMENT_HEADER_SCHEMA as u64) =>
                {
                    BankCodec::TensorTable
                }
                _ => BankCodec::Unknown(decl.to_string()),
            };
            BankSegment {
                rel: rel.as_str(),
                codec,
                sha256: decl.get("sha256").and_then(|v| v.as_str()),
            }
        })
        .collect()
}

/// The LYRW v2 files among a bank container's segments.
pub(crate) fn bank_files(c: &Container) -> Vec<&str> {
    bank_segments(c)
        .into_iter()
        .filter(|s| s.codec == BankCodec::LyrwV2)
        .map(|s| s.rel)
        .collect()
}

/// SHOW TENSORS of a bank container: one row per region of every entry.
fn bank_regions(c: &Container) -> Result<Vec<TensorRow>> {
    let mut rows = Vec::new();
    for rel in bank_files(c) {
        let f = lyrw::read(&resolve(&c.dir, rel, "segments")?)?;
        for seg in &f.segments {
            let Some(bank) = f.bank(seg.bank_id) else {
                continue;
            };
            let per = bank.schemas.len().max(1);
            for (i, &(offset, len)) in seg.regions.iter().enumerate() {
                crate::interrupt::every(i as u64, || format!("{rel}: regions"))?;
                let s = &bank.schemas[i % per];
                rows.push(TensorRow {
                    object: format!("layer.{}.bank.{}", f.logical_layer, bank.bank_id),
                    representation: rel.to_string(),
                    name: format!(
                        "entry.{}.{}",
                        seg.first_entry as usize + i / per,
                        lyrw::role_name(s.role)
                    ),
                    dtype: lyrw::format_name(s.format),
                    shape: vec![s.cols as u64, s.rows as u64],
                    offset,
                    bytes: len,
                });
            }
        }
    }
    Ok(rows)
}

/// The facts `index.json` states (path, generation, schema, shape, model, family,
/// authority, layers, hidden size); counts and sizes zero, fidelity empty.
fn envelope_stats(c: &Container) -> ContainerStats {
    ContainerStats {
        path: c.dir.display().to_string(),
        generation: "VINDEX3".into(),
        schema: c.index.version,
        shape: c.shape.name().into(),
        model: c.index.model.clone(),
        family: c.index.family.clone(),
        authority: match c.index.authority {
            super::index::Authority::Canonical => "canonical".into(),
            super::index::Authority::Derived => "derived".into(),
        },
        num_layers: c.index.num_layers,
        hidden_size: c.index.hidden_size,
        components: 0,
        objects: 0,
        representations: 0,
        tensors: 0,
        payload_bytes: 0,
        container_bytes: 0,
        fidelity: String::new(),
    }
}

fn bank_stats(c: &Container) -> Result<ContainerStats> {
    let (mut tensors, mut payload, mut bytes) = (0u64, 0u64, 0u64);
    let files = bank_files(c);
    for rel in &files {
        let f = lyrw::read(&resolve(&c.dir, rel, "segments")?)?;
        bytes += f.file_len;
        for seg in &f.segments {
            tensors += seg.regions.len() as u64;
            payload += seg.regions.iter().map(|r| r.1).sum::<u64>();
        }
    }
    Ok(ContainerStats {
        representations: files.len(),
        tensors,
        payload_bytes: payload,
        container_bytes: bytes,
        ..envelope_stats(c)
    })
}

/// STATS.
pub fn stats(dir: &Path) -> Result<ContainerStats> {
    let c = Container::load(dir)?;
    if c.shape == ContainerShape::Bank {
        return bank_stats(&c);
    }
    let g = c.require_graph("STATS")?;
    let file_len = |rel: &str| {
        resolve(dir, rel, "file")
            .ok()
            .and_then(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .unwrap_or(0)
    };
    let mut container_bytes = file_len("index.json");
    if let Some(rel) = &c.index.system_graph {
        container_bytes += file_len(rel);
    }
    container_bytes += c
        .index
        .representations
        .values()
        .map(|e| file_len(&e.segment))
        .sum::<u64>();
    container_bytes += c
        .index
        .capabilities
        .values()
        .map(|e| file_len(&e.file))
        .sum::<u64>();
    let levels = [
        "source-exact",
        "source-equivalent",
        "numerically-approximate",
        "structurally-approximate",
        "analysis-only",
    ];
    let fidelity = g
        .objects
        .iter()
        .filter_map(|o| c.selected_representation(&o.id))
        .filter_map(|r| c.index.representations.get(&r))
        .map(|e| e.fidelity.as_str())
        .max_by_key(|f| levels.iter().position(|l| l == f).unwrap_or(levels.len()))
        .unwrap_or("")
        .to_string();
    Ok(ContainerStats {
        components: g.components.len(),
        objects: g.objects.len(),
        representations: c.index.representations.len(),
        tensors: c
            .index
            .representations
            .values()
            .map(|e| e.tensor_count)
            .sum(),
        payload_bytes: c
            .index
            .representations
            .values()
            .map(|e| e.payload_bytes)
            .sum(),
        container_bytes,
        fidelity,
        ..envelope_stats(&c)
    })
}
