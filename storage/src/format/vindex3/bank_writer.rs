//! `EXTRACT … FORMAT VINDEX3 SHAPE BANK`: write a mixture-of-experts [`Model`] as a bank
//! container (seed 002 §5.4): `index.json` (moe_manifest set, system_graph null),
//! `moe_manifest.json` (§8), one LYRW v2 file per layer (§6) and the spine segment.
//!
//! ```text
//! <container>/
//! ├── index.json                  schema 4; `segments` declares every file's codec + sha256
//! ├── moe_manifest.json           schema 1: surface, spine operand table, one moe_layer each
//! ├── segments/text.spine.bin     plain tensor table: embedding, norms, attention, routers,
//! │                               shared-expert gates, head (control & dense spine, §4)
//! ├── banks/layer_000.lyrw        bank 0 routed (E entries), bank 1 shared (1 entry) if any
//! └── tokenizer_spec.json, …      capability snapshot, as the graph shape writes it
//! ```
//!
//! Region layout inside a LYRW file (§6.4, §7): after the tables, bank by bank, role by
//! role (gate, up, down), entry by entry; every region starts on a 64-byte boundary. A
//! routed bank's regions of one role are therefore one contiguous run in entry order, and
//! a group extent (`GROUP n` experts, §7) is `n` consecutive entries whose regions of each
//! role are one contiguous, 64-aligned byte range: one read per role per extent. Routed
//! regions must be a multiple of 64 bytes long (so runs stay contiguous); other expert
//! geometries are refused as not supported yet. Expert bytes are copied as stored (the
//! container is `source-exact`); encodings without a LYRW format tag are refused.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::encode::ExtractEncoding;
use super::index::Vindex3Index;
use super::lyrw::LYRW_MAGIC;
use super::moe_manifest::{
    format_tag, normalisation_name, BankRef, ExpertDims, LayerEntry, ManifestModel, MoeLayer,
    MoeManifest, Router, Selection, SpineOperand, MANIFEST_SCHEMA,
};
use super::segment::{align_up, frame_header, SegmentHeader, TensorEntry};
use super::writer::{ExtractProgress, ExtractReport};
use super::{atomic, INDEX_SCHEMA, SEGMENT_HEADER_SCHEMA};
use crate::error::{Result, StorageError};
use crate::fsutil::hex;
use crate::model::{Model, OperandKey, Role};

/// Region alignment inside a LYRW file (§6.1).
pub const REGION_ALIGN: u64 = 64;
/// The spine segment's container-relative path.
pub const SPINE: &str = "segments/text.spine.bin";
/// Group width used when EXTRACT names none: 8 experts, or all when 8 does not divide them.
pub const DEFAULT_GROUP: usize = 8;

/// Roles stored in banks (everything else is spine).
const ROUTED: [(Role, u16); 3] = [
    (Role::FfnGateExps, 0),
    (Role::FfnUpExps, 1),
    (Role::FfnDownExps, 3),
];
const SHARED: [(Role, u16); 3] = [
    (Role::FfnGateShexp, 0),
    (Role::FfnUpShexp, 1),
    (Role::FfnDownShexp, 3),
];

fn is_bank_role(r: Role) -> bool {
    ROUTED.iter().chain(&SHARED).any(|&(x, _)| x == r)
}

fn internal(e: impl std::fmt::Display) -> StorageError {
    StorageError::Internal(e.to_string())
}

/// The bank layout's group width for `experts`: `group`, checked, or the default.
pub fn group_width(experts: usize, group: Option<usize>) -> Result<usize> {
    match group {
        Some(g) if g == 0 || g > experts || !experts.is_multiple_of(g) => {
            Err(StorageError::Invalid(format!(
                "GROUP {g}: a group extent must hold 1 to {experts} experts and divide the \
                 {experts} experts of each bank (seed 002 §7)"
            )))
        }
        Some(g) => Ok(g),
        None if experts.is_multiple_of(DEFAULT_GROUP) => Ok(DEFAULT_GROUP),
        None => Ok(experts),
    }
}

