//! Added features are visible to browsing (issue 11): after an INSERT on SmolLM2, WALK of
//! the edit prompt at the edit's layer lists the added feature (numbered `ffn + i`),
//! `SELECT … FROM features WHERE layer = L AND feature >= ffn` lists it with its label
//! computed from its down vector (towards the target), the subject write's features are
//! listed at their layer, DESCRIBE runs over it, a gate scale
//! shows in the scan, a compiled container walks as the session does, and REMOVE PATCH makes
//! the feature disappear. Run with `--release`.

use std::path::Path;

use lql::{Connection, Rows, Value};
use lql_tests::default_model_path as smollm2;

/// SmolLM2-135M's FFN width.
const FFN: i64 = 1536;

fn q(p: &Path) -> String {
    p.display().to_string().replace('"', "\\\"")
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => panic!("not an int: {other:?}"),
    }
}

/// (feature, gate) of each WALK row.
fn walk_features(r: &Rows) -> Vec<(i64, Value)> {
    let (f, g) = (
        r.column_index("feature").unwrap(),
        r.column_index("gate").unwrap(),
    );
    r.rows.iter().map(|x| (int(&x[f]), x[g].clone())).collect()
}

#[test]
fn added_features_show_in_walk_features_and_describe() {
    let base = smollm2();
    let t = tempfile::tempdir().unwrap();
    let c = Connection::open_in_memory().unwrap();
    c.bind(&base.display().to_string()).unwrap();
    let prompt = "Paris is a city in the country of";
    c.execute(&format!(
        "INSERT INTO edges (entity, relation, target, prompt) VALUES ('Paris', 'city_country', 'Germany', '{prompt}')"
    ))
    .unwrap();
    let e = c.execute("SELECT layer, feature FROM edges").unwrap();
    let (layer, feature) = (int(&e.rows[0][0]), int(&e.rows[0][1]));
    assert_eq!(feature, FFN, "the first added feature is numbered ffn + 0");

    // WALK of the edit prompt at the edit's layer shows the added feature, active.
    let walk = format!("WALK {prompt:?} TOP 10 LAYERS {layer}-{layer}");
    let w = c.execute(&walk).unwrap();
    let hit = w
        .rows
        .iter()
        .find(|r| int(&r[w.column_index("feature").unwrap()]) == feature)
        .unwrap_or_else(|| panic!("the added feature is not in the walk: {w:?}"));
    let act = match &hit[w.column_index("activation").unwrap()] {
        Value::Float(a) => *a,
        v => panic!("activation {v:?}"),
    };
    assert!(act > 0.5, "the added feature fires on its prompt: {act}");
    // Its label comes from its down vector, which points towards the target and away
    // from what the state before it predicted (after the edge's subject write, docs/
    // editing.md, a close runner-up): the target is among its top tokens.
    let top = hit[w.column_index("top_token").unwrap()].to_string();
    let down = hit[w.column_index("down_tokens").unwrap()].to_string();
    assert!(
        down.contains("Germany"),
        "WALK's tokens of the added feature: {down}"
    );

    // SELECT FROM features lists it, labelled with the target token.
    let f = c
        .execute(&format!(
            "SELECT layer, feature, top_token FROM features WHERE layer = {layer} AND feature >= {FFN}"
        ))
        .unwrap();
    // The edge is three features (its gate as a hat: docs/editing.md), all writing
    // towards the target.
    assert_eq!(f.rows.len(), 3, "{f:?}");
    assert_eq!(int(&f.rows[0][1]), feature);
    for r in &f.rows {
        assert_eq!(r[2].to_string(), top, "SELECT's label is WALK's");
    }
    // The subject write's features (a step and a hat at the subject layer) are listed too.
    let s = c
        .execute(&format!(
            "SELECT layer, feature FROM features WHERE layer = 6 AND feature >= {FFN}"
        ))
        .unwrap();
    assert_eq!(s.rows.len(), 5, "{s:?}");

    // DESCRIBE reads the same state (it runs; its edges may or may not include the feature).
    c.execute("DESCRIBE \"Paris\"").unwrap();

    // A gate scale shows in the scan: halving the added feature's gate halves its score.
    let before = walk_features(&w);
    c.execute(&format!(
        "UPDATE features SET gate_scale = 0.5 WHERE layer = {layer} AND feature = {feature}"
    ))
    .unwrap();
    let after = walk_features(&c.execute(&walk).unwrap());
    let g = |v: &[(i64, Value)]| {
        v.iter().find(|x| x.0 == feature).map(|x| match x.1 {
            Value::Float(f) => f,
            _ => f64::NAN,
        })
    };
    let (g0, g1) = (g(&before).unwrap(), g(&after));
    if let Some(g1) = g1 {
        assert!((g1 - g0 * 0.5).abs() <= 1e-4 * g0.abs(), "{g0} → {g1}");
    }
    c.execute(&format!(
        "UPDATE features SET gate_scale = 2 WHERE layer = {layer} AND feature = {feature}"
    ))
    .unwrap();

    // A compiled container walks as the session does (same features, same scores).
    let v = t.path().join("edited.vindex");
    c.execute(&format!("COMPILE CURRENT INTO VINDEX \"{}\"", q(&v)))
        .unwrap();
    let c2 = Connection::open_in_memory().unwrap();
    c2.bind(&v.display().to_string()).unwrap();
    let session = c.execute(&walk).unwrap();
    let compiled = c2.execute(&walk).unwrap();
    assert_eq!(
        session.rows, compiled.rows,
        "WALK on the compiled container"
    );
    let f2 = c2
        .execute(&format!(
            "SELECT feature, top_token FROM features WHERE layer = {layer} AND feature >= {FFN}"
        ))
        .unwrap();
    assert_eq!(f2.rows.len(), 3, "{f2:?}");

    // REMOVE PATCH: the feature is gone from every browse statement.
    c.execute("REMOVE PATCH \"(session)\"").unwrap();
    let f = c
        .execute(&format!(
            "SELECT layer, feature FROM features WHERE layer = {layer} AND feature >= {FFN}"
        ))
        .unwrap();
    assert!(f.rows.is_empty(), "{f:?}");
    let w = c.execute(&walk).unwrap();
    assert!(
        walk_features(&w).iter().all(|x| x.0 < FFN),
        "the walk still lists an added feature: {w:?}"
    );
}
