//! Codec golden tests: decode and encode against gguf-py fixtures (bit/byte exact), fused
//! dot products against decode-then-dot, length errors, and sampled rows of the real model.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use lql_storage::codec::CodecError;
use lql_storage::codec::{
    self, cpu::Kernels, decode::decode_scalar, decode_row, decode_rows, dot::dot_scalar, dot_row,
    dot_rows, dot_rows_using, encode_row,
};
use lql_storage::DType;
use sha2::{Digest, Sha256};

fn fixture(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/codec")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn assert_bits_eq(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(
            g.to_bits(),
            w.to_bits(),
            "{what}: element {i}: got {g:e}, gguf-py {w:e}"
        );
    }
}

#[test]
fn decode_matches_gguf_py_for_every_format() {
    for dt in DType::ALL {
        let src = fixture(&format!("decode_{}.bin", dt.name()));
        let want = f32s(&fixture(&format!("decode_{}.f32", dt.name())));
        let mut got = vec![0.0f32; want.len()];
        decode_row(dt, &src, &mut got).unwrap();
        assert_bits_eq(&format!("{dt} decode_row"), &got, &want);

        let mut scalar = vec![0.0f32; want.len()];
        decode_scalar(dt, &src, &mut scalar);
        assert_bits_eq(&format!("{dt} scalar decoder"), &scalar, &want);

        // The same bytes seen as rows of one block (or 7 elements for scalar types).
        let row_len = if dt.is_scalar() { 7 } else { dt.block_elems() };
        let mut rows = vec![0.0f32; want.len()];
        decode_rows(dt, &src, row_len, &mut rows).unwrap();
        assert_bits_eq(&format!("{dt} decode_rows"), &rows, &want);
    }
}

#[test]
fn encode_matches_gguf_py() {
    for dt in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q8_0,
        DType::Q4_0,
        DType::Q4_1,
    ] {
        assert!(codec::can_encode(dt));
        let input = f32s(&fixture(&format!("encode_{}.in.f32", dt.name())));
        let want = fixture(&format!("encode_{}.bin", dt.name()));
        let mut got = vec![0xAAu8; 3]; // encode_row appends
        encode_row(dt, &input, &mut got).unwrap();
        assert_eq!(&got[..3], &[0xAA; 3], "{dt}: existing bytes kept");
        let got = &got[3..];
        assert_eq!(got.len(), want.len(), "{dt}: encoded length");
        let bb = dt.block_bytes();
        for (b, (g, w)) in got.chunks(bb).zip(want.chunks(bb)).enumerate() {
            assert_eq!(g, w, "{dt}: block {b} differs from gguf-py quantize");
        }
    }
}

#[test]
fn encode_refuses_unsupported_targets_and_partial_blocks() {
    for dt in [
        DType::Q5_0,
        DType::Q5_1,
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::MXFP4,
    ] {
        assert!(!codec::can_encode(dt));
        let err = encode_row(dt, &[0.0; 256], &mut Vec::new()).unwrap_err();
        assert!(matches!(err, CodecError::Unsupported(_)), "{dt}: {err}");
        assert!(
            err.to_string()
                .contains(&format!("not supported yet: encoding to {dt}")),
            "{err}"
        );
    }
    let err = encode_row(DType::Q8_0, &[0.0; 33], &mut Vec::new()).unwrap_err();
    assert!(err.to_string().contains("whole number"), "{err}");
}

