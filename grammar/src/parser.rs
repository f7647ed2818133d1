//! The only module that sees pest: runs the grammar (`lql.pest`), builds the owned AST
//! from the pairs, and turns pest's errors into [`SyntaxError`]s with words, spans and
//! "did you mean" help.

use crate::ast::*;
use crate::error::{suggest, SyntaxError};
use crate::keywords::{KEYWORDS, STATEMENT_KEYWORDS};
use crate::scan;
use pest::iterators::Pair;
use pest::Parser as _;

#[derive(pest_derive::Parser)]
#[grammar = "lql.pest"]
struct LqlParser;

type Result<T> = std::result::Result<T, SyntaxError>;

/// Deepest expression tree accepted (NOT chains and parentheses count).
const MAX_EXPR_DEPTH: usize = 128;

/// Parses a script: zero or more statements separated by `;` (the last `;` optional).
pub fn parse(src: &str) -> Result<Vec<Statement>> {
    scan::precheck(src)?;
    let mut pairs = LqlParser::parse(Rule::script, src).map_err(|e| convert_error(e, src))?;
    let script = pairs
        .next()
        .ok_or_else(|| SyntaxError::new("internal: empty parse", Span::new(0, 0)))?;
    let mut out = Vec::new();
    for p in script.into_inner() {
        if p.as_rule() == Rule::statement {
            out.push(statement(p)?);
        }
    }
    Ok(out)
}

/// Parses exactly one statement (a trailing `;` is allowed).
pub fn parse_statement(src: &str) -> Result<Statement> {
    let mut stmts = parse(src)?;
    match stmts.len() {
        0 => Err(SyntaxError::new(
            "expected a statement, found end of input",
            Span::new(src.len(), src.len()),
        )
        .with_help(format!(
            "statements start with one of {}",
            STATEMENT_KEYWORDS.join(", ")
        ))),
        1 => Ok(stmts.remove(0)),
        _ => {
            let second = stmts[1].span;
            Err(SyntaxError::new("expected a single statement", second)
                .with_label(second, "a second statement starts here"))
        }
    }
}

// ---- helpers -------------------------------------------------------------------------

fn span(p: &Pair<Rule>) -> Span {
    let s = p.as_span();
    Span::new(s.start(), s.end())
}

fn internal(p: &Pair<Rule>) -> SyntaxError {
    SyntaxError::new(
        format!("internal parser error: unexpected {:?}", p.as_rule()),
        span(p),
    )
}

/// Stores a clause, refusing a second one with the span of the second.
fn set<T>(slot: &mut Option<Spanned<T>>, value: Spanned<T>, name: &str) -> Result<()> {
    if let Some(first) = slot {
        return Err(
            SyntaxError::new(format!("duplicate {name} clause"), value.span)
                .with_label(first.span, "first given here")
                .with_label(value.span, "given again here")
                .with_help(format!("give {name} at most once")),
        );
    }
    *slot = Some(value);
    Ok(())
}

fn out_of_range(p: &Pair<Rule>, what: &str) -> SyntaxError {
    SyntaxError::new(format!("number out of range: {}", p.as_str()), span(p))
        .with_label(span(p), format!("does not fit {what}"))
}

fn integer(p: Pair<Rule>) -> Result<Spanned<i64>> {
    let v = p
        .as_str()
        .parse::<i64>()
        .map_err(|_| out_of_range(&p, "a 64-bit signed integer"))?;
    Ok(Spanned::new(v, span(&p)))
}

fn unsigned(p: Pair<Rule>) -> Result<Spanned<u64>> {
    let v = p
        .as_str()
        .parse::<u64>()
        .map_err(|_| out_of_range(&p, "a 64-bit unsigned integer"))?;
    Ok(Spanned::new(v, span(&p)))
}

fn float(p: Pair<Rule>) -> Result<Spanned<f64>> {
    match p.as_str().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(Spanned::new(v, span(&p))),
        _ => Err(out_of_range(&p, "a 64-bit float")),
    }
}

/// The single child of a clause pair after its keyword(s): the value pair.
fn last_child(p: Pair<Rule>) -> Result<Pair<Rule>> {
    let sp = span(&p);
    p.into_inner()
        .last()
        .ok_or_else(|| SyntaxError::new("internal parser error: empty clause", sp))
}

fn string(p: Pair<Rule>) -> Result<Spanned<String>> {
    let sp = span(&p);
    let raw = p.as_str();
    if raw.len() < 2 {
        return Err(SyntaxError::new("unterminated string", sp));
    }
    let body = &raw[1..raw.len() - 1];
    Ok(Spanned::new(unescape(body, sp.start + 1)?, sp))
}

