//! The effective state as a material source (issue 12 with issue 11's edits): after 20
//! knowledge edits on SmolLM2, `DIFF CURRENT` lists exactly the FFN tensors of the edited
//! layers, and `COMPILE CURRENT INTO VINDEX` writes a derived container that a NEW PROCESS
//! (the `lql` binary) opens and answers INFER (logits within 1e-5), WALK (the added
//! features included) and TRACE as the edited session does; index.json names the base sha256 and the patch hash, VERIFY passes,
//! the base file is unchanged. Run with `--release`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use lql::{Connection, Rows, Value};
use lql_tests::default_model_path as smollm2;
use sha2::{Digest, Sha256};

const BASE_SHA: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

fn sha256(path: &Path) -> String {
    let d = Sha256::digest(std::fs::read(path).unwrap());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn q(p: &Path) -> String {
    p.display().to_string().replace('"', "\\\"")
}

fn col(r: &Rows, name: &str) -> Value {
    let i = r.column_index(name).unwrap();
    r.rows[0][i].clone()
}

/// The `lql` binary beside this test's executable (target/release/lql).
fn lql_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let bin = dir.join("lql");
    assert!(
        bin.is_file(),
        "{} is missing: build it with `cargo build --release -p lql-repl`",
        bin.display()
    );
    bin
}

