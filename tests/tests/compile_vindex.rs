//! COMPILE CURRENT INTO VINDEX on SmolLM2: the container is stamped `authority: derived`
//! with `derived_from_model` = the base's SHA-256 and the applied patches (none yet), its
//! equivalence gate reports max |Δ logit| = 0 for an unedited state, it opens in a new
//! connection and answers INFER and WALK as the session did, VERIFY passes, the base file is
//! unchanged, and an existing target is refused. Run with `--release`.

use std::path::Path;

use lql::{Connection, Value};
use lql_tests::default_model_path as smollm2;

const BASE_SHA: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

fn q(p: &Path) -> String {
    p.display().to_string().replace('"', "\\\"")
}

fn col(r: &lql::Rows, name: &str) -> Value {
    let i = r.column_index(name).unwrap();
    r.rows[0][i].clone()
}

#[test]
fn compile_current_into_vindex_is_derived_gated_and_equivalent() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("compiled");
    let c = Connection::open_in_memory().unwrap();
    c.bind(&smollm2().display().to_string()).unwrap();
    let r = c
        .execute(&format!("COMPILE CURRENT INTO VINDEX \"{}\"", q(&out)))
        .unwrap();
    assert_eq!(col(&r, "format"), Value::from("VINDEX"));
    assert_eq!(col(&r, "derived_from_model"), Value::from(BASE_SHA));
    assert_eq!(col(&r, "applied_patches"), Value::Int(0));
    assert_eq!(col(&r, "max_abs_logit_delta"), Value::Float(0.0));
    // No staging directory is left beside the output.
    let names: Vec<String> = std::fs::read_dir(t.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["compiled".to_string()]);

    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("index.json")).unwrap()).unwrap();
    assert_eq!(index["authority"], "derived");
    assert_eq!(index["derived_from_model"], BASE_SHA);
    assert_eq!(index["applied_patches"], serde_json::json!([]));
    // Nothing was edited: every object keeps the source's values and the profile is exact.
    for (id, r) in index["representations"].as_object().unwrap() {
        assert_eq!(r["fidelity"], "source-exact", "{id}");
        assert!(r.get("changed").is_none(), "{id}");
    }
    assert_eq!(index["profiles"][0]["profile"], "exact");

    let v = c.execute(&format!("VERIFY \"{}\"", q(&out))).unwrap();
    assert!(!v.fault, "VERIFY failed: {v:?}");

    let probe = "INFER \"The capital of France is\" TOP 5";
    let walk = "WALK \"Paris\" TOP 5";
    let (want_infer, want_walk) = (c.execute(probe).unwrap(), c.execute(walk).unwrap());
    let c2 = Connection::open_in_memory().unwrap();
    c2.bind(&out.display().to_string()).unwrap();
    assert_eq!(c2.execute(probe).unwrap().rows, want_infer.rows);
    assert_eq!(c2.execute(walk).unwrap().rows, want_walk.rows);

    // The base is untouched, and a second COMPILE to the same place is refused.
    let sha = lql_storage::format::package::integrity::sha256_file(&smollm2()).unwrap();
    assert_eq!(sha, BASE_SHA);
    let e = c
        .execute(&format!("COMPILE CURRENT INTO VINDEX \"{}\"", q(&out)))
        .unwrap_err();
    assert!(e.to_string().contains("exists"), "{e}");
    let e = c
        .execute(&format!(
            "COMPILE CURRENT INTO PACKAGE \"{}\"",
            q(&t.path().join("p"))
        ))
        .unwrap_err();
    assert!(e.to_string().contains("MODEL_ID"), "{e}");
    assert!(!t.path().join("p").exists());
}
