//! `DESCRIBE "entity" [AT LAYER n | LAYERS a-b] [BRIEF | VERBOSE | RAW]` → rows (band,
//! target, gate, layer, layers, count, also). The computation (threshold, merge, bands) is
//! `lql_exec::browse::describe`; `docs/browse.md` documents it.

use lql_exec::browse::{self, DescribeOptions, Detail};
use lql_planner::DescribePlan;

use super::walk::{browse_err, executor_if_executable, label_cache};
use super::Cx;
use crate::error::{Error, Result};
use crate::rows::{Column, Rows};
use crate::value::{Value, ValueType};

fn columns() -> Vec<Column> {
    vec![
        Column::new("band", ValueType::Text),
        Column::new("target", ValueType::Text),
        Column::new("gate", ValueType::Float),
        Column::new("layer", ValueType::Int),
        Column::new("layers", ValueType::List),
        Column::new("count", ValueType::Int),
        Column::new("also", ValueType::List),
    ]
}

/// `DESCRIBE …`
pub(crate) fn describe(cx: &mut Cx<'_>, plan: &DescribePlan) -> Result<Rows> {
    let exec = executor_if_executable(cx)?;
    let tok = cx.tokenizer()?;
    let ids = tok.encode(&plan.entity, false)?;
    if ids.is_empty() {
        return Err(Error::semantic(format!(
            "{:?} tokenizes to no tokens: nothing to describe",
            plan.entity
        )));
    }
    let model = cx.bound()?.model.clone();
    let cache = label_cache(&model);
    let opts = DescribeOptions {
        layers: Some((plan.layers.first, plan.layers.last)),
        detail: match plan.detail {
            lql_grammar::Detail::Brief => Detail::Brief,
            lql_grammar::Detail::Verbose => Detail::Verbose,
            lql_grammar::Detail::Raw => Detail::Raw,
        },
        mode: None,
        prefix: model.surface.special.bos.into_iter().collect(),
        baseline: browse::describe::REFERENCE_WORDS
            .iter()
            .map(|w| tok.encode(w, false))
            .collect::<std::result::Result<_, _>>()?,
    };
    let r = browse::describe(
        model.as_ref(),
        exec.as_ref(),
        tok.as_ref(),
        &cache,
        &plan.entity,
        &ids,
        &opts,
    )
    .map_err(browse_err)?;
    let mut rows = Rows::new(columns());
    for e in r.edges {
        rows.push(vec![
            Value::from(e.band),
            Value::from(e.target),
            Value::from(e.gate),
            Value::from(e.layer),
            Value::List(e.layers.into_iter().map(Value::from).collect()),
            Value::from(e.count),
            Value::List(e.also.into_iter().map(Value::from).collect()),
        ]);
    }
    Ok(rows)
}
