//! Every example statement of DESIGN.md §4 (and more) parses, prints and parses back
//! to an equal AST (ignoring spans); printing is a fixed point.

use lql_grammar::*;

const EXAMPLES: &[&str] = &[
    // bind
    r#"USE "/models/smollm2.gguf""#,
    r#"USE MODEL "smollm2-135m-instruct""#,
    r#"USE "pkg" LAYERS 0-14"#,
    r#"USE "pkg" LAYERS 0-14 PROFILE "fast""#,
    r#"use 'c.vindex' profile 'q8' layers 3"#,
    // run
    r#"INFER "The capital of France is""#,
    r#"INFER "The capital of France is" TOP 5"#,
    r#"INFER "Once upon a time" GENERATE 20"#,
    r#"GENERATE "Once upon a time""#,
    r#"GENERATE "Once" MAX 32 TEMPERATURE 0.7 TOP_K 40 TOP_P 0.95 SEED 42 STOP "\n""#,
    r#"GENERATE "x" STOP "a", 'b' SEED 1 MAX 3"#,
    r#"GENERATE "x" TEMPERATURE 0"#,
    // browse
    r#"WALK "France""#,
    r#"WALK 'France' TOP 5"#,
    r#"WALK "France" TOP 5 LAYERS 20-29 MODE EMBEDDING"#,
    r#"WALK "France" MODE residual LAYERS ALL"#,
    r#"EXPLAIN WALK "France" TOP 3"#,
    r#"DESCRIBE "France""#,
    r#"DESCRIBE "France" AT LAYER 20 VERBOSE"#,
    r#"DESCRIBE "France" LAYERS 10-20 BRIEF"#,
    r#"DESCRIBE "France" RAW"#,
    "SELECT * FROM features",
    "SELECT layer, feature, token FROM features WHERE layer = 20 AND token LIKE 'Par%' ORDER BY score DESC LIMIT 10",
    "SELECT * FROM edges WHERE relation IN ('capital', 'currency') OR NOT (layer BETWEEN 10 AND 20)",
    "SELECT entity, target FROM edges WHERE gate >= 1.5 AND gate < 1e3 AND source != 'probe' AND layer <> 3",
    "SELECT * FROM layers ORDER BY layer ASC, features DESC LIMIT 5",
    "SELECT token_id, token FROM tokens WHERE token_id < 100",
    "SELECT * FROM tensors WHERE dtype = 'Q4_1' AND layer IS NOT NULL",
    "SELECT * FROM representations WHERE fidelity IS NULL OR encoding NOT LIKE 'F%'",
    "SELECT * FROM edges WHERE (a = 1 OR b = 2) AND c = TRUE AND d = FALSE AND e = NULL",
    "SELECT * FROM edges WHERE a NOT IN (1, 2.5, -3) AND b NOT BETWEEN -1 AND 1",
    "SELECT * FROM edges WHERE NOT NOT a = 1",
    "SELECT * FROM edges WHERE (a = 1 OR b = 2) OR c = 3",
    "SELECT * FROM edges WHERE ((a = 1))",
    // the SQL subset: aggregates, GROUP BY, HAVING, aliases, arithmetic, DISTINCT
    "SELECT layer, count(*) AS n, avg(c_score) FROM features GROUP BY layer ORDER BY layer",
    "SELECT layer, count(*) n FROM features GROUP BY layer HAVING count(*) > 3 ORDER BY n DESC",
    "SELECT DISTINCT kind FROM tokens ORDER BY kind",
    "SELECT count(DISTINCT kind), min(id), max(id), sum(id) FROM tokens",
    "SELECT layer * 2 + 1 AS x, -layer, - 5, (layer + 1) * 2, layer - (1 - 2) FROM layers",
    "SELECT bytes / 1024 % 7 FROM layers WHERE bytes / 2 > 10 + layer ORDER BY bytes / 3 DESC",
    "SELECT id FROM tokens WHERE text = 'it''s' OR text = \"say \"\"hi\"\"\"",
    // observe
    r#"TRACE "The capital of France is""#,
    r#"ANALYZE FEATURES FROM "corpus.txt""#,
    r#"ANALYZE FEATURES FROM "corpus.txt" LAYERS 20-22 TOP 10"#,
    r#"analyze features from 'c.txt' top 5 layers all"#,
    r#"EXPLAIN ANALYZE FEATURES FROM "corpus.txt""#,
    r#"EXPLAIN ANALYZE ANALYZE FEATURES FROM "corpus.txt" TOP 2"#,
    "SELECT rank, token FROM contexts WHERE corpus = 'c.txt' AND layer = 20 AND feature = 412",
    "SELECT * FROM histograms WHERE corpus = 'c.txt' AND count > 0",
    r#"TRACE "The capital of France is" FOR "Paris" DECOMPOSE LAYERS 0-29 POSITIONS ALL SAVE "t.trace""#,
    r#"TRACE "p" POSITIONS LAST FOR " Paris""#,
    r#"PATCH "a b" FROM "a c""#,
    r#"PATCH "a b" FROM "a c" AT LAYER 3 POSITION 1 COMPONENT attn_out METRIC LOGIT_DIFF(" x", " y")"#,
    r#"PATCH "a b" FROM "a c" LAYERS 0-4 POSITIONS TOGETHER COMPONENT head METRIC PROB(" x")"#,
    r#"PATCH "a b" FROM "a c" COMPONENT head 3 POSITIONS LAST METRIC logit(" x")"#,
    r#"PATCH "The Space Needle is in" NOISE ON "Space Needle" SCALE 3 SEED 7 LAYERS ALL COMPONENT mlp_out"#,
    r#"patch 'x y' noise on 'x' positions all component resid_mid"#,
    r#"PATCH "a b" FROM "a c" SAVE "grid.svg" LAYERS 1-2"#,
    r#"PATCH "a b" FROM "a c" BY ATTRIBUTION METRIC LOGIT_DIFF(" x", " y")"#,
    r#"PATCH "a b" NOISE ON "a" by runs COMPONENT head"#,
    r#"PATCH "a b" FROM "a c" BY ATTRIBUTION STEPS 8"#,
    r#"PATCH "The Space Needle is in" NOISE ON "Space Needle" COMPONENT mlp_out WINDOW 10"#,
    r#"SET STEERING = "calm.gguf""#,
    r#"SET steering = "calm.gguf" SCALE -0.5 LAYERS 3-9"#,
    r#"SET STEERING = ("I love it", "great") MINUS ("I hate it", "awful") AT LAYER 6 SCALE 4"#,
    r#"SET STEERING = OFF"#,
    r#"SAVE STEERING "out.gguf""#,
    r#"WITH STEERING "calm.gguf" SCALE 2 GENERATE "Hello" MAX 8"#,
    r#"WITH STEERING ("a") MINUS ("b") LAYERS 2-3 EXPLAIN ANALYZE INFER "x""#,
    r#"EXPLAIN INFER "The capital of France is" TOP 3"#,
    // edit
    r#"INSERT INTO edges (entity, relation, target) VALUES ("Atlantis", "capital", "Poseidonia")"#,
    r#"INSERT INTO edges (entity, relation, target) VALUES ('A', 'r', 'B') AT LAYER 24 ALPHA 0.25"#,
    r#"INSERT INTO edges (entity, relation, target) VALUES ('A', 'r', 'B'), ('C', 'r', 'D') CONFIDENCE 0.9"#,
    r#"INSERT INTO edges SELECT entity, relation, 'Rome' AS target FROM edges WHERE entity = 'A' LIMIT 3 ALPHA 0.5"#,
    r#"INSERT INTO edges FROM "facts.csv" AT LAYER 12"#,
    "DELETE FROM features WHERE layer = 20 AND feature = 4532",
    "DELETE FROM edges",
    "UPDATE features SET token = 'Paris', score = 0.5 WHERE layer = 20 AND feature = 7",
    r#"BEGIN PATCH "medical.vlp""#,
    "SAVE PATCH",
    r#"APPLY PATCH "medical.vlp""#,
    r#"REMOVE PATCH "medical.vlp""#,
    "SHOW PATCHES",
    // compare / persist / maintain
    r#"DIFF "a.vindex" "b.vindex""#,
    "DIFF CURRENT",
    r#"DIFF "a.vindex" "b.vindex" LAYER 3 LIMIT 5 PHYSICAL"#,
    "DIFF CURRENT LAYER 0",
    r#"DIFF "a.vindex" CURRENT INTO PATCH "d.vlp""#,
    r#"COMPILE CURRENT INTO VINDEX "out.vindex""#,
    r#"COMPILE CURRENT INTO PACKAGE "out-pkg""#,
    r#"COMPILE CURRENT INTO GGUF "out.gguf""#,
    r#"EXTRACT MODEL "smollm2.gguf" INTO "smollm2.vindex""#,
    r#"EXTRACT MODEL "src" INTO "out" FORMAT VINDEX3 ENCODING Q8_0"#,
    r#"EXTRACT MODEL "src" INTO "out" FORMAT PACKAGE ENCODING SOURCE LAYERS 0-14"#,
    r#"EXTRACT MODEL "src" INTO "out" ENCODING f16"#,
    r#"EXTRACT MODEL "src" INTO "out" ENCODING BF16"#,
    r#"COMPACT "c.vindex""#,
    r#"COMPACT "c.vindex" INTO "d.vindex""#,
    "VERIFY",
    r#"VERIFY "c.vindex""#,
    r#"VERIFY "pkg" AGAINST "src.gguf""#,
    r#"REPRESENT "text.decoder_stack" FFN AS Q8_0 INTO "c.vindex""#,
    "REPRESENT ALL AS F16",
    r#"RUN STAGE "The capital of France is" INTO "h1.bin""#,
    r#"RUN STAGE FROM "h1.bin" INTO "h2.bin""#,
    r#"INFER FROM "h2.bin" TOP 3"#,
    "SHOW PACKAGE",
    r#"EXTRACT MODEL "m.gguf" INTO "pkg" FORMAT PACKAGE MODEL_ID "a/b:Q4_1" SOURCE_REVISION "r1" PROJECTOR "mmproj.gguf" PROJECTOR "second.gguf""#,
    // introspect
    "SHOW MODELS",
    "SHOW LAYERS",
    "SHOW COMPONENTS",
    "SHOW REPRESENTATIONS",
    "SHOW TENSORS",
    r#"SHOW TENSORS LIKE "blk.0.%""#,
    "SHOW PROFILES",
    "STATS",
    r#"TOKENIZE "Hello, world""#,
    r#"TOKENIZE "tab\there \u{1F600} quote\" back\\ 'single' \r\n""#,
    r#"TOKENIZE 'it\'s'"#,
    // explain of everything
    r#"EXPLAIN GENERATE "x" MAX 3"#,
    r#"EXPLAIN TRACE "x" DECOMPOSE"#,
    r#"EXPLAIN SELECT * FROM features LIMIT 1"#,
];