/// Runs `stmts` on `model` in a new `lql` process; one JSON value per statement.
fn in_new_process(model: &Path, stmts: &[String]) -> Vec<serde_json::Value> {
    let mut cmd = Command::new(lql_bin());
    cmd.arg("-f").arg("json").arg(model);
    for s in stmts {
        cmd.arg(format!("{s};"));
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "lql failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// JSON values equal, numbers within `tol`.
fn close(a: &serde_json::Value, b: &serde_json::Value, tol: f64) -> bool {
    use serde_json::Value as J;
    match (a, b) {
        (J::Number(x), J::Number(y)) => (x.as_f64().unwrap() - y.as_f64().unwrap()).abs() <= tol,
        (J::Array(x), J::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| close(p, q, tol))
        }
        (x, y) => x == y,
    }
}

/// Asserts the rows agree: text and integers equal, floats within `tol`.
fn assert_rows_close(what: &str, want: &Rows, got: &serde_json::Value, tol: f64) {
    let want = want.to_json();
    let (w, g) = (&want["rows"], &got["rows"]);
    assert_eq!(
        w.as_array().map(|a| a.len()),
        g.as_array().map(|a| a.len()),
        "{what}: row count"
    );
    for (i, (a, b)) in w
        .as_array()
        .unwrap()
        .iter()
        .zip(g.as_array().unwrap())
        .enumerate()
    {
        assert!(close(a, b, tol), "{what}: row {i}: {a} vs {b}");
    }
}

#[test]
fn twenty_edits_diff_and_compile_into_vindex_in_a_new_process() {
    let path = smollm2();
    let before = sha256(&path);
    let t = tempfile::tempdir().unwrap();
    let c = Connection::open_in_memory().unwrap();
    c.bind(&path.display().to_string()).unwrap();

    let facts = lql_tests::edit_facts(20);
    lql_tests::insert_facts(&c, &facts);
    let edges = c.execute("SELECT layer FROM edges").unwrap();
    assert_eq!(edges.rows.len(), 20);
    let mut layers: BTreeSet<i64> = edges
        .rows
        .iter()
        .map(|r| match r[0] {
            Value::Int(l) => l,
            ref v => panic!("layer {v:?}"),
        })
        .collect();
    // The edges' subject writes edit layer 6 of SmolLM2's 30 too (docs/editing.md).
    layers.insert(6);

    // DIFF CURRENT: exactly the FFN tensors of the edited layers, nothing else.
    let d = c.execute("DIFF CURRENT").unwrap();
    let (li, ri, ci) = (
        d.column_index("layer").unwrap(),
        d.column_index("role").unwrap(),
        d.column_index("change").unwrap(),
    );
    let got: BTreeSet<(i64, String, String)> = d
        .rows
        .iter()
        .map(|r| {
            let l = match r[li] {
                Value::Int(l) => l,
                ref v => panic!("DIFF row without a layer: {v:?} {r:?}"),
            };
            (l, r[ri].to_string(), r[ci].to_string())
        })
        .collect();
    let mut want = BTreeSet::new();
    for &l in &layers {
        for (role, change) in [
            ("ffn_gate", "changed"),
            ("ffn_up", "changed"),
            ("ffn_down", "changed"),
            ("ffn_gate_bias", "added"),
            ("ffn_up_bias", "added"),
        ] {
            want.insert((l, role.to_string(), change.to_string()));
        }
    }
    assert_eq!(got, want, "DIFF CURRENT: {d:?}");
    assert_eq!(d.rows.len(), want.len());

    // COMPILE CURRENT INTO VINDEX: gated, derived, with the session patch's hash.
    let out = t.path().join("edited.vindex");
    let r = c
        .execute(&format!("COMPILE CURRENT INTO VINDEX \"{}\"", q(&out)))
        .unwrap();
    assert_eq!(col(&r, "applied_patches"), Value::Int(1));
    let delta = match col(&r, "max_abs_logit_delta") {
        Value::Float(x) => x,
        v => panic!("delta {v:?}"),
    };
    assert!(delta <= 1e-5, "gate delta {delta}");
    eprintln!(
        "COMPILE CURRENT INTO VINDEX with 20 edits: {:?} s, gate max |Δ logit| = {delta:e}",
        col(&r, "seconds")
    );
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("index.json")).unwrap()).unwrap();
    assert_eq!(index["authority"], "derived");
    assert_eq!(index["derived_from_model"], BASE_SHA);
    let patches = index["applied_patches"].as_array().unwrap();
    assert_eq!(patches.len(), 1);
    let h = patches[0].as_str().unwrap();
    assert!(
        h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()),
        "{h}"
    );
    // The edited object is never recorded as the source's values (seed 002 §9.2): the
    // decoder stack is `numerically-approximate` and marked changed, the untouched objects
    // stay `source-exact`, and the profile is `edited`, never `exact`.
    let reps = index["representations"].as_object().unwrap();
    for (id, r) in reps {
        if r["object"] == "text.decoder_stack" {
            assert_eq!(r["fidelity"], "numerically-approximate", "{id}: {r}");
            assert_eq!(r["changed"], "edited state", "{id}");
        } else {
            assert_eq!(r["fidelity"], "source-exact", "{id}: {r}");
            assert!(r.get("changed").is_none(), "{id}");
        }
    }
    assert_eq!(index["profiles"][0]["profile"], "edited");
    let authority = c
        .execute(&format!("SHOW PROFILES \"{}\"", q(&out)))
        .unwrap();
    let i = authority.column_index("authority").unwrap();
    assert_eq!(
        authority.rows[0][i],
        Value::from("numerically-approximate"),
        "{authority:?}"
    );
    let v = c.execute(&format!("VERIFY \"{}\"", q(&out))).unwrap();
    assert!(!v.fault, "VERIFY failed: {v:?}");

    // A new process answers as the edited session does.
    let mut stmts = Vec::new();
    let mut want = Vec::new();
    for (_, _, _, prompt) in facts.iter().take(3) {
        let s = format!("INFER {prompt:?} TOP 20");
        want.push(("INFER", c.execute(&s).unwrap()));
        stmts.push(s);
    }
    // WALK of an edit prompt at its layer lists the added features (numbered ffn + i): the
    // compiled container's stored overlay must walk the same rows.
    let l0 = *layers.iter().next_back().unwrap();
    let edit_walk = format!("WALK {:?} TOP 10 LAYERS {l0}-{l0}", facts[0].3);
    let w = c.execute(&edit_walk).unwrap();
    let fi = w.column_index("feature").unwrap();
    assert!(
        w.rows
            .iter()
            .any(|r| matches!(r[fi], Value::Int(f) if f >= 1536)),
        "the edit prompt's walk lists no added feature: {w:?}"
    );
    for s in [
        "WALK \"Paris\" TOP 10".to_string(),
        edit_walk,
        format!("TRACE {:?}", facts[0].3),
    ] {
        want.push(("WALK/TRACE", c.execute(&s).unwrap()));
        stmts.push(s);
    }
    let got = in_new_process(&out, &stmts);
    assert_eq!(got.len(), want.len(), "{got:?}");
    for ((what, w), g) in want.iter().zip(&got) {
        assert_rows_close(what, w, g, 1e-5);
    }
    // The edited facts hold in the compiled container.
    let first = &got[0]["rows"][0];
    assert_eq!(
        first[1].as_str().unwrap().trim(),
        facts[0].2,
        "top-1 of the first edit prompt"
    );

    // COMPILE CURRENT INTO PACKAGE: the merged form sliced into a layer package; VERIFY
    // passes; bound in another connection it answers as the edited session does (same
    // top-1, logits within f32 re-association of the merged FFN: see docs/persist.md).
    let pkg = t.path().join("edited-package");
    c.execute(&format!(
        "COMPILE CURRENT INTO PACKAGE \"{}\" MODEL_ID \"lql-tests/smollm2-edited:Q4_1\" SOURCE_REVISION \"test\"",
        q(&pkg)
    ))
    .unwrap();
    let v = c.execute(&format!("VERIFY \"{}\"", q(&pkg))).unwrap();
    assert!(!v.fault, "VERIFY of the package failed: {v:?}");
    let leftovers: Vec<String> = std::fs::read_dir(t.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // The manifest names the source artifact as the GGUF that COMPILE … INTO GGUF of the
    // same state writes (its bytes, its sha256), not the staging file deleted after slicing.
    let gguf = t.path().join("edited-package.gguf");
    c.execute(&format!("COMPILE CURRENT INTO GGUF \"{}\"", q(&gguf)))
        .unwrap();
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(pkg.join("model-package.json")).unwrap()).unwrap();
    let src = &manifest["source_model"];
    assert_eq!(src["path"], "edited-package.gguf", "{src}");
    assert_eq!(src["primary_file"], "edited-package.gguf", "{src}");
    assert_eq!(src["files"][0]["path"], "edited-package.gguf", "{src}");
    assert_eq!(src["sha256"].as_str().unwrap(), sha256(&gguf), "{src}");
    assert_eq!(
        src["files"][0]["size_bytes"].as_u64().unwrap(),
        std::fs::metadata(&gguf).unwrap().len()
    );
    let c3 = Connection::open_in_memory().unwrap();
    c3.bind(&pkg.display().to_string()).unwrap();
    let mut worst = 0f64;
    for (_, _, _, prompt) in facts.iter().take(5) {
        let s = format!("INFER {prompt:?} TOP 5");
        let (a, b) = (c.execute(&s).unwrap(), c3.execute(&s).unwrap());
        assert_eq!(a.rows[0][1], b.rows[0][1], "{prompt}");
        for (x, y) in a.rows.iter().zip(&b.rows) {
            if let (Value::Float(p), Value::Float(q)) = (&x[4], &y[4]) {
                worst = worst.max((p - q).abs());
            }
        }
    }
    eprintln!("package vs edited session: max |Δ logit| (top 5 of 5 prompts) = {worst:e}");
    assert!(worst < 1e-3, "package logits differ by {worst}");
    assert_eq!(sha256(&path), before, "the base model file changed");
}
