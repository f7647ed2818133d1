//! Static types of WHERE expressions, checked by the binder against a table's columns
//! (so a type error carries the span of the sub-expression at fault and nothing runs).

use lql_grammar::{AggFunc, ArithOp, CastType, Expr, ExprKind, ScalarFunc, Value as Lit};

use std::borrow::Cow;

use crate::error::PlanError;
use crate::logical::{subqueries_in, Subquery};
use crate::schema::{statement_columns, ColumnDef, ColumnType};

type Result<T> = std::result::Result<T, PlanError>;

/// The static type of an expression (`Null` for a bare NULL literal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Int,
    Float,
    Text,
    Bool,
    List,
    Null,
}

impl Ty {
    fn of(t: ColumnType) -> Ty {
        match t {
            ColumnType::Int => Ty::Int,
            ColumnType::Float => Ty::Float,
            ColumnType::Text => Ty::Text,
            ColumnType::Bool => Ty::Bool,
            ColumnType::List | ColumnType::Any => Ty::List,
        }
    }
    fn column(self) -> ColumnType {
        match self {
            Ty::Int => ColumnType::Int,
            Ty::Float => ColumnType::Float,
            Ty::Text => ColumnType::Text,
            Ty::Bool => ColumnType::Bool,
            Ty::List => ColumnType::List,
            Ty::Null => ColumnType::Any,
        }
    }
    fn is_num(self) -> bool {
        matches!(self, Ty::Int | Ty::Float)
    }
    fn name(self) -> &'static str {
        match self {
            Ty::Int | Ty::Float => "a number",
            Ty::Text => "text",
            Ty::Bool => "a boolean",
            Ty::List => "a list",
            Ty::Null => "NULL",
        }
    }
    fn compatible(self, other: Ty) -> bool {
        self == Ty::Null
            || other == Ty::Null
            || (self.is_num() && other.is_num())
            || (self == other && self != Ty::List)
    }
}

/// The column type of a select-list expression over `cols` (checked like WHERE).
pub fn expr_type(e: &Expr, cols: &[ColumnDef]) -> Result<ColumnType> {
    Ok(type_of(e, cols)?.column())
}

/// `e` as the type checks read it: each subquery bound in `bound` stands as a value of its
/// column's type (an IN subquery as an IN list of one such value), so a subquery's type is
/// checked with its statement, before anything runs. A subquery of list or mixed type stays
/// as it is (unknown).
pub(crate) fn with_subquery_types<'e>(e: &'e Expr, bound: &[Subquery]) -> Cow<'e, Expr> {
    if bound.is_empty() || subqueries_in(e).is_empty() {
        return Cow::Borrowed(e);
    }
    Cow::Owned(stand_in(e, bound))
}

fn stand_in(e: &Expr, bound: &[Subquery]) -> Expr {
    let value = |at: &Expr| -> Option<Expr> {
        let q = bound.iter().find(|q| q.span == at.span)?;
        let lit = match statement_columns(&q.plan).first()?.ty {
            ColumnType::Int => Lit::Int(0),
            ColumnType::Float => Lit::Float(0.0),
            ColumnType::Text => Lit::String(String::new()),
            ColumnType::Bool => Lit::Bool(false),
            ColumnType::List | ColumnType::Any => return None,
        };
        Some(Expr {
            kind: ExprKind::Literal(lit),
            span: at.span,
        })
    };
    let kind = match (&e.kind, value(e)) {
        (ExprKind::Subquery(_), Some(v)) => return v,
        (ExprKind::InSubquery { expr, negated, .. }, Some(v)) => ExprKind::InList {
            expr: Box::new(stand_in(expr, bound)),
            list: vec![v],
            negated: *negated,
        },
        (other, _) => other.map_children(&mut |x| stand_in(x, bound)),
    };
    Expr { kind, span: e.span }
}

