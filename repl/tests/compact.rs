//! COMPACT on a tiny VINDEX3 container with an added (unselected) representation, a stray
//! segment file and an unknown file: the report names all three (the representation kept:
//! the index references it), answers (INFER logits, WALK) are identical before and after;
//! a REPRESENTed variant, the container's identity (index bytes, authority, unknown
//! fields) and an operand in an encoding this build cannot decode survive COMPACT; then 20
//! `kill -9`s of the CLI at random points of an in-place COMPACT each leave a container
//! that opens, verifies and answers exactly as before — the old one or the new one, never
//! a mix.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lql::Connection;
use lql_storage::format::gguf::synth::{byte_level_vocab, TinyModel};
use lql_storage::format::gguf::MetaValue;
use lql_storage::format::vindex3::{self, Container};

mod common;
use common::copy_dir;

fn q(p: &Path) -> String {
    p.display().to_string().replace('"', "\\\"")
}

/// A tiny container with an added representation of `text.final_norm` no profile selects,
/// `segments/stray.bin` and `notes.txt`.
fn container(dir: &Path) -> PathBuf {
    let gguf = dir.join("tiny.gguf");
    // The synthetic vocabulary plus one merge ("h e" → "he"), so that text tokenizes.
    let mut w = TinyModel::llama().writer().unwrap();
    let mut tokens = byte_level_vocab(320);
    tokens[259] = "he".into();
    w.set_kv("tokenizer.ggml.tokens", MetaValue::str_array(&tokens))
        .unwrap();
    w.set_kv("tokenizer.ggml.merges", MetaValue::str_array(["h e"]))
        .unwrap();
    w.write(&gguf).unwrap();
    let out = dir.join("c");
    let c = Connection::open_in_memory().unwrap();
    c.execute(&format!(
        "EXTRACT MODEL \"{}\" INTO \"{}\"",
        q(&gguf),
        q(&out)
    ))
    .unwrap();
    let mut k = Container::load(&out).unwrap();
    let (id, mut rep) = k
        .index
        .representations
        .iter()
        .find(|(_, r)| r.object == "text.final_norm")
        .map(|(i, r)| (i.clone(), r.clone()))
        .unwrap();
    let copy = "segments/text.final_norm.copy.bin";
    std::fs::copy(out.join(&rep.segment), out.join(copy)).unwrap();
    rep.segment = copy.into();
    rep.encoding = "copy".into();
    let new_id = format!("{id}-copy");
    k.index.representations.insert(new_id.clone(), rep);
    let g = k.graph.as_mut().unwrap();
    let obj = g
        .objects
        .iter_mut()
        .find(|o| o.id == "text.final_norm")
        .unwrap();
    let mut r = obj.representations[0].clone();
    r.id = new_id;
    r.encoding = "copy".into();
    obj.representations.push(r);
    k.rewrite().unwrap();
    std::fs::write(out.join("segments/stray.bin"), b"stray").unwrap();
    std::fs::write(out.join("notes.txt"), b"kept as is").unwrap();
    assert!(vindex3::all_ok(&vindex3::verify(&out).unwrap()));
    out
}

/// INFER's rows and WALK's rows on the container at `dir`.
fn answers(dir: &Path) -> (Vec<Vec<lql::Value>>, Vec<Vec<lql::Value>>) {
    let c = Connection::open_in_memory().unwrap();
    c.bind(&dir.display().to_string()).unwrap();
    let i = c.execute("INFER \"hello world\" TOP 5").unwrap().rows;
    let w = c.execute("WALK \"hello\" TOP 5").unwrap().rows;
    (i, w)
}

