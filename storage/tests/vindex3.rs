//! VINDEX3 graph containers on a synthetic model: EXTRACT round trips, hashes, VERIFY,
//! version rules, hostile and damaged containers, unknown-field preservation, crash safety.

mod vindex3_support;

use std::path::{Path, PathBuf};

use lql_storage::codec::decode_row;
use lql_storage::format::vindex3::{
    self, extract, open_model, show_components, show_representations, show_tensors, stats, verify,
    Container, ExtractEncoding, VerifyRow, VerifyStatus,
};
use lql_storage::{DType, Model, OperandSource, StorageError};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use vindex3_support::crash::CrashChild;
use vindex3_support::{hex, synthetic, Geometry, SMALL};

fn extract_to(model: &Model, dir: &Path, enc: ExtractEncoding) -> PathBuf {
    let out = dir.join(format!("c-{}", enc.name()));
    extract(model, &out, enc, &mut |_| {}).expect("extract");
    out
}

/// A SOURCE extract of the small synthetic model under `dir`.
fn small_container(dir: &Path) -> PathBuf {
    extract_to(&synthetic(SMALL), dir, ExtractEncoding::Source)
}

/// VERIFY's failed rows.
fn failed(rows: &[VerifyRow]) -> Vec<&VerifyRow> {
    rows.iter()
        .filter(|r| r.status == VerifyStatus::Failed)
        .collect()
}

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

