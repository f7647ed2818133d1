//! COMPILE … INTO GGUF on SmolLM2, checked with llama.cpp itself (llama-cpp-python, through
//! `tests/tools/llamacpp_logits.py`): every tensor of the export is byte-identical to the
//! source's, llama.cpp loads the export, its token ids and logits on three prompts equal
//! llama.cpp's on the original file bit for bit, LQL's tokenizer gives the same ids, and LQL's
//! logits on the export agree with llama.cpp's (top-1 equal at the last position, and
//! elsewhere equal or llama.cpp's runner-up at a near-tie; the max |Δ| is printed: llama.cpp
//! quantises activations to 8 bits for Q4_1 dot products, so only a loose bound holds). Run
//! with `--release`.
//!
//! The llama.cpp half needs a Python with `llama_cpp`: `LQL_LLAMACPP_PYTHON`, else
//! `~/.cache/lql-tools/venv/bin/python`, else `python3`. Without one it prints why and
//! skips, unless `LQL_REQUIRE_LLAMACPP=1` (set by `.ci/run`, which installs it) makes that
//! a failure.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use lql::Connection;
use lql_storage::format::gguf::GgufFile;
use lql_storage::model::OperandSource;
use lql_tests::{default_model_path as smollm2, repo_root};

const PROMPTS: [&str; 3] = [
    "The capital of France is",
    "def fibonacci(n):\n    return",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n",
];

fn q(p: &Path) -> String {
    p.display().to_string().replace('"', "\\\"")
}

fn compile(src: &Path, out: &Path) -> lql::Rows {
    let c = Connection::open_in_memory().unwrap();
    c.execute(&format!("COMPILE \"{}\" INTO GGUF \"{}\"", q(src), q(out)))
        .unwrap()
}

#[test]
fn export_is_tensor_identical_and_stamped() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("out.gguf");
    let rows = compile(&smollm2(), &out);
    let j = rows.to_json();
    assert_eq!(j["rows"][0][1], "GGUF");
    assert_eq!(
        j["rows"][0][4],
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    );
    let a = GgufFile::open(&smollm2()).unwrap();
    let b = GgufFile::open(&out).unwrap();
    assert_eq!(a.tensors().len(), b.tensors().len());
    for (x, y) in a.tensors().iter().zip(b.tensors()) {
        assert_eq!((&x.name, x.dtype, &x.shape), (&y.name, y.dtype, &y.shape));
        assert!(a.view(x).bytes == b.view(y).bytes, "{} differs", x.name);
    }
    // Every source key is carried; provenance is added.
    for kv in a.metadata() {
        assert_eq!(b.get(&kv.key), Some(&kv.value), "{}", kv.key);
    }
    assert_eq!(b.get_str("lql.authority").unwrap(), Some("derived"));
    assert_eq!(
        b.get_str("lql.derived_from_model").unwrap(),
        Some("b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53")
    );
    // Compiling over the source itself is refused; nothing is left half-written.
    let c = Connection::open_in_memory().unwrap();
    let e = c
        .execute(&format!(
            "COMPILE \"{}\" INTO GGUF \"{}\"",
            q(&out),
            q(&out)
        ))
        .unwrap_err();
    assert!(e.to_string().contains("overwrite"), "{e}");
    // The exported file opens and answers as the source does.
    let c = Connection::open_in_memory().unwrap();
    c.bind(&out.display().to_string()).unwrap();
    let r = c
        .execute("INFER \"The capital of France is\" TOP 1")
        .unwrap();
    assert!(
        r.to_json()["rows"][0].to_string().contains("Paris"),
        "{r:?}"
    );
}

#[test]
fn vindex_source_into_gguf_is_refused_as_unbuilt() {
    let t = tempfile::tempdir().unwrap();
    let c = Connection::open_in_memory().unwrap();
    let v = t.path().join("v");
    c.execute(&format!(
        "EXTRACT MODEL \"{}\" INTO \"{}\"",
        q(&smollm2()),
        q(&v)
    ))
    .unwrap();
    let e = c
        .execute(&format!(
            "COMPILE \"{}\" INTO GGUF \"{}\"",
            q(&v),
            q(&t.path().join("x.gguf"))
        ))
        .unwrap_err();
    assert!(e.to_string().contains("not supported yet"), "{e}");
    assert!(!t.path().join("x.gguf").exists());
}