/// Deterministic xorshift generator for synthetic blocks.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn byte(&mut self) -> u8 {
        (self.next() >> 32) as u8
    }
    fn unit(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// Random valid encoded row of `n` elements with finite, moderate scales.
fn random_row(dt: DType, n: usize, rng: &mut Rng) -> Vec<u8> {
    let f16 = |v: f32| half::f16::from_f32(v).to_bits().to_le_bytes();
    match dt {
        DType::F32 | DType::F16 | DType::BF16 => {
            let vals: Vec<f32> = (0..n).map(|_| rng.unit() * 2.0).collect();
            let mut out = Vec::new();
            encode_row(dt, &vals, &mut out).unwrap();
            out
        }
        _ => {
            let (be, bb) = (dt.block_elems(), dt.block_bytes());
            let mut out: Vec<u8> = (0..n / be * bb).map(|_| rng.byte()).collect();
            for blk in out.chunks_exact_mut(bb) {
                let (d, m) = (rng.unit() * 0.05, rng.unit() * 0.1);
                match dt {
                    DType::Q4_0 | DType::Q5_0 | DType::Q8_0 => blk[0..2].copy_from_slice(&f16(d)),
                    DType::Q4_1 | DType::Q5_1 => {
                        blk[0..2].copy_from_slice(&f16(d));
                        blk[2..4].copy_from_slice(&f16(m));
                    }
                    DType::Q4_K | DType::Q5_K => {
                        blk[0..2].copy_from_slice(&f16(d * 0.1));
                        blk[2..4].copy_from_slice(&f16(m * 0.1));
                    }
                    DType::Q6_K => blk[208..210].copy_from_slice(&f16(d * 0.1)),
                    DType::Q2_K => {
                        blk[80..82].copy_from_slice(&f16(d * 0.1));
                        blk[82..84].copy_from_slice(&f16(m * 0.1));
                    }
                    DType::Q3_K => blk[108..110].copy_from_slice(&f16(d * 0.1)),
                    DType::MXFP4 => blk[0] = 110 + rng.byte() % 30,
                    _ => unreachable!(),
                }
            }
            out
        }
    }
}

fn check_dot(dt: DType, row: &[u8], x: &[f32], what: &str) {
    let mut w = vec![0.0f32; x.len()];
    decode_row(dt, row, &mut w).unwrap();
    let exact: f64 = w.iter().zip(x).map(|(a, b)| *a as f64 * *b as f64).sum();
    let scale: f64 = w
        .iter()
        .zip(x)
        .map(|(a, b)| (*a as f64 * *b as f64).abs())
        .sum();
    let tol = 1e-5 * scale + 1e-30;
    let fast = dot_row(dt, row, x) as f64;
    let portable = dot_scalar(dt, row, x) as f64;
    assert!(
        (fast - exact).abs() <= tol,
        "{dt} {what}: dot_row {fast} vs decode-then-dot {exact} (tol {tol})"
    );
    assert!(
        (portable - exact).abs() <= tol,
        "{dt} {what}: scalar dot {portable} vs decode-then-dot {exact} (tol {tol})"
    );
}

#[test]
fn dot_equals_decode_then_dot_for_every_format_and_length() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for dt in DType::ALL {
        let be = dt.block_elems();
        let lengths: Vec<usize> = if dt.is_scalar() {
            vec![1, 7, 8, 31, 33, 576, 1001]
        } else {
            [1, 2, 3, 5, 7, 18, 48].iter().map(|b| b * be).collect()
        };
        for n in lengths {
            let row = random_row(dt, n, &mut rng);
            let x: Vec<f32> = (0..n).map(|_| rng.unit()).collect();
            check_dot(dt, &row, &x, &format!("n={n}"));
        }
        // Golden fixture rows too (those whose products stay far from f32 overflow).
        let src = fixture(&format!("decode_{}.bin", dt.name()));
        let want = f32s(&fixture(&format!("decode_{}.f32", dt.name())));
        if want.iter().all(|v| v.abs() < 1e15) {
            let x: Vec<f32> = (0..want.len()).map(|_| rng.unit()).collect();
            check_dot(dt, &src, &x, "fixture");
        }
    }
}

#[test]
fn dot_of_unaligned_f32_rows() {
    let mut rng = Rng(42);
    let x: Vec<f32> = (0..100).map(|_| rng.unit()).collect();
    let row = random_row(DType::F32, 100, &mut rng);
    let mut shifted = vec![0u8; 1];
    shifted.extend_from_slice(&row);
    check_dot(DType::F32, &shifted[1..], &x, "unaligned");
}

#[test]
fn dot_rows_equals_dot_row() {
    let mut rng = Rng(7);
    for dt in DType::ALL {
        let row_len = if dt.is_scalar() {
            72
        } else {
            3 * dt.block_elems()
        };
        for n_rows in [1usize, 3, 4, 7, 9] {
            let bytes: Vec<u8> = (0..n_rows)
                .flat_map(|_| random_row(dt, row_len, &mut rng))
                .collect();
            let x: Vec<f32> = (0..row_len).map(|_| rng.unit()).collect();
            let mut out = vec![f32::NAN; n_rows];
            dot_rows(dt, &bytes, row_len, &x, &mut out);
            let rb = bytes.len() / n_rows;
            for (i, o) in out.iter().enumerate() {
                let row = &bytes[i * rb..(i + 1) * rb];
                check_dot(dt, row, &x, &format!("dot_rows row {i} of {n_rows}"));
                let single = dot_row(dt, row, &x);
                let tol = 1e-5 * (single.abs() + 1.0);
                assert!((o - single).abs() <= tol, "{dt}: row {i}: {o} vs {single}");
            }
        }
    }
}

