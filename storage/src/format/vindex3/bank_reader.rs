//! Binding a bank-shape container (seed 002 §5.4) as an executable [`Model`]: `index.json`,
//! then `moe_manifest.json` (§8), then the spine segment and each layer's LYRW v2 file,
//! mapped. Operands are zero-copy views: a routed bank's regions of one role must form one
//! contiguous run in entry order (what [`super::bank_writer`] writes), which becomes the
//! stacked `[row_len, rows, experts]` operand the executor reads experts from in place.
//!
//! The capability check of §11 traverses each layer's programme: a region a programme
//! requires that the bank lacks (or holds in a format or layout this build does not run)
//! leaves the operand out, with the reason naming layer, bank, role and segment in
//! [`Model::absent`]; the binding still opens for browsing and INFER refuses with that
//! reason. [`capabilities`] reports the maturity rung per (programme, formats, grouping).
//!
//! Refused by name (hostile input): a manifest of another schema or that disagrees with
//! the surface; a layer file the index does not declare as LYRW v2, or whose declared
//! size or layer differs; a group width that does not divide the bank (bad extents); a
//! bank whose entry count, geometry or region lengths disagree with the manifest; regions
//! that overlap (checked by [`super::lyrw::parse`]).

use std::collections::BTreeMap;
use std::path::Path;

use super::index::{read_json, resolve};
use super::lyrw::{self, LyrwFile};
use super::moe_manifest::{
    format_dtype, programme, selection_from_name, BankRef, Maturity, MoeManifest, MANIFEST_SCHEMA,
    MAX_MANIFEST_BYTES,
};
use super::reader::Container;
use super::segment::parse_header;
use crate::dtype::DType;
use crate::error::{Result, StorageError};
use crate::model::{Backing, Model, Operand, OperandKey, Role, SourceKind};
use crate::surface::ExecutionSurface;

/// Roles of a routed and of a shared bank, by LYRW role tag (gate, up, down).
const ROUTED: [(u16, Role); 3] = [
    (0, Role::FfnGateExps),
    (1, Role::FfnUpExps),
    (3, Role::FfnDownExps),
];
const SHARED: [(u16, Role); 3] = [
    (0, Role::FfnGateShexp),
    (1, Role::FfnUpShexp),
    (3, Role::FfnDownShexp),
];

fn bad(path: &Path, field: &str, message: impl Into<String>) -> StorageError {
    StorageError::Format {
        path: path.to_path_buf(),
        offset: 0,
        field: field.into(),
        message: message.into(),
    }
}

/// Read and check `moe_manifest.json` of a bank container.
pub fn read_manifest(c: &Container) -> Result<MoeManifest> {
    let rel =
        c.index.moe_manifest.as_deref().ok_or_else(|| {
            StorageError::Invalid(format!("{}: no moe_manifest", c.dir.display()))
        })?;
    let path = resolve(&c.dir, rel, "moe_manifest")?;
    let v = read_json(&path, MAX_MANIFEST_BYTES)?;
    match v.get("schema").and_then(|s| s.as_u64()) {
        Some(n) if n == MANIFEST_SCHEMA as u64 => {}
        other => {
            return Err(StorageError::Unsupported(format!(
                "{}: MoE manifest schema {} (this build reads schema {MANIFEST_SCHEMA})",
                path.display(),
                other.map_or("missing".to_string(), |n| n.to_string())
            )))
        }
    }
    serde_json::from_value(v).map_err(|e| bad(&path, "MoeManifest", e.to_string()))
}

