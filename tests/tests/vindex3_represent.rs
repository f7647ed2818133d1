//! REPRESENT on SmolLM2 (seed 002 §9.1, §18.16): a Q8_0 representation of the FFN matrices
//! added beside the Q4_1 original. Each profile gives the logits of its encoding (parity
//! with a GGUF whose FFN is re-quantised the same way, made with the project's GGUF
//! writer), the existing segments keep their bytes, SHOW PROFILES derives both
//! authorities, VERIFY passes, and an interrupted REPRESENT leaves the container as it was.
//! Run with `--release`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lql::Connection;
use lql_exec::Executor;
use lql_storage::codec;
use lql_storage::format::gguf::{writer::GgufWriter, GgufFile};
use lql_storage::format::vindex3::represent::{represent, RepresentScope};
use lql_storage::format::vindex3::{self, open_model_profile, ExtractEncoding};
use lql_storage::model::OperandSource;
use lql_storage::{import, DType, Model};
use lql_tests::default_model_path as smollm2;
use sha2::{Digest, Sha256};

/// "The capital of France is" in SmolLM2's vocabulary, plus a few ids across the range.
const IDS: [u32; 9] = [504, 3575, 282, 4649, 314, 1, 2, 49151, 17];

fn logits(m: Model) -> Vec<Vec<f32>> {
    let src: Arc<dyn OperandSource> = Arc::new(m);
    let ex = Executor::new(src, 2).unwrap();
    ex.logits_all(&IDS)
        .unwrap()
        .into_iter()
        .map(|l| l.values)
        .collect()
}

fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| {
            assert_eq!(x.len(), y.len());
            x.iter().zip(y).map(|(p, q)| (p - q).abs())
        })
        .fold(0f32, f32::max)
}

fn q(p: &Path) -> String {
    p.display()
        .to_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
}

/// SHA-256 of every file under `dir/segments`, by name.
fn segment_hashes(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir.join("segments")).unwrap() {
        let e = e.unwrap();
        let bytes = std::fs::read(e.path()).unwrap();
        out.insert(
            e.file_name().to_string_lossy().into_owned(),
            format!("{:x}", Sha256::digest(&bytes)),
        );
    }
    out
}

/// A copy of `src` whose FFN matrices (`ffn_gate`, `ffn_up`, `ffn_down`) are Q8_0: each row
/// decoded to f32 by the codec and encoded to Q8_0, as REPRESENT does.
fn ffn_q8_gguf(src: &Path, out: &Path) {
    let file = GgufFile::open(src).unwrap();
    let mut w = GgufWriter::new();
    for kv in file.metadata() {
        w.add_kv(kv.key.clone(), kv.value.clone()).unwrap();
    }
    let mut changed = 0;
    for t in file.tensors() {
        let bytes = file.view(t).bytes;
        let ffn = ["ffn_gate.", "ffn_up.", "ffn_down."]
            .iter()
            .any(|r| t.name.contains(r));
        if ffn && t.dtype != DType::Q8_0 {
            let row = t.shape[0];
            let mut vals = vec![0f32; t.elems()];
            codec::decode_rows(t.dtype, bytes, row, &mut vals).unwrap();
            let mut enc = Vec::new();
            for r in vals.chunks_exact(row) {
                codec::encode_row(DType::Q8_0, r, &mut enc).unwrap();
            }
            w.add_tensor(&t.name, DType::Q8_0, &t.shape, enc).unwrap();
            changed += 1;
        } else {
            w.add_tensor(&t.name, t.dtype, &t.shape, bytes).unwrap();
        }
    }
    assert_eq!(changed, 90, "30 layers × gate, up, down");
    w.write(out).unwrap();
}

