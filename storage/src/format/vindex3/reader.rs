//! Opening a graph-shape container as a [`Model`]: version first (`index.json` alone), then
//! the graph, then each selected representation's segment header, mapped; operands are
//! zero-copy views into the mappings. Nothing is hashed here (VERIFY does that) and the
//! tokenizer is built on first use.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::graph::SystemGraph;
use super::index::{read_index, read_json, resolve, ContainerShape, Vindex3Index};
use super::segment::{parse_header, ParsedSegment};
use super::{atomic, consistency, variants, TEXT_COMPONENT};
use crate::dtype::DType;
use crate::error::{Result, StorageError};
use crate::model::{Backing, Model, Operand, OperandKey, Role, SourceKind};
use crate::surface::ExecutionSurface;
use crate::tokenizer_spec::{TokenizerSlot, TokenizerSpec};

/// Largest `system_graph.json` accepted.
const MAX_GRAPH_BYTES: u64 = 256 << 20;
/// Largest capability file read into memory (the tokenizer spec).
const MAX_CAPABILITY_BYTES: u64 = 512 << 20;

/// A container's parsed envelope and graph (no segment bytes): what rewrites, SHOW and
/// VERIFY start from. Unknown fields ride along in the structs' `extra` maps.
#[derive(Debug, Clone)]
pub struct Container {
    pub dir: PathBuf,
    pub index: Vindex3Index,
    pub shape: ContainerShape,
    /// `None` for the bank shape.
    pub graph: Option<SystemGraph>,
}

impl Container {
    /// Read `index.json` (refusing unsupported generations by name) and, for the graph
    /// shape, `system_graph.json`.
    pub fn load(dir: &Path) -> Result<Container> {
        let (index, shape) = read_index(dir)?;
        let graph = match (&index.system_graph, shape) {
            (Some(rel), ContainerShape::Graph) => {
                let path = resolve(dir, rel, "system_graph")?;
                let v = read_json(&path, MAX_GRAPH_BYTES)?;
                consistency::check_graph_schema(&path, &v)?;
                Some(serde_json::from_value(v).map_err(|e| StorageError::Format {
                    path,
                    offset: 0,
                    field: "SystemGraph".into(),
                    message: e.to_string(),
                })?)
            }
            _ => None,
        };
        if let Some(g) = &graph {
            check_unique_ids(dir, g)?;
        }
        Ok(Container {
            dir: dir.to_path_buf(),
            index,
            shape,
            graph,
        })
    }

    /// Write `system_graph.json` (when present) and then `index.json` back, each through a
    /// temporary name and rename, keeping every field this build does not know. The graph
    /// hash recorded in the index is updated to match.
    pub fn rewrite(&mut self) -> Result<()> {
        if let (Some(g), Some(rel)) = (&self.graph, &self.index.system_graph) {
            let bytes =
                serde_json::to_vec_pretty(g).map_err(|e| StorageError::Internal(e.to_string()))?;
            atomic::write_file(&resolve(&self.dir, rel, "system_graph")?, &bytes)?;
            use sha2::Digest;
            self.index.system_graph_sha256 = Some(
                sha2::Sha256::digest(&bytes)
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect(),
            );
        }
        let bytes = serde_json::to_vec_pretty(&self.index)
            .map_err(|e| StorageError::Internal(e.to_string()))?;
        atomic::write_file(&self.dir.join("index.json"), &bytes)?;
        atomic::sync_dir(&self.dir)
    }

    /// The graph, or the refusal of `what` (an operation that reads the graph) on a
    /// bank-shape container.
    pub fn require_graph(&self, what: &str) -> Result<&SystemGraph> {
        self.graph
            .as_ref()
            .ok_or_else(|| bank_refusal(&self.dir, what))
    }

    /// The representation id the default selection (every region set's baseline variant)
    /// picks for `object`; `None` when the object has no resolvable selection.
    pub fn selected_representation(&self, object: &str) -> Option<String> {
        self.resolve_variant(object, None).ok()
    }