fn unescape(body: &str, offset: usize) -> Result<String> {
    let mut out = String::with_capacity(body.len());
    let mut it = body.char_indices();
    while let Some((i, c)) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let bad = |len: usize| {
            SyntaxError::new(
                "invalid escape in string",
                Span::new(offset + i, offset + i + len),
            )
        };
        match it.next() {
            Some((_, '\\')) => out.push('\\'),
            Some((_, '\'')) => out.push('\''),
            Some((_, '"')) => out.push('"'),
            Some((_, 'n')) => out.push('\n'),
            Some((_, 't')) => out.push('\t'),
            Some((_, 'r')) => out.push('\r'),
            Some((_, '0')) => out.push('\0'),
            Some((_, 'u')) => {
                let (ch, used) = scan::parse_unicode_escape(&body[i + 1..]).map_err(&bad)?;
                out.push(ch);
                // `used` counts from the 'u'; skip the rest of the escape.
                for _ in 0..used - 1 {
                    it.next();
                }
            }
            Some((_, c)) => return Err(bad(1 + c.len_utf8())),
            None => return Err(bad(1)),
        }
    }
    Ok(out)
}

/// Maps a free word to one of `options` (case-insensitive) or explains the choices.
fn choose<T: Copy>(p: &Pair<Rule>, what: &str, options: &[(&str, T)]) -> Result<Spanned<T>> {
    let word = p.as_str();
    for (name, v) in options {
        if name.eq_ignore_ascii_case(word) {
            return Ok(Spanned::new(*v, span(p)));
        }
    }
    let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
    let mut e = SyntaxError::new(format!("unknown {what} `{word}`"), span(p))
        .with_label(span(p), format!("expected one of {}", names.join(", ")));
    if let Some(s) = suggest(word, names.iter().copied()) {
        e = e.with_help(format!("did you mean {s}?"));
    }
    Err(e)
}

fn ident(p: Pair<Rule>) -> Ident {
    Ident {
        name: p.as_str().to_string(),
        span: span(&p),
    }
}

fn layer_spec(p: Pair<Rule>) -> Result<Spanned<LayerSpec>> {
    // p: layers_clause = kw_layers ~ (kw_all | layer_range)
    let sp = span(&p);
    let v = last_child(p)?;
    let spec = match v.as_rule() {
        Rule::kw_all => LayerSpec::All,
        Rule::layer_range => {
            let nums: Vec<Pair<Rule>> = v
                .into_inner()
                .filter(|q| q.as_rule() == Rule::unsigned)
                .collect();
            let mut it = nums.into_iter();
            let first = match it.next() {
                Some(q) => unsigned(q)?.value,
                None => return Err(SyntaxError::new("expected a layer number", sp)),
            };
            let last = match it.next() {
                Some(q) => unsigned(q)?.value,
                None => first,
            };
            LayerSpec::Range { first, last }
        }
        _ => return Err(internal(&v)),
    };
    Ok(Spanned::new(spec, sp))
}

fn clause_int(p: Pair<Rule>) -> Result<Spanned<i64>> {
    let sp = span(&p);
    Ok(Spanned::new(integer(last_child(p)?)?.value, sp))
}

fn clause_float(p: Pair<Rule>) -> Result<Spanned<f64>> {
    let sp = span(&p);
    Ok(Spanned::new(float(last_child(p)?)?.value, sp))
}

fn clause_str(p: Pair<Rule>) -> Result<Spanned<String>> {
    let sp = span(&p);
    Ok(Spanned::new(string(last_child(p)?)?.value, sp))
}

fn first_string(p: Pair<Rule>) -> Result<Spanned<String>> {
    let sp = span(&p);
    match p.into_inner().find(|q| q.as_rule() == Rule::string) {
        Some(s) => string(s),
        None => Err(SyntaxError::new("expected a string", sp)),
    }
}

// ---- statements --------------------------------------------------------------------------

fn statement(p: Pair<Rule>) -> Result<Statement> {
    let sp = span(&p);
    let inner = p
        .into_inner()
        .next()
        .ok_or_else(|| SyntaxError::new("internal parser error: empty statement", sp))?;
    let kind = statement_kind(inner)?;
    Ok(Statement { kind, span: sp })
}