#[test]
fn source_extract_keeps_bytes_and_hashes() {
    let t = tempfile::tempdir().unwrap();
    let model = synthetic(SMALL);
    let out = t.path().join("c");
    let mut reports = 0;
    let rep = extract(&model, &out, ExtractEncoding::Source, &mut |_| reports += 1).unwrap();
    assert_eq!(reports, model.operands.len());
    assert_eq!(rep.tensors, model.operands.len());
    // Tied head: embedding, decoder stack, final norm, and the tied output head object.
    assert_eq!(rep.objects, 4);
    let source_bytes: u64 = model.operands.values().map(|o| o.len as u64).sum();
    assert_eq!(rep.payload_bytes, source_bytes);

    // Every payload hash is the sha256 of the source tensors' bytes in table (name) order.
    let index = read_json(&out.join("index.json"));
    assert_eq!(index["version"], json!(4));
    assert_eq!(index["authority"], json!("canonical"));
    let reps = index["representations"].as_object().unwrap();
    assert_eq!(reps.len(), 3);
    let graph = read_json(&out.join("system_graph.json"));
    let table = graph["components"][0]["operands"].as_array().unwrap();
    for (id, e) in reps {
        assert_eq!(e["fidelity"], json!("source-exact"));
        let object = e["object"].as_str().unwrap();
        let mut rows: Vec<(String, String)> = table
            .iter()
            .filter(|b| b["object"] == json!(object))
            .map(|b| {
                (
                    b["tensor"].as_str().unwrap().to_string(),
                    b["source_name"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        rows.sort();
        let mut h = Sha256::new();
        for (_, src) in &rows {
            let op = model
                .operands
                .values()
                .find(|o| &o.source_name == src)
                .unwrap();
            h.update(model.view_of(op).bytes);
        }
        assert_eq!(
            e["payload_sha256"].as_str().unwrap(),
            hex(h.finalize()),
            "{id}"
        );
        let seg = std::fs::read(out.join(e["segment"].as_str().unwrap())).unwrap();
        assert_eq!(
            e["segment_sha256"].as_str().unwrap(),
            hex(Sha256::digest(&seg))
        );
        // Payload starts on a 32-byte boundary.
        let hlen = u64::from_le_bytes(seg[..8].try_into().unwrap());
        assert_eq!((8 + hlen) % 32, 0);
    }
    let head = graph["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == json!("text.output_head"))
        .unwrap();
    assert_eq!(head["tied_to"], json!("text.embedding"));

    // Reopened: same surface, same operand bytes, same tokenizer.
    let opened = open_model(&out).unwrap();
    assert_eq!(opened.surface, model.surface);
    assert_eq!(opened.operands.len(), model.operands.len());
    for (k, op) in &model.operands {
        let v = opened.view(*k).unwrap();
        assert_eq!(v.dtype, op.dtype);
        assert_eq!(v.shape, &op.shape[..]);
        assert_eq!(v.bytes, model.view_of(op).bytes, "{k}");
        // Zero-copy views into 32-byte-aligned tensor starts (the map is page-aligned).
        assert_eq!(v.bytes.as_ptr() as usize % 32, 0, "{k}");
    }
    assert_eq!(
        *opened.tokenizer_spec().unwrap(),
        *model.tokenizer_spec().unwrap()
    );
    let rows = verify(&out).unwrap();
    assert!(
        rows.iter().all(|r| r.status == VerifyStatus::Ok),
        "{rows:?}"
    );
    assert_eq!(rows.len(), 1 + 3 + 4); // graph, three representations, four capability files
}

#[test]
fn untied_head_gets_its_own_segment() {
    let t = tempfile::tempdir().unwrap();
    let model = synthetic(Geometry {
        tied: false,
        ..SMALL
    });
    let out = extract_to(&model, t.path(), ExtractEncoding::Source);
    assert!(out.join("segments/text.output_head.bin").is_file());
    let opened = open_model(&out).unwrap();
    for (k, op) in &model.operands {
        assert_eq!(opened.view(*k).unwrap().bytes, model.view_of(op).bytes);
    }
}

fn decoded(m: &Model, k: lql_storage::OperandKey) -> Vec<f32> {
    let v = m.view(k).unwrap();
    let n: usize = v.shape.iter().product();
    let mut out = vec![0f32; n];
    decode_row(v.dtype, v.bytes, &mut out).unwrap();
    out
}

#[test]
fn reencoded_extracts_are_close_and_marked_approximate() {
    let t = tempfile::tempdir().unwrap();
    let model = synthetic(SMALL);
    for (enc, dtype, tol) in [
        (ExtractEncoding::F16, DType::F16, 1e-3),
        (ExtractEncoding::BF16, DType::BF16, 4e-3),
        (ExtractEncoding::Q8_0, DType::Q8_0, 8e-3),
    ] {
        let out = extract_to(&model, t.path(), enc);
        let opened = open_model(&out).unwrap();
        for (k, op) in &model.operands {
            let v = opened.view(*k).unwrap();
            if op.shape.len() == 1 {
                assert_eq!(v.dtype, DType::F32, "{k}");
            } else {
                assert_eq!(v.dtype, dtype, "{k}");
            }
            let (a, b) = (decoded(&model, *k), decoded(&opened, *k));
            let worst = a
                .iter()
                .zip(&b)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max);
            assert!(worst <= tol, "{enc} {k}: {worst}");
        }
        let s = stats(&out).unwrap();
        assert_eq!(s.fidelity, "numerically-approximate");
        let reps = show_representations(&out).unwrap();
        let norm = reps.iter().find(|r| r.object == "text.final_norm").unwrap();
        assert_eq!(norm.fidelity, "source-exact"); // F32 norms are copied
        assert!(vindex3::all_ok(&verify(&out).unwrap()));
    }
}

#[test]
fn flipped_byte_fails_verify_naming_segment_and_representation() {
    let t = tempfile::tempdir().unwrap();
    let base = small_container(t.path());
    let index = read_json(&base.join("index.json"));
    for (id, e) in index["representations"].as_object().unwrap() {
        let seg_rel = e["segment"].as_str().unwrap();
        let seg_path = base.join(seg_rel);
        let orig = std::fs::read(&seg_path).unwrap();
        let hlen = u64::from_le_bytes(orig[..8].try_into().unwrap()) as usize;
        // A byte in the middle of the payload, then a byte of the header's padding.
        for pos in [8 + hlen + (orig.len() - 8 - hlen) / 2, 8 + hlen - 1] {
            let mut b = orig.clone();
            b[pos] ^= 0x40;
            std::fs::write(&seg_path, &b).unwrap();
            let rows = verify(&base).unwrap();
            let bad = failed(&rows);
            assert_eq!(bad.len(), 1, "{rows:?}");
            assert_eq!(&bad[0].representation, id);
            assert!(bad[0].detail.contains(seg_rel), "{}", bad[0].detail);
            assert_ne!(bad[0].expected, bad[0].actual);
            if pos > 8 + hlen {
                assert!(bad[0].detail.contains("differs"), "{}", bad[0].detail);
                assert!(bad[0].detail.contains(&format!("{pos}")) || bad[0].detail.contains("["));
            }
        }
        std::fs::write(&seg_path, &orig).unwrap();
    }
    // The decoder stack names the drifted tensor and its byte range.
    let seg_path = base.join("segments/text.decoder_stack.bin");
    let orig = std::fs::read(&seg_path).unwrap();
    let row = show_tensors(&base)
        .unwrap()
        .into_iter()
        .find(|r| r.name == "1.ffn_up.weight")
        .unwrap();
    let mut b = orig.clone();
    b[(row.offset + 5) as usize] ^= 1;
    std::fs::write(&seg_path, &b).unwrap();
    let rows = verify(&base).unwrap();
    let bad = rows
        .iter()
        .find(|r| r.status == VerifyStatus::Failed)
        .unwrap();
    assert!(bad.detail.contains("\"1.ffn_up.weight\""), "{}", bad.detail);
    assert!(
        bad.detail
            .contains(&format!("[{}, {})", row.offset, row.offset + row.bytes)),
        "{}",
        bad.detail
    );
    std::fs::write(&seg_path, &orig).unwrap();
    // A capability file and the graph are covered too.
    let tok = base.join("tokenizer_spec.json");
    let orig = std::fs::read(&tok).unwrap();
    let mut b = orig.clone();
    b[10] ^= 1;
    std::fs::write(&tok, &b).unwrap();
    let rows = verify(&base).unwrap();
    let bad = failed(&rows);
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0].representation, "tokenizer_spec.json");
    std::fs::write(&tok, &orig).unwrap();
    assert!(vindex3::all_ok(&verify(&base).unwrap()));
}

#[test]
fn truncated_or_missing_segment_is_refused_by_name() {
    let t = tempfile::tempdir().unwrap();
    let base = small_container(t.path());
    for seg in [
        "segments/text.embedding.bin",
        "segments/text.decoder_stack.bin",
        "segments/text.final_norm.bin",
    ] {
        let p = base.join(seg);
        let orig = std::fs::read(&p).unwrap();
        for cut in [orig.len() - 1, orig.len() / 2, 40, 5, 0] {
            std::fs::write(&p, &orig[..cut]).unwrap();
            let e = err_of(open_model(&base));
            assert!(e.contains(seg), "{cut}: {e}");
            assert!(e.contains("truncated"), "{cut}: {e}");
            // And VERIFY reports it as a failed row, not an error.
            let rows = verify(&base).unwrap();
            assert!(rows
                .iter()
                .any(|r| r.status == VerifyStatus::Failed && r.detail.contains(seg)));
        }
        std::fs::remove_file(&p).unwrap();
        let e = err_of(open_model(&base));
        assert!(e.contains(seg), "{e}");
        std::fs::write(&p, &orig).unwrap();
    }
    open_model(&base).unwrap();
}

#[test]
fn index_versions_are_judged_before_anything_else() {
    let t = tempfile::tempdir().unwrap();
    let base = small_container(t.path());
    let ip = base.join("index.json");
    let orig = read_json(&ip);
    // Remove every segment: a refusal by version must come before any segment is read.
    let segs = base.join("segments");
    let hidden = base.join("segments.away");
    std::fs::rename(&segs, &hidden).unwrap();
    for (v, must) in [
        (json!(2), vec!["version 2", "VINDEX2", "3–4"]),
        (json!(1), vec!["version 1", "VINDEX2"]),
        (json!(5), vec!["version 5", "unknown", "3–4"]),
        (json!(0), vec!["version 0", "3–4"]),
        (json!("4"), vec!["\"4\"", "string", "3–4"]),
        (json!(4.5), vec!["4.5", "3–4"]),
        (Value::Null, vec!["null", "3–4"]),
    ] {
        let mut idx = orig.clone();
        idx["version"] = v.clone();
        write_json(&ip, &idx);
        let e = err_of(open_model(&base));
        for m in must {
            assert!(e.contains(m), "{v}: {e} lacks {m}");
        }
        assert!(verify(&base).is_err());
    }
    let mut idx = orig.clone();
    idx.as_object_mut().unwrap().remove("version");
    write_json(&ip, &idx);
    let e = err_of(open_model(&base));
    assert!(e.contains("no \"version\"") && e.contains("3–4"), "{e}");
    // Version 3 is VINDEX3 too (pre-RegionLayout schema).
    std::fs::rename(&hidden, &segs).unwrap();
    let mut idx = orig.clone();
    idx["version"] = json!(3);
    write_json(&ip, &idx);
    open_model(&base).unwrap();
    // Not JSON, not an object, absent.
    std::fs::write(&ip, b"{\"version\": 4,").unwrap();
    assert!(err_of(open_model(&base)).contains("index.json"));
    std::fs::write(&ip, b"[4]").unwrap();
    assert!(err_of(open_model(&base)).contains("not a JSON object"));
    std::fs::remove_file(&ip).unwrap();
    assert!(err_of(open_model(&base)).contains("no index.json"));
}

#[test]
fn unknown_fields_are_ignored_and_survive_a_rewrite() {
    let t = tempfile::tempdir().unwrap();
    let model = synthetic(SMALL);
    let base = extract_to(&model, t.path(), ExtractEncoding::Source);
    let ip = base.join("index.json");
    let gp = base.join("system_graph.json");
    let mut idx = read_json(&ip);
    idx["future_top_level"] = json!({"a": [1, 2, 3]});
    idx["representations"]["text.embedding@source"]["future_rep_field"] = json!("kept");
    idx["capabilities"]["tokenizer_spec"]["future_cap"] = json!(7);
    write_json(&ip, &idx);
    let mut g = read_json(&gp);
    g["future_graph"] = json!(true);
    g["components"][0]["future_component"] = json!("x");
    g["components"][0]["execution_surface"]["future_surface_fact"] = json!(1.5);
    g["components"][0]["operands"][0]["future_binding"] = json!(null);
    g["objects"][0]["future_object"] = json!({"k": "v"});
    g["components"][0]["attention"][0]["future_attn"] = json!(3);
    write_json(&gp, &g);
    std::fs::write(base.join("UNKNOWN_FILE.txt"), b"ignored").unwrap();
    std::fs::create_dir(base.join("unknown_dir")).unwrap();

    let m = open_model(&base).unwrap();
    assert_eq!(m.surface, model.surface);
    // VERIFY flags the hand-edited graph (its hash is recorded), nothing else.
    let rows = verify(&base).unwrap();
    let bad = failed(&rows);
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0].object, "graph");

    let mut c = Container::load(&base).unwrap();
    c.rewrite().unwrap();
    let idx2 = read_json(&ip);
    assert_eq!(idx2["future_top_level"], json!({"a": [1, 2, 3]}));
    assert_eq!(
        idx2["representations"]["text.embedding@source"]["future_rep_field"],
        json!("kept")
    );
    assert_eq!(
        idx2["capabilities"]["tokenizer_spec"]["future_cap"],
        json!(7)
    );
    let g2 = read_json(&gp);
    assert_eq!(g2["future_graph"], json!(true));
    assert_eq!(g2["components"][0]["future_component"], json!("x"));
    assert_eq!(
        g2["components"][0]["execution_surface"]["future_surface_fact"],
        json!(1.5)
    );
    assert!(g2["components"][0]["operands"][0]
        .as_object()
        .unwrap()
        .contains_key("future_binding"));
    assert_eq!(g2["objects"][0]["future_object"], json!({"k": "v"}));
    assert_eq!(g2["components"][0]["attention"][0]["future_attn"], json!(3));
    // The rewrite re-recorded the graph hash: everything verifies again.
    assert!(vindex3::all_ok(&verify(&base).unwrap()));
    open_model(&base).unwrap();
}

