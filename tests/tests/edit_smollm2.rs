//! Edits on SmolLM2 (issue 11): INSERT INTO edges, DELETE/UPDATE features, patches, and the
//! guarantees around them — the base file's sha256 never changes, REMOVE PATCH restores the
//! logits bit for bit, TRACE still sums, the default INSERT reaches a paraphrase, patch files refuse other models and truncation,
//! connections do not see each other's session patches.

use std::path::Path;

use lql::{Connection, Database, Rows, Value};
use sha2::{Digest, Sha256};

fn sha256(path: &Path) -> Vec<u8> {
    Sha256::digest(std::fs::read(path).unwrap()).to_vec()
}

/// Runs `f` and asserts the model file's sha256 is the same afterwards.
fn with_base_unchanged(f: impl FnOnce(&Path)) {
    let path = lql_tests::default_model_path();
    let before = sha256(&path);
    f(&path);
    assert_eq!(sha256(&path), before, "the base model file changed");
}

fn conn(path: &Path) -> Connection {
    let c = Connection::open_in_memory().unwrap();
    c.execute(&format!("USE {:?}", path.display().to_string()))
        .unwrap();
    c
}

fn top(c: &Connection, prompt: &str) -> (String, f64) {
    let r = c.execute(&format!("INFER {prompt:?} TOP 1")).unwrap();
    let tok = r.rows[0][1].to_string();
    let p = match r.rows[0][3] {
        Value::Float(p) => p,
        _ => panic!("prob"),
    };
    (tok, p)
}

fn logits(c: &Connection, prompt: &str) -> Rows {
    c.execute(&format!("INFER {prompt:?} TOP 50")).unwrap()
}

const PROMPT: &str = "The Eiffel Tower is located in the city of";
const INSERT: &str = "INSERT INTO edges (entity, relation, target, prompt) VALUES \
    ('Eiffel Tower', 'location', 'Rome', 'The Eiffel Tower is located in the city of')";

#[test]
fn insert_changes_the_answer_and_remove_restores_bit_for_bit() {
    with_base_unchanged(|path| {
        let c = conn(path);
        let base = logits(&c, PROMPT);
        assert_eq!(top(&c, PROMPT).0.trim(), "Paris");
        let r = c.execute(INSERT).unwrap();
        assert_eq!(r.rows[0][1], Value::Int(1));
        let (t, p) = top(&c, PROMPT);
        assert_eq!(t.trim(), "Rome", "{r:?}");
        assert!(p >= 0.85, "P(Rome) = {p}");
        // SELECT FROM edges lists it; SHOW PATCHES lists the session patch.
        let e = c
            .execute("SELECT entity, target, layer, feature, patch FROM edges")
            .unwrap();
        assert_eq!(e.rows.len(), 1);
        assert_eq!(e.rows[0][1], Value::from("Rome"));
        assert_eq!(e.rows[0][4], Value::from("(session)"));
        let s = c.execute("SHOW PATCHES").unwrap();
        assert_eq!(s.rows[0][0], Value::from("(session)"));
        // DIFF CURRENT reads the effective state: the edited layer's FFN tensors.
        let d = c.execute("DIFF CURRENT").unwrap();
        assert!(!d.rows.is_empty(), "{d:?}");
        // Ending the session patch restores the logits bit for bit.
        c.execute("REMOVE PATCH \"(session)\"").unwrap();
        assert_eq!(logits(&c, PROMPT), base);
        assert!(c.execute("SELECT * FROM edges").unwrap().rows.is_empty());
        // DELETE FROM edges drops the edge's features (all three of its hat), bit for bit.
        c.execute(INSERT).unwrap();
        let layer = c.execute("SELECT layer FROM edges").unwrap().rows[0][0].clone();
        let added =
            format!("SELECT feature FROM features WHERE layer = {layer} AND feature >= 1536");
        assert_eq!(c.execute(&added).unwrap().rows.len(), 3);
        let d = c
            .execute("DELETE FROM edges WHERE entity = 'Eiffel Tower'")
            .unwrap();
        assert_eq!(d.rows[0][1], Value::Int(1), "one edge removed: {d:?}");
        assert!(c.execute(&added).unwrap().rows.is_empty());
        assert_eq!(logits(&c, PROMPT), base);
    });
}

