//! A mixture-of-experts model through the engine: STATS and SHOW LAYERS name the bank;
//! browsing its experts (WALK, DESCRIBE, the features table) refuses, naming what is not
//! supported yet.

use lql::Connection;
use lql_storage::format::gguf::synth::TinyModel;

/// The Mixtral-style tiny model with one BPE merge, so its byte-level tokenizer builds and
/// INFER runs on text.
fn open_with_tokenizer() -> (tempfile::TempDir, Connection) {
    use lql_storage::format::gguf::MetaValue;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mixtral.gguf");
    let tiny = TinyModel::mixtral();
    let mut w = tiny.writer().unwrap();
    let mut tokens = lql_storage::format::gguf::synth::byte_level_vocab(tiny.vocab);
    tokens[259] = "ab".into();
    w.set_kv("tokenizer.ggml.tokens", MetaValue::str_array(tokens))
        .unwrap();
    w.set_kv(
        "tokenizer.ggml.merges",
        MetaValue::str_array(vec!["a b".to_string()]),
    )
    .unwrap();
    w.write(&path).unwrap();
    let conn = Connection::open(path.to_str().unwrap()).unwrap();
    (dir, conn)
}

fn open() -> (tempfile::TempDir, Connection) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mixtral.gguf");
    TinyModel::mixtral().write(&path).unwrap();
    let conn = Connection::open(path.to_str().unwrap()).unwrap();
    (dir, conn)
}

#[test]
fn stats_and_layers_name_the_bank() {
    let (_dir, conn) = open();
    let rows = conn.execute("STATS").unwrap();
    let get = |k: &str| {
        (0..rows.len())
            .map(|i| rows.row(i).unwrap())
            .find(|r| r.get::<_, String>("key").unwrap() == k)
            .map(|r| r.get::<_, String>("value").unwrap_or_default())
    };
    assert!(get("experts").is_some());
    assert_eq!(
        get("expert_selection").as_deref(),
        Some("top-k then softmax")
    );
    let layers = conn.execute("SHOW LAYERS").unwrap();
    assert_eq!(
        layers
            .row(0)
            .unwrap()
            .get::<_, String>("ffn_encoding")
            .unwrap(),
        "F32"
    );
}

#[test]
fn browsing_experts_refuses_by_name() {
    let (_dir, conn) = open();
    for q in [
        "WALK 'ab'",
        "DESCRIBE 'ab'",
        "SELECT * FROM features LIMIT 1",
    ] {
        let e = conn.execute(q).unwrap_err().to_string();
        assert!(e.contains("not supported yet"), "{q}: {e}");
    }
}

