//! WALK, EXPLAIN WALK, DESCRIBE and SELECT through `Connection::execute` on SmolLM2.

use lql::{Connection, Rows, Value};

fn conn() -> Connection {
    let c = Connection::open_in_memory().unwrap();
    let path = lql_tests::default_model_path();
    c.execute(&format!("USE {:?}", path.display().to_string()))
        .expect("bind the default model");
    c
}

fn show(r: &Rows) -> String {
    let mut s = r.column_names().join(" | ");
    for row in &r.rows {
        s.push('\n');
        s.push_str(
            &row.iter()
                .map(lql_tests::slt_cell)
                .collect::<Vec<_>>()
                .join(" | "),
        );
    }
    s
}

#[test]
fn walk_defaults_to_residual_and_reports_activations() {
    let c = conn();
    let r = c
        .execute("WALK \"The capital of France is\" TOP 3 LAYERS 28-29")
        .unwrap();
    println!("{}", show(&r));
    assert_eq!(
        r.column_names(),
        [
            "layer",
            "feature",
            "gate",
            "activation",
            "top_token",
            "down_tokens",
            "mode",
            "expert"
        ]
    );
    assert_eq!(r.len(), 6);
    for row in r.iter() {
        assert_eq!(row.get::<_, String>("mode").unwrap(), "RESIDUAL (default)");
        assert!(row.get::<_, f64>("activation").is_ok());
        assert_eq!(row.get::<_, Vec<String>>("down_tokens").unwrap().len(), 5);
    }
    // Layer 29's strongest feature for this prompt (numpy fixture: 545, +12.51).
    let first = r.row(3).unwrap();
    assert_eq!(first.get::<_, i64>("layer").unwrap(), 29);
    assert_eq!(first.get::<_, i64>("feature").unwrap(), 545);
    let e = c
        .execute("WALK \"The capital of France is\" TOP 2 LAYERS 0-0 MODE EMBEDDING")
        .unwrap();
    println!("{}", show(&e));
    assert!(e
        .rows
        .iter()
        .all(|r| r[3] == Value::Null && r[6] == Value::from("EMBEDDING")));
}

#[test]
fn explain_walk_shows_plan_then_rows() {
    let c = conn();
    let r = c
        .execute("EXPLAIN WALK \"The capital of France is\" TOP 2 LAYERS 0-1 MODE EMBEDDING")
        .unwrap();
    let text: Vec<String> = r.rows.iter().map(|r| r[0].to_string()).collect();
    println!("{}", text.join("\n"));
    let all = text.join("\n");
    for needle in [
        "mode EMBEDDING",
        "EmbedLookup",
        "GateScan",
        "L0   ffn_gate Q4_1 [576×1536]  552960 bytes read",
        "FeatureLabels       source token_embedding (tied head) Q8_0 [576×49152]",
        "computed lazily and cached",
        "L1   F",
    ] {
        assert!(all.contains(needle), "missing {needle:?}");
    }
}

#[test]
fn describe_paris_and_france() {
    let c = conn();
    for e in ["Paris", "France"] {
        let r = c.execute(&format!("DESCRIBE \"{e}\"")).unwrap();
        println!("{}", show(&r));
        assert!(!r.is_empty(), "DESCRIBE {e} has edges");
        let v = c.execute(&format!("DESCRIBE \"{e}\" VERBOSE")).unwrap();
        assert!(v.len() >= r.len());
        let raw = c
            .execute(&format!("DESCRIBE \"{e}\" AT LAYER 27 RAW"))
            .unwrap();
        println!("{}", show(&raw));
    }
}

#[test]
fn select_features_layer_pushdown_is_cheap_and_labelled() {
    let c = conn();
    let t0 = std::time::Instant::now();
    let r = c
        .execute("SELECT * FROM features WHERE layer = 5 LIMIT 10")
        .unwrap();
    println!("{}\n({:?})", show(&r), t0.elapsed());
    assert_eq!(r.len(), 10);
    assert_eq!(
        r.column_names(),
        [
            "layer",
            "feature",
            "top_token",
            "top_token_id",
            "c_score",
            "down_tokens",
            "expert"
        ]
    );
    for (i, row) in r.iter().enumerate() {
        assert_eq!(row.get::<_, i64>("layer").unwrap(), 5);
        assert_eq!(row.get::<_, i64>("feature").unwrap(), i as i64);
        assert!(row.get::<_, f64>("c_score").is_ok());
    }
    let r = c
        .execute("SELECT layer, feature, c_score FROM features WHERE layer BETWEEN 3 AND 4 AND feature IN (7, 9) ORDER BY c_score DESC, layer")
        .unwrap();
    println!("{}", show(&r));
    assert_eq!(r.len(), 4);
    let s: Vec<f64> = r
        .iter()
        .map(|x| x.get::<_, f64>("c_score").unwrap())
        .collect();
    assert!(s.windows(2).all(|w| w[0] >= w[1]));
    let r = c
        .execute("SELECT layer, feature, top_token FROM features WHERE layer = 29 AND top_token LIKE '%Paris%'")
        .unwrap();
    println!("{}", show(&r));
}

#[test]
fn select_errors_name_the_column_and_types() {
    let c = conn();
    let e = c.execute("SELECT layer, nope FROM features").unwrap_err();
    println!("{e:?}");
    assert_eq!(e.span, Some(14..18));
    let e = c
        .execute("SELECT * FROM layers WHERE layer = 'five'")
        .unwrap_err();
    println!("{e:?}");
    assert!(e.message.contains("type mismatch"), "{}", e.message);
    let e = c
        .execute("SELECT * FROM features WHERE down_tokens = 'x'")
        .unwrap_err();
    assert!(e.message.contains("type mismatch"), "{}", e.message);
    let e = c.execute("SELECT * FROM layers WHERE layer").unwrap_err();
    assert!(e.message.contains("type mismatch"), "{}", e.message);
}

#[test]
fn select_other_tables() {
    let c = conn();
    let r = c.execute("SELECT * FROM layers WHERE layer < 2").unwrap();
    println!("{}", show(&r));
    assert_eq!(r.len(), 2);
    let r = c
        .execute("SELECT * FROM tokens WHERE id IN (7042, 504) ORDER BY id DESC")
        .unwrap();
    println!("{}", show(&r));
    assert_eq!(
        r.row(0).unwrap().get::<_, String>("text").unwrap(),
        " Paris"
    );
    let r = c
        .execute("SELECT name, dtype, shape, bytes FROM tensors WHERE layer = 0 AND role LIKE 'ffn_%' ORDER BY name")
        .unwrap();
    println!("{}", show(&r));
    assert_eq!(r.len(), 4);
}
