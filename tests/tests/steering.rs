//! Steering on SmolLM2: a llama.cpp control vector (written by the gguf package, as
//! llama.cpp's tools write them) gives the same greedy 32 tokens as llama.cpp applying the
//! same file and scale (llama-cpp-python's `llama_set_adapter_cvec`) on 10 prompts, on the
//! model's exact F32 dequantisation (on Q4_1 llama.cpp quantises activations to 8 bits, so
//! near-ties part the two); removing it restores every logit bit for bit; two connections
//! of one database steer differently at once; WITH STEERING holds for one statement; TRACE
//! sees it; activation addition round-trips through SAVE STEERING; bad vectors get a clear
//! error.
//!
//! The llama.cpp half needs a Python with `llama_cpp`, `gguf` and `numpy`
//! (`LQL_LLAMACPP_PYTHON`); without one the test says why and skips, unless
//! `LQL_REQUIRE_LLAMACPP=1` (set by `.ci/run`) or `CI=true` makes that a failure.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use lql::{Connection, Database};
use lql_exec::steer::Steering;
use lql_exec::{Executor, LogitsWanted};
use lql_storage::format::control_vector::ControlVector;
use lql_storage::format::gguf::{GgufFile, GgufWriter};
use lql_storage::model::OperandSource;
use lql_tests::{default_model_path, repo_root};

const PROMPTS: [&str; 10] = [
    "The weather today is",
    "My favourite food is",
    "Once upon a time, there was",
    "The best way to learn a language is",
    "I think that the government should",
    "Here is a recipe for",
    "The meaning of life is",
    "When I woke up this morning,",
    "The city of Paris is known for",
    "Dear friend, I am writing to tell you",
];
const SCALE: f32 = 0.5;

/// Cargo's per-target scratch folder: one fixed place that each run overwrites, so the
/// half-gigabyte F32 model does not pile up in the system's temp folder run after run.
fn work_dir() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("steering");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn q(p: &Path) -> String {
    lql::quote(&p.display().to_string())
}

/// SmolLM2 with every tensor decoded to F32 (exact: the decode is the codec's), once per
/// test process.
fn f32_model() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let src = GgufFile::open(&default_model_path()).unwrap();
        let mut w = GgufWriter::new();
        for kv in src.metadata() {
            let v = if kv.key == "general.file_type" {
                lql_storage::format::gguf::MetaValue::U32(0)
            } else {
                kv.value.clone()
            };
            w.add_kv(kv.key.clone(), v).unwrap();
        }
        for t in src.tensors() {
            let v = src.view(t);
            let mut out = vec![0.0f32; t.elems()];
            lql_exec::backend::encoded::decode_rows(v.dtype, v.bytes, t.shape[0], &mut out)
                .unwrap();
            w.add_f32_tensor(&t.name, &t.shape, &out).unwrap();
        }
        let p = work_dir().join("smollm2-f32.gguf");
        w.write(&p).unwrap();
        p
    })
}

/// A Python that imports `llama_cpp`, `gguf` and `numpy`, or why there is none.
fn python() -> Result<PathBuf, String> {
    lql_tests::python_with("llama_cpp, gguf, numpy")
}

fn require_peer() -> bool {
    std::env::var("LQL_REQUIRE_LLAMACPP").is_ok_and(|v| v == "1")
        || std::env::var("CI").is_ok_and(|v| v == "true")
}

