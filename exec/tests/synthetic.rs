//! The executor on small random models built in memory, against a naive reference forward
//! pass (tests/common): every RoPE pairing, quantised matrices, biases, untied heads, the
//! batched and single-token paths, the cache, generation, observers and error cases.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::{arc, build, max_abs_diff, naive_logits, Spec};
use lql_exec::{
    Control, ExecError, Executor, FinishReason, GenerateOptions, LayerRecord, LogitsWanted,
    Observer, Sampling,
};
use lql_storage::model::{OperandKey, Role};
use lql_storage::surface::{Activation, RopePairing};
use lql_storage::DType;

const IDS: [u32; 7] = [5, 17, 3, 88, 41, 41, 9];

fn check_against_naive(spec: Spec, tol: f32) {
    let model = build(&spec, 11);
    let want = naive_logits(&model, &IDS);
    let exec = Executor::new(arc(model), 2).unwrap();
    // Batched pass (GEMM path) at every position.
    let got = exec.logits_all(&IDS).unwrap();
    for (p, (g, w)) in got.iter().zip(&want).enumerate() {
        let d = max_abs_diff(&g.values, w);
        assert!(d < tol, "position {p}: max abs diff {d}");
    }
    // Token-by-token (matrix-vector path, cached).
    let mut s = exec.session();
    for (p, &id) in IDS.iter().enumerate() {
        let l = s.decode(id).unwrap();
        let d = max_abs_diff(&l.values, &want[p]);
        assert!(d < tol, "decode position {p}: max abs diff {d}");
    }
}

#[test]
fn adjacent_f32_tied_matches_naive() {
    check_against_naive(Spec::default(), 1e-4);
}

#[test]
fn half_split_quantised_biases_untied_matches_naive() {
    for dt in [
        DType::Q4_0,
        DType::Q4_1,
        DType::Q8_0,
        DType::F16,
        DType::BF16,
    ] {
        check_against_naive(
            Spec {
                pairing: RopePairing::HalfSplit,
                tied: false,
                bias: true,
                matrix_dtype: dt,
                embed_dtype: DType::Q8_0,
                ..Spec::default()
            },
            2e-4,
        );
    }
}

#[test]
fn gelu_and_embedding_scale_match_naive() {
    check_against_naive(
        Spec {
            activation: Activation::Gelu,
            embedding_scale: 8.0,
            ..Spec::default()
        },
        1e-4,
    );
}

#[test]
fn split_prefill_equals_single_prefill() {
    let exec = Executor::new(arc(build(&Spec::default(), 3)), 2).unwrap();
    let whole = exec.session().prefill(&IDS).unwrap();
    let mut s = exec.session();
    s.prefill(&IDS[..4]).unwrap();
    let rest = s.prefill(&IDS[4..]).unwrap();
    assert!(max_abs_diff(&whole.values, &rest.values) < 1e-5);
    assert_eq!(s.position(), IDS.len());
    assert_eq!(s.tokens(), &IDS);
}

#[test]
fn infer_ranks_by_probability() {
    let exec = Executor::new(arc(build(&Spec::default(), 3)), 1).unwrap();
    let top = exec.infer(&IDS, 5).unwrap();
    assert_eq!(top.len(), 5);
    assert_eq!(top[0].rank, 1);
    for w in top.windows(2) {
        assert!(w[0].logit >= w[1].logit && w[0].prob >= w[1].prob);
    }
    let all = exec.infer(&IDS, 1000).unwrap();
    assert_eq!(all.len(), 96);
    let total: f32 = all.iter().map(|t| t.prob).sum();
    assert!((total - 1.0).abs() < 1e-4);
}

#[test]
fn greedy_generation_matches_recomputation() {
    let model = build(
        &Spec {
            context: 40,
            ..Spec::default()
        },
        5,
    );
    let exec = Executor::new(arc(model.clone()), 2).unwrap();
    let opts = GenerateOptions {
        max_tokens: 20,
        stop_at_eos: false,
        ..GenerateOptions::default()
    };
    let mut streamed = Vec::new();
    let g = exec
        .generate(&IDS, &opts, &mut |t| {
            streamed.push(t);
            Control::Continue
        })
        .unwrap();
    assert_eq!(g.finish_reason, FinishReason::Length);
    assert_eq!(g.token_ids, streamed);
    assert_eq!(g.generated_tokens, 20);
    assert_eq!(g.prompt_tokens, IDS.len());
    // Every step against a full recomputation.
    let mut seq = IDS.to_vec();
    for &t in &g.token_ids {
        let full = exec.logits_all(&seq).unwrap();
        assert_eq!(full.last().unwrap().argmax(), t);
        seq.push(t);
    }
}