fn statement_kind(p: Pair<Rule>) -> Result<StatementKind> {
    Ok(match p.as_rule() {
        Rule::explain_stmt => {
            let e = p
                .into_inner()
                .find(|q| q.as_rule() == Rule::explainable)
                .ok_or_else(|| {
                    SyntaxError::new("expected a statement after EXPLAIN", Span::default())
                })?;
            StatementKind::Explain(Box::new(statement(e)?))
        }
        Rule::use_stmt => use_stmt(p)?,
        Rule::infer_stmt => infer_stmt(p)?,
        Rule::generate_stmt => generate_stmt(p)?,
        Rule::walk_stmt => walk_stmt(p)?,
        Rule::describe_stmt => describe_stmt(p)?,
        Rule::select_stmt => select_stmt(p)?,
        Rule::trace_stmt => trace_stmt(p)?,
        Rule::insert_stmt => insert_stmt(p)?,
        Rule::delete_stmt => delete_stmt(p)?,
        Rule::update_stmt => update_stmt(p)?,
        Rule::begin_patch_stmt => StatementKind::BeginPatch(first_string(p)?),
        Rule::save_patch_stmt => StatementKind::SavePatch,
        Rule::apply_patch_stmt => StatementKind::ApplyPatch(first_string(p)?),
        Rule::remove_patch_stmt => StatementKind::RemovePatch(first_string(p)?),
        Rule::diff_stmt => diff_stmt(p)?,
        Rule::compile_stmt => compile_stmt(p)?,
        Rule::extract_stmt => extract_stmt(p)?,
        Rule::compact_stmt => {
            let mut container = None;
            let mut into = None;
            for q in p.into_inner() {
                match q.as_rule() {
                    Rule::string => container = Some(string(q)?),
                    Rule::into_clause => into = Some(clause_str(q)?),
                    _ => {}
                }
            }
            let container = container
                .ok_or_else(|| SyntaxError::new("expected a container path", Span::default()))?;
            StatementKind::Compact(Compact { container, into })
        }
        Rule::verify_stmt => {
            let s = p.into_inner().find(|q| q.as_rule() == Rule::string);
            StatementKind::Verify(s.map(string).transpose()?)
        }
        Rule::show_stmt => show_stmt(p)?,
        Rule::stats_stmt => StatementKind::Stats,
        Rule::tokenize_stmt => StatementKind::Tokenize(first_string(p)?),
        Rule::explainable | Rule::statement => {
            let sp = span(&p);
            let inner = p
                .into_inner()
                .next()
                .ok_or_else(|| SyntaxError::new("internal parser error: empty statement", sp))?;
            statement_kind(inner)?
        }
        _ => return Err(internal(&p)),
    })
}

fn use_stmt(p: Pair<Rule>) -> Result<StatementKind> {
    let mut source = None;
    let mut layers = None;
    let mut profile = None;
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_use => {}
            Rule::string => source = Some(UseSource::Path(string(q)?)),
            Rule::use_model => source = Some(UseSource::Model(first_string(q)?)),
            Rule::layers_clause => set(&mut layers, layer_spec(q)?, "LAYERS")?,
            Rule::profile_clause => set(&mut profile, clause_str(q)?, "PROFILE")?,
            _ => return Err(internal(&q)),
        }
    }
    let source = source.ok_or_else(|| SyntaxError::new("USE needs a path", Span::default()))?;
    Ok(StatementKind::Use(Use {
        source,
        layers,
        profile,
    }))
}

fn infer_stmt(p: Pair<Rule>) -> Result<StatementKind> {
    let mut prompt = None;
    let (mut top, mut generate) = (None, None);
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_infer => {}
            Rule::string => prompt = Some(string(q)?),
            Rule::top_clause => set(&mut top, clause_int(q)?, "TOP")?,
            Rule::generate_clause => set(&mut generate, clause_int(q)?, "GENERATE")?,
            _ => return Err(internal(&q)),
        }
    }
    Ok(StatementKind::Infer(Infer {
        prompt: need_prompt(prompt)?,
        top,
        generate,
    }))
}

fn need_prompt(p: Option<Spanned<String>>) -> Result<Spanned<String>> {
    p.ok_or_else(|| SyntaxError::new("expected a prompt string", Span::default()))
}

fn generate_stmt(p: Pair<Rule>) -> Result<StatementKind> {
    let mut g = Generate {
        prompt: Spanned::new(String::new(), Span::default()),
        max: None,
        temperature: None,
        top_k: None,
        top_p: None,
        seed: None,
        stop: None,
    };
    let mut prompt = None;
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_generate => {}
            Rule::string => prompt = Some(string(q)?),
            Rule::max_clause => set(&mut g.max, clause_int(q)?, "MAX")?,
            Rule::temperature_clause => set(&mut g.temperature, clause_float(q)?, "TEMPERATURE")?,
            Rule::top_k_clause => set(&mut g.top_k, clause_int(q)?, "TOP_K")?,
            Rule::top_p_clause => set(&mut g.top_p, clause_float(q)?, "TOP_P")?,
            Rule::seed_clause => set(&mut g.seed, clause_int(q)?, "SEED")?,
            Rule::stop_clause => {
                let sp = span(&q);
                let mut stops = Vec::new();
                for s in q.into_inner().filter(|s| s.as_rule() == Rule::string) {
                    stops.push(string(s)?.value);
                }
                set(&mut g.stop, Spanned::new(stops, sp), "STOP")?
            }
            _ => return Err(internal(&q)),
        }
    }
    g.prompt = need_prompt(prompt)?;
    Ok(StatementKind::Generate(g))
}