fn column_index(cols: &[ColumnDef], name: &str, e: &Expr) -> Result<usize> {
    cols.iter()
        .position(|c| c.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| PlanError::unknown_column(format!("unknown column `{name}`"), e.span))
}

fn mismatch(e: &Expr, msg: String) -> PlanError {
    PlanError::wrong_type(format!("type mismatch: {msg}"), e.span)
}

/// Checks `e` against the columns; a WHERE clause must be boolean.
pub fn check_predicate(e: &Expr, cols: &[ColumnDef]) -> Result<()> {
    match type_of(e, cols)? {
        Ty::Bool | Ty::Null => Ok(()),
        t => Err(mismatch(
            e,
            format!("WHERE needs a boolean condition, this is {}", t.name()),
        )),
    }
}

fn type_of(e: &Expr, cols: &[ColumnDef]) -> Result<Ty> {
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
            Lit::Int(_) => Ty::Int,
            Lit::Float(_) => Ty::Float,
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
            if !(a.is_num() || matches!(a, Ty::Text | Ty::Null)) {
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
        ExprKind::Arith {
            op: ArithOp::Concat,
            left,
            right,
        } => {
            for x in [left, right] {
                if type_of(x, cols)? == Ty::List {
                    return Err(mismatch(
                        x,
                        "`||` needs text or numbers, found a list".into(),
                    ));
                }
            }
            Ty::Text
        }
        ExprKind::Arith { op, left, right } => {
            let (a, b) = (type_of(left, cols)?, type_of(right, cols)?);
            for (t, x) in [(a, left), (b, right)] {
                if !(t.is_num() || t == Ty::Null) {
                    return Err(mismatch(
                        x,
                        format!("`{}` needs numbers, found {}", op.symbol(), t.name()),
                    ));
                }
            }
            match (a, b) {
                (Ty::Null, _) | (_, Ty::Null) => Ty::Null,
                (Ty::Int, Ty::Int) => Ty::Int,
                _ => Ty::Float,
            }
        }
        ExprKind::Neg(x) => {
            let t = type_of(x, cols)?;
            if !(t.is_num() || t == Ty::Null) {
                return Err(mismatch(
                    x,
                    format!("`-` needs a number, found {}", t.name()),
                ));
            }
            t
        }
        ExprKind::Aggregate { func, arg, .. } => {
            let t = match arg {
                Some(a) => type_of(a, cols)?,
                None => return Ok(Ty::Int),
            };
            let num = |what: &str| -> Result<()> {
                if t.is_num() || t == Ty::Null {
                    Ok(())
                } else {
                    Err(mismatch(
                        e,
                        format!("{what}() needs numbers, found {}", t.name()),
                    ))
                }
            };
            match func {
                AggFunc::Count => Ty::Int,
                AggFunc::Sum => {
                    num("sum")?;
                    if t == Ty::Int {
                        Ty::Int
                    } else {
                        Ty::Float
                    }
                }
                AggFunc::Avg => {
                    num("avg")?;
                    Ty::Float
                }
                AggFunc::Min | AggFunc::Max => {
                    if t == Ty::List {
                        return Err(mismatch(e, format!("{}() cannot order lists", func.name())));
                    }
                    t
                }
            }
        }
        ExprKind::Call { func, args } => call_type(e, *func, args, cols)?,
        ExprKind::Case {
            operand,
            whens,
            otherwise,
        } => {
            let op = operand.as_deref().map(|o| type_of(o, cols)).transpose()?;
            let mut out = Ty::Null;
            for (w, t) in whens {
                match op {
                    Some(a) => {
                        let b = type_of(w, cols)?;
                        if a == Ty::List || !a.compatible(b) {
                            return Err(mismatch(
                                w,
                                format!("CASE compares {} with {}", a.name(), b.name()),
                            ));
                        }
                    }
                    None => need(w, Ty::Bool, "WHEN")?,
                }
                out = common(out, type_of(t, cols)?, t, "CASE results")?;
            }
            if let Some(o) = otherwise {
                out = common(out, type_of(o, cols)?, o, "CASE results")?;
            }
            out
        }
        ExprKind::Cast { expr, to } => {
            if type_of(expr, cols)? == Ty::List {
                return Err(mismatch(expr, "CAST cannot convert a list".into()));
            }
            match to {
                CastType::Integer => Ty::Int,
                CastType::Real => Ty::Float,
                CastType::Text => Ty::Text,
            }
        }
        ExprKind::InSubquery { expr, .. } => {
            if type_of(expr, cols)? == Ty::List {
                return Err(mismatch(
                    expr,
                    "IN needs a single value, found a list".into(),
                ));
            }
            Ty::Bool
        }
        // Its column's type is the subquery's own (checked when it is bound); here unknown.
        ExprKind::Subquery(_) => Ty::Null,
    })
}

