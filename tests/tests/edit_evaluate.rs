//! EVALUATE EDITS on SmolLM2 (issue 38): a CounterFact-shaped fact file inserted in
//! sequential batches and scored; every metric equals ROME's and EasyEdit's formulas
//! recomputed by `tests/tools/edit_metrics.py` from the token log-probabilities the
//! statement saved; the edits stay in force and REMOVE PATCH restores the logits bit for
//! bit; and a fact set or an INSERT batch with a row that cannot be edited is refused by
//! name with nothing applied.
//!
//! `tests/fixtures/edit/counterfact_sample.json` holds seven records in CounterFact's shape
//! (`requested_rewrite`, `paraphrase_prompts`, `neighborhood_prompts`, …): six facts of
//! `tests/fixtures/edit/facts.json` rewritten as templates, and one whose targets are two
//! tokens each (" South Africa" for " United States"), so that the per-token averaging is
//! exercised.
//!
//! The Python half needs numpy (CI's venv has it): under `CI=true` a missing one fails.

use std::collections::HashMap;
use std::path::PathBuf;

use lql::{Connection, Rows, Value};

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("edit_evaluate");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn sample() -> String {
    lql_tests::repo_root()
        .join("tests/fixtures/edit/counterfact_sample.json")
        .display()
        .to_string()
}

fn column(rows: &Rows, name: &str) -> usize {
    rows.columns
        .iter()
        .position(|c| c.name == name)
        .unwrap_or_else(|| panic!("no column {name}"))
}

fn text(v: &Value) -> String {
    v.to_string()
}

fn edge_count(c: &Connection) -> i64 {
    match c.execute("SELECT COUNT(*) FROM edges").unwrap().rows[0][0] {
        Value::Int(n) => n,
        ref v => panic!("count {v:?}"),
    }
}

const METRICS: [&str; 9] = [
    "efficacy",
    "paraphrase",
    "neighbourhood",
    "efficacy_diff",
    "paraphrase_diff",
    "neighbourhood_diff",
    "efficacy_acc",
    "paraphrase_acc",
    "locality_acc",
];