fn walk_stmt(p: Pair<Rule>) -> Result<StatementKind> {
    let mut prompt = None;
    let (mut top, mut layers, mut mode) = (None, None, None);
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_walk => {}
            Rule::string => prompt = Some(string(q)?),
            Rule::top_clause => set(&mut top, clause_int(q)?, "TOP")?,
            Rule::layers_clause => set(&mut layers, layer_spec(q)?, "LAYERS")?,
            Rule::mode_clause => {
                let sp = span(&q);
                let w = last_child(q)?;
                let m = choose(
                    &w,
                    "walk mode",
                    &[
                        ("EMBEDDING", WalkMode::Embedding),
                        ("RESIDUAL", WalkMode::Residual),
                    ],
                )?;
                set(&mut mode, Spanned::new(m.value, sp), "MODE")?
            }
            _ => return Err(internal(&q)),
        }
    }
    Ok(StatementKind::Walk(Walk {
        prompt: need_prompt(prompt)?,
        top,
        layers,
        mode,
    }))
}

fn describe_stmt(p: Pair<Rule>) -> Result<StatementKind> {
    let mut entity = None;
    let (mut scope, mut detail) = (None, None);
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_describe => {}
            Rule::string => entity = Some(string(q)?),
            Rule::at_layer_clause => {
                let sp = span(&q);
                let n = unsigned(last_child(q)?)?.value;
                set(
                    &mut scope,
                    Spanned::new(DescribeScope::AtLayer(n), sp),
                    "AT LAYER / LAYERS",
                )?
            }
            Rule::layers_clause => {
                let l = layer_spec(q)?;
                set(
                    &mut scope,
                    Spanned::new(DescribeScope::Layers(l.value), l.span),
                    "AT LAYER / LAYERS",
                )?
            }
            Rule::detail_clause => {
                let sp = span(&q);
                let d = match last_child(q)?.as_rule() {
                    Rule::kw_brief => Detail::Brief,
                    Rule::kw_verbose => Detail::Verbose,
                    _ => Detail::Raw,
                };
                set(&mut detail, Spanned::new(d, sp), "BRIEF / VERBOSE / RAW")?
            }
            _ => return Err(internal(&q)),
        }
    }
    Ok(StatementKind::Describe(Describe {
        entity: need_prompt(entity)?,
        scope,
        detail,
    }))
}

const TABLES: &[(&str, Table)] = &[
    ("features", Table::Features),
    ("edges", Table::Edges),
    ("layers", Table::Layers),
    ("tokens", Table::Tokens),
    ("tensors", Table::Tensors),
    ("representations", Table::Representations),
];

fn table(p: Pair<Rule>) -> Result<Spanned<Table>> {
    let w = last_child(p)?;
    choose(&w, "table", TABLES)
}

fn select_stmt(p: Pair<Rule>) -> Result<StatementKind> {
    let mut columns = None;
    let mut tbl = None;
    let (mut filter, mut order_by, mut limit) = (None, None, None);
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_select | Rule::kw_from => {}
            Rule::select_list => {
                let sp = span(&q);
                let mut cols = Vec::new();
                let mut star = false;
                for c in q.into_inner() {
                    match c.as_rule() {
                        Rule::star => star = true,
                        Rule::ident => cols.push(ident(c)),
                        _ => {}
                    }
                }
                let list = if star {
                    SelectList::All
                } else {
                    SelectList::Columns(cols)
                };
                columns = Some(Spanned::new(list, sp));
            }
            Rule::table_name => tbl = Some(table(q)?),
            Rule::where_clause => set(&mut filter, where_clause(q)?, "WHERE")?,
            Rule::order_clause => {
                let sp = span(&q);
                let mut items = Vec::new();
                for it in q.into_inner().filter(|i| i.as_rule() == Rule::order_item) {
                    let isp = span(&it);
                    let mut column = None;
                    let mut direction = None;
                    for x in it.into_inner() {
                        match x.as_rule() {
                            Rule::ident => column = Some(ident(x)),
                            Rule::kw_asc => direction = Some(SortDirection::Asc),
                            Rule::kw_desc => direction = Some(SortDirection::Desc),
                            _ => {}
                        }
                    }
                    let column =
                        column.ok_or_else(|| SyntaxError::new("expected a column name", isp))?;
                    items.push(OrderItem {
                        column,
                        direction,
                        span: isp,
                    });
                }
                set(&mut order_by, Spanned::new(items, sp), "ORDER BY")?
            }
            Rule::limit_clause => set(&mut limit, clause_int(q)?, "LIMIT")?,
            _ => return Err(internal(&q)),
        }
    }
    let columns = columns.ok_or_else(|| SyntaxError::new("expected columns", Span::default()))?;
    let table = tbl.ok_or_else(|| SyntaxError::new("expected a table", Span::default()))?;
    Ok(StatementKind::Select(Select {
        columns,
        table,
        filter,
        order_by,
        limit,
    }))
}

