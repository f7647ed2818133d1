//! VINDEX3 through LQL statements on SmolLM2: EXTRACT MODEL … INTO, USE of the container,
//! INFER equal to the GGUF's, VERIFY (clean and after a flipped byte), SHOW COMPONENTS and
//! SHOW REPRESENTATIONS, and the refusals. Run with `--release`.

use lql::Connection;
use lql_tests::default_model_path as smollm2;
use serde_json::json;

/// Rows as an array of `{column: value}` objects.
fn objects(r: &lql::Rows) -> serde_json::Value {
    let j = r.to_json();
    let cols: Vec<String> = j["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    serde_json::Value::Array(
        j["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| {
                serde_json::Value::Object(
                    cols.iter()
                        .cloned()
                        .zip(row.as_array().unwrap().iter().cloned())
                        .collect(),
                )
            })
            .collect(),
    )
}

fn q(p: &std::path::Path) -> String {
    p.display()
        .to_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
}

#[test]
fn extract_use_infer_verify_show() {
    let t = tempfile::tempdir().unwrap();
    let gguf = smollm2();
    let out = t.path().join("smol.vindex");
    let c = Connection::open_in_memory().unwrap();
    let r = c
        .execute(&format!(
            "EXTRACT MODEL \"{}\" INTO \"{}\";",
            q(&gguf),
            q(&out)
        ))
        .unwrap();
    assert_eq!(
        r.column_names(),
        [
            "path",
            "objects",
            "tensors",
            "payload_bytes",
            "encoding",
            "seconds"
        ]
    );
    let j = objects(&r);
    let row = &j.as_array().unwrap()[0];
    assert_eq!(row["objects"], json!(4));
    assert_eq!(row["tensors"], json!(272));
    assert_eq!(row["encoding"], json!("source"));

    // EXTRACT into the same place again is refused; nothing is overwritten.
    let e = c
        .execute(&format!(
            "EXTRACT MODEL \"{}\" INTO \"{}\";",
            q(&gguf),
            q(&out)
        ))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not empty"), "{e}");

    // VERIFY needs a container when a GGUF is bound.
    c.execute(&format!("USE \"{}\";", q(&gguf))).unwrap();
    let want = c
        .execute("INFER \"The capital of France is\" TOP 5;")
        .map(|r| objects(&r))
        .unwrap();
    assert!(c.execute("VERIFY;").is_err());
    assert!(c.execute("SHOW COMPONENTS;").is_err());

    c.execute(&format!("USE \"{}\";", q(&out))).unwrap();
    let got = c
        .execute("INFER \"The capital of France is\" TOP 5;")
        .map(|r| objects(&r))
        .unwrap();
    assert_eq!(got, want);

    let v = objects(&c.execute("VERIFY;").unwrap());
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 1 + 3 + 4);
    assert!(rows.iter().all(|r| r["status"] == json!("ok")), "{v}");

    let comps = objects(&c.execute("SHOW COMPONENTS;").unwrap());
    assert_eq!(comps[0]["component"], json!("text"));
    assert_eq!(comps[0]["layers"], json!(30));
    let reps = objects(&c.execute("SHOW REPRESENTATIONS;").unwrap());
    assert_eq!(reps.as_array().unwrap().len(), 3);
    let like = c
        .execute("SHOW REPRESENTATIONS LIKE \"%decoder%\";")
        .map(|r| objects(&r))
        .unwrap();
    assert_eq!(like.as_array().unwrap().len(), 1);
    assert_eq!(like[0]["fidelity"], json!("source-exact"));

    // A flipped byte in the embedding's payload: VERIFY names the segment and
    // representation.
    let seg = out.join("segments/text.embedding.bin");
    let mut b = std::fs::read(&seg).unwrap();
    let n = b.len();
    b[n - 100] ^= 0x10;
    std::fs::write(&seg, &b).unwrap();
    let v = c
        .execute(&format!("VERIFY \"{}\";", q(&out)))
        .map(|r| objects(&r))
        .unwrap();
    let bad: Vec<_> = v
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["status"] == json!("FAILED"))
        .collect();
    assert_eq!(bad.len(), 1, "{v}");
    assert_eq!(bad[0]["representation"], json!("text.embedding@source"));
    assert!(bad[0]["detail"]
        .as_str()
        .unwrap()
        .contains("segments/text.embedding.bin"));

    // A tokenizer capability that fails its checks: the refusal names the cause (the
    // file and what is wrong), not only "has no tokenizer".
    let tok = out.join("tokenizer_spec.json");
    let mut b = std::fs::read(&tok).unwrap();
    b[10] ^= 1;
    std::fs::write(&tok, &b).unwrap();
    let c2 = Connection::open_in_memory().unwrap();
    let e = match c2.execute(&format!("USE \"{}\";", q(&out))) {
        Err(e) => e,
        Ok(_) => c2.execute("TOKENIZE 'x';").unwrap_err(),
    };
    assert!(e.to_string().contains("tokenizer_spec"), "{e}");
}

