//! Times DIFF and COMPILE INTO VINDEX on SmolLM2 in process (docs/persist.md has the figures):
//! DIFF of the GGUF against its SOURCE container and against a Q8_0 container (every tensor
//! decoded on both sides), and COMPILE CURRENT INTO VINDEX against `cp` + `sha256sum` of the
//! model. `cargo run --release -p lql-tests --example persist_bench`.

use std::process::Command;
use std::time::Instant;

use lql::Connection;

fn main() {
    let m = lql_tests::default_model_path();
    let t = tempfile::tempdir().unwrap();
    let ms = m.display().to_string();
    let c = Connection::open_in_memory().unwrap();
    let v = t.path().join("v").display().to_string();
    let q8 = t.path().join("q8").display().to_string();
    c.execute(&format!("EXTRACT MODEL \"{ms}\" INTO \"{v}\""))
        .unwrap();
    c.execute(&format!(
        "EXTRACT MODEL \"{ms}\" INTO \"{q8}\" ENCODING Q8_0"
    ))
    .unwrap();
    for (what, other) in [("SOURCE container", &v), ("Q8_0 container", &q8)] {
        for _ in 0..3 {
            let t0 = Instant::now();
            let r = c.execute(&format!("DIFF \"{ms}\" \"{other}\"")).unwrap();
            println!(
                "DIFF GGUF vs {what}: {:.3} s ({} rows)",
                t0.elapsed().as_secs_f64(),
                r.rows.len()
            );
        }
    }
    c.bind(&ms).unwrap();
    for i in 0..3 {
        let copy = t.path().join(format!("copy{i}.gguf"));
        let t0 = Instant::now();
        std::fs::copy(&m, &copy).unwrap();
        let ok = Command::new("sha256sum").arg(&copy).output().unwrap();
        assert!(ok.status.success());
        let base = t0.elapsed().as_secs_f64();
        let out = t.path().join(format!("out{i}")).display().to_string();
        let t0 = Instant::now();
        c.execute(&format!("COMPILE CURRENT INTO VINDEX \"{out}\""))
            .unwrap();
        let compile = t0.elapsed().as_secs_f64();
        println!(
            "cp + sha256sum {base:.3} s; COMPILE INTO VINDEX {compile:.3} s ({:.2}×)",
            compile / base
        );
    }
}
