//! The generic row executor behind SELECT's Filter and Sort: evaluates WHERE expressions
//! (type-checked by the binder) over rows of [`Value`]s and sorts by several keys.
//!
//! Semantics follow SQL (SQLite where SQL leaves a choice): comparisons with NULL are
//! unknown and a WHERE keeps only rows whose predicate is true; `NOT unknown` is unknown,
//! `false AND unknown` is false, `true OR unknown` is true; integers and floats compare as
//! numbers; text compares by bytes; LIKE is ASCII case-insensitive with `%` and `_`;
//! ORDER BY is stable (ties keep scan order) and sorts NULL first ascending.

use std::cmp::Ordering;

use lql_grammar::{ArithOp, CmpOp, Expr, ExprKind, Value as Lit};
use lql_planner::SortKey;

use crate::error::{Error, Result};
use crate::rows::Column;
use crate::value::Value;

fn column_index(cols: &[Column], name: &str, e: &Expr) -> Result<usize> {
    cols.iter()
        .position(|c| c.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| {
            Error::semantic(format!("unknown column `{name}`")).with_span(e.span.range())
        })
}

/// Three-valued truth.
fn truth(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        _ => None,
    }
}

fn lit(l: &Lit) -> Value {
    match l {
        Lit::Int(i) => Value::Int(*i),
        Lit::Float(f) => Value::Float(*f),
        Lit::String(s) => Value::Text(s.clone()),
        Lit::Bool(b) => Value::Bool(*b),
        Lit::Null => Value::Null,
    }
}

/// Orders two non-null scalar values of compatible types (`None` for NULL or mismatch).
pub(crate) fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => Some(x.cmp(y)),
        (Value::Text(x), Value::Text(y)) => Some(x.as_bytes().cmp(y.as_bytes())),
        (Value::Bool(x), Value::Bool(y)) => Some(x.cmp(y)),
        _ => match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) => x.partial_cmp(&y),
            _ => None,
        },
    }
}

/// [`compare`] of a value with a literal, without building the literal's value.
fn compare_lit(a: &Value, l: &Lit) -> Option<Ordering> {
    match (a, l) {
        (Value::Int(x), Lit::Int(y)) => Some(x.cmp(y)),
        (Value::Text(x), Lit::String(y)) => Some(x.as_bytes().cmp(y.as_bytes())),
        (Value::Bool(x), Lit::Bool(y)) => Some(x.cmp(y)),
        (_, Lit::Null) | (Value::Null, _) => None,
        (_, Lit::String(_)) | (Value::Text(_), _) => None,
        _ => compare(a, &lit(l)),
    }
}

