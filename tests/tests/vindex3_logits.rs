//! VINDEX3 execution parity on SmolLM2: logits from a SOURCE container are bit-identical to
//! the GGUF's, with the source file deleted before the container is opened (the deletion
//! invariant, seed 002 §17); a Q8_0 container stays close. Run with `--release`.

use std::sync::Arc;

use lql_exec::Executor;
use lql_storage::format::vindex3::{extract, open_model, ExtractEncoding};
use lql_storage::model::OperandSource;
use lql_storage::{import, Model};
use lql_tests::default_model_path as smollm2;

/// "The capital of France is" in SmolLM2's vocabulary, plus a few ids across the range.
const IDS: [u32; 9] = [504, 3575, 282, 4649, 314, 1, 2, 49151, 17];

/// The logits of every position of `ids` run through `m` on `threads` threads.
fn logits_of(m: Model, ids: &[u32], threads: usize) -> Vec<Vec<f32>> {
    let src: Arc<dyn OperandSource> = Arc::new(m);
    let ex = Executor::new(src, threads).unwrap();
    ex.logits_all(ids)
        .unwrap()
        .into_iter()
        .map(|l| l.values)
        .collect()
}

fn logits(m: Model) -> Vec<Vec<f32>> {
    logits_of(m, &IDS, 2)
}

#[test]
fn source_container_logits_are_bit_identical_with_the_source_deleted() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("model.gguf");
    std::fs::copy(smollm2(), &src).unwrap();
    let want = logits(import::open(&src).unwrap());

    let out = t.path().join("model.vindex");
    extract(
        &import::open(&src).unwrap(),
        &out,
        ExtractEncoding::Source,
        &mut |_| {},
    )
    .unwrap();
    // Move the source away and delete it: the container must not need it.
    let moved = t.path().join("moved.gguf");
    std::fs::rename(&src, &moved).unwrap();
    std::fs::remove_file(&moved).unwrap();

    let got = logits(open_model(&out).unwrap());
    assert_eq!(got.len(), want.len());
    for (pos, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.len(), 49152);
        let same = g.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "position {pos}: logits differ");
    }
}

#[test]
fn q8_0_container_logits_stay_close() {
    let t = tempfile::tempdir().unwrap();
    let gguf = import::open(&smollm2()).unwrap();
    let out = t.path().join("q8");
    extract(&gguf, &out, ExtractEncoding::Q8_0, &mut |_| {}).unwrap();
    let want = logits(gguf);
    let got = logits(open_model(&out).unwrap());
    let argmax = |v: &[f32]| {
        v.iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .unwrap()
            .0
    };
    let mut agree = 0;
    for (g, w) in got.iter().zip(&want) {
        let worst = g
            .iter()
            .zip(w)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        eprintln!("max |dlogit| {worst}");
        // Q8_0 of Q4_1 values: close but not identical.
        assert!(worst < 1.0, "max |dlogit| {worst}");
        agree += usize::from(argmax(g) == argmax(w));
    }
    eprintln!("argmax agrees at {agree} of {} positions", got.len());
    assert!(agree + 1 >= got.len());
}

#[test]
fn tiny_qwen2_container_logits_are_bit_identical() {
    // Biases, half-split RoPE and an untied head all travel through the container.
    use lql_storage::format::gguf::synth::TinyModel;
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("qwen2.gguf");
    TinyModel::qwen2().write(&src).unwrap();
    let ids = [1u32, 5, 9, 300, 17, 42];
    let run = |m: Model| logits_of(m, &ids, 1);
    let want = run(import::open(&src).unwrap());
    let out = t.path().join("c");
    extract(
        &import::open(&src).unwrap(),
        &out,
        ExtractEncoding::Source,
        &mut |_| {},
    )
    .unwrap();
    std::fs::remove_file(&src).unwrap();
    let got = run(import::open(&out).unwrap());
    for (g, w) in got.iter().zip(&want) {
        assert!(g.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}
