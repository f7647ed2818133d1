//! Introspection operators: `Show` (SHOW MODELS | LAYERS | TENSORS | TABLES |
//! COMPONENTS | REPRESENTATIONS …), `Stats` and `DescribeTable`. These read the catalogue, the
//! bound model's surface and operand table, or the schema; none runs the model.

use std::collections::BTreeMap;

use lql_planner::{ShowPlan, ShowWhat};
use lql_storage::{catalogue, Role};

use super::datum::Datum;
use super::Cx;
use crate::error::{Error, Result};
use crate::rows::Rows;
use crate::value::Value;

/// `Show`: SHOW … [LIKE "pattern"]; LIKE filters on the first column (`%` any run, `_`
/// one character, case-insensitive).
pub(crate) fn show(cx: &mut Cx<'_>, plan: &ShowPlan) -> Result<Datum> {
    let mut rows = match plan.what {
        ShowWhat::Models => show_models(cx)?,
        ShowWhat::Backends => super::backend::show(cx),
        ShowWhat::Architectures => show_architectures(cx),
        ShowWhat::Layers => show_layers(cx)?,
        ShowWhat::Tensors => show_tensors(cx)?,
        ShowWhat::Tables => show_tables(cx),
        ShowWhat::Package => super::package::show(cx, plan.container.as_deref())?,
        ShowWhat::Components | ShowWhat::Representations | ShowWhat::Profiles => {
            return super::vindex::show(cx, plan).map(Datum::Rows)
        }
        ShowWhat::Patches => super::patch::show(cx)?,
        ShowWhat::Capabilities => super::vindex::show_capabilities(cx)?,
        ShowWhat::Steering => super::steering::show(cx)?,
    };
    if let Some(pattern) = &plan.like {
        rows.rows
            .retain(|r| r.first().is_some_and(|v| like(&v.to_string(), pattern)));
    }
    Ok(Datum::Rows(rows))
}

/// `SHOW TABLES`: the virtual tables that answer SELECT on the bound model. `routes` is
/// listed only where there is a router (a mixture-of-experts model), with the predicate it
/// needs; every other table answers `SELECT *`.
fn show_tables(cx: &Cx<'_>) -> Rows {
    let routed = cx.bound().is_ok_and(|b| b.model().surface.moe.is_some());
    let mut rows = Rows::new(cx.result_columns());
    for t in lql_planner::QUERYABLE_TABLES {
        if t == lql_grammar::Table::Routes && !routed {
            continue;
        }
        let n = lql_planner::table_columns(t).map_or(0, |c| c.len());
        let requires = lql_planner::table_requires(t).map_or(Value::Null, Value::from);
        rows.push(vec![Value::from(t.name()), Value::from(n), requires]);
    }
    rows
}

/// `DESCRIBE TABLE t`: (column, type, meaning) from the planner's schema.
pub(crate) fn describe_table(cx: &mut Cx<'_>, table: lql_grammar::Table) -> Result<Datum> {
    let defs = lql_planner::table_columns(table)
        .ok_or_else(|| Error::not_supported_yet(&format!("SELECT FROM {}", table.name())))?;
    let mut rows = Rows::new(cx.result_columns());
    for c in defs {
        rows.push(vec![
            Value::from(c.name),
            Value::from(c.ty.to_string()),
            Value::from(c.meaning),
        ]);
    }
    Ok(Datum::Rows(rows))
}

/// SHOW ARCHITECTURES: every registered family with what it supports, from the
/// importers' own entries (the same predicates the refusals use).
fn show_architectures(cx: &Cx<'_>) -> Rows {
    use lql_storage::import::{family::FAMILIES, hf};
    let hf = hf::supported_architectures();
    let mut rows = Rows::new(cx.result_columns());
    for f in FAMILIES {
        let features = f.nominal.features();
        rows.push(vec![
            Value::from(f.name),
            Value::from(if features.is_empty() {
                "llama block".to_string()
            } else {
                features.join(", ")
            }),
            hf.iter()
                .find(|(_, family)| *family == f.name)
                .map_or(Value::Null, |(class, _)| Value::from(*class)),
            Value::Bool(true),
            Value::Bool(true),
            // INSERT's added features sit beside every FFN (after a post-FFN norm), and
            // the subject write's gradient pass runs every block's steps.
            Value::from("AT LAYER, subject write"),
            Value::Bool(true),
            Value::Bool(f.selection.is_some()),
        ]);
    }
    rows
}

