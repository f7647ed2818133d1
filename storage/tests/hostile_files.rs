//! Regression tests for hostile files, paths and signals (issue 20): each test failed (or
//! aborted, hung or leaked) on the code before the fix it names.

mod vindex3_support;

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use lql_storage::format::gguf::synth::TinyModel;
use lql_storage::format::vindex3::{self, extract, open_model, verify, ExtractEncoding};
use lql_storage::{mapped, Model, StorageError};
use serde_json::{json, Value};
use vindex3_support::{synthetic, SMALL};

fn err<T: std::fmt::Debug>(r: Result<T, StorageError>) -> String {
    r.expect_err("must be refused").to_string()
}

/// Run `f` on another thread and fail (rather than hang the suite) if it does not return.
fn no_hang<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what}: hung"))
}

fn mkfifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

fn tiny_gguf(dir: &Path) -> PathBuf {
    let p = dir.join("tiny.gguf");
    TinyModel::llama().write(&p).unwrap();
    p
}

fn container(dir: &Path) -> PathBuf {
    let out = dir.join("c.vindex");
    extract(
        &synthetic(SMALL),
        &out,
        ExtractEncoding::Source,
        &mut |_| {},
    )
    .unwrap();
    out
}

fn edit_json(p: &Path, f: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(p, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

/// A Hugging Face folder with a config and one safetensors file of `tensors`.
fn hf_folder(dir: &Path, layers: u64, tensors: &[(&str, Vec<usize>)]) -> PathBuf {
    let d = dir.join("hf");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("config.json"),
        serde_json::to_vec(&json!({
            "architectures": ["LlamaForCausalLM"],
            "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": layers,
            "num_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": 4,
            "rms_norm_eps": 1e-5, "max_position_embeddings": 64
        }))
        .unwrap(),
    )
    .unwrap();
    write_safetensors(&d.join("model.safetensors"), tensors);
    d
}

fn write_safetensors(path: &Path, tensors: &[(&str, Vec<usize>)]) {
    let data: Vec<(String, Vec<u8>, Vec<usize>)> = tensors
        .iter()
        .map(|(n, s)| {
            (
                n.to_string(),
                vec![0u8; s.iter().product::<usize>() * 4],
                s.clone(),
            )
        })
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = data
        .iter()
        .map(|(n, b, s)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b)
                    .unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

// ---- item 1: layer counts --------------------------------------------------------------

#[test]
fn gguf_block_count_beyond_the_tensor_table_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("huge.gguf");
    let mut w = TinyModel::llama().writer().unwrap();
    w.set_kv("llama.block_count", 1_000_000_000u32).unwrap();
    w.write(&p).unwrap();
    let e = no_hang("open", move || err(Model::open(&p)));
    assert!(e.contains("llama.block_count"), "{e}");
    assert!(e.contains("1000000000 layers"), "{e}");
    assert!(e.contains("holds only"), "{e}");
    assert!(e.contains("huge.gguf"), "{e}");
}

#[test]
fn hf_num_hidden_layers_beyond_the_tensor_table_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let d = hf_folder(
        t.path(),
        1_000_000_000,
        &[
            ("model.embed_tokens.weight", vec![4, 8]),
            ("model.norm.weight", vec![8]),
        ],
    );
    let e = no_hang("open", move || err(Model::open(&d)));
    assert!(e.contains("num_hidden_layers"), "{e}");
    assert!(e.contains("config.json"), "{e}");
}

#[test]
fn vindex3_num_layers_beyond_the_operand_table_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let c = container(t.path());
    edit_json(&c.join("system_graph.json"), |g| {
        let comp = &mut g["components"][0];
        comp["num_layers"] = json!(1_000_000_000u32);
        comp["execution_surface"]["n_layers"] = json!(1_000_000_000u32);
    });
    let e = no_hang("open", move || err(open_model(&c)));
    assert!(e.contains("n_layers"), "{e}");
    assert!(e.contains("system_graph.json"), "{e}");
}

// ---- item 2: writers --------------------------------------------------------------------