fn roundtrip(src: &str) {
    let a = parse_statement(src).unwrap_or_else(|e| panic!("{src}: {e:?}"));
    assert_eq!(a.text(src).trim_end_matches(';'), src.trim_end_matches(';'));
    let printed = a.to_string();
    let b = parse_statement(&printed).unwrap_or_else(|e| panic!("reparse {printed}: {e:?}"));
    assert!(
        a.eq_ignoring_spans(&b),
        "round trip differs for {src}\nprinted: {printed}\n{a:#?}\n{b:#?}"
    );
    assert_eq!(b.to_string(), printed, "printing is not a fixed point");
}

#[test]
fn design_examples_round_trip() {
    for src in EXAMPLES {
        roundtrip(src);
    }
}

#[test]
fn lowercase_and_mixed_case_keywords() {
    for src in EXAMPLES {
        let lower = src.to_lowercase();
        // Lower-casing changes string contents but must still parse.
        if let Err(e) = parse_statement(&lower) {
            // \u{1F600} → \u{1f600} still valid; nothing should fail.
            panic!("{lower}: {e:?}");
        }
    }
}

#[test]
fn script_with_comments_and_semicolons() {
    let src = "-- a script\nUSE \"m.gguf\";\n\nWALK 'x' TOP 2; -- trailing\n;; STATS";
    let stmts = parse(src).unwrap();
    assert_eq!(stmts.len(), 3);
    assert_eq!(stmts[0].text(src), "USE \"m.gguf\"");
    assert_eq!(stmts[1].text(src), "WALK 'x' TOP 2");
    assert_eq!(stmts[2].text(src), "STATS");
    let printed = print_script(&stmts);
    let again = parse(&printed).unwrap();
    assert_eq!(again.len(), 3);
    for (a, b) in stmts.iter().zip(&again) {
        assert!(a.eq_ignoring_spans(b));
    }
    assert!(parse("").unwrap().is_empty());
    assert!(parse("  -- only a comment\n ; ").unwrap().is_empty());
}

