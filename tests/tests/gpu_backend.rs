//! The GPU backend through the engine: `SHOW BACKENDS`, `USE … BACKEND gpu|cpu|auto`,
//! `SET backend = …`, INFER on the GPU equal to the CPU within 1e-3, TRACE … FOR
//! contributions adding up to the GPU's logit, and refusals that leave the connection
//! usable. Tests needing an adapter skip with a printed reason when there is none, unless
//! `LQL_REQUIRE_GPU=1` (CI, which installs lavapipe).

use lql::{Connection, Rows};

fn model() -> String {
    lql_tests::default_model_path()
        .to_string_lossy()
        .into_owned()
}

fn f(rows: &Rows, i: usize, col: &str) -> f64 {
    rows.row(i).unwrap().get::<_, f64>(col).unwrap()
}

use lql_tests::has_gpu;

fn active(conn: &Connection) -> String {
    let rows = conn.execute("SHOW BACKENDS").unwrap();
    (0..rows.len())
        .find(|&i| rows.row(i).unwrap().get::<_, bool>("active").unwrap())
        .map(|i| rows.row(i).unwrap().get::<_, String>("backend").unwrap())
        .unwrap_or_default()
}

#[test]
fn show_backends_lists_the_cpu_first_and_needs_no_model() {
    let conn = Connection::open_in_memory().unwrap();
    let rows = conn.execute("SHOW BACKENDS").unwrap();
    assert_eq!(
        rows.column_names(),
        ["backend", "adapter", "api", "kind", "driver", "active"]
    );
    let first = rows.row(0).unwrap();
    assert_eq!(first.get::<_, String>("backend").unwrap(), "cpu");
    assert!(
        first.get::<_, bool>("active").unwrap(),
        "the CPU is the default"
    );
}

#[test]
fn bad_backend_names_are_syntax_errors_with_suggestions() {
    let conn = Connection::open_in_memory().unwrap();
    let e = conn.execute("SET backend = 'tpu'").unwrap_err();
    assert!(e.to_string().contains("unknown backend `tpu`"), "{e}");
    let e = conn.execute("SET backnd = 'gpu'").unwrap_err();
    assert!(e.to_string().contains("unknown setting"), "{e}");
    let e = conn.execute("USE \"x.gguf\" BACKEND gpx").unwrap_err();
    assert!(e.to_string().contains("unknown backend `gpx`"), "{e}");
    // The connection is still usable, and the setting round-trips through the printer.
    conn.execute("SET backend = 'cpu'").unwrap();
    let s = lql_grammar::parse_statement("set BACKEND = auto").unwrap();
    assert_eq!(s.kind.to_string(), "SET backend = \"auto\"");
    let s = lql_grammar::parse_statement("USE \"m.gguf\" backend GPU").unwrap();
    assert_eq!(s.kind.to_string(), "USE \"m.gguf\" BACKEND gpu");
}

/// The default model bound on the CPU and on the GPU (None, with the reason printed, when
/// there is no adapter).
fn bound_pair() -> Option<(Connection, Connection)> {
    let cpu = Connection::open_in_memory().unwrap();
    if !has_gpu(&cpu) {
        return None;
    }
    let q = lql::quote(&model());
    cpu.execute(&format!("USE {q}")).unwrap();
    let gpu = Connection::open_in_memory().unwrap();
    gpu.execute(&format!("USE {q} BACKEND gpu")).unwrap();
    Some((cpu, gpu))
}

