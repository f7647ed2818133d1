//! Binding of SELECT: the select list (columns, `AS` aliases, arithmetic, comparisons),
//! aggregates with GROUP BY and HAVING, DISTINCT, and ORDER BY on columns, aliases,
//! result positions and aggregates.
//!
//! The plan has three shapes, all ending in the result's columns (`SelectPlan::columns`,
//! which `Statement::columns()` reports before running):
//!
//! ```text
//! plain      TableScan ─▶ Filter ─▶ Sort ─▶ Limit ─▶ [LateLabels] ─▶ Project
//! aggregate  TableScan ─▶ Filter ─▶ Aggregate ─▶ [Filter HAVING] ─▶ Sort ─▶ Limit ─▶ Project
//! DISTINCT   … ─▶ Project ─▶ Distinct ─▶ Sort ─▶ Limit  (ORDER BY names result columns)
//! ```
//!
//! In the aggregate shape every expression above the Aggregate is rewritten to read its
//! output: a GROUP BY key becomes that key's column, an aggregate call becomes the call's
//! column (named as printed, `count(*)`); a bare column outside both is refused, as in
//! PostgreSQL (SQLite would pick an arbitrary row).

use crate::bind::{check_where_size, pushdown, to_usize, Binder};
use crate::error::PlanError;
use crate::logical::*;
use crate::pushdown::columns_in;
use crate::relation::{bind_from, bind_subquery, Bound, Scope};
use crate::schema::{ColumnDef, ColumnType};
use crate::typecheck::{check_predicate, expr_type, with_subquery_types};
use lql_grammar::{self as g, ExprKind, Ident, SelectList, Span, SpanVisit};

type Result<T> = std::result::Result<T, PlanError>;

fn column(name: &str, span: Span) -> Expr {
    Expr {
        kind: ExprKind::Column(Ident {
            name: name.to_string(),
            span,
        }),
        span,
    }
}

fn same(a: &Expr, b: &Expr) -> bool {
    a.without_spans() == b.without_spans()
}

/// The name of a result column: its alias, the column it names, or the printed expression.
fn output_name(e: &Expr, alias: Option<&Ident>) -> String {
    match (alias, &e.kind) {
        (Some(a), _) => a.name.clone(),
        // `a.layer` is shown as `layer`, as SQLite names it.
        (None, ExprKind::Column(c)) => c.name.rsplit('.').next().unwrap_or(&c.name).to_string(),
        (None, _) => e.to_string(),
    }
}

fn no_aggregate(e: &Expr, clause: &str) -> Result<()> {
    let mut at = None;
    e.walk(&mut |x| {
        if matches!(x.kind, ExprKind::Aggregate { .. }) && at.is_none() {
            at = Some(x.span);
        }
    });
    match at {
        Some(sp) => Err(PlanError::semantic(
            format!("aggregate functions are not allowed in {clause}"),
            sp,
        )
        .with_help("filter groups with HAVING")),
        None => Ok(()),
    }
}

/// A select-list item bound against the table.
struct Item {
    name: String,
    expr: Expr,
    alias: Option<String>,
}

