//! The only module that sees pest: runs the grammar (`lql.pest`) and builds the owned
//! AST from the pairs (statements here, expressions in `expr.rs`); `diagnose.rs` turns
//! pest's errors into [`SyntaxError`]s with words, spans and "did you mean" help.

mod diagnose;
mod expr;
mod from;
mod patch;
mod steering;

use diagnose::convert_error;
use expr::{expr, literal};

use crate::ast::*;
use crate::error::{suggest, SyntaxError};
use crate::keywords::STATEMENT_KEYWORDS;
use crate::scan;
use pest::iterators::Pair;
use pest::Parser as _;

#[derive(pest_derive::Parser)]
#[grammar = "lql.pest"]
struct LqlParser;

type Result<T> = std::result::Result<T, SyntaxError>;

/// Parses a script: zero or more statements separated by `;` (the last `;` optional). A
/// statement parameter (`?`, `:name`) is refused: only a prepared statement holds one
/// ([`parse_with_placeholders`]).
pub fn parse(src: &str) -> Result<Vec<Statement>> {
    let stmts = parse_script(src)?;
    if let Some(p) = crate::params::placeholders(src)?.first() {
        return Err(
            SyntaxError::new("a parameter stands only in a prepared statement", p.span)
                .with_help("prepare the statement and pass the parameter's value when it runs"),
        );
    }
    Ok(stmts)
}

/// Parses one statement whose literals may be placeholders (`?`, `?NNN`, `:name`): each
/// holds a stand-in value at the placeholder's span until the statement is bound
/// (`lql::Statement` sets the values in the parsed statement; the text is parsed once).
pub fn parse_with_placeholders(src: &str) -> Result<Statement> {
    one_statement(src, parse_script(src)?)
}

fn parse_script(src: &str) -> Result<Vec<Statement>> {
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
    one_statement(src, parse(src)?)
}