/// The index's declaration of a bank file: it must be LYRW v2; returns (bytes, group width).
fn declared_lyrw(c: &Container, rel: &str) -> Result<(Option<u64>, Option<u64>)> {
    let decl = c.index.segments.get(rel).ok_or_else(|| {
        bad(
            &c.dir.join("index.json"),
            "segments",
            format!("the manifest names bank file {rel}, which index.json does not list"),
        )
    })?;
    let codec = decl.get("codec").and_then(|v| v.as_str());
    let version = decl.get("format_version").and_then(|v| v.as_u64());
    if !matches!((codec, version), (None | Some("lyrw"), Some(2))) {
        return Err(StorageError::Unsupported(format!(
            "not supported yet: {rel} is declared as {decl}, not LYRW v2"
        )));
    }
    Ok((
        decl.get("bytes").and_then(|v| v.as_u64()),
        decl.get("group_width").and_then(|v| v.as_u64()),
    ))
}

fn role_by_name(name: &str) -> Option<Role> {
    Role::ALL.into_iter().find(|r| r.name() == name)
}

/// Map `rel` once; returns the backing index.
fn map_once(
    dir: &Path,
    rel: &str,
    declared: Option<u64>,
    what: &str,
    backings: &mut Vec<Backing>,
    mapped: &mut BTreeMap<String, usize>,
) -> Result<usize> {
    if let Some(&i) = mapped.get(rel) {
        return Ok(i);
    }
    let path = resolve(dir, rel, what)?;
    let map = crate::mapped::map_file(&path, what)?;
    if let Some(want) = declared {
        if map.len() as u64 != want {
            return Err(bad(
                &path,
                what,
                format!("file is {} bytes, index.json records {want}", map.len()),
            ));
        }
    }
    backings.push(Backing::Mmap(map));
    mapped.insert(rel.to_string(), backings.len() - 1);
    Ok(backings.len() - 1)
}