pub(crate) fn bind_select(b: &Binder, s: &g::Select) -> Result<LogicalPlan> {
    let Bound { mut source, scope } = bind_from(b, s.from.as_ref())?;
    let mut subqueries = Vec::new();
    for on in join_conditions(&source) {
        bind_subqueries(b, on, &mut subqueries)?;
    }
    let star_span = s.columns.span;
    let items: Vec<Item> = match &s.columns.value {
        SelectList::All => {
            let star = scope.star();
            if star.is_empty() {
                return Err(
                    PlanError::semantic("SELECT * needs a FROM with columns", star_span)
                        .with_help("name the values: SELECT 1 AS one"),
                );
            }
            star.into_iter()
                .map(|(name, c)| Item {
                    name,
                    expr: column(&c.name, star_span),
                    alias: None,
                })
                .collect()
        }
        SelectList::Items(v) => v
            .iter()
            .map(|it| {
                bind_subqueries(b, &it.expr, &mut subqueries)?;
                let expr = scope.resolve_expr(&it.expr)?;
                Ok(Item {
                    name: output_name(&expr, it.alias.as_ref()),
                    alias: it.alias.as_ref().map(|a| a.name.clone()),
                    expr,
                })
            })
            .collect::<Result<_>>()?,
    };
    if let Some(f) = &s.filter {
        check_where_size(f)?;
        no_aggregate(&f.value, "WHERE")?;
        bind_subqueries(b, &f.value, &mut subqueries)?;
    }
    let filter = s
        .filter
        .as_ref()
        .map(|f| scope.resolve_expr(&f.value))
        .transpose()?;
    if let (Some(f), Some(w)) = (&filter, &s.filter) {
        check_predicate(&with_subquery_types(f, &subqueries), &scope.columns)
            .map_err(|e| e.with_label(w.span, "in this WHERE"))?;
    }
    let count = |c: &Option<g::Spanned<i64>>, what: &str| -> Result<Option<usize>> {
        match c {
            Some(l) if l.value < 0 => Err(PlanError::semantic(
                format!("{what} must be non-negative, got {}", l.value),
                l.span,
            )),
            Some(l) => Ok(Some(to_usize(l.value as u64, l.span)?)),
            None => Ok(None),
        }
    };
    let limit = count(&s.limit, "LIMIT")?;
    let offset = count(&s.offset, "OFFSET")?.unwrap_or(0);
    let order_items: Vec<&g::OrderItem> = s.order_by.iter().flat_map(|o| &o.value).collect();
    for o in &order_items {
        bind_subqueries(b, &o.expr, &mut subqueries)?;
    }
    for k in s.group_by.iter().flat_map(|g| &g.value) {
        bind_subqueries(b, k, &mut subqueries)?;
    }
    if let Some(h) = &s.having {
        bind_subqueries(b, &h.value, &mut subqueries)?;
    }
    let aggregated = s.group_by.is_some()
        || s.having.is_some()
        || items.iter().any(|i| i.expr.has_aggregate())
        || order_items.iter().any(|o| o.expr.has_aggregate());

    let mut early: Vec<String> = Vec::new();
    if let Some(f) = &filter {
        columns_in(f, &mut early);
    }
    // A join condition's subqueries are typed now that they are bound.
    for (on, columns) in join_conditions_with_columns(&source) {
        check_predicate(&with_subquery_types(on, &subqueries), columns)
            .map_err(|e| e.with_label(on.span, "in this ON"))?;
    }
    let (aggregate, having, items, input_cols) = if aggregated {
        let (spec, having, items) = bind_aggregate(s, &scope, items, &subqueries, &mut early)?;
        let cols = spec.columns.clone();
        (Some(spec), having, items, cols)
    } else {
        (None, None, items, scope.columns.clone())
    };
    let distinct = s.distinct.is_some();

    // ORDER BY: over the result columns after DISTINCT, else over Project's input.
    let mut order_by = Vec::new();
    for o in &order_items {
        let expr = if distinct {
            order_on_result(o, &items)?
        } else {
            order_on_input(o, &items, &scope, aggregate.as_ref())?
        };
        order_by.push(SortKey {
            expr,
            descending: o.direction == Some(g::SortDirection::Desc),
        });
    }
    let mut columns = Vec::with_capacity(items.len());
    for it in &items {
        let ty = expr_type(&with_subquery_types(&it.expr, &subqueries), &input_cols)?;
        columns.push(output_column(&it.name, ty, &it.expr, &input_cols));
    }
    if !distinct {
        if let Some(spec) = &aggregate {
            check_sort_types(&order_by, &spec.columns, &subqueries)?;
        } else {
            check_sort_types(&order_by, &scope.columns, &subqueries)?;
            for k in &order_by {
                columns_in(&k.expr, &mut early);
            }
        }
    }
    let mut late = Vec::new();
    for it in &items {
        columns_in(&it.expr, &mut late);
    }
    // Without the plain shape's LIMIT-before-labels order, every row is labelled first.
    if aggregated || distinct {
        early.append(&mut late);
    }
    match &mut source {
        SelectSource::Table { table, scan } => {
            let m = b.model()?;
            let table = *table;
            *scan = pushdown(m, table, filter.as_ref(), &early, &late);
            if let Some((does, column)) = scan_input(table) {
                let value = filter
                    .as_ref()
                    .and_then(|f| crate::pushdown::text_equal(f, column))
                    .ok_or_else(|| {
                        let e = PlanError::semantic(
                            format!(
                                "SELECT FROM {} {does}: add WHERE {column} = '…'",
                                table.name()
                            ),
                            s.from.as_ref().map_or(s.columns.span, |f| f.span()),
                        );
                        if column == "corpus" {
                            e.with_help(
                                "compute its statistics once: ANALYZE FEATURES FROM \"corpus.txt\"",
                            )
                        } else {
                            e
                        }
                    })?;
                match column {
                    "corpus" => scan.corpus = Some(value),
                    _ => scan.prompt = Some(value),
                }
            }
            if table == g::Table::Heads {
                scan.token = filter
                    .as_ref()
                    .and_then(|f| crate::pushdown::text_equal(f, "token"));
            }
            // A LIMIT that nothing before it narrows stops the scan itself; over `features`,
            // WHERE moves into the scan, which applies it a layer at a time and stops once
            // enough rows pass (a WHERE with a subquery stays a Filter: it has inputs).
            if !aggregated && !distinct && order_by.is_empty() {
                let stops = match &filter {
                    None => true,
                    Some(f) => {
                        let movable = table == g::Table::Features
                            && limit.is_some()
                            && subqueries_in(f).is_empty();
                        if movable {
                            scan.filter = Some(f.clone());
                        }
                        movable
                    }
                };
                if stops {
                    scan.limit = limit.map(|n| n.saturating_add(offset));
                }
            }
            if let (Some(e), LabelTiming::Late) = (scan.estimate.as_mut(), scan.labels) {
                // Late labels: only the rows that survive OFFSET and LIMIT are labelled.
                let survive = e.rows.saturating_sub(offset as u64);
                e.labels = limit.map_or(survive, |n| survive.min(n as u64));
                if !e.stored {
                    e.label_macs = e.labels * (m.vocab * m.hidden) as u64;
                }
            }
        }
        SelectSource::Join { .. } => {
            // Each table of a join is scanned with what WHERE says of it alone, its label
            // columns computed early.
            let mut read = early;
            read.append(&mut late);
            let read: Vec<String> = read
                .iter()
                .map(|c| c.rsplit('.').next().unwrap_or(c).to_string())
                .collect();
            let mut js = JoinScan {
                columns: &scope.columns,
                offset: 0,
                filter: filter.as_ref(),
                read: &read,
            };
            scan_join_tables(b, &mut source, &mut js, true, s)?;
        }
        SelectSource::Statement { plan, .. } => {
            // A LIMIT that nothing before it narrows or reorders stops a trace's pass after
            // the layers its rows need.
            if let (LogicalPlan::Trace(t), Some(n), true) = (
                plan.as_mut(),
                limit,
                filter.is_none() && !aggregated && !distinct && order_by.is_empty(),
            ) {
                t.stop_after(n.saturating_add(offset));
            }
        }
        SelectSource::OneRow => {}
    }
    Ok(LogicalPlan::Select(Box::new(SelectPlan {
        source,
        source_columns: scope.columns,
        columns,
        items: items.into_iter().map(|i| i.expr).collect(),
        filter,
        aggregate,
        having,
        distinct,
        order_by,
        limit,
        offset,
        subqueries,
    })))
}

