//! Parity of the CPU executor with the independent numpy reference
//! (`tools/reference_forward.py`, f32 math on the dequantised weights) on the real
//! SmolLM2-135M-Instruct Q4_1 file and on a tiny quantised qwen2-shaped GGUF.

mod common;

use common::real::{executor, fixture, max_diff, PROMPTS};
use std::sync::Arc;

use lql_exec::{Control, CpuBackend, Executor, GenerateOptions};

#[test]
fn smollm2_logits_match_reference_at_every_position() {
    let Some(exec) = executor() else { return };
    for name in PROMPTS {
        let fx = fixture(name);
        let logits = exec.logits_all(&fx.ids).unwrap();
        let d = max_diff(&fx, &logits);
        eprintln!(
            "{name}: max abs diff {d:.2e} over {} positions",
            fx.ids.len()
        );
        assert!(d < 1e-3, "{name}: max abs diff {d}");
        for (p, l) in logits.iter().enumerate() {
            assert_eq!(l.argmax(), fx.top[p][0].0, "{name}: top-1 at position {p}");
        }
    }
}

#[test]
fn smollm2_capital_of_france_is_paris() {
    let Some(exec) = executor() else { return };
    let top = exec.infer(&[504, 3575, 282, 4649, 314], 5).unwrap();
    assert_eq!(top[0].token_id, 7042);
    assert!((top[0].logit - 17.371).abs() < 1e-2, "{:?}", top[0]);
}

#[test]
fn smollm2_greedy_32_matches_reference() {
    let Some(exec) = executor() else { return };
    for name in PROMPTS {
        let fx = fixture(name);
        let opts = GenerateOptions {
            max_tokens: fx.greedy.len(),
            stop_at_eos: false,
            ..GenerateOptions::default()
        };
        let g = exec
            .generate(&fx.ids, &opts, &mut |_| Control::Continue)
            .unwrap();
        assert_eq!(g.token_ids, fx.greedy, "{name}");
    }
}

/// Cached decoding against a full recomputation of the whole sequence at every step of a
/// 64-token generation: through the same fused dot kernels (isolates the cache: 1e-4), and
/// through the batched GEMM path (different summation order: 1e-3, the reference bound).
#[test]
fn smollm2_cached_decode_matches_full_recompute_for_64_steps() {
    let Some(exec) = executor() else { return };
    let dots = Executor::with_backend(
        exec.source().clone(),
        Arc::new(CpuBackend::new(2).unwrap().without_batched_gemm()),
    )
    .unwrap();
    let fx = fixture("france");
    let mut s = dots.session();
    let mut logits = s.prefill(&fx.ids).unwrap();
    let mut seq = fx.ids.clone();
    let (mut worst_dot, mut worst_gemm) = (0.0f32, 0.0f32);
    for step in 0..64 {
        let t = logits.argmax();
        seq.push(t);
        logits = s.decode(t).unwrap();
        let same_kernels = dots.session().prefill(&seq).unwrap();
        let d = common::max_abs_diff(&logits.values, &same_kernels.values);
        worst_dot = worst_dot.max(d);
        assert!(d < 1e-4, "step {step}: max abs diff {d} (same kernels)");
        if step % 8 == 7 {
            let gemm = exec.session().prefill(&seq).unwrap();
            let d = common::max_abs_diff(&logits.values, &gemm.values);
            worst_gemm = worst_gemm.max(d);
            assert!(d < 1e-3, "step {step}: max abs diff {d} (batched GEMM)");
        }
    }
    eprintln!("cached vs recomputed: max abs diff {worst_dot:.2e} (same kernels), {worst_gemm:.2e} (GEMM)");
}

#[test]
fn smollm2_stop_string_through_the_tokenizer() {
    let Some(exec) = executor() else { return };
    let path = common::real::model_path().unwrap();
    let model = lql_storage::import::open(&path).unwrap();
    let spec = model.tokenizer_spec().unwrap();
    let tok = lql_exec::tokenizer::Tokenizer::from_spec_with_special(&spec, &model.surface.special)
        .unwrap();
    let ids = tok.encode("The capital of France is", false).unwrap();
    assert_eq!(ids, vec![504, 3575, 282, 4649, 314]);
    // Greedy: " Paris.\n\nThe capital of …": stop at the first newline.
    let opts = GenerateOptions {
        max_tokens: 16,
        stop: vec!["\n".into()],
        decoder: Some(Arc::new(tok)),
        ..GenerateOptions::default()
    };
    let g = exec
        .generate(&ids, &opts, &mut |_| Control::Continue)
        .unwrap();
    assert_eq!(g.finish_reason, lql_exec::FinishReason::StopString);
    assert_eq!(g.text.as_deref(), Some(" Paris."));
    assert_eq!(g.token_ids, vec![7042, 30, 198]);
}
