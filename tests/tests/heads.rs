//! The `attention` and `heads` tables: patterns and head scores on SmolLM2 equal the float64
//! numpy reference (`tests/tools/reference_heads.py`, fixture `tests/fixtures/heads/`) within
//! 1e-5; each layer's per-head contributions add up to TRACE … FOR's `attn_contrib` within
//! 1e-5 on SmolLM2 and on every family's tiny GGUF (bias and post-norm families included).

use lql::{Connection, Rows};
use serde_json::Value as Json;

const REPEATED: &str = " apple river green music table cloud seven horse apple river green music table cloud seven horse";

fn fixture() -> Json {
    let p = lql_tests::repo_root().join("tests/fixtures/heads/smollm2_repeated.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn opt(j: &Json) -> Option<f64> {
    j.as_f64()
}

#[test]
fn patterns_and_scores_match_numpy() {
    let conn = lql_tests::connect_default();
    let fx = fixture();
    let mut worst = 0.0f64;
    for (layer, pattern) in fx["patterns"].as_object().unwrap() {
        let rows = conn
            .execute(&format!(
                "SELECT head, query, key, weight FROM attention WHERE prompt = {} AND layer = {layer}",
                lql::quote(REPEATED)
            ))
            .unwrap();
        let n = 16;
        assert_eq!(rows.len(), 9 * n * (n + 1) / 2);
        for r in rows.iter() {
            let (h, q, k): (i64, i64, i64) = (
                r.get("head").unwrap(),
                r.get("query").unwrap(),
                r.get("key").unwrap(),
            );
            let want = pattern[h as usize][q as usize][k as usize]
                .as_f64()
                .unwrap();
            worst = worst.max((r.get::<_, f64>("weight").unwrap() - want).abs());
        }
    }
    eprintln!("attention patterns vs numpy: worst |Δ| = {worst:e}");
    assert!(worst <= 1e-5, "{worst}");
    let rows = conn
        .execute(&format!(
            "SELECT layer, head, prev_token, duplicate_token, induction, contrib FROM heads WHERE prompt = {} AND token = ' apple'",
            lql::quote(REPEATED)
        ))
        .unwrap();
    assert_eq!(rows.len(), 30 * 9);
    let (mut worst_score, mut worst_contrib) = (0.0f64, 0.0f64);
    for r in rows.iter() {
        let (l, h): (i64, i64) = (r.get("layer").unwrap(), r.get("head").unwrap());
        let want = &fx["scores"][l as usize][h as usize];
        for (i, col) in ["prev_token", "duplicate_token", "induction"]
            .iter()
            .enumerate()
        {
            let got: Option<f64> = r.get(*col).unwrap();
            match (got, opt(&want[i])) {
                (Some(a), Some(b)) => worst_score = worst_score.max((a - b).abs()),
                (a, b) => assert_eq!(a.is_some(), b.is_some(), "{col} at {l}.{h}"),
            }
        }
        let want = fx["contrib"][l as usize][h as usize].as_f64().unwrap();
        worst_contrib = worst_contrib.max((r.get::<_, f64>("contrib").unwrap() - want).abs());
    }
    eprintln!("head scores vs numpy: {worst_score:e}; contributions: {worst_contrib:e}");
    assert!(worst_score <= 1e-5, "{worst_score}");
    assert!(worst_contrib <= 1e-4, "{worst_contrib}");
    // The induction heads the docs name.
    let top = conn
        .execute(&format!(
            "SELECT layer, head FROM heads WHERE prompt = {} ORDER BY induction DESC LIMIT 2",
            lql::quote(REPEATED)
        ))
        .unwrap();
    let named: Vec<(i64, i64)> = top
        .iter()
        .map(|r| (r.get("layer").unwrap(), r.get("head").unwrap()))
        .collect();
    assert_eq!(named, [(18, 6), (17, 4)]);
}

/// Per layer: the sum of the `heads` rows' contributions and TRACE's attn_contrib.
fn sums_and_trace(conn: &Connection, prompt: &str, token: &str) -> Vec<(f64, f64)> {
    let heads = conn
        .execute(&format!(
            "SELECT layer, sum(contrib) AS s FROM heads WHERE prompt = {} AND token = {} GROUP BY layer ORDER BY layer",
            lql::quote(prompt),
            lql::quote(token)
        ))
        .unwrap();
    let trace: Rows = conn
        .execute(&format!(
            "TRACE {} FOR {}",
            lql::quote(prompt),
            lql::quote(token)
        ))
        .unwrap();
    let attn: Vec<f64> = trace
        .iter()
        .filter_map(|r| r.get::<_, Option<f64>>("attn_contrib").unwrap())
        .collect();
    assert_eq!(heads.len(), attn.len());
    heads
        .iter()
        .zip(attn)
        .map(|(r, a)| (r.get::<_, f64>("s").unwrap(), a))
        .collect()
}

#[test]
fn head_terms_add_up_to_trace_on_every_family() {
    let conn = lql_tests::connect_default();
    let mut cases = vec![(
        "smollm2".to_string(),
        conn,
        "The capital of France is".to_string(),
        " Paris".to_string(),
    )];
    for f in [
        "llama3", "qwen3", "qwen3moe", "gemma2", "gemma3", "phi3", "gpt2", "gptneox", "olmo2",
    ] {
        let c = Connection::open_in_memory().unwrap();
        let path = lql_tests::repo_root()
            .join("tests/fixtures/families")
            .join(f)
            .join("model.gguf");
        c.execute(&format!("USE {}", lql::quote(&path.to_string_lossy())))
            .unwrap();
        let prompt = "The quick brown fox jumps over the lazy dog.".to_string();
        // A token every fixture's vocabulary holds whole.
        let top = ".".to_string();
        cases.push((f.to_string(), c, prompt, top));
    }
    for (name, conn, prompt, token) in cases {
        let mut worst = 0.0f64;
        for (s, a) in sums_and_trace(&conn, &prompt, &token) {
            worst = worst.max((s - a).abs());
        }
        eprintln!("{name}: heads vs attn_contrib worst |Δ| = {worst:e}");
        assert!(worst <= 1e-5, "{name}: {worst}");
    }
}

#[test]
fn the_tables_need_a_prompt() {
    let conn = lql_tests::connect_default();
    for t in ["attention", "heads"] {
        let e = conn
            .execute(&format!("SELECT * FROM {t} WHERE layer = 1"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("runs a prompt"), "{e}");
    }
    let e = conn
        .execute("SELECT * FROM heads WHERE prompt = 'a b' AND token = ' Paris and'")
        .unwrap_err()
        .to_string();
    assert!(e.contains("exactly one token"), "{e}");
}
