//! Per-request patches: a server started with `--patches DIR` applies the `.lqlpatch`
//! files a request names (by file name or sha256) to that request only. A patched and a
//! plain request decoding at once each get exactly what a single-user connection with that
//! state answers (bit-identical greedy tokens); a patch not in the folder, outside it, or
//! named to a server without the folder is a 400 in OpenAI's error shape.

mod common;

use serde_json::json;

#[test]
fn a_patched_and_a_plain_request_each_answer_as_their_own_state() {
    let dir = tempfile::tempdir().unwrap();
    let patch = dir.path().join("fact.lqlpatch");
    let facts = lql_tests::edit_facts(1);
    let prompt = facts[0].3.clone();
    let recorder = common::reference();
    recorder
        .execute(&format!(
            "BEGIN PATCH {}",
            lql::quote(&patch.display().to_string())
        ))
        .unwrap();
    lql_tests::insert_facts(&recorder, &facts);
    recorder.execute("SAVE PATCH").unwrap();
    drop(recorder);

    let patched_conn = common::reference();
    patched_conn
        .execute(&format!(
            "APPLY PATCH {}",
            lql::quote(&patch.display().to_string())
        ))
        .unwrap();
    let want_patched = common::generate_greedy(&patched_conn, &prompt, 12);
    let want_plain = common::generate_greedy(&common::reference(), &prompt, 12);
    assert_ne!(want_patched, want_plain, "the patch changes the answer");

    let mut c = common::config();
    c.patch_dir = Some(dir.path().to_path_buf());
    let s = common::start(c);
    let url = format!("{}/v1/completions", s.url());
    let sha = lql::generation::PatchFile::read(&patch)
        .unwrap()
        .sha256_hex();
    for name in ["fact.lqlpatch".to_string(), sha] {
        let handles: Vec<_> = [true, false]
            .into_iter()
            .map(|with_patch| {
                let url = url.clone();
                let prompt = prompt.clone();
                let name = name.clone();
                std::thread::spawn(move || {
                    let mut body = json!({"prompt": prompt, "max_tokens": 12, "temperature": 0});
                    if with_patch {
                        body["patches"] = json!([name]);
                    }
                    let (st, v) = common::post(&url, body);
                    assert_eq!(st, 200, "{v}");
                    v["choices"][0]["text"].as_str().unwrap().to_string()
                })
            })
            .collect();
        let got: Vec<String> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(
            got,
            [want_patched.clone(), want_plain.clone()],
            "patch named {name}"
        );
    }

    for (name, words) in [
        ("nope.lqlpatch", "not in the patches folder"),
        ("../fact.lqlpatch", ".."),
        ("/etc/passwd", "file name"),
        (
            "0000000000000000000000000000000000000000000000000000000000000000",
            "sha256",
        ),
    ] {
        let (st, e) = common::post(
            &url,
            json!({"prompt": "x", "max_tokens": 1, "patches": [name]}),
        );
        assert_eq!(st, 400, "{name}: {e}");
        assert_eq!(e["error"]["param"], "patches");
        assert_eq!(e["error"]["type"], "invalid_request_error");
        assert!(
            e["error"]["message"].as_str().unwrap().contains(words),
            "{name}: {e}"
        );
    }
}

#[test]
fn a_server_without_a_patches_folder_refuses_patched_requests() {
    let s = common::start(common::config());
    let (st, e) = common::post(
        &format!("{}/v1/chat/completions", s.url()),
        json!({"messages": [{"role": "user", "content": "hi"}], "patches": ["a.lqlpatch"]}),
    );
    assert_eq!(st, 400, "{e}");
    assert_eq!(e["error"]["param"], "patches");
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--patches"));
}
