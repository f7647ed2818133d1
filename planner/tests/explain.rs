//! EXPLAIN text snapshots (inline expected text) for a few statements.

mod common;

use common::smollm;
use lql_planner::*;

/// The tree EXPLAIN PLAN shows: the inner statement's lowered plan.
fn explain_text(plan: &LogicalPlan) -> String {
    match plan {
        LogicalPlan::Explain(e) => lower(&e.inner).to_string(),
        other => lower(other).to_string(),
    }
}

fn explain(src: &str) -> String {
    let stmt = lql_grammar::parse_statement(src).unwrap();
    let plan = bind(&stmt, &smollm()).unwrap_or_else(|e| panic!("{src}: {e:?}"));
    explain_text(&plan)
}

#[track_caller]
fn snap(src: &str, expected: &str) {
    let got = explain(src);
    assert_eq!(got.trim_end(), expected.trim_end(), "\n--- got ---\n{got}");
}

#[test]
fn walk_embedding() {
    snap(
        "EXPLAIN WALK 'France' TOP 5 LAYERS 20-29 MODE EMBEDDING",
        r#"
Rows [layer, feature, gate, activation, top_token, down_tokens, mode, expert]
  FeatureLabels
    GateScan layers=20-29 top=5 query=embedding encoding=Q4_1 bytes/layer=648.0 KiB total=6.3 MiB
      EmbedLookup position=last
        Tokenize "France"
"#
        .trim_start(),
    );
}

#[test]
fn walk_residual() {
    snap(
        "EXPLAIN WALK 'France' MODE RESIDUAL LAYERS 10-12",
        r#"
Rows [layer, feature, gate, activation, top_token, down_tokens, mode, expert]
  FeatureLabels
    GateScan layers=10-12 top=10 query=residual encoding=Q4_1 bytes/layer=648.0 KiB total=1.9 MiB
      Forward layers=0-12 capture=ffn_input@10-12 positions=last
        Tokenize "France"
"#
        .trim_start(),
    );
}

#[test]
fn infer() {
    snap(
        "EXPLAIN INFER 'The capital of France is' TOP 3",
        r#"
Rows [rank, token, token_id, prob, logit]
  Detokenize
    TopK k=3 softmax
      Head final_norm+output position=last
        Forward layers=0-29
          Tokenize "The capital of France is"
"#
        .trim_start(),
    );
}

#[test]
fn generate() {
    snap(
        "EXPLAIN GENERATE 'Once' MAX 8 TEMPERATURE 0.7 TOP_K 40 SEED 1 STOP '\\n'",
        r#"
Rows [text, token_ids, finish_reason, prompt_tokens, generated_tokens]
  Detokenize
    DecodeLoop max=8 temperature=0.7 top_k=40 seed=1 stop=["\n"]
      Forward layers=0-29
        Tokenize "Once"
"#
        .trim_start(),
    );
}

#[test]
fn select() {
    snap(
        "EXPLAIN SELECT layer, top_token FROM features WHERE layer >= 20 AND top_token LIKE 'Par%' ORDER BY c_score DESC LIMIT 10",
        r#"
Rows [layer, top_token]
  Project layer, top_token
    Limit 10
      Sort c_score DESC
        Filter layer >= 20 AND top_token LIKE "Par%"
          TableScan features layers=20-29 labels=early est_rows=15360 layers_run=0 est_labels=15360 label_source=computed label_work=4.3e11 MACs
"#
        .trim_start(),
    );
}

#[test]
fn trace_and_diff() {
    snap(
        "EXPLAIN TRACE 'x' FOR 'Paris' LAYERS 0-3 POSITIONS ALL SAVE 't.trace'",
        r#"
Rows [position, layer, rank, prob, attn_contrib, ffn_contrib, contrib, who]
  SaveTrace "t.trace"
    LogitLens for="Paris"
      Head final_norm+output position=last
        Forward layers=0-29 capture=residual,attention+ffn_activity positions=all
          Tokenize "x"
"#
        .trim_start(),
    );
    snap(
        "EXPLAIN DIFF 'a.vindex' CURRENT LAYER 3 LIMIT 5",
        r#"
Rows [object, layer, role, representation, change, elements_changed, max_abs_delta, rel_frobenius_delta]
  DiffOperands layer=3 limit=5
    OpenModel "a.vindex"
    Current base+overlays
"#
        .trim_start(),
    );
    snap(
        "EXPLAIN DIFF 'a.vindex' CURRENT INTO PATCH 'd.vlp'",
        r#"
Rows [path, edits, added_features, scales, sha256, base_sha256]
  DiffOperands into_patch="d.vlp"
    OpenModel "a.vindex"
    Current base+overlays
"#
        .trim_start(),
    );
    // INTO PATCH writes the whole change: LAYER, LIMIT and PHYSICAL do not combine with it.
    let stmt =
        lql_grammar::parse_statement("DIFF 'a.vindex' CURRENT LAYER 3 INTO PATCH 'd.vlp'").unwrap();
    let e = bind(&stmt, &smollm()).unwrap_err();
    assert!(format!("{e:?}").contains("LAYER does not apply"), "{e:?}");
}

