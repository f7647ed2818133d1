//! `lql vindex …`: the format-native reader from the shell, on the conformance corpus
//! (`tests/fixtures/vindex3/`): JSON documents, derived figures, exit codes.

use std::path::{Path, PathBuf};
use std::process::Command;

fn case(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/vindex3/cases")
        .join(name)
}

fn lql(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lql"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(args: &[&str]) -> serde_json::Value {
    let (code, out, err) = lql(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

#[test]
fn vindex_commands_answer_from_the_artifact() {
    let c = case("valid-derived-from-f16");
    let p = c.to_str().unwrap();
    let i = json(&["vindex", "inspect", p, "--json"]);
    assert_eq!(i["authority"], "derived");
    assert_eq!(i["derived_from_model"], "synthetic.gguf");
    assert_eq!(i["graph_schema"], 6);
    assert_eq!(i["representations"].as_array().unwrap().len(), 3);
    assert_eq!(i["profiles"][0]["authority"], "numerically-approximate");
    let d = json(&["vindex", "describe", p, "text.embedding", "--json"]);
    assert_eq!(d["tensors"][0]["dtype"], "F16");
    let r = json(&["vindex", "representations", p, "--json"]);
    assert!(r
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["fidelity"] == "numerically-approximate"));
    let pr = json(&["vindex", "precision", p, "--json"]);
    let total = pr.as_array().unwrap().last().unwrap().clone();
    assert_eq!(total["object"], "TOTAL");
    assert!(total["bits_per_weight"].as_f64().unwrap() > 16.0);
    let v = json(&["vindex", "verify", p, "--json"]);
    assert!(v.as_array().unwrap().iter().all(|r| r["status"] == "ok"));
    // Tables without --json.
    let (code, out, _) = lql(&["vindex", "precision", p]);
    assert_eq!(code, 0);
    assert!(out.contains("TOTAL"), "{out}");
}

#[test]
fn vindex_commands_exit_non_zero_on_faults_and_refusals() {
    let flipped = case("verify-payload-byte-flipped");
    let (code, out, _) = lql(&["vindex", "verify", flipped.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FAILED"), "{out}");
    let v2 = case("refuse-version-2");
    let (code, _, err) = lql(&["vindex", "inspect", v2.to_str().unwrap(), "--json"]);
    assert_eq!(code, 1);
    assert!(err.contains("VINDEX2"), "{err}");
    let ok = case("valid-source-tied");
    let (code, _, err) = lql(&["vindex", "describe", ok.to_str().unwrap(), "text.nothing"]);
    assert_eq!(code, 1);
    assert!(err.contains("text.decoder_stack"), "{err}");
}
