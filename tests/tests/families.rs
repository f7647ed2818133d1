//! The statements on every model family's tiny GGUF (`tests/fixtures/families/`): USE,
//! INFER and GENERATE from text, WALK, EXPLAIN WALK and DESCRIBE, TRACE … FOR (the
//! contributions add up to INFER's logit), an INSERT … AT LAYER that makes the edit prompt
//! give its target, and the same statements on the GPU backend.
//! Logit parity with the references is `exec/tests/families.rs`.

use lql::{Connection, Rows, Value};

const FAMILIES: [&str; 9] = [
    "llama3", "qwen3", "qwen3moe", "gemma2", "gemma3", "phi3", "gpt2", "gptneox", "olmo2",
];

const PROMPT: &str = "The quick brown fox jumps over the lazy dog.";

fn conn(family: &str) -> Connection {
    let path = lql_tests::repo_root()
        .join("tests/fixtures/families")
        .join(family)
        .join("model.gguf");
    let c = Connection::open_in_memory().unwrap();
    c.execute(&format!("USE {}", lql::quote(&path.to_string_lossy())))
        .unwrap_or_else(|e| panic!("{family}: USE: {e}"));
    c
}

fn golden(family: &str) -> serde_json::Value {
    let p = lql_tests::repo_root()
        .join("tests/fixtures/families")
        .join(family)
        .join("golden.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn f(rows: &Rows, i: usize, col: &str) -> f64 {
    rows.row(i).unwrap().get::<_, f64>(col).unwrap()
}

#[test]
fn infer_and_generate_from_text_follow_the_references() {
    for family in FAMILIES {
        let c = conn(family);
        let g = golden(family);
        let top1 = g["llamacpp_top1"].as_array().unwrap();
        let last = top1.last().unwrap().as_i64().unwrap();
        let r = c
            .execute(&format!("INFER {} TOP 3", lql::quote(PROMPT)))
            .unwrap_or_else(|e| panic!("{family}: INFER: {e}"));
        let id: i64 = r.row(0).unwrap().get("token_id").unwrap();
        assert_eq!(
            id, last,
            "{family}: INFER's top-1 (the prompt tokenizes as llama.cpp's)"
        );
        let r = c
            .execute(&format!("GENERATE {} MAX 16", lql::quote(PROMPT)))
            .unwrap_or_else(|e| panic!("{family}: GENERATE: {e}"));
        let col = r
            .column_names()
            .iter()
            .position(|c| *c == "token_ids")
            .unwrap();
        let Value::List(got) = &r.rows[0][col] else {
            panic!("{family}: token_ids is not a list");
        };
        let want: Vec<Value> = g["reference_greedy"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| Value::Int(v.as_i64().unwrap()))
            .collect();
        assert_eq!(got, &want, "{family}: GENERATE's greedy tokens");
    }
}

#[test]
fn walk_explain_walk_and_describe_answer() {
    for family in FAMILIES {
        let c = conn(family);
        let q = lql::quote(PROMPT);
        for stmt in [format!("WALK {q} TOP 3"), format!("EXPLAIN WALK {q} TOP 3")] {
            let r = c
                .execute(&stmt)
                .unwrap_or_else(|e| panic!("{family}: {stmt}: {e}"));
            assert!(!r.is_empty(), "{family}: {stmt} gave no rows");
        }
        // A random model has no edges strong enough to list: DESCRIBE answers, maybe empty.
        c.execute("DESCRIBE \"fox\"")
            .unwrap_or_else(|e| panic!("{family}: DESCRIBE: {e}"));
    }
}

#[test]
fn trace_contributions_add_up_to_the_logit() {
    for family in FAMILIES {
        let c = conn(family);
        let q = lql::quote(PROMPT);
        let infer = c.execute(&format!("INFER {q} TOP 1")).unwrap();
        let token: String = infer.row(0).unwrap().get("token").unwrap();
        let logit = f(&infer, 0, "logit");
        let tr = match c.execute(&format!("TRACE {q} FOR {}", lql::quote(&token))) {
            Ok(t) => t,
            Err(e) if e.to_string().contains("exactly one token") => continue,
            Err(e) => panic!("{family}: TRACE: {e}"),
        };
        let sum: f64 = (0..tr.len()).map(|i| f(&tr, i, "contrib")).sum();
        // A final softcap bends the logit after the sum: compare before the cap.
        let cap = golden_cap(family);
        let want = if cap > 0.0 {
            cap * ((logit / cap).atanh())
        } else {
            logit
        };
        assert!(
            (sum - want).abs() <= 1e-4 * want.abs().max(10.0),
            "{family}: Σ contrib {sum} vs logit {want}"
        );
    }
}

/// The most likely next token after `prompt`.
fn top_token(c: &Connection, prompt: &str) -> String {
    let top = c
        .execute(&format!("INFER {} TOP 1", lql::quote(prompt)))
        .unwrap();
    top.row(0).unwrap().get("token").unwrap()
}

fn golden_cap(family: &str) -> f64 {
    if family == "gemma2" {
        30.0
    } else {
        0.0
    }
}

#[test]
fn insert_at_a_layer_makes_the_prompt_give_its_target() {
    for family in FAMILIES {
        let c = conn(family);
        let prompt = "The quick brown fox jumps over the lazy";
        let r = c.execute(&format!(
            "INSERT INTO edges (entity, relation, target, prompt) VALUES ('fox', 'jumps_over', ' the', {}) AT LAYER 1",
            lql::quote(prompt)
        ));
        if let Err(e) = &r {
            panic!("{family}: INSERT: {e}");
        }
        assert_eq!(top_token(&c, prompt), " the", "{family}: the edit's target");
    }
}

/// An INSERT without AT LAYER (the subject write, its value optimised through the layers
/// above by the gradient pass, then the last-token feature) edits every family, the bank
/// model (qwen3moe) included.
#[test]
fn insert_with_the_subject_write_makes_the_prompt_give_its_target() {
    let prompt = "The quick brown fox jumps over the lazy";
    let insert = format!(
        "INSERT INTO edges (entity, relation, target, prompt) VALUES ('fox', 'jumps_over', ' the', {})",
        lql::quote(prompt)
    );
    for family in FAMILIES {
        let c = conn(family);
        let r = c.execute(&insert);
        let detail: String = r
            .unwrap_or_else(|e| panic!("{family}: INSERT: {e}"))
            .row(0)
            .unwrap()
            .get("detail")
            .unwrap();
        assert!(detail.contains("(subject)"), "{family}: {detail}");
        assert_eq!(top_token(&c, prompt), " the", "{family}: the edit's target");
    }
}

/// An edit of a block whose added features cannot be FFN rows (a norm after the FFN, an FFN
/// without a gate, banks of experts) is kept as a patch: BEGIN PATCH … SAVE PATCH writes it
/// and APPLY PATCH on a fresh connection gives the same logits, while COMPILE, which folds
/// edits into the FFN tensors, refuses by name and writes nothing. Feature scales fold.
#[test]
fn edits_that_cannot_be_folded_are_kept_as_patches() {
    let prompt = "The quick brown fox jumps over the lazy";
    let dir = tempfile::tempdir().unwrap();
    for (family, why) in [
        ("gemma2", "a norm follows its FFN"),
        ("olmo2", "a norm follows its FFN"),
        ("gpt2", "has no gate"),
        ("qwen3moe", "banks of experts"),
    ] {
        let c = conn(family);
        let patch = dir.path().join(format!("{family}.lqlpatch"));
        let patch = lql::quote(&patch.to_string_lossy());
        c.execute(&format!("BEGIN PATCH {patch}")).unwrap();
        c.execute(&format!(
            "INSERT INTO edges (entity, relation, target, prompt) VALUES ('fox', 'jumps_over', ' the', {}) AT LAYER 1",
            lql::quote(prompt)
        ))
        .unwrap_or_else(|e| panic!("{family}: INSERT: {e}"));
        c.execute("SAVE PATCH")
            .unwrap_or_else(|e| panic!("{family}: SAVE PATCH: {e}"));
        let out = dir.path().join(format!("{family}.gguf"));
        let e = c
            .execute(&format!(
                "COMPILE CURRENT INTO GGUF {}",
                lql::quote(&out.to_string_lossy())
            ))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not supported yet") && e.contains(family) && e.contains(why),
            "{family}: {e}"
        );
        assert!(!out.exists(), "{family}: COMPILE wrote {}", out.display());
        let infer = format!("INFER {} TOP 3", lql::quote(prompt));
        let edited = c.execute(&infer).unwrap();
        let fresh = conn(family);
        fresh.execute(&format!("APPLY PATCH {patch}")).unwrap();
        let applied = fresh.execute(&infer).unwrap();
        for i in 0..3 {
            assert_eq!(
                f(&edited, i, "logit"),
                f(&applied, i, "logit"),
                "{family}: the applied patch's logits"
            );
        }
        assert_eq!(
            applied.row(0).unwrap().get::<_, String>("token").unwrap(),
            " the",
            "{family}"
        );
    }
    // Feature scales act inside the FFN, before its norm: an ablation folds and compiles.
    let c = conn("gemma2");
    c.execute("DELETE FROM features WHERE layer = 1 AND feature = 3")
        .unwrap();
    let out = dir.path().join("gemma2-ablated.gguf");
    c.execute(&format!(
        "COMPILE CURRENT INTO GGUF {}",
        lql::quote(&out.to_string_lossy())
    ))
    .unwrap_or_else(|e| panic!("gemma2: COMPILE of an ablation: {e}"));
    assert!(out.exists());
}