/// Write `model` (a mixture-of-experts model) as a bank-shape container at `out`, which
/// must not exist or be an empty directory. `group`: experts per group extent (§7).
pub fn extract_bank(
    model: &Model,
    out: &Path,
    group: Option<usize>,
    progress: &mut dyn FnMut(ExtractProgress),
    cancel: &AtomicBool,
) -> Result<ExtractReport> {
    let started = Instant::now();
    let Some(moe) = &model.surface.moe else {
        return Err(StorageError::Unsupported(
            "not supported yet: SHAPE BANK of a dense model (dense layers as single-entry \
             banks); extract it in the graph shape"
                .into(),
        ));
    };
    let g = group_width(moe.n_experts, group)?;
    let tmp = atomic::claim_target(out)?;
    let mut p = Progress {
        progress,
        cancel,
        done: 0,
        total: model.operands.len(),
        bytes_done: 0,
        bytes_total: model.operands.values().map(|o| o.len as u64).sum(),
    };
    match write_all(model, &tmp, g, &mut p) {
        Ok((tensors, payload_bytes)) => {
            if let Err(e) = atomic::publish_dir(&tmp, out) {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(e);
            }
            Ok(ExtractReport {
                path: out.to_path_buf(),
                objects: 1 + model.surface.n_layers,
                tensors,
                payload_bytes,
                encoding: ExtractEncoding::Source,
                seconds: started.elapsed().as_secs_f64(),
            })
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Err(e)
        }
    }
}

struct Progress<'a> {
    progress: &'a mut dyn FnMut(ExtractProgress),
    cancel: &'a AtomicBool,
    done: usize,
    total: usize,
    bytes_done: u64,
    bytes_total: u64,
}

impl Progress<'_> {
    fn tick(&mut self, object: &str, tensor: &str, bytes: u64) -> Result<()> {
        if self.cancel.load(Ordering::Relaxed) {
            return Err(StorageError::Invalid("EXTRACT interrupted".into()));
        }
        self.done += 1;
        self.bytes_done += bytes;
        (self.progress)(ExtractProgress {
            object: object.into(),
            tensor: tensor.into(),
            tensors_done: self.done,
            tensors_total: self.total,
            bytes_done: self.bytes_done,
            bytes_total: self.bytes_total,
        });
        Ok(())
    }
}

/// A file written through `AtomicFile` while hashing it.
struct Hashed {
    f: crate::fsutil::AtomicFile,
    sha: Sha256,
    at: u64,
}

impl Hashed {
    fn create(path: &Path) -> Result<Hashed> {
        Ok(Hashed {
            f: crate::fsutil::AtomicFile::create(path)?,
            sha: Sha256::new(),
            at: 0,
        })
    }
    fn put(&mut self, b: &[u8]) -> Result<()> {
        self.f
            .write_all(b)
            .map_err(|e| StorageError::io(self.f.temp_path(), e))?;
        self.sha.update(b);
        self.at += b.len() as u64;
        Ok(())
    }
    fn pad_to(&mut self, at: u64) -> Result<()> {
        const ZEROS: [u8; 64] = [0; 64];
        while self.at < at {
            let n = (at - self.at).min(64) as usize;
            self.put(&ZEROS[..n])?;
        }
        Ok(())
    }
    /// Commit; returns (sha256, bytes).
    fn finish(self) -> Result<(String, u64)> {
        let (sha, n) = (hex(self.sha.finalize()), self.at);
        self.f.commit()?;
        Ok((sha, n))
    }
}

fn segment_decl(codec: &str, sha: String, bytes: u64, extra: Value) -> Value {
    let mut v = json!({"codec": codec, "sha256": sha, "bytes": bytes});
    if let (Some(m), Value::Object(e)) = (v.as_object_mut(), extra) {
        m.extend(e);
    }
    v
}

