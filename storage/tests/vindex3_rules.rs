//! Seed 002 rules the VINDEX3 reader and writer once contradicted (issue 14, items 1–6):
//! the graph schema and attention census, facts stored twice, provenance-derived authority
//! and fidelity, unknown encodings refused only where needed, the variant catalogue and
//! profiles, absent variants failing before any segment is read, and bank segments
//! dispatched on declared tags and hashed.

mod vindex3_support;

use std::path::{Path, PathBuf};

use lql_storage::format::vindex3::{
    self, extract, open_model, open_model_profile, verify, ExtractEncoding, VerifyStatus,
};
use lql_storage::{Model, OperandKey, Role, StorageError};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use vindex3_support::{hex, synthetic, SMALL};

fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

fn write_json(p: &Path, v: &Value) {
    std::fs::write(p, serde_json::to_vec_pretty(v).unwrap()).unwrap();
}

fn err_of(r: Result<Model, StorageError>) -> String {
    match r {
        Ok(_) => panic!("expected the container to be refused"),
        Err(e) => e.to_string(),
    }
}

fn container(dir: &Path, enc: ExtractEncoding) -> PathBuf {
    let out = dir.join(format!("c-{}", enc.name()));
    extract(&synthetic(SMALL), &out, enc, &mut |_| {}).unwrap();
    out
}

fn edit_graph(dir: &Path, f: impl FnOnce(&mut Value)) {
    let p = dir.join("system_graph.json");
    let mut g = read_json(&p);
    f(&mut g);
    write_json(&p, &g);
}

fn edit_index(dir: &Path, f: impl FnOnce(&mut Value)) {
    let p = dir.join("index.json");
    let mut g = read_json(&p);
    f(&mut g);
    write_json(&p, &g);
}

// ---- item 1 -------------------------------------------------------------------------

#[test]
fn unknown_graph_schema_is_refused_by_number() {
    let t = tempfile::tempdir().unwrap();
    let c = container(t.path(), ExtractEncoding::Source);
    edit_graph(&c, |g| g["schema"] = json!(5));
    let e = err_of(open_model(&c));
    assert!(e.contains("schema 5") && e.contains("schema 6"), "{e}");
    edit_graph(&c, |g| g["schema"] = json!(7));
    assert!(err_of(open_model(&c)).contains("schema 7"));
}

#[test]
fn short_or_missing_attention_census_fails_closed() {
    let t = tempfile::tempdir().unwrap();
    let c = container(t.path(), ExtractEncoding::Source);
    let orig = read_json(&c.join("system_graph.json"));
    edit_graph(&c, |g| {
        g["components"][0]["attention"]
            .as_array_mut()
            .unwrap()
            .pop();
    });
    let e = err_of(open_model(&c));
    assert!(e.contains("census") && e.contains("layer 1"), "{e}");
    write_json(&c.join("system_graph.json"), &orig);
    edit_graph(&c, |g| {
        g["components"][0]
            .as_object_mut()
            .unwrap()
            .remove("attention");
    });
    assert!(err_of(open_model(&c)).contains("census"));
    // Out of order.
    write_json(&c.join("system_graph.json"), &orig);
    edit_graph(&c, |g| {
        g["components"][0]["attention"][0]["layer"] = json!(1);
        g["components"][0]["attention"][1]["layer"] = json!(0);
    });
    assert!(err_of(open_model(&c)).contains("census"));
    write_json(&c.join("system_graph.json"), &orig);
    assert!(open_model(&c).is_ok());
}