/// Open a bank container as a [`Model`] (see the module docs).
pub fn open(c: &Container) -> Result<Model> {
    let dir = &c.dir;
    let manifest = read_manifest(c)?;
    let mpath = dir.join(
        c.index
            .moe_manifest
            .as_deref()
            .unwrap_or("moe_manifest.json"),
    );
    let surface: ExecutionSurface =
        serde_json::from_value(manifest.model.execution_surface.clone())
            .map_err(|e| bad(&mpath, "model.execution_surface", e.to_string()))?;
    crate::import::validate::check_layer_count(
        &mpath,
        "model.execution_surface.n_layers",
        &surface,
        manifest.layers.len(),
    )?;
    if manifest.layers.len() != surface.n_layers {
        return Err(bad(
            &mpath,
            "layers",
            format!(
                "{} moe_layer entries for {} layers",
                manifest.layers.len(),
                surface.n_layers
            ),
        ));
    }
    let Some(moe) = surface.moe.clone() else {
        return Err(bad(
            &mpath,
            "model.execution_surface.moe",
            "a bank container's surface has no bank facts",
        ));
    };
    if c.index.hidden_size as usize != surface.hidden
        || c.index.num_layers as usize != surface.n_layers
    {
        return Err(bad(
            &dir.join("index.json"),
            "hidden_size / num_layers",
            format!(
                "index.json says hidden {} and {} layers; the manifest's surface says {} and {}",
                c.index.hidden_size, c.index.num_layers, surface.hidden, surface.n_layers
            ),
        ));
    }

    let mut backings = Vec::new();
    let mut mapped: BTreeMap<String, usize> = BTreeMap::new();
    let mut operands = BTreeMap::new();
    let mut absent: BTreeMap<OperandKey, String> = BTreeMap::new();

    // The spine.
    let spine_rel = manifest.model.spine.as_str();
    let spine_bytes = c
        .index
        .segments
        .get(spine_rel)
        .and_then(|d| d.get("bytes"))
        .and_then(|v| v.as_u64());
    let sb = map_once(
        dir,
        spine_rel,
        spine_bytes,
        "spine segment",
        &mut backings,
        &mut mapped,
    )?;
    let spine_path = dir.join(spine_rel);
    let parsed = {
        let b = backings[sb].bytes();
        parse_header(&spine_path, b, b.len() as u64)?
    };
    for o in &manifest.model.operands {
        let role = role_by_name(&o.role).ok_or_else(|| {
            StorageError::Unsupported(format!(
                "not supported yet: operand role {:?} (spine tensor {:?})",
                o.role, o.tensor
            ))
        })?;
        let layer = o.layer.map(|l| l as usize);
        if layer.is_some_and(|l| l >= surface.n_layers) {
            return Err(bad(
                &mpath,
                "model.operands",
                format!(
                    "operand {} names layer {:?} of {}",
                    o.role, o.layer, surface.n_layers
                ),
            ));
        }
        let key = OperandKey { layer, role };
        let t = parsed
            .tensor(&o.tensor)
            .ok_or_else(|| StorageError::MissingOperand {
                key: format!("{key}: tensor {:?} is not in segment {spine_rel}", o.tensor),
            })?;
        let Some(dtype) = DType::from_name(&t.dtype) else {
            absent.insert(
                key,
                format!(
                    "{key} (tensor {:?}, segment {spine_rel}: encoding {} not supported yet)",
                    t.name, t.dtype
                ),
            );
            continue;
        };
        let op = Operand {
            source_name: t.name.clone(),
            dtype,
            shape: t.shape.iter().map(|&d| d as usize).collect(),
            backing: sb,
            offset: (parsed.payload_start + t.offset) as usize,
            len: t.len as usize,
        };
        if operands.insert(key, op).is_some() {
            return Err(bad(
                &mpath,
                "model.operands",
                format!("operand {key} is bound twice"),
            ));
        }
    }

    // The banks, layer by layer.
    for (l, entry) in manifest.layers.iter().enumerate() {
        let m = &entry.moe_layer;
        let field = format!("layers[{l}].moe_layer");
        if m.layer as usize != l {
            return Err(bad(
                &mpath,
                &field,
                format!("entry {l} describes layer {}", m.layer),
            ));
        }
        if m.transforms.as_ref().is_some_and(|t| !t.is_null())
            || m.routed_output_norm.as_ref().is_some_and(|t| !t.is_null())
        {
            return Err(StorageError::Unsupported(format!(
                "not supported yet: layer {l}: routed pre/post transforms or a routed output norm"
            )));
        }
        let sel = selection_from_name(&m.router.normalisation);
        if m.router.selection.kind != "top_k"
            || m.router.selection.k as usize != moe.n_used
            || sel != Some(moe.selection)
            || m.routed_bank.experts as usize != moe.n_experts
            || m.routed_bank.expert_dims.intermediate as usize != moe.expert_ffn
            || m.shared_bank
                .as_ref()
                .map_or(0, |b| b.expert_dims.intermediate as usize)
                != moe.shared_ffn
        {
            return Err(bad(
                &mpath,
                &field,
                format!(
                    "the layer's router/banks ({} k={} {}, {} experts of width {}) disagree with \
                     the surface ({} of {} experts of width {}, {}; shared width {})",
                    m.router.selection.kind,
                    m.router.selection.k,
                    m.router.normalisation,
                    m.routed_bank.experts,
                    m.routed_bank.expert_dims.intermediate,
                    moe.n_used,
                    moe.n_experts,
                    moe.expert_ffn,
                    moe.selection.name(),
                    moe.shared_ffn
                ),
            ));
        }
        for (bank, roles) in std::iter::once((&m.routed_bank, &ROUTED))
            .chain(m.shared_bank.as_ref().map(|b| (b, &SHARED)))
        {
            bind_bank(
                c,
                l,
                bank,
                roles,
                &surface,
                &mut backings,
                &mut mapped,
                &mut operands,
                &mut absent,
            )?;
        }
    }

    // Every required operand is bound, absent with a reason, or missing (refused).
    for key in surface.required_keys() {
        if absent.contains_key(&key) {
            continue;
        }
        let op = operands
            .get(&key)
            .ok_or_else(|| StorageError::MissingOperand {
                key: format!("{key} (layer {:?}) in {}", key.layer, dir.display()),
            })?;
        let want = surface.operand_shape(key.role);
        let mut got = op.shape.clone();
        while got.len() > want.len() && got.last() == Some(&1) {
            got.pop();
        }
        if got != want {
            return Err(StorageError::Invalid(format!(
                "{}: operand {key} ({:?}) has shape {:?}; the surface implies {want:?}",
                dir.display(),
                op.source_name,
                op.shape
            )));
        }
    }
    Ok(Model {
        path: dir.to_path_buf(),
        kind: SourceKind::Vindex3,
        surface,
        tokenizer: super::reader::tokenizer_slot(dir, &c.index),
        operands,
        backings,
        absent,
        overlays: Default::default(),
        uninterpreted: None,
    })
}

