//! The generic row executor behind SELECT: type-checks and evaluates WHERE expressions over
//! rows of [`Value`]s, sorts by several keys, limits and projects.
//!
//! Semantics follow SQL (SQLite where SQL leaves a choice): comparisons with NULL are
//! unknown and a WHERE keeps only rows whose predicate is true; `NOT unknown` is unknown,
//! `false AND unknown` is false, `true OR unknown` is true; integers and floats compare as
//! numbers; text compares by bytes; LIKE is ASCII case-insensitive with `%` and `_`;
//! ORDER BY is stable (ties keep scan order) and sorts NULL first ascending.

use std::cmp::Ordering;

use lql_grammar::{CmpOp, Expr, ExprKind, Value as Lit};
use lql_planner::SortKey;

use crate::error::{Error, Result};
use crate::rows::Column;
use crate::value::{Value, ValueType};

/// The static type of an expression (`Null` for a bare NULL literal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Num,
    Text,
    Bool,
    List,
    Null,
}

impl Ty {
    fn of(t: ValueType) -> Ty {
        match t {
            ValueType::Int | ValueType::Float => Ty::Num,
            ValueType::Text => Ty::Text,
            ValueType::Bool => Ty::Bool,
            ValueType::List | ValueType::Any => Ty::List,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Ty::Num => "a number",
            Ty::Text => "text",
            Ty::Bool => "a boolean",
            Ty::List => "a list",
            Ty::Null => "NULL",
        }
    }
    fn compatible(self, other: Ty) -> bool {
        self == Ty::Null || other == Ty::Null || (self == other && self != Ty::List)
    }
}

fn column_index(cols: &[Column], name: &str, e: &Expr) -> Result<usize> {
    cols.iter()
        .position(|c| c.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| {
            Error::semantic(format!("unknown column `{name}`")).with_span(e.span.range())
        })
}

fn mismatch(e: &Expr, msg: String) -> Error {
    Error::semantic(format!("type mismatch: {msg}")).with_span(e.span.range())
}

/// Checks `e` against the columns; a WHERE clause must be boolean.
pub(crate) fn check_predicate(e: &Expr, cols: &[Column]) -> Result<()> {
    match type_of(e, cols)? {
        Ty::Bool | Ty::Null => Ok(()),
        t => Err(mismatch(
            e,
            format!("WHERE needs a boolean condition, this is {}", t.name()),
        )),
    }
}

