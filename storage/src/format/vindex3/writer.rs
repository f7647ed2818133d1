//! EXTRACT: write a [`Model`] as a graph-shape VINDEX3 container.
//!
//! Streaming: tensors are read from the source's mapping one at a time (re-encoded in
//! bounded batches) and written straight to the segment file while three SHA-256s (segment,
//! payload, tensor) are updated, the segment hash on a second thread. Nothing holds the
//! whole model in memory. Order: segments, capability files, `system_graph.json`,
//! `index.json`, all inside a temporary sibling directory renamed to the target last
//! (see the module docs of [`super`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::atomic;
use super::encode::{reencode, ExtractEncoding};
use super::graph::{
    Component, LogicalObject, ObjectRepresentation, OperandBinding, SourceBinding, SystemGraph,
};
use super::index::{CapabilityEntry, RepresentationEntry, Vindex3Index};
use super::segment::{align_up, frame_header, SegmentHeader, TensorEntry};
use super::{GRAPH_SCHEMA, INDEX_SCHEMA, SEGMENT_HEADER_SCHEMA, TEXT_COMPONENT};
use crate::dtype::DType;
use crate::error::{Result, StorageError};
use crate::fsutil::hex;
use crate::model::{Model, OperandKey, Role};
use crate::tokenizer_spec::TokenizerSpec;

/// Progress of an EXTRACT, reported after each tensor.
#[derive(Debug, Clone)]
pub struct ExtractProgress {
    pub object: String,
    pub tensor: String,
    pub tensors_done: usize,
    pub tensors_total: usize,
    /// Source bytes consumed so far and in all.
    pub bytes_done: u64,
    pub bytes_total: u64,
}

/// What an EXTRACT wrote.
#[derive(Debug, Clone)]
pub struct ExtractReport {
    pub path: PathBuf,
    pub objects: usize,
    pub tensors: usize,
    /// Sum of the written tensors' bytes (alignment gaps excluded).
    pub payload_bytes: u64,
    pub encoding: ExtractEncoding,
    pub seconds: f64,
}

/// The logical objects of the text component, in write order.
const OBJECTS: [&str; 4] = [
    "text.embedding",
    "text.decoder_stack",
    "text.final_norm",
    "text.output_head",
];

/// One tensor to write: its operand, source and target facts.
struct Planned {
    key: OperandKey,
    name: String,
    source_name: String,
    src_dtype: DType,
    dtype: DType,
    shape: Vec<usize>,
    offset: u64,
    len: u64,
}

/// Write `model` as a VINDEX3 graph container at `out`, which must not exist or be an
/// empty directory. On error nothing is left at `out` (the temporary directory is removed).
pub fn extract(
    model: &Model,
    out: &Path,
    encoding: ExtractEncoding,
    progress: &mut dyn FnMut(ExtractProgress),
) -> Result<ExtractReport> {
    extract_cancellable(model, out, encoding, progress, &AtomicBool::new(false))
}

/// [`extract`], checking `cancel` between tensors: once it is set the EXTRACT stops,
/// removes its temporary directory and returns an error saying it was interrupted.
pub fn extract_cancellable(
    model: &Model,
    out: &Path,
    encoding: ExtractEncoding,
    progress: &mut dyn FnMut(ExtractProgress),
    cancel: &AtomicBool,
) -> Result<ExtractReport> {
    extract_stamped(model, out, encoding, None, progress, cancel)
}

/// The written container, still under its temporary name, re-opened as a reader would:
/// every operand its execution surface requires present with its shape (§17.4: closure
/// is enforced at encode). A failure leaves nothing at `out`.
fn check_closes(tmp: &Path, out: &Path) -> Result<()> {
    let model = super::reader::open_model(tmp).map_err(|e| {
        StorageError::Internal(format!(
            "EXTRACT to {}: the written container does not close, nothing was published: {e}",
            out.display()
        ))
    })?;
    if let Some((key, why)) = model.absent.iter().next() {
        return Err(StorageError::Internal(format!(
            "EXTRACT to {}: the written container leaves out {key} ({why}); nothing was \
             published",
            out.display()
        )));
    }
    Ok(())
}