fn where_clause(p: Pair<Rule>) -> Result<Spanned<Expr>> {
    let sp = span(&p);
    let e = last_child(p)?;
    Ok(Spanned::new(expr(e, 0)?, sp))
}

fn trace_stmt(p: Pair<Rule>) -> Result<StatementKind> {
    let mut prompt = None;
    let mut t = Trace {
        prompt: Spanned::new(String::new(), Span::default()),
        target: None,
        decompose: None,
        layers: None,
        positions: None,
        save: None,
    };
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_trace => {}
            Rule::string => prompt = Some(string(q)?),
            Rule::for_clause => set(&mut t.target, clause_str(q)?, "FOR")?,
            Rule::decompose_clause => {
                let sp = span(&q);
                if let Some(first) = t.decompose {
                    return Err(SyntaxError::new("duplicate DECOMPOSE clause", sp)
                        .with_label(first, "first given here")
                        .with_label(sp, "given again here"));
                }
                t.decompose = Some(sp);
            }
            Rule::layers_clause => set(&mut t.layers, layer_spec(q)?, "LAYERS")?,
            Rule::positions_clause => {
                let sp = span(&q);
                let v = match last_child(q)?.as_rule() {
                    Rule::kw_last => Positions::Last,
                    _ => Positions::All,
                };
                set(&mut t.positions, Spanned::new(v, sp), "POSITIONS")?
            }
            Rule::save_clause => set(&mut t.save, clause_str(q)?, "SAVE")?,
            _ => return Err(internal(&q)),
        }
    }
    t.prompt = need_prompt(prompt)?;
    Ok(StatementKind::Trace(t))
}

fn insert_stmt(p: Pair<Rule>) -> Result<StatementKind> {
    let mut tbl = None;
    let mut columns = Vec::new();
    let mut rows = Vec::new();
    let (mut at_layer, mut alpha, mut confidence) = (None, None, None);
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_insert | Rule::kw_into | Rule::kw_values | Rule::comma => {}
            Rule::table_name => tbl = Some(table(q)?),
            Rule::column_list => {
                columns = q
                    .into_inner()
                    .filter(|c| c.as_rule() == Rule::ident)
                    .map(ident)
                    .collect()
            }
            Rule::value_row => {
                let sp = span(&q);
                let mut vals = Vec::new();
                for v in q.into_inner().filter(|v| v.as_rule() == Rule::literal) {
                    vals.push(literal(v)?);
                }
                rows.push(Spanned::new(vals, sp));
            }
            Rule::at_layer_clause => {
                let sp = span(&q);
                let n = unsigned(last_child(q)?)?.value;
                set(&mut at_layer, Spanned::new(n, sp), "AT LAYER")?
            }
            Rule::alpha_clause => set(&mut alpha, clause_float(q)?, "ALPHA")?,
            Rule::confidence_clause => set(&mut confidence, clause_float(q)?, "CONFIDENCE")?,
            _ => return Err(internal(&q)),
        }
    }
    let table = tbl.ok_or_else(|| SyntaxError::new("expected a table", Span::default()))?;
    Ok(StatementKind::Insert(Insert {
        table,
        columns,
        rows,
        at_layer,
        alpha,
        confidence,
    }))
}

fn delete_stmt(p: Pair<Rule>) -> Result<StatementKind> {
    let mut tbl = None;
    let mut filter = None;
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_delete | Rule::kw_from => {}
            Rule::table_name => tbl = Some(table(q)?),
            Rule::where_clause => filter = Some(where_clause(q)?),
            _ => return Err(internal(&q)),
        }
    }
    let table = tbl.ok_or_else(|| SyntaxError::new("expected a table", Span::default()))?;
    Ok(StatementKind::Delete(Delete { table, filter }))
}

fn update_stmt(p: Pair<Rule>) -> Result<StatementKind> {
    let mut tbl = None;
    let mut assignments = Vec::new();
    let mut filter = None;
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_update | Rule::kw_set | Rule::comma => {}
            Rule::table_name => tbl = Some(table(q)?),
            Rule::assignment => {
                let sp = span(&q);
                let mut column = None;
                let mut value = None;
                for x in q.into_inner() {
                    match x.as_rule() {
                        Rule::ident => column = Some(ident(x)),
                        Rule::literal => value = Some(literal(x)?),
                        _ => {}
                    }
                }
                match (column, value) {
                    (Some(column), Some(value)) => assignments.push(Assignment {
                        column,
                        value,
                        span: sp,
                    }),
                    _ => return Err(SyntaxError::new("expected `column = value`", sp)),
                }
            }
            Rule::where_clause => filter = Some(where_clause(q)?),
            _ => return Err(internal(&q)),
        }
    }
    let table = tbl.ok_or_else(|| SyntaxError::new("expected a table", Span::default()))?;
    Ok(StatementKind::Update(Update {
        table,
        assignments,
        filter,
    }))
}