/// `EXTRACT … SHAPE BANK GROUP n` writes the seed-002 bank shape; bound, it answers INFER
/// exactly as the GGUF, VERIFY passes, and SHOW CAPABILITIES reports the rung.
#[test]
fn bank_shape_extract_infers_as_the_gguf_and_reports_capabilities() {
    let (dir, conn) = open_with_tokenizer();
    let gguf = dir.path().join("mixtral.gguf");
    let out = dir.path().join("mixtral.bank");
    conn.execute(&format!(
        "EXTRACT MODEL '{}' INTO '{}' FORMAT VINDEX3 SHAPE BANK GROUP 2",
        gguf.display(),
        out.display()
    ))
    .unwrap();
    assert!(out.join("moe_manifest.json").is_file());
    let want = conn.execute("INFER 'ab' TOP 5").unwrap();
    let bank = Connection::open(out.to_str().unwrap()).unwrap();
    let got = bank.execute("INFER 'ab' TOP 5").unwrap();
    let col = |r: &lql::Rows| -> Vec<(String, f64)> {
        (0..r.len())
            .map(|i| {
                let row = r.row(i).unwrap();
                (
                    row.get::<_, String>("token").unwrap(),
                    row.get::<_, f64>("logit").unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(col(&want), col(&got));
    let v = bank.execute("VERIFY").unwrap();
    assert!(!v.fault, "{v:?}");
    let caps = bank.execute("SHOW CAPABILITIES").unwrap();
    let row = caps.row(0).unwrap();
    assert_eq!(row.get::<_, String>("programme").unwrap(), "gated-mlp-v1");
    assert_eq!(row.get::<_, String>("grouping").unwrap(), "group of 2");
    assert_eq!(row.get::<_, String>("maturity").unwrap(), "dispatched");
    // The GGUF itself: stacked 3-D expert tensors, same programme.
    let caps = conn.execute("SHOW CAPABILITIES").unwrap();
    assert_eq!(
        caps.row(0).unwrap().get::<_, String>("grouping").unwrap(),
        "stacked"
    );
    // GROUP without SHAPE BANK, and ENCODING with it, refuse by name.
    let e = conn
        .execute(&format!(
            "EXTRACT MODEL '{}' INTO '{}/x' GROUP 2",
            gguf.display(),
            dir.path().display()
        ))
        .unwrap_err()
        .to_string();
    assert!(e.contains("SHAPE BANK"), "{e}");
    let e = conn
        .execute(&format!(
            "EXTRACT MODEL '{}' INTO '{}/y' SHAPE BANK ENCODING F16",
            gguf.display(),
            dir.path().display()
        ))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not supported yet"), "{e}");
    let e = conn
        .execute(&format!(
            "EXTRACT MODEL '{}' INTO '{}/z' SHAPE BANK GROUP 3",
            gguf.display(),
            dir.path().display()
        ))
        .unwrap_err()
        .to_string();
    assert!(e.contains("GROUP 3"), "{e}");
}

/// A bank container whose layer-1 routed bank lost its down region (its schema's role tag
/// rewritten to an unregistered one): USE opens it for browsing, INFER refuses naming the
/// layer, bank, role and segment, and SHOW CAPABILITIES says `representable`.
#[test]
fn bank_missing_down_region_browses_and_refuses_to_infer() {
    let (dir, conn) = open_with_tokenizer();
    let gguf = dir.path().join("mixtral.gguf");
    let out = dir.path().join("mixtral.bank");
    conn.execute(&format!(
        "EXTRACT MODEL '{}' INTO '{}' SHAPE BANK",
        gguf.display(),
        out.display()
    ))
    .unwrap();
    let file = out.join("banks/layer_001.lyrw");
    let mut b = std::fs::read(&file).unwrap();
    // Header 24 B, bank descriptors 24 B each, segment descriptors 12 B each, then the
    // routed bank's schemas (20 B): the third is `down` (role at byte 2 of the record).
    let (banks, segs) = (
        u16::from_le_bytes([b[12], b[13]]) as usize,
        u16::from_le_bytes([b[14], b[15]]) as usize,
    );
    let down = 24 + banks * 24 + segs * 12 + 2 * 20 + 2;
    assert_eq!(u16::from_le_bytes([b[down], b[down + 1]]), 3);
    b[down..down + 2].copy_from_slice(&300u16.to_le_bytes());
    std::fs::write(&file, &b).unwrap();

    let bank = Connection::open(out.to_str().unwrap()).unwrap();
    bank.execute("SHOW LAYERS").unwrap();
    bank.execute("TOKENIZE 'ab'").unwrap();
    let e = bank.execute("INFER 'ab'").unwrap_err().to_string();
    for part in [
        "layer 1",
        "bank 0",
        "role down",
        "segment banks/layer_001.lyrw",
    ] {
        assert!(e.contains(part), "{part}: {e}");
    }
    let caps = bank.execute("SHOW CAPABILITIES").unwrap();
    let rungs: Vec<String> = (0..caps.len())
        .map(|i| caps.row(i).unwrap().get::<_, String>("maturity").unwrap())
        .collect();
    assert!(rungs.contains(&"representable".to_string()), "{rungs:?}");
    assert!(rungs.contains(&"dispatched".to_string()), "{rungs:?}");
}

/// `routes` as SQL: the router's choices over a prompt, aggregated with GROUP BY; the
/// rows are the executor's own routes (best first, rank 1 the top choice).
#[test]
fn routes_are_a_table() {
    let (_dir, conn) = open_with_tokenizer();
    let rows = conn
        .execute("SELECT * FROM routes WHERE prompt = 'abc' ORDER BY layer, position, rank")
        .unwrap();
    // 2 layers × 3 positions ('ab' merges: "ab" + "c" = 2 tokens; no BOS) × top-2.
    let n_tokens = conn.execute("TOKENIZE 'abc'").unwrap().len();
    assert_eq!(rows.len(), 2 * n_tokens * 2);
    for i in 0..rows.len() {
        let r = rows.row(i).unwrap();
        assert_eq!(r.get::<_, String>("prompt").unwrap(), "abc");
        let rank = r.get::<_, i64>("rank").unwrap();
        assert!(rank == 1 || rank == 2);
        let e = r.get::<_, i64>("expert").unwrap();
        assert!((0..4).contains(&e));
    }
    // Weights of one position sum to 1 (top-k then softmax).
    let sums = conn
        .execute(
            "SELECT layer, position, sum(weight) AS w FROM routes WHERE prompt = 'abc' \
             GROUP BY layer, position",
        )
        .unwrap();
    assert_eq!(sums.len(), 2 * n_tokens);
    for i in 0..sums.len() {
        let w = sums.row(i).unwrap().get::<_, f64>("w").unwrap();
        assert!((w - 1.0).abs() < 1e-6, "{w}");
    }
    let per = conn
        .execute(
            "SELECT layer, expert, count(*) AS n FROM routes WHERE prompt = 'abc' AND rank = 1 \
             GROUP BY layer, expert ORDER BY layer, expert",
        )
        .unwrap();
    let total: i64 = (0..per.len())
        .map(|i| per.row(i).unwrap().get::<_, i64>("n").unwrap())
        .sum();
    assert_eq!(total as usize, 2 * n_tokens);
    let e = conn
        .execute("SELECT * FROM routes")
        .unwrap_err()
        .to_string();
    assert!(e.contains("WHERE prompt"), "{e}");
    // SHOW TABLES lists routes on a model with a router, with the predicate it needs.
    let tables = conn.execute("SHOW TABLES").unwrap();
    let routes = tables
        .iter()
        .find(|r| r.get::<_, String>("table").unwrap() == "routes")
        .expect("routes listed on a MoE model");
    assert!(routes
        .get::<_, String>("requires")
        .unwrap()
        .contains("WHERE prompt"));
    let plan = conn
        .execute("EXPLAIN PLAN SELECT count(*) FROM routes WHERE prompt = 'abc'")
        .unwrap();
    let text: String = (0..plan.len())
        .map(|i| format!("{:?}\n", plan.row(i).unwrap()))
        .collect();
    assert!(text.contains("prompt="), "{text}");
}
