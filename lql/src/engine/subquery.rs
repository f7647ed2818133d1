//! Uncorrelated subqueries in expressions: `x IN (SELECT …)` and `(SELECT …)` as a value.
//! Each runs once, as its own statement, before the operator that holds it evaluates
//! rows; the expression then reads its result as an IN list or a literal.

use std::borrow::Cow;

use lql_grammar::{Expr, ExprKind, Select, Statement, StatementKind, Value as Lit};

use super::{interp, Cx, EngineCatalog};
use crate::error::{Error, Result};
use crate::value::Value;

fn has_subquery(e: &Expr) -> bool {
    let mut found = false;
    e.walk(&mut |x| found |= matches!(x.kind, ExprKind::InSubquery { .. } | ExprKind::Subquery(_)));
    found
}

/// `e` with each subquery replaced by its result (unchanged when it has none).
pub(crate) fn materialize<'e>(cx: &mut Cx<'_>, e: &'e Expr) -> Result<Cow<'e, Expr>> {
    if !has_subquery(e) {
        return Ok(Cow::Borrowed(e));
    }
    Ok(Cow::Owned(rewrite(cx, e)?))
}

fn rewrite(cx: &mut Cx<'_>, e: &Expr) -> Result<Expr> {
    let kind = match &e.kind {
        ExprKind::InSubquery {
            expr,
            query,
            negated,
        } => {
            let values = run(cx, query, e)?;
            ExprKind::InList {
                expr: Box::new(rewrite(cx, expr)?),
                list: values
                    .into_iter()
                    .map(|v| literal(v, e))
                    .collect::<Result<_>>()?,
                negated: *negated,
            }
        }
        ExprKind::Subquery(query) => {
            let first = run(cx, query, e)?.into_iter().next().unwrap_or(Value::Null);
            return literal(first, e);
        }
        other => other.try_map_children::<Error>(&mut |x| rewrite(cx, x))?,
    };
    Ok(Expr { kind, span: e.span })
}

fn literal(v: Value, at: &Expr) -> Result<Expr> {
    let lit = match v {
        Value::Null => Lit::Null,
        Value::Bool(b) => Lit::Bool(b),
        Value::Int(i) => Lit::Int(i),
        Value::Float(f) => Lit::Float(f),
        Value::Text(s) => Lit::String(s),
        Value::List(_) => {
            return Err(
                Error::semantic("a subquery here must yield single values, not lists")
                    .with_span(at.span.range()),
            )
        }
    };
    Ok(Expr {
        kind: ExprKind::Literal(lit),
        span: at.span,
    })
}

/// The first column of the subquery's rows.
fn run(cx: &mut Cx<'_>, query: &Select, at: &Expr) -> Result<Vec<Value>> {
    let stmt = Statement {
        kind: StatementKind::Select(query.clone()),
        span: at.span,
    };
    let logical = {
        let catalog = EngineCatalog::new(cx.engine.bound.as_ref(), cx.engine.backend);
        lql_planner::bind(&stmt, &catalog)?
    };
    let physical = lql_planner::lower(&logical);
    let mut sub = Cx {
        engine: &mut *cx.engine,
        cancel: cx.cancel,
        text: cx.text,
        columns: physical.columns(),
    };
    let out = interp::run(&mut sub, &physical, interp::Mode::Plain)?;
    Ok(out
        .rows
        .rows
        .into_iter()
        .map(|mut r| {
            if r.is_empty() {
                Value::Null
            } else {
                r.swap_remove(0)
            }
        })
        .collect())
}
