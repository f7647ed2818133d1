//! SELECT's FROM: model tables, statements (in parentheses, or as table functions such as
//! `TRACE('…', FOR => ' Paris')`) and joins, built into a [`FromItem`] tree (joins nest to
//! the left, as SQL reads them).

use super::{expr, ident, internal, span, statement, string, table, Result, Rule};
use crate::ast::*;
use crate::error::SyntaxError;
use pest::iterators::Pair;

/// Most relations one FROM joins (a bound on the binder's and executor's work per statement).
pub const MAX_JOINED_RELATIONS: usize = 64;

/// `FROM a, b JOIN c …`: the items joined left to right (a comma is a CROSS JOIN).
pub(super) fn from_clause(p: Pair<Rule>) -> Result<FromItem> {
    let sp = span(&p);
    let relations = p
        .clone()
        .into_inner()
        .flat_map(|i| i.into_inner())
        .filter(|q| matches!(q.as_rule(), Rule::from_primary | Rule::join_part))
        .count();
    if relations > MAX_JOINED_RELATIONS {
        return Err(SyntaxError::new(
            format!("FROM joins {relations} relations; at most {MAX_JOINED_RELATIONS} are allowed"),
            sp,
        ));
    }
    let mut acc: Option<FromItem> = None;
    for q in p.into_inner() {
        if q.as_rule() != Rule::from_item {
            continue;
        }
        let item = from_item(q)?;
        acc = Some(match acc {
            None => item,
            Some(left) => join(left, item, JoinKind::Cross, None, Vec::new()),
        });
    }
    acc.ok_or_else(|| SyntaxError::new("expected a table after FROM", Span::default()))
}

fn join(
    left: FromItem,
    right: FromItem,
    kind: JoinKind,
    on: Option<Expr>,
    using: Vec<Ident>,
) -> FromItem {
    let span = left.span().to(right.span());
    FromItem::Join {
        left: Box::new(left),
        right: Box::new(right),
        kind,
        on,
        using,
        span,
    }
}

fn from_item(p: Pair<Rule>) -> Result<FromItem> {
    let mut acc: Option<FromItem> = None;
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::from_primary => acc = Some(from_primary(q)?),
            Rule::join_part => {
                let sp = span(&q);
                let left = acc.take().ok_or_else(|| internal(&q))?;
                let mut kind = JoinKind::Inner;
                let mut right = None;
                let (mut on, mut using) = (None, Vec::new());
                for r in q.into_inner() {
                    match r.as_rule() {
                        Rule::join_kind => {
                            kind = match r.into_inner().next().map(|k| k.as_rule()) {
                                Some(Rule::kw_left) => JoinKind::Left,
                                Some(Rule::kw_cross) => JoinKind::Cross,
                                _ => JoinKind::Inner,
                            }
                        }
                        Rule::kw_join => {}
                        Rule::from_primary => right = Some(from_primary(r)?),
                        Rule::join_cond => {
                            for c in r.into_inner() {
                                match c.as_rule() {
                                    Rule::expr => on = Some(expr(c, 0)?),
                                    Rule::ident => using.push(ident(c)),
                                    _ => {}
                                }
                            }
                        }
                        _ => return Err(internal(&r)),
                    }
                }
                let right =
                    right.ok_or_else(|| SyntaxError::new("expected a table after JOIN", sp))?;
                if kind == JoinKind::Cross && (on.is_some() || !using.is_empty()) {
                    return Err(SyntaxError::new("a CROSS JOIN takes no ON or USING", sp)
                        .with_help("write JOIN … ON … for a join on a condition"));
                }
                if kind != JoinKind::Cross && on.is_none() && using.is_empty() {
                    return Err(SyntaxError::new(
                        "JOIN needs ON <condition> or USING (columns)",
                        sp,
                    )
                    .with_help("write CROSS JOIN for every pair of rows"));
                }
                acc = Some(join(left, right, kind, on, using));
            }
            _ => return Err(internal(&q)),
        }
    }
    acc.ok_or_else(|| SyntaxError::new("expected a table", Span::default()))
}