fn type_of(e: &Expr, cols: &[Column]) -> Result<Ty> {
    let need = |x: &Expr, want: Ty, ctx: &str| -> Result<()> {
        let t = type_of(x, cols)?;
        if t == want || t == Ty::Null {
            Ok(())
        } else {
            Err(mismatch(
                x,
                format!("{ctx} needs {}, found {}", want.name(), t.name()),
            ))
        }
    };
    Ok(match &e.kind {
        ExprKind::Column(c) => Ty::of(cols[column_index(cols, &c.name, e)?].ty),
        ExprKind::Literal(l) => match l {
            Lit::Int(_) | Lit::Float(_) => Ty::Num,
            Lit::String(_) => Ty::Text,
            Lit::Bool(_) => Ty::Bool,
            Lit::Null => Ty::Null,
        },
        ExprKind::Compare { op, left, right } => {
            let (a, b) = (type_of(left, cols)?, type_of(right, cols)?);
            if a == Ty::List || b == Ty::List {
                let side = if a == Ty::List { left } else { right };
                return Err(mismatch(
                    side,
                    format!("a list cannot be compared with {}", op.symbol()),
                ));
            }
            if !a.compatible(b) {
                return Err(mismatch(
                    e,
                    format!("cannot compare {} {} {}", a.name(), op.symbol(), b.name()),
                ));
            }
            Ty::Bool
        }
        ExprKind::Like { expr, pattern, .. } => {
            need(expr, Ty::Text, "LIKE")?;
            need(pattern, Ty::Text, "a LIKE pattern")?;
            Ty::Bool
        }
        ExprKind::InList { expr, list, .. } => {
            let a = type_of(expr, cols)?;
            if a == Ty::List {
                return Err(mismatch(
                    expr,
                    "IN needs a single value, found a list".into(),
                ));
            }
            for x in list {
                let b = type_of(x, cols)?;
                if !a.compatible(b) {
                    return Err(mismatch(
                        x,
                        format!("IN list item is {}, the value is {}", b.name(), a.name()),
                    ));
                }
            }
            Ty::Bool
        }
        ExprKind::Between {
            expr, low, high, ..
        } => {
            let a = type_of(expr, cols)?;
            if !matches!(a, Ty::Num | Ty::Text | Ty::Null) {
                return Err(mismatch(
                    expr,
                    format!("BETWEEN needs a number or text, found {}", a.name()),
                ));
            }
            for x in [low, high] {
                let b = type_of(x, cols)?;
                if !a.compatible(b) {
                    return Err(mismatch(
                        x,
                        format!("BETWEEN bound is {}, the value is {}", b.name(), a.name()),
                    ));
                }
            }
            Ty::Bool
        }
        ExprKind::IsNull { expr, .. } => {
            type_of(expr, cols)?;
            Ty::Bool
        }
        ExprKind::Not(x) => {
            need(x, Ty::Bool, "NOT")?;
            Ty::Bool
        }
        ExprKind::And(xs) | ExprKind::Or(xs) => {
            let ctx = if matches!(e.kind, ExprKind::And(_)) {
                "AND"
            } else {
                "OR"
            };
            for x in xs {
                need(x, Ty::Bool, ctx)?;
            }
            Ty::Bool
        }
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
fn compare(a: &Value, b: &Value) -> Option<Ordering> {
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
                let y = eval(item, cols, row)?;
                match compare(&x, &y) {
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
    })
}

/// Keeps the rows for which `filter` is true.
pub(crate) fn filter(
    rows: Vec<Vec<Value>>,
    cols: &[Column],
    filter: &Expr,
) -> Result<Vec<Vec<Value>>> {
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        if truth(&eval(filter, cols, &r)?) == Some(true) {
            out.push(r);
        }
    }
    Ok(out)
}

/// Orders two cells for ORDER BY: NULL first, then by value; lists by their elements.
fn sort_cmp(a: &Value, b: &Value) -> Ordering {
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

/// Stable sort by `keys` (column names resolved against `cols`).
pub(crate) fn sort(rows: &mut [Vec<Value>], cols: &[Column], keys: &[SortKey]) -> Result<()> {
    let idx = keys
        .iter()
        .map(|k| {
            cols.iter()
                .position(|c| c.name.eq_ignore_ascii_case(&k.column))
                .map(|i| (i, k.descending))
                .ok_or_else(|| {
                    Error::semantic(format!("unknown column `{}` in ORDER BY", k.column))
                })
        })
        .collect::<Result<Vec<_>>>()?;
    rows.sort_by(|a, b| {
        for &(i, desc) in &idx {
            let o = sort_cmp(&a[i], &b[i]);
            let o = if desc { o.reverse() } else { o };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    });
    Ok(())
}

/// Column names an expression reads.
pub(crate) fn columns_in(e: &Expr, out: &mut Vec<String>) {
    match &e.kind {
        ExprKind::Column(c) => out.push(c.name.to_ascii_lowercase()),
        ExprKind::Literal(_) => {}
        ExprKind::Compare { left, right, .. } => {
            columns_in(left, out);
            columns_in(right, out);
        }
        ExprKind::Like { expr, pattern, .. } => {
            columns_in(expr, out);
            columns_in(pattern, out);
        }
        ExprKind::InList { expr, list, .. } => {
            columns_in(expr, out);
            list.iter().for_each(|x| columns_in(x, out));
        }
        ExprKind::Between {
            expr, low, high, ..
        } => {
            columns_in(expr, out);
            columns_in(low, out);
            columns_in(high, out);
        }
        ExprKind::IsNull { expr, .. } | ExprKind::Not(expr) => columns_in(expr, out),
        ExprKind::And(xs) | ExprKind::Or(xs) => xs.iter().for_each(|x| columns_in(x, out)),
    }
}

/// The set of integer values of column `col` that can satisfy `e`, as far as its top-level
/// conjuncts say (`col = n`, `col IN (…)`, `col BETWEEN a AND b`, `col <,<=,>,>= n`);
/// `None` when unconstrained. The full filter still runs afterwards, so this only needs to
/// be a superset of the matching values.
pub(crate) fn int_domain(e: &Expr, col: &str, lo: i64, hi: i64) -> Option<Vec<i64>> {
    let conjuncts: Vec<&Expr> = match &e.kind {
        ExprKind::And(xs) => xs.iter().collect(),
        _ => vec![e],
    };
    let is_col =
        |x: &Expr| matches!(&x.kind, ExprKind::Column(c) if c.name.eq_ignore_ascii_case(col));
    let int = |x: &Expr| match &x.kind {
        ExprKind::Literal(Lit::Int(i)) => Some(*i),
        _ => None,
    };
    let (mut a, mut b) = (lo, hi);
    let mut set: Option<Vec<i64>> = None;
    let mut constrained = false;
    for c in conjuncts {
        match &c.kind {
            ExprKind::Compare { op, left, right } => {
                let (op, n) = if is_col(left) {
                    match int(right) {
                        Some(n) => (*op, n),
                        None => continue,
                    }
                } else if is_col(right) {
                    match int(left) {
                        // n < col  ≡  col > n
                        Some(n) => (
                            match op {
                                CmpOp::Lt => CmpOp::Gt,
                                CmpOp::LtEq => CmpOp::GtEq,
                                CmpOp::Gt => CmpOp::Lt,
                                CmpOp::GtEq => CmpOp::LtEq,
                                o => *o,
                            },
                            n,
                        ),
                        None => continue,
                    }
                } else {
                    continue;
                };
                constrained |= op != CmpOp::NotEq;
                match op {
                    CmpOp::Eq => {
                        a = a.max(n);
                        b = b.min(n);
                    }
                    CmpOp::Lt => b = b.min(n.saturating_sub(1)),
                    CmpOp::LtEq => b = b.min(n),
                    CmpOp::Gt => a = a.max(n.saturating_add(1)),
                    CmpOp::GtEq => a = a.max(n),
                    CmpOp::NotEq => {}
                }
            }
            ExprKind::Between {
                expr,
                low,
                high,
                negated: false,
            } if is_col(expr) => {
                if let (Some(l), Some(h)) = (int(low), int(high)) {
                    a = a.max(l);
                    b = b.min(h);
                    constrained = true;
                }
            }
            ExprKind::InList {
                expr,
                list,
                negated: false,
            } if is_col(expr) => {
                let vals: Option<Vec<i64>> = list.iter().map(int).collect();
                if let Some(v) = vals {
                    set = Some(match set {
                        None => v,
                        Some(s) => s.into_iter().filter(|x| v.contains(x)).collect(),
                    });
                    constrained = true;
                }
            }
            _ => {}
        }
    }
    if !constrained {
        return None;
    }
    let mut out: Vec<i64> = match set {
        Some(s) => s.into_iter().filter(|x| (a..=b).contains(x)).collect(),
        None if a <= b => (a..=b).collect(),
        None => Vec::new(),
    };
    out.sort_unstable();
    out.dedup();
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let rows = filter(vec![row], &c, &and).unwrap();
        assert!(rows.is_empty());
    }

    #[test]
    fn type_errors_carry_spans() {
        let c = cols();
        let bad = cmp(CmpOp::Lt, col("name"), int(3));
        let err = check_predicate(&bad, &c).unwrap_err();
        assert!(err.message.contains("type mismatch"));
        assert_eq!(err.span, Some(0..1));
        assert!(check_predicate(&col("layer"), &c).is_err());
        assert!(check_predicate(&cmp(CmpOp::Eq, col("layer"), int(3)), &c).is_ok());
    }

    #[test]
    fn pushdown_domains() {
        let p = e(ExprKind::And(vec![
            cmp(CmpOp::GtEq, col("layer"), int(3)),
            cmp(CmpOp::Lt, int(1), col("feature")),
            cmp(CmpOp::LtEq, col("layer"), int(5)),
        ]));
        assert_eq!(int_domain(&p, "layer", 0, 29), Some(vec![3, 4, 5]));
        assert_eq!(int_domain(&p, "feature", 0, 3), Some(vec![2, 3]));
        assert_eq!(int_domain(&p, "other", 0, 3), None);
        let or = e(ExprKind::Or(vec![cmp(CmpOp::Eq, col("layer"), int(1))]));
        assert_eq!(int_domain(&or, "layer", 0, 29), None, "OR is not pushed");
        let inl = e(ExprKind::InList {
            expr: Box::new(col("layer")),
            list: vec![int(7), int(40), int(2)],
            negated: false,
        });
        assert_eq!(int_domain(&inl, "layer", 0, 29), Some(vec![2, 7]));
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
        let keys = [SortKey {
            column: "layer".into(),
            descending: false,
        }];
        sort(&mut rows, &c, &keys).unwrap();
        let names: Vec<String> = rows.iter().map(|r| r[1].to_string()).collect();
        assert_eq!(names, ["z", "a", "b", "a"], "NULL first, ties keep order");
    }
}