#[test]
fn ffn_q8_0_beside_q4_1_gives_each_encodings_logits() {
    let t = tempfile::tempdir().unwrap();
    let gguf = smollm2();
    let dir = t.path().join("smol.vindex");
    let c = Connection::open_in_memory().unwrap();
    c.execute(&format!(
        "EXTRACT MODEL \"{}\" INTO \"{}\";",
        q(&gguf),
        q(&dir)
    ))
    .unwrap();
    let before = segment_hashes(&dir);

    let r = c
        .execute(&format!(
            "REPRESENT \"text.decoder_stack\" FFN AS Q8_0 INTO \"{}\";",
            q(&dir)
        ))
        .unwrap();
    assert_eq!(
        r.column_names(),
        [
            "object",
            "representation",
            "variant",
            "base",
            "encoding",
            "fidelity",
            "segment",
            "tensors",
            "payload_bytes",
            "profile"
        ]
    );
    assert_eq!(r.rows.len(), 1);
    let row: Vec<String> = r.rows[0].iter().map(|v| v.to_string()).collect();
    assert_eq!(row[1], "text.decoder_stack@ffn-q8_0");
    assert_eq!(row[3], "text.decoder_stack@source");
    // Q8_0 from Q4_1 is a re-quantisation of a dequantisation: lossy.
    assert_eq!(row[5], "numerically-approximate");
    assert_eq!(row[7], "90");
    assert_eq!(row[9], "ffn-q8_0");

    // Existing segments: the same files with the same bytes; one new segment.
    let after = segment_hashes(&dir);
    for (name, h) in &before {
        assert_eq!(after.get(name), Some(h), "segment {name} changed");
    }
    assert_eq!(after.len(), before.len() + 1);
    // The recorded hashes of the existing representations are unchanged too.
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
    assert_eq!(
        index["representations"]["text.decoder_stack@ffn-q8_0"]["base"],
        "text.decoder_stack@source"
    );

    // SHOW PROFILES: both, authority derived.
    let p = c
        .execute(&format!("SHOW PROFILES \"{}\";", q(&dir)))
        .unwrap();
    let profiles: BTreeMap<String, String> = p
        .rows
        .iter()
        .map(|r| (r[0].to_string(), r[1].to_string()))
        .collect();
    assert_eq!(
        profiles.get("exact").map(String::as_str),
        Some("source-exact")
    );
    assert_eq!(
        profiles.get("ffn-q8_0").map(String::as_str),
        Some("numerically-approximate")
    );

    // VERIFY passes (every segment, the new graph file, the capability files).
    let v = c.execute(&format!("VERIFY \"{}\";", q(&dir))).unwrap();
    assert!(!v.fault, "{:?}", v.rows);
    assert!(v
        .rows
        .iter()
        .any(|r| r[1].to_string() == "text.decoder_stack@ffn-q8_0"));

    // USE … PROFILE through LQL binds each profile.
    for profile in ["exact", "ffn-q8_0"] {
        c.execute(&format!("USE \"{}\" PROFILE \"{profile}\";", q(&dir)))
            .unwrap();
        let s = c.execute("SHOW REPRESENTATIONS;").unwrap();
        let selected: Vec<String> = s
            .rows
            .iter()
            .filter(|r| r[4].to_string() == "true")
            .map(|r| r[1].to_string())
            .collect();
        let want = if profile == "exact" {
            "text.decoder_stack@source"
        } else {
            "text.decoder_stack@ffn-q8_0"
        };
        assert!(
            selected.contains(&want.to_string()),
            "{profile}: {selected:?}"
        );
    }

    // Logits: the original profile is the Q4_1 GGUF's, bit for bit; the Q8_0 profile is a
    // GGUF whose FFN was re-quantised the same way.
    let q4 = logits(import::open(&gguf).unwrap());
    let exact = logits(open_model_profile(&dir, Some("exact")).unwrap());
    assert_eq!(max_diff(&exact, &q4), 0.0);
    let q8_path = t.path().join("ffn-q8.gguf");
    ffn_q8_gguf(&gguf, &q8_path);
    let q8 = logits(import::open(&q8_path).unwrap());
    let got = logits(open_model_profile(&dir, Some("ffn-q8_0")).unwrap());
    let d = max_diff(&got, &q8);
    eprintln!(
        "max |Δlogit| ffn-q8_0 profile vs FFN-Q8_0 GGUF: {d}; vs Q4_1: {}",
        max_diff(&got, &q4)
    );
    assert!(d <= 1e-5, "max |Δlogit| {d}");
    assert!(
        max_diff(&got, &q4) > 0.0,
        "the profile must bind the new bytes"
    );

    // A second REPRESENT of the same variant is refused by name.
    let e = c
        .execute(&format!(
            "REPRESENT \"text.decoder_stack\" FFN AS Q8_0 INTO \"{}\";",
            q(&dir)
        ))
        .unwrap_err()
        .to_string();
    assert!(e.contains("ffn-q8_0"), "{e}");
}