#[test]
fn extract_refuses_a_non_empty_target_and_fills_an_empty_one() {
    let t = tempfile::tempdir().unwrap();
    let model = synthetic(SMALL);
    let out = t.path().join("x");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("keep.txt"), b"mine").unwrap();
    let e = extract(&model, &out, ExtractEncoding::Source, &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("not empty"), "{e}");
    assert_eq!(std::fs::read(out.join("keep.txt")).unwrap(), b"mine");
    let f = t.path().join("file");
    std::fs::write(&f, b"x").unwrap();
    assert!(extract(&model, &f, ExtractEncoding::Source, &mut |_| {}).is_err());
    let empty = t.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    extract(&model, &empty, ExtractEncoding::Source, &mut |_| {}).unwrap();
    open_model(&empty).unwrap();
    let nested = t.path().join("a/b/c");
    extract(&model, &nested, ExtractEncoding::Source, &mut |_| {}).unwrap();
    open_model(&nested).unwrap();
    // No temporary directories are left behind.
    let left: Vec<_> = std::fs::read_dir(t.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn bank_shape_without_a_schema_1_manifest_is_refused_by_name() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let bank = vindex3_support::lyrw_dense(0, 16, 64);
    write_json(
        &dir.join("index.json"),
        &json!({"version": 4, "model": "m", "family": "gpt-oss", "hidden_size": 8,
                "num_layers": 1, "system_graph": null, "moe_manifest": "moe_manifest.json",
                "representations": {}, "segments": {"layer_000.lyrw": {
                    "codec": "lyrw", "format_version": 2, "sha256": hex(Sha256::digest(&bank))}},
                "profiles": [], "variants": {}, "authority": "canonical"}),
    );
    write_json(
        &dir.join("moe_manifest.json"),
        &json!({"moe_layer": {"layer": 0}}),
    );
    std::fs::write(dir.join("layer_000.lyrw"), &bank).unwrap();
    assert_eq!(vindex3::detect(dir).unwrap(), vindex3::ContainerShape::Bank);
    // A manifest without `schema` is not one this build can bind (EXTRACT … SHAPE BANK
    // writes schema 1; exec/tests/moe.rs runs those).
    let e = err_of(open_model(dir));
    assert!(
        e.contains("MoE manifest schema missing") && e.contains("reads schema 1"),
        "{e}"
    );
    // Inspection and structural VERIFY work from the artifact.
    let s = stats(dir).unwrap();
    assert_eq!(
        (s.shape.as_str(), s.representations, s.tensors),
        ("bank", 1, 3)
    );
    assert_eq!(s.payload_bytes, 3 * 16 * 64 * 2);
    let regions = show_tensors(dir).unwrap();
    assert_eq!(regions.len(), 3);
    assert_eq!(regions[2].name, "entry.0.down");
    assert_eq!(regions[2].dtype, "f16");
    assert!(regions.iter().all(|r| r.offset % 64 == 0));
    let rows = verify(dir).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].status, VerifyStatus::Ok);
    // A truncated bank file fails VERIFY naming it.
    let f = dir.join("layer_000.lyrw");
    let b = std::fs::read(&f).unwrap();
    std::fs::write(&f, &b[..b.len() - 1]).unwrap();
    let rows = verify(dir).unwrap();
    assert_eq!(rows[0].status, VerifyStatus::Failed);
    assert!(rows[0].representation.contains("layer_000.lyrw"));
    assert!(
        rows[0].detail.contains("layer_000.lyrw"),
        "{}",
        rows[0].detail
    );
    // Neither a graph nor a manifest: not a VINDEX3 container.
    write_json(&dir.join("index.json"), &json!({"version": 4}));
    assert!(err_of(open_model(dir)).contains("system_graph"));
}