#[test]
fn evaluate_edits_scores_by_rome_and_easyedit_formulas() {
    let c = lql_tests::connect_default();
    let probe = "Toyota is a company from";
    let base = c.execute(&format!("INFER {probe:?} TOP 20")).unwrap();
    let saved = scratch("scores.json");
    let _ = std::fs::remove_file(&saved);
    let r = c
        .execute(&format!(
            "EVALUATE EDITS FROM {:?} SEQUENTIAL BATCH 3 PER FACT SAVE {:?}",
            sample(),
            saved.display().to_string()
        ))
        .unwrap();
    // Aggregates (all, first_batch) × 3 stages, then 7 facts × 3 stages.
    assert_eq!(r.rows.len(), 6 + 7 * 3, "{r:?}");
    let (scope, stage, facts) = (
        column(&r, "scope"),
        column(&r, "stage"),
        column(&r, "facts"),
    );
    assert_eq!(text(&r.rows[0][scope]), "all");
    assert_eq!(r.rows[0][facts], Value::Int(7));
    assert_eq!(text(&r.rows[3][scope]), "first_batch");
    assert_eq!(r.rows[3][facts], Value::Int(3));
    // The edits took: every edit prompt now prefers its new target.
    let efficacy = column(&r, "efficacy");
    assert_eq!(text(&r.rows[2][stage]), "final");
    assert_eq!(r.rows[2][efficacy], Value::Float(1.0), "{r:?}");
    match r.rows[0][efficacy] {
        Value::Float(v) => assert!(v < 0.5, "the base model knows most of the facts: {v}"),
        ref v => panic!("efficacy {v:?}"),
    }
    assert_eq!(edge_count(&c), 7);

    // The metrics, recomputed from the saved log-probabilities by the tools' formulas.
    let python = match lql_tests::python_with("numpy") {
        Ok(p) => Some(p),
        Err(why) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("CI=true: {why}")
        }
        Err(why) => {
            eprintln!("skipping the formula check: {why}");
            None
        }
    };
    if let Some(python) = python {
        let out = std::process::Command::new(python)
            .arg(lql_tests::repo_root().join("tests/tools/edit_metrics.py"))
            .arg(&saved)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let want: HashMap<String, serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        let mut checked = 0;
        for row in &r.rows[..6] {
            let key = format!("{}/{}", text(&row[scope]), text(&row[stage]));
            let w = &want[&key];
            for m in METRICS {
                let got = match row[column(&r, m)] {
                    Value::Float(v) => v,
                    ref v => panic!("{key} {m}: {v:?}"),
                };
                let expected = w[m].as_f64().unwrap_or_else(|| panic!("{key} {m}"));
                // Within 0.1 point (values are fractions).
                assert!(
                    (got - expected).abs() <= 1e-3,
                    "{key} {m}: EVALUATE {got}, formula {expected}"
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 54);
        let kl = match r.rows[2][column(&r, "kl")] {
            Value::Float(v) => v,
            ref v => panic!("kl {v:?}"),
        };
        assert!((kl - want["kl"].as_f64().unwrap()).abs() <= 1e-9);
        assert!(kl <= 1e-2, "unrelated-text KL {kl}");
    }

    // The edits are the session's: REMOVE PATCH restores the logits bit for bit.
    c.execute(r#"REMOVE PATCH "(session)""#).unwrap();
    assert_eq!(edge_count(&c), 0);
    let after = c.execute(&format!("INFER {probe:?} TOP 20")).unwrap();
    assert_eq!(after.rows, base.rows);
}

fn evaluate_err(c: &Connection, facts: &std::path::Path) -> lql::Error {
    c.execute(&format!(
        "EVALUATE EDITS FROM {:?}",
        facts.display().to_string()
    ))
    .unwrap_err()
}

#[test]
fn a_fact_that_cannot_be_edited_refuses_the_whole_set() {
    let c = lql_tests::connect_default();
    let facts = scratch("bad_facts.json");
    std::fs::write(
        &facts,
        serde_json::json!({"version": 1, "facts": [
            {"entity": "Toyota", "relation": "company_country", "true": "Japan",
             "new": "Germany", "prompt": "Toyota is a company from"},
            {"entity": "Honda", "relation": "company_country", "true": "Japan",
             "new": "Germany", "prompt": "This company is from"},
        ]})
        .to_string(),
    )
    .unwrap();
    let e = evaluate_err(&c, &facts);
    assert!(
        e.message.contains("fact 1 (Honda → Germany)") && e.message.contains("does not name"),
        "{e}"
    );
    assert_eq!(edge_count(&c), 0);

    // An INSERT batch: the bad row is named, and the good rows before it are not applied.
    for (bad, why) in [
        (
            "('Honda', 'r', 'Germany', 'This company is from')",
            "does not name",
        ),
        (
            "('Honda', 'r', '   ', 'Honda is a company from')",
            "target is empty",
        ),
    ] {
        let e = c
            .execute(&format!(
                "INSERT INTO edges (entity, relation, target, prompt) VALUES \
                 ('Toyota', 'r', 'Germany', 'Toyota is a company from'), {bad}"
            ))
            .unwrap_err();
        assert!(
            e.message.contains("row 2 (Honda") && e.message.contains(why),
            "{e}"
        );
        assert!(e.message.contains("nothing was inserted"), "{e}");
        assert_eq!(edge_count(&c), 0);
    }

    // A malformed file is a format error naming the file and the record.
    std::fs::write(
        &facts,
        r#"[{"requested_rewrite": {"prompt": "{} is", "subject": "A"}}]"#,
    )
    .unwrap();
    let e = evaluate_err(&c, &facts);
    assert_eq!(e.kind, lql::ErrorKind::Format, "{e}");
    assert!(
        e.message
            .contains("record 0: requested_rewrite.target_new is missing"),
        "{e}"
    );
}

#[test]
fn insert_from_a_fact_file_loads_its_rows() {
    let c = lql_tests::connect_default();
    let facts = scratch("two_facts.json");
    std::fs::write(
        &facts,
        serde_json::json!([
            {"entity": "Toyota", "relation": "company_country", "target": "Germany",
             "prompt": "Toyota is a company from"},
            {"entity": "Pizza", "relation": "food_country", "target": "Japan",
             "prompt": "Pizza is a traditional dish from"},
        ])
        .to_string(),
    )
    .unwrap();
    let file = facts.display().to_string();
    let plan = c
        .execute(&format!("EXPLAIN PLAN INSERT INTO edges FROM {file:?}"))
        .unwrap();
    let shown: Vec<String> = plan.rows.iter().map(|r| text(&r[0])).collect();
    assert!(
        shown
            .iter()
            .any(|l| l.contains(&format!("OverlayInsert edges from={file:?} layer=18"))),
        "{shown:?}"
    );
    assert!(
        shown
            .iter()
            .any(|l| l.contains("reads") && l.contains("two_facts.json")),
        "{shown:?}"
    );
    let r = c
        .execute(&format!("INSERT INTO edges FROM {file:?}"))
        .unwrap();
    assert_eq!(r.rows[0][1], Value::Int(2), "{r:?}");
    let top = c
        .execute("INFER 'Pizza is a traditional dish from' TOP 1")
        .unwrap();
    assert_eq!(text(&top.rows[0][1]).trim(), "Japan", "{top:?}");
    assert_eq!(edge_count(&c), 2);
}

#[test]
fn update_edges_rewrites_an_edge_in_one_step() {
    let c = lql_tests::connect_default();
    let prompt = "Toyota is a company from";
    c.execute(&format!(
        "INSERT INTO edges (entity, relation, target, prompt) VALUES \
         ('Toyota', 'company_country', 'Germany', {prompt:?})"
    ))
    .unwrap();
    let top = |c: &Connection| {
        let r = c.execute(&format!("INFER {prompt:?} TOP 1")).unwrap();
        text(&r.rows[0][1]).trim().to_string()
    };
    assert_eq!(top(&c), "Germany");
    let r = c
        .execute("UPDATE edges SET target = 'Italy' WHERE entity = 'Toyota'")
        .unwrap();
    assert_eq!(r.rows[0][1], Value::Int(1), "{r:?}");
    assert_eq!(top(&c), "Italy");
    assert_eq!(edge_count(&c), 1);
    let t = c.execute("SELECT target FROM edges").unwrap();
    assert_eq!(text(&t.rows[0][0]), "Italy");
    // What follows from the edit is not assignable; a target must be text.
    let e = c
        .execute("UPDATE edges SET layer = 3 WHERE entity = 'Toyota'")
        .unwrap_err();
    assert!(
        e.message
            .contains("UPDATE edges sets entity, relation, target or prompt"),
        "{e}"
    );
    let e = c
        .execute("UPDATE edges SET target = '  ' WHERE entity = 'Toyota'")
        .unwrap_err();
    assert!(
        e.message.contains("target must be a non-empty string"),
        "{e}"
    );
    assert_eq!(top(&c), "Italy");
}
