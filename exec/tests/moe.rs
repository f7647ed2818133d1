//! Mixture-of-experts execution: tiny MoE GGUFs written by the project's own writer
//! (Mixtral-style `llama` banks of 4 and 8 experts, top-1 and top-2, 2–4 layers; a
//! `qwen2moe` bank with a gated shared expert; sigmoid routing; quantised experts) against
//! committed goldens from the independent numpy reference (`tests/tools/moe_goldens.py`,
//! f32 math on the dequantised weights) and llama.cpp, at every position, and greedy 16.
//!
//! Regenerate the goldens: `LQL_MOE_FIXTURE_DIR=/tmp/moe cargo test --release -p lql-exec
//! --test moe -- --ignored write_moe_fixtures`, then
//! `$PY tests/tools/moe_goldens.py /tmp/moe exec/tests/fixtures/moe`.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use lql_exec::{Control, Executor, GenerateOptions, LayerRecord, Observer, Route};
use lql_storage::codec;
use lql_storage::format::gguf::synth::{TinyModel, TinyMoe};
use lql_storage::format::gguf::{GgufFile, GgufWriter};
use lql_storage::DType;

/// The prompt every fixture runs (ids of the byte-level vocabulary).
const IDS: [u32; 8] = [84, 104, 101, 32, 99, 97, 116, 257];

fn moe(experts: usize, used: usize, expert_ffn: usize) -> TinyMoe {
    TinyMoe {
        experts,
        used,
        expert_ffn,
        shared_ffn: 0,
        shared_gate: false,
        sigmoid: false,
    }
}

/// Which encoding a tensor of a quantised fixture gets (`None`: stays F32).
type Encoding = fn(&str, usize) -> Option<DType>;

/// Every fixture: name, model, and the encodings of a quantised one.
fn fixtures() -> Vec<(&'static str, TinyModel, Option<Encoding>)> {
    let mix = |experts, used, layers, seed| TinyModel {
        layers,
        seed,
        moe: Some(moe(experts, used, 96)),
        ..TinyModel::llama()
    };
    let quant: Encoding = |name, dims| {
        Some(match name {
            n if n.contains("ffn_gate_exps") => DType::Q4_0,
            n if n.contains("ffn_up_exps") => DType::Q8_0,
            n if n.contains("ffn_down_exps") => DType::F16,
            n if n.contains("ffn_gate_inp") => DType::F16,
            "token_embd.weight" => DType::Q8_0,
            _ if dims >= 2 => DType::Q4_0,
            _ => return None,
        })
    };
    let quant_q8: Encoding = |name, dims| {
        Some(match name {
            n if n.contains("_exps") => DType::Q8_0,
            n if n.contains("_shexp") && dims >= 2 => DType::Q4_0,
            _ if dims >= 2 => DType::F16,
            _ => return None,
        })
    };
    vec![
        ("mixtral_e4_k2_l2", mix(4, 2, 2, 1), None),
        ("mixtral_e4_k1_l2", mix(4, 1, 2, 2), None),
        ("mixtral_e8_k2_l3", mix(8, 2, 3, 3), None),
        ("mixtral_e8_k1_l4", mix(8, 1, 4, 4), None),
        ("qwen2moe_shared", TinyModel::qwen2moe(), None),
        (
            "qwen2moe_e8_k2_l3",
            TinyModel {
                layers: 3,
                seed: 5,
                moe: Some(TinyMoe {
                    shared_ffn: 64,
                    shared_gate: true,
                    ..moe(8, 2, 48)
                }),
                ..TinyModel::qwen2moe()
            },
            None,
        ),
        (
            "qwen2moe_sigmoid",
            TinyModel {
                seed: 6,
                moe: Some(TinyMoe {
                    sigmoid: true,
                    shared_ffn: 64,
                    ..moe(8, 3, 32)
                }),
                ..TinyModel::qwen2moe()
            },
            None,
        ),
        ("mixtral_q4_q8_f16", mix(8, 2, 2, 7), Some(quant)),
        (
            "qwen2moe_q8_q4_f16",
            TinyModel {
                seed: 8,
                ..TinyModel::qwen2moe()
            },
            Some(quant_q8),
        ),
    ]
}