#[test]
fn cached_decode_matches_full_recompute_each_step() {
    let exec = Executor::new(arc(build(&Spec::default(), 8)), 2).unwrap();
    let mut s = exec.session();
    let mut logits = s.prefill(&IDS).unwrap();
    let mut seq = IDS.to_vec();
    for _ in 0..24 {
        let t = logits.argmax();
        seq.push(t);
        logits = s.decode(t).unwrap();
        let full = exec.session().prefill(&seq).unwrap();
        let d = max_abs_diff(&logits.values, &full.values);
        assert!(d < 1e-4, "step {}: {d}", seq.len());
    }
}

#[test]
fn sampling_is_reproducible_with_a_seed() {
    let exec = Executor::new(arc(build(&Spec::default(), 8)), 2).unwrap();
    let opts = GenerateOptions {
        max_tokens: 16,
        stop_at_eos: false,
        sampling: Sampling {
            temperature: 1.5,
            top_k: 40,
            top_p: 0.95,
            seed: 1234,
            ..Sampling::default()
        },
        ..GenerateOptions::default()
    };
    let a = exec
        .generate(&IDS, &opts, &mut |_| Control::Continue)
        .unwrap();
    let b = exec
        .generate(&IDS, &opts, &mut |_| Control::Continue)
        .unwrap();
    assert_eq!(a.token_ids, b.token_ids);
    let other = GenerateOptions {
        sampling: Sampling {
            seed: 99,
            ..opts.sampling
        },
        ..opts.clone()
    };
    let c = exec
        .generate(&IDS, &other, &mut |_| Control::Continue)
        .unwrap();
    assert_ne!(a.token_ids, c.token_ids);
}

#[test]
fn generation_stops_on_eos_callback_context_and_cancel() {
    let exec = Executor::new(arc(build(&Spec::default(), 8)), 1).unwrap();
    let greedy = exec.session().prefill(&IDS).unwrap().argmax();
    // The first greedy token as an extra stop id: nothing generated.
    let opts = GenerateOptions {
        max_tokens: 5,
        stop_ids: vec![greedy],
        ..GenerateOptions::default()
    };
    let g = exec
        .generate(&IDS, &opts, &mut |_| Control::Continue)
        .unwrap();
    assert_eq!(g.finish_reason, FinishReason::EndOfSequence);
    assert!(g.token_ids.is_empty());
    // Callback stop.
    let opts = GenerateOptions {
        max_tokens: 5,
        stop_at_eos: false,
        ..GenerateOptions::default()
    };
    let g = exec.generate(&IDS, &opts, &mut |_| Control::Stop).unwrap();
    assert_eq!(
        (g.finish_reason, g.generated_tokens),
        (FinishReason::Callback, 1)
    );
    // Context limit (48 positions): 7 prompt + 41 generated.
    let opts = GenerateOptions {
        max_tokens: 1000,
        stop_at_eos: false,
        ..GenerateOptions::default()
    };
    let g = exec
        .generate(&IDS, &opts, &mut |_| Control::Continue)
        .unwrap();
    assert_eq!(g.finish_reason, FinishReason::ContextLimit);
    assert_eq!(g.generated_tokens, 48 - IDS.len() + 1);
    // Cancellation from the callback's side (as Ctrl-C would).
    let flag = exec.cancel_flag();
    let g = exec
        .generate(&IDS, &opts, &mut |_| {
            flag.store(true, Ordering::Relaxed);
            Control::Continue
        })
        .unwrap();
    assert_eq!(
        (g.finish_reason, g.generated_tokens),
        (FinishReason::Cancelled, 1)
    );
    assert!(matches!(exec.infer(&IDS, 1), Err(ExecError::Cancelled)));
    exec.cancel_flag().store(false, Ordering::Relaxed);
    assert!(exec.infer(&IDS, 1).is_ok());
}