    /// The representation `profile` (or, for `None`, the baseline) selects for `object`,
    /// through the variant catalogue (seed 002 §9.1). Fails closed naming the region set,
    /// the requested variant and the variants present.
    pub fn resolve_variant(&self, object: &str, profile: Option<&str>) -> Result<String> {
        let set = variants::region_set(&self.dir, &self.index, object)?;
        let wanted = match profile {
            None => set.baseline.clone(),
            Some(name) => {
                let p = variants::profile(&self.dir, &self.index, name)?;
                match p.select.get(object) {
                    Some(v) => v.clone(),
                    None => set.baseline.clone(),
                }
            }
        };
        let v = set.variants.get(&wanted).ok_or_else(|| {
            StorageError::Invalid(format!(
                "{}: {} selects variant {wanted:?} of region set {object}, which is not present; present: {:?} (a profile selects present variants only)",
                self.dir.display(),
                match profile {
                    Some(p) => format!("profile {p:?}"),
                    None => "the baseline".into(),
                },
                set.variants.keys().collect::<Vec<_>>()
            ))
        })?;
        if !self.index.representations.contains_key(&v.representation) {
            return Err(StorageError::Invalid(format!(
                "{}: variant {wanted:?} of region set {object} names representation {}, which index.json does not record",
                self.dir.display(),
                v.representation
            )));
        }
        Ok(v.representation.clone())
    }

    /// The representation of every object with one of its own (tied objects have none),
    /// as `profile` selects; resolved whole before any segment is opened.
    pub fn selection(&self, profile: Option<&str>) -> Result<BTreeMap<String, String>> {
        if let Some(p) = profile {
            variants::profile(&self.dir, &self.index, p)?;
        }
        let g = self.require_graph("a profile selection")?;
        let mut out = BTreeMap::new();
        for o in g.objects.iter().filter(|o| o.tied_to.is_none()) {
            out.insert(o.id.clone(), self.resolve_variant(&o.id, profile)?);
        }
        Ok(out)
    }

    /// A profile's authority, derived (seed 002 §9.2): the weakest fidelity among its
    /// active selections. A profile that states a stronger claim than that is refused by
    /// name; a weaker stated claim is kept (a voluntary claim below the derived level).
    pub fn profile_authority(&self, profile: Option<&str>) -> Result<String> {
        let mut level = variants::FIDELITY_LEVELS[0].to_string();
        for rep in self.selection(profile)?.values() {
            let e = &self.index.representations[rep];
            level = variants::weaker(&level, &e.fidelity).to_string();
        }
        if let Some(name) = profile {
            let p = variants::profile(&self.dir, &self.index, name)?;
            if let Some(claim) = p.claimed {
                let rank = |l: &str| variants::fidelity_rank(l).unwrap_or(usize::MAX);
                if rank(&claim) < rank(&level) {
                    return Err(StorageError::Invalid(format!(
                        "{}: profile {name:?} claims authority {claim:?}, above the \
                         {level:?} its selections allow (authority is derived, never declared)",
                        self.dir.display()
                    )));
                }
                return Ok(claim);
            }
        }
        Ok(level)
    }
}

/// Refuse a graph that names a component, an object or one object's representation twice
/// (a reader would otherwise silently take one of them).
fn check_unique_ids(dir: &Path, g: &SystemGraph) -> Result<()> {
    let dup = |field: String, id: &str| StorageError::Format {
        path: dir.join("system_graph.json"),
        offset: 0,
        field,
        message: format!("id {id:?} appears twice"),
    };
    let mut seen = std::collections::HashSet::new();
    for c in &g.components {
        if !seen.insert(c.id.as_str()) {
            return Err(dup("components".into(), &c.id));
        }
    }
    seen.clear();
    for o in &g.objects {
        if !seen.insert(o.id.as_str()) {
            return Err(dup("objects".into(), &o.id));
        }
    }
    for o in &g.objects {
        let mut reps = std::collections::HashSet::new();
        for r in &o.representations {
            if !reps.insert(r.id.as_str()) {
                return Err(dup(format!("objects[{}].representations", o.id), &r.id));
            }
        }
    }
    Ok(())
}

