//! REPRESENT (seed 002 §9.1, §18.16): add a representation of logical objects beside the
//! ones a container holds, as an incremental pack.
//!
//! ```text
//! segments/<object>.<variant>.bin     new segment: only the tensors whose encoding changes
//! system_graph.<sha256[..16]>.json    the graph with the object's new representation
//! index.json                          rewritten atomically last (the commit point)
//! ```
//!
//! - The source values are read from each object's **baseline** representation through
//!   the codecs (decode a batch of rows to f32, encode to the target): a Q8_0 variant of a
//!   Q4_1 container is a re-quantisation of the Q4_1 dequantisation.
//! - A tensor whose target encoding is its stored one (a norm vector under `AS Q8_0`) is not
//!   written again: the new representation records `"base": "<baseline id>"` and the reader
//!   takes every tensor it does not hold from its base. `FFN` restricts the new segment to
//!   the FFN operands (`ffn_*` roles), so `REPRESENT "text.decoder_stack" FFN AS Q8_0` adds
//!   Q8_0 FFN matrices beside the original ones and stores nothing else twice.
//! - The variant catalogue gains the variant (fidelity derived from the encoding step and
//!   the base: never stronger than either), the graph's object gains the representation,
//!   and a profile named after the variant selects it (every other object keeps its
//!   baseline). The profile carries no authority claim: SHOW PROFILES derives it.
//! - Existing segment files are never opened for writing. Until `index.json` is renamed
//!   into place the container is the old one; an error or an interrupt removes the new
//!   files, and a crash leaves only unreferenced files (COMPACT names and removes them).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::encode::ExtractEncoding;
use super::graph::ObjectRepresentation;
use super::index::{resolve, ContainerShape};
use super::reader::Container;
use super::writer::{write_segment, Counter, ExtractProgress, SegmentPlan};
use super::{atomic, variants, SEGMENT_HEADER_SCHEMA, TEXT_COMPONENT};
use crate::error::{Result, StorageError};
use crate::fsutil::hex;
use crate::model::{OperandKey, Role};

/// Which operands of an object the new representation re-encodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepresentScope {
    /// Every operand of the object.
    Whole,
    /// The FFN operands only (`ffn_*` roles).
    Ffn,
}

/// What REPRESENT added for one object.
#[derive(Debug, Clone, PartialEq)]
pub struct RepresentRow {
    pub object: String,
    pub representation: String,
    pub variant: String,
    /// The representation it takes every other tensor from.
    pub base: String,
    pub encoding: String,
    pub fidelity: String,
    pub segment: String,
    pub tensors: u64,
    pub payload_bytes: u64,
    /// The profile that selects it.
    pub profile: String,
}

/// The variant (and profile) name REPRESENT gives `encoding` over `scope`.
pub fn variant_name(encoding: ExtractEncoding, scope: RepresentScope) -> String {
    match scope {
        RepresentScope::Whole => encoding.name().to_string(),
        RepresentScope::Ffn => format!("ffn-{}", encoding.name()),
    }
}

fn refuse(dir: &Path, message: String) -> StorageError {
    StorageError::Invalid(format!("{}: REPRESENT: {message}", dir.display()))
}

/// One object's planned segment.
struct Planned {
    object: String,
    base: String,
    base_fidelity: String,
    keys: Vec<OperandKey>,
    names: Vec<String>,
}

