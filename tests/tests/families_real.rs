//! Real weights of a new family: Gemma 3 270M (base, Q4_K_M: Q8_0 embedding, Q5_0, Q4_K
//! and Q6_K matrices; 262,144-token SentencePiece vocabulary; 5 windowed layers to 1
//! global), fetched by the catalogue (`USE MODEL "gemma3-270m"`), against llama.cpp's
//! goldens (`tests/tools/real_family_goldens.py`): the same token ids from the text, top-1
//! equal wherever llama.cpp's margin is ≥ 0.3, and the greedy continuation equal on most
//! prompts. Logits are held to the exact arithmetic: within 0.05 of the numpy reference
//! (f64 on the dequantised weights) on its top 5 at every position. llama.cpp rounds
//! activations to 8 bits for its quantised products and lands up to ~1.2 from that
//! reference here (its own logits move by up to 0.76 between batched and one-token
//! evaluation), so its top 5 are held only to 1.2.

use std::sync::Arc;

use lql_exec::tokenizer::Tokenizer;
use lql_exec::{Control, Executor, GenerateOptions};
use serde_json::Value;

fn golden() -> Value {
    let p = lql_tests::repo_root().join("tests/fixtures/families/gemma3_270m/golden.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// The executor and the tokenizer, built the way the engine builds them.
fn executor() -> (Executor, Tokenizer) {
    let path = lql_storage::catalogue::resolve("gemma3-270m", &mut |_| {})
        .unwrap_or_else(|e| panic!("the Gemma 3 270M file is needed by this test: {e}"));
    let model = lql_storage::import::open(&path).unwrap();
    assert_eq!(model.surface.source_architecture, "gemma3");
    let spec = model.tokenizer_spec().unwrap();
    let tok = Tokenizer::from_spec_with_special(&spec, &model.surface.special).unwrap();
    (Executor::new(Arc::new(model), 2).unwrap(), tok)
}

#[test]
fn gemma3_270m_follows_llama_cpp() {
    let g = golden();
    let (exec, tok) = executor();
    let (mut checked, mut top1_ok, mut worst) = (0usize, 0usize, 0.0f32);
    let (mut over, mut worst_ref) = (0usize, 0.0f32);
    let mut greedy_equal = 0;
    let prompts = g["prompts"].as_array().unwrap();
    for p in prompts {
        let text = p["prompt"].as_str().unwrap();
        let want_ids = ids(&p["ids"]);
        let got_ids = tok.encode(text, true).unwrap();
        assert_eq!(got_ids, want_ids, "{text:?}: token ids");
        let logits = exec.logits_all(&want_ids).unwrap();
        for (pos, (l, gp)) in logits
            .iter()
            .zip(p["positions"].as_array().unwrap())
            .enumerate()
        {
            let top5: Vec<(u32, f32)> = gp["top5"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| (e[0].as_u64().unwrap() as u32, e[1].as_f64().unwrap() as f32))
                .collect();
            for &(id, want) in &top5 {
                let d = (l.values[id as usize] - want).abs();
                worst = worst.max(d);
                if d > 0.5 {
                    over += 1;
                }
                assert!(
                    d <= 1.2,
                    "{text:?} position {pos}: token {id} |Δ| {d} from llama.cpp"
                );
            }
            for e in p["reference"]["top5"][pos].as_array().unwrap() {
                let (id, want) = (
                    e[0].as_u64().unwrap() as usize,
                    e[1].as_f64().unwrap() as f32,
                );
                let d = (l.values[id] - want).abs();
                worst_ref = worst_ref.max(d);
                assert!(
                    d <= 0.05,
                    "{text:?} position {pos}: token {id} |Δ| {d} from the reference"
                );
            }
            let margin = gp["margin"].as_f64().unwrap();
            let ours = l.argmax();
            if margin >= 0.3 {
                checked += 1;
                assert_eq!(ours, top5[0].0, "{text:?} position {pos} (margin {margin})");
                top1_ok += 1;
            }
        }
        let opts = GenerateOptions {
            max_tokens: 16,
            stop_at_eos: false,
            ..GenerateOptions::default()
        };
        let out = exec
            .generate(&want_ids, &opts, &mut |_| Control::Continue)
            .unwrap();
        let want = ids(&p["greedy"]);
        if out.token_ids == want {
            greedy_equal += 1;
        } else {
            eprintln!(
                "{text:?}: greedy differs: ours {:?} llama.cpp {want:?}",
                out.token_ids
            );
        }
    }
    eprintln!(
        "gemma3-270m: max |Δlogit| {worst_ref:.4} from the reference's top 5; {over} of llama.cpp's top-5 logits more than 0.5 away"
    );
    eprintln!(
        "gemma3-270m: top-1 equal at {top1_ok}/{checked} positions with margin ≥ 0.3; max |Δlogit| on llama.cpp's top 5 {worst:.3}; greedy equal on {greedy_equal}/{} prompts",
        prompts.len()
    );
    assert!(
        greedy_equal * 2 > prompts.len(),
        "greedy equal on {greedy_equal}/{}",
        prompts.len()
    );
}