fn one_statement(src: &str, mut stmts: Vec<Statement>) -> Result<Statement> {
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

/// Whether a literal's text is a statement parameter (its value is bound later).
pub(super) fn is_placeholder(text: &str) -> bool {
    text.starts_with('?') || text.starts_with(':')
}

/// The value a placeholder holds until its statement is bound: one that fits every check
/// the parser makes of a literal (a count of at least 1, a non-empty text).
pub const PLACEHOLDER_INT: i64 = 1;
pub const PLACEHOLDER_TEXT: &str = "?";

fn integer(p: Pair<Rule>) -> Result<Spanned<i64>> {
    if is_placeholder(p.as_str()) {
        return Ok(Spanned::new(PLACEHOLDER_INT, span(&p)));
    }
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
    if is_placeholder(p.as_str()) {
        return Ok(Spanned::new(PLACEHOLDER_INT as f64, span(&p)));
    }
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
    if is_placeholder(raw) {
        return Ok(Spanned::new(PLACEHOLDER_TEXT.to_string(), sp));
    }
    if raw.len() < 2 {
        return Err(SyntaxError::new("unterminated string", sp));
    }
    let body = &raw[1..raw.len() - 1];
    let quote = raw.chars().next().unwrap_or('"');
    Ok(Spanned::new(unescape(body, sp.start + 1, quote)?, sp))
}

/// Resolves backslash escapes and the SQL doubled quote (`''` inside `'…'`).
fn unescape(body: &str, offset: usize, quote: char) -> Result<String> {
    let mut out = String::with_capacity(body.len());
    let mut it = body.char_indices().peekable();
    while let Some((i, c)) = it.next() {
        if c == quote {
            // The grammar only lets a quote inside the body come doubled.
            it.next();
            out.push(c);
            continue;
        }
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

/// `AT LAYER l` as the one-layer range `LAYERS l-l`, spanning the clause.
fn at_layer_spec(p: Pair<Rule>) -> Result<Spanned<LayerSpec>> {
    let at = span(&p);
    let l = unsigned(last_child(p)?)?.value;
    Ok(Spanned::new(LayerSpec::Range { first: l, last: l }, at))
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
    let mut steering = None;
    let mut inner = None;
    let mut inner_span = sp;
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::with_steering => {
                let spec = q
                    .into_inner()
                    .find(|r| r.as_rule() == Rule::steering_spec)
                    .ok_or_else(|| SyntaxError::new("WITH STEERING needs a steering", sp))?;
                steering = Some(steering::steering_spec(spec)?);
            }
            _ => {
                inner_span = span(&q);
                inner = Some(q)
            }
        }
    }
    let inner =
        inner.ok_or_else(|| SyntaxError::new("internal parser error: empty statement", sp))?;
    let kind = statement_kind(inner)?;
    Ok(match steering {
        None => Statement { kind, span: sp },
        Some(steering) => Statement {
            kind: StatementKind::Steered {
                steering,
                statement: Box::new(Statement {
                    kind,
                    span: inner_span,
                }),
            },
            span: sp,
        },
    })
}

fn statement_kind(p: Pair<Rule>) -> Result<StatementKind> {
    Ok(match p.as_rule() {
        Rule::explain_stmt => {
            let mut mode = None;
            let mut inner = None;
            for q in p.into_inner() {
                match q.as_rule() {
                    Rule::explain_mode => mode = q.into_inner().next().map(|m| m.as_rule()),
                    Rule::explainable => inner = Some(q),
                    _ => {}
                }
            }
            let e = inner.ok_or_else(|| {
                SyntaxError::new("expected a statement after EXPLAIN", Span::default())
            })?;
            let stmt = Box::new(statement(e)?);
            match mode {
                Some(Rule::kw_plan) => StatementKind::ExplainPlan(stmt),
                Some(Rule::kw_analyze) => StatementKind::ExplainAnalyze(stmt),
                _ => StatementKind::Explain(stmt),
            }
        }
        Rule::use_stmt => use_stmt(p)?,
        Rule::infer_stmt => infer_stmt(p)?,
        Rule::generate_stmt => generate_stmt(p)?,
        Rule::walk_stmt => walk_stmt(p)?,
        Rule::describe_stmt => describe_stmt(p)?,
        Rule::select_stmt => select_stmt(p)?,
        Rule::trace_stmt => trace_stmt(p)?,
        Rule::patch_stmt => patch::patch_stmt(p)?,
        Rule::insert_stmt => insert_stmt(p)?,
        Rule::evaluate_stmt => evaluate_stmt(p)?,
        Rule::analyze_stmt => analyze_stmt(p)?,
        Rule::delete_stmt => delete_stmt(p)?,
        Rule::update_stmt => update_stmt(p)?,
        Rule::begin_patch_stmt => StatementKind::BeginPatch(first_string(p)?),
        Rule::save_patch_stmt => StatementKind::SavePatch(
            p.clone()
                .into_inner()
                .any(|q| q.as_rule() == Rule::string)
                .then(|| first_string(p))
                .transpose()?,
        ),
        Rule::save_steering_stmt => StatementKind::SaveSteering(first_string(p)?),
        Rule::set_stmt => set_stmt(p)?,
        Rule::apply_patch_stmt => StatementKind::ApplyPatch(first_string(p)?),
        Rule::remove_patch_stmt => StatementKind::RemovePatch(first_string(p)?),
        Rule::diff_stmt => diff_stmt(p)?,
        Rule::compile_stmt => compile_stmt(p)?,
        Rule::extract_stmt => extract_stmt(p)?,
        Rule::represent_stmt => represent_stmt(p)?,
        Rule::inspect_stmt | Rule::precision_stmt => {
            let what = if p.as_rule() == Rule::inspect_stmt {
                ArtifactWhat::Inspect
            } else {
                ArtifactWhat::Precision
            };
            StatementKind::Artifact(Artifact {
                what,
                container: first_string(p)?,
                object: None,
            })
        }
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
            let mut v = Verify {
                target: None,
                against: None,
            };
            for q in p.into_inner() {
                match q.as_rule() {
                    Rule::kw_verify => {}
                    Rule::string => v.target = Some(string(q)?),
                    Rule::against_clause => v.against = Some(clause_str(q)?),
                    _ => return Err(internal(&q)),
                }
            }
            StatementKind::Verify(v)
        }
        Rule::run_stage_stmt => run_stage_stmt(p)?,
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
    let mut backend = None;
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_use => {}
            Rule::string => source = Some(UseSource::Path(string(q)?)),
            Rule::use_model => source = Some(UseSource::Model(first_string(q)?)),
            Rule::layers_clause => set(&mut layers, layer_spec(q)?, "LAYERS")?,
            Rule::profile_clause => set(&mut profile, clause_str(q)?, "PROFILE")?,
            Rule::backend_clause => {
                let sp = span(&q);
                let w = last_child(q)?;
                let b = backend_choice(&w)?;
                set(&mut backend, Spanned::new(b.value, sp), "BACKEND")?
            }
            _ => return Err(internal(&q)),
        }
    }
    let source = source.ok_or_else(|| SyntaxError::new("USE needs a path", Span::default()))?;
    Ok(StatementKind::Use(Use {
        source,
        layers,
        profile,
        backend,
    }))
}