#[test]
fn report_names_what_it_discards_and_answers_stay() {
    let t = tempfile::tempdir().unwrap();
    let dir = container(t.path());
    let before = answers(&dir);
    let c = Connection::open_in_memory().unwrap();
    let out = t.path().join("compacted");
    let r = c
        .execute(&format!("COMPACT \"{}\" INTO \"{}\"", q(&dir), q(&out)))
        .unwrap();
    let rows: Vec<(String, String, String)> = r
        .rows
        .iter()
        .map(|x| (x[0].to_string(), x[1].to_string(), x[2].to_string()))
        .collect();
    let has =
        |a: &str, k: &str, p: &str| rows.contains(&(a.to_string(), k.to_string(), p.to_string()));
    // Referenced by the index, so kept (§5.7) though no profile selects it.
    assert!(
        has("kept", "segment", "segments/text.final_norm.copy.bin"),
        "{rows:?}"
    );
    let detail = |p: &str| {
        r.rows
            .iter()
            .find(|x| x[2].to_string() == p)
            .map(|x| x[4].to_string())
            .unwrap_or_default()
    };
    assert!(
        detail("segments/text.final_norm.copy.bin").contains("selected by no profile"),
        "{rows:?}"
    );
    assert!(
        detail("segments/text.decoder_stack.bin").contains("selected by the baseline"),
        "{rows:?}"
    );
    assert!(has("kept", "index", "index.json"), "{rows:?}");
    assert!(
        has("discarded", "stray segment file", "segments/stray.bin"),
        "{rows:?}"
    );
    assert!(has("carried", "unknown file", "notes.txt"), "{rows:?}");
    assert_eq!(std::fs::read(out.join("notes.txt")).unwrap(), b"kept as is");
    assert!(!out.join("segments/stray.bin").exists());
    assert_eq!(
        std::fs::read(out.join("segments/text.final_norm.copy.bin")).unwrap(),
        std::fs::read(dir.join("segments/text.final_norm.copy.bin")).unwrap()
    );
    assert_eq!(
        std::fs::read(out.join("index.json")).unwrap(),
        std::fs::read(dir.join("index.json")).unwrap()
    );
    assert!(vindex3::all_ok(&vindex3::verify(&out).unwrap()));
    assert_eq!(answers(&out), before);
    // In place: same answers, and nothing is left beside the container.
    c.execute(&format!("COMPACT \"{}\"", q(&dir))).unwrap();
    assert_eq!(answers(&dir), before);
    let mut names: Vec<String> = std::fs::read_dir(t.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, vec!["c", "compacted", "tiny.gguf"]);
    // An existing target is refused and the source stays.
    let e = c
        .execute(&format!("COMPACT \"{}\" INTO \"{}\"", q(&dir), q(&out)))
        .unwrap_err();
    assert!(e.to_string().contains("exists"), "{e}");
}

/// INFER's rows under `profile`.
fn answers_under(dir: &Path, profile: &str) -> Vec<Vec<lql::Value>> {
    let c = Connection::open_in_memory().unwrap();
    c.execute(&format!("USE \"{}\" PROFILE \"{profile}\"", q(dir)))
        .unwrap();
    c.execute("INFER \"hello world\" TOP 5").unwrap().rows
}

#[test]
fn every_selected_variant_and_the_identity_survive() {
    let t = tempfile::tempdir().unwrap();
    let dir = container(t.path());
    let c = Connection::open_in_memory().unwrap();
    c.execute(&format!("REPRESENT ALL AS Q8_0 INTO \"{}\"", q(&dir)))
        .unwrap();
    // Fields this build does not know, in the index and the graph.
    let edit = |p: &Path, f: &dyn Fn(&mut serde_json::Value)| {
        let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
        f(&mut v);
        std::fs::write(p, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    };
    edit(&dir.join("index.json"), &|v| {
        v["future_field"] = serde_json::json!({"kept": true})
    });
    let k = Container::load(&dir).unwrap();
    let graph = dir.join(k.index.system_graph.as_ref().unwrap());
    let graph_before = std::fs::read(&graph).unwrap();
    let index_before = std::fs::read(dir.join("index.json")).unwrap();
    assert_eq!(k.index.authority, vindex3::index::Authority::Canonical);
    let q8_segments: Vec<String> = k
        .index
        .representations
        .values()
        .filter(|r| r.encoding.eq_ignore_ascii_case("q8_0"))
        .map(|r| r.segment.clone())
        .collect();
    assert!(!q8_segments.is_empty());
    let before = answers_under(&dir, "q8_0");
    let r = c.execute(&format!("COMPACT \"{}\"", q(&dir))).unwrap();
    for seg in &q8_segments {
        let row = r
            .rows
            .iter()
            .find(|x| &x[2].to_string() == seg)
            .unwrap_or_else(|| panic!("no row for {seg}: {:?}", r.rows));
        assert_eq!(row[0].to_string(), "kept", "{row:?}");
        assert!(
            row[4].to_string().contains("selected by a profile"),
            "{row:?}"
        );
    }
    let discarded: Vec<String> = r
        .rows
        .iter()
        .filter(|x| x[0].to_string() == "discarded")
        .map(|x| x[2].to_string())
        .collect();
    assert_eq!(discarded, ["segments/stray.bin"], "{:?}", r.rows);
    assert_eq!(std::fs::read(dir.join("index.json")).unwrap(), index_before);
    assert_eq!(std::fs::read(&graph).unwrap(), graph_before);
    assert_eq!(answers_under(&dir, "q8_0"), before);
    assert!(vindex3::all_ok(&vindex3::verify(&dir).unwrap()));
}

#[test]
fn an_operand_this_build_cannot_decode_is_carried() {
    let t = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/vindex3/cases/valid-unknown-encoding-one-tensor");
    let dir = t.path().join("c");
    copy_dir(&fixture, &dir);
    let out = t.path().join("out");
    let c = Connection::open_in_memory().unwrap();
    c.execute(&format!("COMPACT \"{}\" INTO \"{}\"", q(&dir), q(&out)))
        .unwrap();
    let k = Container::load(&dir).unwrap();
    for r in k.index.representations.values() {
        assert_eq!(
            std::fs::read(out.join(&r.segment)).unwrap(),
            std::fs::read(dir.join(&r.segment)).unwrap(),
            "{}",
            r.segment
        );
    }
    // Still bound, still refused by name where the operand is needed.
    let c = Connection::open_in_memory().unwrap();
    c.bind(&out.display().to_string()).unwrap();
    let e = c.execute("INFER \"a\" TOP 1").unwrap_err().to_string();
    assert!(e.contains("unknown encoding \"Q4_X\""), "{e}");
}

#[test]
fn kill_9_during_compact_leaves_old_or_new() {
    let t = tempfile::tempdir().unwrap();
    let dir = container(t.path());
    let before = answers(&dir);
    let old_index = std::fs::read(dir.join("index.json")).unwrap();
    // How long one COMPACT takes here, to spread the kills over it.
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_lql"))
            .args(["-c", &format!("COMPACT \"{}\"", q(&dir))])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let t0 = Instant::now();
    let mut probe = run();
    assert!(probe.wait().unwrap().success());
    let full = t0.elapsed().as_micros().max(1000) as u64;
    let new_index = std::fs::read(dir.join("index.json")).unwrap();
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    for i in 0..20 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let delay = seed % full;
        let mut child = run();
        std::thread::sleep(Duration::from_micros(delay));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        let index = std::fs::read(dir.join("index.json"))
            .unwrap_or_else(|e| panic!("kill {i} after {delay} µs: no index.json: {e}"));
        assert!(
            index == old_index
                || index == new_index
                || serde_json::from_slice::<serde_json::Value>(&index).is_ok(),
            "kill {i}: index.json is neither old nor new"
        );
        let rows = vindex3::verify(&dir).unwrap();
        assert!(
            vindex3::all_ok(&rows),
            "kill {i} after {delay} µs: VERIFY fails: {rows:?}"
        );
        assert_eq!(
            answers(&dir),
            before,
            "kill {i} after {delay} µs: answers changed"
        );
    }
}