/// Add `encoding` representations of `objects` (`None`: every object with a representation
/// of its own) to the container at `dir`. Checks `cancel` between tensors; on any error
/// the container is left as it was.
pub fn represent(
    dir: &Path,
    objects: Option<&[String]>,
    scope: RepresentScope,
    encoding: ExtractEncoding,
    progress: &mut dyn FnMut(ExtractProgress),
    cancel: &AtomicBool,
) -> Result<Vec<RepresentRow>> {
    let mut c = Container::load(dir)?;
    if c.shape == ContainerShape::Bank {
        return Err(StorageError::Unsupported(format!(
            "not supported yet: REPRESENT on a bank container ({})",
            dir.display()
        )));
    }
    if encoding == ExtractEncoding::Source {
        return Err(refuse(
            dir,
            "AS SOURCE would store the baseline's bytes again (name an encoding: F32, F16, BF16, Q8_0)"
                .into(),
        ));
    }
    let variant = variant_name(encoding, scope);
    if variants::profiles(dir, &c.index)?
        .iter()
        .any(|p| p.name == variant)
    {
        return Err(refuse(
            dir,
            format!("the container already has a profile {variant:?}"),
        ));
    }
    // The baseline binding: what the new representations are computed from.
    let model = super::reader::open_model(dir)?;
    let graph = c.require_graph("REPRESENT")?.clone();
    let comp = graph
        .components
        .iter()
        .find(|k| k.id == TEXT_COMPONENT)
        .ok_or_else(|| refuse(dir, format!("no component {TEXT_COMPONENT:?}")))?;
    let own: Vec<&str> = graph
        .objects
        .iter()
        .filter(|o| o.tied_to.is_none())
        .map(|o| o.id.as_str())
        .collect();
    let targets: Vec<String> = match objects {
        None => own.iter().map(|s| s.to_string()).collect(),
        Some(list) => {
            for o in list {
                match graph.objects.iter().find(|g| g.id == *o) {
                    None => return Err(refuse(dir, format!("no object {o:?}; objects: {own:?}"))),
                    Some(g) if g.tied_to.is_some() => {
                        return Err(refuse(
                            dir,
                            format!(
                                "{o} is tied to {} and has no representation of its own",
                                g.tied_to.as_deref().unwrap_or("")
                            ),
                        ))
                    }
                    Some(_) => {}
                }
            }
            list.to_vec()
        }
    };

    let mut plans = Vec::new();
    for object in &targets {
        let set = variants::region_set(dir, &c.index, object)?;
        if set.variants.contains_key(&variant) {
            return Err(refuse(
                dir,
                format!(
                    "region set {object} already has variant {variant:?} (present: {:?})",
                    set.variants.keys().collect::<Vec<_>>()
                ),
            ));
        }
        let base = set.variants[&set.baseline].representation.clone();
        let base_fidelity = c
            .index
            .representations
            .get(&base)
            .map(|e| e.fidelity.clone())
            .ok_or_else(|| refuse(dir, format!("baseline {base} is not recorded")))?;
        let (mut keys, mut names) = (Vec::new(), Vec::new());
        for (i, b) in comp.operands.iter().enumerate() {
            crate::interrupt::every(i as u64, || format!("{}: operand table", dir.display()))?;
            if b.object != *object {
                continue;
            }
            if scope == RepresentScope::Ffn && !b.role.starts_with("ffn_") {
                continue;
            }
            let role = Role::ALL
                .into_iter()
                .find(|r| r.name() == b.role)
                .ok_or_else(|| refuse(dir, format!("unknown operand role {:?}", b.role)))?;
            let key = OperandKey {
                layer: b.layer.map(|l| l as usize),
                role,
            };
            let op = model.operands.get(&key).ok_or_else(|| {
                refuse(
                    dir,
                    format!(
                        "operand {key} (tensor {:?} of {object}) is in an encoding this build \
                         cannot decode",
                        b.tensor
                    ),
                )
            })?;
            if encoding.target(op.dtype, &op.shape) == op.dtype {
                continue; // the same bytes: read from the base
            }
            keys.push(key);
            names.push(b.tensor.clone());
        }
        if keys.is_empty() {
            if objects.is_some() {
                return Err(refuse(
                    dir,
                    format!(
                        "nothing to represent: every {}tensor of {object} is already stored as \
                         {encoding} would store it",
                        if scope == RepresentScope::Ffn {
                            "FFN "
                        } else {
                            ""
                        }
                    ),
                ));
            }
            continue;
        }
        plans.push(Planned {
            object: object.clone(),
            base,
            base_fidelity,
            keys,
            names,
        });
    }
    if plans.is_empty() {
        return Err(refuse(
            dir,
            format!("nothing to represent: no tensor changes encoding under {variant}"),
        ));
    }

    let mut created: Vec<std::path::PathBuf> = Vec::new();
    let result = write_all(
        dir,
        &mut c,
        &model,
        &plans,
        encoding,
        &variant,
        progress,
        cancel,
        &mut created,
    );
    if result.is_err() {
        for p in &created {
            let _ = std::fs::remove_file(p);
        }
    }
    result
}