fn show_models(cx: &Cx<'_>) -> Result<Rows> {
    let mut rows = Rows::new(cx.result_columns());
    for m in catalogue::list()? {
        rows.push(vec![
            Value::from(m.name),
            Value::Bool(m.cached),
            Value::from(m.size),
            Value::from(m.licence),
            Value::from(format!("{}=={}", m.package, m.version)),
            Value::from(m.path.display().to_string()),
        ]);
    }
    Ok(rows)
}

/// Distinct encodings of some roles of a layer, in role order, joined by `/`.
fn encodings(model: &lql_storage::Model, layer: usize, roles: &[Role]) -> Value {
    let mut seen: Vec<&'static str> = Vec::new();
    for &r in roles {
        if let Some(op) = model.operand(lql_storage::OperandKey::layer(layer, r)) {
            let n = op.dtype.name();
            if !seen.contains(&n) {
                seen.push(n);
            }
        }
    }
    if seen.is_empty() {
        Value::Null
    } else {
        Value::from(seen.join("/"))
    }
}

fn show_layers(cx: &Cx<'_>) -> Result<Rows> {
    let b = cx.bound()?;
    let m = b.model();
    let mut rows = Rows::new(cx.result_columns());
    let mut per_layer: BTreeMap<usize, (usize, u64)> = BTreeMap::new();
    for (k, op) in &m.operands {
        if let Some(l) = k.layer {
            let e = per_layer.entry(l).or_default();
            e.0 += 1;
            e.1 += op.len as u64;
        }
    }
    for l in 0..m.surface.n_layers {
        let (n, bytes) = per_layer.get(&l).copied().unwrap_or_default();
        rows.push(vec![
            Value::from(l),
            encodings(
                m,
                l,
                &[Role::AttnQ, Role::AttnK, Role::AttnV, Role::AttnOutput],
            ),
            encodings(
                m,
                l,
                &[
                    Role::FfnGate,
                    Role::FfnUp,
                    Role::FfnDown,
                    Role::FfnGateInp,
                    Role::FfnGateExps,
                    Role::FfnUpExps,
                    Role::FfnDownExps,
                    Role::FfnGateShexp,
                    Role::FfnUpShexp,
                    Role::FfnDownShexp,
                ],
            ),
            encodings(m, l, &[Role::AttnNorm, Role::FfnNorm]),
            Value::from(n),
            Value::from(bytes),
        ]);
    }
    Ok(rows)
}

fn show_tensors(cx: &Cx<'_>) -> Result<Rows> {
    let mut rows = Rows::new(cx.result_columns());
    for r in super::select::tensor_rows(cx.bound()?.model()) {
        rows.push(r);
    }
    Ok(rows)
}