fn bank_refusal(dir: &Path, what: &str) -> StorageError {
    StorageError::Unsupported(format!(
        "not supported yet: {what} on a VINDEX3 bank-shape container ({}): it reads the \
         system graph, which the bank shape (moe_manifest.json + LYRW v2 bank files) does \
         not have; USE executes a bank container and VERIFY, STATS and SHOW TENSORS read it",
        dir.display()
    ))
}

fn role_by_name(name: &str) -> Option<Role> {
    Role::ALL.into_iter().find(|r| r.name() == name)
}

/// One mapped segment with its parsed header.
struct Mapped {
    backing: usize,
    parsed: ParsedSegment,
    rel: String,
}

/// Map the segment of representation `rep_id` (checked against its recorded size and its
/// header's representation id).
fn map_segment(
    dir: &Path,
    c: &Container,
    rep_id: &str,
    backings: &mut Vec<Backing>,
) -> Result<Mapped> {
    let entry = &c.index.representations[rep_id];
    let path = resolve(dir, &entry.segment, "representations.segment")?;
    // Regular files only, fingerprinted and registered (see `crate::mapped`).
    let map = crate::mapped::map_file(&path, "segment")?;
    let len = map.len() as u64;
    if let Some(want) = entry.segment_bytes {
        if len != want {
            return Err(StorageError::Format {
                path,
                offset: len,
                field: format!("segment of {rep_id}"),
                message: format!(
                    "segment is {} : {len} bytes, index.json records {want}",
                    if len < want {
                        "truncated"
                    } else {
                        "longer than recorded"
                    }
                ),
            });
        }
    }
    let parsed = parse_header(&path, &map, len)?;
    if parsed.header.representation != rep_id {
        return Err(StorageError::Format {
            path,
            offset: 8,
            field: "representation".into(),
            message: format!(
                "segment holds {}, index.json says {rep_id}",
                parsed.header.representation
            ),
        });
    }
    backings.push(Backing::Mmap(map));
    Ok(Mapped {
        backing: backings.len() - 1,
        parsed,
        rel: entry.segment.clone(),
    })
}

/// Open the container at `dir` as an executable [`Model`], each object in its baseline
/// variant.
///
/// Refuses: VINDEX2 and unknown `index.json` versions (by number, before any other read);
/// the bank shape (by name); an unknown SystemGraph schema; a broken layer census or a fact
/// stored twice that disagrees; a selection of an absent variant (before any segment is
/// opened); a segment that is missing, truncated or whose header fails the hostile-input
/// checks (naming the segment); an operand table that does not close (naming operand,
/// object, layer and segment). An operand whose encoding this build does not know is left
/// out (the binding opens for browsing); operations that need it refuse at capability
/// check, naming it.
pub fn open_model(dir: &Path) -> Result<Model> {
    open_model_profile(dir, None)
}