/// `TRACE … FOR ' Rome'` after `insert`: the contributions and their sum's distance from
/// the logit INFER gives, and the layer whose contribution changed most from `before`.
fn trace_after(c: &Connection, before: &Rows, insert: &str) -> (f64, f64, String) {
    let trace = format!("TRACE {PROMPT:?} FOR ' Rome'");
    c.execute(insert).unwrap();
    let after = c.execute(&trace).unwrap();
    let col = |r: &Rows, n: &str| r.column_names().iter().position(|c| *c == n).unwrap();
    let f = |v: &Value| match v {
        Value::Float(x) => *x,
        Value::Int(i) => *i as f64,
        _ => 0.0,
    };
    let ci = col(&after, "contrib");
    let sum: f64 = after.rows.iter().map(|r| f(&r[ci])).sum();
    let infer = c.execute(&format!("INFER {PROMPT:?} TOP 50")).unwrap();
    let rome = infer
        .rows
        .iter()
        .find(|r| r[1].to_string() == " Rome")
        .expect("Rome in the top 50");
    let logit = f(&rome[4]);
    let li = col(&after, "layer");
    let mut best = (String::new(), 0.0f64);
    for (a, b) in after.rows.iter().zip(&before.rows) {
        let d = (f(&a[ci]) - f(&b[ci])).abs();
        if d > best.1 {
            best = (a[li].to_string(), d);
        }
    }
    (sum, logit, best.0)
}

#[test]
fn trace_sums_and_the_edit_layer_moves_most() {
    with_base_unchanged(|path| {
        let c = conn(path);
        let before = c.execute(&format!("TRACE {PROMPT:?} FOR ' Rome'")).unwrap();
        // AT LAYER pins the edit to one feature at that layer: TRACE sums, and the layer
        // whose contribution changed most is the edit's.
        let (sum, logit, layer) = trace_after(&c, &before, &format!("{INSERT} AT LAYER 12"));
        assert!(
            (sum - logit).abs() < 1e-4 * logit.abs().max(1.0),
            "{sum} vs {logit}"
        );
        assert_eq!(layer, "12");
        // The default INSERT writes at the subject too (docs/editing.md): TRACE still sums.
        c.execute("REMOVE PATCH \"(session)\"").unwrap();
        let (sum, logit, _) = trace_after(&c, &before, INSERT);
        assert!(
            (sum - logit).abs() < 1e-4 * logit.abs().max(1.0),
            "{sum} vs {logit}"
        );
    });
}

#[test]
fn the_default_insert_reaches_paraphrases_and_spares_neighbours() {
    with_base_unchanged(|path| {
        let c = conn(path);
        let p = |c: &Connection, prompt: &str, token: &str| -> f64 {
            let r = c.execute(&format!("INFER {prompt:?} TOP 200")).unwrap();
            r.rows
                .iter()
                .find(|r| r[1].to_string() == token)
                .map_or(0.0, |r| match r[3] {
                    Value::Float(p) => p,
                    _ => 0.0,
                })
        };
        let para = "The city of Paris is located in";
        let neighbour = "Lyon is a city in the country of";
        assert!(p(&c, para, " France") > p(&c, para, " Germany"));
        let r = c
            .execute(
                "INSERT INTO edges (entity, relation, target, prompt) VALUES \
                 ('Paris', 'city_country', 'Germany', 'Paris is a city in the country of')",
            )
            .unwrap();
        let detail = r.rows[0][2].to_string();
        assert!(detail.contains("layers 6 (subject) and 18"), "{detail}");
        // A rephrasing the INSERT never saw follows the edit; a neighbour keeps its answer.
        assert!(
            p(&c, para, " Germany") > p(&c, para, " France"),
            "{} vs {}",
            p(&c, para, " Germany"),
            p(&c, para, " France")
        );
        assert!(p(&c, neighbour, " France") > p(&c, neighbour, " Germany"));
    });
}