/// `STATS`: the bound model's facts as (key, value) rows.
pub(crate) fn stats(cx: &mut Cx<'_>) -> Result<Rows> {
    let b = cx.bound()?;
    let m = b.model();
    let s = &m.surface;
    let mut rows = Rows::new(cx.result_columns());
    let mut kv = |k: &str, v: Value| rows.push(vec![Value::from(k), v]);
    kv("model", Value::from(b.name.as_str()));
    kv("path", Value::from(m.path.display().to_string()));
    kv("format", Value::from(b.facts.source.to_string()));
    kv("architecture", Value::from(s.source_architecture.as_str()));
    kv("layers", Value::from(s.n_layers));
    kv("hidden", Value::from(s.hidden));
    kv("ffn", Value::from(s.ffn));
    kv("heads", Value::from(s.n_heads));
    kv("kv_heads", Value::from(s.n_kv_heads));
    kv("head_dim", Value::from(s.head_dim));
    kv("vocab", Value::from(s.vocab));
    kv("context_length", Value::from(s.context_length));
    kv("rope_theta", Value::from(s.rope_theta));
    kv(
        "rope_pairing",
        Value::from(match s.rope_pairing {
            lql_storage::surface::RopePairing::Adjacent => "adjacent",
            lql_storage::surface::RopePairing::HalfSplit => "half_split",
        }),
    );
    kv("norm_eps", Value::from(s.norm_eps));
    kv(
        "activation",
        Value::from(match s.activation {
            lql_storage::surface::Activation::Silu => "silu",
            lql_storage::surface::Activation::Gelu => "gelu",
        }),
    );
    kv("tied_head", Value::Bool(s.tied_head));
    kv("attn_bias", Value::Bool(s.attn_bias));
    kv("embedding_scale", Value::from(s.embedding_scale));
    if let Some(moe) = &s.moe {
        kv("experts", Value::from(moe.n_experts));
        kv("experts_used", Value::from(moe.n_used));
        kv("expert_selection", Value::from(moe.selection.name()));
        kv("shared_expert_ffn", Value::from(moe.shared_ffn));
        kv("shared_expert_gate", Value::Bool(moe.shared_gate));
    }
    kv("bos_token_id", Value::from(s.special.bos));
    kv("eos_token_id", Value::from(s.special.eos));
    kv("add_bos", Value::Bool(s.special.add_bos));
    let mut params: u64 = 0;
    let mut bytes: u64 = 0;
    let mut by_dtype: BTreeMap<&'static str, usize> = BTreeMap::new();
    // An architecture LQL cannot run counts its tensors as stored.
    let ops: Vec<&lql_storage::model::Operand> = match &m.uninterpreted {
        Some(u) => u.tensors.iter().collect(),
        None => m.operands.values().collect(),
    };
    for op in &ops {
        params += op.shape.iter().map(|&d| d as u64).product::<u64>();
        bytes += op.len as u64;
        *by_dtype.entry(op.dtype.name()).or_default() += 1;
    }
    kv("tensors", Value::from(ops.len()));
    kv("parameters", Value::from(params));
    kv("tensor_bytes", Value::from(bytes));
    let file_bytes = std::fs::metadata(&m.path)
        .ok()
        .filter(|md| md.is_file())
        .map(|md| md.len());
    kv("file_bytes", Value::from(file_bytes));
    let enc: Vec<String> = by_dtype.iter().map(|(d, n)| format!("{d}: {n}")).collect();
    kv("encodings", Value::from(enc.join(", ")));
    kv("can_execute", Value::Bool(b.facts.can_execute));
    kv("can_browse", Value::Bool(b.facts.can_browse));
    kv("can_tokenize", Value::Bool(b.facts.can_tokenize));
    if let Some(u) = &m.uninterpreted {
        kv("runs", Value::from(u.reason.as_str()));
    }
    Ok(rows)
}

/// SQL LIKE as sqlite has it: `%` in the pattern matches any run and `_` one character,
/// whatever the text holds at that place (a `%` or `_` in the text is no wildcard);
/// ASCII case-insensitive.
pub(crate) fn like(text: &str, pattern: &str) -> bool {
    let t: Vec<char> = text.chars().map(|c| c.to_ascii_lowercase()).collect();
    let p: Vec<char> = pattern.chars().map(|c| c.to_ascii_lowercase()).collect();
    // Iterative matcher with backtracking to the last `%` (linear space, no recursion).
    let (mut ti, mut pi) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == '%' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && (p[pi] == '_' || p[pi] == t[ti]) {
            ti += 1;
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '%' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::like;

    #[test]
    fn like_patterns() {
        assert!(like("blk.0.attn_q.weight", "blk.0.%"));
        assert!(like("blk.0.attn_q.weight", "%ATTN_Q%"));
        assert!(like("abc", "a_c"));
        assert!(!like("abc", "a_"));
        assert!(like("", "%"));
        assert!(!like("blk.1.x", "blk.0.%"));
        // A `%` in the text where the pattern has its wildcard: still the wildcard.
        assert!(like(" %d", " %"));
        assert!(like("%", "%%"));
        assert!(like("a%b", "a%"));
        assert!(like("_x", "_x"));
    }
}