#[test]
fn extract_encodings_and_refusals() {
    let t = tempfile::tempdir().unwrap();
    let gguf = smollm2();
    let c = Connection::open_in_memory().unwrap();
    let out = t.path().join("bf16");
    let r = c
        .execute(&format!(
            "EXTRACT MODEL \"{}\" INTO \"{}\" ENCODING BF16;",
            q(&gguf),
            q(&out)
        ))
        .map(|r| objects(&r))
        .unwrap();
    assert_eq!(r[0]["encoding"], json!("bf16"));
    c.execute(&format!("USE \"{}\";", q(&out))).unwrap();
    let top = c
        .execute("INFER \"The capital of France is\" TOP 1;")
        .map(|r| objects(&r))
        .unwrap();
    assert!(!top.as_array().unwrap().is_empty());
    // A VINDEX2 index is refused by name at USE.
    let v2 = t.path().join("v2");
    std::fs::create_dir(&v2).unwrap();
    std::fs::write(v2.join("index.json"), br#"{"version": 2, "model": "m"}"#).unwrap();
    let e = c
        .execute(&format!("USE \"{}\";", q(&v2)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("VINDEX2") && e.contains("version 2"), "{e}");
    // An unknown source.
    assert!(c
        .execute(&format!(
            "EXTRACT MODEL \"no-such-model-xyz\" INTO \"{}\";",
            q(&t.path().join("x"))
        ))
        .is_err());
}

/// USE … PROFILE binds the variants a profile selects; SHOW REPRESENTATIONS marks what the
/// binding maps and SHOW PROFILES derives each profile's authority (a corpus container
/// with a second decoder-stack variant beside the baseline).
#[test]
fn use_profile_binds_the_selected_variant() {
    let c = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/vindex3/cases/valid-second-variant");
    let conn = Connection::open_in_memory().unwrap();
    let selected = |conn: &Connection| -> Vec<String> {
        let r = conn.execute("SHOW REPRESENTATIONS;").unwrap();
        objects(&r)
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["selected"] == json!(true))
            .map(|r| r["representation"].as_str().unwrap().to_string())
            .collect()
    };
    conn.execute(&format!("USE \"{}\";", q(&c))).unwrap();
    assert!(selected(&conn).contains(&"text.decoder_stack@source".to_string()));
    conn.execute(&format!("USE \"{}\" PROFILE \"mixed-precision\";", q(&c)))
        .unwrap();
    let s = selected(&conn);
    assert!(s.contains(&"text.decoder_stack@f16".to_string()), "{s:?}");
    assert!(
        !s.contains(&"text.decoder_stack@source".to_string()),
        "{s:?}"
    );
    let p = objects(&conn.execute("SHOW PROFILES;").unwrap());
    let auth = |name: &str| {
        p.as_array()
            .unwrap()
            .iter()
            .find(|r| r["profile"] == json!(name))
            .unwrap()["authority"]
            .clone()
    };
    assert_eq!(auth("exact"), json!("source-exact"));
    assert_eq!(auth("mixed-precision"), json!("numerically-approximate"));
    let e = conn
        .execute(&format!("USE \"{}\" PROFILE \"nope\";", q(&c)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("nope") && e.contains("mixed-precision"), "{e}");
}