#[test]
fn interrupted_represent_leaves_the_container_as_it_was() {
    use lql_storage::format::gguf::synth::TinyModel;
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("tiny.gguf");
    TinyModel::llama().write(&src).unwrap();
    let dir = t.path().join("c");
    vindex3::extract(
        &import::open(&src).unwrap(),
        &dir,
        ExtractEncoding::Source,
        &mut |_| {},
    )
    .unwrap();
    let index = std::fs::read(dir.join("index.json")).unwrap();
    let files = |d: &Path| -> Vec<String> {
        let mut v: Vec<String> = walk(d);
        v.sort();
        v
    };
    let listing = files(&dir);
    let hashes = segment_hashes(&dir);

    // Interrupt after the first tensor.
    let cancel = AtomicBool::new(false);
    let e = represent(
        &dir,
        None,
        RepresentScope::Whole,
        ExtractEncoding::Q8_0,
        &mut |p| {
            if p.tensors_done >= 1 {
                cancel.store(true, Ordering::Relaxed)
            }
        },
        &cancel,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("interrupted"), "{e}");
    assert_eq!(std::fs::read(dir.join("index.json")).unwrap(), index);
    assert_eq!(files(&dir), listing, "no file left behind");
    assert_eq!(segment_hashes(&dir), hashes);
    assert!(vindex3::all_ok(&vindex3::verify(&dir).unwrap()));

    // The same REPRESENT, not interrupted, adds every object's Q8_0 variant.
    let rows = represent(
        &dir,
        None,
        RepresentScope::Whole,
        ExtractEncoding::Q8_0,
        &mut |_| {},
        &AtomicBool::new(false),
    )
    .unwrap();
    assert!(!rows.is_empty());
    assert!(vindex3::all_ok(&vindex3::verify(&dir).unwrap()));
    for (name, h) in &hashes {
        assert_eq!(segment_hashes(&dir).get(name), Some(h));
    }
    // Both profiles bind and run.
    let ids = [1u32, 5, 9];
    for p in ["exact", "q8_0"] {
        let m = open_model_profile(&dir, Some(p)).unwrap();
        let src: Arc<dyn OperandSource> = Arc::new(m);
        Executor::new(src, 1).unwrap().logits_all(&ids).unwrap();
    }
    // The old graph file is gone; the index names the new one.
    assert!(!dir.join("system_graph.json").exists());
}

fn walk(d: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            for s in walk(&e.path()) {
                out.push(format!("{}/{s}", e.file_name().to_string_lossy()));
            }
        } else {
            out.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    out
}

/// Flip one bit of the file at `at`.
fn flip(path: &Path, at: u64) {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.seek(SeekFrom::Start(at)).unwrap();
    f.read_exact(&mut b).unwrap();
    b[0] ^= 0x10;
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&b).unwrap();
}

/// (authorities, object, check, status, detail) of every row.
fn against(c: &Connection, dir: &Path, src: &Path) -> (bool, Vec<[String; 5]>) {
    let r = c
        .execute(&format!("VERIFY \"{}\" AGAINST \"{}\";", q(dir), q(src)))
        .unwrap();
    assert_eq!(
        r.column_names(),
        [
            "authorities",
            "object",
            "check",
            "status",
            "expected",
            "actual",
            "detail"
        ]
    );
    let rows = r
        .rows
        .iter()
        .map(|x| [0, 1, 2, 3, 6].map(|i| x[i].to_string()))
        .collect();
    (r.fault, rows)
}

