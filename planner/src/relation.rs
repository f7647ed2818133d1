//! Binding of SELECT's FROM: model tables, statements (subqueries, statements in
//! parentheses, table functions) and joins, into a [`SelectSource`] and the [`Scope`] its
//! expressions are resolved in.
//!
//! Names: a single source's rows carry its columns' own names; a join's rows carry
//! `relation.column` for every column (the relation is the alias, else the table's name,
//! else `#n` for an unnamed statement), so columns of the same name stay apart. A column is
//! found by `relation.column`, or by its name alone when exactly one relation has it (a
//! USING column is found in the left relation). A statement in FROM must only read the
//! bound model: one that writes, or reads a file named in it, is refused here, so SELECT
//! stays a reading statement for the read-only flags and the HTTP gate.

use lql_grammar::{self as g, ExprKind, FromItem, Ident, JoinKind, Span};

use crate::bind::{unbuilt_table, Binder};
use crate::error::PlanError;
use crate::logical::*;
use crate::schema::{self, ColumnDef};
use crate::typecheck::check_predicate;

type Result<T> = std::result::Result<T, PlanError>;

/// Where one column of a scope came from.
#[derive(Debug, Clone)]
struct Origin {
    /// The relation's name (lower case), if it has one.
    relation: Option<String>,
    /// The column's own name.
    base: String,
    /// Found by its name alone (false for the right side of a USING column).
    unqualified: bool,
    /// Shown by `SELECT *` (false for the right side of a USING column).
    star: bool,
}

/// The columns a SELECT's expressions can name.
#[derive(Debug, Clone)]
pub(crate) struct Scope {
    /// The source's columns under the names its rows carry.
    pub columns: Vec<ColumnDef>,
    origins: Vec<Origin>,
    /// What error messages call the source ("table features", "the join").
    what: String,
}

impl Scope {
    /// One relation's columns, under their own names.
    fn single(columns: Vec<ColumnDef>, relation: Option<String>, what: String) -> Scope {
        let origins = columns
            .iter()
            .map(|c| Origin {
                relation: relation.clone(),
                base: c.name.clone(),
                unqualified: true,
                star: !c.hidden,
            })
            .collect();
        Scope {
            columns,
            origins,
            what,
        }
    }

    /// The columns `SELECT *` shows: (name shown, name in the rows).
    pub fn star(&self) -> Vec<(String, &ColumnDef)> {
        self.origins
            .iter()
            .zip(&self.columns)
            .filter(|(o, _)| o.star)
            .map(|(o, c)| (o.base.clone(), c))
            .collect()
    }

    /// Whether `name` (qualified or not) names a column of this scope.
    pub fn knows(&self, name: &str) -> bool {
        self.find(name).is_ok_and(|v| !v.is_empty())
    }

    /// The columns `name` may mean; `Err` when it names an unknown relation.
    fn find(&self, name: &str) -> std::result::Result<Vec<usize>, String> {
        let lower = name.to_ascii_lowercase();
        if let Some((rel, col)) = lower.split_once('.') {
            // A name of the rows themselves (a join's `relation.column`), or a qualified one.
            if !self
                .origins
                .iter()
                .any(|o| o.relation.as_deref() == Some(rel))
            {
                return match self
                    .columns
                    .iter()
                    .position(|c| c.name.eq_ignore_ascii_case(name))
                {
                    Some(i) => Ok(vec![i]),
                    None => Err(rel.to_string()),
                };
            }
            return Ok(self
                .origins
                .iter()
                .enumerate()
                .filter(|(_, o)| {
                    o.relation.as_deref() == Some(rel) && o.base.eq_ignore_ascii_case(col)
                })
                .map(|(i, _)| i)
                .collect());
        }
        Ok(self
            .origins
            .iter()
            .enumerate()
            .filter(|(_, o)| o.unqualified && o.base.eq_ignore_ascii_case(name))
            .map(|(i, _)| i)
            .collect())
    }