/// Bind one bank's regions as operands (see the module docs).
#[allow(clippy::too_many_arguments)]
fn bind_bank(
    c: &Container,
    layer: usize,
    bank: &BankRef,
    roles: &[(u16, Role); 3],
    s: &ExecutionSurface,
    backings: &mut Vec<Backing>,
    mapped: &mut BTreeMap<String, usize>,
    operands: &mut BTreeMap<OperandKey, Operand>,
    absent: &mut BTreeMap<OperandKey, String>,
) -> Result<()> {
    let rel = bank.storage.as_str();
    let (bytes, group) = declared_lyrw(c, rel)?;
    let bi = map_once(&c.dir, rel, bytes, "bank file", backings, mapped)?;
    let path = c.dir.join(rel);
    let f: LyrwFile = lyrw::parse(&path, backings[bi].bytes())?;
    if f.logical_layer as usize != layer {
        return Err(bad(
            &path,
            "logical_layer",
            format!(
                "the file holds layer {}, the manifest binds it to layer {layer}",
                f.logical_layer
            ),
        ));
    }
    let b = f.bank(bank.bank_id).ok_or_else(|| {
        bad(
            &path,
            "bank_id",
            format!(
                "the manifest names bank {} which the file lacks",
                bank.bank_id
            ),
        )
    })?;
    let n = bank.experts as usize;
    // The index states the routed bank's group width too: the two must agree.
    let routed = roles[0].1 == Role::FfnGateExps;
    if routed && group.is_some() && group != bank.group_width.map(u64::from) {
        return Err(bad(
            &path,
            "group_width",
            format!(
                "bad group extents: index.json declares a group width of {group:?}, the manifest \
                 {:?}",
                bank.group_width
            ),
        ));
    }
    if let Some(g) = bank.group_width.map(u64::from) {
        if g == 0 || g as usize > n || !n.is_multiple_of(g as usize) {
            return Err(bad(
                &path,
                "group_width",
                format!(
                    "bad group extents: a group width of {g} does not divide bank {}'s {n} entries \
                     (seed 002 §7)",
                    bank.bank_id
                ),
            ));
        }
    }
    if b.num_entries as usize != n
        || b.input_dim != bank.expert_dims.input
        || b.intermediate_dim != bank.expert_dims.intermediate
        || b.output_dim != bank.expert_dims.output
        || b.input_dim as usize != s.hidden
    {
        return Err(bad(
            &path,
            &format!("bank {}", bank.bank_id),
            format!(
                "the bank declares {} entries of {}→{}→{}; the manifest says {n} of {}→{}→{}",
                b.num_entries,
                b.input_dim,
                b.intermediate_dim,
                b.output_dim,
                bank.expert_dims.input,
                bank.expert_dims.intermediate,
                bank.expert_dims.output
            ),
        ));
    }
    let segs: Vec<_> = f
        .segments
        .iter()
        .filter(|d| d.bank_id == b.bank_id)
        .collect();
    let place = |role: &str| {
        format!(
            "layer {layer}, bank {} ({}), role {role}, segment {rel}",
            bank.bank_id, bank.programme
        )
    };
    let refuse_all = |absent: &mut BTreeMap<OperandKey, String>, why: String| {
        for &(_, r) in roles {
            absent.insert(OperandKey::layer(layer, r), why.clone());
        }
    };
    let Some(prog) = programme(&bank.programme) else {
        refuse_all(
            absent,
            format!(
                "{}: programme {:?} is not registered (not supported yet)",
                place("-"),
                bank.programme
            ),
        );
        return Ok(());
    };
    if !prog.executed {
        refuse_all(
            absent,
            format!(
                "{}: programme {} is representable only (no kernel in this build)",
                place("-"),
                prog.name
            ),
        );
        return Ok(());
    }
    let seg = match segs.as_slice() {
        [one] if one.first_entry == 0 && one.entry_count as usize == n => *one,
        _ => {
            refuse_all(
                absent,
                format!(
                    "{}: not supported yet: the bank's entries are split over {} segment descriptors",
                    place("-"),
                    segs.len()
                ),
            );
            return Ok(());
        }
    };
    let per = b.schemas.len();
    for &(tag, role) in roles {
        let key = OperandKey::layer(layer, role);
        let rname = lyrw::role_name(tag);
        let Some((si, schema)) = b.schemas.iter().enumerate().find(|(_, x)| x.role == tag) else {
            absent.insert(
                key,
                format!(
                    "{}: the bank has no {rname} region, which {} requires",
                    place(&rname),
                    prog.name
                ),
            );
            continue;
        };
        let Some(dtype) = format_dtype(schema.format) else {
            absent.insert(
                key,
                format!(
                    "{}: region format {} is not supported yet",
                    place(&rname),
                    lyrw::format_name(schema.format)
                ),
            );
            continue;
        };
        if schema.packing != 0 && schema.packing != 1 {
            absent.insert(
                key,
                format!(
                    "{}: packing {} is not supported yet",
                    place(&rname),
                    schema.packing
                ),
            );
            continue;
        }
        let (rows, cols) = (schema.rows as usize, schema.cols as usize);
        let want = match tag {
            3 => (b.output_dim as usize, b.intermediate_dim as usize),
            _ => (b.intermediate_dim as usize, b.input_dim as usize),
        };
        let len = (cols % dtype.block_elems() == 0)
            .then(|| dtype.bytes_for(rows as u64 * cols as u64))
            .flatten();
        let Some(len) = len.filter(|_| (rows, cols) == want) else {
            return Err(bad(
                &path,
                &format!("bank {} schema {si}", bank.bank_id),
                format!(
                    "{rname} region of {rows}×{cols} {dtype} does not fit the bank's \
                     {}×{} geometry",
                    want.0, want.1
                ),
            ));
        };
        let regions: Vec<(u64, u64)> = (0..n).map(|e| seg.regions[e * per + si]).collect();
        if let Some(e) = regions.iter().position(|r| r.1 != len) {
            return Err(bad(
                &path,
                &format!("bank {} entry {e}", bank.bank_id),
                format!(
                    "{rname} region is {} bytes; {rows}×{cols} {dtype} is {len}",
                    regions[e].1
                ),
            ));
        }
        let start = regions[0].0;
        if regions
            .iter()
            .enumerate()
            .any(|(e, r)| r.0 != start + e as u64 * len)
        {
            absent.insert(
                key,
                format!(
                    "{}: not supported yet: the {rname} regions are not one contiguous run in \
                     entry order (permuted or padded layout)",
                    place(&rname)
                ),
            );
            continue;
        }
        let shape =
            if role == Role::FfnGateExps || role == Role::FfnUpExps || role == Role::FfnDownExps {
                vec![cols, rows, n]
            } else {
                vec![cols, rows]
            };
        operands.insert(
            key,
            Operand {
                source_name: format!("layer.{layer}.bank.{}.{rname}", bank.bank_id),
                dtype,
                shape,
                backing: bi,
                offset: start as usize,
                len: (len * n as u64) as usize,
            },
        );
    }
    Ok(())
}