fn from_primary(p: Pair<Rule>) -> Result<FromItem> {
    let sp = span(&p);
    let mut source = None;
    let mut alias = None;
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::table_name => {
                let t = table(q)?;
                source = Some(FromItem::Table {
                    table: t,
                    alias: None,
                })
            }
            Rule::explainable => {
                let statement = Box::new(statement(q)?);
                source = Some(FromItem::Statement {
                    statement,
                    alias: None,
                    span: sp,
                })
            }
            Rule::table_fn => {
                source = Some(FromItem::Statement {
                    statement: Box::new(table_fn(q)?),
                    alias: None,
                    span: sp,
                })
            }
            Rule::ident => alias = Some(ident(q)),
            Rule::lparen | Rule::rparen | Rule::kw_as => {}
            _ => return Err(internal(&q)),
        }
    }
    Ok(
        match source.ok_or_else(|| SyntaxError::new("expected a table", sp))? {
            FromItem::Table { table, .. } => FromItem::Table { table, alias },
            FromItem::Statement {
                statement, span, ..
            } => FromItem::Statement {
                statement,
                alias,
                span,
            },
            j => j,
        },
    )
}

/// Arguments whose string value is written unquoted in the statement (a range or a word).
const WORD_ARGUMENTS: &[&str] = &["layers", "positions", "mode", "component"];

/// `NAME('text', ARG => value, …)`: the statement `NAME 'text' ARG value …`, parsed by the
/// statement grammar itself (each piece is one literal as written, so nothing can be
/// injected); `FLAG => true` writes the flag alone, `=> false` leaves it out. A span inside
/// a value copied as written is that value's in the call (so a placeholder is found where it
/// stands); every other span of the statement is the call's.
fn table_fn(p: Pair<Rule>) -> Result<Statement> {
    let sp = span(&p);
    let mut text = String::new();
    let mut name = String::new();
    // Values copied as written: (start in `text`, span in the call's source).
    let mut copied: Vec<(usize, Span)> = Vec::new();
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::word => {
                name = q.as_str().to_ascii_uppercase();
                text.push_str(&name);
            }
            Rule::string => {
                text.push(' ');
                copied.push((text.len(), span(&q)));
                text.push_str(q.as_str());
            }
            Rule::fn_arg => {
                let mut it = q.into_inner();
                let (Some(arg), Some(value)) = (it.next(), it.next()) else {
                    return Err(SyntaxError::new("expected NAME => value", sp));
                };
                let arg_name = arg.as_str().to_ascii_lowercase();
                let lit = value
                    .clone()
                    .into_inner()
                    .next()
                    .ok_or_else(|| internal(&value))?;
                match lit.as_rule() {
                    Rule::kw_false => continue,
                    Rule::kw_true => {
                        text.push(' ');
                        text.push_str(arg.as_str());
                        continue;
                    }
                    Rule::string if WORD_ARGUMENTS.contains(&arg_name.as_str()) => {
                        let v = string(lit)?.value;
                        if v.is_empty()
                            || !v
                                .bytes()
                                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                        {
                            return Err(SyntaxError::new(
                                format!(
                                    "{} => needs a word or a layer range such as '0-5', got {v:?}",
                                    arg.as_str()
                                ),
                                span(&value),
                            ));
                        }
                        text.push(' ');
                        text.push_str(arg.as_str());
                        text.push(' ');
                        text.push_str(&v);
                    }
                    _ => {
                        text.push(' ');
                        text.push_str(arg.as_str());
                        text.push(' ');
                        copied.push((text.len(), span(&value)));
                        text.push_str(value.as_str());
                    }
                }
            }
            Rule::lparen | Rule::rparen | Rule::comma => {}
            _ => return Err(internal(&q)),
        }
    }
    let mut stmt = super::parse_with_placeholders(&text).map_err(|e| {
        SyntaxError::new(format!("{name}(…) as a table: {}", e.message), sp).with_help(format!(
            "a table function is a statement with its clauses as NAME => value: {name}('…', TOP => 5); \
             or write the statement in parentheses: FROM ({name} '…' …)"
        ))
    })?;
    // Each end of a span inside a copied value maps into that value in the call; an end
    // outside every value becomes the call's (so a clause `FOR ?` spans from the call's
    // start to its value's end).
    let map = |x: usize, outside: usize| {
        copied
            .iter()
            .find(|(at, from)| x >= *at && x <= at + from.len())
            .map_or(outside, |(at, from)| from.start + (x - at))
    };
    stmt.visit_spans(&mut |s| {
        let start = map(s.start, sp.start);
        *s = Span::new(start, map(s.end, sp.end).max(start));
    });
    Ok(stmt)
}