#[test]
fn hostile_indexes_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let base = small_container(t.path());
    let ip = base.join("index.json");
    let orig = read_json(&ip);
    for bad_path in ["../../etc/passwd", "/etc/passwd", "", "segments/../../x"] {
        let mut idx = orig.clone();
        idx["representations"]["text.embedding@source"]["segment"] = json!(bad_path);
        write_json(&ip, &idx);
        let e = err_of(open_model(&base));
        assert!(e.contains("container-relative"), "{bad_path}: {e}");
    }
    // A graph pointing outside the container.
    let mut idx = orig.clone();
    idx["system_graph"] = json!("../g.json");
    write_json(&ip, &idx);
    assert!(err_of(open_model(&base)).contains("container-relative"));
    write_json(&ip, &orig);
    // A segment header whose tensor range exceeds the payload.
    let sp = base.join("segments/text.final_norm.bin");
    let seg = std::fs::read(&sp).unwrap();
    let hlen = u64::from_le_bytes(seg[..8].try_into().unwrap()) as usize;
    let header = String::from_utf8(seg[8..8 + hlen].to_vec()).unwrap();
    let evil = header.replacen("\"offset\":0", "\"offset\":9", 1);
    assert_ne!(evil, header);
    let mut b = seg.clone();
    b[8..8 + hlen].copy_from_slice(evil.as_bytes());
    std::fs::write(&sp, &b).unwrap();
    let e = err_of(open_model(&base));
    assert!(e.contains("text.final_norm.bin"), "{e}");
    // An absurd header length.
    let mut b = seg.clone();
    b[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(&sp, &b).unwrap();
    let e = err_of(open_model(&base));
    assert!(
        e.contains("text.final_norm.bin") && e.contains("header length"),
        "{e}"
    );
    std::fs::write(&sp, &seg).unwrap();
    // An operand table naming a tensor the segment lacks: refused naming operand, object,
    // layer and segment.
    let gp = base.join("system_graph.json");
    let g_orig = read_json(&gp);
    let mut g = g_orig.clone();
    let ops = g["components"][0]["operands"].as_array_mut().unwrap();
    let i = ops
        .iter()
        .position(|b| b["role"] == json!("ffn_down") && b["layer"] == json!(1))
        .unwrap();
    ops.remove(i);
    write_json(&gp, &g);
    let e = err_of(open_model(&base));
    assert!(
        e.contains("ffn_down of layer 1")
            && e.contains("text.decoder_stack")
            && e.contains("segments/text.decoder_stack.bin"),
        "{e}"
    );
    write_json(&gp, &g_orig);
    open_model(&base).unwrap();
}

