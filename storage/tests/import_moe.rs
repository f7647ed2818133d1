//! The GGUF importer's judgement of mixture-of-experts files: Mixtral-style `llama` and
//! `qwen2moe` banks become `ExecutionSurface::moe` with the family's selection, and bad
//! expert metadata or tensors are refused with typed errors naming what and where.

use std::path::Path;

use lql_storage::format::gguf::synth::TinyModel;
use lql_storage::format::gguf::GgufWriter;
use lql_storage::import;
use lql_storage::model::{OperandKey, Role};
use lql_storage::surface::{ExpertSelection, MoeSurface};

fn written(dir: &Path, name: &str, m: &TinyModel, edit: impl FnOnce(&mut GgufWriter)) -> String {
    let mut w = m.writer().unwrap();
    edit(&mut w);
    let p = dir.join(name);
    w.write(&p).unwrap();
    p.to_str().unwrap().to_string()
}

fn err(path: &str) -> String {
    import::open(Path::new(path)).unwrap_err().to_string()
}

#[test]
fn mixtral_and_qwen2moe_are_judged_as_banks() {
    let dir = tempfile::tempdir().unwrap();
    let m = import::open(Path::new(&written(
        dir.path(),
        "m.gguf",
        &TinyModel::mixtral(),
        |_| {},
    )))
    .unwrap();
    assert_eq!(
        m.surface.moe,
        Some(MoeSurface {
            n_experts: 4,
            n_used: 2,
            expert_ffn: 96,
            selection: ExpertSelection::TopKSoftmax,
            shared_ffn: 0,
            shared_gate: false,
        })
    );
    assert_eq!(m.surface.ffn, 96);
    assert!(m
        .operand(OperandKey::layer(1, Role::FfnDownExps))
        .is_some_and(|o| o.shape == [96, 64, 4]));

    let q = import::open(Path::new(&written(
        dir.path(),
        "q.gguf",
        &TinyModel::qwen2moe(),
        |_| {},
    )))
    .unwrap();
    let moe = q.surface.moe.clone().unwrap();
    assert_eq!(moe.selection, ExpertSelection::SoftmaxTopK);
    assert_eq!(
        (moe.expert_ffn, moe.shared_ffn, moe.shared_gate),
        (32, 128, true)
    );
    assert!(q.surface.attn_bias);

    let s = import::open(Path::new(&written(
        dir.path(),
        "s.gguf",
        &TinyModel::qwen2moe(),
        |w| {
            w.add_kv("qwen2moe.expert_gating_func", 2u32).unwrap();
        },
    )))
    .unwrap();
    assert_eq!(
        s.surface.moe.unwrap().selection,
        ExpertSelection::SigmoidTopKNorm
    );
}

#[test]
fn bad_expert_metadata_and_tensors_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let mix = TinyModel::mixtral();
    let p = written(dir.path(), "used.gguf", &mix, |w| {
        w.set_kv("llama.expert_used_count", 5u32).unwrap();
    });
    let e = err(&p);
    assert!(
        e.contains("llama.expert_used_count") && e.contains("5 experts used per token of 4"),
        "{e}"
    );

    let p = written(dir.path(), "count.gguf", &mix, |w| {
        w.set_kv("llama.expert_count", u32::MAX).unwrap();
    });
    let e = err(&p);
    assert!(
        e.contains("llama.expert_count") && e.contains("at most 4096"),
        "{e}"
    );

    let p = written(dir.path(), "gating.gguf", &mix, |w| {
        w.add_kv("llama.expert_gating_func", 7u32).unwrap();
    });
    assert!(err(&p).contains("not supported yet: expert gating function 7"));

    let p = written(dir.path(), "noexp.gguf", &TinyModel::qwen2moe(), |w| {
        w.remove_kv("qwen2moe.expert_count");
    });
    assert!(err(&p).contains("qwen2moe.expert_count"));

    // One expert tensor missing: named as the source names it.
    let p = written(dir.path(), "down.gguf", &mix, |w| {
        w.remove_tensor("blk.1.ffn_down_exps.weight");
    });
    let e = err(&p);
    assert!(
        e.contains("blk.1.ffn_down_exps.weight") && e.contains("missing"),
        "{e}"
    );

    // An expert stack of the wrong count.
    let p = written(dir.path(), "shape.gguf", &mix, |w| {
        w.set_kv("llama.expert_count", 8u32).unwrap();
    });
    let e = err(&p);
    assert!(e.contains("ffn_gate_inp") && e.contains("shape"), "{e}");

    // Without the expert count the file is judged dense: its dense FFN is missing.
    let p = written(dir.path(), "dense.gguf", &mix, |w| {
        w.remove_kv("llama.expert_count");
    });
    let e = err(&p);
    assert!(
        e.contains("blk.0.ffn_gate.weight") && e.contains("missing"),
        "{e}"
    );
}
