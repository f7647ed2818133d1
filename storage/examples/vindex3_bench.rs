//! VINDEX3 benchmark: EXTRACT SOURCE against `cp` + `sha256sum` of the source file, and the
//! time to open the container (USE) and to VERIFY it.
//!
//! `cargo run --release -p lql-storage --example vindex3_bench [model.gguf]`; the model
//! defaults to `LQL_TEST_MODEL` or the catalogue's SmolLM2. Medians of 5 runs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use lql_storage::format::vindex3::{extract, open_model, verify, ExtractEncoding};
use lql_storage::import;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn sh(cmd: &str) {
    let st = Command::new("sh").args(["-c", cmd]).status().expect("sh");
    assert!(st.success(), "{cmd}");
}

fn main() {
    let src = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("LQL_TEST_MODEL").map(PathBuf::from))
        .unwrap_or_else(|| {
            lql_storage::catalogue::resolve("smollm2-135m-instruct", &mut |_| {})
                .expect("resolve smollm2-135m-instruct")
        });
    let bytes = std::fs::metadata(&src).expect("model").len();
    let t = tempfile::tempdir_in(std::env::temp_dir()).expect("tempdir");
    let runs = 5;
    let q = |p: &Path| format!("'{}'", p.display());

    let (mut base, mut base_sync, mut ext, mut ext_only) = (vec![], vec![], vec![], vec![]);
    for i in 0..runs {
        let copy = t.path().join(format!("copy{i}.gguf"));
        let s = Instant::now();
        sh(&format!(
            "cp {} {} && sha256sum {} > /dev/null",
            q(&src),
            q(&copy),
            q(&copy)
        ));
        base.push(s.elapsed());
        std::fs::remove_file(&copy).unwrap();
        let s = Instant::now();
        sh(&format!(
            "cp {} {} && sync {} && sha256sum {} > /dev/null",
            q(&src),
            q(&copy),
            q(&copy),
            q(&copy)
        ));
        base_sync.push(s.elapsed());
        std::fs::remove_file(&copy).unwrap();

        let out = t.path().join(format!("c{i}"));
        let s = Instant::now();
        let model = import::open(&src).expect("open source");
        let s2 = Instant::now();
        extract(&model, &out, ExtractEncoding::Source, &mut |_| {}).expect("extract");
        ext_only.push(s2.elapsed());
        ext.push(s.elapsed());
        if i > 0 {
            std::fs::remove_dir_all(&out).unwrap();
        }
    }
    let container = t.path().join("c0");
    let mut opens = vec![];
    for _ in 0..20 {
        let s = Instant::now();
        let m = open_model(&container).expect("open container");
        opens.push(s.elapsed());
        drop(m);
    }
    let mut with_tok = vec![];
    for _ in 0..10 {
        let s = Instant::now();
        let m = open_model(&container).expect("open container");
        m.tokenizer_spec().expect("tokenizer");
        with_tok.push(s.elapsed());
    }
    let mut gguf_tok = vec![];
    for _ in 0..10 {
        let s = Instant::now();
        let m = import::open(&src).expect("open source");
        m.tokenizer_spec().expect("tokenizer");
        gguf_tok.push(s.elapsed());
    }
    let mut verifies = vec![];
    for _ in 0..3 {
        let s = Instant::now();
        let rows = verify(&container).expect("verify");
        verifies.push(s.elapsed());
        assert!(lql_storage::format::vindex3::all_ok(&rows));
    }
    let (b, bs, e, eo) = (
        median(base),
        median(base_sync),
        median(ext),
        median(ext_only),
    );
    println!("source: {} ({bytes} bytes)", src.display());
    println!("cp + sha256sum                     {}", ms(b));
    println!("cp + sync + sha256sum              {}", ms(bs));
    println!(
        "EXTRACT SOURCE (open + write)      {}  = {:.2}x cp+sha256sum, {:.2}x with sync",
        ms(e),
        e.as_secs_f64() / b.as_secs_f64(),
        e.as_secs_f64() / bs.as_secs_f64()
    );
    println!("  of which extract()               {}", ms(eo));
    println!("open_model (USE), median of 20     {}", ms(median(opens)));
    println!(
        "open_model + tokenizer spec        {}",
        ms(median(with_tok))
    );
    println!(
        "  (GGUF open + tokenizer spec      {})",
        ms(median(gguf_tok))
    );
    println!(
        "VERIFY, median of 3                {}",
        ms(median(verifies))
    );
}
