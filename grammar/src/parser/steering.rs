//! Steering's clauses: `SET STEERING = spec | OFF`, `WITH STEERING spec statement`, where a
//! spec is a control-vector file or `("a", …) MINUS ("b", …)`, with SCALE and LAYERS / AT
//! LAYER each at most once.

use super::{at_layer_spec, clause_float, internal, layer_spec, set, span, string, Result, Rule};
use crate::ast::*;
use crate::error::SyntaxError;
use pest::iterators::Pair;

pub(super) fn set_steering(p: Pair<Rule>) -> Result<StatementKind> {
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_steering | Rule::eq => {}
            Rule::kw_off => return Ok(StatementKind::SetSteering(None)),
            Rule::steering_spec => return Ok(StatementKind::SetSteering(Some(steering_spec(q)?))),
            _ => return Err(internal(&q)),
        }
    }
    Err(SyntaxError::new(
        "SET STEERING needs a steering or OFF",
        Span::default(),
    ))
}

fn text_list(p: Pair<Rule>) -> Result<Vec<Spanned<String>>> {
    p.into_inner()
        .filter(|q| q.as_rule() == Rule::string)
        .map(string)
        .collect()
}

pub(super) fn steering_spec(p: Pair<Rule>) -> Result<Spanned<SteeringSpec>> {
    let sp = span(&p);
    let mut file = None;
    let mut lists = Vec::new();
    let mut scale = None;
    let mut layers = None;
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::string => file = Some(string(q)?),
            Rule::text_list => lists.push(text_list(q)?),
            Rule::kw_minus => {}
            Rule::scale_clause => set(&mut scale, clause_float(q)?, "SCALE")?,
            Rule::layers_clause => set(&mut layers, layer_spec(q)?, "LAYERS")?,
            Rule::at_layer_clause => set(&mut layers, at_layer_spec(q)?, "LAYERS")?,
            _ => return Err(internal(&q)),
        }
    }
    let source = match (file, lists.len()) {
        (Some(f), 0) => SteeringSource::File(f),
        (None, 2) => {
            let negative = lists.pop().unwrap_or_default();
            let positive = lists.pop().unwrap_or_default();
            SteeringSource::Difference { positive, negative }
        }
        _ => {
            return Err(SyntaxError::new(
                "expected a control-vector file or (…) MINUS (…)",
                sp,
            ))
        }
    };
    Ok(Spanned::new(
        SteeringSpec {
            source,
            scale,
            layers,
        },
        sp,
    ))
}
