//! `DIFF … INTO PATCH` (issue 12 item 1): after 20 knowledge edits and an ablation on
//! SmolLM2, `DIFF CURRENT INTO PATCH` writes a patch that a fresh connection applies to the
//! base and then answers INFER with logits bit-identical to the edited session's; the base
//! against the session's compiled VINDEX (which stores the overlay beside the base's bytes)
//! gives the same patch; the merged GGUF export (FFN widened) and a Q4_1/F32 pair are refused
//! by name with nothing written; a model against itself is an empty patch. Run with
//! `--release`.

use std::path::Path;

use lql::{Connection, Rows, Value};
use lql_tests::{default_model_path as smollm2, repo_root};
use sha2::{Digest, Sha256};

const BASE_SHA: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

fn sha256(path: &Path) -> String {
    let d = Sha256::digest(std::fs::read(path).unwrap());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn q(p: &Path) -> String {
    p.display().to_string().replace('"', "\\\"")
}

fn col(r: &Rows, name: &str) -> Value {
    let i = r
        .column_index(name)
        .unwrap_or_else(|| panic!("no column {name}"));
    r.rows[0][i].clone()
}

/// INFER rows of `prompts` (every column, logits included).
fn infer(c: &Connection, prompts: &[String]) -> Vec<Rows> {
    prompts
        .iter()
        .map(|p| c.execute(&format!("INFER {p:?} TOP 20")).unwrap())
        .collect()
}

/// A fresh connection on the base with `patch` applied.
fn applied(base: &Path, patch: &Path) -> Connection {
    let c = Connection::open_in_memory().unwrap();
    c.bind(&base.display().to_string()).unwrap();
    c.execute(&format!("APPLY PATCH \"{}\"", q(patch))).unwrap();
    c
}

#[test]
fn diff_into_patch_reproduces_the_edited_state() {
    let base = smollm2();
    let before = sha256(&base);
    let t = tempfile::tempdir().unwrap();
    let c = Connection::open_in_memory().unwrap();
    c.bind(&base.display().to_string()).unwrap();
    let facts = lql_tests::edit_facts(20);
    lql_tests::insert_facts(&c, &facts);
    c.execute("DELETE FROM features WHERE layer = 3 AND feature < 2")
        .unwrap();
    c.execute("UPDATE features SET gate_scale = 0.5 WHERE layer = 7 AND feature = 11")
        .unwrap();
    let prompts: Vec<String> = facts
        .iter()
        .take(3)
        .map(|f| f.3.clone())
        .chain(["The weather today is".to_string()])
        .collect();
    let want = infer(&c, &prompts);

    // DIFF CURRENT INTO PATCH: 20 edges and 3 scales, stamped with the base's sha256. An
    // edge is eight added features (docs/editing.md): its last-token hat (3) and its
    // subject write's step (2) and hat (3). A derived patch lists them layer by layer, so
    // the subject features no longer follow their edge and count as gates of their own:
    // 20 × 3 groups of features and 3 scales.
    let p = t.path().join("current.lqlpatch");
    let r = c
        .execute(&format!("DIFF CURRENT INTO PATCH \"{}\"", q(&p)))
        .unwrap();
    assert_eq!(col(&r, "path"), Value::from(p.display().to_string()));
    assert_eq!(col(&r, "edits"), Value::Int(63));
    assert_eq!(col(&r, "added_features"), Value::Int(160));
    assert_eq!(col(&r, "scales"), Value::Int(3));
    assert_eq!(col(&r, "sha256"), Value::from(sha256(&p)));
    assert_eq!(col(&r, "base_sha256"), Value::from(BASE_SHA));

    // A fresh connection: USE base; APPLY PATCH gives bit-identical logits, and the edges.
    let c2 = applied(&base, &p);
    assert_eq!(infer(&c2, &prompts), want, "logits after APPLY PATCH");
    let edges = c2.execute("SELECT entity, target FROM edges").unwrap();
    assert_eq!(edges.rows.len(), 20);
    assert_eq!(edges.rows[0][0], Value::from(facts[0].0.clone()));

    // DIFF "base" CURRENT gives the same edits.
    let p1 = t.path().join("base-current.lqlpatch");
    let r = c
        .execute(&format!(
            "DIFF \"{}\" CURRENT INTO PATCH \"{}\"",
            q(&base),
            q(&p1)
        ))
        .unwrap();
    assert_eq!(col(&r, "edits"), Value::Int(63));
    assert_eq!(sha256(&p1), sha256(&p), "same edits, same bytes");

    // The compiled container stores the overlay beside the base's bytes: expressible.
    let v = t.path().join("edited.vindex");
    c.execute(&format!("COMPILE CURRENT INTO VINDEX \"{}\"", q(&v)))
        .unwrap();
    let p2 = t.path().join("compiled.lqlpatch");
    let r = c
        .execute(&format!(
            "DIFF \"{}\" \"{}\" INTO PATCH \"{}\"",
            q(&base),
            q(&v),
            q(&p2)
        ))
        .unwrap();
    assert_eq!(col(&r, "edits"), Value::Int(63));
    assert_eq!(col(&r, "base_sha256"), Value::from(BASE_SHA));
    let c3 = applied(&base, &p2);
    assert_eq!(
        infer(&c3, &prompts),
        want,
        "logits after APPLY of the compiled diff"
    );
    // Edge text is not stored in a compiled container: the added features have none.
    assert_eq!(
        c3.execute("SELECT entity FROM edges").unwrap().rows.len(),
        0
    );

    // The merged GGUF export widens every layer's FFN: refused by name, nothing written.
    let g = t.path().join("edited.gguf");
    c.execute(&format!("COMPILE CURRENT INTO GGUF \"{}\"", q(&g)))
        .unwrap();
    let p3 = t.path().join("merged.lqlpatch");
    let e = c
        .execute(&format!(
            "DIFF \"{}\" \"{}\" INTO PATCH \"{}\"",
            q(&base),
            q(&g),
            q(&p3)
        ))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("not expressible as a patch") && e.contains("ffn"),
        "{e}"
    );
    assert!(!p3.exists());
    std::fs::remove_file(&g).unwrap();

    // A model against itself: an empty patch.
    let p4 = t.path().join("same.lqlpatch");
    let r = c
        .execute(&format!(
            "DIFF \"{}\" \"{}\" INTO PATCH \"{}\"",
            q(&base),
            q(&base),
            q(&p4)
        ))
        .unwrap();
    assert_eq!(col(&r, "edits"), Value::Int(0));

    // INTO PATCH writes the whole change: LAYER/LIMIT/PHYSICAL are refused with it.
    let e = c
        .execute(&format!("DIFF CURRENT LAYER 3 INTO PATCH \"{}\"", q(&p4)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("LAYER"), "{e}");

    // The left side of a patch is a model as stored, not an edited state.
    let e = c
        .execute(&format!(
            "DIFF CURRENT \"{}\" INTO PATCH \"{}\"",
            q(&base),
            q(&p4)
        ))
        .unwrap_err()
        .to_string();
    assert!(e.contains("edited state"), "{e}");
    assert_eq!(sha256(&base), before, "the base model file changed");
}

#[test]
fn a_changed_encoding_is_refused_naming_the_first_tensor() {
    let dir = repo_root().join("tests/fixtures/diff");
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("x.lqlpatch");
    let c = Connection::open_in_memory().unwrap();
    let e = c
        .execute(&format!(
            "DIFF \"{}\" \"{}\" INTO PATCH \"{}\"",
            q(&dir.join("tiny_q4_1.gguf")),
            q(&dir.join("tiny_f32.gguf")),
            q(&p)
        ))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("text.embedding layer - token_embedding")
            && e.contains("encoding changed (Q4_1 → F32)"),
        "{e}"
    );
    assert!(!p.exists(), "nothing is written");
    assert_eq!(std::fs::read_dir(t.path()).unwrap().count(), 0);
}

