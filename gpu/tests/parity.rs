//! The forward pass on the GPU backend against the f32 numpy reference (logits at every
//! position), against the CPU backend (greedy generation, cached decoding), and every
//! matmul kernel against the CPU codec. Skips with a printed reason without an adapter
//! (CI sets `LQL_REQUIRE_GPU=1` and installs lavapipe, so there it must run).

mod common;

use common::{fixtures, gpu, ids, json, pair, smollm2_max_diff, smollm2_path};
use lql_exec::{Control, GenerateOptions, LogitsWanted};
use lql_storage::model::TensorView;
use lql_storage::DType;

#[test]
fn smollm2_logits_match_reference_at_every_position() {
    let Some(path) = smollm2_path() else { return };
    let Some((g, _)) = pair(&path) else { return };
    for name in ["france", "fib"] {
        let fx = json(fixtures().join(format!("{name}.json")));
        let logits = g.logits_all(&ids(&fx["ids"])).unwrap();
        let d = smollm2_max_diff(&fx, &logits);
        eprintln!(
            "gpu {name}: max |Δ| vs reference {d:.2e} over {} positions",
            logits.len()
        );
        assert!(d < 1e-3, "{name}: {d}");
    }
}

#[test]
fn tiny_qwen2_logits_match_reference_at_every_position() {
    let Some((g, c)) = pair(&fixtures().join("tiny_qwen2.gguf")) else {
        return;
    };
    let fx = json(fixtures().join("tiny_qwen2.json"));
    let ids = ids(&fx["ids"]);
    let logits = g.logits_all(&ids).unwrap();
    let mut worst = 0.0f32;
    for (p, row) in fx["logits"].as_array().unwrap().iter().enumerate() {
        for (i, want) in row.as_array().unwrap().iter().enumerate() {
            worst = worst.max((logits[p].values[i] - want.as_f64().unwrap() as f32).abs());
        }
    }
    eprintln!("gpu tiny qwen2: max |Δ| vs reference {worst:.2e}");
    assert!(worst < 1e-3, "{worst}");
    // Token by token through the device cache, and greedy generation equal to the CPU.
    let mut s = g.session();
    for (p, &id) in ids.iter().enumerate() {
        let l = s.decode(id).unwrap();
        let d = l
            .values
            .iter()
            .zip(&logits[p].values)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(d < 1e-4, "position {p}: {d}");
    }
    let greedy = common::ids(&fx["greedy"]);
    let opts = GenerateOptions {
        max_tokens: greedy.len(),
        stop_at_eos: false,
        ..GenerateOptions::default()
    };
    let a = g.generate(&ids, &opts, &mut |_| Control::Continue).unwrap();
    let b = c.generate(&ids, &opts, &mut |_| Control::Continue).unwrap();
    assert_eq!(a.token_ids, b.token_ids);
    assert_eq!(a.token_ids, greedy);
}

#[test]
fn smollm2_greedy_32_equals_the_cpu_backend() {
    let Some(path) = smollm2_path() else { return };
    let Some((g, c)) = pair(&path) else { return };
    let fx = json(fixtures().join("france.json"));
    let ids = ids(&fx["ids"]);
    let opts = GenerateOptions {
        max_tokens: 32,
        stop_at_eos: false,
        ..GenerateOptions::default()
    };
    let a = g.generate(&ids, &opts, &mut |_| Control::Continue).unwrap();
    let b = c.generate(&ids, &opts, &mut |_| Control::Continue).unwrap();
    assert_eq!(a.token_ids, b.token_ids, "gpu vs cpu");
    assert_eq!(a.token_ids, common::ids(&fx["greedy"]), "gpu vs reference");
}

#[test]
fn argmax_kernel_matches_the_host() {
    let Some(g) = gpu() else { return };
    let len = 1000;
    let mut logits: Vec<f32> = (0..3 * len)
        .map(|i| ((i * 37) % 101) as f32 * 0.1 - 3.0)
        .collect();
    logits[len + 17] = 50.0;
    logits[2 * len + 5] = 60.0;
    logits[2 * len + 900] = 60.0; // a tie: the lowest id wins
    let got = g.argmax_once(&logits, len).unwrap();
    for (r, (id, prob)) in got.iter().enumerate() {
        let row = lql_exec::Logits {
            values: logits[r * len..(r + 1) * len].to_vec(),
        };
        assert_eq!(*id, row.argmax(), "row {r}");
        let want = row.top(1)[0].prob;
        assert!((prob - want).abs() < 1e-5, "row {r}: {prob} vs {want}");
    }
}