/// The type two branches share: numbers widen to float, NULL takes the other's type.
fn common(a: Ty, b: Ty, at: &Expr, what: &str) -> Result<Ty> {
    Ok(match (a, b) {
        (Ty::Null, t) | (t, Ty::Null) => t,
        (x, y) if x == y => x,
        (x, y) if x.is_num() && y.is_num() => Ty::Float,
        (x, y) => {
            return Err(mismatch(
                at,
                format!("{what} mix {} and {}", x.name(), y.name()),
            ))
        }
    })
}

/// A scalar function's result type from its arguments' (SQLite's functions, typed).
fn call_type(e: &Expr, func: ScalarFunc, args: &[Expr], cols: &[ColumnDef]) -> Result<Ty> {
    let tys = args
        .iter()
        .map(|a| type_of(a, cols))
        .collect::<Result<Vec<_>>>()?;
    for (t, a) in tys.iter().zip(args) {
        if *t == Ty::List {
            return Err(mismatch(
                a,
                format!("{}() takes single values, found a list", func.name()),
            ));
        }
    }
    let want = |i: usize, ok: fn(Ty) -> bool, what: &str| -> Result<()> {
        match tys.get(i) {
            Some(t) if !ok(*t) && *t != Ty::Null => Err(mismatch(
                &args[i],
                format!("{}() needs {what}, found {}", func.name(), t.name()),
            )),
            _ => Ok(()),
        }
    };
    let num = |t: Ty| t.is_num();
    let text = |t: Ty| t == Ty::Text;
    Ok(match func {
        ScalarFunc::Abs => {
            want(0, num, "a number")?;
            tys[0]
        }
        ScalarFunc::Round => {
            want(0, num, "a number")?;
            want(1, |t| t == Ty::Int, "a whole number of digits")?;
            Ty::Float
        }
        ScalarFunc::Lower
        | ScalarFunc::Upper
        | ScalarFunc::Trim
        | ScalarFunc::Ltrim
        | ScalarFunc::Rtrim => {
            want(0, text, "text")?;
            want(1, text, "text")?;
            Ty::Text
        }
        ScalarFunc::Length => Ty::Int,
        ScalarFunc::Substr => {
            want(0, text, "text")?;
            want(1, |t| t == Ty::Int, "a whole-number position")?;
            want(2, |t| t == Ty::Int, "a whole-number length")?;
            Ty::Text
        }
        ScalarFunc::Replace => {
            for i in 0..3 {
                want(i, text, "text")?;
            }
            Ty::Text
        }
        ScalarFunc::Instr => {
            want(0, text, "text")?;
            want(1, text, "text")?;
            Ty::Int
        }
        ScalarFunc::Nullif => tys[0],
        ScalarFunc::Coalesce | ScalarFunc::Ifnull | ScalarFunc::Min | ScalarFunc::Max => {
            let mut out = Ty::Null;
            for (t, a) in tys.iter().zip(args) {
                out = common(out, *t, a, &format!("{}() arguments", func.name()))?;
            }
            let _ = e;
            out
        }
    })
}