/// Write fixture `name` into `dir`, re-encoding the tensors of a quantised one.
fn write(dir: &Path, name: &str, model: &TinyModel, enc: Option<Encoding>) -> PathBuf {
    let path = dir.join(format!("{name}.gguf"));
    model.write(&path).unwrap();
    let Some(enc) = enc else { return path };
    let file = GgufFile::open(&path).unwrap();
    let mut w = GgufWriter::from_file(&file).unwrap();
    for t in file.tensors() {
        let Some(dtype) = enc(&t.name, t.shape.len()) else {
            continue;
        };
        let mut vals = vec![0.0f32; t.elems()];
        codec::decode_rows(t.dtype, file.view(t).bytes, t.shape[0], &mut vals).unwrap();
        let mut out = Vec::new();
        for row in vals.chunks(t.shape[0]) {
            codec::encode_row(dtype, row, &mut out).unwrap();
        }
        w.remove_tensor(&t.name);
        w.add_tensor(&t.name, dtype, &t.shape, Cow::Owned(out))
            .unwrap();
    }
    let q = dir.join(format!("{name}.q.gguf"));
    w.write(&q).unwrap();
    drop(file);
    std::fs::rename(&q, &path).unwrap();
    path
}

fn open(path: &Path) -> Executor {
    let model = lql_storage::import::open(path).unwrap();
    Executor::new(Arc::new(model), 2).unwrap()
}

struct Golden {
    ids: Vec<u32>,
    /// Reference logits, `[position][vocab]`.
    logits: Vec<Vec<f32>>,
    greedy: Vec<u32>,
    /// The reference's experts per layer, position: `[layer][position][rank]`.
    routes: Vec<Vec<Vec<usize>>>,
    /// llama.cpp's logits when it ran the file (softmax-routed F32 fixtures).
    llamacpp: Option<Vec<Vec<f32>>>,
    llamacpp_greedy: Option<Vec<u32>>,
}

fn golden(name: &str) -> Golden {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/moe")
        .join(format!("{name}.json"));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let ids = |v: &Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let rows = |v: &Value| -> Vec<Vec<f32>> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap() as f32)
                    .collect()
            })
            .collect()
    };
    let routes = v["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            l.as_array()
                .unwrap()
                .iter()
                .map(|p| ids(p).into_iter().map(|e| e as usize).collect())
                .collect()
        })
        .collect();
    Golden {
        ids: ids(&v["ids"]),
        logits: rows(&v["logits"]),
        greedy: ids(&v["greedy"]),
        routes,
        llamacpp: v.get("llamacpp_logits").filter(|x| !x.is_null()).map(rows),
        llamacpp_greedy: v.get("llamacpp_greedy").filter(|x| !x.is_null()).map(ids),
    }
}

fn max_diff(a: &[Vec<f32>], b: &[lql_exec::Logits]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| {
            assert_eq!(x.len(), y.values.len());
            x.iter().zip(&y.values).map(|(p, q)| (p - q).abs())
        })
        .fold(0.0, f32::max)
}

fn greedy(exec: &Executor, ids: &[u32], n: usize) -> Vec<u32> {
    let opts = GenerateOptions {
        max_tokens: n,
        stop_at_eos: false,
        ..GenerateOptions::default()
    };
    exec.generate(ids, &opts, &mut |_| Control::Continue)
        .unwrap()
        .token_ids
}

#[test]
#[ignore = "fixture generator"]
fn write_moe_fixtures() {
    let dir = PathBuf::from(std::env::var("LQL_MOE_FIXTURE_DIR").unwrap());
    std::fs::create_dir_all(&dir).unwrap();
    for (name, model, enc) in fixtures() {
        write(&dir, name, &model, enc);
    }
    std::fs::write(
        dir.join("ids.json"),
        serde_json::to_string(&IDS.to_vec()).unwrap(),
    )
    .unwrap();
}

#[test]
fn moe_logits_match_reference_and_llamacpp_at_every_position() {
    let dir = tempfile::tempdir().unwrap();
    for (name, model, enc) in fixtures() {
        let g = golden(name);
        assert_eq!(g.ids, IDS);
        let exec = open(&write(dir.path(), name, &model, enc));
        let logits = exec.logits_all(&g.ids).unwrap();
        let d = max_diff(&g.logits, &logits);
        eprintln!("{name}: max abs diff vs reference {d:.2e}");
        assert!(d < 1e-4, "{name}: {d}");
        if let Some(l) = &g.llamacpp {
            let d = max_diff(l, &logits);
            eprintln!("{name}: max abs diff vs llama.cpp {d:.2e}");
            assert!(d < 1e-4, "{name} vs llama.cpp: {d}");
        }
    }
}