#[test]
fn stop_strings_need_a_decoder_and_cut_the_text() {
    struct Letters;
    impl lql_exec::TokenDecoder for Letters {
        fn decode_ids(&self, ids: &[u32]) -> String {
            ids.iter()
                .map(|i| char::from(b'a' + (i % 26) as u8))
                .collect()
        }
    }
    let exec = Executor::new(arc(build(&Spec::default(), 8)), 1).unwrap();
    let free = exec
        .generate(
            &IDS,
            &GenerateOptions {
                max_tokens: 6,
                stop_at_eos: false,
                decoder: Some(Arc::new(Letters)),
                ..GenerateOptions::default()
            },
            &mut |_| Control::Continue,
        )
        .unwrap();
    let text = free.text.clone().unwrap();
    let stop = text[2..4].to_string();
    let opts = GenerateOptions {
        max_tokens: 6,
        stop_at_eos: false,
        stop: vec![stop.clone()],
        decoder: Some(Arc::new(Letters)),
        ..GenerateOptions::default()
    };
    let g = exec
        .generate(&IDS, &opts, &mut |_| Control::Continue)
        .unwrap();
    assert_eq!(g.finish_reason, FinishReason::StopString);
    let cut = text.find(&stop).unwrap();
    assert_eq!(g.text.as_deref(), Some(&text[..cut]));
    let no_dec = GenerateOptions {
        decoder: None,
        ..opts
    };
    assert!(matches!(
        exec.generate(&IDS, &no_dec, &mut |_| Control::Continue),
        Err(ExecError::InvalidOption(_))
    ));
}

#[derive(Default)]
struct Recorder {
    layers: Vec<usize>,
    attn_rows_ok: bool,
    last_residual: Vec<f32>,
    embedding: usize,
    final_norm: usize,
}

impl Observer for Recorder {
    fn wants_attention(&self) -> bool {
        true
    }
    fn on_embedding(&mut self, positions: std::ops::Range<usize>, rows: &[f32]) {
        self.embedding = rows.len() / positions.len();
    }
    fn on_layer(&mut self, r: &LayerRecord<'_>) {
        self.layers.push(r.layer);
        let n = r.positions.len();
        let total = r.positions.end;
        let w = r.attention.unwrap();
        assert_eq!(w.len(), n * r.n_heads * total);
        self.attn_rows_ok = w.chunks(total).enumerate().all(|(row, c)| {
            let i = row / r.n_heads;
            let s: f32 = c.iter().sum();
            (s - 1.0).abs() < 1e-5 && c[r.positions.start + i + 1..].iter().all(|&v| v == 0.0)
        });
        assert_eq!(r.gate.len(), n * r.ffn);
        assert_eq!(r.activation.len(), n * r.ffn);
        // silu(gate) * up: activation is zero exactly where gate is (no further check of up).
        for (g, a) in r.gate.iter().zip(r.activation) {
            assert!(a.is_finite() && g.is_finite());
        }
        // residual = previous residual + attention delta + ffn delta
        if !self.last_residual.is_empty() {
            for i in 0..r.residual.len() {
                let want = self.last_residual[i] + r.attn_delta[i] + r.ffn_delta[i];
                assert!((want - r.residual[i]).abs() < 1e-4);
            }
        }
        self.last_residual = r.residual.to_vec();
    }
    fn on_final_norm(&mut self, positions: std::ops::Range<usize>, _normed: &[f32]) {
        self.final_norm = positions.len();
    }
}

#[test]
fn observer_sees_every_layer_and_does_not_change_results() {
    let model = build(
        &Spec {
            layers: 3,
            ..Spec::default()
        },
        21,
    );
    let exec = Executor::new(arc(model), 2).unwrap();
    let plain = exec.logits_all(&IDS).unwrap();
    let mut rec = Recorder::default();
    let seen = exec.observe(&IDS, LogitsWanted::All, &mut rec).unwrap();
    assert_eq!(rec.layers, vec![0, 1, 2]);
    assert!(rec.attn_rows_ok);
    assert_eq!(rec.embedding, 64);
    assert_eq!(rec.final_norm, IDS.len());
    for (a, b) in plain.iter().zip(&seen) {
        assert_eq!(a.values, b.values);
    }
    let none = exec
        .observe(&IDS, LogitsWanted::None, &mut Recorder::default())
        .unwrap();
    assert!(none.is_empty());
}