fn backend_choice(p: &Pair<Rule>) -> Result<Spanned<BackendChoice>> {
    choose(
        p,
        "backend",
        &[
            ("CPU", BackendChoice::Cpu),
            ("GPU", BackendChoice::Gpu),
            ("AUTO", BackendChoice::Auto),
        ],
    )
}

/// `SET name = value` (a word or a string).
fn set_stmt(p: Pair<Rule>) -> Result<StatementKind> {
    let sp = span(&p);
    if let Some(s) = p
        .clone()
        .into_inner()
        .find(|q| q.as_rule() == Rule::set_steering)
    {
        return steering::set_steering(s);
    }
    let mut parts = p
        .into_inner()
        .filter(|q| !matches!(q.as_rule(), Rule::kw_set | Rule::eq));
    let name = parts
        .next()
        .ok_or_else(|| SyntaxError::new("SET needs a setting name", sp))?;
    let value = parts
        .next()
        .ok_or_else(|| SyntaxError::new("SET needs a value", sp))?;
    choose(&name, "setting", &[("BACKEND", ())])?;
    let choice = match value.as_rule() {
        Rule::string => {
            let v = string(value.clone())?;
            let options = [
                ("cpu", BackendChoice::Cpu),
                ("gpu", BackendChoice::Gpu),
                ("auto", BackendChoice::Auto),
            ];
            options
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(&v.value))
                .map(|(_, b)| *b)
                .ok_or_else(|| {
                    SyntaxError::new(format!("unknown backend `{}`", v.value), v.span)
                        .with_label(v.span, "expected one of cpu, gpu, auto")
                })?
        }
        _ => backend_choice(&value)?.value,
    };
    Ok(StatementKind::Set(Spanned::new(
        Setting::Backend(choice),
        sp,
    )))
}

fn infer_stmt(p: Pair<Rule>) -> Result<StatementKind> {
    let mut prompt = None;
    let mut from = None;
    let (mut top, mut generate) = (None, None);
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_infer => {}
            Rule::string => prompt = Some(string(q)?),
            Rule::stage_from => from = Some(clause_str(q)?),
            Rule::top_clause => set(&mut top, clause_int(q)?, "TOP")?,
            Rule::generate_clause => set(&mut generate, clause_int(q)?, "GENERATE")?,
            _ => return Err(internal(&q)),
        }
    }
    if let Some(file) = from {
        if let Some(g) = generate {
            return Err(SyntaxError::new(
                "INFER FROM runs the last stage once: GENERATE needs the whole model",
                g.span,
            ));
        }
        return Ok(StatementKind::InferFrom(InferFrom { file, top }));
    }
    Ok(StatementKind::Infer(Infer {
        prompt: need_prompt(prompt)?,
        top,
        generate,
    }))
}

