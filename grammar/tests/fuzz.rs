//! Fuzzing the parser: random strings and random token sequences built from keywords,
//! literals and punctuation. Properties: `parse` never panics; whatever parses prints
//! back to text that parses to an equal AST; error spans lie inside the input.
//!
//! `cargo test` runs a bounded number of cases. `LQL_FUZZ_SECS=600 cargo test -p
//! lql-grammar --release --test fuzz -- --nocapture` runs for that many seconds and
//! prints the number of cases run.

use lql_grammar::{
    is_complete, parse, parse_statement, split_statements, CmpOp, Expr, ExprKind, Ident, Span,
    StatementKind, Value, KEYWORDS,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::time::{Duration, Instant};

const PUNCT: &[&str] = &[
    ";", ",", "(", ")", "*", "=", "!=", "<>", "<", "<=", ">", ">=", "-", "--", "\n", "'", "\"",
    "\\", ".", "|>", "{", "}",
];
const LITERALS: &[&str] = &[
    "'France'",
    "\"Paris\"",
    "'it\\'s'",
    "\"\\u{1F600}\"",
    "'\\q'",
    "\"unterminated",
    "0",
    "5",
    "-3",
    "1.5",
    "1e3",
    "-0.25",
    "99999999999999999999",
    "1e999",
    "0-14",
    "3-",
    "ALL",
    "a",
    "layer",
    "feature",
    "token",
    "x_1",
    "features",
    "edges",
    "EMBEDDING",
    "RESIDUAL",
    "VINDEX",
    "é",
    "",
];

fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(KEYWORDS).prop_map(str::to_string),
        2 => prop::sample::select(KEYWORDS).prop_map(|k| k.to_lowercase()),
        3 => prop::sample::select(LITERALS).prop_map(str::to_string),
        3 => prop::sample::select(PUNCT).prop_map(str::to_string),
    ]
}

fn token_sequence() -> impl Strategy<Value = String> {
    prop::collection::vec(
        (token(), prop::sample::select(&[" ", "", "  ", "\t"][..])),
        0..24,
    )
    .prop_map(|v| v.into_iter().map(|(t, s)| t + s).collect())
}

fn random_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-zA-Z0-9 ;,()*='\"\\\\<>!.{}_-]{0,64}",
        token_sequence(),
    ]
}

// ---- random expression trees: print → parse gives the same tree ----------------------

/// The grammar's `reserved` words (grammar/src/lql.pest): never generated as column names.
const RESERVED: &[&str] = &[
    "and", "or", "not", "like", "in", "between", "is", "true", "false", "null", "from", "where",
    "order", "limit", "set", "values", "as", "group", "having", "distinct", "join", "inner",
    "left", "outer", "cross", "on", "using", "offset", "case", "when", "then", "else", "end",
    "cast",
];

fn e(kind: ExprKind) -> Expr {
    Expr {
        kind,
        span: Span::default(),
    }
}

fn leaf() -> impl Strategy<Value = Expr> {
    let column = "[a-z_][a-z0-9_]{0,6}"
        .prop_filter("reserved", |s| !RESERVED.contains(&s.as_str()))
        .prop_map(|name| {
            e(ExprKind::Column(Ident {
                name,
                span: Span::default(),
            }))
        });
    let value = prop_oneof![
        any::<i64>().prop_map(Value::Int),
        any::<f64>()
            .prop_filter("finite", |x| x.is_finite())
            .prop_map(Value::Float),
        any::<String>().prop_map(Value::String),
        any::<bool>().prop_map(Value::Bool),
        Just(Value::Null),
    ]
    .prop_map(|v| e(ExprKind::Literal(v)));
    prop_oneof![column, value]
}

fn cmp_op() -> impl Strategy<Value = CmpOp> {
    prop::sample::select(
        &[
            CmpOp::Eq,
            CmpOp::NotEq,
            CmpOp::Lt,
            CmpOp::LtEq,
            CmpOp::Gt,
            CmpOp::GtEq,
        ][..],
    )
}