#[test]
fn moe_greedy_16_matches_reference_and_llamacpp() {
    let dir = tempfile::tempdir().unwrap();
    for (name, model, enc) in fixtures() {
        let g = golden(name);
        let exec = open(&write(dir.path(), name, &model, enc));
        let ours = greedy(&exec, &g.ids, g.greedy.len());
        assert_eq!(ours, g.greedy, "{name}");
        if let Some(l) = &g.llamacpp_greedy {
            assert_eq!(&ours, l, "{name} vs llama.cpp");
        }
    }
}

/// Collects the router's choices.
#[derive(Default)]
struct Routes(Vec<(usize, Vec<Route>)>);

impl Observer for Routes {
    fn on_layer(&mut self, r: &LayerRecord<'_>) {
        self.0.push((r.layer, r.routes.to_vec()));
    }
}

#[test]
fn moe_routes_match_the_reference_choices() {
    let dir = tempfile::tempdir().unwrap();
    for (name, model, enc) in fixtures() {
        let g = golden(name);
        let exec = open(&write(dir.path(), name, &model, enc));
        let mut obs = Routes::default();
        exec.observe(&g.ids, lql_exec::LogitsWanted::Last, &mut obs)
            .unwrap();
        let used = model.moe.as_ref().unwrap().used;
        assert_eq!(obs.0.len(), model.layers, "{name}");
        for (layer, routes) in &obs.0 {
            assert_eq!(routes.len(), g.ids.len() * used);
            for (p, per) in routes.chunks(used).enumerate() {
                assert!(per.iter().all(|r| r.position == p));
                let experts: Vec<usize> = per.iter().map(|r| r.expert).collect();
                assert_eq!(
                    experts, g.routes[*layer][p],
                    "{name}: layer {layer} position {p}"
                );
                let w: Vec<f32> = per.iter().map(|r| r.weight).collect();
                assert!(w.windows(2).all(|x| x[0] >= x[1]), "{name}: {w:?}");
            }
        }
    }
}

#[test]
fn moe_plan_names_the_bank() {
    let dir = tempfile::tempdir().unwrap();
    let exec = open(&write(dir.path(), "q", &TinyModel::qwen2moe(), None));
    let text = exec.plan().to_string();
    assert!(
        text.contains("Bank(router → 2 of 4 experts, softmax then top-k; experts silu 32 + shared 128 × sigmoid gate)"),
        "{text}"
    );
}

#[test]
fn moe_trace_contributions_sum_to_the_logit() {
    use lql_exec::trace::{logit_lens, run_trace, target_trajectory, CaptureOptions};
    let dir = tempfile::tempdir().unwrap();
    for (name, model, enc) in fixtures() {
        let exec = open(&write(dir.path(), name, &model, enc));
        let opts = CaptureOptions {
            ffn_activity: true,
            ..CaptureOptions::default()
        };
        let trace = run_trace(&exec, &IDS, opts).unwrap();
        let last = exec.logits_all(&IDS).unwrap().pop().unwrap();
        let tok = last.argmax();
        let lens = logit_lens(&exec, &trace, Some(tok)).unwrap();
        let tj = target_trajectory(&exec, &trace, &lens, tok, 0).unwrap();
        let d = (tj.contrib_sum - last.values[tok as usize] as f64).abs();
        eprintln!("{name}: Σ contributions − logit = {d:.2e}");
        assert!(d < 1e-4, "{name}: {d}");
        assert!(trace
            .layers
            .iter()
            .all(|l| l.gate.as_ref().is_none_or(|g| g.is_empty())));
    }
}

/// A MoE model extracted to a VINDEX3 container (the graph shape, its stacked expert
/// operands stored whole) executes bit-identically and verifies.
#[test]
fn moe_vindex3_extract_executes_bit_identically() {
    use lql_storage::format::vindex3::{self, extract, ExtractEncoding};
    let dir = tempfile::tempdir().unwrap();
    for (name, model, enc) in fixtures() {
        let path = write(dir.path(), name, &model, enc);
        let src = lql_storage::import::open(&path).unwrap();
        let out = dir.path().join(format!("{name}.vindex"));
        extract(&src, &out, ExtractEncoding::Source, &mut |_| {}).unwrap();
        assert!(vindex3::all_ok(&vindex3::verify(&out).unwrap()), "{name}");
        let a = open(&path).logits_all(&IDS).unwrap();
        let b = open(&out).logits_all(&IDS).unwrap();
        assert_eq!(a, b, "{name}");
    }
}

