//! Fuzz target: a layer package's `model-package.json` (seed 000), with real fragments
//! beside it. Property: opening the package (whole, and by a layer range) and VERIFY give a
//! typed result for any edit of the manifest: never a panic, an abort, a hang, an
//! allocation sized by a hostile number, or a read outside the package folder. Seeds:
//! `fuzz_corpus/package_manifest/`. See `fuzz_support` for the budget (`LQL_FUZZ_SECS`).

mod fuzz_support;

use lql_storage::format::gguf::synth::TinyModel;
use lql_storage::format::package::writer::{write_package, WriteOptions};
use lql_storage::format::package::{against, open_package, VerifyMode, MANIFEST_NAME};

#[test]
fn fuzz_package_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("tiny.gguf");
    TinyModel {
        layers: 2,
        ..TinyModel::llama()
    }
    .write(&src)
    .unwrap();
    let pkg = dir.path().join("pkg");
    write_package(&WriteOptions {
        source: src,
        out_dir: pkg.clone(),
        model_id: "lql/tiny-llama:F32".into(),
        source_revision: "fuzz-rev".into(),
        projectors: vec![],
        recorded_as: None,
    })
    .unwrap();
    fuzz_support::maybe_write_corpus("package_manifest", || {
        vec![(
            "model-package.json".into(),
            std::fs::read(pkg.join(MANIFEST_NAME)).unwrap(),
        )]
    });
    let seeds = fuzz_support::load_corpus("package_manifest");
    // The committed seed names the fragments the writer makes today: it must still load.
    std::fs::write(pkg.join(MANIFEST_NAME), &seeds[0]).unwrap();
    open_package(&pkg, None, &VerifyMode::Sha256 { cache_dir: None }).expect("the seed loads");
    // A file outside the package that no edit may reach.
    std::fs::write(dir.path().join("outside.bin"), b"OUTSIDE").unwrap();
    let modes = [
        VerifyMode::Sha256 { cache_dir: None },
        VerifyMode::default_local(),
    ];
    fuzz_support::fuzz(
        "package_manifest",
        300,
        fuzz_support::mutated_json(seeds),
        move |m| {
            std::fs::write(pkg.join(MANIFEST_NAME), &m).unwrap();
            for mode in &modes {
                if let Ok(p) = open_package(&pkg, None, mode) {
                    for s in p.selected_paths() {
                        assert!(!s.contains(".."), "selected a path outside: {s}");
                    }
                }
                let _ = open_package(&pkg, Some((1, 1)), mode);
                let _ = open_package(&pkg, Some((0, u64::MAX)), mode);
            }
            if let Ok(rows) = against::verify(&pkg, None) {
                for r in rows {
                    assert!(!format!("{r:?}").contains("OUTSIDE"), "{r:?}");
                }
            }
        },
    );
}
