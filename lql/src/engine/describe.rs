//! DESCRIBE's operator: `DescribeScan` — a contrastive gate scan of the entity against
//! reference words, labels, and edges grouped by layer band → rows (band, target, gate,
//! layer, layers, count, also). The computation (threshold, merge, bands) is
//! `lql_exec::browse::describe`; `docs/browse.md` documents it. The binder chose the mode.

use lql_exec::browse::{self, DescribeOptions, Detail};
use lql_planner::{LayerRange, WalkMode};

use super::datum::Datum;
use super::interp::wrong_input;
use super::Cx;
use crate::error::Result;
use crate::rows::Rows;
use crate::value::Value;

/// `DescribeScan layers mode references detail`.
pub(crate) fn describe_scan(
    cx: &mut Cx<'_>,
    input: Datum,
    entity: &str,
    layers: LayerRange,
    mode: WalkMode,
    detail: lql_grammar::Detail,
) -> Result<Datum> {
    let Datum::Tokens(ids) = input else {
        return Err(wrong_input("DescribeScan", &input));
    };
    let entity = entity.to_string();
    let exec = match mode {
        WalkMode::Residual => Some(cx.executor()?),
        WalkMode::Embedding => None,
    };
    let tok = cx.tokenizer()?;
    let model = cx.browse_source()?;
    let cache = cx.labels()?;
    let opts = DescribeOptions {
        layers: Some((layers.first, layers.last)),
        detail: match detail {
            lql_grammar::Detail::Brief => Detail::Brief,
            lql_grammar::Detail::Verbose => Detail::Verbose,
            lql_grammar::Detail::Raw => Detail::Raw,
        },
        mode: Some(match mode {
            WalkMode::Embedding => browse::WalkMode::Embedding,
            WalkMode::Residual => browse::WalkMode::Residual,
        }),
        prefix: model.surface().special.bos.into_iter().collect(),
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
        &entity,
        &ids,
        &opts,
    )?;
    let mut rows = Rows::new(cx.result_columns());
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
    Ok(Datum::Rows(rows))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_plan_names_the_executor_reference_words() {
        assert_eq!(
            lql_planner::physical::REFERENCE_WORDS,
            lql_exec::browse::describe::REFERENCE_WORDS.len()
        );
    }
}