fn expr_tree() -> impl Strategy<Value = Expr> {
    leaf().prop_recursive(5, 48, 4, |inner| {
        let b = |x: Expr| Box::new(x);
        prop_oneof![
            (cmp_op(), inner.clone(), inner.clone()).prop_map(move |(op, l, r)| e(
                ExprKind::Compare {
                    op,
                    left: b(l),
                    right: b(r)
                }
            )),
            (inner.clone(), inner.clone(), any::<bool>()).prop_map(move |(x, p, negated)| e(
                ExprKind::Like {
                    expr: b(x),
                    pattern: b(p),
                    negated
                }
            )),
            (
                inner.clone(),
                prop::collection::vec(inner.clone(), 1..4),
                any::<bool>()
            )
                .prop_map(move |(x, list, negated)| e(ExprKind::InList {
                    expr: b(x),
                    list,
                    negated
                })),
            (inner.clone(), inner.clone(), inner.clone(), any::<bool>()).prop_map(
                move |(x, low, high, negated)| e(ExprKind::Between {
                    expr: b(x),
                    low: b(low),
                    high: b(high),
                    negated
                })
            ),
            (inner.clone(), any::<bool>()).prop_map(move |(x, negated)| e(ExprKind::IsNull {
                expr: b(x),
                negated
            })),
            inner.clone().prop_map(move |x| e(ExprKind::Not(b(x)))),
            prop::collection::vec(inner.clone(), 2..4).prop_map(|v| e(ExprKind::And(v))),
            prop::collection::vec(inner, 2..4).prop_map(|v| e(ExprKind::Or(v))),
        ]
    })
}

/// Printing a random tree and parsing it back gives the same tree.
fn check_expr(tree: &Expr) -> Result<(), TestCaseError> {
    let src = format!("SELECT * FROM edges WHERE {tree}");
    let stmt =
        parse_statement(&src).map_err(|err| TestCaseError::fail(format!("{src}: {err:?}")))?;
    let StatementKind::Select(sel) = stmt.kind else {
        return Err(TestCaseError::fail("not a SELECT"));
    };
    let back = sel
        .filter
        .map(|f| f.value)
        .ok_or_else(|| TestCaseError::fail("no WHERE"))?;
    use lql_grammar::SpanVisit;
    prop_assert_eq!(back.without_spans(), tree.without_spans(), "{}", src);
    Ok(())
}

/// The properties every input must satisfy.
fn check(src: &str) -> Result<(), TestCaseError> {
    let _ = is_complete(src);
    for sp in split_statements(src) {
        prop_assert!(sp.end <= src.len() && src.is_char_boundary(sp.start));
    }
    match parse(src) {
        Ok(stmts) => {
            for s in &stmts {
                prop_assert!(s.span.end <= src.len());
                let printed = s.to_string();
                let again = parse_statement(&printed)
                    .map_err(|e| TestCaseError::fail(format!("{src:?} → {printed:?}: {e:?}")))?;
                prop_assert!(
                    s.eq_ignoring_spans(&again),
                    "round trip differs: {:?} → {:?}",
                    src,
                    printed
                );
            }
        }
        Err(e) => {
            prop_assert!(
                e.span.start <= e.span.end && e.span.end <= src.len(),
                "{e:?}"
            );
            prop_assert!(src.is_char_boundary(e.span.start) && src.is_char_boundary(e.span.end));
            prop_assert!(!e.message.is_empty());
        }
    }
    Ok(())
}

fn run_exprs(cases: u32) -> u64 {
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&expr_tree(), |t| check_expr(&t))
        .unwrap_or_else(|e| panic!("{e}"));
    u64::from(cases)
}

fn run(cases: u32, strategy: impl Strategy<Value = String>) -> u64 {
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&strategy, |s| check(&s))
        .unwrap_or_else(|e| panic!("{e}"));
    u64::from(cases)
}

#[test]
fn fuzz_parse_never_panics() {
    let secs: u64 = std::env::var("LQL_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if secs == 0 {
        run(512, random_text());
        run(512, token_sequence());
        run_exprs(256);
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut total = 0u64;
    while Instant::now() < deadline {
        total += run(2000, random_text());
        total += run(2000, token_sequence());
        total += run_exprs(500);
    }
    println!("fuzz: {total} cases in {secs} s");
}

#[test]
fn fuzz_prefixes_of_valid_statements() {
    // Every prefix (at char boundaries) of valid statements: the REPL sees these.
    let src = "USE MODEL 'm' LAYERS 0-3 PROFILE \"p\"; WALK 'Fr\\u{e9}' TOP 5 MODE RESIDUAL; \
               SELECT a, b FROM edges WHERE NOT (a = 1 OR b IN (1, 'x')) AND c BETWEEN 1 AND 2 \
               ORDER BY a DESC LIMIT 3; INSERT INTO edges (e, r, t) VALUES ('a', 'b', 'c') \
               AT LAYER 2 ALPHA 0.1; GENERATE 'x' STOP 'a', 'b' TEMPERATURE 0.5; -- end";
    for (i, _) in src.char_indices() {
        check(&src[..i]).unwrap();
    }
}