#[test]
fn verify_against_tells_a_drifted_source_from_a_corrupted_container() {
    let t = tempfile::tempdir().unwrap();
    let gguf = smollm2();
    let dir = t.path().join("smol.vindex");
    let c = Connection::open_in_memory().unwrap();
    c.execute(&format!(
        "EXTRACT MODEL \"{}\" INTO \"{}\";",
        q(&gguf),
        q(&dir)
    ))
    .unwrap();
    c.execute(&format!(
        "REPRESENT \"text.decoder_stack\" FFN AS Q8_0 INTO \"{}\";",
        q(&dir)
    ))
    .unwrap();

    // A clean pair passes, every authority pair compared.
    let (fault, rows) = against(&c, &dir, &gguf);
    let failed: Vec<_> = rows.iter().filter(|r| r[3] == "FAILED").collect();
    assert!(!fault && failed.is_empty(), "{failed:?}");
    for pair in [
        "Declared ↔ Resolved",
        "Resolved ↔ Graph",
        "Graph ↔ Encoded",
        "Encoded ↔ Recorded",
        "Declared ↔ Encoded",
    ] {
        assert!(rows.iter().any(|r| r[0] == pair && r[3] == "ok"), "{pair}");
    }
    // The Q8_0 variant's payload is checked by re-encoding the source the same way.
    assert!(rows
        .iter()
        .any(|r| r[2] == "payload of text.decoder_stack@ffn-q8_0" && r[3] == "ok"));

    // A source with one changed tensor: "source drifted" for that tensor only.
    let drifted = t.path().join("drifted.gguf");
    std::fs::copy(&gguf, &drifted).unwrap();
    let tensor = "blk.3.ffn_down.weight";
    {
        let f = GgufFile::open(&drifted).unwrap();
        let info = f.tensor_info(tensor).unwrap();
        let at = f.data_start() + info.offset + 100;
        drop(f);
        flip(&drifted, at);
    }
    let (fault, rows) = against(&c, &dir, &drifted);
    let failed: Vec<_> = rows.iter().filter(|r| r[3] == "FAILED").collect();
    assert!(fault);
    assert!(!failed.is_empty());
    for r in &failed {
        assert!(r[4].contains("source drifted"), "{r:?}");
        assert!(r[4].contains(tensor), "{r:?}");
    }
    // The source copy and the Q8_0 variant re-encoded from it: both name the one tensor.
    assert_eq!(failed.len(), 2, "{failed:?}");

    // A flipped container byte: "container corrupted", naming the segment.
    let seg = dir.join("segments/text.decoder_stack.bin");
    let parsed = vindex3::segment::read_header(&seg).unwrap();
    let victim = &parsed.header.tensors[7];
    flip(&seg, parsed.payload_start + victim.offset + 5);
    let (fault, rows) = against(&c, &dir, &gguf);
    let failed: Vec<_> = rows.iter().filter(|r| r[3] == "FAILED").collect();
    assert!(fault);
    assert!(!failed.is_empty());
    for r in &failed {
        assert!(r[4].contains("container corrupted"), "{r:?}");
        assert!(r[4].contains("segments/text.decoder_stack.bin"), "{r:?}");
    }
    assert!(
        failed.iter().any(|r| r[4].contains(&victim.name)),
        "{failed:?}"
    );
    assert!(!rows.iter().any(|r| r[4].contains("source drifted")));
}

#[test]
fn verify_against_rederives_a_variant_of_a_re_encoded_baseline() {
    // Q4_1 source → F16 baseline → Q8_0 FFN variant: the source is re-encoded through the
    // same two steps, so a clean pair still passes.
    let t = tempfile::tempdir().unwrap();
    let gguf = smollm2();
    let dir = t.path().join("f16.vindex");
    let c = Connection::open_in_memory().unwrap();
    c.execute(&format!(
        "EXTRACT MODEL \"{}\" INTO \"{}\" ENCODING F16;",
        q(&gguf),
        q(&dir)
    ))
    .unwrap();
    let r = c
        .execute(&format!(
            "REPRESENT \"text.decoder_stack\" FFN AS Q8_0 INTO \"{}\";",
            q(&dir)
        ))
        .unwrap();
    assert_eq!(r.rows[0][5].to_string(), "numerically-approximate");
    let (fault, rows) = against(&c, &dir, &gguf);
    let failed: Vec<_> = rows.iter().filter(|r| r[3] == "FAILED").collect();
    assert!(!fault && failed.is_empty(), "{failed:?}");
    assert!(rows
        .iter()
        .any(|r| r[2] == "payload of text.decoder_stack@ffn-q8_0" && r[3] == "ok"));
}