/// What a table's scan needs from WHERE before it can answer: what it does with it, and
/// the column (`WHERE column = '…'`); `None` for tables that answer as they are.
fn scan_input(table: g::Table) -> Option<(&'static str, &'static str)> {
    match table {
        g::Table::Routes | g::Table::Attention | g::Table::Heads => {
            Some(("runs a prompt", "prompt"))
        }
        g::Table::Contexts | g::Table::Histograms => {
            Some(("reads a corpus's statistics", "corpus"))
        }
        _ => None,
    }
}

/// A join's tables and where their columns sit among the join's (`relation.column`).
struct JoinScan<'a> {
    /// The join's columns, in order (each table's are a contiguous run).
    columns: &'a [ColumnDef],
    /// Columns passed so far in the walk.
    offset: usize,
    /// The statement's WHERE (over the join's columns).
    filter: Option<&'a Expr>,
    /// The label columns the statement reads (by their own names), computed early.
    read: &'a [String],
}

/// The scans of a join's tables: each gets the layers and features of the WHERE conjuncts
/// that read only its columns (not on the NULL side of a LEFT join, whose rows WHERE sees
/// only after the join), its label columns computed early; tables that run a prompt are
/// refused (they need WHERE prompt = '…' of their own).
fn scan_join_tables(
    b: &Binder,
    source: &mut SelectSource,
    js: &mut JoinScan<'_>,
    pushable: bool,
    s: &g::Select,
) -> Result<()> {
    match source {
        SelectSource::Join {
            left, right, kind, ..
        } => {
            let left_join = *kind == g::JoinKind::Left;
            scan_join_tables(b, left, js, pushable, s)?;
            scan_join_tables(b, right, js, pushable && !left_join, s)
        }
        SelectSource::Table { table, scan } => {
            if let Some((does, column)) = scan_input(*table) {
                return Err(PlanError::semantic(
                    format!("{} {does} and cannot be joined as a table", table.name()),
                    s.from.as_ref().map_or(s.columns.span, |f| f.span()),
                )
                .with_help(format!(
                    "join a subquery instead: (SELECT * FROM {} WHERE {column} = '…') AS {}",
                    table.name(),
                    &table.name()[..1]
                )));
            }
            let n = crate::schema::table_columns(*table).map_or(0, |c| c.len());
            let mine = js.columns.get(js.offset..js.offset + n).unwrap_or(&[]);
            js.offset += n;
            let prefix = mine
                .first()
                .and_then(|c| c.name.split_once('.'))
                .map(|(rel, _)| format!("{rel}."));
            let local = match (pushable, js.filter, prefix) {
                (true, Some(f), Some(p)) => local_conjuncts(f, &p),
                _ => None,
            };
            *scan = pushdown(b.model()?, *table, local.as_ref(), js.read, &[]);
            Ok(())
        }
        SelectSource::Statement { plan, .. } => {
            js.offset += crate::schema::statement_columns(plan).len();
            Ok(())
        }
        SelectSource::OneRow => Ok(()),
    }
}

