//! VINDEX3 on the real SmolLM2 GGUF: a SOURCE extract keeps every tensor byte for byte, its
//! payload hashes equal independent hashes of the source bytes, and the container opens to
//! the same operands with the source gone. Run with `--release`.

mod common;
mod vindex3_support;

use lql_storage::format::vindex3::{self, extract, open_model, verify, ExtractEncoding};
use lql_storage::{import, Model, OperandSource};
use serde_json::Value;
use sha2::{Digest, Sha256};

use common::smollm2;
use vindex3_support::crash::CrashChild;
use vindex3_support::hex;

fn same_operands(a: &Model, b: &Model) {
    assert_eq!(a.surface, b.surface);
    assert_eq!(a.operands.len(), b.operands.len());
    for (k, op) in &a.operands {
        let v = b.view(*k).unwrap_or_else(|| panic!("{k} missing"));
        assert_eq!(v.dtype, op.dtype, "{k}");
        assert_eq!(v.shape, &op.shape[..], "{k}");
        assert!(v.bytes == a.view_of(op).bytes, "{k}: bytes differ");
    }
}

#[test]
fn smollm2_source_extract_is_byte_exact_and_survives_deleting_the_source() {
    let t = tempfile::tempdir().unwrap();
    // Work on a private copy of the source so it can be deleted.
    let src = t.path().join("smollm2.gguf");
    std::fs::copy(smollm2(), &src).unwrap();
    let gguf = import::open(&src).unwrap();
    let out = t.path().join("smollm2.vindex");
    let rep = extract(&gguf, &out, ExtractEncoding::Source, &mut |_| {}).unwrap();

    let source_tensor_bytes: u64 = gguf.operands.values().map(|o| o.len as u64).sum();
    assert_eq!(rep.payload_bytes, source_tensor_bytes);
    assert_eq!(rep.tensors, gguf.operands.len());
    assert_eq!(rep.tensors, 272); // 30 layers × 9 + embedding + final norm (tied head)

    // Independent hashes: the operand bytes of each object, ordered by their source name
    // relative to the binding prefix (the tensor table order).
    let index: Value =
        serde_json::from_slice(&std::fs::read(out.join("index.json")).unwrap()).unwrap();
    let graph: Value =
        serde_json::from_slice(&std::fs::read(out.join("system_graph.json")).unwrap()).unwrap();
    let table = graph["components"][0]["operands"].as_array().unwrap();
    let reps = index["representations"].as_object().unwrap();
    assert_eq!(reps.len(), 3);
    let mut total = 0;
    for (id, e) in reps {
        let object = e["object"].as_str().unwrap();
        let mut rows: Vec<(&str, &str)> = table
            .iter()
            .filter(|b| b["object"].as_str() == Some(object))
            .map(|b| {
                (
                    b["tensor"].as_str().unwrap(),
                    b["source_name"].as_str().unwrap(),
                )
            })
            .collect();
        rows.sort();
        let mut h = Sha256::new();
        for (_, name) in rows {
            let op = gguf
                .operands
                .values()
                .find(|o| o.source_name == name)
                .unwrap();
            h.update(gguf.view_of(op).bytes);
            total += op.len as u64;
        }
        assert_eq!(
            e["payload_sha256"].as_str().unwrap(),
            hex(h.finalize()),
            "{id}"
        );
        assert_eq!(e["fidelity"].as_str(), Some("source-exact"));
    }
    assert_eq!(total, source_tensor_bytes);
    assert!(vindex3::all_ok(&verify(&out).unwrap()));

    // The deletion invariant: the container alone gives the same operands and tokenizer.
    let tok = gguf.tokenizer_spec().unwrap();
    drop(gguf);
    let gguf_again = import::open(&src).unwrap();
    std::fs::remove_file(&src).unwrap();
    let v3 = import::open(&out).unwrap();
    same_operands(&gguf_again, &v3);
    assert_eq!(*v3.tokenizer_spec().unwrap(), *tok);
}

#[test]
fn smollm2_q8_0_extract_reencodes_matrices() {
    let t = tempfile::tempdir().unwrap();
    let gguf = import::open(&smollm2()).unwrap();
    let out = t.path().join("q8");
    let rep = extract(&gguf, &out, ExtractEncoding::Q8_0, &mut |_| {}).unwrap();
    let m = open_model(&out).unwrap();
    for (k, op) in &m.operands {
        let want = if op.shape.len() == 1 {
            lql_storage::DType::F32
        } else {
            lql_storage::DType::Q8_0
        };
        assert_eq!(op.dtype, want, "{k}");
    }
    assert!(rep.payload_bytes > 0);
    let s = vindex3::stats(&out).unwrap();
    assert_eq!(s.fidelity, "numerically-approximate");
    assert!(vindex3::all_ok(&verify(&out).unwrap()));
}

/// Child side of the crash test: extracts the real model into the directory the parent
/// names; prints READY just before EXTRACT starts.
#[test]
fn crash_child_real_extract() {
    let Some(out) = std::env::var_os("LQL_VINDEX3_REAL_CRASH_OUT") else {
        return;
    };
    let gguf = import::open(&smollm2()).unwrap();
    eprintln!("READY");
    extract(
        &gguf,
        std::path::Path::new(&out),
        ExtractEncoding::Source,
        &mut |_| {},
    )
    .unwrap();
    eprintln!("DONE");
}

const CRASH_CHILD: CrashChild = CrashChild {
    test: "crash_child_real_extract",
    env: "LQL_VINDEX3_REAL_CRASH_OUT",
};

#[test]
fn smollm2_killed_extract_never_leaves_an_accepted_container() {
    let t = tempfile::tempdir().unwrap();
    let full = CRASH_CHILD.run_to_end(&t.path().join("full"));
    let left = CRASH_CHILD.kill_runs(t.path(), full, 20, true);
    eprintln!(
        "killed SmolLM2 extracts: {} complete, {} partial (refused)",
        left.complete, left.refused
    );
}
