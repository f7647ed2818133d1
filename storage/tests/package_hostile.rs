//! Hostile layer packages: one test per MUST of seed 000's manifest rules and consumer
//! validation. Each is refused with the check's name before any fragment is mapped (the
//! loader maps only after every check passed; tensor bytes are never touched).

use std::path::{Path, PathBuf};

use lql_storage::format::gguf::synth::TinyModel;
use lql_storage::format::package::writer::{write_package, WriteOptions};
use lql_storage::format::package::{open_package, VerifyMode, MANIFEST_NAME};
use lql_storage::StorageError;
use serde_json::Value;

/// A valid 4-layer package of a tiny llama model in a fresh temp folder.
fn package(untied: bool) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("tiny.gguf");
    TinyModel {
        layers: 4,
        untied_head: untied,
        ..TinyModel::llama()
    }
    .write(&src)
    .unwrap();
    let out = dir.path().join("pkg");
    write_package(&WriteOptions {
        source: src,
        out_dir: out.clone(),
        model_id: "lql/tiny-llama:F32".into(),
        source_revision: "test-rev".into(),
        projectors: vec![],
        recorded_as: None,
    })
    .unwrap();
    (dir, out)
}

fn manifest(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join(MANIFEST_NAME)).unwrap()).unwrap()
}

fn save(dir: &Path, v: &Value) {
    std::fs::write(
        dir.join(MANIFEST_NAME),
        serde_json::to_vec_pretty(v).unwrap(),
    )
    .unwrap();
}

fn edit(dir: &Path, f: impl FnOnce(&mut Value)) {
    let mut v = manifest(dir);
    f(&mut v);
    save(dir, &v);
}

/// The check a load of `dir` is refused by.
fn refused(dir: &Path) -> (String, String) {
    match open_package(dir, None, &VerifyMode::Sha256 { cache_dir: None }) {
        Ok(_) => panic!("the package was accepted"),
        Err(StorageError::Package { check, message, .. }) => (check.to_string(), message),
        Err(other) => panic!("refused without a check name: {other}"),
    }
}

fn assert_refused(dir: &Path, check: &str) {
    let (got, msg) = refused(dir);
    assert_eq!(got, check, "{msg}");
}

#[test]
fn a_valid_package_loads_whole_and_by_range() {
    let (_t, dir) = package(false);
    let p = open_package(&dir, None, &VerifyMode::Sha256 { cache_dir: None }).unwrap();
    assert!(p.span.is_whole());
    assert_eq!(p.model.surface.n_layers, 4);
    let mid = open_package(&dir, Some((1, 2)), &VerifyMode::SizeOnly).unwrap();
    assert_eq!(
        mid.selected_paths(),
        [
            "shared/metadata.gguf",
            "layers/layer-00001.gguf",
            "layers/layer-00002.gguf"
        ]
    );
}

#[test]
fn absolute_path_is_refused() {
    let (_t, dir) = package(false);
    edit(&dir, |m| m["layers"][1]["path"] = "/etc/passwd".into());
    assert_refused(&dir, "artifact_path");
}

#[test]
fn parent_path_is_refused() {
    let (_t, dir) = package(false);
    edit(&dir, |m| {
        m["shared"]["metadata"]["path"] = "shared/../../outside.gguf".into()
    });
    assert_refused(&dir, "artifact_path");
}

#[test]
fn symlink_out_of_the_root_is_refused() {
    let (t, dir) = package(false);
    // A copy of a real fragment outside the root, linked from inside it.
    let outside = t.path().join("outside.gguf");
    std::fs::copy(dir.join("layers/layer-00002.gguf"), &outside).unwrap();
    std::fs::remove_file(dir.join("layers/layer-00002.gguf")).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("layers/layer-00002.gguf")).unwrap();
    assert_refused(&dir, "artifact_path");
    // A linked folder leading out is refused too.
    let (t2, dir2) = package(false);
    let elsewhere = t2.path().join("elsewhere");
    std::fs::rename(dir2.join("layers"), &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, dir2.join("layers")).unwrap();
    assert_refused(&dir2, "artifact_path");
}

#[test]
fn size_mismatch_is_refused() {
    let (_t, dir) = package(false);
    let f = dir.join("layers/layer-00003.gguf");
    let mut b = std::fs::read(&f).unwrap();
    b.extend_from_slice(&[0; 32]);
    std::fs::write(&f, b).unwrap();
    assert_refused(&dir, "artifact_size");
}

#[test]
fn sha_mismatch_is_refused() {
    let (_t, dir) = package(false);
    let f = dir.join("layers/layer-00000.gguf");
    let mut b = std::fs::read(&f).unwrap();
    let n = b.len();
    b[n - 40] ^= 0xff;
    std::fs::write(&f, b).unwrap();
    assert_refused(&dir, "artifact_sha256");
    // With hashing turned off explicitly, the same-size change is not detected by size.
    assert!(open_package(&dir, None, &VerifyMode::SizeOnly).is_ok());
}