#[test]
fn gguf_writer_never_follows_planted_links_nor_replaces_non_files() {
    let t = tempfile::tempdir().unwrap();
    let victim = t.path().join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    let out = t.path().join("m.gguf");
    // The old temporary name: `.<name>.tmp-<pid>`.
    std::os::unix::fs::symlink(
        &victim,
        t.path().join(format!(".m.gguf.tmp-{}", std::process::id())),
    )
    .unwrap();
    TinyModel::llama().write(&out).unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    assert!(Model::open(&out).is_ok());
    let link = t.path().join("l.gguf");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let e = err(TinyModel::llama().write(&link));
    assert!(e.contains("symbolic link"), "{e}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    let e = err(TinyModel::llama().write(Path::new("/dev/null")));
    assert!(e.contains("character device"), "{e}");
    assert!(TinyModel::llama().write(t.path()).is_err());
}

// ---- item 3: symlinks out of a container or folder ----------------------------------------

#[test]
fn vindex3_segment_symlinked_outside_is_refused_and_never_read() {
    let t = tempfile::tempdir().unwrap();
    let c = container(t.path());
    let seg = c.join("segments/text.embedding.bin");
    let outside = t.path().join("secret.bin");
    // Bytes that would parse as a header length if they were read.
    std::fs::write(&outside, b"\x2a\x00\x00\x00\x00\x00\x00\x00TOPSECRET").unwrap();
    std::fs::remove_file(&seg).unwrap();
    std::os::unix::fs::symlink(&outside, &seg).unwrap();
    let e = err(open_model(&c));
    assert!(e.contains("outside"), "{e}");
    assert!(e.contains("segments/text.embedding.bin"), "{e}");
    let rows = verify(&c).unwrap();
    let row = rows
        .iter()
        .find(|r| r.representation.starts_with("text.embedding"))
        .unwrap();
    assert_eq!(row.status, vindex3::VerifyStatus::Failed);
    assert!(row.actual.is_empty(), "hashed an outside file: {row:?}");
    for leak in ["header length", "TOPSECRET", "17 bytes"] {
        assert!(!row.detail.contains(leak), "{leak}: {}", row.detail);
    }
    // A symlink that stays inside the container is fine.
    let inside = c.join("segments/moved.bin");
    std::fs::remove_file(&seg).unwrap();
    let good = t.path().join("good");
    extract(
        &synthetic(SMALL),
        &good,
        ExtractEncoding::Source,
        &mut |_| {},
    )
    .unwrap();
    std::fs::copy(good.join("segments/text.embedding.bin"), &inside).unwrap();
    std::os::unix::fs::symlink("moved.bin", &seg).unwrap();
    assert!(open_model(&c).is_ok());
}

#[test]
fn hf_weight_file_symlinked_outside_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let d = hf_folder(t.path(), 1, &[("model.norm.weight", vec![8])]);
    let outside = t.path().join("outside.safetensors");
    std::fs::rename(d.join("model.safetensors"), &outside).unwrap();
    std::os::unix::fs::symlink(&outside, d.join("model.safetensors")).unwrap();
    let e = err(lql_storage::format::safetensors::HfFolder::open(&d));
    assert!(e.contains("outside"), "{e}");
    // Through the shard index too.
    std::fs::write(
        d.join("model.safetensors.index.json"),
        br#"{"weight_map": {"model.norm.weight": "model.safetensors"}}"#,
    )
    .unwrap();
    let e = err(lql_storage::format::safetensors::HfFolder::open(&d));
    assert!(e.contains("outside"), "{e}");
}

// ---- item 4: mapped files that change ----------------------------------------------------

#[test]
fn a_changed_model_file_is_refused_by_name() {
    let t = tempfile::tempdir().unwrap();
    let p = tiny_gguf(t.path());
    let m = Model::open(&p).unwrap();
    m.check_unchanged().unwrap();
    // Rewritten in place (what `cp new.gguf tiny.gguf` does).
    let bytes = std::fs::read(&p).unwrap();
    std::fs::write(&p, &bytes[..bytes.len() / 2]).unwrap();
    let e = err(m.check_unchanged());
    assert!(e.contains("model file changed since USE: re-bind"), "{e}");
    assert!(e.contains("tiny.gguf"), "{e}");
    // Containers: every mapped segment is watched.
    let c = container(t.path());
    let m = open_model(&c).unwrap();
    m.check_unchanged().unwrap();
    let seg = c.join("segments/text.final_norm.bin");
    let b = std::fs::read(&seg).unwrap();
    std::fs::write(&seg, &b).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_modified(std::time::SystemTime::now() + Duration::from_secs(10))
        .unwrap();
    let e = err(m.check_unchanged());
    assert!(e.contains("text.final_norm.bin"), "{e}");
}

/// The child half of the SIGBUS test: map a file, truncate it, touch the vanished page.
#[test]
fn sigbus_child() {
    let Some(path) = std::env::var_os("LQL_SIGBUS_CHILD") else {
        return;
    };
    let path = PathBuf::from(path);
    mapped::install_sigbus_reporter();
    let map = mapped::map_file(&path, "model file").unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(0)
        .unwrap();
    let x = unsafe { std::ptr::read_volatile(map.as_ptr().add(8192)) };
    println!("read {x} without a fault");
}