/// The conjuncts of `filter` that read only columns named `prefix…`, with the prefix taken
/// off (over the table's own columns); `None` when there are none.
fn local_conjuncts(filter: &Expr, prefix: &str) -> Option<Expr> {
    let mut mine = Vec::new();
    for c in filter.conjuncts() {
        let mut only_mine = true;
        let mut has_subquery = false;
        c.walk(&mut |x| match &x.kind {
            ExprKind::Column(col) => {
                only_mine &= col.name.len() > prefix.len()
                    && col.name[..prefix.len()].eq_ignore_ascii_case(prefix)
            }
            ExprKind::InSubquery { .. } | ExprKind::Subquery(_) => has_subquery = true,
            _ => {}
        });
        if only_mine && !has_subquery {
            mine.push(strip_prefix(c, prefix));
        }
    }
    match mine.len() {
        0 => None,
        1 => mine.pop(),
        _ => Some(Expr {
            kind: ExprKind::And(mine),
            span: filter.span,
        }),
    }
}

fn strip_prefix(e: &Expr, prefix: &str) -> Expr {
    if let ExprKind::Column(c) = &e.kind {
        return column(&c.name[prefix.len().min(c.name.len())..], e.span);
    }
    Expr {
        kind: e.kind.map_children(&mut |x| strip_prefix(x, prefix)),
        span: e.span,
    }
}

/// Binds every subquery of `e` not bound yet (each its own scope), so its errors come
/// before anything runs and its plan runs as an input of the operator that holds it; IN
/// and scalar subqueries must yield one column.
fn bind_subqueries(b: &Binder, e: &Expr, bound: &mut Vec<Subquery>) -> Result<()> {
    for (span, query) in subqueries_in(e) {
        if !bound.iter().any(|q| q.span == span) {
            bound.push(bind_subquery(b, &query, span)?);
        }
    }
    Ok(())
}

/// The join conditions of `src`, outermost join first.
fn join_conditions(src: &SelectSource) -> Vec<&Expr> {
    join_conditions_with_columns(src)
        .into_iter()
        .map(|(on, _)| on)
        .collect()
}

/// Each join's condition, with the columns it reads.
fn join_conditions_with_columns(src: &SelectSource) -> Vec<(&Expr, &[ColumnDef])> {
    match src {
        SelectSource::Join {
            left,
            right,
            on,
            columns,
            ..
        } => {
            let mut out: Vec<(&Expr, &[ColumnDef])> =
                on.iter().map(|e| (e, columns.as_slice())).collect();
            out.extend(join_conditions_with_columns(left));
            out.extend(join_conditions_with_columns(right));
            out
        }
        _ => Vec::new(),
    }
}