fn model_ref(p: Pair<Rule>) -> Result<Spanned<ModelRef>> {
    let sp = span(&p);
    let v = last_child(p)?;
    Ok(match v.as_rule() {
        Rule::kw_current => Spanned::new(ModelRef::Current, sp),
        _ => Spanned::new(ModelRef::Path(string(v)?.value), sp),
    })
}

fn diff_stmt(p: Pair<Rule>) -> Result<StatementKind> {
    let mut operands = Vec::new();
    let mut into_patch = None;
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_diff => {}
            Rule::diff_operand => operands.push(model_ref(q)?),
            Rule::into_patch_clause => set(&mut into_patch, clause_str(q)?, "INTO PATCH")?,
            _ => return Err(internal(&q)),
        }
    }
    let mut it = operands.into_iter();
    let left = it
        .next()
        .ok_or_else(|| SyntaxError::new("DIFF needs an operand", Span::default()))?;
    Ok(StatementKind::Diff(Diff {
        left,
        right: it.next(),
        into_patch,
    }))
}

fn compile_stmt(p: Pair<Rule>) -> Result<StatementKind> {
    let (mut source, mut target, mut output) = (None, None, None);
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_compile | Rule::kw_into => {}
            Rule::diff_operand => source = Some(model_ref(q)?),
            Rule::word => {
                target = Some(choose(
                    &q,
                    "COMPILE target",
                    &[
                        ("VINDEX", CompileTarget::Vindex),
                        ("PACKAGE", CompileTarget::Package),
                        ("GGUF", CompileTarget::Gguf),
                    ],
                )?)
            }
            Rule::string => output = Some(string(q)?),
            _ => return Err(internal(&q)),
        }
    }
    match (source, target, output) {
        (Some(source), Some(target), Some(output)) => Ok(StatementKind::Compile(Compile {
            source,
            target,
            output,
        })),
        _ => Err(SyntaxError::new("incomplete COMPILE", Span::default())),
    }
}

fn extract_stmt(p: Pair<Rule>) -> Result<StatementKind> {
    let mut strings = Vec::new();
    let (mut format, mut encoding, mut layers) = (None, None, None);
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_extract | Rule::kw_model | Rule::kw_into => {}
            Rule::string => strings.push(string(q)?),
            Rule::format_clause => {
                let sp = span(&q);
                let w = last_child(q)?;
                let f = choose(
                    &w,
                    "format",
                    &[
                        ("VINDEX3", ExtractFormat::Vindex3),
                        ("PACKAGE", ExtractFormat::Package),
                    ],
                )?;
                set(&mut format, Spanned::new(f.value, sp), "FORMAT")?
            }
            Rule::encoding_clause => {
                let sp = span(&q);
                let w = last_child(q)?;
                let e = choose(
                    &w,
                    "encoding",
                    &[
                        ("SOURCE", Encoding::Source),
                        ("F32", Encoding::F32),
                        ("F16", Encoding::F16),
                        ("BF16", Encoding::Bf16),
                        ("Q8_0", Encoding::Q8_0),
                    ],
                )?;
                set(&mut encoding, Spanned::new(e.value, sp), "ENCODING")?
            }
            Rule::layers_clause => set(&mut layers, layer_spec(q)?, "LAYERS")?,
            _ => return Err(internal(&q)),
        }
    }
    let mut it = strings.into_iter();
    match (it.next(), it.next()) {
        (Some(source), Some(output)) => Ok(StatementKind::Extract(Extract {
            source,
            output,
            format,
            encoding,
            layers,
        })),
        _ => Err(SyntaxError::new("incomplete EXTRACT", Span::default())),
    }
}

fn show_stmt(p: Pair<Rule>) -> Result<StatementKind> {
    let mut what = None;
    let mut like = None;
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_show => {}
            Rule::word => {
                what = Some(choose(
                    &q,
                    "SHOW target",
                    &[
                        ("MODELS", ShowWhat::Models),
                        ("LAYERS", ShowWhat::Layers),
                        ("COMPONENTS", ShowWhat::Components),
                        ("REPRESENTATIONS", ShowWhat::Representations),
                        ("TENSORS", ShowWhat::Tensors),
                        ("PROFILES", ShowWhat::Profiles),
                        ("PATCHES", ShowWhat::Patches),
                    ],
                )?)
            }
            Rule::like_clause => like = Some(clause_str(q)?),
            _ => return Err(internal(&q)),
        }
    }
    let what = what.ok_or_else(|| SyntaxError::new("SHOW needs a target", Span::default()))?;
    Ok(StatementKind::Show(Show { what, like }))
}