#[test]
fn sigbus_on_a_truncated_mapped_file_is_reported_by_name() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("victim-model.gguf");
    std::fs::write(&p, vec![7u8; 1 << 16]).unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "sigbus_child", "--nocapture", "--test-threads=1"])
        .env("LQL_SIGBUS_CHILD", &p)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), None, "died on a bare signal: {stderr}");
    assert_eq!(
        out.status.code(),
        Some(mapped::SIGBUS_EXIT_CODE),
        "{stderr}"
    );
    assert!(stderr.contains("victim-model.gguf"), "{stderr}");
    assert!(stderr.contains("changed while in use"), "{stderr}");
}

// ---- item 6: the model cache --------------------------------------------------------------

/// A cached copy corrupted in place with its mtime restored was trusted through the
/// `.sha256` side file; the first use in a process now hashes it.
#[test]
fn cache_side_file_is_not_trusted() {
    let src = match std::env::var_os("LQL_TEST_MODEL") {
        Some(p) => PathBuf::from(p),
        None => lql_storage::catalogue::resolve("smollm2-135m-instruct", &mut |_| {}).unwrap(),
    };
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("smollm2-135m-instruct.gguf");
    std::fs::copy(&src, &path).unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    let mtime = meta.modified().unwrap();
    let nanos = mtime
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let entry = lql_storage::catalogue::find("smollm2-135m-instruct")
        .unwrap()
        .unwrap();
    // A side file in the format the old cache trusted: "size mtime_ns sha256".
    std::fs::write(
        t.path().join("smollm2-135m-instruct.gguf.sha256"),
        format!("{} {nanos} {}\n", meta.len(), entry.sha256),
    )
    .unwrap();
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.seek(SeekFrom::Start(1_000_000)).unwrap();
        f.write_all(b"\xffCORRUPT").unwrap();
        f.set_modified(mtime).unwrap();
    }
    assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), mtime);
    let mut opts = lql_storage::catalogue::CatalogueOptions::in_dir(t.path());
    opts.python = "/nonexistent/python3".into();
    let e = err(lql_storage::catalogue::resolve_with(
        &opts,
        "smollm2-135m-instruct",
        &mut |_| {},
    ));
    assert!(e.contains("not intact"), "{e}");
}

// ---- item 7: quadratic work ----------------------------------------------------------------

#[test]
fn safetensors_header_with_100k_tensors_opens() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("many");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("config.json"), b"{}").unwrap();
    let names: Vec<String> = (0..100_000).map(|i| format!("t{i}")).collect();
    let tensors: Vec<(&str, Vec<usize>)> = names.iter().map(|n| (n.as_str(), vec![1])).collect();
    write_safetensors(&d.join("model.safetensors"), &tensors);
    let f = lql_storage::format::safetensors::HfFolder::open(&d).unwrap();
    assert_eq!(f.tensors.len(), 100_000);
}

#[test]
fn lyrw_with_65535_banks_and_segments_parses() {
    use lql_storage::format::vindex3::lyrw::{parse, LYRW_MAGIC};
    let n = u16::MAX;
    let mut b = Vec::new();
    b.extend_from_slice(&LYRW_MAGIC.to_le_bytes());
    b.extend_from_slice(&2u32.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&n.to_le_bytes());
    b.extend_from_slice(&n.to_le_bytes());
    b.extend_from_slice(&[0u8; 8]);
    for id in 0..n {
        for v in [id, 0, 0, 0] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&[0u8; 16]);
    }
    for id in (0..n).rev() {
        b.extend_from_slice(&id.to_le_bytes());
        b.extend_from_slice(&[0u8; 10]);
    }
    let f = parse(Path::new("big.lyrw"), &b).unwrap();
    assert_eq!(f.banks.len(), n as usize);
    assert_eq!(f.bank(17).unwrap().bank_id, 17);
    // A repeated bank id is refused.
    b[24..26].copy_from_slice(&1u16.to_le_bytes());
    let e = err(parse(Path::new("big.lyrw"), &b));
    assert!(e.contains("bank id 1 appears twice"), "{e}");
}

// ---- item 9: FIFOs and other non-files ----------------------------------------------------

