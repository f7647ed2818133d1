//! Graph checks a binding runs before it trusts the text component (seed 002 §12.4,
//! §17.9–17.10): the SystemGraph schema, the per-layer attention census (schema 6 carries
//! one explicit operator per layer, with no absent-means-softmax default: a missing, short,
//! repeated or out-of-order list fails closed), and facts the container stores twice —
//! RoPE theta and pairing in `attention[].position` against the execution surface, and the
//! headline geometry of `index.json` against the component — refused by name when they
//! disagree.

use std::path::Path;

use serde_json::Value;

use super::graph::Component;
use super::index::Vindex3Index;
use super::GRAPH_SCHEMA;
use crate::error::{Result, StorageError};
use crate::surface::{ExecutionSurface, RopePairing};

fn bad(dir: &Path, file: &str, field: String, message: String) -> StorageError {
    StorageError::Format {
        path: dir.join(file),
        offset: 0,
        field,
        message,
    }
}

/// Refuse a SystemGraph whose `schema` this build does not read, naming the value found
/// and the schema read, before the graph is interpreted.
pub(crate) fn check_graph_schema(path: &Path, root: &Value) -> Result<()> {
    match root.get("schema").and_then(Value::as_u64) {
        Some(s) if s == GRAPH_SCHEMA as u64 => Ok(()),
        Some(s) => Err(StorageError::Unsupported(format!(
            "{}: SystemGraph schema {s}; this build reads schema {GRAPH_SCHEMA} (schema 6 \
             reinterprets presence: an older or newer graph is not read under its rules)",
            path.display()
        ))),
        None => Err(StorageError::Format {
            path: path.to_path_buf(),
            offset: 0,
            field: "schema".into(),
            message: format!(
                "the SystemGraph has no integer \"schema\" (found {}); this build reads \
                 schema {GRAPH_SCHEMA}",
                root.get("schema")
                    .map(|v| v.to_string())
                    .unwrap_or("nothing".into())
            ),
        }),
    }
}

/// The headline geometry `index.json` states must be the component's.
pub(crate) fn check_headline(dir: &Path, index: &Vindex3Index, comp: &Component) -> Result<()> {
    for (field, stated, actual) in [
        ("hidden_size", index.hidden_size, comp.hidden_size),
        ("num_layers", index.num_layers, comp.num_layers),
    ] {
        if stated != actual {
            return Err(bad(
                dir,
                "index.json",
                field.into(),
                format!(
                    "index.json says {field} {stated}, component {:?} in the graph says \
                     {actual}; a fact stored twice must agree",
                    comp.id
                ),
            ));
        }
    }
    Ok(())
}

/// The component's own headline facts must be its execution surface's.
pub(crate) fn check_component_surface(
    dir: &Path,
    comp: &Component,
    s: &ExecutionSurface,
) -> Result<()> {
    for (field, stated, actual) in [
        ("num_layers", comp.num_layers as usize, s.n_layers),
        ("hidden_size", comp.hidden_size as usize, s.hidden),
    ] {
        if stated != actual {
            return Err(bad(
                dir,
                "system_graph.json",
                format!("components[{}].{field}", comp.id),
                format!(
                    "component says {field} {stated}, its execution surface {actual}; a fact \
                     stored twice must agree"
                ),
            ));
        }
    }
    Ok(())
}

/// The attention census: exactly one policy per layer, layer `i` at position `i`, each
/// with an explicit operator and span, and a position that agrees with the surface.
/// Unknown operators are refused by name as "not supported yet" (the operator is read,
/// not defaulted).
pub(crate) fn check_attention(dir: &Path, comp: &Component, s: &ExecutionSurface) -> Result<()> {
    let field = |l: usize| format!("components[{}].attention[{l}]", comp.id);
    let n = s.n_layers;
    if comp.attention.len() != n {
        let declared: Vec<u32> = comp.attention.iter().map(|a| a.layer).collect();
        let first_missing = (0..n as u32).find(|l| !declared.contains(l));
        return Err(bad(
            dir,
            "system_graph.json",
            format!("components[{}].attention", comp.id),
            format!(
                "the layer census fails closed: {} attention policies for {n} layers{} \
                 (schema {GRAPH_SCHEMA} declares one explicit operator per layer; an absent \
                 one is not softmax)",
                comp.attention.len(),
                match first_missing {
                    Some(l) => format!(", layer {l} declares none"),
                    None => String::new(),
                }
            ),
        ));
    }
    let (theta, pairing) = (
        s.rope_theta,
        match s.rope_pairing {
            RopePairing::Adjacent => "adjacent",
            RopePairing::HalfSplit => "half_split",
        },
    );
    for (i, a) in comp.attention.iter().enumerate() {
        crate::interrupt::every(i as u64, || {
            format!("component {}: attention census", comp.id)
        })?;
        if a.layer as usize != i {
            return Err(bad(
                dir,
                "system_graph.json",
                field(i),
                format!(
                    "the layer census fails closed: entry {i} declares layer {} (one entry \
                     per layer, in order)",
                    a.layer
                ),
            ));
        }
        if a.operator != "softmax" || a.span != "full" {
            return Err(StorageError::Unsupported(format!(
                "not supported yet: layer {i} attention operator {:?} span {:?} (this build \
                 executes full softmax attention)",
                a.operator, a.span
            )));
        }
        let rope = a.position.get("rope");
        let got_theta = rope.and_then(|r| r.get("theta")).and_then(Value::as_f64);
        let got_pairing = rope.and_then(|r| r.get("pairing")).and_then(Value::as_str);
        match (got_theta, got_pairing) {
            (Some(t), Some(p)) if (t as f32) == theta && p == pairing => {}
            (Some(t), Some(p)) => {
                return Err(bad(
                    dir,
                    "system_graph.json",
                    format!("{}.position.rope", field(i)),
                    format!(
                        "layer {i} declares RoPE theta {t} pairing {p:?}; the execution \
                         surface says theta {theta} pairing {pairing:?} — a fact stored \
                         twice must agree"
                    ),
                ))
            }
            _ => {
                return Err(bad(
                    dir,
                    "system_graph.json",
                    format!("{}.position", field(i)),
                    format!(
                        "layer {i} declares position {}; the execution surface applies RoPE \
                         (theta {theta}, pairing {pairing:?}) — a fact stored twice must agree",
                        a.position
                    ),
                ))
            }
        }
    }
    Ok(())
}