/// Provenance of a container COMPILE derives from a model state (seed 002 §5.2, §9.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Derivation {
    /// SHA-256 identity of the base the state was built on.
    pub derived_from_model: String,
    /// SHA-256 of each applied patch, in application order.
    pub applied_patches: Vec<String>,
    /// The logical objects whose effective values differ from the base's (an edit touched
    /// them). Their decode is not the source's values, so they are recorded
    /// `numerically-approximate` — never `source-exact` or `source-equivalent` — with
    /// `"changed": "edited state"`, and the profile is named `edited`, never `exact`.
    pub changed_objects: BTreeSet<String>,
}

/// The representation field that marks an object whose values an edit changed.
pub const CHANGED_FIELD: &str = "changed";

/// [`extract_cancellable`] that stamps the container `authority: derived` with
/// `derived_from_model` and the applied patches when `derivation` is given.
pub fn extract_stamped(
    model: &Model,
    out: &Path,
    encoding: ExtractEncoding,
    derivation: Option<&Derivation>,
    progress: &mut dyn FnMut(ExtractProgress),
    cancel: &AtomicBool,
) -> Result<ExtractReport> {
    let started = Instant::now();
    // An operand the binding could not decode cannot be re-encoded or carried through the
    // model: refused before anything is written (§17.4 closure).
    if let Some((key, why)) = model.absent.iter().next() {
        return Err(StorageError::Unsupported(format!(
            "not supported yet: EXTRACT of a model with an operand this build left out \
             ({} in all; first {key}: {why}); nothing was written",
            model.absent.len()
        )));
    }
    let tmp = atomic::claim_target(out)?;
    let mut counter = Counter {
        progress,
        cancel,
        tensors_done: 0,
        tensors_total: model.operands.len(),
        bytes_done: 0,
        bytes_total: model.operands.values().map(|o| o.len as u64).sum(),
    };
    let written = write_container(model, &tmp, encoding, derivation, &mut counter)
        .and_then(|w| check_closes(&tmp, out).map(|()| w));
    match written {
        Ok((objects, tensors, payload_bytes)) => {
            if let Err(e) = atomic::publish_dir(&tmp, out) {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(e);
            }
            Ok(ExtractReport {
                path: out.to_path_buf(),
                objects,
                tensors,
                payload_bytes,
                encoding,
                seconds: started.elapsed().as_secs_f64(),
            })
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Err(e)
        }
    }
}

/// Longest common prefix of `names` that ends with a `.` (the binding prefix).
fn binding_prefix(names: &[&str]) -> String {
    let Some(first) = names.first() else {
        return String::new();
    };
    let mut lcp = first.len();
    for n in &names[1..] {
        lcp = lcp.min(
            first
                .bytes()
                .zip(n.bytes())
                .take_while(|(a, b)| a == b)
                .count(),
        );
    }
    // Never take a whole name: keep at least one character after the prefix.
    let min_len = names.iter().map(|n| n.len()).min().unwrap_or(0);
    let lcp = lcp.min(min_len.saturating_sub(1));
    match first.is_char_boundary(lcp).then(|| first[..lcp].rfind('.')) {
        Some(Some(i)) => first[..=i].to_string(),
        _ => String::new(),
    }
}

/// Tensor names of one object: source names relative to the binding prefix, or canonical
/// `{layer}.{role}` names when those would be empty or repeat.
fn tensor_names(model: &Model, keys: &[OperandKey]) -> (String, Vec<String>) {
    let sources: Vec<&str> = keys
        .iter()
        .map(|k| model.operands[k].source_name.as_str())
        .collect();
    let prefix = binding_prefix(&sources);
    let names: Vec<String> = sources
        .iter()
        .map(|s| s[prefix.len()..].to_string())
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    if names
        .iter()
        .all(|n| !n.is_empty() && seen.insert(n.as_str()))
    {
        return (prefix, names);
    }
    let canonical = keys
        .iter()
        .map(|k| match k.layer {
            Some(l) => format!("{l}.{}", k.role.name()),
            None => k.role.name().to_string(),
        })
        .collect();
    (String::new(), canonical)
}

