//! Opt-in parity on the MoE GGUFs of `../shared/tools/make_tiny_moe.py` (random
//! Mixtral-style banks carrying SmolLM2's real tokenizer, so llama.cpp loads them): for
//! several seeds and shapes (4 and 8 experts, top-1 and top-2, 2–4 layers) the logits at
//! every position within 1e-4 of the numpy reference (`tests/tools/reference_forward.py`)
//! and of llama.cpp (`llamacpp_logits.py --f32-kv`), and greedy 16 identical to both.
//!
//! Runs only with `LQL_MOE_TOOLS_PY` naming a python with numpy, gguf and llama-cpp-python
//! (`/work/shared/tools/pyenv.sh --llamacpp` prints one) and the default model cached (its
//! tokenizer; `LQL_SHARED_TOOLS` names the shared tools folder when it is not
//! `../shared/tools` beside the checkout); CI runs the committed goldens of `moe.rs`
//! instead.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use lql_exec::{Control, Executor, GenerateOptions};

const PROMPT: &str = "The capital of France is";

/// An `.npy` file of little-endian f32 (version 1 or 2 header), as numpy writes it.
fn read_npy(path: &Path) -> Vec<f32> {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..6], b"\x93NUMPY");
    let (hlen, start) = if b[6] == 1 {
        (u16::from_le_bytes([b[8], b[9]]) as usize, 10)
    } else {
        (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12)
    };
    let header = std::str::from_utf8(&b[start..start + hlen]).unwrap();
    assert!(
        header.contains("'<f4'") && header.contains("False"),
        "{header}"
    );
    b[start + hlen..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn run(py: &str, args: &[&str]) -> String {
    let out = Command::new(py).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ids_of(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn make_tiny_moe_models_match_reference_and_llamacpp() {
    let Ok(py) = std::env::var("LQL_MOE_TOOLS_PY") else {
        eprintln!("skipped: LQL_MOE_TOOLS_PY is not set");
        return;
    };
    let Some(tok_src) = common::real::model_path() else {
        eprintln!("skipped: the default model is not cached");
        return;
    };
    // The shared tools beside the checkout (`../shared/tools`), or where
    // `LQL_SHARED_TOOLS` says.
    let shared = std::env::var_os("LQL_SHARED_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/tools"));
    let ours = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/tools");
    let dir = tempfile::tempdir().unwrap();
    // (experts, used, layers, seed)
    for (e, k, l, seed) in [
        (4, 2, 2, 0),
        (4, 1, 2, 1),
        (8, 2, 3, 2),
        (8, 1, 4, 3),
        (8, 2, 2, 4),
    ] {
        let name = format!("moe_e{e}_k{k}_l{l}_s{seed}");
        let gguf = dir.path().join(format!("{name}.gguf"));
        let g = gguf.to_str().unwrap();
        run(
            &py,
            &[
                shared.join("make_tiny_moe.py").to_str().unwrap(),
                tok_src.to_str().unwrap(),
                g,
                "--experts",
                &e.to_string(),
                "--used",
                &k.to_string(),
                "--layers",
                &l.to_string(),
                "--seed",
                &seed.to_string(),
            ],
        );
        let peer = dir.path().join(format!("{name}-llamacpp"));
        run(
            &py,
            &[
                shared.join("llamacpp_logits.py").to_str().unwrap(),
                g,
                PROMPT,
                "--out",
                peer.to_str().unwrap(),
                "--greedy",
                "16",
                "--f32-kv",
            ],
        );
        let lc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(peer.join("llamacpp.json")).unwrap()).unwrap();
        let ids = ids_of(&lc["ids"]);
        let reference = dir.path().join(format!("{name}-ref"));
        run(
            &py,
            &[
                ours.join("reference_forward.py").to_str().unwrap(),
                g,
                "--ids",
                &serde_json::to_string(&ids).unwrap(),
                "--out",
                reference.to_str().unwrap(),
                "--greedy",
                "16",
            ],
        );
        let summary: serde_json::Value =
            serde_json::from_slice(&std::fs::read(reference.join("summary.json")).unwrap())
                .unwrap();

        let model = lql_storage::import::open(&gguf).unwrap();
        let vocab = model.surface.vocab;
        let exec = Executor::new(Arc::new(model), 2).unwrap();
        let logits: Vec<f32> = exec
            .logits_all(&ids)
            .unwrap()
            .into_iter()
            .flat_map(|l| l.values)
            .collect();
        let diff = |theirs: &[f32]| {
            assert_eq!(theirs.len(), ids.len() * vocab);
            theirs
                .iter()
                .zip(&logits)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max)
        };
        let d_ref = diff(&read_npy(&reference.join("logits.npy")));
        let d_lc = diff(&read_npy(&peer.join("llamacpp_logits.npy")));
        let opts = GenerateOptions {
            max_tokens: 16,
            stop_at_eos: false,
            ..GenerateOptions::default()
        };
        let greedy = exec
            .generate(&ids, &opts, &mut |_| Control::Continue)
            .unwrap()
            .token_ids;
        eprintln!(
            "{name}: {} positions, max abs diff vs reference {d_ref:.2e}, vs llama.cpp {d_lc:.2e}",
            ids.len()
        );
        assert!(d_ref < 1e-4 && d_lc < 1e-4, "{name}: {d_ref} {d_lc}");
        assert_eq!(greedy, ids_of(&summary["greedy"]), "{name} vs reference");
        let lc_greedy = ids_of(&lc["greedy"]);
        assert_eq!(
            &greedy[..lc_greedy.len()],
            &lc_greedy[..],
            "{name} vs llama.cpp"
        );

        // The same model in the VINDEX3 bank shape: bit-identical logits, same greedy 16,
        // and the independent reader agrees with the GGUF byte for byte.
        let bank = dir.path().join(format!("{name}.bank"));
        let src = lql_storage::import::open(&gguf).unwrap();
        lql_storage::format::vindex3::extract_bank(
            &src,
            &bank,
            None,
            &mut |_| {},
            &std::sync::atomic::AtomicBool::new(false),
        )
        .unwrap();
        let bexec = Executor::new(Arc::new(lql_storage::import::open(&bank).unwrap()), 2).unwrap();
        let blogits: Vec<f32> = bexec
            .logits_all(&ids)
            .unwrap()
            .into_iter()
            .flat_map(|l| l.values)
            .collect();
        assert!(blogits == logits, "{name}: bank shape logits differ");
        let bgreedy = bexec
            .generate(&ids, &opts, &mut |_| Control::Continue)
            .unwrap()
            .token_ids;
        assert_eq!(bgreedy, greedy, "{name}: bank shape greedy");
        run(
            &py,
            &[
                ours.join("read_bank.py").to_str().unwrap(),
                bank.to_str().unwrap(),
                "--gguf",
                g,
            ],
        );
        eprintln!("{name}: bank shape bit-identical, greedy 16 identical, read_bank.py agrees");
    }
}