#[test]
fn facts_stored_twice_must_agree() {
    let t = tempfile::tempdir().unwrap();
    let c = container(t.path(), ExtractEncoding::Source);
    let graph = read_json(&c.join("system_graph.json"));
    edit_graph(&c, |g| {
        g["components"][0]["attention"][1]["position"]["rope"]["theta"] = json!(500000.0)
    });
    let e = err_of(open_model(&c));
    assert!(e.contains("theta") && e.contains("attention[1]"), "{e}");
    write_json(&c.join("system_graph.json"), &graph);
    edit_graph(&c, |g| {
        g["components"][0]["attention"][0]["position"]["rope"]["pairing"] = json!("half_split")
    });
    assert!(err_of(open_model(&c)).contains("pairing"));
    write_json(&c.join("system_graph.json"), &graph);
    edit_graph(&c, |g| {
        g["components"][0]["attention"][0]["position"] = json!("none")
    });
    assert!(err_of(open_model(&c)).contains("position"));
    write_json(&c.join("system_graph.json"), &graph);
    edit_index(&c, |i| i["hidden_size"] = json!(65));
    let e = err_of(open_model(&c));
    assert!(e.contains("hidden_size 65") && e.contains("64"), "{e}");
    edit_index(&c, |i| {
        i["hidden_size"] = json!(64);
        i["num_layers"] = json!(3);
    });
    assert!(err_of(open_model(&c)).contains("num_layers 3"));
}

// ---- item 2 -------------------------------------------------------------------------

#[test]
fn container_to_container_extract_is_derived_with_chain_fidelity() {
    let t = tempfile::tempdir().unwrap();
    let q8 = container(t.path(), ExtractEncoding::Q8_0);
    let first = read_json(&q8.join("index.json"));
    assert_eq!(first["authority"], json!("canonical"));
    assert_eq!(first["derived_from_model"], Value::Null);
    // Re-extract the lossy container byte for byte (source encoding of the container).
    let again = t.path().join("again");
    extract(
        &open_model(&q8).unwrap(),
        &again,
        ExtractEncoding::Source,
        &mut |_| {},
    )
    .unwrap();
    let idx = read_json(&again.join("index.json"));
    assert_eq!(idx["authority"], json!("derived"));
    assert_eq!(idx["derived_from_model"], json!("synthetic.gguf"));
    assert_eq!(
        idx["provenance"]["chain"],
        json!(["synthetic.gguf", "c-q8_0"])
    );
    let reps = idx["representations"].as_object().unwrap();
    let was = first["representations"].as_object().unwrap();
    for (id, e) in reps {
        let object = e["object"].as_str().unwrap();
        let before = was.values().find(|w| w["object"] == json!(object)).unwrap();
        // Weaker-or-equal along the chain: a copy of a lossy representation stays lossy.
        assert_eq!(e["fidelity"], before["fidelity"], "{id}");
        assert_eq!(e["payload_sha256"], before["payload_sha256"], "{id}");
    }
    assert!(reps
        .values()
        .any(|e| e["fidelity"] == json!("numerically-approximate")));
    // A third step keeps naming the first source.
    let third = t.path().join("third");
    extract(
        &open_model(&again).unwrap(),
        &third,
        ExtractEncoding::Source,
        &mut |_| {},
    )
    .unwrap();
    let idx = read_json(&third.join("index.json"));
    assert_eq!(idx["derived_from_model"], json!("synthetic.gguf"));
    assert_eq!(
        idx["provenance"]["chain"],
        json!(["synthetic.gguf", "c-q8_0", "again"])
    );
}

// ---- item 3 -------------------------------------------------------------------------