fn run_stage_stmt(p: Pair<Rule>) -> Result<StatementKind> {
    let mut input = None;
    let mut into = None;
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_run | Rule::kw_stage => {}
            Rule::string => input = Some(StageSource::Prompt(string(q)?)),
            Rule::stage_from => input = Some(StageSource::File(clause_str(q)?)),
            Rule::into_clause => into = Some(clause_str(q)?),
            _ => return Err(internal(&q)),
        }
    }
    match (input, into) {
        (Some(input), Some(into)) => Ok(StatementKind::RunStage(RunStage { input, into })),
        _ => Err(SyntaxError::new("incomplete RUN STAGE", Span::default())),
    }
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
        constraint: None,
        repeat_penalty: None,
        frequency_penalty: None,
        presence_penalty: None,
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
            Rule::repeat_penalty_clause => {
                set(&mut g.repeat_penalty, clause_float(q)?, "REPEAT_PENALTY")?
            }
            Rule::frequency_penalty_clause => set(
                &mut g.frequency_penalty,
                clause_float(q)?,
                "FREQUENCY_PENALTY",
            )?,
            Rule::presence_penalty_clause => set(
                &mut g.presence_penalty,
                clause_float(q)?,
                "PRESENCE_PENALTY",
            )?,
            Rule::stop_clause => {
                let sp = span(&q);
                let mut stops = Vec::new();
                for s in q.into_inner().filter(|s| s.as_rule() == Rule::string) {
                    stops.push(string(s)?.value);
                }
                set(&mut g.stop, Spanned::new(stops, sp), "STOP")?
            }
            Rule::schema_clause | Rule::grammar_clause => {
                let sp = span(&q);
                let schema = q.as_rule() == Rule::schema_clause;
                let text = first_string(q)?.value;
                let c = if schema {
                    OutputConstraint::Schema(text)
                } else {
                    OutputConstraint::Grammar(text)
                };
                if let Some(earlier) = &g.constraint {
                    return Err(SyntaxError::new(
                        "GENERATE takes one of SCHEMA and GRAMMAR, not both",
                        sp,
                    )
                    .with_label(earlier.span, "the first is here"));
                }
                g.constraint = Some(Spanned::new(c, sp));
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
    if let Some(t) = p
        .clone()
        .into_inner()
        .find(|q| q.as_rule() == Rule::describe_table)
    {
        let name = t
            .into_inner()
            .find(|q| q.as_rule() == Rule::table_name)
            .ok_or_else(|| {
                SyntaxError::new("DESCRIBE TABLE needs a table name", Span::default())
            })?;
        return Ok(StatementKind::DescribeTable(table(name)?));
    }
    if let Some(o) = p
        .clone()
        .into_inner()
        .find(|q| q.as_rule() == Rule::describe_object)
    {
        let sp = span(&o);
        let mut s = o.into_inner().filter(|q| q.as_rule() == Rule::string);
        let container = string(
            s.next()
                .ok_or_else(|| SyntaxError::new("DESCRIBE OBJECT needs a container", sp))?,
        )?;
        let object = s.next().map(string).transpose()?;
        return Ok(StatementKind::Artifact(Artifact {
            what: ArtifactWhat::DescribeObject,
            container,
            object,
        }));
    }
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

fn table(p: Pair<Rule>) -> Result<Spanned<Table>> {
    let w = last_child(p)?;
    let tables: Vec<(&str, Table)> = Table::ALL.iter().map(|t| (t.name(), *t)).collect();
    choose(&w, "table", &tables).map_err(|e| e.unknown_name("table"))
}

fn select_stmt(p: Pair<Rule>) -> Result<StatementKind> {
    Ok(StatementKind::Select(select(p)?))
}

fn select(p: Pair<Rule>) -> Result<Select> {
    let mut columns = None;
    let mut from = None;
    let mut distinct = None;
    let (mut filter, mut order_by, mut limit, mut offset) = (None, None, None, None);
    let (mut group_by, mut having) = (None, None);
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_select | Rule::kw_from => {}
            Rule::distinct => distinct = Some(span(&q)),
            Rule::select_list => {
                let sp = span(&q);
                let mut items = Vec::new();
                let mut star = false;
                for c in q.into_inner() {
                    match c.as_rule() {
                        Rule::star => star = true,
                        Rule::select_item => items.push(select_item(c)?),
                        _ => {}
                    }
                }
                let list = if star {
                    SelectList::All
                } else {
                    SelectList::Items(items)
                };
                columns = Some(Spanned::new(list, sp));
            }
            Rule::from_clause => from = Some(self::from::from_clause(q)?),
            Rule::where_clause => set(&mut filter, where_clause(q)?, "WHERE")?,
            Rule::group_clause => {
                let sp = span(&q);
                let keys = q
                    .into_inner()
                    .filter(|i| i.as_rule() == Rule::sum_expr)
                    .map(|i| expr(i, 0))
                    .collect::<Result<Vec<_>>>()?;
                set(&mut group_by, Spanned::new(keys, sp), "GROUP BY")?
            }
            Rule::having_clause => set(&mut having, where_clause(q)?, "HAVING")?,
            Rule::order_clause => {
                let sp = span(&q);
                let mut items = Vec::new();
                for it in q.into_inner().filter(|i| i.as_rule() == Rule::order_item) {
                    let isp = span(&it);
                    let mut e = None;
                    let mut direction = None;
                    for x in it.into_inner() {
                        match x.as_rule() {
                            Rule::sum_expr => e = Some(expr(x, 0)?),
                            Rule::kw_asc => direction = Some(SortDirection::Asc),
                            Rule::kw_desc => direction = Some(SortDirection::Desc),
                            _ => {}
                        }
                    }
                    let expr = e.ok_or_else(|| SyntaxError::new("expected a column name", isp))?;
                    items.push(OrderItem {
                        expr,
                        direction,
                        span: isp,
                    });
                }
                set(&mut order_by, Spanned::new(items, sp), "ORDER BY")?
            }
            Rule::limit_clause => set(&mut limit, clause_int(q)?, "LIMIT")?,
            Rule::offset_clause => set(&mut offset, clause_int(q)?, "OFFSET")?,
            _ => return Err(internal(&q)),
        }
    }
    let columns = columns.ok_or_else(|| SyntaxError::new("expected columns", Span::default()))?;
    Ok(Select {
        distinct,
        columns,
        from,
        filter,
        group_by,
        having,
        order_by,
        limit,
        offset,
    })
}