#[test]
fn explain_plan_itself() {
    let stmt = lql_grammar::parse_statement("EXPLAIN STATS").unwrap();
    let plan = bind(&stmt, &smollm()).unwrap();
    let phys = lower(&plan);
    assert_eq!(phys.statement, "EXPLAIN PLAN");
    assert_eq!(
        phys.to_string().trim_end(),
        "Rows [plan]\n  Explain plan STATS"
    );
    assert_eq!(explain_text(&plan).trim_end(), "Rows [key, value]\n  Stats");
    let ops = lower(
        &bind(
            &lql_grammar::parse_statement("TOKENIZE 'a'").unwrap(),
            &smollm(),
        )
        .unwrap(),
    );
    assert!(matches!(ops.operators()[0], Operator::Tokenize { .. }));
}

#[test]
fn every_statement_lowers() {
    let m = smollm();
    for src in [
        "USE 'm.gguf' LAYERS 0-14 PROFILE 'p'",
        "USE MODEL 'smollm2-135m-instruct'",
        "INFER 'x' GENERATE 4",
        "DESCRIBE 'France' VERBOSE",
        "TRACE 'x' DECOMPOSE",
        "INSERT INTO edges (entity, relation, target) VALUES ('a','b','c') CONFIDENCE 0.5",
        "DELETE FROM edges WHERE layer = 1",
        "UPDATE edges SET target = 'x' WHERE layer = 1",
        "BEGIN PATCH 'p.vlp'",
        "SAVE PATCH",
        "APPLY PATCH 'p.vlp'",
        "REMOVE PATCH 'p.vlp'",
        "SHOW PATCHES",
        "SHOW TENSORS LIKE 'blk.0.%'",
        "DIFF 'a' 'b'",
        "COMPILE CURRENT INTO VINDEX 'o'",
        "EXTRACT MODEL 'a' INTO 'b' FORMAT PACKAGE MODEL_ID 'o/r:d' SOURCE_REVISION 'r' ENCODING Q8_0 LAYERS 0-3",
        "COMPACT 'c' INTO 'd'",
        "VERIFY",
        "STATS",
        "TOKENIZE 'x'",
    ] {
        let stmt = lql_grammar::parse_statement(src).unwrap();
        let plan = bind(&stmt, &m).unwrap_or_else(|e| panic!("{src}: {e:?}"));
        let text = lower(&plan).to_string();
        assert!(!text.is_empty());
        assert_eq!(lower(&plan).statement, plan.name());
        // EXPLAIN of each statement binds and gives the same text.
        let ex = lql_grammar::parse_statement(&format!("EXPLAIN {src}")).unwrap();
        assert_eq!(explain_text(&bind(&ex, &m).unwrap()), text);
    }
}

fn warnings(src: &str) -> Vec<String> {
    let stmt = lql_grammar::parse_statement(src).unwrap();
    lower(&bind(&stmt, &smollm()).unwrap()).warnings()
}