#[test]
fn patch_files_save_apply_remove_and_refuse() {
    with_base_unchanged(|path| {
        let dir = tempfile::tempdir().unwrap();
        let pf = dir.path().join("tower.lqlpatch");
        let pfs = pf.display().to_string();
        let c = conn(path);
        let base = logits(&c, PROMPT);
        c.execute(&format!("BEGIN PATCH {pfs:?}")).unwrap();
        c.execute(INSERT).unwrap();
        let saved = c.execute("SAVE PATCH").unwrap();
        assert_eq!(saved.rows[0][1], Value::Int(1));
        let edited = logits(&c, PROMPT);
        // Another connection applies the file and sees the same logits.
        let d = conn(path);
        d.execute(&format!("APPLY PATCH {pfs:?}")).unwrap();
        assert_eq!(logits(&d, PROMPT), edited);
        let s = d.execute("SHOW PATCHES").unwrap();
        assert_eq!(s.rows[0][1], Value::from("applied"));
        assert_eq!(s.rows[0][4].to_string().len(), 64);
        d.execute(&format!("REMOVE PATCH {pfs:?}")).unwrap();
        assert_eq!(logits(&d, PROMPT), base);

        // Truncated: refused with the path and an offset.
        let bytes = std::fs::read(&pf).unwrap();
        let cut = dir.path().join("cut.lqlpatch");
        std::fs::write(&cut, &bytes[..bytes.len() - 100]).unwrap();
        let e = d
            .execute(&format!("APPLY PATCH {:?}", cut.display().to_string()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cut.lqlpatch") && e.contains("at byte"), "{e}");
        assert!(d.execute("SELECT * FROM edges").unwrap().rows.is_empty());

        // Another model: refused by name, with both identities.
        let tiny = dir.path().join("tiny.gguf");
        lql_storage::format::gguf::synth::TinyModel::llama()
            .write(&tiny)
            .unwrap();
        let t = conn(&tiny);
        let e = t
            .execute(&format!("APPLY PATCH {pfs:?}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("tower.lqlpatch") && e.contains("sha256"), "{e}");
    });
}

#[test]
fn connections_do_not_see_each_others_session_patches() {
    with_base_unchanged(|path| {
        let db = Database::open(path.to_str().unwrap()).unwrap();
        let (a, b) = (db.connect().unwrap(), db.connect().unwrap());
        let base = logits(&b, PROMPT);
        std::thread::scope(|s| {
            s.spawn(|| a.execute(INSERT).unwrap());
            s.spawn(|| {
                b.execute("UPDATE features SET down_scale = 0 WHERE layer = 29 AND feature < 8")
                    .unwrap()
            });
        });
        assert_eq!(top(&a, PROMPT).0.trim(), "Rome");
        assert_eq!(b.execute("SELECT * FROM edges").unwrap().rows.len(), 0);
        assert_eq!(a.execute("SELECT * FROM edges").unwrap().rows.len(), 1);
        assert_ne!(logits(&b, PROMPT), base);
        b.execute("REMOVE PATCH \"(session)\"").unwrap();
        assert_eq!(logits(&b, PROMPT), base);
    });
}

#[test]
fn delete_and_update_features_change_the_pass_and_prepared_statements_see_it() {
    with_base_unchanged(|path| {
        let c = conn(path);
        let mut stmt = c.prepare(&format!("INFER {PROMPT:?} TOP 5")).unwrap();
        let base = stmt.query(()).unwrap();
        let r = c
            .execute("DELETE FROM features WHERE layer >= 26 AND feature < 200")
            .unwrap();
        assert_eq!(r.rows[0][1], Value::Int(4 * 200));
        let ablated = stmt.query(()).unwrap();
        assert_ne!(ablated, base, "a prepared statement served the old state");
        c.execute("REMOVE PATCH \"(session)\"").unwrap();
        assert_eq!(stmt.query(()).unwrap(), base);
        c.execute("UPDATE features SET gate_scale = 1.0, down_scale = 1.0 WHERE layer = 3")
            .unwrap();
        assert_eq!(stmt.query(()).unwrap(), base, "scales of 1 change nothing");
        let e = c
            .execute("UPDATE features SET down = 2 WHERE layer = 3")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not supported yet"), "{e}");
    });
}