/// Evaluates `e` on one row (already type-checked).
pub(crate) fn eval(e: &Expr, cols: &[Column], row: &[Value]) -> Result<Value> {
    let b = |o: Option<bool>| o.map_or(Value::Null, Value::Bool);
    Ok(match &e.kind {
        ExprKind::Column(c) => row[column_index(cols, &c.name, e)?].clone(),
        ExprKind::Literal(l) => lit(l),
        ExprKind::Compare { op, left, right } => {
            let (x, y) = (eval(left, cols, row)?, eval(right, cols, row)?);
            b(compare(&x, &y).map(|o| match op {
                CmpOp::Eq => o == Ordering::Equal,
                CmpOp::NotEq => o != Ordering::Equal,
                CmpOp::Lt => o == Ordering::Less,
                CmpOp::LtEq => o != Ordering::Greater,
                CmpOp::Gt => o == Ordering::Greater,
                CmpOp::GtEq => o != Ordering::Less,
            }))
        }
        ExprKind::Like {
            expr,
            pattern,
            negated,
        } => {
            let (x, p) = (eval(expr, cols, row)?, eval(pattern, cols, row)?);
            match (x.as_str(), p.as_str()) {
                (Some(t), Some(p)) => Value::Bool(super::introspect::like(t, p) != *negated),
                _ => Value::Null,
            }
        }
        ExprKind::InList {
            expr,
            list,
            negated,
        } => {
            let x = eval(expr, cols, row)?;
            if x.is_null() {
                return Ok(Value::Null);
            }
            let mut unknown = false;
            let mut found = false;
            for item in list {
                // A literal is compared where it stands (a long IN list of literals then
                // costs no allocation per row and item).
                let order = match &item.kind {
                    ExprKind::Literal(l) => compare_lit(&x, l),
                    _ => compare(&x, &eval(item, cols, row)?),
                };
                match order {
                    Some(Ordering::Equal) => {
                        found = true;
                        break;
                    }
                    Some(_) => {}
                    None => unknown = true,
                }
            }
            if found {
                Value::Bool(!*negated)
            } else if unknown {
                Value::Null
            } else {
                Value::Bool(*negated)
            }
        }
        ExprKind::Between {
            expr,
            low,
            high,
            negated,
        } => {
            let x = eval(expr, cols, row)?;
            let lo = compare(&x, &eval(low, cols, row)?).map(|o| o != Ordering::Less);
            let hi = compare(&x, &eval(high, cols, row)?).map(|o| o != Ordering::Greater);
            let inside = match (lo, hi) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            };
            b(inside.map(|v| v != *negated))
        }
        ExprKind::IsNull { expr, negated } => {
            Value::Bool(eval(expr, cols, row)?.is_null() != *negated)
        }
        ExprKind::Not(x) => b(truth(&eval(x, cols, row)?).map(|v| !v)),
        ExprKind::And(xs) => {
            let mut unknown = false;
            for x in xs {
                match truth(&eval(x, cols, row)?) {
                    Some(false) => return Ok(Value::Bool(false)),
                    Some(true) => {}
                    None => unknown = true,
                }
            }
            b((!unknown).then_some(true))
        }
        ExprKind::Or(xs) => {
            let mut unknown = false;
            for x in xs {
                match truth(&eval(x, cols, row)?) {
                    Some(true) => return Ok(Value::Bool(true)),
                    Some(false) => {}
                    None => unknown = true,
                }
            }
            b((!unknown).then_some(false))
        }
        ExprKind::Arith { op, left, right } => {
            arith(*op, &eval(left, cols, row)?, &eval(right, cols, row)?)
        }
        ExprKind::Neg(x) => match eval(x, cols, row)? {
            Value::Int(i) => i
                .checked_neg()
                .map_or(Value::Float(-(i as f64)), Value::Int),
            Value::Float(f) => Value::Float(-f),
            _ => Value::Null,
        },
        ExprKind::Aggregate { .. } => {
            return Err(Error::internal(format!(
                "aggregate {e} evaluated outside an Aggregate operator"
            )))
        }
        ExprKind::Call { func, args } => {
            let vals = args
                .iter()
                .map(|a| eval(a, cols, row))
                .collect::<Result<Vec<_>>>()?;
            super::scalar::call(*func, &vals)?
        }
        ExprKind::Case {
            operand,
            whens,
            otherwise,
        } => {
            let op = operand.as_deref().map(|o| eval(o, cols, row)).transpose()?;
            for (w, t) in whens {
                let hit = match &op {
                    Some(v) => compare(v, &eval(w, cols, row)?) == Some(Ordering::Equal),
                    None => truth(&eval(w, cols, row)?) == Some(true),
                };
                if hit {
                    return eval(t, cols, row);
                }
            }
            match otherwise {
                Some(o) => eval(o, cols, row)?,
                None => Value::Null,
            }
        }
        ExprKind::Cast { expr, to } => super::scalar::cast(&eval(expr, cols, row)?, *to)?,
        ExprKind::InSubquery { .. } | ExprKind::Subquery(_) => {
            return Err(Error::internal(format!(
                "subquery {e} evaluated before it ran"
            )))
        }
    })
}

/// SQLite's arithmetic: integers stay integers (overflow turns the result into a float),
/// `/` on integers truncates, division or remainder by zero and any NULL give NULL.
pub(crate) fn arith(op: ArithOp, a: &Value, b: &Value) -> Value {
    if op == ArithOp::Concat {
        return super::scalar::concat(a, b);
    }
    if let (Value::Int(x), Value::Int(y)) = (a, b) {
        let (x, y) = (*x, *y);
        let exact = match op {
            ArithOp::Add => x.checked_add(y),
            ArithOp::Sub => x.checked_sub(y),
            ArithOp::Mul => x.checked_mul(y),
            ArithOp::Div if y == 0 => return Value::Null,
            ArithOp::Rem if y == 0 => return Value::Null,
            ArithOp::Div => x.checked_div(y),
            ArithOp::Rem => Some(x.checked_rem(y).unwrap_or(0)),
            ArithOp::Concat => None,
        };
        if let Some(v) = exact {
            return Value::Int(v);
        }
    }
    let (Some(x), Some(y)) = (a.as_f64(), b.as_f64()) else {
        return Value::Null;
    };
    let v = match op {
        ArithOp::Add => x + y,
        ArithOp::Sub => x - y,
        ArithOp::Mul => x * y,
        ArithOp::Div if y == 0.0 => return Value::Null,
        ArithOp::Rem if y == 0.0 => return Value::Null,
        ArithOp::Div => x / y,
        ArithOp::Rem => x % y,
        ArithOp::Concat => return Value::Null,
    };
    if v.is_finite() {
        Value::Float(v)
    } else {
        Value::Null
    }
}