fn tool(py: &Path, args: &[&str]) {
    let o = Command::new(py)
        .arg(repo_root().join("tests/tools/llamacpp_steer.py"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "llamacpp_steer.py {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A control vector written by the gguf package: seeded Gaussian directions for layers
/// 1-29 of a 576-wide model.
fn make_vector(py: &Path, name: &str, width: usize, hint: &str) -> PathBuf {
    let p = work_dir().join(name);
    tool(
        py,
        &[
            "make",
            p.to_str().unwrap(),
            &width.to_string(),
            "30",
            "7",
            hint,
        ],
    );
    p
}

fn ids_of(conn: &Connection, text: &str) -> Vec<u32> {
    conn.execute(&format!("TOKENIZE {}", lql::quote(text)))
        .unwrap()
        .iter()
        .map(|r| r.get::<_, i64>("token_id").unwrap() as u32)
        .collect()
}

fn generate(conn: &Connection, text: &str, prefix: &str) -> Vec<u32> {
    let rows = conn
        .execute(&format!("{prefix}GENERATE {} MAX 32", lql::quote(text)))
        .unwrap();
    let ids: Vec<i64> = rows.iter().next().unwrap().get("token_ids").unwrap();
    ids.into_iter().map(|i| i as u32).collect()
}

#[test]
fn control_vector_gives_llama_cpps_greedy_tokens() {
    let py = match python() {
        Ok(p) => p,
        Err(why) if !require_peer() => {
            eprintln!("skipped: {why}");
            return;
        }
        Err(why) => panic!("{why}"),
    };
    let model = f32_model();
    let cv = make_vector(&py, "random.gguf", 576, "llama");
    let conn = Connection::open(model.to_str().unwrap()).unwrap();
    let ids: Vec<Vec<u32>> = PROMPTS.iter().map(|p| ids_of(&conn, p)).collect();
    let plain: Vec<Vec<u32>> = PROMPTS.iter().map(|p| generate(&conn, p, "")).collect();
    conn.execute(&format!("SET STEERING = {} SCALE {SCALE}", q(&cv)))
        .unwrap();
    let ours: Vec<Vec<u32>> = PROMPTS.iter().map(|p| generate(&conn, p, "")).collect();
    let out = work_dir().join("llamacpp.json");
    tool(
        &py,
        &[
            "decode",
            model.to_str().unwrap(),
            cv.to_str().unwrap(),
            &SCALE.to_string(),
            "32",
            out.to_str().unwrap(),
            &serde_json::to_string(&ids).unwrap(),
        ],
    );
    let peer: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let theirs: Vec<Vec<u32>> = serde_json::from_value(peer["tokens"].clone()).unwrap();
    let mut same = 0;
    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        if a == b {
            same += 1;
        } else {
            eprintln!("prompt {i} {:?}:\n  lql   {a:?}\n  llama {b:?}", PROMPTS[i]);
        }
    }
    let changed = ours.iter().zip(&plain).filter(|(a, b)| a != b).count();
    eprintln!(
        "steered greedy 32 tokens equal to llama.cpp's on {same}/10 prompts; the vector changed {changed}/10"
    );
    assert_eq!(same, 10);
    assert!(changed >= 8, "the vector should change most continuations");
}

#[test]
fn removing_steering_restores_every_logit_bit_for_bit() {
    let model = Arc::new(lql_storage::import::open(&default_model_path()).unwrap());
    let src: Arc<dyn OperandSource> = model.clone();
    let exec = Executor::new(src, 0).unwrap();
    let ids = [504u32, 3947, 1834, 314];
    let base = exec.observe_logits(&ids).unwrap();
    let surface = exec.plan().surface.clone();
    let mut s = Steering::empty(&surface, "test", 1.0);
    let v: Vec<f32> = (0..surface.hidden)
        .map(|i| ((i % 7) as f32 - 3.0) * 0.3)
        .collect();
    s.add(5, &v, 1.0).unwrap();
    let steered = exec.clone().with_steering(Some(Arc::new(s))).unwrap();
    let on = steered.observe_logits(&ids).unwrap();
    assert_ne!(on, base);
    let off = steered
        .with_steering(None)
        .unwrap()
        .observe_logits(&ids)
        .unwrap();
    assert!(
        off.iter()
            .zip(&base)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "logits differ after the steering is removed"
    );
    // Through the connection: SET STEERING = OFF gives the unsteered rows exactly.
    let conn = lql_tests::connect_default();
    let q = "INFER \"The weather today is\" TOP 20";
    let before = conn.execute(q).unwrap();
    conn.execute(
        "SET STEERING = (\"I love this, wonderful\") MINUS (\"I hate this, awful\") AT LAYER 8 SCALE 6",
    )
    .unwrap();
    assert_ne!(conn.execute(q).unwrap(), before);
    conn.execute("SET STEERING = OFF").unwrap();
    assert_eq!(conn.execute(q).unwrap(), before);
    assert_eq!(conn.execute("SHOW STEERING").unwrap().len(), 0);
}

trait LastLogits {
    fn observe_logits(&self, ids: &[u32]) -> lql_exec::Result<Vec<f32>>;
}

impl LastLogits for Executor {
    fn observe_logits(&self, ids: &[u32]) -> lql_exec::Result<Vec<f32>> {
        struct Nothing;
        impl lql_exec::Observer for Nothing {}
        let mut l = self.observe(ids, LogitsWanted::Last, &mut Nothing)?;
        Ok(l.pop().unwrap().values)
    }
}

#[test]
fn connections_steer_differently_at_once_and_with_steering_is_one_statement() {
    let db = Database::open(default_model_path().to_str().unwrap()).unwrap();
    let spec = "(\"I love this, wonderful\") MINUS (\"I hate this, awful\") AT LAYER 8 SCALE 6";
    let prompt = "The movie was";
    let solo = db.connect().unwrap();
    let plain = generate(&solo, prompt, "");
    let steered = generate(&solo, prompt, &format!("WITH STEERING {spec} "));
    assert_ne!(plain, steered);
    // WITH STEERING held for its statement only.
    assert_eq!(generate(&solo, prompt, ""), plain);
    let shown = solo
        .execute(&format!("WITH STEERING {spec} SHOW STEERING"))
        .unwrap();
    assert_eq!(shown.len(), 1);
    assert_eq!(
        shown.iter().next().unwrap().get::<_, i64>("layer").unwrap(),
        8
    );

    let handles: Vec<_> = (0..2)
        .map(|t| {
            let db = db.clone();
            let (plain, steered) = (plain.clone(), steered.clone());
            std::thread::spawn(move || {
                let conn = db.connect().unwrap();
                if t == 0 {
                    conn.execute(&format!("SET STEERING = {spec}")).unwrap();
                }
                for _ in 0..3 {
                    let got = generate(&conn, prompt, "");
                    assert_eq!(&got, if t == 0 { &steered } else { &plain }, "thread {t}");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn activation_addition_round_trips_through_a_control_vector_file() {
    let conn = lql_tests::connect_default();
    let prompt = "The movie was";
    conn.execute(
        "SET STEERING = (\"I love this, wonderful\") MINUS (\"I hate this, awful\") LAYERS 6-8 SCALE 4",
    )
    .unwrap();
    let direct = generate(&conn, prompt, "");
    let file = work_dir().join("love.gguf");
    let saved = conn
        .execute(&format!("SAVE STEERING {}", q(&file)))
        .unwrap();
    assert_eq!(
        saved
            .iter()
            .next()
            .unwrap()
            .get::<_, i64>("layers")
            .unwrap(),
        3
    );
    let cv = ControlVector::read(&file).unwrap();
    assert_eq!(cv.directions.keys().copied().collect::<Vec<_>>(), [6, 7, 8]);
    assert_eq!(cv.model_hint.as_deref(), Some("llama"));
    conn.execute("SET STEERING = OFF").unwrap();
    // The file holds what was added (scale included): SCALE 1 steers the same, exactly.
    conn.execute(&format!("SET STEERING = {}", q(&file)))
        .unwrap();
    assert_eq!(generate(&conn, prompt, ""), direct);
    // A layer filter keeps the file's layers inside it.
    let rows = conn
        .execute(&format!("SET STEERING = {} LAYERS 7-20", q(&file)))
        .unwrap();
    let layers: Vec<i64> = rows.iter().map(|r| r.get("layer").unwrap()).collect();
    assert_eq!(layers, [7, 8]);
}

#[test]
fn trace_sees_the_steering_from_its_layer_on() {
    let conn = lql_tests::connect_default();
    let q = "TRACE \"The weather today is\" LAYERS 4-6";
    let plain = conn.execute(q).unwrap();
    let steered = conn
        .execute(&format!(
            "WITH STEERING (\"sunny and warm\") MINUS (\"cold and rainy\") AT LAYER 5 SCALE 8 {q}"
        ))
        .unwrap();
    let lens = |rows: &lql::Rows, layer: i64| -> f64 {
        rows.iter()
            .find(|r| r.get::<_, Option<i64>>("layer").unwrap() == Some(layer))
            .unwrap()
            .get("top_prob")
            .unwrap()
    };
    assert_eq!(
        lens(&plain, 4),
        lens(&steered, 4),
        "layer 4 runs before the steering"
    );
    assert_ne!(
        lens(&plain, 5),
        lens(&steered, 5),
        "layer 5's output has the vector added"
    );
}

#[test]
fn bad_vectors_get_a_clear_error() {
    let conn = lql_tests::connect_default();
    let err = |sql: &str| conn.execute(sql).unwrap_err().to_string();
    let dir = work_dir();
    let write = |name: &str, hint: &str, layers: &[(usize, Vec<f32>)]| -> PathBuf {
        let cv = ControlVector {
            model_hint: Some(hint.into()),
            directions: layers.iter().cloned().collect(),
            width: layers[0].1.len(),
        };
        let p = dir.join(name);
        cv.write(&p).unwrap();
        p
    };
    let p = write("narrow.gguf", "llama", &[(3, vec![1.0; 100])]);
    let e = err(&format!("SET STEERING = {}", q(&p)));
    assert!(e.contains("100 values") && e.contains("576 wide"), "{e}");
    let p = write("gemma.gguf", "gemma2", &[(3, vec![1.0; 576])]);
    let e = err(&format!("SET STEERING = {}", q(&p)));
    assert!(e.contains("made for \"gemma2\""), "{e}");
    let p = write("deep.gguf", "llama", &[(40, vec![1.0; 576])]);
    let e = err(&format!("SET STEERING = {}", q(&p)));
    assert!(e.contains("layer 40"), "{e}");
    // A NaN, written past the writer's checks.
    let mut w = GgufWriter::new();
    w.add_kv(
        "general.architecture",
        lql_storage::format::gguf::MetaValue::Str("controlvector".into()),
    )
    .unwrap();
    let mut v = vec![0.5f32; 576];
    v[17] = f32::NAN;
    w.add_f32_tensor("direction.2", &[576], &v).unwrap();
    let p = dir.join("nan.gguf");
    w.write(&p).unwrap();
    let e = err(&format!("SET STEERING = {}", q(&p)));
    assert!(e.contains("value 17 is NaN"), "{e}");
    let e = err(&format!("SET STEERING = {}", q(&dir.join("missing.gguf"))));
    assert!(e.contains("missing.gguf"), "{e}");
    let e = err("SET STEERING = (\"a\") MINUS (\"b\")");
    assert!(e.contains("needs the layer"), "{e}");
    let e = err("SET STEERING = (\"a\") MINUS (\"b\") AT LAYER 30");
    assert!(e.contains("out of range"), "{e}");
    let e = err("SAVE STEERING \"x.gguf\"");
    assert!(e.contains("no steering to save"), "{e}");
    // The model file itself is not a control vector.
    let e = err(&format!("SET STEERING = {}", q(&default_model_path())));
    assert!(e.contains("not a control vector"), "{e}");
}
