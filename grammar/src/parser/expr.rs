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
        Rule::sum_expr | Rule::product => {
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
                Rule::expr => expr(inner, depth + 1),
                Rule::call => call(inner, depth + 1),
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

/// `name(*)`, `name(expr)`, `name(DISTINCT expr)`: an aggregate call.
fn call(p: Pair<Rule>, depth: usize) -> Result<Expr> {
    let sp = span(&p);
    let mut func = None;
    let mut arg = None;
    let mut star = false;
    let mut distinct = false;
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::word => {
                let names: Vec<(&str, AggFunc)> =
                    AggFunc::ALL.iter().map(|f| (f.name(), *f)).collect();
                func = Some(super::choose(&q, "function", &names)?.value);
            }
            Rule::star => star = true,
            Rule::distinct => distinct = true,
            Rule::expr => arg = Some(Box::new(expr(q, depth + 1)?)),
            _ => {}
        }
    }
    let func = func.ok_or_else(|| SyntaxError::new("expected a function name", sp))?;
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
    Ok(Expr {
        kind: ExprKind::Aggregate {
            func,
            arg,
            distinct,
        },
        span: sp,
    })
}