/// SHOW ARCHITECTURES needs no model and lists every registered family with what it takes,
/// by the same predicates the refusals above use.
#[test]
fn show_architectures_lists_every_family() {
    let c = Connection::open_in_memory().unwrap();
    let r = c.execute("SHOW ARCHITECTURES").unwrap();
    assert_eq!(
        r.column_names(),
        [
            "architecture",
            "block",
            "hf_class",
            "execute",
            "browse",
            "edit",
            "gpu",
            "moe"
        ]
    );
    let registered = lql_storage::import::gguf::supported_architectures();
    assert_eq!(r.len(), registered.len());
    let row = |name: &str| {
        (0..r.len())
            .map(|i| r.row(i).unwrap())
            .find(|row| row.get::<_, String>("architecture").unwrap() == name)
            .unwrap_or_else(|| panic!("{name} is not listed"))
    };
    let llama = row("llama");
    assert_eq!(llama.get::<_, String>("block").unwrap(), "llama block");
    assert_eq!(
        llama.get::<_, String>("edit").unwrap(),
        "AT LAYER, subject write"
    );
    assert!(llama.get::<_, bool>("gpu").unwrap());
    let gemma2 = row("gemma2");
    assert!(gemma2
        .get::<_, String>("block")
        .unwrap()
        .contains("softcap"));
    assert_eq!(
        gemma2.get::<_, String>("edit").unwrap(),
        "AT LAYER, subject write"
    );
    assert!(gemma2.get::<_, bool>("gpu").unwrap());
    assert_eq!(
        row("gpt2").get::<_, String>("edit").unwrap(),
        "AT LAYER, subject write"
    );
    assert_eq!(
        row("qwen3moe").get::<_, String>("edit").unwrap(),
        "AT LAYER, subject write"
    );
    assert!(row("qwen3moe").get::<_, bool>("moe").unwrap());
    let like = c.execute("SHOW ARCHITECTURES LIKE 'qwen%'").unwrap();
    assert_eq!(like.len(), 4);
}

