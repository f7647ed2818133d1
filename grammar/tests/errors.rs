//! Malformed inputs with asserted spans. The span expected of the error is marked in
//! the input with `«` and `»` (stripped before parsing); `«»` marks an empty span.

use lql_grammar::{parse, parse_statement, Span, SyntaxError};

/// Strips the markers, parses, and checks the primary span and a message fragment.
fn check(marked: &str, message: &str) -> SyntaxError {
    let start = marked.find('«').expect("start marker");
    let end_marked = marked.find('»').expect("end marker");
    let end = end_marked - '«'.len_utf8();
    let src = marked.replace(['«', '»'], "");
    let err = parse(&src).expect_err(&format!("{src:?} should fail"));
    assert_eq!(
        err.span,
        Span::new(start, end),
        "span for {src:?}: got {:?} ({:?}), message {:?}",
        err.span,
        src.get(err.span.range()),
        err.message
    );
    assert!(
        err.message.contains(message),
        "message for {src:?}: {:?} lacks {message:?}",
        err.message
    );
    err
}

#[test]
fn unknown_statement_keyword_suggests() {
    let e = check(
        "«WALKK» 'France'",
        "unknown keyword WALKK; did you mean WALK?",
    );
    assert_eq!(e.help.as_deref(), Some("did you mean WALK?"));
    check("«selct» * FROM edges", "did you mean SELECT?");
    check("«INFERR» 'x'", "did you mean INFER?");
    let e = check("«frobnicate»", "unknown keyword frobnicate");
    assert!(e.help.unwrap().contains("statements start with"));
    check("STATS; «TOKENISE» 'x'", "did you mean TOKENIZE?");
}

#[test]
fn statement_cannot_start_with_symbol_or_number() {
    check("«12» WALK", "expected a statement");
    check("«(»", "expected a statement");
    check("EXPLAIN «EXPLAIN» WALK 'x'", "expected a statement");
}

#[test]
fn misspelt_clause_keyword() {
    let e = check("WALK 'x' «TOPP» 5", "expected TOP, LAYERS, MODE");
    assert_eq!(e.help.as_deref(), Some("did you mean TOP?"));
    let e = check("GENERATE 'x' «TEMPRATURE» 0.5", "TEMPERATURE");
    assert_eq!(e.help.as_deref(), Some("did you mean TEMPERATURE?"));
}

#[test]
fn strings() {
    let e = check("WALK «'»France", "unterminated string");
    assert_eq!(e.labels[0].1, "this quote is never closed");
    check("WALK 'ok'; TOKENIZE «\"»abc", "unterminated string");
    check("WALK 'a«\\q»b'", "invalid escape");
    check("WALK \"«\\u{110000}»\"", "invalid escape");
    check("WALK \"«\\u{»zz}\"", "invalid escape");
    check("WALK \"«\\u»1234\"", "invalid escape");
}

#[test]
fn numbers() {
    check("WALK 'x' TOP «99999999999999999999»", "number out of range");
    check("GENERATE 'x' TEMPERATURE «1e999»", "number out of range");
    check(
        "WALK 'x' LAYERS «99999999999999999999»",
        "number out of range",
    );
    check("WALK 'x' TOP «1.5»", "expected an integer");
    check("SELECT * FROM edges LIMIT «-»", "expected an integer");
    check(
        "SELECT * FROM edges WHERE a = «99999999999999999999»",
        "number out of range",
    );
}

#[test]
fn incomplete_statements_point_at_end() {
    check("WALK«»", "expected a string, found end of input");
    check("WALK 'x' TOP«»", "expected an integer");
    check("WALK 'x' LAYERS 3-«»", "expected a layer number");
    check("SELECT * FROM features WHERE«»", "expected an expression");
    check(
        "SELECT * FROM edges WHERE a = 1 AND«»",
        "expected an expression",
    );
    check("DIFF«»", "expected CURRENT or a string");
    check("INSERT INTO edges (a) VALUES«»", "expected `(`");
}

#[test]
fn duplicate_clauses_point_at_second() {
    let e = check("WALK 'x' TOP 5 LAYERS 1 «TOP 6»", "duplicate TOP clause");
    assert_eq!(e.labels[0].0, Span::new(9, 14));
    check(
        "GENERATE 'x' SEED 1 MAX 2 «SEED 3»",
        "duplicate SEED clause",
    );
    check(
        "DESCRIBE 'x' AT LAYER 3 «LAYERS 4-5»",
        "duplicate AT LAYER / LAYERS",
    );
    check("TRACE 'x' DECOMPOSE «DECOMPOSE»", "duplicate DECOMPOSE");
    check(
        "PATCH 'a' FROM 'b' AT LAYER 1 «LAYERS 2»",
        "duplicate LAYERS",
    );
    check(
        "PATCH 'a' FROM 'b' POSITIONS ALL «POSITION 2»",
        "duplicate POSITIONS",
    );
    check(
        "SELECT * FROM edges LIMIT 1 WHERE a = 1 «LIMIT 2»",
        "duplicate LIMIT",
    );
    check("USE 'm' PROFILE 'a' «PROFILE 'b'»", "duplicate PROFILE");
}