#[test]
fn introspection_answers_from_the_artifact() {
    let t = tempfile::tempdir().unwrap();
    let model = synthetic(SMALL);
    let base = extract_to(&model, t.path(), ExtractEncoding::Source);
    let comps = show_components(&base).unwrap();
    assert_eq!(comps.len(), 1);
    assert_eq!(comps[0].id, "text");
    assert_eq!(comps[0].num_layers, 2);
    assert!(comps[0]
        .objects
        .contains("text.output_head (tied to text.embedding)"));
    assert_eq!(comps[0].operands, model.operands.len());
    let reps = show_representations(&base).unwrap();
    assert_eq!(reps.len(), 3);
    assert!(reps.iter().all(|r| r.selected && r.encoding == "source"));
    let tensors = show_tensors(&base).unwrap();
    assert_eq!(tensors.len(), model.operands.len());
    assert!(tensors.iter().all(|r| r.offset % 32 == 0));
    let s = stats(&base).unwrap();
    assert_eq!(s.schema, 4);
    assert_eq!(s.shape, "graph");
    assert_eq!(s.fidelity, "source-exact");
    assert_eq!(
        s.payload_bytes,
        model.operands.values().map(|o| o.len as u64).sum::<u64>()
    );
    assert!(s.container_bytes > s.payload_bytes);
}