/// No statement writes over a file the connection reads: the bound model (by its path,
/// a `..` alias, a symbolic link, a hard link), a model DIFF reads, or an applied patch's
/// file. Each is refused with `LQL-E0403` and the file keeps its bytes.
#[test]
fn statements_never_write_over_the_files_they_read() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.gguf");
    std::fs::copy(smollm2(), &model).unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(&model, dir.path().join("link.gguf")).unwrap();
    std::fs::hard_link(&model, dir.path().join("hard.gguf")).unwrap();
    let before = sha256(&model);
    let c = Connection::open(model.to_str().unwrap()).unwrap();
    let patch = dir.path().join("p.lqlpatch");
    c.execute_batch(&format!(
        "BEGIN PATCH \"{}\"; UPDATE features SET down_scale = 0 WHERE layer = 3 AND feature = 5; SAVE PATCH",
        q(&patch)
    ))
    .unwrap();
    let patch_before = sha256(&patch);
    let mut aliases = vec![
        model.clone(),
        dir.path().join("sub/../m.gguf"),
        dir.path().join("hard.gguf"),
    ];
    #[cfg(unix)]
    aliases.push(dir.path().join("link.gguf"));
    let mut refused = 0;
    for target in aliases.iter().chain([&patch]) {
        let t = q(target);
        for stmt in [
            format!("TRACE 'The capital of France is' SAVE \"{t}\""),
            format!("DIFF \"{}\" CURRENT INTO PATCH \"{t}\"", q(&model)),
            format!("BEGIN PATCH \"{t}\""),
        ] {
            let e = c.execute(&stmt).unwrap_err();
            assert_eq!(e.code(), "LQL-E0403", "{stmt}: {e}");
            refused += 1;
        }
    }
    // DIFF's left side is protected too, though it is not the bound model.
    let other = dir.path().join("other.gguf");
    std::fs::copy(&model, &other).unwrap();
    let e = c
        .execute(&format!(
            "DIFF \"{}\" CURRENT INTO PATCH \"{}\"",
            q(&other),
            q(&other)
        ))
        .unwrap_err();
    assert_eq!(e.code(), "LQL-E0403", "{e}");
    assert_eq!(sha256(&model), before, "the model is unchanged");
    assert_eq!(
        sha256(&patch),
        patch_before,
        "the applied patch is unchanged"
    );
    eprintln!("{} refusals", refused + 1);
}