/// Everything into `dir`; returns (tensors, payload bytes).
fn write_all(model: &Model, dir: &Path, g: usize, p: &mut Progress<'_>) -> Result<(usize, u64)> {
    let s = &model.surface;
    let moe = s.moe.as_ref().expect("checked by the caller");
    for sub in ["segments", "banks"] {
        std::fs::create_dir(dir.join(sub)).map_err(|e| StorageError::io(dir.join(sub), e))?;
    }
    let mut segments: BTreeMap<String, Value> = BTreeMap::new();
    let mut payload_total = 0u64;

    // The spine: every operand outside the banks, sorted by its source name.
    let mut spine: Vec<(&OperandKey, &crate::model::Operand)> = model
        .operands
        .iter()
        .filter(|(k, _)| !is_bank_role(k.role))
        .collect();
    spine.sort_by(|a, b| a.1.source_name.cmp(&b.1.source_name));
    let mut tensors = Vec::with_capacity(spine.len());
    let mut at = 0u64;
    for (_, op) in &spine {
        at = align_up(at);
        tensors.push(TensorEntry {
            name: op.source_name.clone(),
            dtype: op.dtype.name().to_string(),
            shape: op.shape.iter().map(|&d| d as u64).collect(),
            offset: at,
            len: op.len as u64,
            extra: Map::new(),
        });
        at += op.len as u64;
    }
    let header = frame_header(&SegmentHeader {
        schema: SEGMENT_HEADER_SCHEMA,
        representation: "text.spine@source".into(),
        tensors: tensors.clone(),
        extra: Map::new(),
    })?;
    let mut f = Hashed::create(&dir.join(SPINE))?;
    f.put(&header)?;
    let base = header.len() as u64;
    let mut payload_sha = Sha256::new();
    for ((_, op), t) in spine.iter().zip(&tensors) {
        f.pad_to(base + t.offset)?;
        let bytes = model.view_of(op).bytes;
        f.put(bytes)?;
        payload_sha.update(bytes);
        payload_total += bytes.len() as u64;
        p.tick("text.spine", &t.name, bytes.len() as u64)?;
    }
    let (sha, n) = f.finish()?;
    segments.insert(
        SPINE.into(),
        segment_decl(
            "tensor_table",
            sha,
            n,
            json!({"schema": SEGMENT_HEADER_SCHEMA, "payload_sha256": hex(payload_sha.finalize())}),
        ),
    );
    let operands: Vec<SpineOperand> = spine
        .iter()
        .map(|(k, op)| SpineOperand {
            layer: k.layer.map(|l| l as u32),
            role: k.role.name().to_string(),
            tensor: op.source_name.clone(),
        })
        .collect();

    // One LYRW v2 file per layer.
    let mut layers = Vec::with_capacity(s.n_layers);
    for l in 0..s.n_layers {
        let rel = format!("banks/layer_{l:03}.lyrw");
        let mut banks = vec![BankSpec::of(
            model,
            l,
            0,
            1,
            moe.n_experts,
            &ROUTED,
            [s.hidden, moe.expert_ffn, s.hidden],
        )?];
        if moe.shared_ffn > 0 {
            banks.push(BankSpec::of(
                model,
                l,
                1,
                2,
                1,
                &SHARED,
                [s.hidden, moe.shared_ffn, s.hidden],
            )?);
        }
        let (sha, n, payload) = write_lyrw(&dir.join(&rel), l, &banks, p)?;
        payload_total += payload;
        segments.insert(
            rel.clone(),
            segment_decl(
                "lyrw",
                sha,
                n,
                json!({"format_version": 2, "layer": l, "group_width": g}),
            ),
        );
        let router = model
            .operand(OperandKey::layer(l, Role::FfnGateInp))
            .ok_or_else(|| StorageError::MissingOperand {
                key: format!("ffn_gate_inp of layer {l}"),
            })?;
        let dims = |f: usize| ExpertDims {
            input: s.hidden as u32,
            intermediate: f as u32,
            output: s.hidden as u32,
        };
        let shared_bank = (moe.shared_ffn > 0)
            .then(|| -> Result<BankRef> {
                Ok(BankRef {
                    bank_id: 1,
                    experts: 1,
                    programme: "gated-mlp-v1".into(),
                    storage: rel.clone(),
                    expert_dims: dims(moe.shared_ffn),
                    group_width: None,
                    gate: if moe.shared_gate {
                        Some(
                            model
                                .operand(OperandKey::layer(l, Role::FfnGateInpShexp))
                                .ok_or_else(|| StorageError::MissingOperand {
                                    key: format!("ffn_gate_inp_shexp of layer {l}"),
                                })?
                                .source_name
                                .clone(),
                        )
                    } else {
                        None
                    },
                    extra: Map::new(),
                })
            })
            .transpose()?;
        layers.push(LayerEntry {
            moe_layer: MoeLayer {
                layer: l as u32,
                input_space: "residual".into(),
                router: Router {
                    scores: router.source_name.clone(),
                    selection: Selection {
                        kind: "top_k".into(),
                        k: moe.n_used as u32,
                    },
                    normalisation: normalisation_name(moe.selection).into(),
                    extra: Map::new(),
                },
                transforms: None,
                routed_bank: BankRef {
                    bank_id: 0,
                    experts: moe.n_experts as u32,
                    programme: "gated-mlp-v1".into(),
                    storage: rel.clone(),
                    expert_dims: dims(moe.expert_ffn),
                    group_width: Some(g as u32),
                    gate: None,
                    extra: Map::new(),
                },
                shared_bank,
                reduction: "gate_weighted_sum".into(),
                routed_output_norm: None,
                combine: "residual_add".into(),
                extra: Map::new(),
            },
        });
    }

    let manifest = MoeManifest {
        schema: MANIFEST_SCHEMA,
        model: ManifestModel {
            execution_surface: serde_json::to_value(s).map_err(internal)?,
            spine: SPINE.into(),
            operands,
            extra: Map::new(),
        },
        layers,
        extra: Map::new(),
    };
    let manifest_bytes = serde_json::to_vec_pretty(&manifest).map_err(internal)?;
    atomic::write_file(&dir.join("moe_manifest.json"), &manifest_bytes)?;
    let capabilities = super::writer::write_capabilities(model, dir)?;

    let provenance = super::provenance::of_model(model)?;
    let artifact = model
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut extra = Map::new();
    extra.insert("vindex_spec_version".into(), json!(2));
    extra.insert(
        "generator".into(),
        json!(format!("lql-storage {}", env!("CARGO_PKG_VERSION"))),
    );
    extra.insert("vocab_size".into(), json!(s.vocab));
    extra.insert(
        "moe_manifest_sha256".into(),
        json!(hex(Sha256::digest(&manifest_bytes))),
    );
    extra.insert(
        "source".into(),
        json!({"artifact": artifact, "kind": model.kind}),
    );
    extra.insert("provenance".into(), json!({"chain": provenance.chain}));
    let index = Vindex3Index {
        version: INDEX_SCHEMA,
        model: model
            .path
            .file_stem()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        family: s.source_architecture.clone(),
        hidden_size: s.hidden as u32,
        num_layers: s.n_layers as u32,
        system_graph: None,
        moe_manifest: Some("moe_manifest.json".into()),
        representations: BTreeMap::new(),
        segments,
        profiles: Vec::new(),
        variants: Value::Null,
        authority: provenance.authority,
        precision_map: None,
        derived_from_model: provenance.derived_from_model,
        system_graph_sha256: None,
        capabilities,
        feature_labels: None,
        extra,
    };
    let index_bytes = serde_json::to_vec_pretty(&index).map_err(internal)?;
    atomic::sync_dir(&dir.join("segments"))?;
    atomic::sync_dir(&dir.join("banks"))?;
    atomic::write_file(&dir.join("index.json"), &index_bytes)?;
    Ok((model.operands.len(), payload_total))
}