/// Hashers and file of the segment being written.
struct SegmentSink {
    file: crate::fsutil::AtomicFile,
    path: PathBuf,
    segment: Sha256,
    payload: Sha256,
    tensor: Option<Sha256>,
    written: u64,
}

impl SegmentSink {
    /// Bytes of the framing or of alignment gaps: segment hash only.
    fn frame(&mut self, bytes: &[u8]) -> Result<()> {
        self.segment.update(bytes);
        self.written += bytes.len() as u64;
        self.file
            .write_all(bytes)
            .map_err(|e| StorageError::io(&self.path, e))
    }

    /// Tensor bytes: every hash, with the segment hash and the write on a second thread
    /// for large chunks.
    fn data(&mut self, bytes: &[u8]) -> Result<()> {
        const CHUNK: usize = 4 << 20;
        for c in bytes.chunks(CHUNK) {
            let SegmentSink {
                file,
                path,
                segment,
                payload,
                tensor,
                ..
            } = self;
            let mut hash_payload = || {
                payload.update(c);
                if let Some(t) = tensor.as_mut() {
                    t.update(c);
                }
            };
            let mut write = || -> Result<()> {
                segment.update(c);
                file.write_all(c).map_err(|e| StorageError::io(&*path, e))
            };
            if c.len() >= 256 << 10 {
                let ((), r) = rayon::join(hash_payload, write);
                r?;
            } else {
                hash_payload();
                write()?;
            }
            self.written += c.len() as u64;
        }
        Ok(())
    }
}

/// Fidelity of one tensor written as `dst` from `src` (seed 002 §9.2).
pub(super) fn tensor_fidelity(src: DType, dst: DType) -> u8 {
    if src == dst {
        0 // source-exact
    } else if dst == DType::F32 {
        1 // source-equivalent: every decoded value is an f32
    } else {
        2 // numerically-approximate
    }
}

pub(super) fn fidelity_name(level: u8) -> &'static str {
    match level {
        0 => "source-exact",
        1 => "source-equivalent",
        _ => "numerically-approximate",
    }
}

/// What writing one object's segment produced.
pub(super) struct WrittenObject {
    pub(super) rep_id: String,
    pub(super) entry: RepresentationEntry,
    binding: SourceBinding,
    operands: Vec<OperandBinding>,
}

pub(super) struct Counter<'a> {
    pub(super) progress: &'a mut dyn FnMut(ExtractProgress),
    pub(super) cancel: &'a AtomicBool,
    pub(super) tensors_done: usize,
    pub(super) tensors_total: usize,
    pub(super) bytes_done: u64,
    pub(super) bytes_total: u64,
}

/// Where and under which names one object's segment is written.
pub(super) struct SegmentPlan<'a> {
    /// The variant name: `{object}@{variant}` is the representation id.
    pub(super) variant: &'a str,
    /// Container-relative path of the segment file.
    pub(super) rel: String,
    /// Tensor names (one per key, in key order); `None`: derived from the source names.
    pub(super) names: Option<Vec<String>>,
}