#[test]
fn missing_layer_is_refused() {
    let (_t, dir) = package(false);
    edit(&dir, |m| {
        m["layers"].as_array_mut().unwrap().remove(2);
    });
    assert_refused(&dir, "missing_layer");
}

#[test]
fn duplicated_layer_is_refused() {
    let (_t, dir) = package(false);
    edit(&dir, |m| {
        let l = m["layers"][1].clone();
        m["layers"].as_array_mut().unwrap().push(l);
    });
    assert_refused(&dir, "duplicate_layer");
}

#[test]
fn layer_index_out_of_range_is_refused() {
    let (_t, dir) = package(false);
    edit(&dir, |m| m["layers"][3]["layer_index"] = 9.into());
    assert_refused(&dir, "layer_index_range");
}

#[test]
fn unknown_schema_version_is_refused() {
    let (_t, dir) = package(false);
    edit(&dir, |m| m["schema_version"] = 2.into());
    assert_refused(&dir, "schema_version");
}

#[test]
fn wrong_format_is_refused() {
    let (_t, dir) = package(false);
    edit(&dir, |m| m["format"] = "layer-package-v2".into());
    assert_refused(&dir, "format");
}

#[test]
fn incompatible_abi_is_refused() {
    let (_t, dir) = package(false);
    edit(&dir, |m| m["skippy_abi_version"] = "1.0.0".into());
    assert_refused(&dir, "abi_version");
    edit(&dir, |m| m["skippy_abi_version"] = "0.2.0".into());
    assert_refused(&dir, "abi_version");
    edit(&dir, |m| m["skippy_abi_version"] = "0.x".into());
    assert_refused(&dir, "abi_version");
    // Same major, older minor, any patch: accepted.
    edit(&dir, |m| m["skippy_abi_version"] = "0.0.999".into());
    assert!(open_package(&dir, None, &VerifyMode::SizeOnly).is_ok());
}

#[test]
fn unknown_projector_kind_is_refused() {
    let (_t, dir) = package(false);
    edit(&dir, |m| {
        let mut p = m["shared"]["metadata"].clone();
        p["kind"] = "audio-encoder".into();
        m["projectors"] = Value::Array(vec![p]);
    });
    assert_refused(&dir, "projector_kind");
    edit(&dir, |m| m["projectors"][0]["kind"] = "".into());
    assert_refused(&dir, "projector_kind");
}

#[test]
fn projector_paths_and_sizes_are_checked() {
    let (_t, dir) = package(false);
    edit(&dir, |m| {
        let mut p = m["shared"]["metadata"].clone();
        p["kind"] = "mmproj".into();
        p["path"] = "projectors/absent.gguf".into();
        m["projectors"] = Value::Array(vec![p]);
    });
    assert_refused(&dir, "artifact_file");
}

#[test]
fn empty_identity_is_refused() {
    let (_t, dir) = package(false);
    edit(&dir, |m| m["model_id"] = "  ".into());
    assert_refused(&dir, "model_id");
    edit(&dir, |m| {
        m["model_id"] = "lql/tiny".into();
        m["source_model"]["revision"] = "".into();
    });
    assert_refused(&dir, "source_identity");
    edit(&dir, |m| {
        m["source_model"]["revision"] = "r".into();
        m["source_model"]["sha256"] = "abc".into();
    });
    assert_refused(&dir, "source_sha256");
}

#[test]
fn artifact_entry_rules_are_checked() {
    let (_t, dir) = package(false);
    edit(&dir, |m| m["layers"][0]["sha256"] = "zz".into());
    assert_refused(&dir, "artifact_sha256_format");
    let (_t, dir) = package(false);
    edit(&dir, |m| m["layers"][0]["artifact_bytes"] = 0.into());
    assert_refused(&dir, "artifact_bytes");
    let (_t, dir) = package(false);
    edit(&dir, |m| m["shared"]["metadata"]["tensor_bytes"] = 5.into());
    assert_refused(&dir, "tensor_bytes");
    let (_t, dir) = package(false);
    edit(&dir, |m| m["layers"][0]["tensor_bytes"] = 0.into());
    assert_refused(&dir, "tensor_bytes");
}

#[test]
fn a_100_mb_manifest_is_refused_unread() {
    let (_t, dir) = package(false);
    let f = std::fs::File::create(dir.join(MANIFEST_NAME)).unwrap();
    // A sparse 100 MB file: refused by its size before a byte is read.
    f.set_len(100 << 20).unwrap();
    assert_refused(&dir, "manifest_size");
}

#[test]
fn a_manifest_nested_100k_deep_is_refused() {
    let (_t, dir) = package(false);
    let mut s = String::from("{\"schema_version\":1,\"x\":");
    s.push_str(&"[".repeat(100_000));
    s.push_str(&"]".repeat(100_000));
    s.push('}');
    std::fs::write(dir.join(MANIFEST_NAME), s).unwrap();
    assert_refused(&dir, "manifest_depth");
}

