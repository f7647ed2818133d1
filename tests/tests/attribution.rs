//! PATCH … BY ATTRIBUTION (attribution patching) on SmolLM2: the IOI grid estimated from one
//! clean, one corrupted and one backward pass, and with STEPS (integrated gradients),
//! against the exact grid (the numpy reference's cells, `tests/fixtures/patching/`, which
//! `--test patching` shows the exact grid equals); the estimate is close where the metric
//! is near-linear in the cell; every family's block is attributed, a bank of experts
//! included.

use std::path::PathBuf;

use lql::{Connection, Rows};
use serde_json::Value as Json;

const CLEAN: &str = "After Mary and John went out, John gave a drink to";
const CORRUPTED: &str = "After Mary and John went out, Mary gave a drink to";
const METRIC: &str = "METRIC LOGIT_DIFF(\" Mary\", \" John\")";

fn connect() -> Connection {
    lql_tests::connect_default()
}

fn col(rows: &Rows, name: &str) -> Vec<f64> {
    rows.iter()
        .map(|r| r.get::<_, f64>(name).unwrap())
        .collect()
}

fn pearson(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len() as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let cov: f64 = a.iter().zip(b).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = a.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = b.iter().map(|y| (y - mb).powi(2)).sum();
    cov / (va * vb).sqrt()
}