/// One bank to write: descriptor facts and, per role, the stacked entries' bytes.
struct BankSpec<'m> {
    id: u16,
    kind: u16,
    entries: usize,
    dims: [usize; 3],
    roles: Vec<RoleData<'m>>,
}

/// One role of a bank: (role tag, format tag, rows, cols, bytes of all entries, operand
/// name).
type RoleData<'m> = (u16, u16, usize, usize, &'m [u8], String);

impl<'m> BankSpec<'m> {
    fn of(
        model: &'m Model,
        layer: usize,
        id: u16,
        kind: u16,
        entries: usize,
        roles: &[(Role, u16)],
        dims: [usize; 3],
    ) -> Result<BankSpec<'m>> {
        let mut out = Vec::with_capacity(roles.len());
        for &(role, tag) in roles {
            let key = OperandKey::layer(layer, role);
            let op = model
                .operand(key)
                .ok_or_else(|| StorageError::MissingOperand {
                    key: key.to_string(),
                })?;
            let format = format_tag(op.dtype).ok_or_else(|| {
                StorageError::Unsupported(format!(
                    "not supported yet: {} ({key}) is {}, which has no LYRW v2 format tag \
                     (seed 002 §6.4); extract it in the graph shape",
                    op.source_name, op.dtype
                ))
            })?;
            let (cols, rows) = (op.shape[0], op.shape.get(1).copied().unwrap_or(1));
            let bytes = model.view_of(op).bytes;
            let per = bytes.len() / entries;
            if entries > 1 && !(per as u64).is_multiple_of(REGION_ALIGN) {
                return Err(StorageError::Unsupported(format!(
                    "not supported yet: {} ({key}): expert regions of {per} bytes are not a \
                     multiple of {REGION_ALIGN}, so a bank's regions cannot stay one \
                     contiguous run",
                    op.source_name
                )));
            }
            out.push((tag, format, rows, cols, bytes, op.source_name.clone()));
        }
        Ok(BankSpec {
            id,
            kind,
            entries,
            dims,
            roles: out,
        })
    }
}