fn select_item(p: Pair<Rule>) -> Result<SelectItem> {
    let sp = span(&p);
    let mut e = None;
    let mut alias = None;
    for x in p.into_inner() {
        match x.as_rule() {
            Rule::expr => e = Some(expr(x, 0)?),
            Rule::ident => alias = Some(ident(x)),
            _ => {}
        }
    }
    let expr = e.ok_or_else(|| SyntaxError::new("expected an expression", sp))?;
    Ok(SelectItem {
        expr,
        alias,
        span: sp,
    })
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
    let mut file = None;
    let mut query = None;
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_insert | Rule::kw_into | Rule::kw_values | Rule::comma => {}
            Rule::select_stmt => query = Some(Box::new(select(q)?)),
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
            Rule::insert_file => file = Some(clause_str(q)?),
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
        file,
        select: query,
        at_layer,
        alpha,
        confidence,
    }))
}

fn evaluate_stmt(p: Pair<Rule>) -> Result<StatementKind> {
    let mut facts = None;
    let mut e = EvaluateEdits {
        facts: Spanned::new(String::new(), Span::default()),
        batch: None,
        per_fact: None,
        limit: None,
        at_layer: None,
        alpha: None,
        save: None,
    };
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_evaluate | Rule::kw_edits | Rule::kw_from => {}
            Rule::string => facts = Some(string(q)?),
            Rule::sequential_clause => set(&mut e.batch, clause_int(q)?, "SEQUENTIAL BATCH")?,
            Rule::per_fact_clause => {
                set(&mut e.per_fact, Spanned::new(true, span(&q)), "PER FACT")?
            }
            Rule::limit_clause => set(&mut e.limit, clause_int(q)?, "LIMIT")?,
            Rule::at_layer_clause => {
                let sp = span(&q);
                let n = unsigned(last_child(q)?)?.value;
                set(&mut e.at_layer, Spanned::new(n, sp), "AT LAYER")?
            }
            Rule::alpha_clause => set(&mut e.alpha, clause_float(q)?, "ALPHA")?,
            Rule::save_clause => set(&mut e.save, clause_str(q)?, "SAVE")?,
            _ => return Err(internal(&q)),
        }
    }
    e.facts = facts.ok_or_else(|| SyntaxError::new("expected a fact file", Span::default()))?;
    Ok(StatementKind::EvaluateEdits(e))
}