fn fixture() -> Json {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/patching/smollm2_ioi_resid_pre.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn ioi_grid(conn: &Connection, method: &str) -> Rows {
    conn.execute(&format!(
        "PATCH {} FROM {} {METRIC} {method}",
        lql::quote(CORRUPTED),
        lql::quote(CLEAN)
    ))
    .unwrap()
}

fn exact_cells() -> Vec<f64> {
    fixture()["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_array().unwrap()[2].as_f64().unwrap())
        .collect()
}

/// Plain attribution patching: one backward pass. Its first-order estimate misses where
/// one token's state is swapped wholesale (the name at early layers), as the AtP paper
/// reports; the correlation is printed for docs/interpretability.md.
#[test]
fn ioi_grid_by_attribution_matches_exact_patching_where_it_is_linear() {
    let conn = connect();
    let fx = fixture();
    let rows = ioi_grid(&conn, "BY ATTRIBUTION");
    let cells = fx["cells"].as_array().unwrap();
    assert_eq!(rows.len(), 30 * 12);
    assert_eq!(rows.len(), cells.len());
    // The clean and corrupted metrics are the engine's own passes, as in exact patching.
    let clean = fx["clean"].as_f64().unwrap();
    let corrupted = fx["corrupted"].as_f64().unwrap();
    for r in rows.iter() {
        assert!((r.get::<_, f64>("clean").unwrap() - clean).abs() < 1e-4);
        assert!((r.get::<_, f64>("corrupted").unwrap() - corrupted).abs() < 1e-4);
    }
    let exact = exact_cells();
    let estimated = col(&rows, "patched");
    let r = pearson(&estimated, &exact);
    eprintln!("attribution (one backward pass) vs exact, IOI resid_pre grid: Pearson r = {r:.4}");
    assert!(r >= 0.5, "Pearson r = {r}");
    // Late layers, where the answer sits at the last position, agree closely.
    for ((row, c), e) in rows.iter().zip(cells).zip(&exact) {
        let c = c.as_array().unwrap();
        if c[0].as_i64().unwrap() >= 24 && c[1].as_i64().unwrap() == 11 {
            let got: f64 = row.get("patched").unwrap();
            assert!((got - e).abs() < 0.15 * (clean - corrupted), "{c:?}: {got}");
        }
    }
    // Where a cell changes nothing (positions whose tokens the prompts share, before the
    // names differ), the estimate is zero exactly: the two runs' activations are equal.
    for row in rows.iter() {
        if row.get::<_, i64>("position").unwrap() < 1 {
            assert_eq!(row.get::<_, f64>("patched").unwrap(), corrupted_of(&rows));
        }
    }
}

/// STEPS 8: the gradient averaged along the interpolation from the corrupted input to the
/// clean one. Its estimate follows the exact grid (r ≥ 0.9) and, at the first layer, sums
/// to the whole difference (completeness).
#[test]
fn integrated_gradients_follow_the_exact_grid() {
    let conn = connect();
    let rows = ioi_grid(&conn, "BY ATTRIBUTION STEPS 8");
    let exact = exact_cells();
    let r = pearson(&col(&rows, "patched"), &exact);
    eprintln!("attribution STEPS 8 vs exact, IOI resid_pre grid: Pearson r = {r:.4}");
    assert!(r >= 0.9, "Pearson r = {r}");
    let corrupted = corrupted_of(&rows);
    let gap: f64 = rows.iter().next().unwrap().get::<_, f64>("clean").unwrap() - corrupted;
    let layer0: f64 = rows
        .iter()
        .filter(|r| r.get::<_, i64>("layer").unwrap() == 0)
        .map(|r| r.get::<_, f64>("patched").unwrap() - corrupted)
        .sum();
    eprintln!("layer 0: Σ estimates {layer0:.4}, gap {gap:.4}");
    assert!((layer0 - gap).abs() < 0.02 * gap.abs());
    let e = conn
        .execute(&format!(
            "PATCH {} FROM {} BY ATTRIBUTION STEPS 0",
            lql::quote(CORRUPTED),
            lql::quote(CLEAN)
        ))
        .unwrap_err()
        .to_string();
    assert!(e.contains("STEPS 0 is out of range"), "{e}");
}

fn corrupted_of(rows: &Rows) -> f64 {
    rows.iter().next().unwrap().get("corrupted").unwrap()
}

/// The metric is linear in the last position's final-layer FFN output up to the final
/// norm's scale: restoring it is estimated closely, and every attribution grid is one
/// backward pass whatever its cell count.
#[test]
fn last_layer_cells_are_estimated_closely() {
    let conn = connect();
    let q = |method: &str| {
        format!(
            "PATCH {} FROM {} AT LAYER 29 POSITIONS LAST COMPONENT mlp_out {METRIC} {method}",
            lql::quote(CORRUPTED),
            lql::quote(CLEAN)
        )
    };
    let exact = conn.execute(&q("BY RUNS")).unwrap();
    let est = conn.execute(&q("BY ATTRIBUTION")).unwrap();
    let (e, a) = (col(&exact, "patched")[0], col(&est, "patched")[0]);
    let gap = col(&exact, "clean")[0] - col(&exact, "corrupted")[0];
    eprintln!("layer 29 mlp_out: exact {e:.4}, estimated {a:.4} (gap {gap:.4})");
    assert!((e - a).abs() < 0.1 * gap.abs(), "exact {e}, estimated {a}");
    let plan = conn
        .execute(&format!("EXPLAIN {}", q("BY ATTRIBUTION")))
        .unwrap();
    let text: Vec<String> = plan.iter().map(|r| r.get("plan").unwrap()).collect();
    let text = text.join("\n");
    assert!(
        text.contains("method=attribution runs=clean + corrupted + one backward pass"),
        "{text}"
    );
}

#[test]
fn heads_and_noise_estimate_too() {
    let conn = connect();
    let rows = conn
        .execute(&format!(
            "PATCH {} FROM {} LAYERS 10-11 POSITIONS LAST COMPONENT head {METRIC} BY ATTRIBUTION",
            lql::quote(CORRUPTED),
            lql::quote(CLEAN)
        ))
        .unwrap();
    assert_eq!(rows.len(), 2 * 9, "two layers × 9 heads");
    assert!(col(&rows, "patched").iter().all(|v| v.is_finite()));
    let rows = conn
        .execute(
            "PATCH \"The Eiffel Tower is in the city of\" NOISE ON \"Eiffel Tower\" \
             LAYERS 0-3 METRIC PROB(\" Paris\") BY ATTRIBUTION",
        )
        .unwrap();
    assert_eq!(rows.len(), 4 * 9);
    assert!(col(&rows, "patched").iter().all(|v| v.is_finite()));
}

/// The backward pass runs every block by its steps, a bank of experts included. On the family fixtures (windows
/// and Q/K norms, LayerNorm with learned positions, a parallel residual with partial rotary,
/// post norms, Llama 3 RoPE scaling, fused projections), integrated gradients over the whole
/// input of layer 0 sum to the whole difference (completeness), as the exact restore gives.
/// Gemma 2's random fixture runs too, but its metric swings along the interpolation
/// (slopes of hundreds per unit of the path) beyond what 64 steps integrate; its gradients
/// are checked against finite differences in `exec/tests/grad_families.rs`. A bank of
/// experts (qwen3moe) is attributed with its chosen experts held fixed: the estimate
/// converges, short of the exact restore by the jumps where routing switches.
#[test]
fn every_block_is_attributed_a_bank_of_experts_included() {
    let open = |family: &str| {
        let path = lql_tests::repo_root()
            .join("tests/fixtures/families")
            .join(family)
            .join("model.gguf");
        Connection::open(path.to_str().unwrap()).unwrap()
    };
    let q = |method: &str| {
        format!(
            "PATCH \"The quick brown fox\" FROM \"The quick brown dog\" AT LAYER 0 \
             POSITIONS TOGETHER METRIC LOGIT(\" over\") {method}"
        )
    };
    for family in [
        "llama3", "qwen3", "gemma3", "phi3", "gpt2", "gptneox", "olmo2",
    ] {
        let conn = open(family);
        let exact = conn.execute(&q("BY RUNS")).unwrap();
        let est = conn.execute(&q("BY ATTRIBUTION STEPS 64")).unwrap();
        let (e, a) = (col(&exact, "patched")[0], col(&est, "patched")[0]);
        let gap = col(&exact, "clean")[0] - col(&exact, "corrupted")[0];
        eprintln!("{family}: whole input restored: exact {e:.5}, estimated {a:.5} (gap {gap:.5})");
        assert!(
            (e - a).abs() < 0.01 * gap.abs() + 1e-3,
            "{family}: exact {e}, estimated {a}"
        );
    }
    // The bank model (qwen3moe): its gradient holds each position's chosen experts fixed,
    // so integrated gradients integrate the smooth part of the path and miss the jumps
    // where a position's top-k changes along the interpolation (top-k then softmax is
    // discontinuous there). Measured: exact −4.766, estimated −5.741 with 64 steps and
    // −5.822 with 256 (gap −8.218): the integral has converged (1.0% of the gap between
    // 64 and 256 steps) and the routing switches carry 12–13% of the gap. The gradient
    // itself matches finite differences (`exec/tests/grad_families.rs`).
    let conn = open("qwen3moe");
    let exact = conn.execute(&q("BY RUNS")).unwrap();
    let e = col(&exact, "patched")[0];
    let gap = col(&exact, "clean")[0] - col(&exact, "corrupted")[0];
    let at = |steps: usize| {
        let est = conn
            .execute(&q(&format!("BY ATTRIBUTION STEPS {steps}")))
            .unwrap();
        col(&est, "patched")[0]
    };
    let (a64, a256) = (at(64), at(256));
    eprintln!(
        "qwen3moe: whole input restored: exact {e:.5}, estimated {a64:.5} (64 steps), \
         {a256:.5} (256 steps) (gap {gap:.5})"
    );
    assert!(
        (a64 - a256).abs() < 0.02 * gap.abs(),
        "qwen3moe: 64 steps {a64}, 256 steps {a256}"
    );
    assert!(
        (e - a256).abs() < 0.15 * gap.abs(),
        "qwen3moe: exact {e}, estimated {a256}"
    );
    let est = open("gemma2").execute(&q("BY ATTRIBUTION")).unwrap();
    assert!(col(&est, "patched")[0].is_finite());
    let e = open("gemma2")
        .execute("PATCH \"a b\" FROM \"a c\" BY GRADIENT")
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown patching method"), "{e}");
}