/// Write one layer's LYRW v2 file; returns (sha256, file bytes, region bytes).
fn write_lyrw(
    path: &Path,
    layer: usize,
    banks: &[BankSpec<'_>],
    p: &mut Progress<'_>,
) -> Result<(String, u64, u64)> {
    let mut h = Vec::new();
    let u16s = |h: &mut Vec<u8>, v: &[u16]| v.iter().for_each(|x| h.extend(x.to_le_bytes()));
    let u32s = |h: &mut Vec<u8>, v: &[u32]| v.iter().for_each(|x| h.extend(x.to_le_bytes()));
    u32s(&mut h, &[LYRW_MAGIC, 2, layer as u32]);
    u16s(&mut h, &[banks.len() as u16, banks.len() as u16]);
    u32s(&mut h, &[0, 0]);
    for b in banks {
        // Browse mode "direct" (§15.2): gate rows are read in place.
        u16s(&mut h, &[b.id, b.kind, b.roles.len() as u16, 0b01]);
        u32s(
            &mut h,
            &[
                b.entries as u32,
                b.dims[0] as u32,
                b.dims[1] as u32,
                b.dims[2] as u32,
            ],
        );
    }
    for b in banks {
        u16s(&mut h, &[b.id, 0]);
        u32s(&mut h, &[0, b.entries as u32]);
    }
    for b in banks {
        for (i, r) in b.roles.iter().enumerate() {
            // §6.4: a block-quantized region stores its scales inside each block
            // (`blocks_with_scales_inline`); scalar formats are row-major.
            let packing = match super::moe_manifest::format_dtype(r.1) {
                Some(d) if d.block_elems() > 1 => super::lyrw::PACKING_BLOCKS_WITH_SCALES_INLINE,
                _ => super::lyrw::PACKING_ROW_MAJOR,
            };
            u16s(&mut h, &[i as u16, r.0, r.1, packing, 0xFFFF, 0]);
            u32s(&mut h, &[r.2 as u32, r.3 as u32]);
        }
    }
    // Region offsets: bank by bank, role by role, entry by entry, each 64-aligned.
    let tables = h.len() as u64
        + banks
            .iter()
            .map(|b| b.entries * b.roles.len() * 16)
            .sum::<usize>() as u64;
    let mut at = tables.div_ceil(REGION_ALIGN) * REGION_ALIGN;
    // offsets[bank][role][entry]
    let mut offsets: Vec<Vec<Vec<u64>>> = Vec::with_capacity(banks.len());
    for b in banks {
        let mut per_role = Vec::with_capacity(b.roles.len());
        for r in &b.roles {
            let per = (r.4.len() / b.entries) as u64;
            let mut v = Vec::with_capacity(b.entries);
            for _ in 0..b.entries {
                v.push(at);
                at = (at + per).div_ceil(REGION_ALIGN) * REGION_ALIGN;
            }
            per_role.push(v);
        }
        offsets.push(per_role);
    }
    for (b, offs) in banks.iter().zip(&offsets) {
        for e in 0..b.entries {
            for (r, o) in b.roles.iter().zip(offs) {
                h.extend(o[e].to_le_bytes());
                h.extend(((r.4.len() / b.entries) as u64).to_le_bytes());
            }
        }
    }
    debug_assert_eq!(h.len() as u64, tables);
    let mut f = Hashed::create(path)?;
    f.put(&h)?;
    let mut payload = 0u64;
    for (b, offs) in banks.iter().zip(&offsets) {
        for (r, o) in b.roles.iter().zip(offs) {
            let per = r.4.len() / b.entries;
            for (e, &off) in o.iter().enumerate() {
                f.pad_to(off)?;
                f.put(&r.4[e * per..(e + 1) * per])?;
            }
            payload += r.4.len() as u64;
            p.tick(
                &format!("layer.{layer}.bank.{}", b.id),
                &r.5,
                r.4.len() as u64,
            )?;
        }
    }
    f.pad_to(at)?;
    let (sha, n) = f.finish()?;
    Ok((sha, n, payload))
}
