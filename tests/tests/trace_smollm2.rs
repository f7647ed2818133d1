//! TRACE and EXPLAIN INFER acceptance on SmolLM2: the logit lens and delta norms equal
//! numpy's (fixtures from `tests/fixtures/trace/gen_trace_fixtures.py`) within 1e-3; FOR's
//! contributions add up to INFER's logit; `.trace` files round-trip; the SVG heatmap has
//! its cells and labels; EXPLAIN INFER's features are WALK RESIDUAL's.

use std::path::PathBuf;
use std::sync::Arc;

use lql::{Connection, Rows, Value};
use lql_exec::browse::{self, WalkMode, WalkOptions};
use lql_exec::trace::{self, CaptureOptions, TraceFile};
use lql_exec::Executor;
use lql_storage::model::OperandSource;
use serde_json::Value as Json;

fn connect() -> Connection {
    lql_tests::connect_default()
}

fn executor() -> Executor {
    let model = Arc::new(lql_storage::import::open(&lql_tests::default_model_path()).unwrap());
    let src: Arc<dyn OperandSource> = model;
    Executor::new(src, 0).unwrap()
}

fn fixture() -> Json {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/trace/trace_smollm2.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn f(rows: &Rows, i: usize, col: &str) -> f64 {
    rows.row(i).unwrap().get::<_, f64>(col).unwrap()
}

fn prompts() -> Vec<String> {
    fixture()["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["prompt"].as_str().unwrap().to_string())
        .collect()
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lql-trace-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn lens_and_norms_match_numpy() {
    let conn = connect();
    let fx = fixture();
    let mut worst = (0.0f64, 0.0f64, 0.0f64);
    for p in fx["prompts"].as_array().unwrap() {
        let prompt = p["prompt"].as_str().unwrap();
        let rows = conn
            .execute(&format!("TRACE {}", lql::quote(prompt)))
            .unwrap();
        assert_eq!(
            rows.column_names(),
            [
                "layer",
                "top_token",
                "top_token_id",
                "top_prob",
                "attn_delta_norm",
                "ffn_delta_norm"
            ]
        );
        // One type per column: `layer` is an integer, NULL on the embedding row.
        assert_eq!(rows.columns[0].ty, lql::ValueType::Int);
        assert!(rows
            .rows
            .iter()
            .all(|r| matches!(r[0], Value::Null | Value::Int(_))));
        let stages = p["stages"].as_array().unwrap();
        assert_eq!(
            rows.len(),
            stages.len(),
            "{prompt}: emb + one row per layer"
        );
        for (i, s) in stages.iter().enumerate() {
            let row = rows.row(i).unwrap();
            let layer = row.value("layer").unwrap();
            if i == 0 {
                assert!(layer.is_null(), "the embedding row has no layer");
                assert!(row.value("attn_delta_norm").unwrap().is_null());
                assert!(row.value("ffn_delta_norm").unwrap().is_null());
            } else {
                assert_eq!(layer.as_i64(), Some(i as i64 - 1));
            }
            let id = row.get::<_, i64>("top_token_id").unwrap();
            let want_id = s["top_id"].as_i64().unwrap();
            let prob = f(&rows, i, "top_prob");
            let want_prob = s["top_prob"].as_f64().unwrap();
            if id != want_id {
                // Only a near tie may swap the top-1.
                assert!(
                    (s["second_prob"].as_f64().unwrap() - want_prob).abs() <= 1e-3,
                    "{prompt} stage {i}: top-1 {id} vs numpy {want_id}"
                );
            }
            let dp = (prob - want_prob).abs();
            assert!(
                dp <= 1e-3,
                "{prompt} stage {i}: prob {prob} vs numpy {want_prob}"
            );
            worst.0 = worst.0.max(dp);
            if i > 0 {
                for (col, key, w) in [
                    ("attn_delta_norm", "attn_norm", &mut worst.1),
                    ("ffn_delta_norm", "ffn_norm", &mut worst.2),
                ] {
                    let ours = f(&rows, i, col);
                    let want = s[key].as_f64().unwrap();
                    let d = (ours - want).abs();
                    assert!(
                        d <= 1e-3,
                        "{prompt} layer {}: {col} {ours} vs numpy {want}",
                        i - 1
                    );
                    *w = w.max(d);
                }
            }
        }
    }
    eprintln!(
        "max |Δ| vs numpy: prob {:.2e}, attn norm {:.2e}, ffn norm {:.2e}",
        worst.0, worst.1, worst.2
    );
}

#[test]
fn for_contributions_add_up_to_the_final_logit() {
    let conn = connect();
    let mut checked = 0;
    let mut worst = 0.0f64;
    for prompt in prompts() {
        let q = lql::quote(&prompt);
        let infer = conn.execute(&format!("INFER {q} TOP 3")).unwrap();
        for r in infer.iter() {
            let token: String = r.get("token").unwrap();
            let id: i64 = r.get("token_id").unwrap();
            let logit: f64 = r.get("logit").unwrap();
            let prob: f64 = r.get("prob").unwrap();
            let rank: i64 = r.get("rank").unwrap();
            let tr = match conn.execute(&format!("TRACE {q} FOR {}", lql::quote(&token))) {
                Ok(t) => t,
                // A token whose text does not tokenize back to itself cannot be named.
                Err(e) => {
                    assert!(e.to_string().contains("exactly one token"), "{e}");
                    continue;
                }
            };
            assert_eq!(
                tr.column_names(),
                [
                    "layer",
                    "rank",
                    "prob",
                    "attn_contrib",
                    "ffn_contrib",
                    "contrib",
                    "who"
                ]
            );
            let sum: f64 = (0..tr.len()).map(|i| f(&tr, i, "contrib")).sum();
            let d = (sum - logit).abs();
            assert!(
                d <= 1e-3,
                "{prompt} FOR {token:?} (id {id}): Σ contrib {sum} vs INFER logit {logit}"
            );
            worst = worst.max(d);
            for i in 1..tr.len() {
                let a = f(&tr, i, "attn_contrib");
                let b = f(&tr, i, "ffn_contrib");
                assert!((a + b - f(&tr, i, "contrib")).abs() < 1e-9);
                let who: String = tr.row(i).unwrap().get("who").unwrap();
                assert_eq!(who, lql_exec::trace::who(a, b));
            }
            let last = tr.len() - 1;
            assert_eq!(tr.row(last).unwrap().get::<_, i64>("rank").unwrap(), rank);
            assert!((f(&tr, last, "prob") - prob).abs() <= 1e-4);
            checked += 1;
        }
    }
    assert!(checked >= 3, "at least one token per prompt: {checked}");
    eprintln!("FOR: {checked} tokens, max |Σ contrib − logit| = {worst:.2e}");
}

#[test]
fn for_needs_one_token_and_names_the_pieces() {
    let conn = connect();
    let e = conn
        .execute("TRACE 'The capital of France is' FOR 'Parisian'")
        .unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains("2 tokens") && m.contains("\"Paris\"") && m.contains("\"ian\""),
        "{m}"
    );
    let e = conn.execute("TRACE 'x' LAYERS 3-40").unwrap_err();
    assert!(e.to_string().contains("40"), "{e}");
}

#[test]
fn decompose_positions_all_and_layers() {
    let conn = connect();
    let rows = conn
        .execute("TRACE 'The capital of France is' DECOMPOSE POSITIONS ALL LAYERS 0-2")
        .unwrap();
    assert_eq!(
        rows.column_names(),
        [
            "position",
            "layer",
            "attn_delta_norm",
            "ffn_delta_norm",
            "residual_norm",
            "attn_share"
        ]
    );
    assert_eq!(rows.len(), 5 * 4, "5 positions × (emb + layers 0-2)");
    for i in 0..rows.len() {
        let r = rows.row(i).unwrap();
        assert_eq!(r.get::<_, i64>("position").unwrap(), (i / 4) as i64);
        if i % 4 == 0 {
            assert!(r.value("attn_share").unwrap().is_null());
            continue;
        }
        let (a, b) = (
            f(&rows, i, "attn_delta_norm"),
            f(&rows, i, "ffn_delta_norm"),
        );
        assert!((f(&rows, i, "attn_share") - a / (a + b)).abs() < 1e-12);
        assert!(f(&rows, i, "residual_norm") > 0.0);
    }
    // The last position's rows agree with the default (LAST) trace.
    let last = conn
        .execute("TRACE 'The capital of France is' LAYERS 0-2")
        .unwrap();
    for l in 1..4 {
        assert_eq!(
            f(&rows, 16 + l, "ffn_delta_norm"),
            f(&last, l, "ffn_delta_norm")
        );
    }
    // LAYERS not starting at 0 drops the emb row.
    let mid = conn
        .execute("TRACE 'The capital of France is' LAYERS 28-29")
        .unwrap();
    assert_eq!(mid.len(), 2);
    assert_eq!(
        mid.row(0).unwrap().value("layer").unwrap().as_i64(),
        Some(28)
    );
}

#[test]
fn trace_file_round_trips() {
    let conn = connect();
    let dir = temp_dir("file");
    let path = dir.join("france.trace");
    let q = format!(
        "TRACE 'The capital of France is' POSITIONS ALL SAVE {}",
        lql::quote(path.to_str().unwrap())
    );
    let rows = conn.execute(&q).unwrap();
    let file = TraceFile::load(&path).unwrap();
    assert_eq!(file.tokens(), [504, 3575, 282, 4649, 314]);
    assert_eq!(file.positions(), [0, 1, 2, 3, 4]);
    assert_eq!(file.meta()["prompt"], "The capital of France is");
    let names: Vec<&str> = file.arrays().iter().map(|a| a.name.as_str()).collect();
    for want in [
        "embedding",
        "residual",
        "attn_delta",
        "ffn_delta",
        "ffn_input",
        "gate",
        "attention",
    ] {
        assert!(names.contains(&want), "{want} in {names:?}");
    }
    let loaded = file.to_trace(&path).unwrap();

    // The same capture again, in memory: the file holds exactly its numbers.
    let exec = executor();
    let fresh = trace::run_trace(
        &exec,
        &[504, 3575, 282, 4649, 314],
        CaptureOptions {
            positions: trace::Positions::All,
            attention: true,
            ffn_activity: true,
        },
    )
    .unwrap();
    assert_eq!(loaded, fresh);

    // The lens of the loaded trace gives the statement's rows back.
    let lens = trace::logit_lens(&exec, &loaded, None).unwrap();
    for i in 0..rows.len() {
        let r = rows.row(i).unwrap();
        let slot = r.get::<_, i64>("position").unwrap() as usize;
        let stage = i % 31;
        let cell = lens.cell(stage, slot);
        assert_eq!(r.get::<_, i64>("top_token_id").unwrap(), cell.top_id as i64);
        assert_eq!(r.get::<_, f64>("top_prob").unwrap(), cell.top_prob as f64);
    }
    // No temporary file is left beside it.
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["france.trace"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn svg_heatmap_has_shaded_cells_and_token_labels() {
    let conn = connect();
    let dir = temp_dir("svg");
    let path = dir.join("lens.svg");
    conn.execute(&format!(
        "TRACE 'The capital of France is' POSITIONS ALL SAVE {}",
        lql::quote(path.to_str().unwrap())
    ))
    .unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    // One filled rect per (stage, position) besides the white background.
    let fills: Vec<&str> = svg
        .split("<rect")
        .skip(1)
        .filter_map(|r| r.split("fill=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(
        fills.len(),
        1 + 31 * 5,
        "background + 31 stages × 5 positions"
    );
    let shaded = fills.iter().filter(|c| **c != "#FFFFFF").count();
    assert!(
        shaded >= 31 * 5 - 5,
        "cells are shaded by probability: {shaded}"
    );
    let distinct: std::collections::HashSet<_> = fills.iter().collect();
    assert!(distinct.len() > 10, "shades vary with probability");
    // Cell labels: the final layer's top-1 at the last position, row and column labels.
    assert!(svg.contains("·Paris"), "the top-1 ' Paris' labels a cell");
    assert!(svg.contains(">\nL29\n<") || svg.contains(">L29<"));
    assert!(svg.contains("emb"));
    assert!(svg.contains("4:·is"));
    assert!(svg.matches("<text").count() >= 31 * 5 + 31 + 5);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn save_into_a_missing_folder_fails_cleanly() {
    let conn = connect();
    let e = conn
        .execute("TRACE 'x' SAVE '/nonexistent-lql-dir/t.trace'")
        .unwrap_err();
    assert_eq!(e.kind, lql::ErrorKind::Io, "{e}");
}

#[test]
fn explain_infer_shows_prediction_lens_features_and_attention() {
    let conn = connect();
    let prompt = "The capital of France is";
    let rows = conn
        .execute(&format!("EXPLAIN INFER {} TOP 3", lql::quote(prompt)))
        .unwrap();
    assert_eq!(
        rows.column_names(),
        ["section", "layer", "item", "value", "detail"]
    );
    let section = |i: usize| rows.row(i).unwrap().get::<_, String>("section").unwrap();
    let infer = conn
        .execute(&format!("INFER {} TOP 3", lql::quote(prompt)))
        .unwrap();
    // The executed tree comes first: INFER's own operators, with their costs.
    let plan_rows = (0..rows.len())
        .take_while(|&i| section(i) == "plan")
        .count();
    assert_eq!(
        plan_rows, 6,
        "Rows, Detokenize, TopK, Head, Forward, Tokenize"
    );
    for i in 0..3 {
        assert_eq!(section(plan_rows + i), "prediction");
        let r = rows.row(plan_rows + i).unwrap();
        let ir = infer.row(i).unwrap();
        assert_eq!(
            r.get::<_, String>("item").unwrap(),
            ir.get::<_, String>("token").unwrap()
        );
        assert!(
            (r.get::<_, f64>("value").unwrap() - ir.get::<_, f64>("prob").unwrap()).abs() < 1e-4
        );
    }
    let count = |s: &str| (0..rows.len()).filter(|&i| section(i) == s).count();
    assert_eq!(count("lens"), 30);
    assert_eq!(count("feature"), 90);
    assert_eq!(count("attention"), 90);

    // The features are WALK RESIDUAL's top 3 of each layer.
    let exec = executor();
    let walk = browse::walk(
        exec.source().as_ref(),
        Some(&exec),
        &[504, 3575, 282, 4649, 314],
        &WalkOptions {
            top: 3,
            layers: None,
            mode: Some(WalkMode::Residual),
        },
    )
    .unwrap();
    let ours: Vec<String> = (0..rows.len())
        .filter(|&i| section(i) == "feature")
        .map(|i| rows.row(i).unwrap().get::<_, String>("item").unwrap())
        .collect();
    let theirs: Vec<String> = walk
        .hits()
        .map(|h| format!("{}:{}", h.layer, h.feature))
        .collect();
    assert_eq!(ours, theirs);
    for i in 0..rows.len() {
        let r = rows.row(i).unwrap();
        match section(i).as_str() {
            "feature" => assert!(r.get::<_, String>("detail").unwrap().contains('→')),
            "attention" => {
                let w = r.get::<_, f64>("value").unwrap();
                assert!((0.0..=1.0).contains(&w));
                assert!(r
                    .get::<_, String>("detail")
                    .unwrap()
                    .starts_with("position "));
            }
            "lens" => {
                let l = r.get::<_, i64>("layer").unwrap();
                if l == 29 {
                    assert_eq!(r.get::<_, String>("item").unwrap(), " Paris");
                }
            }
            _ => {}
        }
    }
}

#[test]
fn for_positions_all_adds_up_at_every_position() {
    let conn = connect();
    let rows = conn
        .execute("TRACE 'The capital of France is' FOR ' Paris' POSITIONS ALL")
        .unwrap();
    assert_eq!(rows.len(), 5 * 31);
    let ids = [504, 3575, 282, 4649, 314];
    let logits = executor().logits_all(&ids).unwrap();
    for (pos, l) in logits.iter().enumerate() {
        let sum: f64 = (pos * 31..(pos + 1) * 31)
            .map(|i| f(&rows, i, "contrib"))
            .sum();
        let want = l.values[7042] as f64;
        assert!(
            (sum - want).abs() <= 1e-3,
            "position {pos}: Σ contrib {sum} vs logit {want}"
        );
    }
}
