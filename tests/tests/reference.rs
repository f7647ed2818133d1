//! docs/reference.md is generated from the schema source (`lql::reference`): this test
//! fails when the committed file is stale (and prints the command that regenerates it),
//! and checks that every statement of the grammar has a heading whose example parses as
//! that statement.

use lql_grammar::StatementKind as K;

/// Every statement kind's name; the match does not compile when the grammar gains a
/// statement, so the reference cannot silently miss one.
fn name_of(k: &K) -> &'static str {
    match k {
        K::Use(_)
        | K::Infer(_)
        | K::Generate(_)
        | K::Walk(_)
        | K::Describe(_)
        | K::Select(_)
        | K::Trace(_)
        | K::Patch(_)
        | K::Insert(_)
        | K::EvaluateEdits(_)
        | K::AnalyzeFeatures(_)
        | K::Delete(_)
        | K::Update(_)
        | K::BeginPatch(_)
        | K::SavePatch(_)
        | K::Set(_)
        | K::SetSteering(_)
        | K::SaveSteering(_)
        | K::Steered { .. }
        | K::ApplyPatch(_)
        | K::RemovePatch(_)
        | K::Diff(_)
        | K::Compile(_)
        | K::Extract(_)
        | K::Represent(_)
        | K::Artifact(_)
        | K::Compact(_)
        | K::Verify(_)
        | K::Show(_)
        | K::Stats
        | K::Tokenize(_)
        | K::Explain(_)
        | K::ExplainPlan(_)
        | K::ExplainAnalyze(_)
        | K::DescribeTable(_)
        | K::RunStage(_)
        | K::InferFrom(_) => k.name(),
    }
}

const ALL: &[&str] = &[
    "USE",
    "INFER",
    "GENERATE",
    "WALK",
    "DESCRIBE",
    "SELECT",
    "TRACE",
    "PATCH",
    "INSERT",
    "EVALUATE EDITS",
    "ANALYZE FEATURES",
    "DELETE",
    "UPDATE",
    "BEGIN PATCH",
    "SAVE PATCH",
    "SET",
    "SET STEERING",
    "SAVE STEERING",
    "WITH STEERING",
    "APPLY PATCH",
    "REMOVE PATCH",
    "DIFF",
    "COMPILE",
    "EXTRACT",
    "REPRESENT",
    "INSPECT",
    "DESCRIBE OBJECT",
    "PRECISION",
    "COMPACT",
    "VERIFY",
    "SHOW",
    "STATS",
    "TOKENIZE",
    "EXPLAIN",
    "EXPLAIN PLAN",
    "EXPLAIN ANALYZE",
    "DESCRIBE TABLE",
    "RUN STAGE",
    "INFER FROM",
];

#[test]
fn reference_is_current() {
    let path = lql_tests::repo_root().join("docs/reference.md");
    let want = lql::reference::reference_markdown().unwrap();
    if std::env::var("LQL_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &want).unwrap();
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "docs/reference.md is stale; regenerate it with: {}",
        lql::reference::REGENERATE
    );
}

#[test]
fn every_statement_has_a_heading_and_an_example() {
    let docs = lql_planner::schema::statement_docs().unwrap();
    let text = lql::reference::reference_markdown().unwrap();
    for name in ALL {
        let d = docs
            .iter()
            .find(|d| d.name == *name)
            .unwrap_or_else(|| panic!("no reference entry for {name}"));
        let stmt = lql_grammar::parse_statement(d.example)
            .unwrap_or_else(|e| panic!("{name}'s example does not parse: {}", e.message));
        assert_eq!(name_of(&stmt.kind), *name, "example of {name}");
        assert!(
            text.contains(&format!("\n### {name}\n")),
            "no heading for {name}"
        );
    }
    assert_eq!(
        docs.len(),
        ALL.len(),
        "entries beyond the grammar's statements"
    );
}