/// Child side of the crash test: runs only when the parent sets the environment. Prints
/// `READY` once the source model is built, just before EXTRACT starts.
#[test]
fn crash_child_extract() {
    let Some(out) = std::env::var_os("LQL_VINDEX3_CRASH_OUT") else {
        return;
    };
    let model = synthetic(CRASH_GEOMETRY);
    eprintln!("READY");
    extract(
        &model,
        Path::new(&out),
        ExtractEncoding::Source,
        &mut |_| {},
    )
    .unwrap();
    eprintln!("DONE");
}

const CRASH_GEOMETRY: Geometry = Geometry {
    layers: 4,
    hidden: 128,
    ffn: 512,
    heads: 4,
    kv_heads: 2,
    vocab: 2048,
    tied: true,
    matrix: DType::F32,
};

const CRASH_CHILD: CrashChild = CrashChild {
    test: "crash_child_extract",
    env: "LQL_VINDEX3_CRASH_OUT",
};

#[test]
fn killed_extract_never_leaves_an_accepted_container() {
    let t = tempfile::tempdir().unwrap();
    // Time one uninterrupted EXTRACT to spread the kill points over it.
    let full = CRASH_CHILD.run_to_end(&t.path().join("full"));
    open_model(&t.path().join("full")).unwrap();
    let left = CRASH_CHILD.kill_runs(t.path(), full, 24, false);
    eprintln!(
        "killed extracts: {} complete, {} partial (refused), {} targets absent",
        left.complete, left.refused, left.absent
    );
}

