//! Expression building: OR/AND chains (flat), NOT prefixes, predicates; with a depth
//! limit so no input can build a tree deep enough to overflow the stack.

use super::{float, ident, integer, internal, last_child, span, string, Result, Rule};
use crate::ast::*;
use crate::error::SyntaxError;
use pest::iterators::Pair;

/// Deepest expression tree accepted (NOT chains and parentheses count).
const MAX_EXPR_DEPTH: usize = 128;

fn too_deep(sp: Span) -> SyntaxError {
    SyntaxError::new(
        format!("expression nested too deeply (more than {MAX_EXPR_DEPTH} levels)"),
        sp,
    )
}

pub(super) fn literal(p: Pair<Rule>) -> Result<Spanned<Value>> {
    let sp = span(&p);
    let v = last_child(p)?;
    let value = match v.as_rule() {
        Rule::string => Value::String(string(v)?.value),
        Rule::number => {
            let t = v.as_str();
            if t.contains(['.', 'e', 'E']) {
                Value::Float(float(v)?.value)
            } else {
                Value::Int(integer(v)?.value)
            }
        }
        Rule::kw_true => Value::Bool(true),
        Rule::kw_false => Value::Bool(false),
        Rule::kw_null => Value::Null,
        _ => return Err(internal(&v)),
    };
    Ok(Spanned::new(value, sp))
}

pub(super) fn expr(p: Pair<Rule>, depth: usize) -> Result<Expr> {
    let sp = span(&p);
    if depth > MAX_EXPR_DEPTH {
        return Err(too_deep(sp));
    }
    match p.as_rule() {
        Rule::expr => expr(last_child(p)?, depth),
        Rule::or_expr | Rule::and_expr => {
            let is_or = p.as_rule() == Rule::or_expr;
            let mut parts = Vec::new();
            for q in p.into_inner() {
                if matches!(q.as_rule(), Rule::and_expr | Rule::not_expr) {
                    parts.push(expr(q, depth + 1)?);
                }
            }
            if parts.len() == 1 {
                return parts.pop().ok_or_else(|| too_deep(sp));
            }
            let kind = if is_or {
                ExprKind::Or(parts)
            } else {
                ExprKind::And(parts)
            };
            Ok(Expr { kind, span: sp })
        }
        Rule::not_expr => {
            let mut nots = Vec::new();
            let mut pred = None;
            for q in p.into_inner() {
                match q.as_rule() {
                    Rule::kw_not => nots.push(span(&q).start),
                    Rule::predicate => pred = Some(q),
                    _ => return Err(internal(&q)),
                }
            }
            if depth + nots.len() > MAX_EXPR_DEPTH {
                return Err(too_deep(sp));
            }
            let pred = pred.ok_or_else(|| SyntaxError::new("expected an expression", sp))?;
            let mut e = expr(pred, depth + nots.len() + 1)?;
            for start in nots.into_iter().rev() {
                let s = Span::new(start, e.span.end);
                e = Expr {
                    kind: ExprKind::Not(Box::new(e)),
                    span: s,
                };
            }
            Ok(e)
        }
        Rule::sum_expr | Rule::product | Rule::concat => {
            let mut it = p.into_inner();
            let first = it
                .next()
                .ok_or_else(|| SyntaxError::new("expected an expression", sp))?;
            let mut left = expr(first, depth + 1)?;
            while let Some(op) = it.next() {
                let op = match op.as_str() {
                    "+" => ArithOp::Add,
                    "-" => ArithOp::Sub,
                    "*" => ArithOp::Mul,
                    "/" => ArithOp::Div,
                    "||" => ArithOp::Concat,
                    _ => ArithOp::Rem,
                };
                let right = it
                    .next()
                    .ok_or_else(|| SyntaxError::new("expected an operand", sp))?;
                let right = expr(right, depth + 1)?;
                let s = left.span.to(right.span);
                left = Expr {
                    kind: ExprKind::Arith {
                        op,
                        left: Box::new(left),
                        right: Box::new(right),
                    },
                    span: s,
                };
            }
            Ok(left)
        }
        Rule::unary => {
            let mut neg = false;
            let mut operand = None;
            for q in p.into_inner() {
                match q.as_rule() {
                    Rule::neg => neg = true,
                    _ => operand = Some(q),
                }
            }
            let operand = operand.ok_or_else(|| SyntaxError::new("expected an operand", sp))?;
            let e = expr(operand, depth + 1)?;
            Ok(if neg {
                Expr {
                    kind: ExprKind::Neg(Box::new(e)),
                    span: sp,
                }
            } else {
                e
            })
        }
        Rule::call => call(p, depth),
        Rule::predicate => {
            let mut it = p.into_inner();
            let first = it
                .next()
                .ok_or_else(|| SyntaxError::new("expected an expression", sp))?;
            let left = expr(first, depth + 1)?;
            match it.next() {
                None => Ok(left),
                Some(tail) => predicate_tail(left, tail, sp, depth),
            }
        }
        Rule::operand => {
            let inner = p
                .into_inner()
                .find(|q| !matches!(q.as_rule(), Rule::lparen | Rule::rparen))
                .ok_or_else(|| SyntaxError::new("expected an operand", sp))?;
            match inner.as_rule() {
                Rule::literal => {
                    let l = literal(inner)?;
                    Ok(Expr {
                        kind: ExprKind::Literal(l.value),
                        span: l.span,
                    })
                }
                Rule::ident => {
                    let id = ident(inner);
                    Ok(Expr {
                        span: id.span,
                        kind: ExprKind::Column(id),
                    })
                }
                Rule::qualified => {
                    let id = Ident {
                        name: inner.as_str().to_string(),
                        span: span(&inner),
                    };
                    Ok(Expr {
                        span: id.span,
                        kind: ExprKind::Column(id),
                    })
                }
                Rule::expr => expr(inner, depth + 1),
                Rule::call => call(inner, depth + 1),
                Rule::case_expr => case(inner, depth + 1),
                Rule::cast_expr => cast(inner, depth + 1),
                Rule::select_stmt => Ok(Expr {
                    kind: ExprKind::Subquery(Box::new(super::select(inner)?)),
                    span: sp,
                }),
                _ => Err(internal(&inner)),
            }
        }
        _ => Err(internal(&p)),
    }
}