/// The GPU backend runs every family's block (the same steps as the CPU, one kernel per
/// step kind) within 1e-3 of the CPU: INFER's top 3, GENERATE's greedy tokens, TRACE's
/// contributions adding up to the GPU's logit, the MoE bank, and an edited state (an
/// INSERT made on a GPU connection gives the CPU's edited logits). Needs an adapter
/// (lavapipe in CI; `LQL_REQUIRE_GPU=1` makes its absence a failure).
#[test]
fn the_gpu_runs_every_family_as_the_cpu_does() {
    if !lql_tests::has_gpu(&Connection::open_in_memory().unwrap()) {
        return;
    }
    let gpu_conn = |family: &str| {
        let path = lql_tests::repo_root()
            .join("tests/fixtures/families")
            .join(family)
            .join("model.gguf");
        let c = Connection::open_in_memory().unwrap();
        c.execute(&format!(
            "USE {} BACKEND gpu",
            lql::quote(&path.to_string_lossy())
        ))
        .unwrap_or_else(|e| panic!("{family}: USE … BACKEND gpu: {e}"));
        c
    };
    let q = lql::quote(PROMPT);
    let close = |family: &str, what: &str, a: &Rows, b: &Rows| {
        for i in 0..a.len().min(3) {
            let (ra, rb) = (a.row(i).unwrap(), b.row(i).unwrap());
            assert_eq!(
                ra.get::<_, i64>("token_id").unwrap(),
                rb.get::<_, i64>("token_id").unwrap(),
                "{family} {what}: rank {i}"
            );
            let d = (f(a, i, "logit") - f(b, i, "logit")).abs();
            assert!(d < 1e-3, "{family} {what}: rank {i}: |Δ logit| {d}");
            eprintln!("{family} {what}: rank {i}: gpu vs cpu |Δ logit| {d:.2e}");
        }
    };
    for family in FAMILIES {
        let (cpu, gpu) = (conn(family), gpu_conn(family));
        let a = cpu.execute(&format!("INFER {q} TOP 3")).unwrap();
        let b = gpu
            .execute(&format!("INFER {q} TOP 3"))
            .unwrap_or_else(|e| panic!("{family}: INFER on the gpu: {e}"));
        close(family, "INFER", &a, &b);
        let ids = |c: &Connection| {
            let r = c.execute(&format!("GENERATE {q} MAX 16")).unwrap();
            let col = r
                .column_names()
                .iter()
                .position(|c| *c == "token_ids")
                .unwrap();
            r.rows[0][col].clone()
        };
        assert_eq!(ids(&cpu), ids(&gpu), "{family}: GENERATE on the gpu");
        let token: String = b.row(0).unwrap().get("token").unwrap();
        if let Ok(tr) = gpu.execute(&format!("TRACE {q} FOR {}", lql::quote(&token))) {
            let sum: f64 = (0..tr.len()).map(|i| f(&tr, i, "contrib")).sum();
            let (logit, cap) = (f(&b, 0, "logit"), golden_cap(family));
            let want = if cap > 0.0 {
                cap * ((logit / cap).atanh())
            } else {
                logit
            };
            assert!(
                (sum - want).abs() <= 1e-3 * want.abs().max(10.0),
                "{family}: gpu Σ contrib {sum} vs logit {want}"
            );
        }
    }
    // An edited state runs on the device: the INSERT made on the GPU connection gives the
    // same logits as the same INSERT on the CPU.
    for family in FAMILIES {
        let prompt = "The quick brown fox jumps over the lazy";
        let insert = format!(
            "INSERT INTO edges (entity, relation, target, prompt) VALUES ('fox', 'jumps_over', ' the', {}) AT LAYER 1",
            lql::quote(prompt)
        );
        let (cpu, gpu) = (conn(family), gpu_conn(family));
        cpu.execute(&insert).unwrap();
        gpu.execute(&insert)
            .unwrap_or_else(|e| panic!("{family}: INSERT on the gpu: {e}"));
        let infer = format!("INFER {} TOP 3", lql::quote(prompt));
        let (a, b) = (cpu.execute(&infer).unwrap(), gpu.execute(&infer).unwrap());
        close(family, "edited INFER", &a, &b);
        assert_eq!(
            b.row(0).unwrap().get::<_, String>("token").unwrap(),
            " the",
            "{family}: the edit's target on the gpu"
        );
        let rows = gpu.execute("SHOW BACKENDS").unwrap();
        let active: Vec<String> = (0..rows.len())
            .map(|i| rows.row(i).unwrap())
            .filter(|r| r.get::<_, bool>("active").unwrap())
            .map(|r| r.get::<_, String>("backend").unwrap())
            .collect();
        assert_eq!(active, ["gpu"], "{family}: the edited state's backend");
    }
}

