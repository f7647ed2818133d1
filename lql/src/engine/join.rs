//! SELECT's Join: the rows of two inputs paired by an ON condition (SQL's inner, LEFT and
//! CROSS joins). Equalities between a column of each side are hashed (the right side is
//! bucketed by key, so `features JOIN layers USING (layer)` costs one lookup per left row);
//! the whole condition is then checked on each candidate pair with SQL's three-valued logic.

use lql_grammar::{Expr, ExprKind};

use super::datum::Datum;
use super::select::table;
use super::{columns_of, rowexec, Cx};
use crate::error::{Error, Result};
use crate::rows::Column;
use crate::value::Value;

/// The value a join key hashes as: numbers that are equal (`1` and `1.0`) hash alike.
fn join_key(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::Int(i) => Some(format!("n{i}")),
        Value::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Some(format!("n{}", *f as i64)),
        Value::Float(f) => Some(format!("f{f:e}")),
        Value::Bool(b) => Some(format!("n{}", *b as i64)),
        Value::Text(t) => Some(format!("t{t}")),
        Value::List(_) => None,
    }
}

/// The `(left column, right column)` pairs of `on`'s top-level equalities between a
/// column of each side: the join's hash keys.
fn equi_keys(on: &Expr, cols: &[Column], left_n: usize) -> Vec<(usize, usize)> {
    let index = |e: &Expr| match &e.kind {
        ExprKind::Column(c) => cols
            .iter()
            .position(|d| d.name.eq_ignore_ascii_case(&c.name)),
        _ => None,
    };
    let mut keys = Vec::new();
    for c in on.conjuncts() {
        if let ExprKind::Compare {
            op: lql_grammar::CmpOp::Eq,
            left,
            right,
        } = &c.kind
        {
            match (index(left), index(right)) {
                (Some(a), Some(b)) if a < left_n && b >= left_n => keys.push((a, b - left_n)),
                (Some(a), Some(b)) if b < left_n && a >= left_n => keys.push((b, a - left_n)),
                _ => {}
            }
        }
    }
    keys
}

/// Most values (rows × columns) a join materialises: rows are not streamed yet, so a join
/// beyond this (about 640 MB of values) is refused rather than allowed to exhaust memory.
pub(crate) const MAX_JOIN_CELLS: usize = 20_000_000;

/// `Join`: every pair of rows for which `on` holds (hashed on its column equalities, the
/// whole condition checked on each candidate pair); a LEFT join keeps each unmatched left
/// row once with NULLs on the right.
pub(crate) fn join(
    cx: &mut Cx<'_>,
    inputs: Vec<Datum>,
    kind: lql_grammar::JoinKind,
    on: Option<&Expr>,
    defs: &[lql_planner::ColumnDef],
) -> Result<Datum> {
    let mut it = inputs.into_iter();
    let (Some(l), Some(r), None) = (it.next(), it.next(), it.next()) else {
        return Err(Error::internal("Join takes exactly two inputs"));
    };
    let (lcols, lrows) = table(l, "Join")?;
    let (rcols, rrows) = table(r, "Join")?;
    let columns = columns_of(defs);
    if columns.len() != lcols.len() + rcols.len() {
        return Err(Error::internal(
            "the join's columns do not match its inputs",
        ));
    }
    let left_n = lcols.len();
    let keys = on.map_or_else(Vec::new, |e| equi_keys(e, &columns, left_n));
    // Right rows by key (all of them, in order, when the join has no equality to hash).
    let mut buckets: std::collections::HashMap<Vec<String>, Vec<usize>> = Default::default();
    if !keys.is_empty() {
        for (i, r) in rrows.iter().enumerate() {
            let k: Option<Vec<String>> = keys.iter().map(|&(_, b)| join_key(&r[b])).collect();
            if let Some(k) = k {
                buckets.entry(k).or_default().push(i);
            }
        }
    }
    let all: Vec<usize> = if keys.is_empty() {
        (0..rrows.len()).collect()
    } else {
        Vec::new()
    };
    let mut out = Vec::new();
    let mut row = Vec::with_capacity(columns.len());
    for (n, lr) in lrows.iter().enumerate() {
        if n % 1024 == 0 {
            cx.check_cancel()?;
        }
        let candidates: &[usize] = if keys.is_empty() {
            &all
        } else {
            let k: Option<Vec<String>> = keys.iter().map(|&(a, _)| join_key(&lr[a])).collect();
            match k.and_then(|k| buckets.get(&k)) {
                Some(v) => v,
                None => &[],
            }
        };
        let mut matched = false;
        for &ri in candidates {
            row.clear();
            row.extend_from_slice(lr);
            row.extend_from_slice(&rrows[ri]);
            let keep = match on {
                None => true,
                Some(e) => rowexec::eval(e, &columns, &row)? == Value::Bool(true),
            };
            if keep {
                matched = true;
                if (out.len() + 1) * columns.len().max(1) > MAX_JOIN_CELLS {
                    return Err(Error::semantic(format!(
                        "the join yields more than {} rows of {} columns; narrow it with ON, or join subqueries that keep fewer rows",
                        out.len(),
                        columns.len()
                    ))
                    .with_code(crate::Code::TooLarge));
                }
                out.push(row.clone());
            }
        }
        if !matched && kind == lql_grammar::JoinKind::Left {
            let mut r = lr.clone();
            r.resize(columns.len(), Value::Null);
            out.push(r);
        }
    }
    Ok(Datum::Table { columns, rows: out })
}