fn predicate_tail(left: Expr, tail: Pair<Rule>, sp: Span, depth: usize) -> Result<Expr> {
    let rule = tail.as_rule();
    let mut negated = false;
    let mut op = None;
    let mut operands = Vec::new();
    for q in tail.into_inner() {
        match q.as_rule() {
            Rule::kw_not => negated = true,
            Rule::cmp_op => {
                op = Some(match q.as_str() {
                    "=" => CmpOp::Eq,
                    "!=" | "<>" => CmpOp::NotEq,
                    "<" => CmpOp::Lt,
                    "<=" => CmpOp::LtEq,
                    ">" => CmpOp::Gt,
                    _ => CmpOp::GtEq,
                })
            }
            Rule::operand | Rule::sum_expr => operands.push(expr(q, depth + 1)?),
            Rule::select_stmt => {
                return Ok(Expr {
                    kind: ExprKind::InSubquery {
                        expr: Box::new(left),
                        query: Box::new(super::select(q)?),
                        negated,
                    },
                    span: sp,
                })
            }
            _ => {}
        }
    }
    let left = Box::new(left);
    let missing = || SyntaxError::new("expected an operand", sp);
    let kind = match rule {
        Rule::cmp_tail => ExprKind::Compare {
            op: op.ok_or_else(missing)?,
            left,
            right: Box::new(operands.pop().ok_or_else(missing)?),
        },
        Rule::like_tail => ExprKind::Like {
            expr: left,
            pattern: Box::new(operands.pop().ok_or_else(missing)?),
            negated,
        },
        Rule::in_tail => ExprKind::InList {
            expr: left,
            list: operands,
            negated,
        },
        Rule::between_tail => {
            let high = operands.pop().ok_or_else(missing)?;
            let low = operands.pop().ok_or_else(missing)?;
            ExprKind::Between {
                expr: left,
                low: Box::new(low),
                high: Box::new(high),
                negated,
            }
        }
        Rule::is_null_tail => ExprKind::IsNull {
            expr: left,
            negated,
        },
        _ => return Err(SyntaxError::new("internal parser error: bad predicate", sp)),
    };
    Ok(Expr { kind, span: sp })
}