/// A well-formed GGUF of an architecture LQL cannot run opens for inspection: STATS,
/// SHOW TENSORS and SELECT FROM tensors read it; every statement that needs the forward
/// pass or the gates is refused naming the architecture and the supported ones.
#[test]
fn an_unsupported_architecture_opens_for_inspection() {
    use lql_storage::format::gguf::{GgufFile, GgufWriter, MetaValue};
    let src = lql_tests::repo_root().join("tests/fixtures/families/qwen3/model.gguf");
    let file = GgufFile::open(&src).unwrap();
    let mut w = GgufWriter::from_file(&file).unwrap();
    w.set_kv("general.architecture", MetaValue::Str("mamba".into()))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mamba.gguf");
    w.write(&path).unwrap();
    let n_tensors = file.tensors().len() as i64;

    let c = Connection::open(path.to_str().unwrap()).unwrap();
    let stats = c.execute("STATS").unwrap();
    let get = |k: &str| {
        stats
            .iter()
            .find(|r| r.get::<_, String>("key").unwrap() == k)
            .map(|r| r.values()[1].clone())
            .unwrap_or_else(|| panic!("no {k}"))
    };
    assert_eq!(get("architecture"), Value::from("mamba"));
    assert_eq!(get("tensors"), Value::from(n_tensors));
    assert_eq!(get("can_execute"), Value::Bool(false));
    let tensors = c.execute("SHOW TENSORS").unwrap();
    assert_eq!(tensors.len() as i64, n_tensors);
    let layer0 = c
        .execute("SELECT count(*) FROM tensors WHERE layer = 0")
        .unwrap();
    assert!(layer0.row(0).unwrap().get::<_, i64>(0).unwrap() > 0);
    for stmt in [
        "INFER 'The capital' TOP 1",
        "GENERATE 'The capital' MAX 2",
        "WALK 'The capital' TOP 1",
        "TRACE 'The capital'",
    ] {
        let e = c.execute(stmt).unwrap_err();
        assert_eq!(e.code(), "LQL-E0301", "{stmt}: {e}");
        assert!(
            e.message.contains("`mamba`") && e.message.contains("llama"),
            "{stmt}: {e}"
        );
    }

    // DIFF … PHYSICAL of two such files matches tensors by name, byte for byte: one byte
    // flipped in one tensor is one changed row with one differing row.
    let flipped = dir.path().join("mamba2.gguf");
    let mut bytes = std::fs::read(&path).unwrap();
    let (name, at) = {
        let g = GgufFile::open(&path).unwrap();
        let t = g
            .tensors()
            .iter()
            .find(|t| t.name.starts_with("blk.0."))
            .unwrap();
        (t.name.clone(), (g.data_start() + t.offset) as usize)
    };
    bytes[at] ^= 0x40;
    std::fs::write(&flipped, &bytes).unwrap();
    let q = |p: &std::path::Path| lql::quote(&p.to_string_lossy());
    let d = c
        .execute(&format!("DIFF {} {} PHYSICAL", q(&path), q(&flipped)))
        .unwrap();
    assert_eq!(d.len(), 1, "{:?}", d.to_json());
    let row = d.row(0).unwrap();
    assert_eq!(row.get::<_, String>("role").unwrap(), name);
    assert_eq!(row.get::<_, String>("change").unwrap(), "changed");
    assert_eq!(row.get::<_, i64>("rows_differing").unwrap(), 1);
    let e = c
        .execute(&format!("DIFF {} {}", q(&path), q(&flipped)))
        .unwrap_err();
    assert_eq!(e.code(), "LQL-E0301", "{e}");
    assert!(e.message.contains("PHYSICAL"), "{e}");
}