/// A result column: a plain column keeps the table's meaning.
fn output_column(name: &str, ty: ColumnType, e: &Expr, input: &[ColumnDef]) -> ColumnDef {
    let meaning = match &e.kind {
        ExprKind::Column(c) => input
            .iter()
            .find(|d| d.name.eq_ignore_ascii_case(&c.name))
            .map_or("", |d| d.meaning),
        ExprKind::Aggregate { .. } => "an aggregate",
        _ => "a computed value",
    };
    ColumnDef::new(name, ty).meaning(meaning)
}

fn check_sort_types(keys: &[SortKey], cols: &[ColumnDef], subqueries: &[Subquery]) -> Result<()> {
    for k in keys {
        expr_type(&with_subquery_types(&k.expr, subqueries), cols)?;
    }
    Ok(())
}

/// `ORDER BY n` (1-based result position) or an alias: the item's expression.
fn item_by_name_or_position<'a>(o: &g::OrderItem, items: &'a [Item]) -> Result<Option<&'a Item>> {
    match &o.expr.kind {
        ExprKind::Literal(g::Value::Int(n)) => {
            let i = usize::try_from(*n)
                .ok()
                .filter(|&i| i >= 1 && i <= items.len());
            match i {
                Some(i) => Ok(Some(&items[i - 1])),
                None => Err(PlanError::out_of_range(
                    format!(
                        "ORDER BY position {n} is out of range: the result has {} columns",
                        items.len()
                    ),
                    o.expr.span,
                )),
            }
        }
        ExprKind::Column(c) => Ok(items.iter().find(|i| {
            i.alias
                .as_deref()
                .is_some_and(|a| a.eq_ignore_ascii_case(&c.name))
        })),
        _ => Ok(None),
    }
}

/// ORDER BY over Project's input (plain and aggregate shapes).
fn order_on_input(
    o: &g::OrderItem,
    items: &[Item],
    scope: &Scope,
    agg: Option<&AggregateSpec>,
) -> Result<Expr> {
    if let Some(it) = item_by_name_or_position(o, items)? {
        return Ok(it.expr.clone());
    }
    let e = scope.resolve_expr(&o.expr).map_err(|e| {
        e.with_help(
            "ORDER BY takes a column, an alias of the select list, a position or an expression",
        )
    })?;
    match agg {
        None => {
            no_aggregate(&e, "ORDER BY without GROUP BY")?;
            Ok(e)
        }
        Some(spec) => rewrite(&e, spec),
    }
}

/// ORDER BY after DISTINCT: must name a result column.
fn order_on_result(o: &g::OrderItem, items: &[Item]) -> Result<Expr> {
    if let Some(it) = item_by_name_or_position(o, items)? {
        return Ok(column(&it.name, o.expr.span));
    }
    let found = items.iter().find(|it| match &o.expr.kind {
        ExprKind::Column(c) => it.name.eq_ignore_ascii_case(&c.name),
        _ => it.expr.to_string() == o.expr.to_string(),
    });
    match found {
        Some(it) => Ok(column(&it.name, o.expr.span)),
        None => Err(PlanError::semantic(
            "for SELECT DISTINCT, ORDER BY terms must appear in the select list",
            o.expr.span,
        )
        .with_help("order by a result column, its alias or its position")),
    }
}