fn analyze_stmt(p: Pair<Rule>) -> Result<StatementKind> {
    let (mut corpus, mut layers, mut top) = (None, None, None);
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_analyze | Rule::kw_features | Rule::kw_from => {}
            Rule::string => corpus = Some(string(q)?),
            Rule::layers_clause => set(&mut layers, layer_spec(q)?, "LAYERS")?,
            Rule::top_clause => set(&mut top, clause_int(q)?, "TOP")?,
            _ => return Err(internal(&q)),
        }
    }
    Ok(StatementKind::AnalyzeFeatures(AnalyzeFeatures {
        corpus: corpus
            .ok_or_else(|| SyntaxError::new("expected a corpus file", Span::default()))?,
        layers,
        top,
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
    let (mut into_patch, mut layer, mut limit, mut physical) = (None, None, None, None);
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_diff => {}
            Rule::diff_operand => operands.push(model_ref(q)?),
            Rule::into_patch_clause => set(&mut into_patch, clause_str(q)?, "INTO PATCH")?,
            Rule::diff_layer_clause => {
                let sp = span(&q);
                let n = unsigned(last_child(q)?)?.value;
                set(&mut layer, Spanned::new(n, sp), "LAYER")?
            }
            Rule::limit_clause => set(&mut limit, clause_int(q)?, "LIMIT")?,
            Rule::physical_clause => set(&mut physical, Spanned::new(true, span(&q)), "PHYSICAL")?,
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
        layer,
        limit,
        physical,
    }))
}

fn compile_stmt(p: Pair<Rule>) -> Result<StatementKind> {
    let (mut source, mut target, mut output) = (None, None, None);
    let (mut model_id, mut source_revision) = (None, None);
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_compile | Rule::kw_into => {}
            Rule::model_id_clause => set(&mut model_id, string(last_child(q)?)?, "MODEL_ID")?,
            Rule::source_revision_clause => set(
                &mut source_revision,
                string(last_child(q)?)?,
                "SOURCE_REVISION",
            )?,
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
            model_id,
            source_revision,
        })),
        _ => Err(SyntaxError::new("incomplete COMPILE", Span::default())),
    }
}

fn extract_stmt(p: Pair<Rule>) -> Result<StatementKind> {
    let mut strings = Vec::new();
    let (mut format, mut encoding, mut layers) = (None, None, None);
    let (mut shape, mut group) = (None, None);
    let (mut model_id, mut source_revision) = (None, None);
    let mut projectors = Vec::new();
    let mut labels = None;
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_extract | Rule::kw_model | Rule::kw_into => {}
            Rule::model_id_clause => set(&mut model_id, string(last_child(q)?)?, "MODEL_ID")?,
            Rule::source_revision_clause => set(
                &mut source_revision,
                string(last_child(q)?)?,
                "SOURCE_REVISION",
            )?,
            Rule::string => strings.push(string(q)?),
            Rule::projector_clause => projectors.push(clause_str(q)?),
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
            Rule::shape_clause => {
                let sp = span(&q);
                let w = last_child(q)?;
                let s = choose(
                    &w,
                    "shape",
                    &[("GRAPH", ExtractShape::Graph), ("BANK", ExtractShape::Bank)],
                )?;
                set(&mut shape, Spanned::new(s.value, sp), "SHAPE")?
            }
            Rule::group_width_clause => {
                let sp = span(&q);
                let n = unsigned(last_child(q)?)?;
                set(&mut group, Spanned::new(n.value, sp), "GROUP")?
            }
            Rule::encoding_clause => {
                let sp = span(&q);
                let e = encoding_word(&last_child(q)?)?;
                set(&mut encoding, Spanned::new(e.value, sp), "ENCODING")?
            }
            Rule::layers_clause => set(&mut layers, layer_spec(q)?, "LAYERS")?,
            Rule::with_labels_clause => {
                set(&mut labels, Spanned::new(true, span(&q)), "WITH LABELS")?
            }
            _ => return Err(internal(&q)),
        }
    }
    let mut it = strings.into_iter();
    match (it.next(), it.next()) {
        (Some(source), Some(output)) => Ok(StatementKind::Extract(Extract {
            source,
            output,
            format,
            shape,
            group,
            encoding,
            layers,
            model_id,
            source_revision,
            projectors,
            labels,
        })),
        _ => Err(SyntaxError::new("incomplete EXTRACT", Span::default())),
    }
}

