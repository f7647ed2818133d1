//! The user's catalogue file (`$LQL_HOME/catalogue.json`): a good file adds its entries; a
//! missing one adds none; each malformed entry is refused whole, naming the file, the entry
//! and the field. Files are read from temporary folders by explicit path.

use lql_storage::catalogue::{self, CatalogueEntry};
use lql_storage::user_catalogue::load;
use lql_storage::StorageError;

const SHA: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn entry(name: &str, file: &str) -> String {
    format!(
        r#"{{"name": "{name}", "package": "llm-x", "version": "1.0", "member": "llm_x/m.gguf",
            "sha256": "{SHA}", "size": 1234, "licence": "MIT", "file_name": "{file}"}}"#
    )
}

fn load_text(text: &str) -> lql_storage::Result<Vec<CatalogueEntry>> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("catalogue.json");
    std::fs::write(&path, text).unwrap();
    load(&path, &catalogue::builtin())
}

#[track_caller]
fn refused(text: &str, field: &str, says: &str) {
    match load_text(text) {
        Err(StorageError::Format {
            path,
            field: f,
            message,
            ..
        }) => {
            assert!(path.ends_with("catalogue.json"), "{path:?}");
            assert_eq!(f, field, "{message}");
            assert!(message.contains(says), "{field}: {message}");
        }
        other => panic!("expected a refusal of {field}, got {other:?}"),
    }
}

#[test]
fn a_good_file_adds_its_models_and_a_missing_one_none() {
    let got = load_text(&format!(
        r#"{{"models": [{}, {}]}}"#,
        entry("a-1", "a.gguf"),
        entry("b.2_x", "b.gguf")
    ))
    .unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].name, "a-1");
    assert_eq!(got[1].file_name, "b.gguf");
    assert_eq!(got[1].size, 1234);
    let dir = tempfile::tempdir().unwrap();
    assert!(load(&dir.path().join("none.json"), &[]).unwrap().is_empty());
}

#[test]
fn malformed_entries_are_refused_by_name_and_field() {
    let one = |e: String| format!(r#"{{"models": [{e}]}}"#);
    refused("{", "catalogue", "EOF");
    refused(r#"{"model": []}"#, "catalogue", "unknown field");
    refused(r#"{"models": [], "models": []}"#, "catalogue", "models");
    refused(
        &one(entry("Bad Name", "a.gguf")),
        r#"models[0] ("Bad Name").name"#,
        "not a model name",
    );
    refused(
        &one(entry("smollm2-135m-instruct", "a.gguf")),
        r#"models[0] ("smollm2-135m-instruct").name"#,
        "already in the catalogue",
    );
    refused(
        &format!(
            r#"{{"models": [{}, {}]}}"#,
            entry("a", "a.gguf"),
            entry("b", "a.gguf")
        ),
        r#"models[1] ("b").file_name"#,
        "already used",
    );
    refused(
        &one(entry("a", "../a.gguf")),
        r#"models[0] ("a").file_name"#,
        "plain file name",
    );
    refused(
        &one(entry("a", ".hidden")),
        r#"models[0] ("a").file_name"#,
        "plain file name",
    );
    refused(
        &one(entry("a", "a.gguf").replace("llm_x/m.gguf", "../m.gguf")),
        r#"models[0] ("a").member"#,
        "relative path",
    );
    refused(
        &one(entry("a", "a.gguf").replace(SHA, "ABC")),
        r#"models[0] ("a").sha256"#,
        "64 lower-case hex",
    );
    refused(
        &one(entry("a", "a.gguf").replace("\"size\": 1234", "\"size\": 0")),
        r#"models[0] ("a").size"#,
        "outside",
    );
    refused(
        &one(entry("a", "a.gguf").replace("\"MIT\"", "\" \"")),
        r#"models[0] ("a").licence"#,
        "empty",
    );
    refused(
        &one(entry("a", "a.gguf").replace("\"licence\"", "\"url\": \"x\", \"licence\"")),
        r#"models[0] ("a")"#,
        "unknown field",
    );
    refused(
        &one(r#"{"name": "a"}"#.into()),
        r#"models[0] ("a")"#,
        "missing field",
    );
    refused(r#"{"models": [7]}"#, "models[0]", "expected struct");
}
