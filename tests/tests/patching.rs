//! PATCH (activation patching) on SmolLM2 and on every family's tiny GGUF: patching a prompt
//! with itself changes no logit (bit for bit); the IOI grid over 30 layers × 12 positions of
//! the residual stream equals the numpy reference (`tests/tools/reference_patching.py`,
//! fixture `tests/fixtures/patching/`) within 1e-4 per cell; noise is seeded and restoring
//! every embedding row undoes it exactly; bad input gets a clear error.

use std::path::PathBuf;
use std::sync::Arc;

use lql::{Connection, Rows};
use lql_exec::activation_patch::{self as ap, Cell};
use lql_exec::{Executor, LogitsWanted, Site};
use lql_storage::model::OperandSource;
use serde_json::Value as Json;

const CLEAN: &str = "After Mary and John went out, John gave a drink to";
const CORRUPTED: &str = "After Mary and John went out, Mary gave a drink to";

fn connect() -> Connection {
    lql_tests::connect_default()
}

fn executor(path: &std::path::Path) -> Executor {
    let model = Arc::new(lql_storage::import::open(path).unwrap());
    let src: Arc<dyn OperandSource> = model;
    Executor::new(src, 0).unwrap()
}

fn family_path(family: &str) -> PathBuf {
    lql_tests::repo_root()
        .join("tests/fixtures/families")
        .join(family)
        .join("model.gguf")
}

fn col(rows: &Rows, name: &str) -> Vec<f64> {
    rows.iter()
        .map(|r| r.get::<_, f64>(name).unwrap())
        .collect()
}

fn err(conn: &Connection, sql: &str) -> String {
    match conn.execute(sql) {
        Ok(_) => panic!("{sql} should fail"),
        Err(e) => e.to_string(),
    }
}

/// Through the executor: every site of a few layers and positions restored from a run of
/// the same prompt gives logits bit-identical to a plain pass, on SmolLM2 and every family.
#[test]
fn self_patching_changes_no_logit_on_any_family() {
    let mut models = vec![("smollm2".to_string(), lql_tests::default_model_path())];
    for f in [
        "llama3", "qwen3", "qwen3moe", "gemma2", "gemma3", "phi3", "gpt2", "gptneox", "olmo2",
    ] {
        models.push((f.to_string(), family_path(f)));
    }
    for (name, path) in models {
        let exec = executor(&path);
        let s = exec.surface().clone();
        let ids: Vec<u32> = (0..7).map(|i| (i * 37 + 11) % s.vocab as u32).collect();
        let plain = exec
            .observe_plain(&ids)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let (clean, rec) = ap::record(&exec, &ids, None, &Site::ALL).unwrap();
        assert_eq!(
            clean.values, plain,
            "{name}: a recording run changed the logits"
        );
        let layers = [0, s.n_layers / 2, s.n_layers - 1];
        for &layer in &layers {
            for site in Site::ALL {
                if rec.rows(site, layer).is_none() {
                    // resid_mid of a parallel block.
                    continue;
                }
                for position in [Some(0), Some(6), None] {
                    let head = (site == Site::HeadOutputs).then_some(s.n_heads - 1);
                    let cell = Cell {
                        layer,
                        site,
                        position,
                        head,
                        window: 1 + layer % 3,
                    };
                    let got = ap::run_patched(&exec, &ids, None, &rec, cell).unwrap();
                    assert_eq!(got.values, plain, "{name}: {cell:?} changed the logits");
                }
            }
        }
    }
}

trait PlainLogits {
    fn observe_plain(&self, ids: &[u32]) -> lql_exec::Result<Vec<f32>>;
}

impl PlainLogits for Executor {
    /// The last position's logits of a pass with no observer.
    fn observe_plain(&self, ids: &[u32]) -> lql_exec::Result<Vec<f32>> {
        let mut v = self.session().extend(ids, LogitsWanted::Last, None)?;
        Ok(v.pop().unwrap().values)
    }
}

#[test]
fn patching_a_prompt_with_itself_leaves_every_cell_at_the_clean_metric() {
    let conn = connect();
    for component in ["resid_pre", "resid_mid", "attn_out", "mlp_out", "head"] {
        let rows = conn
            .execute(&format!(
                "PATCH {q} FROM {q} LAYERS 0-29 POSITIONS LAST COMPONENT {component} METRIC LOGIT_DIFF(\" Mary\", \" John\")",
                q = lql::quote(CLEAN)
            ))
            .unwrap();
        let want = if component == "head" { 30 * 9 } else { 30 };
        assert_eq!(rows.len(), want, "{component}");
        let clean = col(&rows, "clean");
        for (name, v) in [
            ("corrupted", col(&rows, "corrupted")),
            ("patched", col(&rows, "patched")),
        ] {
            assert!(
                v.iter()
                    .zip(&clean)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{component}: {name} differs from clean"
            );
        }
        assert!(rows.iter().all(|r| r.value("recovered").unwrap().is_null()));
    }
}

