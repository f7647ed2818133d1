//! ANALYZE FEATURES on SmolLM2 over a small corpus (`serve/tests/fixtures/corpus.txt`):
//! the stored top contexts and histograms agree with activations captured by another path
//! (TRACE … POSITIONS ALL SAVE, whose `.trace` file holds every position's activations);
//! the statistics are stored once and reused; the tables need WHERE corpus and push the
//! layers and features down; and the statement refuses what it cannot describe.

use std::path::PathBuf;

use lql::{Connection, Rows, Value};

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("analyze_features");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn corpus() -> String {
    let path = scratch("corpus.txt");
    std::fs::copy(
        lql_tests::repo_root().join("serve/tests/fixtures/corpus.txt"),
        &path,
    )
    .unwrap();
    path.display().to_string()
}

fn get(rows: &Rows, row: usize, name: &str) -> Value {
    let c = rows
        .columns
        .iter()
        .position(|c| c.name == name)
        .unwrap_or_else(|| panic!("no column {name}"));
    rows.rows[row][c].clone()
}

fn int(v: Value) -> i64 {
    v.as_i64().unwrap_or_else(|| panic!("not an int: {v:?}"))
}

/// Runs ANALYZE FEATURES so that it computes (a stored file from an earlier run is removed
/// first), and returns its row.
fn analyze_fresh(c: &Connection, statement: &str) -> Rows {
    let first = c.execute(statement).unwrap();
    if get(&first, 0, "reused") != Value::Bool(true) {
        return first;
    }
    let Value::Text(stats) = get(&first, 0, "stats") else {
        panic!("no stats path")
    };
    std::fs::remove_file(stats).unwrap();
    let again = c.execute(statement).unwrap();
    assert_eq!(get(&again, 0, "reused"), Value::Bool(false));
    again
}

#[test]
fn stored_contexts_and_histograms_agree_with_traced_activations() {
    let c = lql_tests::connect_default();
    let corpus = corpus();
    let layer = 20;
    let statement = format!(
        "ANALYZE FEATURES FROM {} LAYERS {layer}-{layer} TOP 3",
        lql::quote(&corpus)
    );
    let summary = analyze_fresh(&c, &statement);
    let tokens = int(get(&summary, 0, "tokens"));
    assert_eq!(int(get(&summary, 0, "documents")), 100);
    assert_eq!(int(get(&summary, 0, "features")), 1536);
    // Unchanged corpus: stored once, reused.
    let again = c.execute(&statement).unwrap();
    assert_eq!(get(&again, 0, "reused"), Value::Bool(true));

    let q = format!("corpus = {} AND layer = {layer}", lql::quote(&corpus));
    // Every feature's histogram counts every observed token once.
    let sums = c
        .execute(&format!("SELECT feature, sum(count) AS n FROM histograms WHERE {q} AND feature < 64 GROUP BY feature"))
        .unwrap();
    assert_eq!(sums.rows.len(), 64);
    for r in 0..64 {
        assert_eq!(
            int(get(&sums, r, "n")),
            tokens,
            "feature {}",
            int(get(&sums, r, "feature"))
        );
    }
    // The top contexts of a few features, against TRACE's activations of their documents.
    let text: Vec<&str> = std::fs::read_to_string(&corpus)
        .unwrap()
        .leak()
        .lines()
        .collect();
    let mut checked = 0;
    for feature in [0usize, 7, 100, 412, 1000, 1535] {
        let top = c
            .execute(&format!("SELECT rank, activation, document, position, token FROM contexts WHERE {q} AND feature = {feature} ORDER BY rank"))
            .unwrap();
        assert_eq!(top.rows.len(), 3, "feature {feature} keeps TOP 3 contexts");
        let acts: Vec<f64> = (0..3)
            .map(|r| get(&top, r, "activation").as_f64().unwrap())
            .collect();
        assert!(
            acts.windows(2).all(|w| w[0] >= w[1]),
            "ranked by activation: {acts:?}"
        );
        let doc = int(get(&top, 0, "document")) as usize;
        let position = int(get(&top, 0, "position")) as usize;
        let trace = scratch(&format!("f{feature}.trace"));
        c.execute(&format!(
            "TRACE {} POSITIONS ALL SAVE {}",
            lql::quote(text[doc - 1]),
            lql::quote(&trace.display().to_string())
        ))
        .unwrap();
        let file = lql_exec::trace::TraceFile::load(&trace).unwrap();
        let n = file.tokens().len();
        if n > 128 {
            continue; // a longer document ran as several contexts; TRACE runs it whole
        }
        let a = file.array("activation").expect("activations saved");
        let ffn = a.len() / (30 * n);
        let at = |p: usize| a[(layer * n + p) * ffn + feature] as f64;
        let (best, arg) = (0..n)
            .map(|p| (at(p), p))
            .fold((f64::NEG_INFINITY, 0), |m, x| if x.0 > m.0 { x } else { m });
        assert_eq!(
            arg, position,
            "feature {feature}: most active position of document {doc}"
        );
        assert!(
            (best - acts[0]).abs() <= 1e-6 * best.abs().max(1.0),
            "feature {feature}: {best} vs stored {}",
            acts[0]
        );
        checked += 1;
    }
    assert!(
        checked >= 4,
        "only {checked} features checked against TRACE"
    );
}

#[test]
fn the_tables_need_a_corpus_and_say_how_to_get_its_statistics() {
    let c = lql_tests::connect_default();
    let e = c
        .execute("SELECT * FROM contexts WHERE layer = 1")
        .unwrap_err();
    assert!(e.message.contains("WHERE corpus"), "{e}");
    let never = scratch("never-analysed.txt").display().to_string();
    let e = c
        .execute(&format!(
            "SELECT * FROM histograms WHERE corpus = {}",
            lql::quote(&never)
        ))
        .unwrap_err();
    assert!(e.message.contains("no feature statistics"), "{e}");
    assert!(
        e.help.iter().any(|h| h.contains("ANALYZE FEATURES FROM")),
        "{e:?}"
    );
    let e = c
        .execute("ANALYZE FEATURES FROM \"/nonexistent/corpus.txt\"")
        .unwrap_err();
    assert!(e.message.contains("/nonexistent/corpus.txt"), "{e}");
    // Pushdown: a feature's page reads one feature.
    let plan = c
        .execute(&format!(
            "EXPLAIN PLAN SELECT * FROM contexts WHERE corpus = {} AND layer = 3 AND feature = 9",
            lql::quote(&never)
        ))
        .unwrap();
    let text: Vec<String> = plan.rows.iter().map(|r| r[0].to_string()).collect();
    assert!(
        text.iter().any(|l| l.contains("TableScan contexts")
            && l.contains("layers=[3]")
            && l.contains("features=[9]")),
        "{text:?}"
    );
    // Patches in force: the model's own features are not what would run.
    c.execute("INSERT INTO edges (entity, relation, target) VALUES (\"Atlantis\", \"capital\", \"Poseidonia\")").unwrap();
    let e = c
        .execute(&format!("ANALYZE FEATURES FROM {}", lql::quote(&corpus())))
        .unwrap_err();
    assert!(e.message.contains("patches or edits are in force"), "{e}");
}
