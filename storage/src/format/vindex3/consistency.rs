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
use super::program;
use super::GRAPH_SCHEMA;
use crate::error::{Result, StorageError};
use crate::surface::ExecutionSurface;

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
        if a.operator != "softmax" {
            return Err(StorageError::Unsupported(format!(
                "not supported yet: layer {i} attention operator {:?} (this build executes \
                 softmax attention)",
                a.operator
            )));
        }
        let want = program::attention_policy(s, i);
        if a.span != want.span || a.window != want.window {
            return Err(bad(
                dir,
                "system_graph.json",
                field(i),
                format!(
                    "layer {i} declares span {:?} window {:?}; the execution surface says \
                     span {:?} window {:?} — a fact stored twice must agree",
                    a.span, a.window, want.span, want.window
                ),
            ));
        }
        if !same_position(&a.position, &want.position) {
            return Err(bad(
                dir,
                "system_graph.json",
                format!("{}.position", field(i)),
                format!(
                    "layer {i} declares position {}; the execution surface says {} — a fact \
                     stored twice must agree",
                    a.position, want.position
                ),
            ));
        }
    }
    Ok(())
}

/// Positions agree when both are `"none"`, or both RoPE with the same pairing and the same
/// theta at f32 precision (the surface's).
fn same_position(got: &Value, want: &Value) -> bool {
    let rope = |v: &Value| {
        v.get("rope").map(|r| {
            (
                r.get("theta").and_then(Value::as_f64).map(|t| t as f32),
                r.get("pairing").and_then(Value::as_str).map(str::to_string),
            )
        })
    };
    match (rope(got), rope(want)) {
        (Some(g), Some(w)) => g.0.is_some() && g == w,
        (None, None) => got == want,
        _ => false,
    }
}

/// The schema-6 declarations (`program`, `continuation`), when the component records them:
/// one entry per layer, in order, each equal to what the execution surface and the layer's
/// bound operands imply; and closure both ways — every role a layer binds is consumed by an
/// operation of its program. A component written before the declarations records neither;
/// the program is then the surface's (recomputed, not read).
pub(crate) fn check_program(dir: &Path, comp: &Component, s: &ExecutionSurface) -> Result<()> {
    let n = s.n_layers;
    let file = "system_graph.json";
    if comp.program.is_empty() && comp.continuation.is_empty() {
        return Ok(());
    }
    if comp.program.len() != n || comp.continuation.len() != n {
        return Err(bad(
            dir,
            file,
            format!("components[{}].program", comp.id),
            format!(
                "{} programs and {} continuation entries for {n} layers: schema \
                 {GRAPH_SCHEMA} declares both for every layer",
                comp.program.len(),
                comp.continuation.len()
            ),
        ));
    }
    let bound = program::bound_roles(&comp.operands, n);
    for (i, (declared, state)) in comp.program.iter().zip(&comp.continuation).enumerate() {
        crate::interrupt::every(i as u64, || format!("component {}: programs", comp.id))?;
        let field = |what: &str| format!("components[{}].{what}[{i}]", comp.id);
        let want = program::layer_program(s, i, &bound[i]);
        let ops = |p: &program::LayerProgram| {
            p.ops
                .iter()
                .map(|o| format!("{}({})", o.op, o.roles.join(",")))
                .collect::<Vec<_>>()
                .join(" ")
        };
        if declared.layer as usize != i
            || declared.residual != want.residual
            || ops(declared) != ops(&want)
        {
            return Err(bad(
                dir,
                file,
                field("program"),
                format!(
                    "layer {} declares the program [{}] ({} residual); its execution surface \
                     and bound operands imply [{}] ({} residual) — the program must close over \
                     exactly the operands the layer binds",
                    declared.layer,
                    ops(declared),
                    declared.residual,
                    ops(&want),
                    want.residual
                ),
            ));
        }
        let want_state = program::layer_state(s, i);
        let regions = |st: &program::LayerState| {
            st.regions
                .iter()
                .map(|r| {
                    format!(
                        "{} rows={} window={:?} kv_heads={} head_dim={} update={}",
                        r.role, r.rows, r.window, r.kv_heads, r.head_dim, r.update
                    )
                })
                .collect::<Vec<_>>()
        };
        if state.layer as usize != i || regions(state) != regions(&want_state) {
            return Err(bad(
                dir,
                file,
                field("continuation"),
                format!(
                    "layer {} declares continuation state {:?}; its program needs {:?}",
                    state.layer,
                    regions(state),
                    regions(&want_state)
                ),
            ));
        }
    }
    Ok(())
}