/// An encoding EXTRACT or REPRESENT may write, by name.
fn encoding_word(w: &Pair<Rule>) -> Result<Spanned<Encoding>> {
    choose(
        w,
        "encoding",
        &[
            ("SOURCE", Encoding::Source),
            ("F32", Encoding::F32),
            ("F16", Encoding::F16),
            ("BF16", Encoding::Bf16),
            ("Q8_0", Encoding::Q8_0),
        ],
    )
}

fn represent_stmt(p: Pair<Rule>) -> Result<StatementKind> {
    let sp = span(&p);
    let body = p
        .into_inner()
        .find(|q| q.as_rule() != Rule::kw_represent)
        .ok_or_else(|| SyntaxError::new("incomplete REPRESENT", sp))?;
    let body_span = span(&body);
    let labels = body.as_rule() == Rule::represent_labels;
    let (mut target, mut encoding, mut container, mut ffn) = (None, None, None, None);
    if labels {
        target = Some(Spanned::new(RepresentTarget::Labels, body_span));
    }
    for q in body.into_inner() {
        match q.as_rule() {
            Rule::kw_labels | Rule::kw_as => {}
            Rule::kw_ffn => ffn = Some(span(&q)),
            Rule::kw_all => target = Some(Spanned::new(RepresentTarget::All, span(&q))),
            Rule::string if labels => container = Some(string(q)?),
            Rule::string => {
                let s = string(q)?;
                target = Some(Spanned::new(RepresentTarget::Object(s.value), s.span));
            }
            Rule::word => encoding = Some(encoding_word(&q)?),
            Rule::into_clause => container = Some(clause_str(q)?),
            _ => return Err(internal(&q)),
        }
    }
    let target = target.ok_or_else(|| SyntaxError::new("incomplete REPRESENT", body_span))?;
    Ok(StatementKind::Represent(Represent {
        target,
        encoding,
        ffn,
        container,
    }))
}

fn show_stmt(p: Pair<Rule>) -> Result<StatementKind> {
    let mut what = None;
    let mut like = None;
    let mut container = None;
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_show => {}
            Rule::string => container = Some(string(q)?),
            Rule::word => {
                what = Some(choose(
                    &q,
                    "SHOW target",
                    &[
                        ("MODELS", ShowWhat::Models),
                        ("BACKENDS", ShowWhat::Backends),
                        ("ARCHITECTURES", ShowWhat::Architectures),
                        ("LAYERS", ShowWhat::Layers),
                        ("COMPONENTS", ShowWhat::Components),
                        ("REPRESENTATIONS", ShowWhat::Representations),
                        ("TENSORS", ShowWhat::Tensors),
                        ("PROFILES", ShowWhat::Profiles),
                        ("PATCHES", ShowWhat::Patches),
                        ("TABLES", ShowWhat::Tables),
                        ("PACKAGE", ShowWhat::Package),
                        ("CAPABILITIES", ShowWhat::Capabilities),
                        ("STEERING", ShowWhat::Steering),
                    ],
                )?)
            }
            Rule::like_clause => like = Some(clause_str(q)?),
            _ => return Err(internal(&q)),
        }
    }
    let what = what.ok_or_else(|| SyntaxError::new("SHOW needs a target", Span::default()))?;
    Ok(StatementKind::Show(Show {
        what,
        container,
        like,
    }))
}