#[test]
fn re_extracting_a_container_keeps_every_payload_hash() {
    let t = tempfile::tempdir().unwrap();
    let model = synthetic(SMALL);
    let first = extract_to(&model, t.path(), ExtractEncoding::Source);
    let opened = open_model(&first).unwrap();
    let second = t.path().join("second");
    extract(&opened, &second, ExtractEncoding::Source, &mut |_| {}).unwrap();
    let a = read_json(&first.join("index.json"));
    let b = read_json(&second.join("index.json"));
    for (id, e) in a["representations"].as_object().unwrap() {
        assert_eq!(
            e["payload_sha256"], b["representations"][id]["payload_sha256"],
            "{id}"
        );
        assert_eq!(
            e["segment_sha256"],
            b["representations"][id]["segment_sha256"]
        );
    }
    let ga = read_json(&first.join("system_graph.json"));
    let gb = read_json(&second.join("system_graph.json"));
    assert_eq!(
        ga["components"][0]["operands"],
        gb["components"][0]["operands"]
    );
}

#[test]
fn cancelled_extract_leaves_nothing() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let t = tempfile::tempdir().unwrap();
    let model = synthetic(SMALL);
    let out = t.path().join("c");
    let cancel = AtomicBool::new(false);
    let mut seen = 0;
    let e = vindex3::extract_cancellable(
        &model,
        &out,
        ExtractEncoding::Source,
        &mut |_| {
            seen += 1;
            if seen == 3 {
                cancel.store(true, Ordering::Relaxed);
            }
        },
        &cancel,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("interrupted"), "{e}");
    assert!(!out.exists());
    assert_eq!(std::fs::read_dir(t.path()).unwrap().count(), 0);
}