// ---- expressions ----------------------------------------------------------------------------

fn too_deep(sp: Span) -> SyntaxError {
    SyntaxError::new(
        format!("expression nested too deeply (more than {MAX_EXPR_DEPTH} levels)"),
        sp,
    )
}

fn literal(p: Pair<Rule>) -> Result<Spanned<Value>> {
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

fn expr(p: Pair<Rule>, depth: usize) -> Result<Expr> {
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
            Rule::operand => operands.push(expr(q, depth + 1)?),
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

// ---- error conversion -------------------------------------------------------------------

/// The token found at `pos`, with a description: a word, a number, a string, a symbol.
fn token_at(src: &str, pos: usize) -> (Span, String) {
    let Some(rest) = src.get(pos..) else {
        return (Span::new(src.len(), src.len()), "end of input".into());
    };
    let Some(c) = rest.chars().next() else {
        return (Span::new(pos, pos), "end of input".into());
    };
    let word_len = |pred: &dyn Fn(char) -> bool| -> usize {
        rest.char_indices()
            .find(|(_, ch)| !pred(*ch))
            .map(|(i, _)| i)
            .unwrap_or(rest.len())
    };
    if c.is_alphabetic() || c == '_' {
        let n = word_len(&|ch: char| ch.is_alphanumeric() || ch == '_');
        let w = &rest[..n];
        (Span::new(pos, pos + n), format!("`{w}`"))
    } else if c.is_ascii_digit() {
        let n = word_len(&|ch: char| ch.is_ascii_alphanumeric() || ch == '.' || ch == '_');
        (Span::new(pos, pos + n), format!("`{}`", &rest[..n]))
    } else if c == '"' || c == '\'' {
        let mut end = rest.len();
        let mut esc = false;
        for (i, ch) in rest.char_indices().skip(1) {
            if esc {
                esc = false;
            } else if ch == '\\' {
                esc = true;
            } else if ch == c {
                end = i + 1;
                break;
            }
        }
        (Span::new(pos, pos + end), "a string".into())
    } else {
        (Span::new(pos, pos + c.len_utf8()), format!("`{c}`"))
    }
}

fn keyword_of(rule: Rule) -> Option<String> {
    let name = format!("{rule:?}");
    name.strip_prefix("kw_").map(|k| k.to_ascii_uppercase())
}

fn describe_rule(rule: Rule) -> String {
    if let Some(k) = keyword_of(rule) {
        return k;
    }
    match rule {
        Rule::string | Rule::dq_string | Rule::sq_string => "a string",
        Rule::number => "a number",
        Rule::integer => "an integer",
        Rule::unsigned => "a layer number",
        Rule::ident => "a column name",
        Rule::word => "a name",
        Rule::table_name => "a table name",
        Rule::semi => "`;`",
        Rule::comma => "`,`",
        Rule::lparen => "`(`",
        Rule::rparen => "`)`",
        Rule::dash => "`-`",
        Rule::eq => "`=`",
        Rule::star => "`*`",
        Rule::cmp_op => "a comparison operator",
        Rule::EOI => "end of input",
        Rule::script | Rule::single | Rule::statement | Rule::explainable => "a statement",
        Rule::literal => "a value",
        Rule::expr
        | Rule::or_expr
        | Rule::and_expr
        | Rule::not_expr
        | Rule::predicate
        | Rule::operand => "an expression",
        Rule::layer_range => "a layer range",
        Rule::use_model => "MODEL",
        Rule::profile_clause => "PROFILE",
        Rule::generate_clause => "GENERATE",
        Rule::max_clause => "MAX",
        Rule::temperature_clause => "TEMPERATURE",
        Rule::top_k_clause => "TOP_K",
        Rule::top_p_clause => "TOP_P",
        Rule::seed_clause => "SEED",
        Rule::stop_clause => "STOP",
        Rule::top_clause => "TOP",
        Rule::layers_clause => "LAYERS",
        Rule::at_layer_clause => "AT",
        Rule::mode_clause => "MODE",
        Rule::detail_clause => "BRIEF, VERBOSE, RAW",
        Rule::where_clause => "WHERE",
        Rule::order_clause => "ORDER",
        Rule::limit_clause => "LIMIT",
        Rule::for_clause => "FOR",
        Rule::decompose_clause => "DECOMPOSE",
        Rule::positions_clause => "POSITIONS",
        Rule::save_clause => "SAVE",
        Rule::alpha_clause => "ALPHA",
        Rule::confidence_clause => "CONFIDENCE",
        Rule::into_patch_clause | Rule::into_clause => "INTO",
        Rule::format_clause => "FORMAT",
        Rule::encoding_clause => "ENCODING",
        Rule::like_clause | Rule::like_tail => "LIKE",
        Rule::column_list | Rule::value_row => "`(`",
        Rule::assignment | Rule::order_item => "a column name",
        Rule::select_list => "`*` or a column name",
        Rule::diff_operand => "CURRENT, a string",
        Rule::cmp_tail => "a comparison operator",
        Rule::in_tail => "IN",
        Rule::between_tail => "BETWEEN",
        Rule::is_null_tail => "IS",
        _ => return format!("{rule:?}").replace('_', " "),
    }
    .to_string()
}

fn join_words(items: &[String]) -> String {
    match items.len() {
        0 => String::new(),
        1 => items[0].clone(),
        n => format!("{} or {}", items[..n - 1].join(", "), items[n - 1]),
    }
}

fn convert_error(e: pest::error::Error<Rule>, src: &str) -> SyntaxError {
    use pest::error::{ErrorVariant, InputLocation};
    let pos = match e.location {
        InputLocation::Pos(p) => p,
        InputLocation::Span((s, _)) => s,
    };
    let (tok_span, found) = token_at(src, pos);
    let positives = match &e.variant {
        ErrorVariant::ParsingError { positives, .. } => positives.clone(),
        ErrorVariant::CustomError { message } => {
            return SyntaxError::new(message.clone(), tok_span);
        }
    };

    let expected_keywords: Vec<String> = positives
        .iter()
        .flat_map(|r| {
            describe_rule(*r)
                .split(", ")
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter(|w| KEYWORDS.contains(&w.as_str()))
        .collect();
    let statement_start = positives.iter().any(|r| {
        matches!(
            r,
            Rule::script | Rule::single | Rule::statement | Rule::explainable
        )
    });
    let found_word = src
        .get(tok_span.range())
        .filter(|w| {
            w.chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_')
        })
        .map(str::to_string);

    // Unknown statement keyword: "unknown keyword WALKK; did you mean WALK?"
    if statement_start {
        if let Some(w) = found_word
            .as_ref()
            .filter(|w| !KEYWORDS.contains(&w.to_ascii_uppercase().as_str()))
        {
            let mut err = SyntaxError::new(format!("unknown keyword {w}"), tok_span)
                .with_label(tok_span, "a statement cannot start with this word");
            let sugg = suggest(w, STATEMENT_KEYWORDS.iter().copied());
            err.help = Some(match sugg {
                Some(s) => {
                    err.message = format!("unknown keyword {w}; did you mean {s}?");
                    format!("did you mean {s}?")
                }
                None => format!(
                    "statements start with one of {}",
                    STATEMENT_KEYWORDS.join(", ")
                ),
            });
            return err;
        }
        let msg = format!("expected a statement, found {found}");
        return SyntaxError::new(msg, tok_span)
            .with_label(tok_span, "expected a statement here")
            .with_help(format!(
                "statements start with one of {}",
                STATEMENT_KEYWORDS.join(", ")
            ));
    }

    let mut words: Vec<String> = Vec::new();
    for r in &positives {
        for d in describe_rule(*r).split(", ") {
            if !words.iter().any(|w| w == d) {
                words.push(d.to_string());
            }
        }
    }
    // Keywords come first, then other tokens, then end of input.
    words.sort_by_key(|w| {
        if w == "end of input" {
            2
        } else if w.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
            0
        } else {
            1
        }
    });
    // Collapse the many ways an expression can start into one phrase.
    if words.iter().any(|w| w == "a column name") && words.iter().any(|w| w == "a number") {
        let starts = [
            "NOT",
            "a string",
            "a number",
            "TRUE",
            "FALSE",
            "NULL",
            "a column name",
            "`(`",
        ];
        words.retain(|w| !starts.contains(&w.as_str()));
        words.insert(0, "an expression".into());
    }
    let expected = join_words(&words);
    let message = if expected.is_empty() {
        format!("unexpected {found}")
    } else {
        format!("expected {expected}, found {found}")
    };
    let mut err =
        SyntaxError::new(message, tok_span).with_label(tok_span, format!("expected {expected}"));
    if let Some(w) = &found_word {
        if let Some(s) = suggest(w, expected_keywords.iter().map(String::as_str)) {
            err.help = Some(format!("did you mean {s}?"));
        }
    }
    if err.help.is_none() && found == "end of input" && words.iter().any(|w| w != "`;`") {
        err.help = Some("the statement is incomplete".into());
    }
    err
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyword_rules_are_listed() {
        // Every keyword rule of the grammar appears in KEYWORDS (tab completion).
        for r in Rule::all_rules() {
            if let Some(k) = keyword_of(*r) {
                assert!(KEYWORDS.contains(&k.as_str()), "KEYWORDS lacks {k}");
            }
        }
    }
}