#[test]
fn unknown_encoding_blocks_only_the_operations_that_need_it() {
    let t = tempfile::tempdir().unwrap();
    let c = container(t.path(), ExtractEncoding::Source);
    // Rewrite one tensor's dtype in the decoder stack's header to an encoding this build
    // does not know (same length, so the header keeps its size).
    let seg = c.join("segments/text.decoder_stack.bin");
    let mut b = std::fs::read(&seg).unwrap();
    let hlen = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    let mut header: Value = serde_json::from_slice(&b[8..8 + hlen]).unwrap();
    let t1 = header["tensors"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|t| t["name"] == json!("1.ffn_down.weight"))
        .unwrap();
    t1["dtype"] = json!("Q4_X");
    let mut h = serde_json::to_vec(&header).unwrap();
    assert!(h.len() <= hlen);
    h.resize(hlen, b' ');
    b[8..8 + hlen].copy_from_slice(&h);
    std::fs::write(&seg, &b).unwrap();
    edit_index(&c, |i| {
        let r = &mut i["representations"]["text.decoder_stack@source"];
        r["segment_sha256"] = json!(hex(Sha256::digest(&b)));
    });
    let m = open_model(&c).expect("a browse-only binding opens");
    assert!(m.operand(OperandKey::layer(1, Role::FfnDown)).is_none());
    assert!(m.operand(OperandKey::layer(1, Role::FfnGate)).is_some());
    assert!(m.operand(OperandKey::layer(0, Role::FfnDown)).is_some());
    let missing = lql_storage::model::missing_for_execution(&m);
    assert_eq!(missing, vec!["ffn_down of layer 1".to_string()]);
    // The operation that needs it is told the operand is in an unknown encoding, not
    // that it is missing.
    use lql_storage::OperandSource;
    let e = m
        .require(OperandKey::layer(1, Role::FfnDown))
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("unknown encoding \"Q4_X\"")
            && e.contains("1.ffn_down.weight")
            && e.contains("segments/text.decoder_stack.bin")
            && !e.contains("missing operand"),
        "{e}"
    );
    // EXTRACT cannot carry what it cannot decode: refused before anything is written.
    let out = t.path().join("out");
    let e = lql_storage::format::vindex3::extract(&m, &out, ExtractEncoding::Source, &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("not supported yet")
            && e.contains("unknown encoding")
            && e.contains("nothing was written"),
        "{e}"
    );
    assert!(!out.exists());
}

// ---- item 4 -------------------------------------------------------------------------

#[test]
fn variant_catalogue_and_profiles_have_the_spec_shape() {
    let t = tempfile::tempdir().unwrap();
    let c = container(t.path(), ExtractEncoding::Source);
    let idx = read_json(&c.join("index.json"));
    let set = &idx["variants"]["text.decoder_stack"];
    assert_eq!(set["region_set"], json!("text.decoder_stack"));
    assert_eq!(set["baseline"], json!("source"));
    assert_eq!(
        set["variants"]["source"],
        json!({"storage": "segments/text.decoder_stack.bin",
               "representation": "text.decoder_stack@source",
               "fidelity": "source-exact"})
    );
    let p = &idx["profiles"][0];
    assert_eq!(p["profile"], json!("exact"));
    assert_eq!(p["select"]["text.decoder_stack"], json!("source"));
    assert!(
        p.get("authority").is_none(),
        "a profile carries no authority"
    );
    // A lossy extract's profile is not named exact.
    let q = container(t.path(), ExtractEncoding::Q8_0);
    let idx = read_json(&q.join("index.json"));
    assert_ne!(idx["profiles"][0]["profile"], json!("exact"));
}

#[test]
fn profiles_are_chosen_by_name_never_by_position() {
    let t = tempfile::tempdir().unwrap();
    let c = container(t.path(), ExtractEncoding::Source);
    edit_index(&c, |i| {
        let exact = i["profiles"][0].clone();
        i["profiles"] = json!([
            {"profile": "broken", "select": {"text.decoder_stack": "nvfp4"}},
            exact,
        ]);
    });
    // The default binding takes every baseline, not the first profile.
    assert!(open_model(&c).is_ok());
    assert!(open_model_profile(&c, Some("exact")).is_ok());
    let e = err_of(open_model_profile(&c, Some("broken")));
    assert!(e.contains("nvfp4") && e.contains("source"), "{e}");
    let e = err_of(open_model_profile(&c, Some("nope")));
    assert!(e.contains("\"nope\"") && e.contains("exact"), "{e}");
    // A profile claiming more than its selections allow is refused.
    let q = container(t.path(), ExtractEncoding::Q8_0);
    let name = read_json(&q.join("index.json"))["profiles"][0]["profile"].clone();
    edit_index(&q, |i| {
        i["profiles"][0]["authority"] = json!("source-exact")
    });
    let e = err_of(open_model_profile(&q, name.as_str()));
    assert!(e.contains("claims authority"), "{e}");
}

// ---- item 5 -------------------------------------------------------------------------