#[test]
fn random_damage_never_panics() {
    let t = tempfile::tempdir().unwrap();
    let base = small_container(t.path());
    let files = [
        "index.json",
        "system_graph.json",
        "segments/text.decoder_stack.bin",
        "segments/text.final_norm.bin",
        "tokenizer_spec.json",
    ];
    let originals: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(base.join(f)).unwrap())
        .collect();
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (mut opened, mut refused) = (0, 0);
    for _ in 0..300 {
        let which = (next() % files.len() as u64) as usize;
        let mut b = originals[which].clone();
        // Damage the first 4 KiB (headers, JSON structure) more often than payloads.
        let span = if next() % 4 == 0 {
            b.len()
        } else {
            b.len().min(4096)
        };
        for _ in 0..1 + next() % 4 {
            let i = (next() % span.min(b.len()) as u64) as usize;
            match next() % 3 {
                0 => b[i] ^= 1 << (next() % 8),
                1 => b[i] = b"{}[]\":,0 9-e"[(next() % 12) as usize],
                _ => b.truncate(i),
            }
            if b.is_empty() {
                break;
            }
        }
        std::fs::write(base.join(files[which]), &b).unwrap();
        match open_model(&base) {
            Ok(m) => {
                opened += 1;
                let _ = m.tokenizer_spec();
            }
            Err(_) => refused += 1,
        }
        let _ = verify(&base);
        let _ = show_tensors(&base);
        let _ = stats(&base);
        std::fs::write(base.join(files[which]), &originals[which]).unwrap();
    }
    eprintln!("damaged containers: {opened} opened, {refused} refused");
    open_model(&base).unwrap();
}

#[test]
fn selecting_an_absent_variant_fails_closed_by_name() {
    let t = tempfile::tempdir().unwrap();
    let base = small_container(t.path());
    let ip = base.join("index.json");
    let mut idx = read_json(&ip);
    idx["profiles"][0]["select"]["text.decoder_stack"] = json!("nvfp4");
    write_json(&ip, &idx);
    let e = err_of(vindex3::open_model_profile(&base, Some("exact")));
    assert!(
        e.contains("text.decoder_stack") && e.contains("\"nvfp4\"") && e.contains("\"source\""),
        "{e}"
    );
}

#[test]
fn tiny_llama_and_qwen2_gguf_round_trip_through_a_container() {
    use lql_storage::format::gguf::synth::TinyModel;
    for (name, tiny) in [("llama", TinyModel::llama()), ("qwen2", TinyModel::qwen2())] {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join(format!("{name}.gguf"));
        tiny.write(&src).unwrap();
        let gguf = lql_storage::import::open(&src).unwrap();
        for enc in [
            ExtractEncoding::Source,
            ExtractEncoding::F32,
            ExtractEncoding::F16,
            ExtractEncoding::BF16,
            ExtractEncoding::Q8_0,
        ] {
            let out = extract_to(&gguf, t.path(), enc);
            let m = lql_storage::import::open(&out).unwrap();
            assert_eq!(m.surface, gguf.surface, "{name} {enc}");
            assert_eq!(m.operands.len(), gguf.operands.len());
            assert_eq!(
                *m.tokenizer_spec().unwrap(),
                *gguf.tokenizer_spec().unwrap()
            );
            for (k, op) in &gguf.operands {
                let v = m.view(*k).unwrap();
                if enc == ExtractEncoding::Source {
                    assert_eq!(v.bytes, gguf.view_of(op).bytes, "{name} {k}");
                }
                let (a, b) = (decoded(&gguf, *k), decoded(&m, *k));
                let worst = a
                    .iter()
                    .zip(&b)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0f32, f32::max);
                let scale = a.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-6);
                assert!(
                    worst <= scale * 0.02,
                    "{name} {enc} {k}: {worst} of {scale}"
                );
            }
            if gguf.surface.tied_head {
                assert!(!out.join("segments/text.output_head.bin").exists());
            } else {
                assert!(out.join("segments/text.output_head.bin").is_file());
            }
            assert!(vindex3::all_ok(&verify(&out).unwrap()));
        }
    }
}