#[test]
fn cost_estimates_and_the_label_scan_warning() {
    // A label read before LIMIT with no layer bound labels all 46,080 features, or up to
    // all of them when the scan stops once LIMIT's rows pass (it filters as it goes, or a
    // LIMIT pulls its rows through streaming operators).
    let w = warnings("SELECT * FROM features WHERE top_token = 'Paris' ORDER BY layer LIMIT 1");
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("labels all 46080 features"), "{}", w[0]);
    assert!(w[0].contains("layer BETWEEN"), "{}", w[0]);
    let w = warnings("SELECT * FROM features WHERE top_token = 'Paris' LIMIT 1");
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("labels up to 46080 features"), "{}", w[0]);
    // So does a scan whose rows a LIMIT pulls through a Filter it cannot take (a subquery).
    let w = warnings(
        "SELECT * FROM features WHERE top_token = 'Paris' AND feature IN (SELECT 7) LIMIT 1",
    );
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("labels up to 46080 features"), "{}", w[0]);
    assert!(
        warnings("SELECT top_token, count(*) FROM features GROUP BY top_token")
            .iter()
            .any(|l| l.contains("46080"))
    );
    // A layer bound, or labels only on the rows LIMIT keeps: no warning.
    assert!(warnings("SELECT * FROM features WHERE layer = 5 AND top_token = 'Paris'").is_empty());
    assert!(warnings("SELECT * FROM features LIMIT 10").is_empty());
    let text = explain("SELECT * FROM features LIMIT 10");
    assert!(
        text.contains("est_rows=46080 layers_run=0 est_labels=10"),
        "{text}"
    );
    let text = explain("SELECT layer, count(*) FROM features GROUP BY layer");
    assert!(text.contains("est_rows=46080 layers_run=0\n"), "{text}");
}

/// The grammar's statement list is written once: every statement of the reference
/// (SET included, which the help listed but EXPLAIN PLAN refused) parses under EXPLAIN PLAN.
#[test]
fn every_statement_can_be_explained() {
    for d in lql_planner::schema::statement_docs().unwrap() {
        if d.name.starts_with("EXPLAIN") {
            continue;
        }
        // A prefix of any statement, EXPLAIN included: WITH STEERING … EXPLAIN PLAN ….
        if d.name == "WITH STEERING" {
            let text = "WITH STEERING \"v.gguf\" EXPLAIN PLAN GENERATE \"Hello\" MAX 16";
            let s = lql_grammar::parse_statement(text).unwrap();
            let lql_grammar::StatementKind::Steered { statement, .. } = s.kind else {
                panic!("{text}");
            };
            assert!(matches!(
                statement.kind,
                lql_grammar::StatementKind::ExplainPlan(_)
            ));
            continue;
        }
        let text = format!("EXPLAIN PLAN {}", d.example);
        let s = lql_grammar::parse_statement(&text).unwrap_or_else(|e| panic!("{text}: {e:?}"));
        assert!(
            matches!(s.kind, lql_grammar::StatementKind::ExplainPlan(_)),
            "{text}"
        );
    }
}

#[test]
fn patch_shows_its_runs() {
    snap(
        "EXPLAIN PATCH 'a c' FROM 'a b' METRIC LOGIT_DIFF(' x', ' y')",
        r#"
Rows [layer, position, token, component, head, clean, corrupted, patched, recovered]
  ActivationPatch layers=0-29 positions=all component=resid_pre metric=logit_diff(" x", " y") runs=clean + corrupted + one per cell (30 layers × each position)
    Tokenize "a b"
    Tokenize "a c"
"#
        .trim_start(),
    );
    snap(
        "EXPLAIN PATCH 'The Space Needle is in' NOISE ON 'Space Needle' SEED 2 AT LAYER 5 COMPONENT head POSITIONS TOGETHER",
        r#"
Rows [layer, position, token, component, head, clean, corrupted, patched, recovered]
  ActivationPatch noise=3σ on="Space Needle" seed=2 layers=5 positions=together component=head metric=prob(clean top-1) runs=clean + corrupted + one per cell (1 layer × all positions together × each head)
    Tokenize "The Space Needle is in"
"#
        .trim_start(),
    );
}

/// What each operator runs with is on the operator (not read back from the statement):
/// DESCRIBE's entity is encoded without BOS, a trace file's pass keeps attention and FFN
/// activity, WALK's capture names the layers it scans.
#[test]
fn operators_carry_their_decisions() {
    let m = smollm();
    let text = |src: &str| {
        let stmt = lql_grammar::parse_statement(src).unwrap();
        lower(&bind(&stmt, &m).unwrap()).to_string()
    };
    assert!(text("DESCRIBE 'France'").contains("Tokenize \"France\" bos=no"));
    assert!(
        text("TOKENIZE 'x'").contains("Tokenize \"x\"\n")
            || text("TOKENIZE 'x'").ends_with("Tokenize \"x\"")
    );
    assert!(text("TRACE 'x' SAVE 't.trace'").contains("capture=residual,attention+ffn_activity"));
    assert!(!text("TRACE 'x' SAVE 't.svg'").contains("attention+ffn_activity"));
    assert!(text("WALK 'x' MODE RESIDUAL LAYERS 3-4").contains("capture=ffn_input@3-4"));
}