#[allow(clippy::too_many_arguments)]
fn write_all(
    dir: &Path,
    c: &mut Container,
    model: &crate::model::Model,
    plans: &[Planned],
    encoding: ExtractEncoding,
    variant: &str,
    progress: &mut dyn FnMut(ExtractProgress),
    cancel: &AtomicBool,
    created: &mut Vec<std::path::PathBuf>,
) -> Result<Vec<RepresentRow>> {
    let mut counter = Counter {
        progress,
        cancel,
        tensors_done: 0,
        tensors_total: plans.iter().map(|p| p.keys.len()).sum(),
        bytes_done: 0,
        bytes_total: plans
            .iter()
            .flat_map(|p| p.keys.iter())
            .map(|k| model.operands[k].len as u64)
            .sum(),
    };
    let artifact = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let referenced: Vec<String> = c
        .index
        .representations
        .values()
        .map(|e| e.segment.clone())
        .collect();
    let mut rows = Vec::new();
    let mut written = Vec::new();
    for p in plans {
        let rel = format!("segments/{}.{variant}.bin", p.object);
        if referenced.contains(&rel) {
            return Err(refuse(
                dir,
                format!("segment {rel} is already recorded by another representation"),
            ));
        }
        let path = dir.join(&rel);
        created.push(path);
        let plan = SegmentPlan {
            variant,
            rel,
            names: Some(p.names.clone()),
        };
        let mut w = write_segment(
            model,
            dir,
            &p.object,
            &p.keys,
            encoding,
            &artifact,
            &mut counter,
            plan,
        )
        .map_err(|e| {
            if cancel.load(Ordering::Relaxed) {
                refuse(
                    dir,
                    format!(
                        "interrupted while writing {}; the container is unchanged",
                        p.object
                    ),
                )
            } else {
                e
            }
        })?;
        // Never stronger than the bytes it was computed from (§9.2).
        w.entry.fidelity = variants::weaker(&w.entry.fidelity, &p.base_fidelity).to_string();
        w.entry.encoding = encoding.name().to_string();
        w.entry
            .extra
            .insert("base".into(), Value::String(p.base.clone()));
        w.entry
            .extra
            .insert("derived_by".into(), Value::String("REPRESENT".into()));
        written.push((p, w));
    }
    crate::interrupt::check(|| format!("{}: REPRESENT", dir.display()))?;
    if cancel.load(Ordering::Relaxed) {
        return Err(refuse(
            dir,
            "interrupted before the index was written; the container is unchanged".into(),
        ));
    }

    // The catalogue, the graph and a profile selecting the new variants.
    let mut graph = c.require_graph("REPRESENT")?.clone();
    let catalogue = c
        .index
        .variants
        .as_object_mut()
        .ok_or_else(|| refuse(dir, "index.json has no variant catalogue object".into()))?;
    for (p, w) in &written {
        let entry = catalogue
            .get_mut(&p.object)
            .and_then(|e| e.get_mut("variants"))
            .and_then(Value::as_object_mut)
            .ok_or_else(|| refuse(dir, format!("no catalogue entry for {}", p.object)))?;
        entry.insert(
            variant.to_string(),
            json!({
                "storage": w.entry.segment,
                "representation": w.rep_id,
                "fidelity": w.entry.fidelity,
                "base": p.base,
            }),
        );
        let object = graph
            .objects
            .iter_mut()
            .find(|o| o.id == p.object)
            .ok_or_else(|| refuse(dir, format!("the graph has no object {}", p.object)))?;
        let mut extra = Map::new();
        extra.insert("base".into(), Value::String(p.base.clone()));
        object.representations.push(ObjectRepresentation {
            id: w.rep_id.clone(),
            encoding: encoding.name().to_string(),
            fidelity: w.entry.fidelity.clone(),
            extra,
        });
        c.index.segments.insert(
            w.entry.segment.clone(),
            json!({"schema": SEGMENT_HEADER_SCHEMA, "codec": "tensor-table"}),
        );
    }
    let mut select = Map::new();
    for o in graph.objects.iter().filter(|o| o.tied_to.is_none()) {
        let chosen = match written.iter().find(|(p, _)| p.object == o.id) {
            Some(_) => variant.to_string(),
            None => variants::region_set(dir, &c.index, &o.id)?.baseline,
        };
        select.insert(o.id.clone(), Value::String(chosen));
    }
    c.index
        .profiles
        .push(json!({"profile": variant, "select": select}));
    for (p, w) in written.iter() {
        c.index
            .representations
            .insert(w.rep_id.clone(), w.entry.clone());
        rows.push(RepresentRow {
            object: p.object.clone(),
            representation: w.rep_id.clone(),
            variant: variant.to_string(),
            base: p.base.clone(),
            encoding: encoding.name().to_string(),
            fidelity: w.entry.fidelity.clone(),
            segment: w.entry.segment.clone(),
            tensors: w.entry.tensor_count,
            payload_bytes: w.entry.payload_bytes,
            profile: variant.to_string(),
        });
    }

    // The graph goes to a new file named by its hash, so that index.json stays the one
    // commit point; the old graph file is removed once the index no longer names it.
    let graph_bytes =
        serde_json::to_vec_pretty(&graph).map_err(|e| StorageError::Internal(e.to_string()))?;
    let graph_sha = hex(Sha256::digest(&graph_bytes));
    let graph_rel = format!("system_graph.{}.json", &graph_sha[..16]);
    let old_graph = c.index.system_graph.clone();
    if old_graph.as_deref() == Some(graph_rel.as_str()) {
        return Err(StorageError::Internal(
            "REPRESENT produced the graph the container already has".into(),
        ));
    }
    created.push(dir.join(&graph_rel));
    atomic::write_file(&dir.join(&graph_rel), &graph_bytes)?;
    c.index.system_graph = Some(graph_rel);
    c.index.system_graph_sha256 = Some(graph_sha);
    atomic::sync_dir(&dir.join("segments"))?;
    let index_bytes =
        serde_json::to_vec_pretty(&c.index).map_err(|e| StorageError::Internal(e.to_string()))?;
    atomic::write_file(&dir.join("index.json"), &index_bytes)?;
    created.clear(); // committed: nothing to remove on the way out
    atomic::sync_dir(dir)?;
    if let Some(old) = old_graph {
        if let Ok(p) = resolve(dir, &old, "system_graph") {
            let _ = std::fs::remove_file(p);
            atomic::sync_dir(dir)?;
        }
    }
    Ok(rows)
}