#[test]
fn fifos_are_refused_without_hanging() {
    let t = tempfile::tempdir().unwrap();
    // Model file.
    let p = t.path().join("pipe.gguf");
    mkfifo(&p);
    let e = no_hang("gguf", move || err(Model::open(&p)));
    assert!(e.contains("named pipe"), "{e}");
    // Segment.
    let c = container(t.path());
    let seg = c.join("segments/text.final_norm.bin");
    std::fs::remove_file(&seg).unwrap();
    mkfifo(&seg);
    let c2 = c.clone();
    let e = no_hang("segment", move || err(open_model(&c2)));
    assert!(e.contains("named pipe"), "{e}");
    let rows = no_hang("verify", move || verify(&c).unwrap());
    assert!(
        rows.iter().any(|r| r.detail.contains("named pipe")),
        "{rows:?}"
    );
    // Graph and index.
    let c = t.path().join("c2");
    extract(&synthetic(SMALL), &c, ExtractEncoding::Source, &mut |_| {}).unwrap();
    std::fs::remove_file(c.join("system_graph.json")).unwrap();
    mkfifo(&c.join("system_graph.json"));
    let e = no_hang("graph", move || err(open_model(&c)));
    assert!(e.contains("named pipe"), "{e}");
    // config.json and tokenizer.json of a folder.
    let d = hf_folder(t.path(), 1, &[("model.norm.weight", vec![8])]);
    mkfifo(&d.join("tokenizer.json"));
    let d2 = d.clone();
    let e = no_hang("tokenizer.json", move || err(Model::open(&d2)));
    assert!(
        e.contains("named pipe") && e.contains("tokenizer.json"),
        "{e}"
    );
    std::fs::remove_file(d.join("config.json")).unwrap();
    mkfifo(&d.join("config.json"));
    let e = no_hang("config.json", move || {
        err(lql_storage::format::safetensors::HfFolder::open(&d))
    });
    assert!(e.contains("named pipe"), "{e}");
}

// ---- item 11: size caps ----------------------------------------------------------------------

#[test]
fn oversized_json_files_are_refused_with_a_typed_error() {
    let t = tempfile::tempdir().unwrap();
    let d = hf_folder(t.path(), 1, &[("model.norm.weight", vec![8])]);
    // Sparse: nothing is written, nothing may be read.
    let f = std::fs::File::create(d.join("tokenizer.json")).unwrap();
    f.set_len(3 << 30).unwrap();
    let e = Model::open(&d).unwrap_err();
    assert!(
        matches!(&e, StorageError::TooLarge { field, .. } if field == "tokenizer.json"),
        "{e}"
    );
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(d.join("config.json"))
        .unwrap();
    f.set_len(1 << 30).unwrap();
    let e = lql_storage::format::safetensors::HfFolder::open(&d).unwrap_err();
    assert!(
        matches!(&e, StorageError::TooLarge { field, .. } if field == "config.json"),
        "{e}"
    );
    let c = container(t.path());
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(c.join("index.json"))
        .unwrap();
    f.set_len(3 << 30).unwrap();
    let e = open_model(&c).unwrap_err();
    assert!(matches!(&e, StorageError::TooLarge { .. }), "{e}");
}

// ---- item 12: duplicates and tokenizer causes ------------------------------------------------

#[test]
fn duplicate_keys_and_ids_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let c = container(t.path());
    // A repeated representation id in index.json (serde kept the last one).
    let text = std::fs::read_to_string(c.join("index.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let (id, entry) = v["representations"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    let dup = format!("\"{id}\": {},", serde_json::to_string(entry).unwrap());
    let patched = text.replacen(
        "\"representations\": {",
        &format!("\"representations\": {{{dup}"),
        1,
    );
    assert_ne!(patched, text);
    std::fs::write(c.join("index.json"), patched).unwrap();
    let e = err(open_model(&c));
    assert!(e.contains("duplicate key"), "{e}");
    assert!(e.contains("index.json"), "{e}");
    // A repeated representation in the graph's object list.
    let c = t.path().join("c2");
    extract(&synthetic(SMALL), &c, ExtractEncoding::Source, &mut |_| {}).unwrap();
    edit_json(&c.join("system_graph.json"), |g| {
        let reps = g["objects"][0]["representations"].as_array_mut().unwrap();
        let first = reps[0].clone();
        reps.push(first);
    });
    let e = err(open_model(&c));
    assert!(e.contains("appears twice"), "{e}");
}

#[test]
fn unreadable_tokenizer_keeps_its_cause() {
    let t = tempfile::tempdir().unwrap();
    let d = hf_folder(t.path(), 1, &[("model.norm.weight", vec![8])]);
    std::fs::write(d.join("tokenizer.json"), b"\xff\xfe not utf-8").unwrap();
    let e = err(Model::open(&d));
    assert!(e.contains("tokenizer.json") && e.contains("UTF-8"), "{e}");
    std::fs::remove_file(d.join("tokenizer.json")).unwrap();
    std::fs::create_dir(d.join("tokenizer.json")).unwrap();
    let e = err(Model::open(&d));
    assert!(e.contains("directory"), "{e}");
}