/// Every kernel family this CPU runs (scalar, AVX2, AVX-512 multi-row kernels), for every
/// encoding, row count (whole groups of four and tails) and several row lengths (including
/// the model's 576 and 1536): each output within 1e-5 (relative to Σ|w·x|) of
/// decode-then-dot, and equal across families up to that rounding.
#[test]
fn dot_rows_every_kernel_family_equals_decode_then_dot() {
    let families: Vec<Kernels> = Kernels::ALL
        .into_iter()
        .filter(|k| *k <= codec::cpu::best())
        .collect();
    eprintln!("kernel families under test: {families:?}");
    let mut rng = Rng(0xA5A5_1234);
    for dt in DType::ALL {
        let be = dt.block_elems();
        let lengths: Vec<usize> = if dt.is_scalar() {
            vec![8, 72, 576]
        } else if be == 32 {
            vec![32, 64, 96, 576, 1536]
        } else {
            vec![be, 3 * be]
        };
        for row_len in lengths {
            for n_rows in [0usize, 1, 2, 3, 4, 5, 7, 8, 9, 13, 16] {
                let bytes: Vec<u8> = (0..n_rows)
                    .flat_map(|_| random_row(dt, row_len, &mut rng))
                    .collect();
                let x: Vec<f32> = (0..row_len).map(|_| rng.unit()).collect();
                let rb = dt.bytes_for(row_len as u64).unwrap() as usize;
                let mut decoded = vec![0.0f32; row_len];
                let mut got = Vec::new();
                for &k in &families {
                    let mut out = vec![f32::NAN; n_rows];
                    dot_rows_using(k, dt, &bytes, row_len, &x, &mut out);
                    got.push(out);
                }
                for i in 0..n_rows {
                    decode_row(dt, &bytes[i * rb..(i + 1) * rb], &mut decoded).unwrap();
                    let exact: f64 = decoded
                        .iter()
                        .zip(&x)
                        .map(|(a, b)| *a as f64 * *b as f64)
                        .sum();
                    let scale: f64 = decoded
                        .iter()
                        .zip(&x)
                        .map(|(a, b)| (*a as f64 * *b as f64).abs())
                        .sum();
                    let tol = 1e-5 * scale + 1e-30;
                    for (k, out) in families.iter().zip(&got) {
                        let v = out[i] as f64;
                        assert!(
                            (v - exact).abs() <= tol,
                            "{dt} {k:?} row_len {row_len} row {i} of {n_rows}: {v} vs \
                             decode-then-dot {exact} (tol {tol})"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn wrong_lengths_are_errors_not_panics() {
    for dt in DType::ALL {
        let be = dt.block_elems();
        let n = 2 * be.max(8);
        let good = vec![0u8; dt.bytes_for(n as u64).unwrap() as usize];
        let mut out = vec![0.0f32; n];
        decode_row(dt, &good, &mut out).unwrap();
        // Truncated, overlong, empty.
        assert!(
            decode_row(dt, &good[..good.len() - 1], &mut out).is_err(),
            "{dt}"
        );
        let mut long = good.clone();
        long.push(0);
        assert!(decode_row(dt, &long, &mut out).is_err(), "{dt}");
        assert!(decode_row(dt, &[], &mut out).is_err(), "{dt}");
        if be > 1 {
            // Not a whole number of blocks.
            let err = decode_row(dt, &good, &mut out[..n - 1]).unwrap_err();
            assert!(err.to_string().contains("whole number"), "{err}");
        }
        assert!(decode_rows(dt, &good, 0, &mut out).is_err());
        assert!(decode_rows(dt, &good[..good.len() - 1], be, &mut out).is_err());
        if be > 1 {
            assert!(decode_rows(dt, &good, be + 1, &mut out[..be + 1]).is_err());
        }
    }
}

fn model_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LQL_TEST_MODEL") {
        return Some(PathBuf::from(p));
    }
    let home = std::env::var_os("HOME")?;
    Some(PathBuf::from(home).join(".cache/lql/models/smollm2-135m-instruct.gguf"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Sampled rows of every tensor of SmolLM2-135M-Instruct Q4_1 decode exactly as gguf-py does
/// (max abs diff 0), and their fused dot products agree with decode-then-dot.
#[test]
fn real_model_rows_decode_exactly_like_gguf_py() {
    let Some(path) = model_path().filter(|p| p.exists()) else {
        eprintln!("note: real model not found (set LQL_TEST_MODEL); skipping");
        return;
    };
    let doc: serde_json::Value = serde_json::from_slice(&fixture("smollm2_rows.json")).unwrap();
    let mut file = std::fs::File::open(&path).unwrap();
    assert_eq!(
        file.metadata().unwrap().len(),
        doc["model_bytes"].as_u64().unwrap(),
        "{}: not the SmolLM2 Q4_1 file the fixture was made from",
        path.display()
    );
    let rows = doc["rows"].as_array().unwrap();
    let mut tensors = std::collections::BTreeSet::new();
    let mut rng = Rng(99);
    for e in rows {
        let name = e["tensor"].as_str().unwrap();
        let row = e["row"].as_u64().unwrap();
        let dt = DType::from_name(e["dtype"].as_str().unwrap()).unwrap();
        let n = e["row_len"].as_u64().unwrap() as usize;
        let mut raw = vec![0u8; dt.bytes_for(n as u64).unwrap() as usize];
        file.seek(SeekFrom::Start(e["offset"].as_u64().unwrap()))
            .unwrap();
        file.read_exact(&mut raw).unwrap();
        assert_eq!(
            &hex(&Sha256::digest(&raw))[..16],
            e["raw_sha256_16"].as_str().unwrap(),
            "{name} row {row}: raw bytes"
        );
        let mut out = vec![0.0f32; n];
        decode_row(dt, &raw, &mut out).unwrap();
        let bytes: Vec<u8> = out.iter().flat_map(|v| v.to_le_bytes()).collect();
        let samples: Vec<u32> = [0, 1, n / 2, n - 1]
            .iter()
            .map(|&i| out[i].to_bits())
            .collect();
        let want: Vec<u32> = e["samples"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(samples, want, "{name} row {row}: sampled values");
        assert_eq!(
            hex(&Sha256::digest(&bytes)),
            e["decoded_sha256"].as_str().unwrap(),
            "{name} row {row}: decoded values differ from gguf-py"
        );
        let sum: f64 = out.iter().map(|v| *v as f64).sum();
        let want_sum = e["sum"].as_f64().unwrap();
        assert!(
            (sum - want_sum).abs() <= 1e-9 * want_sum.abs().max(1.0),
            "{name}: sum"
        );
        let x: Vec<f32> = (0..n).map(|_| rng.unit()).collect();
        check_dot(dt, &raw, &x, &format!("{name} row {row}"));
        tensors.insert(name.to_string());
    }
    assert_eq!(tensors.len() as u64, doc["tensor_count"].as_u64().unwrap());
}

/// The same sampled rows reached through the GGUF reader's zero-copy views: every tensor of
/// the file decodes (whole tensor, `decode_rows`) to exactly gguf-py's values at the sampled
/// rows, and the fixture's absolute offsets agree with the reader's.
#[test]
fn real_model_through_gguf_reader_matches_gguf_py() {
    use lql_storage::format::gguf::GgufFile;
    let Some(path) = model_path().filter(|p| p.exists()) else {
        eprintln!("note: real model not found (set LQL_TEST_MODEL); skipping");
        return;
    };
    let doc: serde_json::Value = serde_json::from_slice(&fixture("smollm2_rows.json")).unwrap();
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(
        file.tensors().len() as u64,
        doc["tensor_count"].as_u64().unwrap()
    );
    let rows = doc["rows"].as_array().unwrap();
    for info in file.tensors() {
        let view = file.view(info);
        let n = view.row_len();
        let mut all = vec![0.0f32; view.rows() * n];
        decode_rows(view.dtype, view.bytes, n, &mut all).unwrap();
        let mine: Vec<_> = rows
            .iter()
            .filter(|e| e["tensor"] == info.name.as_str())
            .collect();
        assert!(!mine.is_empty(), "{}: no fixture rows", info.name);
        for e in mine {
            let row = e["row"].as_u64().unwrap() as usize;
            assert_eq!(
                e["dtype"].as_str().unwrap(),
                view.dtype.name(),
                "{}",
                info.name
            );
            let start = file.byte_range(info).start + row * view.row_bytes();
            assert_eq!(
                start as u64,
                e["offset"].as_u64().unwrap(),
                "{} row {row}",
                info.name
            );
            let values = &all[row * n..(row + 1) * n];
            let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            assert_eq!(
                hex(&Sha256::digest(&bytes)),
                e["decoded_sha256"].as_str().unwrap(),
                "{} row {row}: decoded values differ from gguf-py",
                info.name
            );
        }
    }
}

/// The SIMD decoders agree with the portable reference bit for bit on many random rows.
#[test]
fn simd_decode_equals_scalar_reference_bitwise() {
    let mut rng = Rng(0xDEC0DE);
    for dt in DType::ALL {
        for blocks in [1usize, 2, 9] {
            let n = blocks * dt.block_elems().max(8) + if dt.is_scalar() { 3 } else { 0 };
            let row: Vec<u8> = (0..dt.bytes_for(n as u64).unwrap())
                .map(|_| rng.byte())
                .collect();
            let mut fast = vec![0.0f32; n];
            let mut reference = vec![0.0f32; n];
            decode_row(dt, &row, &mut fast).unwrap();
            decode_scalar(dt, &row, &mut reference);
            for (i, (a, b)) in fast.iter().zip(&reference).enumerate() {
                assert!(
                    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                    "{dt}: element {i}: {a:e} vs reference {b:e}"
                );
            }
        }
    }
}