    /// The column `c` names.
    pub fn resolve(&self, c: &Ident) -> Result<&ColumnDef> {
        let found = self.find(&c.name).map_err(|rel| {
            PlanError::unknown_table(format!("unknown table `{rel}` in `{}`", c.name), c.span)
                .with_help(format!(
                    "the relations here: {}",
                    self.relations().join(", ")
                ))
        })?;
        match found.as_slice() {
            [i] => Ok(&self.columns[*i]),
            [] => {
                let names: Vec<&str> = self
                    .origins
                    .iter()
                    .filter(|o| o.star)
                    .map(|o| o.base.as_str())
                    .collect();
                let mut e = PlanError::unknown_column(
                    format!("unknown column `{}` in {}", c.name, self.what),
                    c.span,
                )
                .with_label(c.span, format!("columns: {}", names.join(", ")));
                let base = c.name.rsplit('.').next().unwrap_or(&c.name);
                if let Some(s) = lql_grammar::suggest(base, names.iter().copied()) {
                    e = e.with_help(format!("did you mean {s}?"));
                }
                Err(e)
            }
            many => {
                let rels: Vec<String> = many
                    .iter()
                    .map(|&i| {
                        format!(
                            "{}.{}",
                            self.origins[i].relation.as_deref().unwrap_or("?"),
                            self.origins[i].base
                        )
                    })
                    .collect();
                Err(
                    PlanError::semantic(format!("column `{}` is ambiguous", c.name), c.span)
                        .with_help(format!("name one of {}", rels.join(", "))),
                )
            }
        }
    }

    fn relations(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for o in &self.origins {
            if let Some(r) = &o.relation {
                if !v.contains(r) {
                    v.push(r.clone());
                }
            }
        }
        v
    }

    /// Every column of `e` resolved to the name the rows carry; subqueries are their own
    /// scopes and are left as written.
    pub fn resolve_expr(&self, e: &Expr) -> Result<Expr> {
        let kind = match &e.kind {
            ExprKind::Column(c) => {
                let col = self.resolve(c)?;
                ExprKind::Column(Ident {
                    name: col.name.clone(),
                    span: c.span,
                })
            }
            other => other.try_map_children(&mut |x| self.resolve_expr(x))?,
        };
        Ok(Expr { kind, span: e.span })
    }
}

/// A bound FROM: the source and its scope.
pub(crate) struct Bound {
    pub source: SelectSource,
    pub scope: Scope,
}

/// Binds `from` (`None`: SELECT without FROM).
pub(crate) fn bind_from(b: &Binder, from: Option<&FromItem>) -> Result<Bound> {
    let Some(from) = from else {
        return Ok(Bound {
            source: SelectSource::OneRow,
            scope: Scope::single(Vec::new(), None, "a SELECT without FROM".into()),
        });
    };
    let mut unnamed = 0usize;
    let (source, scope) = item(b, from, &mut unnamed)?;
    Ok(Bound { source, scope })
}

fn item(b: &Binder, from: &FromItem, unnamed: &mut usize) -> Result<(SelectSource, Scope)> {
    match from {
        FromItem::Table { table, alias } => {
            let columns = schema::table_columns(table.value).ok_or_else(|| unbuilt_table(table))?;
            b.model()?;
            let rel = alias.as_ref().map_or(table.value.name().to_string(), |a| {
                a.name.to_ascii_lowercase()
            });
            Ok((
                SelectSource::Table {
                    table: table.value,
                    // Filled by the caller (pushdown needs the whole statement).
                    scan: ScanSpec::full(),
                },
                Scope::single(columns, Some(rel), format!("table {}", table.value.name())),
            ))
        }
        FromItem::Statement {
            statement,
            alias,
            span,
        } => {
            let plan = b.statement(statement)?;
            check_reads_only(&plan, *span)?;
            let columns = schema::statement_columns(&plan);
            if columns.is_empty() {
                return Err(PlanError::semantic(
                    format!("{} yields no rows to select from", plan.name()),
                    *span,
                ));
            }
            let rel = match alias {
                Some(a) => a.name.to_ascii_lowercase(),
                None => {
                    *unnamed += 1;
                    format!("#{unnamed}")
                }
            };
            let what = format!("the rows of {}", plan.name());
            Ok((
                SelectSource::Statement {
                    statement: statement.clone(),
                    plan: Box::new(plan),
                },
                Scope::single(columns, Some(rel), what),
            ))
        }
        FromItem::Join {
            left,
            right,
            kind,
            on,
            using,
            span,
        } => {
            let (ls, lscope) = item(b, left, unnamed)?;
            let (rs, rscope) = item(b, right, unnamed)?;
            join(ls, lscope, rs, rscope, *kind, on.as_ref(), using, *span)
        }
    }
}