/// [`open_model`] with the variants `profile` selects (`None`: every baseline).
pub fn open_model_profile(dir: &Path, profile: Option<&str>) -> Result<Model> {
    let c = Container::load(dir)?;
    if c.shape == ContainerShape::Bank {
        if let Some(p) = profile {
            return Err(StorageError::Unsupported(format!(
                "not supported yet: profile {p:?} of a bank container (its banks bind as stored)"
            )));
        }
        return super::bank_reader::open(&c);
    }
    let graph = c.require_graph("binding the graph shape")?;
    if graph.components.len() != 1 || graph.components[0].id != TEXT_COMPONENT {
        let ids: Vec<&str> = graph.components.iter().map(|c| c.id.as_str()).collect();
        return Err(StorageError::Unsupported(format!(
            "not supported yet: {}: a system of components {ids:?} (this build executes one \
             component, {TEXT_COMPONENT:?})",
            dir.display()
        )));
    }
    let comp = &graph.components[0];
    let surface: ExecutionSurface = serde_json::from_value(comp.execution_surface.clone())
        .map_err(|e| StorageError::Format {
            path: dir.join("system_graph.json"),
            offset: 0,
            field: format!("components[{TEXT_COMPONENT}].execution_surface"),
            message: e.to_string(),
        })?;
    // The layer count must fit the operand table before anything is sized by it.
    crate::import::validate::check_layer_count(
        &dir.join("system_graph.json"),
        &format!("components[{}].execution_surface.n_layers", comp.id),
        &surface,
        comp.operands.len(),
    )?;
    consistency::check_component_surface(dir, comp, &surface)?;
    consistency::check_headline(dir, &c.index, comp)?;
    consistency::check_attention(dir, comp, &surface)?;
    consistency::check_program(dir, comp, &surface)?;

    // Every selection resolves before any segment byte is read (seed 002 §9.1.2).
    let selection = c.selection(profile)?;
    c.profile_authority(profile)?;

    // Map the segment of every object the operand table references.
    let mut backings = Vec::new();
    let mut mapped: BTreeMap<String, Vec<Mapped>> = BTreeMap::new();
    for (at, b) in comp.operands.iter().enumerate() {
        crate::interrupt::every(at as u64, || {
            format!("component {}: operand table", comp.id)
        })?;
        if mapped.contains_key(&b.object) {
            continue;
        }
        let rep_id = selection.get(&b.object).cloned().ok_or_else(|| {
            StorageError::Invalid(format!(
                "{}: operand {} names object {}, which has no representation of its own",
                dir.display(),
                b.role,
                b.object
            ))
        })?;
        // A representation REPRESENT added holds only the tensors it re-encoded; the
        // rest come from its base (checked: same object, recorded, no cycle).
        let mut chain = Vec::new();
        for rep in super::represent::base_chain(&c, &rep_id)? {
            chain.push(map_segment(dir, &c, &rep, &mut backings)?);
        }
        mapped.insert(b.object.clone(), chain);
    }

    let mut operands = BTreeMap::new();
    let mut unreadable: BTreeMap<OperandKey, String> = BTreeMap::new();
    for (at, b) in comp.operands.iter().enumerate() {
        crate::interrupt::every(at as u64, || format!("component {}: operands", comp.id))?;
        let chain = &mapped[&b.object];
        let m = chain
            .iter()
            .find(|m| m.parsed.tensor(&b.tensor).is_some())
            .unwrap_or(&chain[0]);
        let role = role_by_name(&b.role).ok_or_else(|| {
            StorageError::Unsupported(format!(
                "not supported yet: operand role {:?} (object {}, segment {})",
                b.role, b.object, m.rel
            ))
        })?;
        let layer = b.layer.map(|l| l as usize);
        if let Some(l) = layer {
            if l >= surface.n_layers {
                return Err(StorageError::Invalid(format!(
                    "{}: operand {} names layer {l} of a {}-layer component",
                    dir.display(),
                    b.role,
                    surface.n_layers
                )));
            }
        }
        let key = OperandKey { layer, role };
        let t = m
            .parsed
            .tensor(&b.tensor)
            .ok_or_else(|| StorageError::MissingOperand {
                key: format!(
                    "{key}: tensor {:?} is not in segment {} (object {})",
                    b.tensor, m.rel, b.object
                ),
            })?;
        let Some(dtype) = DType::from_name(&t.dtype) else {
            // Preserved at read time; refused by the operation that needs it (§5.7).
            if unreadable
                .insert(
                    key,
                    format!(
                        "{key}: unknown encoding {:?} (tensor {:?}, object {}, segment {}); \
                         preserved, but this build cannot decode it",
                        t.dtype, t.name, b.object, m.rel
                    ),
                )
                .is_some()
                || operands.contains_key(&key)
            {
                return Err(StorageError::Invalid(format!(
                    "{}: operand {key} is bound twice",
                    dir.display()
                )));
            }
            continue;
        };
        let shape: Vec<usize> = t
            .shape
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<Result<_, _>>()
            .map_err(|_| StorageError::Invalid(format!("{key}: shape too large")))?;
        let offset = (m.parsed.payload_start + t.offset) as usize;
        let op = Operand {
            source_name: b.source_name.clone().unwrap_or_else(|| t.name.clone()),
            dtype,
            shape,
            backing: m.backing,
            offset,
            len: t.len as usize,
        };
        if operands.insert(key, op).is_some() || unreadable.contains_key(&key) {
            return Err(StorageError::Invalid(format!(
                "{}: operand {key} is bound twice",
                dir.display()
            )));
        }
    }
    check_closure(&surface, &operands, &unreadable, &c, comp)?;

    let tokenizer = tokenizer_slot(dir, &c.index);
    let mut model = Model {
        path: dir.to_path_buf(),
        kind: SourceKind::Vindex3,
        surface,
        tokenizer,
        operands,
        backings,
        absent: unreadable,
        overlays: Default::default(),
        uninterpreted: None,
    };
    crate::overlay::stored::attach(&mut model)?;
    Ok(model)
}