#[test]
fn clause_order_is_free() {
    let a = parse_statement("WALK 'x' TOP 5 LAYERS 1-2 MODE RESIDUAL").unwrap();
    let b = parse_statement("WALK 'x' MODE RESIDUAL LAYERS 1-2 TOP 5").unwrap();
    assert!(a.eq_ignoring_spans(&b));
}

#[test]
fn values_and_spans() {
    let src = "WALK 'Fr\\u{e9}nce' TOP 5 LAYERS 3";
    let s = parse_statement(src).unwrap();
    let StatementKind::Walk(w) = &s.kind else {
        panic!()
    };
    assert_eq!(w.prompt.value, "Frénce");
    assert_eq!(&src[w.prompt.span.range()], "'Fr\\u{e9}nce'");
    let top = w.top.as_ref().unwrap();
    assert_eq!(top.value, 5);
    assert_eq!(&src[top.span.range()], "TOP 5");
    let layers = w.layers.as_ref().unwrap();
    assert_eq!(layers.value, LayerSpec::Range { first: 3, last: 3 });
    assert_eq!(&src[layers.span.range()], "LAYERS 3");
}

#[test]
fn expression_shapes() {
    let s = parse_statement("SELECT * FROM edges WHERE a = 1 AND b = 2 OR c = 3 AND NOT d = 4")
        .unwrap();
    let StatementKind::Select(sel) = &s.kind else {
        panic!()
    };
    let e = &sel.filter.as_ref().unwrap().value;
    let ExprKind::Or(parts) = &e.kind else {
        panic!("{e:?}")
    };
    assert_eq!(parts.len(), 2);
    assert!(matches!(parts[0].kind, ExprKind::And(_)));
    let ExprKind::And(right) = &parts[1].kind else {
        panic!()
    };
    assert!(matches!(right[1].kind, ExprKind::Not(_)));
    assert_eq!(e.to_string(), "a = 1 AND b = 2 OR c = 3 AND NOT d = 4");
    let s = parse_statement("SELECT * FROM edges WHERE x BETWEEN 1 AND 5 AND y = 2").unwrap();
    let StatementKind::Select(sel) = &s.kind else {
        panic!()
    };
    let ExprKind::And(parts) = &sel.filter.as_ref().unwrap().value.kind else {
        panic!()
    };
    assert!(matches!(parts[0].kind, ExprKind::Between { .. }));
}