#[test]
fn kill_9_during_represent_leaves_old_or_new() {
    let t = tempfile::tempdir().unwrap();
    let base = container(t.path());
    let before = answers(&base);
    let old_index = std::fs::read(base.join("index.json")).unwrap();
    let segment_bytes = |d: &Path| -> Vec<(String, Vec<u8>)> {
        let k = Container::load(d).unwrap();
        k.index
            .representations
            .values()
            .filter(|r| old_index_names(&old_index).contains(&r.segment))
            .map(|r| {
                (
                    r.segment.clone(),
                    std::fs::read(d.join(&r.segment)).unwrap(),
                )
            })
            .collect()
    };
    let old_segments = segment_bytes(&base);
    let run = |dir: &Path| {
        Command::new(env!("CARGO_BIN_EXE_lql"))
            .args(["-c", &format!("REPRESENT ALL AS Q8_0 INTO \"{}\"", q(dir))])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    // How long one REPRESENT takes here, to spread the kills over it.
    let probe = t.path().join("probe");
    copy_dir(&base, &probe);
    let t0 = Instant::now();
    assert!(run(&probe).wait().unwrap().success());
    let full = t0.elapsed().as_micros().max(1000) as u64;
    let new_index = std::fs::read(probe.join("index.json")).unwrap();
    assert_ne!(new_index, old_index);
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..12 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let delay = seed % full;
        let dir = t.path().join(format!("k{i}"));
        copy_dir(&base, &dir);
        let mut child = run(&dir);
        std::thread::sleep(Duration::from_micros(delay));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        let index = std::fs::read(dir.join("index.json")).unwrap();
        assert!(
            index == old_index || index == new_index,
            "kill {i} after {delay} µs: index.json is neither the old nor the new one"
        );
        // The existing segments keep their bytes whatever happened.
        assert_eq!(segment_bytes(&dir), old_segments, "kill {i}");
        let rows = vindex3::verify(&dir).unwrap();
        assert!(
            vindex3::all_ok(&rows),
            "kill {i} after {delay} µs: VERIFY fails: {rows:?}"
        );
        assert_eq!(answers(&dir), before, "kill {i} after {delay} µs");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// The segment paths an index.json records.
fn old_index_names(index: &[u8]) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_slice(index).unwrap();
    v["representations"]
        .as_object()
        .unwrap()
        .values()
        .map(|r| r["segment"].as_str().unwrap().to_string())
        .collect()
}
