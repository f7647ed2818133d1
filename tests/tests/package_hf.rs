//! `USE "hf://org/repo@rev"` with the network off (`LQL_OFFLINE=1`): an empty package cache
//! gives one clear error naming the reference and the folder to fill; a filled cache with one corrupted artifact is
//! refused by checksum; a valid one loads. This binary sets `LQL_HOME`, so it holds this
//! one test only.

use lql::Connection;

#[test]
fn hf_references_resolve_from_the_local_cache_and_are_verified() {
    let home = tempfile::tempdir().unwrap();
    std::env::set_var("LQL_HOME", home.path());
    std::env::set_var("LQL_OFFLINE", "1");
    let reference = "hf://meshllm/SmolLM2-135M-Instruct-Q4_1-layers@v1";
    let c = Connection::open_in_memory().unwrap();

    let err = c
        .execute(&format!("USE \"{reference}\""))
        .unwrap_err()
        .to_string();
    let dir = home
        .path()
        .join("packages/meshllm/SmolLM2-135M-Instruct-Q4_1-layers/v1");
    assert!(err.contains(reference), "{err}");
    assert!(err.contains(&dir.display().to_string()), "{err}");
    assert!(err.contains("network is off"), "{err}");

    lql_tests::write_default_package(&dir);
    // One corrupted artifact, same size: refused by its checksum even for a stage that
    // only needs it.
    let f = dir.join("layers/layer-00012.gguf");
    let good = std::fs::read(&f).unwrap();
    let mut bad = good.clone();
    let n = bad.len();
    bad[n / 2] ^= 0x55;
    std::fs::write(&f, &bad).unwrap();
    let err = c
        .execute(&format!("USE \"{reference}\" LAYERS 10-19"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("artifact_sha256"), "{err}");
    std::fs::write(&f, &good).unwrap();
    c.execute(&format!("USE \"{reference}\" LAYERS 10-19"))
        .unwrap();
    assert_eq!(c.bound_package_files().unwrap().len(), 11);
    // A cache hit of the checksum cache is still a verified load.
    c.execute(&format!("USE \"{reference}\"")).unwrap();
    let rows = c
        .execute("INFER \"The capital of France is\" TOP 1")
        .unwrap();
    assert_eq!(rows.rows.len(), 1);
}
