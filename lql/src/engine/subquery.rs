//! Uncorrelated subqueries in expressions: `x IN (SELECT …)` and `(SELECT …)` as a value.
//! The binder binds each with its statement and the lowering makes its plan a `Subquery`
//! input of every operator whose expressions hold it; the interpreter runs it once, before
//! that operator, and [`substitute`] then writes its result into the operator's
//! expressions: an IN list, or a literal (NULL for no rows).

use lql_grammar::{Expr, ExprKind, Value as Lit};
use lql_planner::Operator;

use super::datum::Datum;
use crate::error::{Error, Result};
use crate::value::Value;

/// `op` with each subquery of its expressions replaced by its rows' first column, taken
/// from `results` in the order the lowering attached them.
pub(crate) fn substitute(op: &Operator, results: Vec<Datum>) -> Result<Operator> {
    let mut columns = results
        .into_iter()
        .map(first_column)
        .collect::<Result<Vec<_>>>()?
        .into_iter();
    let mut op = op.clone();
    for e in op.expressions_mut() {
        *e = rewrite(e, &mut columns)?;
    }
    if columns.next().is_some() {
        return Err(Error::internal(format!(
            "{op} was given more subquery inputs than its expressions hold"
        )));
    }
    Ok(op)
}

/// A subquery's rows, reduced to their first column.
fn first_column(d: Datum) -> Result<Vec<Value>> {
    let Datum::Rows(rows) = d else {
        return Err(super::interp::wrong_input("a subquery's reader", &d));
    };
    Ok(rows
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

/// `e` with its subqueries replaced, outermost first, left to right (the order of
/// [`lql_planner::subqueries_in`]).
fn rewrite(e: &Expr, results: &mut impl Iterator<Item = Vec<Value>>) -> Result<Expr> {
    let mut next = |at: &Expr| {
        results.next().ok_or_else(|| {
            Error::internal("a subquery of the expression has no input").with_span(at.span.range())
        })
    };
    let kind = match &e.kind {
        ExprKind::InSubquery { expr, negated, .. } => {
            let values = next(e)?;
            ExprKind::InList {
                expr: Box::new(rewrite(expr, results)?),
                list: values
                    .into_iter()
                    .map(|v| literal(v, e))
                    .collect::<Result<_>>()?,
                negated: *negated,
            }
        }
        ExprKind::Subquery(_) => {
            let first = next(e)?.into_iter().next().unwrap_or(Value::Null);
            return literal(first, e);
        }
        other => other.try_map_children::<Error>(&mut |x| rewrite(x, results))?,
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
