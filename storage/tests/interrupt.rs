//! Loops over counts a file declares poll the running statement's interrupt flag: with the
//! flag raised, reading a GGUF header or validating a layer package stops with
//! `Interrupted` naming what it was reading; with the flag down the same reads succeed.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use lql_storage::format::gguf::synth::TinyModel;
use lql_storage::format::gguf::GgufFile;
use lql_storage::format::package::writer::{write_package, WriteOptions};
use lql_storage::format::package::{open_package, VerifyMode};
use lql_storage::interrupt::Scope;
use lql_storage::StorageError;

#[test]
fn a_raised_flag_stops_header_and_package_reads_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("tiny.gguf");
    TinyModel::llama().write(&src).unwrap();
    let pkg = dir.path().join("pkg");
    write_package(&WriteOptions {
        source: src.clone(),
        out_dir: pkg.clone(),
        model_id: "lql/tiny:F32".into(),
        source_revision: "r".into(),
        projectors: vec![],
        recorded_as: None,
    })
    .unwrap();

    let down = Arc::new(AtomicBool::new(false));
    {
        let _s = Scope::new(&down);
        GgufFile::open(&src).unwrap();
        open_package(&pkg, None, &VerifyMode::SizeOnly).unwrap();
    }
    let raised = Arc::new(AtomicBool::new(true));
    let _s = Scope::new(&raised);
    match GgufFile::open(&src) {
        Err(StorageError::Interrupted { what }) => {
            assert!(what.contains("tiny.gguf"), "{what}")
        }
        other => panic!("expected an interruption, got {other:?}"),
    }
    match open_package(&pkg, None, &VerifyMode::SizeOnly) {
        Err(StorageError::Interrupted { what }) => {
            assert!(what.contains("model-package.json"), "{what}")
        }
        other => panic!("expected an interruption, got {other:?}"),
    }
}

#[test]
fn a_raised_flag_stops_container_reads_by_name() {
    use lql_storage::format::vindex3::{self, ExtractEncoding};
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("tiny.gguf");
    TinyModel::llama().write(&src).unwrap();
    let out = dir.path().join("tiny.vindex");
    let model = lql_storage::import::open(&src).unwrap();
    vindex3::extract(&model, &out, ExtractEncoding::Source, &mut |_| {}).unwrap();

    let down = Arc::new(AtomicBool::new(false));
    {
        let _s = Scope::new(&down);
        vindex3::open_model(&out).unwrap();
        assert!(vindex3::all_ok(&vindex3::verify(&out).unwrap()));
    }
    let raised = Arc::new(AtomicBool::new(true));
    let _s = Scope::new(&raised);
    for result in [
        vindex3::open_model(&out).map(|_| ()),
        vindex3::verify(&out).map(|_| ()),
        vindex3::show_tensors(&out).map(|_| ()),
    ] {
        match result {
            Err(StorageError::Interrupted { what }) => assert!(!what.is_empty()),
            other => panic!("expected an interruption, got {other:?}"),
        }
    }
}