/// One row of `SHOW CAPABILITIES`: a (programme, formats, grouping) combination and the
/// rung of §10 this build reaches for it.
#[derive(Debug, Clone, PartialEq)]
pub struct CapabilityRow {
    pub programme: String,
    pub bank: String,
    /// `role=format` per region, e.g. `gate=q4_0 up=q8_0 down=f16`.
    pub formats: String,
    /// `group of n` for a bank container, `stacked` for a GGUF's 3-D expert tensors.
    pub grouping: String,
    pub maturity: Maturity,
    pub layers: String,
    pub detail: String,
}

/// Capability rows of `model`: its banks grouped by (programme, bank kind, formats,
/// grouping). A dense model reports one `dense` row (a bank with one entry).
pub fn capabilities(model: &Model) -> Vec<CapabilityRow> {
    let s = &model.surface;
    let group = bank_groups(model);
    // (programme, bank, formats, grouping, maturity, detail) → layers.
    type Key = (String, String, String, String, Maturity, String);
    let mut rows: BTreeMap<Key, Vec<usize>> = BTreeMap::new();
    let banks: &[(&str, &[(u16, Role)])] = match &s.moe {
        Some(m) if m.shared_ffn > 0 => &[("routed", &ROUTED), ("shared", &SHARED)],
        Some(_) => &[("routed", &ROUTED)],
        None => &[(
            "dense",
            &[(0, Role::FfnGate), (1, Role::FfnUp), (3, Role::FfnDown)],
        )],
    };
    for l in 0..s.n_layers {
        for &(kind, roles) in banks {
            let mut formats = Vec::new();
            let mut why = Vec::new();
            for &(tag, role) in roles {
                let key = OperandKey::layer(l, role);
                match model.operand(key) {
                    Some(op) => formats.push(format!(
                        "{}={}",
                        lyrw::role_name(tag),
                        op.dtype.name().to_lowercase()
                    )),
                    None => {
                        formats.push(format!("{}=absent", lyrw::role_name(tag)));
                        why.push(
                            model
                                .absent
                                .get(&key)
                                .cloned()
                                .unwrap_or_else(|| format!("{key} is absent")),
                        );
                    }
                }
            }
            let maturity = if why.is_empty() {
                Maturity::Dispatched
            } else {
                Maturity::Representable
            };
            let grouping = match (kind, group.get(&l)) {
                ("routed", Some(g)) => format!("group of {g}"),
                ("routed", None) => "stacked".into(),
                _ => "single entry".into(),
            };
            rows.entry((
                "gated-mlp-v1".into(),
                kind.into(),
                formats.join(" "),
                grouping,
                maturity,
                why.join("; "),
            ))
            .or_default()
            .push(l);
        }
    }
    rows.into_iter()
        .map(
            |((programme, bank, formats, grouping, maturity, why), layers)| CapabilityRow {
                programme,
                bank,
                formats,
                grouping,
                maturity,
                layers: crate::model::layer_list(&layers),
                detail: if why.is_empty() {
                    "executed by the CPU kernels on the stored encoding (no repacking); one \
                 dispatch per selected expert, not grouped"
                        .into()
                } else {
                    why
                },
            },
        )
        .collect()
}

/// Group width per layer of a bank container's routed banks (empty for other models).
fn bank_groups(model: &Model) -> BTreeMap<usize, u32> {
    let mut out = BTreeMap::new();
    if model.kind != SourceKind::Vindex3 {
        return out;
    }
    let Ok(c) = Container::load(&model.path) else {
        return out;
    };
    if c.index.moe_manifest.is_none() || c.graph.is_some() {
        return out;
    }
    if let Ok(m) = read_manifest(&c) {
        for e in m.layers {
            if let Some(g) = e.moe_layer.routed_bank.group_width {
                out.insert(e.moe_layer.layer as usize, g);
            }
        }
    }
    out
}