/// Every operand the surface implies must be present with the shape it states.
fn check_closure(
    s: &ExecutionSurface,
    ops: &BTreeMap<OperandKey, Operand>,
    unreadable: &BTreeMap<OperandKey, String>,
    c: &Container,
    comp: &super::graph::Component,
) -> Result<()> {
    let segment_of = |object: &str| -> String {
        c.selected_representation(object)
            .and_then(|r| c.index.representations.get(&r))
            .map(|e| e.segment.clone())
            .unwrap_or_else(|| "(none)".into())
    };
    let missing = |key: OperandKey| -> StorageError {
        let object = key.role.object();
        StorageError::MissingOperand {
            key: format!(
                "{key} (object {object}, layer {}, segment {}) in {}",
                key.layer
                    .map(|l| l.to_string())
                    .unwrap_or_else(|| "-".into()),
                segment_of(object),
                c.dir.display()
            ),
        }
    };
    // The layer count must fit the operand table before anything is sized by it.
    crate::import::validate::check_layer_count(
        &c.dir.join("system_graph.json"),
        &format!("components[{}].execution_surface.n_layers", comp.id),
        s,
        comp.operands.len(),
    )?;
    for key in s.required_keys() {
        let shape = s.operand_shape(key.role);
        if unreadable.contains_key(&key) {
            continue;
        }
        let op = ops.get(&key).ok_or_else(|| missing(key))?;
        // 1-D tensors may be stored as [n] or [n, 1].
        let got: Vec<usize> = {
            let mut g = op.shape.clone();
            while g.len() > shape.len() && g.last() == Some(&1) {
                g.pop();
            }
            g
        };
        if got != shape {
            return Err(StorageError::Invalid(format!(
                "{}: operand {key} (tensor {:?}, component {}) has shape {:?}; the execution \
                 surface implies {shape:?}",
                c.dir.display(),
                op.source_name,
                comp.id,
                op.shape
            )));
        }
    }
    Ok(())
}

/// The tokenizer, read from the capability snapshot on first use.
pub(super) fn tokenizer_slot(dir: &Path, index: &Vindex3Index) -> TokenizerSlot {
    let Some(entry) = index.capabilities.get("tokenizer_spec") else {
        return TokenizerSlot::ready(TokenizerSpec::None);
    };
    let path = match resolve(dir, &entry.file, "capabilities.tokenizer_spec") {
        Ok(p) => p,
        Err(e) => {
            let msg = e.to_string();
            return TokenizerSlot::lazy(move || Err(StorageError::Invalid(msg.clone())));
        }
    };
    TokenizerSlot::lazy(move || {
        let bytes = crate::fsutil::read_capped(&path, "tokenizer spec", MAX_CAPABILITY_BYTES)?;
        // Straight into the struct: no intermediate `Value` tree.
        serde_json::from_slice(&bytes).map_err(|e| StorageError::Format {
            path: path.clone(),
            offset: 0,
            field: format!("TokenizerSpec (line {}, column {})", e.line(), e.column()),
            message: e.to_string(),
        })
    })
}