#[allow(clippy::too_many_arguments)]
pub(super) fn write_segment(
    model: &Model,
    dir: &Path,
    object: &str,
    keys: &[OperandKey],
    encoding: ExtractEncoding,
    artifact: &str,
    counter: &mut Counter<'_>,
    plan: SegmentPlan<'_>,
) -> Result<WrittenObject> {
    let (prefix, names) = match plan.names {
        Some(n) => (String::new(), n),
        None => tensor_names(model, keys),
    };
    let mut planned: Vec<Planned> = keys
        .iter()
        .zip(names)
        .map(|(k, name)| {
            let op = &model.operands[k];
            let dtype = encoding.target(op.dtype, &op.shape);
            let elems = op.shape.iter().product::<usize>() as u64;
            let len = dtype.bytes_for(elems).ok_or_else(|| {
                StorageError::Invalid(format!(
                    "{}: shape {:?} cannot be written as {dtype}",
                    op.source_name, op.shape
                ))
            })?;
            Ok(Planned {
                key: *k,
                name,
                source_name: op.source_name.clone(),
                src_dtype: op.dtype,
                dtype,
                shape: op.shape.clone(),
                offset: 0,
                len,
            })
        })
        .collect::<Result<_>>()?;
    planned.sort_by(|a, b| a.name.cmp(&b.name));
    let mut at = 0u64;
    for p in &mut planned {
        p.offset = align_up(at);
        at = p.offset + p.len;
    }
    let rep_id = format!("{object}@{}", plan.variant);
    let header = SegmentHeader {
        schema: SEGMENT_HEADER_SCHEMA,
        representation: rep_id.clone(),
        tensors: planned
            .iter()
            .map(|p| TensorEntry {
                name: p.name.clone(),
                dtype: p.dtype.name().to_string(),
                shape: p.shape.iter().map(|&d| d as u64).collect(),
                offset: p.offset,
                len: p.len,
                extra: Map::new(),
            })
            .collect(),
        extra: Map::new(),
    };
    let rel = plan.rel;
    let path = dir.join(&rel);
    let file = crate::fsutil::AtomicFile::create(&path)?;
    let tmp = file.temp_path().to_path_buf();
    let mut sink = SegmentSink {
        file,
        path: tmp.clone(),
        segment: Sha256::new(),
        payload: Sha256::new(),
        tensor: None,
        written: 0,
    };
    sink.frame(&frame_header(&header)?)?;
    let payload_start = sink.written;
    let many = planned.len() > 1;
    let mut tensor_sha = BTreeMap::new();
    let mut fidelity = 0u8;
    let mut payload_bytes = 0u64;
    let mut source_bytes = 0u64;
    for p in &planned {
        if counter.cancel.load(Ordering::Relaxed) {
            return Err(StorageError::Invalid(format!(
                "EXTRACT interrupted while writing {object}; nothing was left at the target"
            )));
        }
        let gap = payload_start + p.offset - sink.written;
        if gap > 0 {
            sink.frame(&vec![0u8; gap as usize])?;
        }
        let op = &model.operands[&p.key];
        let view = model.view_of(op);
        sink.tensor = many.then(Sha256::new);
        if p.dtype == p.src_dtype {
            sink.data(view.bytes)?;
        } else {
            reencode(p.src_dtype, p.dtype, &p.shape, view.bytes, &mut |b| {
                sink.data(b)
            })?;
        }
        let written = sink.written - payload_start - p.offset;
        if written != p.len {
            return Err(StorageError::Internal(format!(
                "{}: wrote {written} bytes for {}, planned {}",
                rel, p.name, p.len
            )));
        }
        if let Some(t) = sink.tensor.take() {
            tensor_sha.insert(p.name.clone(), hex(t.finalize()));
        }
        fidelity = fidelity.max(tensor_fidelity(p.src_dtype, p.dtype));
        payload_bytes += p.len;
        source_bytes += view.bytes.len() as u64;
        counter.tensors_done += 1;
        counter.bytes_done += view.bytes.len() as u64;
        (counter.progress)(ExtractProgress {
            object: object.to_string(),
            tensor: p.name.clone(),
            tensors_done: counter.tensors_done,
            tensors_total: counter.tensors_total,
            bytes_done: counter.bytes_done,
            bytes_total: counter.bytes_total,
        });
    }
    let SegmentSink {
        file,
        segment,
        payload,
        written,
        ..
    } = sink;
    file.commit()?;
    let payload_sha256 = hex(payload.finalize());
    if !many {
        if let Some(p) = planned.first() {
            tensor_sha.insert(p.name.clone(), payload_sha256.clone());
        }
    }
    let fidelity = fidelity_name(fidelity).to_string();
    let entry = RepresentationEntry {
        object: object.to_string(),
        encoding: encoding.name().to_string(),
        segment: rel,
        tensor_count: planned.len() as u64,
        payload_bytes,
        payload_sha256,
        segment_sha256: hex(segment.finalize()),
        segment_bytes: Some(written),
        fidelity,
        tensor_sha256: tensor_sha,
        extra: Map::new(),
    };
    let binding = SourceBinding {
        artifact: artifact.to_string(),
        tensor_prefix: prefix,
        tensors: planned.len() as u64,
        bytes: source_bytes,
        extra: Map::new(),
    };
    let operands = planned
        .iter()
        .map(|p| OperandBinding {
            layer: p.key.layer.map(|l| l as u32),
            role: p.key.role.name().to_string(),
            object: object.to_string(),
            tensor: p.name.clone(),
            source_name: Some(p.source_name.clone()),
            extra: Map::new(),
        })
        .collect();
    Ok(WrittenObject {
        rep_id,
        entry,
        binding,
        operands,
    })
}