/// A Python that imports `llama_cpp` and `numpy`, or why there is none.
fn llamacpp_python() -> Result<PathBuf, String> {
    lql_tests::python_with("llama_cpp, numpy")
}

struct Peer {
    ids: Vec<Vec<u32>>,
    logits: Vec<Vec<f32>>,
    vocab: usize,
}

fn llamacpp(py: &Path, model: &Path, dir: &Path) -> Peer {
    llamacpp_on(py, model, dir, &PROMPTS)
}

fn llamacpp_on(py: &Path, model: &Path, dir: &Path, prompts: &[&str]) -> Peer {
    let script = repo_root().join("tests/tools/llamacpp_logits.py");
    let o = Command::new(py)
        .arg(&script)
        .arg(model)
        .arg(dir)
        .args(prompts)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "llama.cpp on {}: {}",
        model.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    let j: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("result.json")).unwrap()).unwrap();
    let vocab = j["vocab"].as_u64().unwrap() as usize;
    let mut ids = Vec::new();
    let mut logits = Vec::new();
    for (i, p) in j["prompts"].as_array().unwrap().iter().enumerate() {
        ids.push(
            p["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect(),
        );
        let raw = std::fs::read(dir.join(format!("p{i}.f32"))).unwrap();
        logits.push(
            raw.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        );
    }
    Peer { ids, logits, vocab }
}

fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best
}

/// The Python to run llama.cpp with, or None (skip) when none is found and it is not
/// required.
fn python_or_skip() -> Option<PathBuf> {
    match llamacpp_python() {
        Ok(p) => Some(p),
        Err(why) if std::env::var("LQL_REQUIRE_LLAMACPP").as_deref() != Ok("1") => {
            eprintln!("skipping the llama.cpp check: {why}");
            None
        }
        Err(why) => panic!("LQL_REQUIRE_LLAMACPP=1 but {why}"),
    }
}

/// Edits compiled into GGUF (FFN widened to one width with zero features, the added
/// features' biases as `ffn_gate.bias`/`ffn_up.bias`): llama.cpp loads the export and its
/// top-1 on each edited prompt is the edit's target, as the edited session's is, and LQL's
/// top-1 on the export is llama.cpp's.
#[test]
fn llama_cpp_follows_the_edits_of_an_edited_export() {
    let Some(py) = python_or_skip() else {
        return;
    };
    const EDITS: [(&str, &str, &str, &str); 3] = [
        (
            "Eiffel Tower",
            "location",
            "Rome",
            "The Eiffel Tower is located in the city of",
        ),
        (
            "Paris",
            "city_country",
            "Germany",
            "Paris is a city in the country of",
        ),
        (
            "Toyota",
            "company_country",
            "Germany",
            "Toyota is a company from",
        ),
    ];
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("edited.gguf");
    let c = Connection::open_in_memory().unwrap();
    c.bind(&smollm2().display().to_string()).unwrap();
    for (e, r, target, prompt) in EDITS {
        c.execute(&format!(
            "INSERT INTO edges (entity, relation, target, prompt) VALUES ('{e}', '{r}', '{target}', '{prompt}')"
        ))
        .unwrap();
    }
    c.execute(&format!("COMPILE CURRENT INTO GGUF \"{}\"", q(&out)))
        .unwrap();
    let g = GgufFile::open(&out).unwrap();
    assert!(g
        .tensors()
        .iter()
        .any(|t| t.name.ends_with("ffn_gate.bias")));
    let prompts: Vec<&str> = EDITS.iter().map(|e| e.3).collect();
    let peer = llamacpp_on(&py, &out, &t.path().join("edited"), &prompts);
    let model = lql_storage::import::open(&out).unwrap();
    let tok = lql_exec::tokenizer::Tokenizer::from_spec(&model.tokenizer_spec().unwrap()).unwrap();
    let v = peer.vocab;
    for (i, (_, _, target, prompt)) in EDITS.iter().enumerate() {
        let n = peer.ids[i].len();
        let last = &peer.logits[i][(n - 1) * v..n * v];
        let top = tok.decode(&[argmax(last) as u32]).unwrap();
        assert_eq!(top.trim(), *target, "llama.cpp's top-1 on {prompt:?}");
        // The session's answer is the same.
        let r = c.execute(&format!("INFER {prompt:?} TOP 1")).unwrap();
        assert_eq!(r.rows[0][1].to_string().trim(), *target);
    }
    // LQL on the export: top-1 equal to llama.cpp's on each edited prompt. (Earlier
    // positions are compared on the unedited export below; here llama.cpp's 8-bit
    // activations may swap near-tied candidates after the first tokens.)
    let src: Arc<dyn OperandSource> = Arc::new(model);
    let ex = lql_exec::Executor::new(src, 2).unwrap();
    for (i, prompt) in prompts.iter().enumerate() {
        let ours = ex.logits_all(&peer.ids[i]).unwrap();
        let last = ours.len() - 1;
        assert_eq!(
            argmax(&ours[last].values),
            argmax(&peer.logits[i][last * v..(last + 1) * v]),
            "{prompt:?}: LQL and llama.cpp differ on the edited export"
        );
    }
}