#[test]
fn absent_variant_fails_before_any_segment_is_opened() {
    let t = tempfile::tempdir().unwrap();
    let c = container(t.path(), ExtractEncoding::Source);
    edit_index(&c, |i| {
        i["profiles"][0]["select"]["text.final_norm"] = json!("nvfp4");
    });
    // Earlier objects' segments are gone: were they opened first, that would be the error.
    std::fs::remove_file(c.join("segments/text.embedding.bin")).unwrap();
    std::fs::remove_file(c.join("segments/text.decoder_stack.bin")).unwrap();
    let e = err_of(open_model_profile(&c, Some("exact")));
    assert!(
        e.contains("text.final_norm") && e.contains("\"nvfp4\"") && e.contains("\"source\""),
        "{e}"
    );
    // One sentence, no run of spaces from a broken line continuation.
    assert!(
        e.contains("which is not present; present: [\"source\"]"),
        "{e}"
    );
    assert!(!e.contains("  "), "{e:?}");
}

// ---- item 6 -------------------------------------------------------------------------

fn bank(dir: &Path, segments: Value, files: &[(&str, Vec<u8>)]) {
    write_json(
        &dir.join("index.json"),
        &json!({"version": 4, "model": "m", "family": "gpt-oss", "hidden_size": 64,
                "num_layers": 1, "system_graph": null, "moe_manifest": "moe_manifest.json",
                "representations": {}, "segments": segments,
                "profiles": [], "variants": {}, "authority": "canonical"}),
    );
    write_json(
        &dir.join("moe_manifest.json"),
        &json!({"moe_layer": {"layer": 0}}),
    );
    for (name, bytes) in files {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}

#[test]
fn bank_segments_dispatch_on_declared_tags_not_names() {
    let t = tempfile::tempdir().unwrap();
    let f = vindex3_support::lyrw_dense(0, 16, 64);
    let sha = hex(Sha256::digest(&f));
    // Declared LYRW v2 under a name without the .lyrw suffix: read and hashed.
    bank(
        t.path(),
        json!({"layer_000.bin": {"codec": "lyrw", "format_version": 2, "sha256": sha}}),
        &[("layer_000.bin", f.clone())],
    );
    let rows = verify(t.path()).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].status, VerifyStatus::Ok, "{}", rows[0].detail);
    assert_eq!(vindex3::stats(t.path()).unwrap().tensors, 3);
    // A .lyrw name declared with another codec is not parsed as LYRW.
    let t = tempfile::tempdir().unwrap();
    bank(
        t.path(),
        json!({"layer_000.lyrw": {"codec": "nvbank", "format_version": 1}}),
        &[("layer_000.lyrw", f.clone())],
    );
    let rows = verify(t.path()).unwrap();
    assert_eq!(rows[0].status, VerifyStatus::Unverified);
    assert!(
        rows[0].detail.contains("not supported yet"),
        "{}",
        rows[0].detail
    );
    assert_eq!(vindex3::stats(t.path()).unwrap().tensors, 0);
}

#[test]
fn bank_verify_never_passes_empty_or_unhashed() {
    // A missing file (under any name) fails.
    let t = tempfile::tempdir().unwrap();
    bank(t.path(), json!({"gone.bin": {"format_version": 2}}), &[]);
    let rows = verify(t.path()).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].status, VerifyStatus::Failed);
    assert!(rows[0].detail.contains("gone.bin"), "{}", rows[0].detail);
    // No segment at all fails.
    let t = tempfile::tempdir().unwrap();
    bank(t.path(), json!({}), &[]);
    assert!(!vindex3::all_ok(&verify(t.path()).unwrap()));
    // A recorded hash is compared; none recorded is never "ok".
    let t = tempfile::tempdir().unwrap();
    let f = vindex3_support::lyrw_dense(0, 16, 64);
    bank(
        t.path(),
        json!({"layer_000.lyrw": {"format_version": 2, "sha256": "00".repeat(32)}}),
        &[("layer_000.lyrw", f.clone())],
    );
    let rows = verify(t.path()).unwrap();
    assert_eq!(rows[0].status, VerifyStatus::Failed);
    assert!(rows[0].detail.contains("sha256"), "{}", rows[0].detail);
    bank(
        t.path(),
        json!({"layer_000.lyrw": {"format_version": 2}}),
        &[("layer_000.lyrw", f)],
    );
    assert_eq!(
        verify(t.path()).unwrap()[0].status,
        VerifyStatus::Unverified
    );
}