/// Write the capability snapshot files; returns their index entries.
pub(super) fn write_capabilities(
    model: &Model,
    dir: &Path,
) -> Result<BTreeMap<String, CapabilityEntry>> {
    let spec = model.tokenizer_spec()?;
    let mut files: Vec<(&str, &str, Vec<u8>)> = Vec::new();
    let spec_json =
        serde_json::to_vec(&*spec).map_err(|e| StorageError::Internal(e.to_string()))?;
    files.push(("tokenizer_spec", "tokenizer_spec.json", spec_json));
    if let TokenizerSpec::Json { json, .. } = &*spec {
        files.push(("tokenizer", "tokenizer.json", json.clone().into_bytes()));
    }
    if let Some(t) = spec.chat_template() {
        files.push((
            "chat_template",
            "chat_template.jinja",
            t.as_bytes().to_vec(),
        ));
    }
    let special = &model.surface.special;
    let token = |id: Option<u32>| -> Value {
        let text = match (&*spec, id) {
            (TokenizerSpec::Gguf { vocab, .. }, Some(i)) => vocab.tokens.get(i as usize).cloned(),
            _ => None,
        };
        match (id, text) {
            (Some(i), Some(t)) => json!({"id": i, "content": t}),
            (Some(i), None) => json!({"id": i}),
            (None, _) => Value::Null,
        }
    };
    let map = json!({
        "bos_token": token(special.bos),
        "eos_token": token(special.eos),
        "pad_token": token(special.pad),
        "unk_token": token(special.unk),
        "eot_tokens": special.eot.iter().map(|&i| token(Some(i))).collect::<Vec<_>>(),
        "add_bos_token": special.add_bos,
        "add_eos_token": special.add_eos,
    });
    let map = serde_json::to_vec_pretty(&map).map_err(|e| StorageError::Internal(e.to_string()))?;
    files.push(("special_tokens_map", "special_tokens_map.json", map));
    let mut eos: Vec<u32> = special.eos.into_iter().collect();
    eos.extend(
        special
            .eot
            .iter()
            .copied()
            .filter(|i| Some(*i) != special.eos),
    );
    let generation = json!({
        "bos_token_id": special.bos,
        "eos_token_id": eos,
        "pad_token_id": special.pad,
    });
    let generation = serde_json::to_vec_pretty(&generation)
        .map_err(|e| StorageError::Internal(e.to_string()))?;
    files.push(("generation_config", "generation_config.json", generation));
    let mut out = BTreeMap::new();
    for (name, file, bytes) in files {
        atomic::write_file(&dir.join(file), &bytes)?;
        out.insert(
            name.to_string(),
            CapabilityEntry {
                file: file.to_string(),
                bytes: bytes.len() as u64,
                sha256: hex(Sha256::digest(&bytes)),
                extra: Map::new(),
            },
        );
    }
    Ok(out)
}

