//! DIFF: the committed fixture pair (`tests/fixtures/diff/`: a tiny F32 model and its Q4_1
//! quantisation) against the figures numpy computed independently (`expected.py` →
//! `expected.json`, within 1e-6); a Q4_1 model against its exact F32 dequantisation (a
//! representation change with no value changed); a model against itself, CURRENT against its
//! base, LAYER, LIMIT, PHYSICAL and the refusals; SmolLM2's GGUF against its VINDEX3
//! container. Run with `--release`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use lql::{Connection, Value};
use lql_storage::codec::decode_rows;
use lql_storage::format::gguf::{GgufFile, GgufWriter};
use lql_storage::DType;
use lql_tests::{default_model_path as smollm2, repo_root};
use sha2::{Digest, Sha256};

fn fixture(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures/diff").join(name)
}

fn q(p: &Path) -> String {
    p.display().to_string().replace('"', "\\\"")
}

/// Rows as `{column: value}` maps.
fn rows(c: &Connection, sql: &str) -> Vec<BTreeMap<String, Value>> {
    let r = c.execute(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let names: Vec<String> = r.columns.iter().map(|c| c.name.clone()).collect();
    r.rows
        .iter()
        .map(|row| names.iter().cloned().zip(row.iter().cloned()).collect())
        .collect()
}

fn float(v: &Value) -> f64 {
    match v {
        Value::Float(f) => *f,
        Value::Int(i) => *i as f64,
        other => panic!("not a number: {other:?}"),
    }
}

/// The stored tensor name of a row.
fn tensor_name(r: &BTreeMap<String, Value>) -> String {
    let role = r["role"].to_string();
    match (&r["layer"], role.as_str()) {
        (Value::Null, "token_embedding" | "output") => "token_embd.weight".into(),
        (Value::Null, "output_norm") => "output_norm.weight".into(),
        (Value::Int(l), role) => format!("blk.{l}.{role}.weight"),
        other => panic!("unexpected row {other:?}"),
    }
}

#[test]
fn f32_against_q4_1_matches_numpy() {
    let expected: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture("expected.json")).unwrap()).unwrap();
    let expected = expected.as_object().unwrap();
    let c = Connection::open_in_memory().unwrap();
    let got = rows(
        &c,
        &format!(
            "DIFF \"{}\" \"{}\"",
            q(&fixture("tiny_f32.gguf")),
            q(&fixture("tiny_q4_1.gguf"))
        ),
    );
    // One row per quantised matrix (the tied head is the embedding, not a second operand).
    assert_eq!(got.len(), expected.len());
    for r in &got {
        let name = tensor_name(r);
        let e = &expected[&name];
        assert_eq!(r["change"].to_string(), "changed");
        assert_eq!(
            r["representation"].to_string(),
            e["representation"].as_str().unwrap()
        );
        assert_eq!(
            r["elements_changed"],
            Value::Int(e["elements_changed"].as_i64().unwrap()),
            "{name}"
        );
        for col in ["max_abs_delta", "rel_frobenius_delta"] {
            let (g, w) = (float(&r[col]), e[col].as_f64().unwrap());
            assert!((g - w).abs() <= 1e-6, "{name} {col}: {g} vs numpy {w}");
        }
    }
    // Reversed, the same tensors change by the same amount (relative to the other side).
    let back = rows(
        &c,
        &format!(
            "DIFF \"{}\" \"{}\"",
            q(&fixture("tiny_q4_1.gguf")),
            q(&fixture("tiny_f32.gguf"))
        ),
    );
    assert_eq!(back.len(), got.len());
    assert_eq!(back[0]["max_abs_delta"], got[0]["max_abs_delta"]);
}

/// `src` with every Q4_1 tensor replaced by its exact F32 decoding.
fn dequantised(src: &Path, out: &Path) {
    let f = GgufFile::open(src).unwrap();
    let mut w = GgufWriter::new();
    for kv in f.metadata() {
        w.add_kv(kv.key.clone(), kv.value.clone()).unwrap();
    }
    for t in f.tensors() {
        let v = f.view(t);
        if t.dtype == DType::Q4_1 {
            let mut vals = vec![0f32; t.elems()];
            decode_rows(t.dtype, v.bytes, t.shape[0], &mut vals).unwrap();
            w.add_f32_tensor(&t.name, &t.shape, &vals).unwrap();
        } else {
            w.add_tensor(&t.name, t.dtype, &t.shape, v.bytes.to_vec())
                .unwrap();
        }
    }
    w.write(out).unwrap();
}

#[test]
fn q4_1_against_its_dequantisation_changes_representation_only() {
    let t = tempfile::tempdir().unwrap();
    let deq = t.path().join("deq.gguf");
    dequantised(&fixture("tiny_q4_1.gguf"), &deq);
    let c = Connection::open_in_memory().unwrap();
    let got = rows(
        &c,
        &format!("DIFF \"{}\" \"{}\"", q(&fixture("tiny_q4_1.gguf")), q(&deq)),
    );
    assert_eq!(got.len(), 15);
    for r in &got {
        assert_eq!(r["representation"].to_string(), "Q4_1 → F32");
        assert_eq!(r["elements_changed"], Value::Int(0));
        assert_eq!(float(&r["max_abs_delta"]), 0.0);
        assert_eq!(float(&r["rel_frobenius_delta"]), 0.0);
    }
}

