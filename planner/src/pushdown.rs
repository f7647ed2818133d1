//! The planner's pushdown rule: which layers and features of a table scan a WHERE clause
//! can possibly match, so the scan reads only those. The full filter still runs after the
//! scan; a domain is a superset of the matching values.

use lql_grammar::{CmpOp, Expr, ExprKind, Value as Lit};

/// Nodes in an expression (every column, literal and operator).
pub fn expr_size(e: &Expr) -> usize {
    1 + match &e.kind {
        ExprKind::Column(_) | ExprKind::Literal(_) => 0,
        ExprKind::Compare { left, right, .. } => expr_size(left) + expr_size(right),
        ExprKind::Like { expr, pattern, .. } => expr_size(expr) + expr_size(pattern),
        ExprKind::InList { expr, list, .. } => {
            expr_size(expr) + list.iter().map(expr_size).sum::<usize>()
        }
        ExprKind::Between {
            expr, low, high, ..
        } => expr_size(expr) + expr_size(low) + expr_size(high),
        ExprKind::IsNull { expr, .. } | ExprKind::Not(expr) => expr_size(expr),
        ExprKind::And(xs) | ExprKind::Or(xs) => xs.iter().map(expr_size).sum(),
        ExprKind::Arith { left, right, .. } => expr_size(left) + expr_size(right),
        ExprKind::Neg(x) => expr_size(x),
        ExprKind::Aggregate { arg, .. } => arg.as_deref().map_or(0, expr_size),
        ExprKind::Call { args, .. } => args.iter().map(expr_size).sum(),
        ExprKind::Case {
            operand,
            whens,
            otherwise,
        } => {
            operand.as_deref().map_or(0, expr_size)
                + whens
                    .iter()
                    .map(|(w, t)| expr_size(w) + expr_size(t))
                    .sum::<usize>()
                + otherwise.as_deref().map_or(0, expr_size)
        }
        ExprKind::Cast { expr, .. } | ExprKind::InSubquery { expr, .. } => expr_size(expr),
        ExprKind::Subquery(_) => 0,
    }
}

/// Column names an expression reads.
pub fn columns_in(e: &Expr, out: &mut Vec<String>) {
    e.walk(&mut |x| {
        if let ExprKind::Column(c) = &x.kind {
            out.push(c.name.to_ascii_lowercase())
        }
    });
}

/// The text `col` must equal for `e` to hold, from a top-level conjunct `col = 'text'`
/// (or `'text' = col`); `None` when no such conjunct exists.
pub fn text_equal(e: &Expr, col: &str) -> Option<String> {
    let conjuncts = e.conjuncts();
    let is_col =
        |x: &Expr| matches!(&x.kind, ExprKind::Column(c) if c.name.eq_ignore_ascii_case(col));
    let text = |x: &Expr| match &x.kind {
        ExprKind::Literal(Lit::String(s)) => Some(s.clone()),
        _ => None,
    };
    conjuncts.into_iter().find_map(|c| match &c.kind {
        ExprKind::Compare {
            op: CmpOp::Eq,
            left,
            right,
        } if is_col(left) => text(right),
        ExprKind::Compare {
            op: CmpOp::Eq,
            left,
            right,
        } if is_col(right) => text(left),
        _ => None,
    })
}

/// The set of integer values of column `col` that can satisfy `e`, as far as its top-level
/// conjuncts say (`col = n`, `col IN (…)`, `col BETWEEN a AND b`, `col <,<=,>,>= n`);
/// `None` when unconstrained. The full filter still runs afterwards, so this only needs to
/// be a superset of the matching values.
pub fn int_domain(e: &Expr, col: &str, lo: i64, hi: i64) -> Option<Vec<i64>> {
    let conjuncts = e.conjuncts();
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
}