/// Write everything into `dir`; returns (objects, tensors, payload bytes).
fn write_container(
    model: &Model,
    dir: &Path,
    encoding: ExtractEncoding,
    derivation: Option<&Derivation>,
    counter: &mut Counter<'_>,
) -> Result<(usize, usize, u64)> {
    let surface = &model.surface;
    std::fs::create_dir(dir.join("segments"))
        .map_err(|e| StorageError::io(dir.join("segments"), e))?;
    let artifact = model
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();

    // Group operands by logical object; check the head is either tied or present.
    let mut by_object: BTreeMap<&str, Vec<OperandKey>> = BTreeMap::new();
    for k in model.operands.keys() {
        if surface.tied_head && k.role == Role::Output {
            return Err(StorageError::Invalid(
                "the execution surface says the head is tied but an output operand exists".into(),
            ));
        }
        by_object.entry(k.role.object()).or_default().push(*k);
    }
    for required in ["text.embedding", "text.decoder_stack", "text.final_norm"] {
        if !by_object.contains_key(required) {
            return Err(StorageError::MissingOperand {
                key: format!("every operand of {required}"),
            });
        }
    }
    if !surface.tied_head && !by_object.contains_key("text.output_head") {
        return Err(StorageError::MissingOperand {
            key: "output (the head is not tied; text.output_head has no operand)".into(),
        });
    }

    let provenance = super::provenance::of_model(model)?;
    let mut objects = Vec::new();
    let mut representations = BTreeMap::new();
    let mut segments = BTreeMap::new();
    let mut operand_table = Vec::new();
    let mut select = Map::new();
    let mut variants = Map::new();
    let mut weakest = 0u8;
    let mut payload_total = 0u64;
    for object in OBJECTS {
        let kind = object.split_once('.').map(|(_, k)| k).unwrap_or(object);
        let Some(keys) = by_object.get(object) else {
            // Only a tied head has no operands of its own.
            objects.push(LogicalObject {
                id: object.to_string(),
                component: TEXT_COMPONENT.to_string(),
                kind: kind.to_string(),
                source_bindings: Vec::new(),
                representations: Vec::new(),
                tied_to: Some("text.embedding".to_string()),
                extra: Map::new(),
            });
            continue;
        };
        let plan = SegmentPlan {
            variant: encoding.name(),
            rel: format!("segments/{object}.bin"),
            names: None,
        };
        let mut w = write_segment(model, dir, object, keys, encoding, &artifact, counter, plan)?;
        // Fidelity through the whole chain: never stronger than what the source held.
        if let Some(floor) = provenance.floor.get(object) {
            w.entry.fidelity = super::variants::weaker(&w.entry.fidelity, floor).to_string();
        }
        let changed = derivation.is_some_and(|d| d.changed_objects.contains(object));
        if changed {
            w.entry.fidelity =
                super::variants::weaker(&w.entry.fidelity, "numerically-approximate").to_string();
            w.entry
                .extra
                .insert(CHANGED_FIELD.into(), json!("edited state"));
        }
        let level = super::variants::fidelity_rank(&w.entry.fidelity).unwrap_or(2) as u8;
        weakest = weakest.max(level);
        payload_total += w.entry.payload_bytes;
        segments.insert(
            w.entry.segment.clone(),
            json!({"schema": SEGMENT_HEADER_SCHEMA, "codec": "tensor-table"}),
        );
        select.insert(object.to_string(), Value::String(encoding.name().into()));
        variants.insert(
            object.to_string(),
            super::variants::single_variant_entry(
                object,
                encoding.name(),
                &super::variants::Variant {
                    storage: w.entry.segment.clone(),
                    representation: w.rep_id.clone(),
                    fidelity: w.entry.fidelity.clone(),
                },
            ),
        );
        objects.push(LogicalObject {
            id: object.to_string(),
            component: TEXT_COMPONENT.to_string(),
            kind: kind.to_string(),
            source_bindings: vec![w.binding],
            representations: vec![ObjectRepresentation {
                id: w.rep_id.clone(),
                encoding: encoding.name().to_string(),
                fidelity: w.entry.fidelity.clone(),
                extra: Map::new(),
            }],
            tied_to: None,
            extra: Map::new(),
        });
        operand_table.extend(w.operands);
        representations.insert(w.rep_id, w.entry);
    }

    let capabilities = write_capabilities(model, dir)?;

    // The schema-6 declarations, derived from the surface and the bound operands by the
    // one derivation the reader checks against.
    let n_layers = surface.n_layers;
    let bound = super::program::bound_roles(&operand_table, n_layers);
    let attention = (0..n_layers)
        .map(|l| super::program::attention_policy(surface, l))
        .collect();
    let program = (0..n_layers)
        .map(|l| super::program::layer_program(surface, l, &bound[l]))
        .collect();
    let continuation = (0..n_layers)
        .map(|l| super::program::layer_state(surface, l))
        .collect();
    let graph = SystemGraph {
        schema: GRAPH_SCHEMA,
        components: vec![Component {
            id: TEXT_COMPONENT.to_string(),
            role: "primary_text".into(),
            source_artifact: Some(artifact.clone()),
            num_layers: surface.n_layers as u32,
            hidden_size: surface.hidden as u32,
            attention,
            execution_surface: serde_json::to_value(surface)
                .map_err(|e| StorageError::Internal(e.to_string()))?,
            operands: operand_table,
            program,
            continuation,
            extra: Map::new(),
        }],
        objects,
        edges: Vec::new(),
        extra: Map::new(),
    };
    let graph_bytes =
        serde_json::to_vec_pretty(&graph).map_err(|e| StorageError::Internal(e.to_string()))?;
    atomic::write_file(&dir.join("system_graph.json"), &graph_bytes)?;

    let tensors = model.operands.len();
    let object_count = graph.objects.len();
    let source_bytes = std::fs::metadata(&model.path)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len());
    let mut extra = Map::new();
    extra.insert("vindex_spec_version".into(), json!(2));
    extra.insert(
        "generator".into(),
        json!(format!("lql-storage {}", env!("CARGO_PKG_VERSION"))),
    );
    extra.insert("vocab_size".into(), json!(surface.vocab));
    if let Some(d) = derivation {
        extra.insert("applied_patches".into(), json!(d.applied_patches));
    }
    extra.insert(
        "source".into(),
        json!({"artifact": artifact, "kind": model.kind, "bytes": source_bytes}),
    );
    extra.insert("provenance".into(), json!({"chain": provenance.chain}));
    let index = Vindex3Index {
        version: INDEX_SCHEMA,
        model: model
            .path
            .file_stem()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        family: surface.source_architecture.clone(),
        hidden_size: surface.hidden as u32,
        num_layers: surface.n_layers as u32,
        system_graph: Some("system_graph.json".into()),
        moe_manifest: None,
        representations,
        segments,
        // The profile carries no authority claim (it is derived from its selections); a
        // lossy extract is never named `exact`.
        profiles: vec![json!({
            "profile": if derivation.is_some_and(|d| !d.changed_objects.is_empty()) {
                "edited"
            } else if weakest <= 1 {
                "exact"
            } else {
                "compact-approximate"
            },
            "select": select,
        })],
        variants: Value::Object(variants),
        // COMPILE's derivation (the base identity and applied patches) takes precedence;
        // otherwise the provenance chain decides (a container of a container is derived).
        authority: match derivation {
            Some(_) => super::index::Authority::Derived,
            None => provenance.authority,
        },
        precision_map: None,
        derived_from_model: match derivation {
            Some(d) => Some(d.derived_from_model.clone()),
            None => provenance.derived_from_model.clone(),
        },
        system_graph_sha256: Some(hex(Sha256::digest(&graph_bytes))),
        capabilities,
        feature_labels: None,
        extra,
    };
    let index_bytes =
        serde_json::to_vec_pretty(&index).map_err(|e| StorageError::Internal(e.to_string()))?;
    atomic::sync_dir(&dir.join("segments"))?;
    atomic::write_file(&dir.join("index.json"), &index_bytes)?;
    Ok((object_count, tensors, payload_total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        assert_eq!(binding_prefix(&["token_embd.weight"]), "token_embd.");
        assert_eq!(
            binding_prefix(&["blk.0.attn_q.weight", "blk.1.attn_q.weight"]),
            "blk."
        );
        assert_eq!(
            binding_prefix(&["blk.10.a.weight", "blk.11.a.weight"]),
            "blk."
        );
        assert_eq!(binding_prefix(&["weight"]), "");
        assert_eq!(binding_prefix(&["a.x", "b.x"]), "");
    }
}