/// The scope of a join: every column under `relation.column`.
#[allow(clippy::too_many_arguments)]
fn join(
    ls: SelectSource,
    lscope: Scope,
    rs: SelectSource,
    rscope: Scope,
    kind: JoinKind,
    on: Option<&Expr>,
    using: &[Ident],
    span: Span,
) -> Result<(SelectSource, Scope)> {
    let qualify = |scope: &Scope| -> Vec<(ColumnDef, Origin)> {
        scope
            .columns
            .iter()
            .zip(&scope.origins)
            .map(|(c, o)| {
                // A relation's own column gets its relation's name; a column of a join
                // already has it.
                let name = match &o.relation {
                    Some(r) if c.name == o.base => format!("{r}.{}", o.base),
                    _ => c.name.clone(),
                };
                (ColumnDef { name, ..c.clone() }, o.clone())
            })
            .collect()
    };
    let mut cols = qualify(&lscope);
    let right = qualify(&rscope);
    let mut seen: Vec<String> = cols
        .iter()
        .map(|(c, _)| c.name.to_ascii_lowercase())
        .collect();
    for (c, _) in &right {
        if seen.contains(&c.name.to_ascii_lowercase()) {
            return Err(PlanError::semantic(
                format!(
                    "two relations of the join are both called `{}`",
                    c.name.split('.').next().unwrap_or("")
                ),
                span,
            )
            .with_help("give one of them an alias: FROM features AS a JOIN features AS b …"));
        }
        seen.push(c.name.to_ascii_lowercase());
    }
    let left_n = cols.len();
    cols.extend(right);
    let mut scope = Scope {
        columns: cols.iter().map(|(c, _)| c.clone()).collect(),
        origins: cols.into_iter().map(|(_, o)| o).collect(),
        what: "the join".into(),
    };
    // USING (a, b): left.a = right.a AND …; the right's copies are hidden.
    let mut conds: Vec<Expr> = Vec::new();
    for u in using {
        let find = |range: std::ops::Range<usize>| {
            range
                .clone()
                .filter(|&i| {
                    scope.origins[i].unqualified
                        && scope.origins[i].base.eq_ignore_ascii_case(&u.name)
                })
                .collect::<Vec<_>>()
        };
        let (l, r) = (find(0..left_n), find(left_n..scope.columns.len()));
        let (&[li], &[ri]) = (l.as_slice(), r.as_slice()) else {
            return Err(PlanError::semantic(
                format!(
                    "USING ({}) needs one column of that name on each side of the join",
                    u.name
                ),
                u.span,
            ));
        };
        scope.origins[ri].unqualified = false;
        scope.origins[ri].star = false;
        let col = |i: usize| Expr {
            kind: ExprKind::Column(Ident {
                name: scope.columns[i].name.clone(),
                span: u.span,
            }),
            span: u.span,
        };
        conds.push(Expr {
            kind: ExprKind::Compare {
                op: CmpOp::Eq,
                left: Box::new(col(li)),
                right: Box::new(col(ri)),
            },
            span: u.span,
        });
    }
    if let Some(on) = on {
        if on.has_aggregate() {
            return Err(PlanError::semantic(
                "aggregate functions are not allowed in ON",
                on.span,
            ));
        }
        let e = scope.resolve_expr(on)?;
        check_predicate(&e, &scope.columns).map_err(|e| e.with_label(on.span, "in this ON"))?;
        conds.push(e);
    }
    let on = match conds.len() {
        0 => None,
        1 => conds.pop(),
        _ => Some(Expr {
            kind: ExprKind::And(conds),
            span,
        }),
    };
    Ok((
        SelectSource::Join {
            left: Box::new(ls),
            right: Box::new(rs),
            kind,
            on,
            columns: scope.columns.clone(),
        },
        scope,
    ))
}

/// A statement in FROM must only read the bound model (or nothing), as its declared
/// effects say: what writes files or the session's state, or reads a file it names, runs
/// on its own.
fn check_reads_only(plan: &LogicalPlan, span: Span) -> Result<()> {
    let e = crate::effects::effects(plan);
    if e.only_reads_model() {
        return Ok(());
    }
    Err(PlanError::semantic(
        format!(
            "{} cannot be a relation in FROM: it {}",
            plan.name(),
            e.describe_beyond_reading()
        ),
        span,
    )
    .with_help("run it as a statement of its own"))
}

/// An IN or scalar subquery, bound: it must yield one column.
pub(crate) fn bind_subquery(b: &Binder, q: &g::Select, span: Span) -> Result<Subquery> {
    let plan = crate::select::bind_select(b, q)?;
    let cols = schema::statement_columns(&plan);
    if cols.len() != 1 {
        return Err(PlanError::semantic(
            format!(
                "a subquery here must yield one column, this one yields {}",
                cols.len()
            ),
            span,
        ));
    }
    Ok(Subquery {
        span,
        statement: Box::new(g::Statement {
            kind: g::StatementKind::Select(q.clone()),
            span,
        }),
        plan: Box::new(plan),
    })
}