/// Every family extracts into a VINDEX3 container whose graph records, per layer, the
/// attention span and position the surface says (gemma's sliding layers and their RoPE base,
/// gpt2's learned positions as `none`), the operation program and the continuation state
/// (seed 002 §17.4); the container reopens and answers as the GGUF does.
#[test]
fn every_family_extracts_with_its_schema_6_declarations() {
    for family in FAMILIES {
        let c = conn(family);
        let out = tempfile::tempdir().unwrap();
        let dir = out.path().join("c.vindex3");
        let src = lql_tests::repo_root()
            .join("tests/fixtures/families")
            .join(family)
            .join("model.gguf");
        c.execute(&format!(
            "EXTRACT MODEL {} INTO {}",
            lql::quote(&src.to_string_lossy()),
            lql::quote(&dir.to_string_lossy())
        ))
        .unwrap_or_else(|e| panic!("{family}: EXTRACT: {e}"));
        let graph: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("system_graph.json")).unwrap())
                .unwrap();
        let comp = &graph["components"][0];
        let n = comp["num_layers"].as_u64().unwrap() as usize;
        let surface = &comp["execution_surface"];
        let attention = comp["attention"].as_array().unwrap();
        let program = comp["program"].as_array().unwrap();
        let continuation = comp["continuation"].as_array().unwrap();
        assert_eq!(
            (attention.len(), program.len(), continuation.len()),
            (n, n, n),
            "{family}"
        );
        let sliding = &surface["block"]["sliding"];
        for l in 0..n {
            let windowed = sliding.is_object() && {
                let period = sliding["period"].as_u64().unwrap() as usize;
                period == 0 || l % period < period - 1
            };
            let a = &attention[l];
            assert_eq!(
                a["span"],
                if windowed { "sliding" } else { "full" },
                "{family} layer {l}"
            );
            let rows = &continuation[l]["regions"][0]["rows"];
            assert_eq!(
                rows,
                if windowed { "window" } else { "sequence" },
                "{family} layer {l}"
            );
            if surface["block"]["rope"] == false {
                assert_eq!(a["position"], "none", "{family} layer {l}");
            } else {
                assert!(
                    a["position"]["rope"]["theta"].is_number(),
                    "{family} layer {l}"
                );
            }
            let ops: Vec<&str> = program[l]["ops"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o["op"].as_str().unwrap())
                .collect();
            assert!(ops.contains(&"attention"), "{family} layer {l}: {ops:?}");
            assert!(
                ops.contains(&"ffn") || ops.contains(&"moe"),
                "{family} layer {l}: {ops:?}"
            );
        }
        let prompt = lql::quote(PROMPT);
        let want = c.execute(&format!("INFER {prompt} TOP 1")).unwrap();
        let v = Connection::open_in_memory().unwrap();
        v.execute(&format!("USE {}", lql::quote(&dir.to_string_lossy())))
            .unwrap_or_else(|e| panic!("{family}: USE the container: {e}"));
        let got = v.execute(&format!("INFER {prompt} TOP 1")).unwrap();
        assert_eq!(
            got.row(0).unwrap().get::<_, i64>("token_id").unwrap(),
            want.row(0).unwrap().get::<_, i64>("token_id").unwrap(),
            "{family}: the container answers as the GGUF"
        );
    }
}