#[test]
fn a_missing_or_malformed_manifest_is_refused() {
    let (_t, dir) = package(false);
    std::fs::write(dir.join(MANIFEST_NAME), b"{not json").unwrap();
    assert_refused(&dir, "manifest_json");
    edit_raw(&dir, r#"{"schema_version":1,"format":"layer-package"}"#);
    assert_refused(&dir, "manifest_fields");
    std::fs::remove_file(dir.join(MANIFEST_NAME)).unwrap();
    assert_refused(&dir, "manifest_present");
}

fn edit_raw(dir: &Path, s: &str) {
    std::fs::write(dir.join(MANIFEST_NAME), s).unwrap();
}

#[test]
fn layer_range_must_be_inside_the_model() {
    let (_t, dir) = package(false);
    for (a, b) in [(2, 1), (0, 4), (4, 4)] {
        match open_package(&dir, Some((a, b)), &VerifyMode::SizeOnly) {
            Err(StorageError::Package { check, .. }) => assert_eq!(check, "layer_range"),
            other => panic!("{a}-{b}: {other:?}"),
        }
    }
}

#[test]
fn a_missing_artifact_file_is_refused() {
    let (_t, dir) = package(false);
    std::fs::remove_file(dir.join("layers/layer-00001.gguf")).unwrap();
    assert_refused(&dir, "artifact_file");
    // A stage that does not select it still loads.
    assert!(open_package(&dir, Some((2, 3)), &VerifyMode::SizeOnly).is_ok());
}

#[test]
fn untied_head_final_stage_does_not_select_embeddings() {
    let (_t, dir) = package(true);
    let last = open_package(&dir, Some((2, 3)), &VerifyMode::SizeOnly).unwrap();
    assert!(!last.selected_paths().contains(&"shared/embeddings.gguf"));
    let (_t, dir) = package(false);
    let last = open_package(&dir, Some((2, 3)), &VerifyMode::SizeOnly).unwrap();
    assert!(last.selected_paths().contains(&"shared/embeddings.gguf"));
}

#[test]
fn an_invalid_generation_map_is_refused_at_load() {
    let (_t, dir) = package(false);
    edit(
        &dir,
        |m| {
            m["generation"] =
                serde_json::json!({"speculative_decoding": {"default": "ghost", "strategies": {}}})
        },
    );
    assert_refused(&dir, "missing_speculative_default_strategy");
}

/// The writer's own target: a symbolic link is refused (never written through); a
/// failing write leaves neither the target nor a staging folder; a staging folder left by
/// a writer that died (its process gone) is removed and the write succeeds; files get
/// 0666 less the umask, not a temporary file's 0600.
#[test]
fn the_writer_publishes_whole_packages_only() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("tiny.gguf");
    TinyModel {
        layers: 2,
        ..TinyModel::llama()
    }
    .write(&src)
    .unwrap();
    let opts = |out: &Path, source: &Path| WriteOptions {
        source: source.to_path_buf(),
        out_dir: out.to_path_buf(),
        model_id: "lql/tiny-llama:F32".into(),
        source_revision: "test-rev".into(),
        projectors: vec![],
        recorded_as: None,
    };
    #[cfg(unix)]
    {
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, dir.path().join("link")).unwrap();
        let e = write_package(&opts(&dir.path().join("link"), &src)).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    }
    // A source that is not a GGUF: nothing is left behind.
    let junk = dir.path().join("junk.gguf");
    std::fs::write(&junk, b"not a gguf").unwrap();
    let out = dir.path().join("pkg");
    assert!(write_package(&opts(&out, &junk)).is_err());
    let names = |d: &Path| -> Vec<String> {
        std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    assert!(!out.exists());
    assert!(
        !names(dir.path()).iter().any(|n| n.contains("staging")),
        "{:?}",
        names(dir.path())
    );
    // A dead writer's staging folder (pid 2^22 + 1 is beyond Linux's pid_max default).
    let stale = dir.path().join(".pkg.staging-4194305");
    std::fs::create_dir_all(stale.join("layers")).unwrap();
    std::fs::write(stale.join("layers/partial.gguf"), vec![0u8; 1024]).unwrap();
    write_package(&opts(&out, &src)).unwrap();
    assert!(!stale.exists());
    assert!(open_package(&out, None, &VerifyMode::Sha256 { cache_dir: None }).is_ok());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(out.join(MANIFEST_NAME))
            .unwrap()
            .permissions()
            .mode();
        assert_ne!(mode & 0o777, 0o600, "{mode:o}");
    }
}

/// A manifest that repeats a key is refused naming it (not read as its last value).
#[test]
fn duplicate_manifest_keys_are_refused() {
    let (_t, dir) = package(false);
    let text = std::fs::read_to_string(dir.join(MANIFEST_NAME)).unwrap();
    let doubled = text.replacen("{", "{\"model_id\": \"evil/other:F32\",", 1);
    std::fs::write(dir.join(MANIFEST_NAME), doubled).unwrap();
    let (check, message) = refused(&dir);
    assert_eq!(check, "manifest_json", "{message}");
    assert!(message.contains("duplicate key \"model_id\""), "{message}");
}