fn fixture() -> Json {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/patching/smollm2_ioi_resid_pre.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[test]
fn ioi_grid_matches_numpy() {
    let conn = connect();
    let fx = fixture();
    let tokens = conn
        .execute(&format!("TOKENIZE {}", lql::quote(CORRUPTED)))
        .unwrap();
    let ids: Vec<i64> = tokens.iter().map(|r| r.get("token_id").unwrap()).collect();
    let want: Vec<i64> = fx["corrupted_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_eq!(ids, want, "the prompt tokenizes as the fixture's");
    let rows = conn
        .execute(&format!(
            "PATCH {} FROM {} METRIC LOGIT_DIFF(\" Mary\", \" John\")",
            lql::quote(CORRUPTED),
            lql::quote(CLEAN)
        ))
        .unwrap();
    let cells = fx["cells"].as_array().unwrap();
    assert_eq!(rows.len(), cells.len());
    assert_eq!(rows.len(), 30 * 12);
    let clean = fx["clean"].as_f64().unwrap();
    let corrupted = fx["corrupted"].as_f64().unwrap();
    let mut worst = 0.0f64;
    for (r, c) in rows.iter().zip(cells) {
        let c = c.as_array().unwrap();
        assert_eq!(r.get::<_, i64>("layer").unwrap(), c[0].as_i64().unwrap());
        assert_eq!(r.get::<_, i64>("position").unwrap(), c[1].as_i64().unwrap());
        for (got, want) in [
            (r.get::<_, f64>("clean").unwrap(), clean),
            (r.get::<_, f64>("corrupted").unwrap(), corrupted),
            (r.get::<_, f64>("patched").unwrap(), c[2].as_f64().unwrap()),
        ] {
            worst = worst.max((got - want).abs());
        }
    }
    eprintln!("PATCH grid vs numpy: worst |Δ| = {worst:e}");
    assert!(worst <= 1e-4, "worst cell differs by {worst}");
    // The grid says what IOI studies find: the name position carries the answer early,
    // the last position late.
    let rec = |layer: i64, pos: i64| -> f64 {
        rows.iter()
            .find(|r| {
                r.get::<_, i64>("layer").unwrap() == layer
                    && r.get::<_, i64>("position").unwrap() == pos
            })
            .unwrap()
            .get("recovered")
            .unwrap()
    };
    assert!(rec(0, 7) > 0.9 && rec(29, 11) > 0.9);
    assert!(rec(0, 11).abs() < 0.05 && rec(29, 7).abs() < 0.05);
}

#[test]
fn noise_is_seeded_and_restoring_the_embedding_undoes_it() {
    let conn = connect();
    let q = "PATCH \"The Eiffel Tower is in the city of\" NOISE ON \"Eiffel Tower\" LAYERS 0-1 POSITIONS TOGETHER";
    let a = conn.execute(q).unwrap();
    let b = conn.execute(q).unwrap();
    assert_eq!(
        col(&a, "corrupted"),
        col(&b, "corrupted"),
        "same seed, same noise"
    );
    let clean = col(&a, "clean");
    let corrupted = col(&a, "corrupted");
    assert!(
        corrupted[0] < clean[0] - 0.05,
        "noise on the subject lowers the clean answer's probability: {} → {}",
        clean[0],
        corrupted[0]
    );
    // Layer 0's resid_pre at every position is the whole input: restoring it is the
    // clean run.
    assert_eq!(col(&a, "patched")[0].to_bits(), clean[0].to_bits());
    let other = conn
        .execute(&q.replace("POSITIONS TOGETHER", "POSITIONS TOGETHER SEED 5"))
        .unwrap();
    assert_ne!(
        col(&other, "corrupted"),
        corrupted,
        "another seed, other noise"
    );
}

/// WINDOW n restores n layers around each cell's layer (ROME's window): restoring the
/// residual stream at every position over a window makes the run clean from the window's
/// first layer, so every cell gives the clean metric exactly; WINDOW 1 is the plain grid.
#[test]
fn windows_restore_layers_around_the_cell() {
    let conn = connect();
    let q = "PATCH \"The Eiffel Tower is in the city of\" NOISE ON \"Eiffel Tower\" LAYERS 2-8 POSITIONS TOGETHER";
    let rows = conn.execute(&format!("{q} WINDOW 5")).unwrap();
    for r in rows.iter() {
        assert_eq!(
            r.get::<_, f64>("patched").unwrap(),
            r.get::<_, f64>("clean").unwrap()
        );
    }
    let one = conn
        .execute(&format!("{q} COMPONENT mlp_out WINDOW 1"))
        .unwrap();
    let plain = conn.execute(&format!("{q} COMPONENT mlp_out")).unwrap();
    assert_eq!(one, plain);
    // A window of MLP outputs restores more than one layer's.
    let wide = conn
        .execute(&format!("{q} COMPONENT mlp_out WINDOW 6"))
        .unwrap();
    assert_ne!(col(&wide, "patched"), col(&plain, "patched"));
    let plan = conn.execute(&format!("EXPLAIN {q} WINDOW 6")).unwrap();
    let text: Vec<String> = plan.iter().map(|r| r.get("plan").unwrap()).collect();
    assert!(text.join("\n").contains("window=6"), "{text:?}");
    assert!(err(&conn, &format!("{q} WINDOW 31")).contains("WINDOW 31 is out of range"));
}

#[test]
fn bad_input_gets_a_clear_error() {
    let conn = connect();
    let e = err(&conn, "PATCH \"a b c\" FROM \"a b\"");
    assert!(e.contains("the same count"), "{e}");
    let e = err(&conn, "PATCH \"a b\" FROM \"a c\" POSITION 5");
    assert!(e.contains("POSITION 5 is past the prompt"), "{e}");
    let e = err(&conn, "PATCH \"a b\" FROM \"a c\" COMPONENT head 12");
    assert!(e.contains("head 12 does not exist"), "{e}");
    let e = err(
        &conn,
        "PATCH \"a b\" FROM \"a c\" METRIC LOGIT(\" Mary and\")",
    );
    assert!(e.contains("it must be exactly one token"), "{e}");
    let e = err(&conn, "PATCH \"a b\" NOISE ON \"zebra\"");
    assert!(e.contains("the prompt does not contain it"), "{e}");
    let neox = Connection::open_in_memory().unwrap();
    neox.execute(&format!(
        "USE {}",
        lql::quote(&family_path("gptneox").to_string_lossy())
    ))
    .unwrap();
    let e = err(&neox, "PATCH \"a b\" FROM \"a c\" COMPONENT resid_mid");
    assert!(e.contains("resid_mid does not exist"), "{e}");
}

#[test]
fn explain_analyze_counts_the_runs() {
    let conn = connect();
    let rows = conn
        .execute(&format!(
            "EXPLAIN ANALYZE PATCH {} FROM {} LAYERS 3-4 POSITIONS LAST",
            lql::quote(CORRUPTED),
            lql::quote(CLEAN)
        ))
        .unwrap();
    let text: Vec<String> = rows
        .iter()
        .map(|r| r.get::<_, String>("plan").unwrap())
        .collect();
    let text = text.join("\n");
    assert!(text.contains("ActivationPatch layers=3-4"), "{text}");
    // Four passes (clean, corrupted, two cells) of 30 layers each.
    assert!(text.contains("layers_run=120"), "{text}");
}

#[test]
fn save_draws_the_grid() {
    let conn = connect();
    let dir = std::env::temp_dir().join(format!("lql-patch-svg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("grid.svg");
    let rows = conn
        .execute(&format!(
            "PATCH {} FROM {} LAYERS 28-29 METRIC LOGIT_DIFF(\" Mary\", \" John\") SAVE {}",
            lql::quote(CORRUPTED),
            lql::quote(CLEAN),
            lql::quote(&path.to_string_lossy())
        ))
        .unwrap();
    assert_eq!(rows.len(), 24);
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.starts_with("<svg"));
    assert_eq!(svg.matches("<rect").count(), 1 + 24, "background + cells");
    assert!(
        svg.contains("L29") && svg.contains("11:·to"),
        "row and column labels"
    );
    let e = err(
        &conn,
        &format!("PATCH \"a b\" FROM \"a c\" SAVE {}", lql::quote("grid.png")),
    );
    assert!(e.contains("SVG heat map"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
