//! Containers LQL writes — EXTRACT, REPRESENT, COMPILE CURRENT INTO VINDEX of an edited
//! state, COMPACT — read by an independent reader written from seed 002 alone
//! (`tests/tools/read_vindex3.py`, Python's standard library only): every structural check
//! passes, and it finds the same objects, encodings and fidelities as LQL's
//! `SHOW REPRESENTATIONS "c"` and derives the same profile authorities as
//! `SHOW PROFILES "c"`. Needs `python3` (any 3.8+); without one the test fails under
//! `CI=true` and skips with a note otherwise.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use lql::Connection;

fn python() -> Option<PathBuf> {
    let ok = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some("python3".into());
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true: python3 is needed for the independent VINDEX3 reader");
    }
    eprintln!("skipping: no python3 for the independent VINDEX3 reader");
    None
}

/// The reader's summary of `dir`, or the reasons it refused.
fn independent(py: &Path, dir: &Path) -> serde_json::Value {
    let script = lql_tests::repo_root().join("tests/tools/read_vindex3.py");
    let o = Command::new(py).arg(&script).arg(dir).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "the independent reader refused {}: {out}{}",
        dir.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_str(&out).unwrap()
}

fn q(p: &Path) -> String {
    lql::quote(&p.to_string_lossy())
}

/// (object, encoding) → fidelity, as LQL reports them.
fn lql_representations(c: &Connection, dir: &Path) -> BTreeMap<(String, String), String> {
    let rows = c
        .execute(&format!("SHOW REPRESENTATIONS {}", q(dir)))
        .unwrap();
    (0..rows.rows.len())
        .map(|i| {
            let r = rows.row(i).unwrap();
            (
                (
                    r.get::<_, String>("object").unwrap(),
                    r.get::<_, String>("encoding").unwrap(),
                ),
                r.get::<_, String>("fidelity").unwrap(),
            )
        })
        .collect()
}

/// profile → derived authority, as LQL reports them.
fn lql_profiles(c: &Connection, dir: &Path) -> BTreeMap<String, String> {
    let rows = c.execute(&format!("SHOW PROFILES {}", q(dir))).unwrap();
    (0..rows.rows.len())
        .map(|i| {
            let r = rows.row(i).unwrap();
            (
                r.get::<_, String>("profile").unwrap(),
                r.get::<_, String>("authority").unwrap(),
            )
        })
        .collect()
}

/// The reader and LQL agree on `dir`; the reader's summary.
fn agree(py: &Path, c: &Connection, dir: &Path, what: &str) -> serde_json::Value {
    let s = independent(py, dir);
    let mut theirs = BTreeMap::new();
    for (object, o) in s["objects"].as_object().unwrap() {
        for (encoding, fidelity) in o["representations"].as_object().unwrap() {
            theirs.insert(
                (object.clone(), encoding.clone()),
                fidelity.as_str().unwrap().to_string(),
            );
        }
    }
    assert_eq!(
        theirs,
        lql_representations(c, dir),
        "{what}: objects, encodings, fidelity"
    );
    let profiles: BTreeMap<String, String> = s["profiles"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect();
    assert_eq!(profiles, lql_profiles(c, dir), "{what}: profile authority");
    s
}

#[test]
fn containers_lql_writes_read_the_same_in_an_independent_reader() {
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    for family in ["llama3", "gemma3", "qwen3moe"] {
        let src = lql_tests::repo_root()
            .join("tests/fixtures/families")
            .join(family)
            .join("model.gguf");
        let c = Connection::open_in_memory().unwrap();
        c.execute(&format!("USE {}", q(&src))).unwrap();

        // EXTRACT: a canonical container, every object source-exact.
        let base = tmp.path().join(format!("{family}.vindex3"));
        c.execute(&format!("EXTRACT MODEL {} INTO {}", q(&src), q(&base)))
            .unwrap_or_else(|e| panic!("{family}: EXTRACT: {e}"));
        let s = agree(&py, &c, &base, &format!("{family} EXTRACT"));
        assert_eq!(s["authority"], "canonical", "{family}");

        // REPRESENT: a Q8_0 variant beside the original, and the profile selecting it.
        c.execute(&format!("REPRESENT ALL AS Q8_0 INTO {}", q(&base)))
            .unwrap_or_else(|e| panic!("{family}: REPRESENT: {e}"));
        let s = agree(&py, &c, &base, &format!("{family} REPRESENT"));
        let encodings: Vec<String> = s["objects"]
            .as_object()
            .unwrap()
            .values()
            .flat_map(|o| o["representations"].as_object().unwrap().keys().cloned())
            .collect();
        assert!(
            encodings.iter().any(|e| e == "q8_0"),
            "{family}: {encodings:?}"
        );

        // COMPACT INTO: the same container, byte for byte where it matters.
        let compacted = tmp.path().join(format!("{family}.compact.vindex3"));
        c.execute(&format!("COMPACT {} INTO {}", q(&base), q(&compacted)))
            .unwrap_or_else(|e| panic!("{family}: COMPACT: {e}"));
        let t = agree(&py, &c, &compacted, &format!("{family} COMPACT"));
        assert_eq!(s, t, "{family}: COMPACT keeps what the reader sees");
    }

    // COMPILE of an edited state: a derived container, the changed object approximate.
    let src = lql_tests::repo_root().join("tests/fixtures/families/llama3/model.gguf");
    let c = Connection::open_in_memory().unwrap();
    c.execute(&format!("USE {}", q(&src))).unwrap();
    c.execute(
        "INSERT INTO edges (entity, relation, target, prompt) VALUES ('fox', 'jumps_over', ' the', \
         'The quick brown fox jumps over the lazy') AT LAYER 1",
    )
    .unwrap();
    let compiled = tmp.path().join("edited.vindex3");
    c.execute(&format!("COMPILE CURRENT INTO VINDEX {}", q(&compiled)))
        .unwrap_or_else(|e| panic!("COMPILE: {e}"));
    let s = agree(&py, &c, &compiled, "COMPILE of an edited state");
    assert_eq!(s["authority"], "derived");
    assert_eq!(
        s["objects"]["text.decoder_stack"]["representations"]
            .as_object()
            .unwrap()
            .values()
            .next()
            .unwrap(),
        "numerically-approximate",
        "{s}"
    );

    // The reader is not a rubber stamp: one flipped payload byte is named.
    let seg = compiled.join("segments/text.final_norm.bin");
    let mut bytes = std::fs::read(&seg).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&seg, &bytes).unwrap();
    let script = lql_tests::repo_root().join("tests/tools/read_vindex3.py");
    let o = Command::new(&py)
        .arg(&script)
        .arg(&compiled)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "{out}");
    assert!(
        out.contains("text.final_norm") && out.contains("sha256"),
        "{out}"
    );
}