// ---- a second variant beside the baseline (§9.1.4) ----------------------------------

/// Graft `donor`'s decoder-stack representation into `c` as a second variant beside the
/// baseline (a new segment file; nothing existing is touched) and add a profile selecting
/// it.
pub fn graft_variant(c: &Path, donor: &Path, variant: &str, profile: &str) {
    let d = read_json(&donor.join("index.json"));
    let rep_id = format!("text.decoder_stack@{variant}");
    let mut entry = d["representations"][&rep_id].clone();
    let seg = format!("segments/text.decoder_stack.{variant}.bin");
    std::fs::copy(donor.join(entry["segment"].as_str().unwrap()), c.join(&seg)).unwrap();
    entry["segment"] = json!(seg);
    edit_index(c, |i| {
        i["representations"][&rep_id] = entry.clone();
        i["variants"]["text.decoder_stack"]["variants"][variant] = json!({
            "storage": seg, "representation": rep_id, "fidelity": entry["fidelity"].clone()});
        let mut p = i["profiles"][0].clone();
        p["profile"] = json!(profile);
        p["select"]["text.decoder_stack"] = json!(variant);
        i["profiles"].as_array_mut().unwrap().push(p);
    });
}

#[test]
fn a_profile_binds_the_variant_it_selects() {
    let t = tempfile::tempdir().unwrap();
    let c = container(t.path(), ExtractEncoding::Source);
    let f16 = container(t.path(), ExtractEncoding::F16);
    let before = read_json(&c.join("index.json"))["representations"].clone();
    graft_variant(&c, &f16, "f16", "mixed-precision");
    let base = open_model(&c).unwrap();
    let mixed = open_model_profile(&c, Some("mixed-precision")).unwrap();
    let key = OperandKey::layer(0, Role::FfnDown);
    assert_eq!(base.operand(key).unwrap().dtype, lql_storage::DType::Q4_1);
    assert_eq!(mixed.operand(key).unwrap().dtype, lql_storage::DType::F16);
    // The bytes bound are the donor's, not a conversion.
    let donor = open_model(&f16).unwrap();
    assert_eq!(
        mixed.view_of(mixed.operand(key).unwrap()).bytes,
        donor.view_of(donor.operand(key).unwrap()).bytes
    );
    let con = vindex3::Container::load(&c).unwrap();
    assert_eq!(
        con.profile_authority(Some("mixed-precision")).unwrap(),
        "numerically-approximate"
    );
    assert_eq!(
        con.profile_authority(Some("exact")).unwrap(),
        "source-exact"
    );
    // Existing representations untouched; VERIFY passes with both variants.
    let after = read_json(&c.join("index.json"))["representations"].clone();
    for (id, e) in before.as_object().unwrap() {
        assert_eq!(&after[id], e, "{id}");
    }
    assert!(vindex3::all_ok(&verify(&c).unwrap()));
    // Provenance of a binding follows the variant it maps.
    let in_use = vindex3::provenance::in_use(&mixed, &con).unwrap();
    assert_eq!(in_use["text.decoder_stack"], "text.decoder_stack@f16");
}

// ---- round 2: residual messages ------------------------------------------------------

#[test]
fn graph_only_operations_on_a_bank_container_name_the_operation() {
    let bank = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/vindex3/cases/bank-shape-valid");
    let e = lql_storage::format::vindex3::show_components(&bank)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("not supported yet: SHOW COMPONENTS on a VINDEX3 bank-shape container")
            && e.contains("USE executes a bank container"),
        "{e}"
    );
    // The bank shape is executed by this build: no text says otherwise.
    assert!(!e.contains("cannot be executed"), "{e}");
}