#[test]
fn a_pass_stopping_early_runs_only_its_layers() {
    let model = build(
        &Spec {
            layers: 4,
            ..Spec::default()
        },
        23,
    );
    let exec = Executor::new(arc(model), 2).unwrap();
    let mut rec = Recorder::default();
    exec.observe_layers(&IDS, 1, &mut rec).unwrap();
    assert_eq!(rec.layers, vec![0, 1], "layers 2 and 3 never ran");
    let mut all = Recorder::default();
    let whole = exec.observe(&IDS, LogitsWanted::Last, &mut all).unwrap();
    assert_eq!(all.layers, vec![0, 1, 2, 3]);
    // The residual after every layer, then the head alone, gives the pass's last-position
    // logits bit for bit.
    let residual = exec.session().extend_to_residual(&IDS, None).unwrap();
    let head = exec.head(&residual).unwrap();
    assert_eq!(head.values, whole.last().unwrap().values);
    assert!(exec
        .observe_layers(&IDS, 4, &mut Recorder::default())
        .is_err());
}

#[test]
fn bad_input_is_refused_with_clear_errors() {
    let exec = Executor::new(arc(build(&Spec::default(), 1)), 1).unwrap();
    assert!(matches!(exec.infer(&[], 5), Err(ExecError::EmptyPrompt)));
    let long = vec![1u32; 49];
    let e = exec.infer(&long, 5).unwrap_err();
    assert!(
        matches!(
            e,
            ExecError::ContextOverflow {
                needed: 49,
                limit: 48
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("context"));
    let e = exec.infer(&[1, 96], 5).unwrap_err();
    assert!(
        matches!(
            e,
            ExecError::TokenOutOfRange {
                id: 96,
                position: Some(1),
                vocab: 96
            }
        ),
        "{e}"
    );
    // A failed pass leaves the session as it was.
    let mut s = exec.session();
    s.prefill(&[1, 2, 3]).unwrap();
    assert!(s.prefill(&[4, 999]).is_err());
    assert_eq!(s.position(), 3);
    assert!(s.decode(4).is_ok());
    let mut full = exec.session();
    full.prefill(&[1u32; 48]).unwrap();
    assert!(matches!(
        full.decode(1),
        Err(ExecError::ContextOverflow { needed: 49, .. })
    ));
}

#[test]
fn missing_and_misshapen_operands_are_named() {
    let mut m = build(&Spec::default(), 1);
    m.operands.remove(&OperandKey::layer(1, Role::FfnUp));
    let e = Executor::new(arc(m), 1).unwrap_err();
    assert_eq!(e.to_string(), "missing operand: ffn_up of layer 1");

    let mut m = build(&Spec::default(), 1);
    m.operands
        .get_mut(&OperandKey::layer(0, Role::AttnK))
        .unwrap()
        .shape = vec![64, 64];
    let e = Executor::new(arc(m), 1).unwrap_err();
    assert!(
        matches!(
            e,
            ExecError::Shape {
                operand: "attn_k",
                layer: Some(0),
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("expected shape [64, 32]"), "{e}");

    let mut m = build(&Spec::default(), 1);
    m.operands
        .get_mut(&OperandKey::layer(0, Role::AttnV))
        .unwrap()
        .bytes
        .truncate(100);
    let e = Executor::new(arc(m), 1).unwrap_err();
    assert!(e.to_string().contains("attn_v of layer 0"), "{e}");

    let mut m = build(
        &Spec {
            tied: false,
            ..Spec::default()
        },
        1,
    );
    m.operands.remove(&OperandKey::global(Role::Output));
    assert_eq!(
        Executor::new(arc(m), 1).unwrap_err().to_string(),
        "missing operand: output"
    );

    let mut m = build(
        &Spec {
            bias: true,
            ..Spec::default()
        },
        1,
    );
    m.operands.remove(&OperandKey::layer(0, Role::AttnQBias));
    assert!(Executor::new(arc(m), 1).is_err());

    let mut m = build(&Spec::default(), 1);
    m.surface.n_kv_heads = 3;
    let e = Executor::new(arc(m), 1).unwrap_err();
    assert!(matches!(e, ExecError::Surface(_)), "{e}");
}