#[test]
fn llama_cpp_loads_the_export_and_agrees() {
    let Some(py) = python_or_skip() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("out.gguf");
    compile(&smollm2(), &out);
    let orig = llamacpp(&py, &smollm2(), &t.path().join("orig"));
    let exp = llamacpp(&py, &out, &t.path().join("export"));
    assert_eq!(orig.vocab, exp.vocab);
    assert_eq!(
        orig.ids, exp.ids,
        "llama.cpp tokenizes the export differently"
    );
    for (i, (a, b)) in orig.logits.iter().zip(&exp.logits).enumerate() {
        assert_eq!(a.len(), orig.ids[i].len() * orig.vocab);
        let same = a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(
            same,
            "prompt {i}: llama.cpp's logits on the export differ from the original's"
        );
    }

    // LQL on the export: same ids as llama.cpp, logits close, same top-1 at the last position.
    let model = lql_storage::import::open(&out).unwrap();
    let tok = lql_exec::tokenizer::Tokenizer::from_spec(&model.tokenizer_spec().unwrap()).unwrap();
    let src: Arc<dyn OperandSource> = Arc::new(model);
    let ex = lql_exec::Executor::new(src, 2).unwrap();
    let mut worst = 0f32;
    for (i, p) in PROMPTS.iter().enumerate() {
        let ids = tok.encode(p, false).unwrap();
        assert_eq!(
            ids, exp.ids[i],
            "prompt {i}: LQL's ids differ from llama.cpp's"
        );
        let ours = ex.logits_all(&ids).unwrap();
        let v = exp.vocab;
        for (pos, l) in ours.iter().enumerate() {
            let theirs = &exp.logits[i][pos * v..(pos + 1) * v];
            for (x, y) in l.values.iter().zip(theirs) {
                worst = worst.max((x - y).abs());
            }
        }
        // llama.cpp quantizes activations to 8 bits for its dot products (how much depends
        // on the build's kernels: AVX2, AVX-512 VNNI), so at a near-tie the two top-1s may
        // differ: LQL's top-1 must then be llama.cpp's runner-up within the tie margin; at
        // the last position the top-1s are equal.
        for (pos, l) in ours.iter().enumerate() {
            let theirs = &exp.logits[i][pos * v..(pos + 1) * v];
            let (a, b) = (argmax(&l.values), argmax(theirs));
            if pos + 1 == ours.len() {
                assert_eq!(a, b, "prompt {i}: top-1 differs at the last position");
            } else if a != b {
                let gap = theirs[b] - theirs[a];
                eprintln!("prompt {i} position {pos}: top-1 {a} vs llama.cpp's {b}, llama.cpp's gap {gap}");
                assert!(
                    gap < 0.5,
                    "prompt {i}: top-1 differs at position {pos} by {gap} in llama.cpp's logits"
                );
            }
        }
    }
    eprintln!("LQL vs llama.cpp on the export: max |Δ logit| = {worst}");
    assert!(worst < 3.0, "LQL and llama.cpp differ by {worst}");
}
