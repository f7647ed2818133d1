//! Provenance of an EXTRACT (seed 002 §9.2, §5.2): what the written container claims is
//! derived from where its source came from, through the whole chain, never from the
//! immediate source alone.
//!
//! - A checkpoint source (GGUF, Hugging Face folder) is the source of truth: the container
//!   is `canonical`, with no `derived_from_model`, and each object's fidelity is that of
//!   the one encoding step.
//! - A container source makes the new container `derived`, `derived_from_model` names the
//!   first source of the chain (the source's own `derived_from_model`, else its source
//!   artifact), and each object's fidelity floor is the fidelity of the representation the
//!   source binding actually read (found by the segment file its operands are mapped
//!   from): a byte-identical copy of a lossy representation stays lossy.

use std::collections::BTreeMap;
use std::path::Path;

use super::index::{resolve, Authority};
use super::reader::Container;
use super::variants::FIDELITY_LEVELS;
use crate::error::{Result, StorageError};
use crate::model::{Backing, Model, SourceKind};

/// What an EXTRACT records about where its bytes came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Provenance {
    pub authority: Authority,
    /// The first source of the chain, for a derived container.
    pub derived_from_model: Option<String>,
    /// Artifacts from the first source to the immediate one.
    pub chain: Vec<String>,
    /// Per object: the weakest fidelity its bytes already carry (absent: source-exact).
    pub floor: BTreeMap<String, String>,
}

fn artifact_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Derive the provenance of an EXTRACT from `model`.
pub fn of_model(model: &Model) -> Result<Provenance> {
    if model.kind != SourceKind::Vindex3 {
        return Ok(Provenance {
            authority: Authority::Canonical,
            derived_from_model: None,
            chain: vec![artifact_name(&model.path)],
            floor: BTreeMap::new(),
        });
    }
    let c = Container::load(&model.path)?;
    let source_artifact = c
        .index
        .extra
        .get("source")
        .and_then(|s| s.get("artifact"))
        .and_then(|a| a.as_str())
        .map(str::to_string);
    let mut chain: Vec<String> = c
        .index
        .extra
        .get("provenance")
        .and_then(|p| p.get("chain"))
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    if chain.is_empty() {
        chain.extend(source_artifact.clone());
    }
    chain.push(artifact_name(&model.path));
    let first = c
        .index
        .derived_from_model
        .clone()
        .or(source_artifact)
        .unwrap_or_else(|| artifact_name(&model.path));

    let mut floor = BTreeMap::new();
    for (object, rep) in in_use(model, &c)? {
        let fidelity = &c.index.representations[&rep].fidelity;
        if !FIDELITY_LEVELS.contains(&fidelity.as_str()) {
            return Err(StorageError::Invalid(format!(
                "{}: representation {rep} records unknown fidelity {fidelity:?}",
                model.path.display()
            )));
        }
        floor.insert(object, fidelity.clone());
    }
    Ok(Provenance {
        authority: Authority::Derived,
        derived_from_model: Some(first),
        chain,
        floor,
    })
}

/// The representation (object → representation id) each object of a model opened from the
/// container `c` was read from: the segment file its operands are mapped from.
pub fn in_use(model: &Model, c: &Container) -> Result<BTreeMap<String, String>> {
    let mut by_segment = BTreeMap::new();
    for (id, e) in &c.index.representations {
        if let Ok(p) = resolve(&c.dir, &e.segment, "representations.segment") {
            let p = std::fs::canonicalize(&p).unwrap_or(p);
            by_segment.insert(p, (e.object.clone(), id.clone()));
        }
    }
    let mut used: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for op in model.operands.values() {
        let Some(Backing::Mmap(map)) = model.backings.get(op.backing) else {
            continue;
        };
        let Some((path, _)) = crate::mapped::registered(map) else {
            continue;
        };
        let path = std::fs::canonicalize(&path).unwrap_or(path);
        let Some((object, rep)) = by_segment.get(&path) else {
            return Err(StorageError::Invalid(format!(
                "{}: operand {} is mapped from {}, which no representation of the container \
                 records",
                model.path.display(),
                op.source_name,
                path.display()
            )));
        };
        used.entry(object.clone()).or_default().insert(rep.clone());
    }
    // An object read through a representation REPRESENT added maps its segment and its
    // base's: the representation in use is the one whose base chain covers the others.
    let mut out = BTreeMap::new();
    for (object, reps) in used {
        let mut chosen = None;
        for rep in &reps {
            let chain = super::represent::base_chain(c, rep)?;
            if reps.iter().all(|r| chain.contains(r)) {
                chosen = Some(rep.clone());
            }
        }
        let rep = chosen.ok_or_else(|| {
            StorageError::Invalid(format!(
                "{}: object {object} is read from representations {reps:?}, which no base \
                 chain relates",
                model.path.display()
            ))
        })?;
        out.insert(object, rep);
    }
    Ok(out)
}