/// Keeps the rows for which `filter` is true; stops with `Interrupted` when `cancel` is set
/// (polled every row: a WHERE clause may have thousands of terms).
pub(crate) fn filter(
    rows: Vec<Vec<Value>>,
    cols: &[Column],
    filter: &Expr,
    cancel: &std::sync::atomic::AtomicBool,
) -> Result<Vec<Vec<Value>>> {
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        if cancel.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(Error::interrupted());
        }
        if truth(&eval(filter, cols, &r)?) == Some(true) {
            out.push(r);
        }
    }
    Ok(out)
}

/// Orders two cells for ORDER BY: NULL first, then by value; lists by their elements.
pub(crate) fn sort_cmp(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Null, Value::Null) => Ordering::Equal,
        (Value::Null, _) => Ordering::Less,
        (_, Value::Null) => Ordering::Greater,
        (Value::List(x), Value::List(y)) => {
            for (p, q) in x.iter().zip(y) {
                let o = sort_cmp(p, q);
                if o != Ordering::Equal {
                    return o;
                }
            }
            x.len().cmp(&y.len())
        }
        _ => compare(a, b).unwrap_or(Ordering::Equal),
    }
}

/// Stable sort by `keys` (expressions over `cols`, evaluated once per row).
pub(crate) fn sort(rows: &mut Vec<Vec<Value>>, cols: &[Column], keys: &[SortKey]) -> Result<()> {
    let mut keyed = Vec::with_capacity(rows.len());
    for r in rows.drain(..) {
        let k = keys
            .iter()
            .map(|k| eval(&k.expr, cols, &r))
            .collect::<Result<Vec<_>>>()?;
        keyed.push((k, r));
    }
    keyed.sort_by(|(a, _), (b, _)| {
        for (i, k) in keys.iter().enumerate() {
            let o = sort_cmp(&a[i], &b[i]);
            let o = if k.descending { o.reverse() } else { o };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    });
    rows.extend(keyed.into_iter().map(|(_, r)| r));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::ValueType;
    use lql_grammar::{Ident, Span};

    fn e(kind: ExprKind) -> Expr {
        Expr {
            kind,
            span: Span::new(0, 1),
        }
    }
    fn col(n: &str) -> Expr {
        e(ExprKind::Column(Ident {
            name: n.into(),
            span: Span::new(0, 1),
        }))
    }
    fn int(i: i64) -> Expr {
        e(ExprKind::Literal(Lit::Int(i)))
    }
    fn cmp(op: CmpOp, a: Expr, b: Expr) -> Expr {
        e(ExprKind::Compare {
            op,
            left: Box::new(a),
            right: Box::new(b),
        })
    }
    fn cols() -> Vec<Column> {
        vec![
            Column::new("layer", ValueType::Int),
            Column::new("name", ValueType::Text),
        ]
    }

    #[test]
    fn three_valued_logic() {
        let c = cols();
        let row = vec![Value::Null, Value::from("x")];
        let p = cmp(CmpOp::Eq, col("layer"), int(1));
        assert_eq!(eval(&p, &c, &row).unwrap(), Value::Null);
        let not = e(ExprKind::Not(Box::new(p.clone())));
        assert_eq!(eval(&not, &c, &row).unwrap(), Value::Null);
        let f = cmp(CmpOp::Eq, int(1), int(2));
        let and = e(ExprKind::And(vec![p.clone(), f.clone()]));
        assert_eq!(eval(&and, &c, &row).unwrap(), Value::Bool(false));
        let t = cmp(CmpOp::Eq, int(1), int(1));
        let or = e(ExprKind::Or(vec![p, t]));
        assert_eq!(eval(&or, &c, &row).unwrap(), Value::Bool(true));
        let rows = filter(
            vec![row],
            &c,
            &and,
            &std::sync::atomic::AtomicBool::new(false),
        )
        .unwrap();
        assert!(rows.is_empty());
    }

    #[test]
    fn stable_multi_key_sort() {
        let c = cols();
        let mut rows = vec![
            vec![Value::Int(2), Value::from("b")],
            vec![Value::Null, Value::from("z")],
            vec![Value::Int(1), Value::from("a")],
            vec![Value::Int(2), Value::from("a")],
        ];
        let keys = [SortKey::column("layer", false)];
        sort(&mut rows, &c, &keys).unwrap();
        let names: Vec<String> = rows.iter().map(|r| r[1].to_string()).collect();
        assert_eq!(names, ["z", "a", "b", "a"], "NULL first, ties keep order");
    }
}