#[test]
fn self_current_layer_limit_physical_and_refusals() {
    let f32m = fixture("tiny_f32.gguf");
    let q4 = fixture("tiny_q4_1.gguf");
    let c = Connection::open_in_memory().unwrap();
    assert!(rows(&c, &format!("DIFF \"{}\" \"{}\"", q(&f32m), q(&f32m))).is_empty());
    // CURRENT needs a bound model.
    assert!(c.execute("DIFF CURRENT").is_err());
    c.bind(&f32m.display().to_string()).unwrap();
    assert!(rows(&c, "DIFF CURRENT").is_empty());
    assert!(rows(&c, &format!("DIFF \"{}\" CURRENT", q(&f32m))).is_empty());
    let all = rows(&c, &format!("DIFF CURRENT \"{}\"", q(&q4)));
    assert_eq!(all.len(), 15);

    let l1 = rows(&c, &format!("DIFF CURRENT \"{}\" LAYER 1", q(&q4)));
    assert_eq!(l1.len(), 7);
    assert!(l1.iter().all(|r| r["layer"] == Value::Int(1)));
    let lim = rows(&c, &format!("DIFF CURRENT \"{}\" LIMIT 3", q(&q4)));
    assert_eq!(lim, all[..3].to_vec());
    let e = c
        .execute(&format!("DIFF CURRENT \"{}\" LAYER 9", q(&q4)))
        .unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");

    let phys = rows(&c, &format!("DIFF CURRENT \"{}\" PHYSICAL LAYER 0", q(&q4)));
    assert_eq!(phys.len(), 7);
    let a = GgufFile::open(&f32m).unwrap();
    let b = GgufFile::open(&q4).unwrap();
    for r in &phys {
        let name = tensor_name(r);
        let (ta, tb) = (a.tensor(&name).unwrap(), b.tensor(&name).unwrap());
        assert_eq!(r["left_encoding"].to_string(), "F32");
        assert_eq!(r["right_encoding"].to_string(), "Q4_1");
        assert_eq!(r["left_bytes"], Value::Int(ta.bytes.len() as i64));
        assert_eq!(r["right_bytes"], Value::Int(tb.bytes.len() as i64));
        let hex = |b: &[u8]| -> String {
            Sha256::digest(b)
                .iter()
                .map(|x| format!("{x:02x}"))
                .collect()
        };
        assert_eq!(r["left_sha256"].to_string(), hex(ta.bytes));
        assert_eq!(r["right_sha256"].to_string(), hex(tb.bytes));
        assert_eq!(r["rows_differing"], Value::Null);
    }
    let e = c
        .execute(&format!(
            "DIFF CURRENT \"{}\" INTO PATCH \"p.lqlpatch\"",
            q(&q4)
        ))
        .unwrap_err();
    // INTO PATCH refuses a change no patch expresses, by tensor and reason, writing nothing.
    let e = e.to_string();
    assert!(
        e.contains("not expressible as a patch") && e.contains("encoding changed (F32 → Q4_1)"),
        "{e}"
    );
    assert!(!Path::new("p.lqlpatch").exists());
    assert!(c
        .execute("DIFF \"/nonexistent/model.gguf\" CURRENT")
        .is_err());
}

#[test]
fn smollm2_gguf_against_its_container_is_empty() {
    let t = tempfile::tempdir().unwrap();
    let v = t.path().join("v");
    let c = Connection::open_in_memory().unwrap();
    c.execute(&format!(
        "EXTRACT MODEL \"{}\" INTO \"{}\"",
        q(&smollm2()),
        q(&v)
    ))
    .unwrap();
    assert!(rows(&c, &format!("DIFF \"{}\" \"{}\"", q(&smollm2()), q(&v))).is_empty());
    assert!(rows(
        &c,
        &format!("DIFF \"{}\" \"{}\" PHYSICAL", q(&smollm2()), q(&v))
    )
    .is_empty());
}

#[test]
fn added_and_removed_tensors() {
    use lql_storage::format::gguf::synth::TinyModel;
    let t = tempfile::tempdir().unwrap();
    let (a, b) = (t.path().join("a.gguf"), t.path().join("b.gguf"));
    TinyModel::llama().write(&a).unwrap();
    TinyModel {
        untied_head: true,
        layers: 3,
        ..TinyModel::llama()
    }
    .write(&b)
    .unwrap();
    let c = Connection::open_in_memory().unwrap();
    let got = rows(&c, &format!("DIFF \"{}\" \"{}\"", q(&a), q(&b)));
    let added: Vec<(String, String)> = got
        .iter()
        .filter(|r| r["change"].to_string() == "added")
        .map(|r| (r["layer"].to_string(), r["role"].to_string()))
        .collect();
    // The separate head, and every tensor of the third layer.
    assert!(
        added.contains(&("NULL".into(), "output".into())),
        "{added:?}"
    );
    assert_eq!(added.iter().filter(|(l, _)| l == "2").count(), 9);
    let head = got
        .iter()
        .find(|r| r["role"].to_string() == "output")
        .unwrap();
    assert_eq!(head["object"].to_string(), "text.output_head");
    assert_eq!(head["elements_changed"], Value::Null);
    // Reversed, the same tensors are removed.
    let back = rows(&c, &format!("DIFF \"{}\" \"{}\"", q(&b), q(&a)));
    assert_eq!(
        back.iter()
            .filter(|r| r["change"].to_string() == "removed")
            .count(),
        added.len()
    );
}