#[test]
fn no_such_adapter_is_a_typed_error_naming_it() {
    let e = lql_gpu::GpuBackend::new(Some("no-such-adapter-xyz"), 1).unwrap_err();
    match &e {
        lql_exec::ExecError::Device {
            kind,
            adapter,
            operation,
            ..
        } => {
            assert_eq!(*kind, lql_exec::DeviceFault::NoAdapter);
            assert_eq!(adapter, "no-such-adapter-xyz");
            assert_eq!(operation, "opening the device");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        e.to_string()
            .starts_with("no GPU adapter on no-such-adapter-xyz during opening the device"),
        "{e}"
    );
}

#[test]
fn residual_and_head_alone_equal_the_whole_pass() {
    let Some((g, _)) = pair(&fixtures().join("tiny_qwen2.gguf")) else {
        return;
    };
    let ids = [257u32, 72, 101, 108];
    let whole = g.session().prefill(&ids).unwrap();
    let mut s = g.session();
    let res = s.extend_to_residual(&ids, None).unwrap();
    let head = g.head(&res).unwrap();
    assert_eq!(whole.values, head.values);
    // A session forked mid-way continues on its own copy of the device cache.
    let mut a = g.session();
    a.prefill(&ids[..2]).unwrap();
    let mut b = a.clone();
    let la = a.prefill(&ids[2..]).unwrap();
    let lb = b.prefill(&ids[2..]).unwrap();
    assert_eq!(la.values, lb.values);
    assert_eq!(la.values, whole.values);
    let _ = g.session().extend(&ids, LogitsWanted::None, None).unwrap();
}

/// Rows of `dtype` with random codes and sane scales.
fn random_rows(dtype: DType, rows: usize, row_len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as u32
    };
    let mut vals: Vec<f32> = (0..rows * row_len)
        .map(|_| (next() % 20001) as f32 / 10000.0 - 1.0)
        .collect();
    if lql_storage::codec::can_encode(dtype) {
        let mut out = Vec::new();
        lql_storage::codec::encode_row(dtype, &vals, &mut out).unwrap();
        return out;
    }
    vals.clear();
    let blocks = rows * row_len / 256;
    let half = |v: f32| half::f16::from_f32(v).to_le_bytes();
    let mut out = Vec::new();
    for _ in 0..blocks {
        let mut blk: Vec<u8> = (0..dtype.block_bytes()).map(|_| next() as u8).collect();
        match dtype {
            DType::Q4_K => {
                blk[0..2].copy_from_slice(&half(0.01));
                blk[2..4].copy_from_slice(&half(0.02));
            }
            DType::Q6_K => blk[208..210].copy_from_slice(&half(0.003)),
            other => panic!("no generator for {other}"),
        }
        out.extend(blk);
    }
    out
}

#[test]
fn every_matmul_kernel_matches_the_cpu_codec() {
    let Some(g) = gpu() else { return };
    for dtype in lql_gpu::shaders::encodings() {
        let (rows, row_len, n) = (37, 512, 3);
        let bytes = random_rows(dtype, rows, row_len, dtype as u64 + 7);
        let shape = [row_len, rows];
        let w = TensorView {
            dtype,
            shape: &shape,
            bytes: &bytes,
        };
        let x: Vec<f32> = (0..n * row_len)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let got = g.matmul_once(&w, &x, n).unwrap();
        let mut dec = vec![0.0f32; rows * row_len];
        lql_storage::codec::decode_rows(dtype, &bytes, row_len, &mut dec).unwrap();
        let mut worst = 0.0f64;
        for t in 0..n {
            for r in 0..rows {
                let want: f64 = (0..row_len)
                    .map(|j| dec[r * row_len + j] as f64 * x[t * row_len + j] as f64)
                    .sum();
                let d = (got[t * rows + r] as f64 - want).abs() / (1.0 + want.abs());
                worst = worst.max(d);
            }
        }
        eprintln!("{dtype}: max relative |Δ| {worst:.2e}");
        assert!(worst < 1e-4, "{dtype}: {worst}");
    }
}