#[test]
fn statement_names() {
    let s = parse_statement("EXPLAIN WALK 'x'").unwrap();
    assert_eq!(s.name(), "EXPLAIN");
    let StatementKind::Explain(inner) = &s.kind else {
        panic!()
    };
    assert_eq!(inner.name(), "WALK");
    assert_eq!(inner.text("EXPLAIN WALK 'x'"), "WALK 'x'");
}

#[test]
fn sql_string_escapes_and_block_comments() {
    let s = parse_statement("TOKENIZE 'it''s'").unwrap();
    assert!(matches!(&s.kind, lql_grammar::StatementKind::Tokenize(t) if t.value == "it's"));
    let s = parse_statement("TOKENIZE \"a \"\"b\"\"\"").unwrap();
    assert!(matches!(&s.kind, lql_grammar::StatementKind::Tokenize(t) if t.value == "a \"b\""));
    let src = "/* a block\ncomment; with a semicolon */ STATS /* inline */; SHOW /**/ MODELS";
    let stmts = parse(src).unwrap();
    assert_eq!(stmts.len(), 2);
    assert_eq!(lql_grammar::split_statements(src).len(), 2);
    assert!(!lql_grammar::is_complete("STATS /* open"));
    assert!(parse("STATS /* open").is_err());
}