/// The representations `rep` takes tensors from, itself first: its `base` chain, checked
/// (same object, recorded, no cycle, at most [`MAX_BASE_CHAIN`] long).
pub fn base_chain(c: &Container, rep: &str) -> Result<Vec<String>> {
    let mut chain = vec![rep.to_string()];
    let object = c
        .index
        .representations
        .get(rep)
        .map(|e| e.object.clone())
        .unwrap_or_default();
    let mut at = rep.to_string();
    loop {
        let Some(e) = c.index.representations.get(&at) else {
            return Err(StorageError::Invalid(format!(
                "{}: representation {at} is not recorded in index.json",
                c.dir.display()
            )));
        };
        let Some(base) = e.extra.get("base") else {
            return Ok(chain);
        };
        let base = base.as_str().ok_or_else(|| StorageError::Format {
            path: c.dir.join("index.json"),
            offset: 0,
            field: format!("representations[{at:?}].base"),
            message: "not a representation id".into(),
        })?;
        let bad = |why: String| StorageError::Format {
            path: c.dir.join("index.json"),
            offset: 0,
            field: format!("representations[{at:?}].base"),
            message: why,
        };
        match c.index.representations.get(base) {
            None => return Err(bad(format!("base {base} is not recorded"))),
            Some(b) if b.object != object => {
                return Err(bad(format!(
                    "base {base} is a representation of {}, not {object}",
                    b.object
                )))
            }
            Some(_) => {}
        }
        if chain.iter().any(|r| r == base) {
            return Err(bad(format!("base chain {chain:?} returns to {base}")));
        }
        if chain.len() >= MAX_BASE_CHAIN {
            return Err(bad(format!("base chain longer than {MAX_BASE_CHAIN}")));
        }
        chain.push(base.to_string());
        at = base.to_string();
    }
}

/// Longest `base` chain a reader follows.
pub const MAX_BASE_CHAIN: usize = 8;