/// The same models extracted to the seed-002 bank shape (`moe_manifest.json`, the spine
/// segment, one LYRW v2 file per layer): logits bit-identical to the GGUF at every
/// position, greedy 16 identical, VERIFY passes, and the router picks the same experts.
#[test]
fn moe_bank_shape_executes_bit_identically() {
    use lql_storage::format::vindex3::{self, extract_bank};
    use std::sync::atomic::AtomicBool;
    let dir = tempfile::tempdir().unwrap();
    for (name, model, enc) in fixtures() {
        let path = write(dir.path(), name, &model, enc);
        let src = lql_storage::import::open(&path).unwrap();
        let n = src.surface.moe.as_ref().unwrap().n_experts;
        for group in [None, Some(n / 2), Some(1)] {
            let out = dir.path().join(format!("{name}.{group:?}.bank"));
            extract_bank(&src, &out, group, &mut |_| {}, &AtomicBool::new(false)).unwrap();
            let rows = vindex3::verify(&out).unwrap();
            assert!(vindex3::all_ok(&rows), "{name}: {rows:?}");
            assert_eq!(
                vindex3::detect(&out).unwrap(),
                vindex3::ContainerShape::Bank
            );
            let (a, b) = (open(&path), open(&out));
            assert_eq!(
                a.logits_all(&IDS).unwrap(),
                b.logits_all(&IDS).unwrap(),
                "{name}"
            );
            assert_eq!(greedy(&a, &IDS, 16), greedy(&b, &IDS, 16), "{name}");
        }
    }
}

/// A Python that imports numpy and gguf (gguf-py), or why there is none:
/// `LQL_BANK_READER_PYTHON`, else `~/.cache/lql-tools/venv/bin/python`, else `python3`.
fn bank_reader_python() -> Result<PathBuf, String> {
    let mut candidates = Vec::new();
    if let Some(p) = std::env::var_os("LQL_BANK_READER_PYTHON") {
        candidates.push(PathBuf::from(p));
    }
    if let Some(h) = std::env::var_os("HOME") {
        candidates.push(PathBuf::from(h).join(".cache/lql-tools/venv/bin/python"));
    }
    candidates.push(PathBuf::from("python3"));
    for c in &candidates {
        let ok = std::process::Command::new(c)
            .args(["-c", "import numpy, gguf"])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Ok(c.clone());
        }
    }
    Err(format!(
        "no Python with numpy and gguf among {candidates:?} (set LQL_BANK_READER_PYTHON)"
    ))
}

/// Every fixture in the bank shape, read by an independent Python reader written from seed
/// 002 §6 (`tests/tools/read_bank.py`, numpy only): every LYRW header, bank, segment,
/// schema and entry parses and agrees with the manifest, and every expert region and
/// spine tensor equals the GGUF's bytes as gguf-py reads them. Skips with a note without
/// such a Python, unless `LQL_REQUIRE_BANK_READER=1` (set by `.ci/run`).
#[test]
fn bank_shape_agrees_with_an_independent_reader() {
    use lql_storage::format::vindex3::extract_bank;
    use std::sync::atomic::AtomicBool;
    let py = match bank_reader_python() {
        Ok(p) => p,
        Err(why) if std::env::var_os("LQL_REQUIRE_BANK_READER").is_none() => {
            eprintln!("skipping the independent bank reader: {why}");
            return;
        }
        Err(why) => panic!("LQL_REQUIRE_BANK_READER is set: {why}"),
    };
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/tools/read_bank.py");
    let dir = tempfile::tempdir().unwrap();
    for (name, model, enc) in fixtures() {
        let path = write(dir.path(), name, &model, enc);
        let src = lql_storage::import::open(&path).unwrap();
        let out = dir.path().join(format!("{name}.bank"));
        extract_bank(&src, &out, Some(2), &mut |_| {}, &AtomicBool::new(false)).unwrap();
        let o = std::process::Command::new(&py)
            .arg(&script)
            .arg(&out)
            .arg("--gguf")
            .arg(&path)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{name}: {text}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v: Value = serde_json::from_str(text.trim()).unwrap();
        let m = src.surface.moe.as_ref().unwrap();
        let banks = src.surface.n_layers * (1 + usize::from(m.shared_ffn > 0));
        assert_eq!(v["banks"], banks, "{name}: {v}");
        let regions = src.surface.n_layers * 3 * (m.n_experts + usize::from(m.shared_ffn > 0));
        assert_eq!(v["expert_regions_equal_gguf"], regions, "{name}: {v}");
        let spine =
            src.operands.len() - src.surface.n_layers * if m.shared_ffn > 0 { 6 } else { 3 };
        assert_eq!(v["spine_tensors_equal_gguf"], spine, "{name}: {v}");
    }
}
