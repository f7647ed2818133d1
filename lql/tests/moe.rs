//! A mixture-of-experts model through the engine: STATS and SHOW LAYERS name the bank;
//! browsing its experts (WALK, DESCRIBE, the features table) refuses, naming what is not
//! supported yet.

use lql::Connection;
use lql_storage::format::gguf::synth::TinyModel;

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
            .find(|r| r.get::<String>("key").unwrap() == k)
            .map(|r| r.get::<String>("value").unwrap_or_default())
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
            .get::<String>("ffn_encoding")
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
