//! How fast a workbench feature page opens once its corpus statistics exist: the two
//! `/v1/lql` requests the page makes (the feature's labels with its gate and up tokens;
//! then its top contexts and histogram), against an in-process `lql serve` on the default
//! model.
//!
//! The corpus is `LQL_BENCH_CORPUS` (a text file, one document per line), else the serve
//! tests' fixture; its statistics are computed first if they are not stored (ANALYZE
//! FEATURES, all layers; a 1 MB corpus takes minutes). Reading one feature's statistics
//! does not grow with the corpus (the stored file is read at the feature's offsets), only
//! with the length of the documents its contexts come from (tokenized to show them).
//!
//! `cargo bench -p lql-serve --bench feature_page`

use criterion::{criterion_group, Criterion};

fn post(client: &reqwest::blocking::Client, url: &str, statements: &str) -> serde_json::Value {
    let r = client
        .post(format!("{url}/v1/lql"))
        .json(&serde_json::json!({ "statements": statements }))
        .send()
        .expect("request");
    assert!(r.status().is_success(), "{statements}: {}", r.status());
    r.json().expect("JSON")
}

fn feature_page(c: &mut Criterion) {
    let corpus = std::env::var("LQL_BENCH_CORPUS").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/corpus.txt").to_string()
    });
    let corpus = std::fs::canonicalize(&corpus)
        .expect("the corpus exists")
        .display()
        .to_string();
    let dir = std::path::Path::new(&corpus)
        .parent()
        .unwrap()
        .to_path_buf();
    let mut config = lql_serve::Config::new(lql_tests::default_model_path().display().to_string());
    config.port = 0;
    config.allow_writes = Some(dir);
    let server = lql_serve::Server::start(config).expect("the server starts");
    let url = server.url();
    let client = reqwest::blocking::Client::builder()
        .timeout(std::time::Duration::from_secs(3600))
        .build()
        .unwrap();
    let analyzed = post(
        &client,
        &url,
        &format!("ANALYZE FEATURES FROM {}", lql::quote(&corpus)),
    );
    eprintln!("corpus statistics: {}", analyzed["results"][0]["rows"][0]);
    let (layer, feature) = (20, 412);
    let labels = format!("SELECT top_token, c_score, down_tokens, gate_tokens, up_tokens FROM features WHERE layer = {layer} AND feature = {feature}");
    let where_ = format!(
        "corpus = {} AND layer = {layer} AND feature = {feature}",
        lql::quote(&corpus)
    );
    let stats = format!(
        "SELECT rank, activation, document, position, before, token, after FROM contexts WHERE {where_} ORDER BY rank; \
         SELECT lo, hi, count FROM histograms WHERE {where_}"
    );
    c.bench_function("feature_page_requests", |b| {
        b.iter(|| {
            post(&client, &url, &labels);
            post(&client, &url, &stats);
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = feature_page
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