#[test]
fn unknown_choice_words() {
    let e = check("WALK 'x' MODE «EMBEDING»", "unknown walk mode `EMBEDING`");
    assert_eq!(e.help.as_deref(), Some("did you mean EMBEDDING?"));
    check("SELECT * FROM «featurs»", "unknown table `featurs`");
    check("SHOW «MODLES»", "unknown SHOW target");
    check(
        "COMPILE CURRENT INTO «VINDX» 'out'",
        "unknown COMPILE target",
    );
    check(
        "EXTRACT MODEL 'a' INTO 'b' FORMAT «VINDEX2»",
        "unknown format",
    );
    check(
        "EXTRACT MODEL 'a' INTO 'b' ENCODING «Q4_K»",
        "unknown encoding",
    );
    check("TRACE 'x' POSITIONS «FIRST»", "expected LAST or ALL");
    check(
        "PATCH 'a' FROM 'b' COMPONENT «resid_post»",
        "unknown component",
    );
    check("PATCH 'a' FROM 'b' METRIC «logits»(' x')", "unknown metric");
    check(
        "PATCH 'a' FROM 'b' BY «gradient»",
        "unknown patching method",
    );
    check(
        "SET STEERING = 'a.gguf' SCALE 2 «SCALE 3»",
        "duplicate SCALE",
    );
    check(
        "PATCH 'a' FROM 'b' BY RUNS STEPS «3»",
        "only attribution takes STEPS",
    );
    check(
        "PATCH 'a' FROM 'b' BY RUNS «BY ATTRIBUTION»",
        "duplicate BY",
    );
}

#[test]
fn patch_clauses_that_contradict() {
    check("«PATCH 'a' LAYERS 1»", "PATCH needs a corruption");
    check(
        "PATCH 'a' FROM 'b' «NOISE ON 'a'»",
        "PATCH takes one corruption",
    );
    check("PATCH 'a' FROM 'b' «SCALE 3»", "SCALE and SEED shape NOISE");
    check(
        "PATCH 'a' FROM 'b' COMPONENT mlp_out «2»",
        "only a head takes a number",
    );
    check(
        "PATCH 'a' FROM 'b' «METRIC LOGIT_DIFF(' x')»",
        "LOGIT_DIFF takes 2 tokens, not 1",
    );
    check(
        "PATCH 'a' FROM 'b' «METRIC PROB(' x', ' y')»",
        "PROB takes 1 token, not 2",
    );
}

#[test]
fn structural_mistakes() {
    check("SELECT a b «c» FROM edges", "expected FROM, WHERE");
    check("EXTRACT MODEL 'a' «'b'»", "expected INTO");
    check("DESCRIBE 'x' AT «5»", "expected LAYER");
    check("UPDATE features SET «WHERE»", "expected a column name");
    check(
        "INSERT INTO edges «VALUES» (1)",
        "expected SELECT, FROM or `(`",
    );
    check("SELECT * FROM edges WHERE a «5»", "a comparison operator");
    check("SELECT * FROM edges WHERE a IN «)»", "expected `(`");
    check("WALK 'x' «'y'»", "found a string");
    check("SAVE «'p'»", "expected STEERING or PATCH");
}

#[test]
fn missing_semicolon_between_statements() {
    let e = check("WALK 'x' TOP 3 «STATS»", "found `STATS`");
    assert_eq!(
        e.help.as_deref(),
        Some("end the previous statement with `;` before starting another")
    );
}

#[test]
fn nesting_is_bounded() {
    let deep = format!(
        "SELECT * FROM edges WHERE {}a = 1{}",
        "(".repeat(200),
        ")".repeat(200)
    );
    let err = parse(&deep).unwrap_err();
    assert!(err.message.contains("nested too deeply"), "{err:?}");
    assert_eq!(err.span.len(), 1);
    let nots = format!("SELECT * FROM edges WHERE {}a = 1", "NOT ".repeat(500));
    let err = parse(&nots).unwrap_err();
    assert!(err.message.contains("nested too deeply"), "{err:?}");
}

#[test]
fn single_statement_entry_point() {
    let err = parse_statement("STATS; SHOW MODELS").unwrap_err();
    assert_eq!(err.span, Span::new(7, 18));
    let err = parse_statement("  ").unwrap_err();
    assert!(err.message.contains("expected a statement"));
    assert!(parse_statement("STATS;").is_ok());
}