#[test]
fn infer_and_trace_for_on_the_gpu_match_the_cpu() {
    let Some((cpu, gpu)) = bound_pair() else {
        return;
    };
    let prompt = "'The capital of France is'";
    let a = cpu.execute(&format!("INFER {prompt} TOP 3")).unwrap();
    let b = gpu.execute(&format!("INFER {prompt} TOP 3")).unwrap();
    assert_eq!(active(&gpu), "gpu");
    for i in 0..3 {
        let (ra, rb) = (a.row(i).unwrap(), b.row(i).unwrap());
        assert_eq!(
            ra.get::<_, i64>("token_id").unwrap(),
            rb.get::<_, i64>("token_id").unwrap()
        );
        let d = (f(&a, i, "logit") - f(&b, i, "logit")).abs();
        assert!(d < 1e-3, "rank {i}: |Δ logit| {d}");
    }
    // TRACE … FOR: the contributions of every layer add up to the GPU's logit.
    let token: String = b.row(0).unwrap().get("token").unwrap();
    let logit = f(&b, 0, "logit");
    let tr = gpu
        .execute(&format!("TRACE {prompt} FOR {}", lql::quote(&token)))
        .unwrap();
    let sum: f64 = (0..tr.len()).map(|i| f(&tr, i, "contrib")).sum();
    eprintln!("gpu TRACE FOR {token:?}: Σ contrib {sum} vs logit {logit}");
    assert!(
        (sum - logit).abs() <= 1e-3,
        "Σ contrib {sum} vs logit {logit}"
    );
    // SET backend moves the bound model to the CPU; the answer stays the same.
    gpu.execute("SET backend = 'cpu'").unwrap();
    let c = gpu.execute(&format!("INFER {prompt} TOP 1")).unwrap();
    assert_eq!(active(&gpu), "cpu");
    assert!((f(&c, 0, "logit") - f(&a, 0, "logit")).abs() < 1e-6);
}

#[test]
fn auto_runs_on_the_gpu_when_it_can() {
    let conn = Connection::open_in_memory().unwrap();
    let gpu = has_gpu(&conn);
    conn.execute("SET backend = 'auto'").unwrap();
    // EXPLAIN PLAN of the USE shows where `auto` resolves; the passes then run there.
    let use_model = format!("USE {}", lql::quote(&model()));
    let rows = conn.execute(&format!("EXPLAIN PLAN {use_model}")).unwrap();
    let plan = (0..rows.len())
        .map(|i| rows.row(i).unwrap().get::<_, String>("plan").unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    let shown = if gpu {
        "backend=auto→gpu"
    } else {
        "backend=auto→cpu"
    };
    assert!(plan.contains(shown), "{plan}");
    assert_eq!(plan.contains("host-fallback"), gpu, "{plan}");
    conn.execute(&use_model).unwrap();
    conn.execute("INFER 'Hello' TOP 1").unwrap();
    assert_eq!(active(&conn), if gpu { "gpu" } else { "cpu" });
}

/// The Forward node's `read=`, `encodings=` and `layers_run=` in EXPLAIN ANALYZE.
fn forward_reads(conn: &Connection, statement: &str) -> String {
    let rows = conn
        .execute(&format!("EXPLAIN ANALYZE {statement}"))
        .unwrap();
    let line = (0..rows.len())
        .map(|i| rows.row(i).unwrap().get::<_, String>("plan").unwrap())
        .find(|l| l.trim_start().starts_with("Forward"))
        .unwrap_or_else(|| panic!("no Forward line in {rows:?}"));
    // `rows=… time=…ms read=63.28 MiB encodings=Q4_1,Q8_0 layers_run=30]`: from read= on.
    let costs = line.split(" [").nth(1).unwrap_or_default();
    costs.find("read=").map_or(String::new(), |i| {
        costs[i..].trim_end_matches(']').to_string()
    })
}

#[test]
fn the_gpu_pass_reports_the_operand_bytes_the_host_pass_reads() {
    let Some((cpu, gpu)) = bound_pair() else {
        return;
    };
    // The device's kernels read every matrix of every layer, the head and one embedding row
    // per token: what the host pass's views are counted as, per encoding.
    for statement in [
        "INFER 'The capital of France is' TOP 3",
        "WALK 'The capital of France is' MODE RESIDUAL LAYERS 20-22 TOP 3",
    ] {
        let (a, b) = (
            forward_reads(&cpu, statement),
            forward_reads(&gpu, statement),
        );
        eprintln!("{statement}: cpu {a} · gpu {b}");
        assert!(
            a.contains("read="),
            "{statement}: the host pass read nothing: {a}"
        );
        assert_eq!(a, b, "{statement}");
    }
}