/// `name(*)`, `name(expr)`, `name(DISTINCT expr)`: an aggregate call; `name(a, b, …)`: a
/// scalar function (`min`/`max` with two or more arguments are the scalar ones, as in SQLite).
fn call(p: Pair<Rule>, depth: usize) -> Result<Expr> {
    let sp = span(&p);
    let mut name = None;
    let mut args = Vec::new();
    let mut star = false;
    let mut distinct = false;
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::word => name = Some(q),
            Rule::star => star = true,
            Rule::distinct => distinct = true,
            Rule::expr => args.push(expr(q, depth + 1)?),
            _ => {}
        }
    }
    let name = name.ok_or_else(|| SyntaxError::new("expected a function name", sp))?;
    let lower = name.as_str().to_ascii_lowercase();
    let agg = AggFunc::ALL.iter().find(|f| f.name() == lower).copied();
    let scalar = ScalarFunc::ALL.iter().find(|f| f.name() == lower).copied();
    if let Some(func) = agg.filter(|_| star || distinct || args.len() == 1 || scalar.is_none()) {
        if star && func != AggFunc::Count {
            return Err(SyntaxError::new(
                format!(
                    "{}(*) is not a function; only count(*) takes `*`",
                    func.name()
                ),
                sp,
            )
            .with_help(format!("write {}(column)", func.name())));
        }
        if args.len() > 1 {
            return Err(SyntaxError::new(
                format!("{}() takes one argument, got {}", func.name(), args.len()),
                sp,
            ));
        }
        if !star && args.is_empty() {
            return Err(
                SyntaxError::new(format!("{}() needs an argument", func.name()), sp).with_help(
                    if func == AggFunc::Count {
                        "write count(*) to count rows".to_string()
                    } else {
                        format!("write {}(column)", func.name())
                    },
                ),
            );
        }
        return Ok(Expr {
            kind: ExprKind::Aggregate {
                func,
                arg: args.pop().map(Box::new),
                distinct,
            },
            span: sp,
        });
    }
    let names: Vec<(&str, ScalarFunc)> = ScalarFunc::ALL.iter().map(|f| (f.name(), *f)).collect();
    let func = match scalar {
        Some(f) => f,
        None => {
            let mut all: Vec<(&str, ScalarFunc)> = names.clone();
            // Offer the aggregates' names too in "did you mean".
            all.extend(AggFunc::ALL.iter().map(|a| (a.name(), ScalarFunc::Abs)));
            super::choose(&name, "function", &all)?;
            return Err(SyntaxError::new("unknown function", sp));
        }
    };
    if star || distinct {
        return Err(SyntaxError::new(
            format!(
                "{}() is not an aggregate: it takes no `*` or DISTINCT",
                func.name()
            ),
            sp,
        ));
    }
    let (lo, hi) = func.arity();
    if args.len() < lo || hi.is_some_and(|h| args.len() > h) {
        let want = match hi {
            Some(h) if h == lo => format!("{lo}"),
            Some(h) => format!("{lo} to {h}"),
            None => format!("at least {lo}"),
        };
        return Err(SyntaxError::new(
            format!(
                "{}() takes {want} arguments, got {}",
                func.name(),
                args.len()
            ),
            sp,
        ));
    }
    Ok(Expr {
        kind: ExprKind::Call { func, args },
        span: sp,
    })
}

/// `CASE [operand] WHEN a THEN b … [ELSE c] END`.
fn case(p: Pair<Rule>, depth: usize) -> Result<Expr> {
    let sp = span(&p);
    let mut operand = None;
    let mut whens = Vec::new();
    let mut otherwise = None;
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::case_operand => {
                let e = q
                    .into_inner()
                    .next()
                    .ok_or_else(|| SyntaxError::new("expected an expression", sp))?;
                operand = Some(Box::new(expr(e, depth + 1)?));
            }
            Rule::case_when => {
                let mut it = q.into_inner().filter(|x| x.as_rule() == Rule::expr);
                let (Some(w), Some(t)) = (it.next(), it.next()) else {
                    return Err(SyntaxError::new("expected WHEN … THEN …", sp));
                };
                whens.push((expr(w, depth + 1)?, expr(t, depth + 1)?));
            }
            Rule::case_else => {
                let e = q
                    .into_inner()
                    .find(|x| x.as_rule() == Rule::expr)
                    .ok_or_else(|| SyntaxError::new("expected an expression after ELSE", sp))?;
                otherwise = Some(Box::new(expr(e, depth + 1)?));
            }
            _ => {}
        }
    }
    Ok(Expr {
        kind: ExprKind::Case {
            operand,
            whens,
            otherwise,
        },
        span: sp,
    })
}

/// `CAST(x AS INTEGER|INT|REAL|FLOAT|DOUBLE|TEXT)`.
fn cast(p: Pair<Rule>, depth: usize) -> Result<Expr> {
    let sp = span(&p);
    let mut e = None;
    let mut to = None;
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::expr => e = Some(Box::new(expr(q, depth + 1)?)),
            Rule::word => {
                to = Some(
                    super::choose(
                        &q,
                        "type",
                        &[
                            ("integer", CastType::Integer),
                            ("int", CastType::Integer),
                            ("real", CastType::Real),
                            ("float", CastType::Real),
                            ("double", CastType::Real),
                            ("text", CastType::Text),
                        ],
                    )?
                    .value,
                )
            }
            _ => {}
        }
    }
    let (Some(expr), Some(to)) = (e, to) else {
        return Err(SyntaxError::new("expected CAST(expression AS type)", sp));
    };
    Ok(Expr {
        kind: ExprKind::Cast { expr, to },
        span: sp,
    })
}