/// GROUP BY keys, the aggregate calls, HAVING and the items rewritten over the output.
fn bind_aggregate(
    s: &g::Select,
    scope: &Scope,
    items: Vec<Item>,
    subqueries: &[Subquery],
    early: &mut Vec<String>,
) -> Result<(AggregateSpec, Option<Expr>, Vec<Item>)> {
    let schema = &scope.columns[..];
    let mut keys: Vec<Expr> = Vec::new();
    let mut columns: Vec<ColumnDef> = Vec::new();
    for k in s.group_by.iter().flat_map(|g| &g.value) {
        // GROUP BY an alias of the select list, a position, or an expression.
        let by_alias = match &k.kind {
            ExprKind::Column(c) if !scope.knows(&c.name) => items
                .iter()
                .find(|i| {
                    i.alias
                        .as_deref()
                        .is_some_and(|a| a.eq_ignore_ascii_case(&c.name))
                })
                .map(|i| i.expr.clone()),
            ExprKind::Literal(g::Value::Int(n)) => usize::try_from(*n)
                .ok()
                .filter(|&i| i >= 1 && i <= items.len())
                .map(|i| items[i - 1].expr.clone()),
            _ => None,
        };
        let e = match by_alias {
            Some(e) => e,
            None => scope.resolve_expr(k)?,
        };
        no_aggregate(&e, "GROUP BY")?;
        let ty = expr_type(&e, schema)?;
        if ty == ColumnType::List {
            return Err(PlanError::semantic("cannot GROUP BY a list column", k.span));
        }
        columns_in(&e, early);
        columns.push(ColumnDef::new(&output_name(&e, None), ty).meaning("a GROUP BY key"));
        keys.push(e);
    }
    // Every aggregate call of the items, HAVING and ORDER BY, once each.
    let having = s
        .having
        .as_ref()
        .map(|h| scope.resolve_expr(&with_aliases(&h.value, scope, &items)))
        .transpose()?;
    let mut order_exprs = Vec::new();
    for o in s.order_by.iter().flat_map(|o| &o.value) {
        if o.expr.has_aggregate() {
            order_exprs.push(scope.resolve_expr(&o.expr)?);
        }
    }
    let mut calls: Vec<AggCall> = Vec::new();
    let mut call_cols: Vec<ColumnDef> = Vec::new();
    let sources = items
        .iter()
        .map(|i| &i.expr)
        .chain(having.iter())
        .chain(order_exprs.iter());
    for e in sources {
        let mut err = None;
        e.walk(&mut |x| {
            if let ExprKind::Aggregate {
                func,
                arg,
                distinct,
            } = &x.kind
            {
                if err.is_some() {
                    return;
                }
                if let Some(a) = arg {
                    if a.has_aggregate() {
                        err = Some(PlanError::semantic(
                            "aggregate calls cannot be nested",
                            x.span,
                        ));
                        return;
                    }
                    columns_in(a, early);
                }
                let name = x.to_string();
                if call_cols.iter().any(|c| c.name == name) {
                    return;
                }
                match expr_type(x, schema) {
                    Ok(ty) => {
                        call_cols.push(ColumnDef::new(&name, ty).meaning("an aggregate"));
                        calls.push(AggCall {
                            func: *func,
                            arg: arg.as_deref().cloned(),
                            distinct: *distinct,
                        });
                    }
                    Err(e) => err = Some(e),
                }
            }
        });
        if let Some(e) = err {
            return Err(e);
        }
    }
    columns.extend(call_cols);
    let spec = AggregateSpec {
        keys,
        calls,
        columns,
    };
    let having = match (having, &s.having) {
        (Some(h), Some(clause)) => {
            let h = rewrite(&h, &spec)?;
            check_predicate(&with_subquery_types(&h, subqueries), &spec.columns)
                .map_err(|e| e.with_label(clause.span, "in this HAVING"))?;
            Some(h)
        }
        _ => None,
    };
    let items = items
        .into_iter()
        .map(|i| {
            Ok(Item {
                expr: rewrite(&i.expr, &spec)?,
                ..i
            })
        })
        .collect::<Result<_>>()?;
    Ok((spec, having, items))
}

/// Rewrites `e` (over the table) to read the Aggregate's output.
fn rewrite(e: &Expr, spec: &AggregateSpec) -> Result<Expr> {
    for (k, col) in spec.keys.iter().zip(&spec.columns) {
        if same(e, k) {
            return Ok(column(&col.name, e.span));
        }
    }
    let kind = match &e.kind {
        ExprKind::Aggregate { .. } => return Ok(column(&e.to_string(), e.span)),
        ExprKind::Column(c) => {
            return Err(PlanError::semantic(
                format!(
                    "column `{}` must appear in GROUP BY or be used in an aggregate",
                    c.name
                ),
                e.span,
            )
            .with_help(format!(
                "add {} to GROUP BY, or use an aggregate such as min({})",
                c.name, c.name
            )))
        }
        other => other.try_map_children(&mut |x| rewrite(x, spec))?,
    };
    Ok(Expr { kind, span: e.span })
}

/// `e` with each name that is not a table column but an alias of the select list replaced
/// by the aliased expression (HAVING may name result columns, as in SQLite).
fn with_aliases(e: &Expr, scope: &Scope, items: &[Item]) -> Expr {
    if let ExprKind::Column(c) = &e.kind {
        if !scope.knows(&c.name) {
            if let Some(it) = items.iter().find(|i| {
                i.alias
                    .as_deref()
                    .is_some_and(|a| a.eq_ignore_ascii_case(&c.name))
            }) {
                return it.expr.clone();
            }
        }
        return e.clone();
    }
    Expr {
        kind: e.kind.map_children(&mut |x| with_aliases(x, scope, items)),
        span: e.span,
    }
}
