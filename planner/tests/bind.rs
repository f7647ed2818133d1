//! Binding against a mock catalog: bound/unbound, defaults, range and capability
//! refusals with spans. Spans are marked in the input with `«` `»` (stripped).

mod common;

use common::smollm;
use lql_planner::*;

/// A browse-only container: gates and embedding, no attention.
fn browse_only() -> ModelFacts {
    ModelFacts {
        name: "browse.vindex".into(),
        source: SourceKind::Vindex3,
        can_execute: false,
        missing_for_execute: vec!["attn_q (layer 0)".into(), "attn_k (layer 0)".into()],
        ..smollm()
    }
}

fn plan(src: &str, cat: &dyn Catalog) -> LogicalPlan {
    let stmt = lql_grammar::parse_statement(src).unwrap();
    bind(&stmt, cat).unwrap_or_else(|e| panic!("{src}: {e:?}"))
}

/// Binds `marked` (with «» around the expected span) and expects an error there.
fn refuse(marked: &str, cat: &dyn Catalog, message: &str) -> PlanError {
    let start = marked.find('«').expect("start marker");
    let end = marked.find('»').expect("end marker") - '«'.len_utf8();
    let src = marked.replace(['«', '»'], "");
    let stmt = lql_grammar::parse_statement(&src).unwrap();
    let err = bind(&stmt, cat).expect_err(&format!("{src} should be refused"));
    assert_eq!(
        (err.span.start, err.span.end),
        (start, end),
        "span for {src}: {:?} = {:?}; {}",
        err.span,
        src.get(err.span.range()),
        err.message
    );
    assert!(
        err.message.contains(message),
        "{src}: {:?} lacks {message:?}",
        err.message
    );
    err
}

#[test]
fn unbound_statements_are_refused_with_statement_span() {
    let none = EmptyCatalog;
    for s in [
        "WALK 'France'",
        "INFER 'x'",
        "GENERATE 'x'",
        "DESCRIBE 'France'",
        "SELECT * FROM features",
        "TRACE 'x'",
        "STATS",
        "TOKENIZE 'x'",
        "SHOW LAYERS",
        "VERIFY",
        "SAVE PATCH",
        "DELETE FROM edges WHERE layer = 1",
    ] {
        let e = refuse(
            &format!("«{s}»"),
            &none,
            "no model bound; USE a model first",
        );
        assert_eq!(e.kind, PlanErrorKind::Semantic);
        assert!(e.help.is_some());
    }
    // In a script the span is the statement's own.
    let src = "STATS; WALK 'x' TOP 3";
    let stmts = lql_grammar::parse(src).unwrap();
    let e = bind(&stmts[1], &none).unwrap_err();
    assert_eq!(&src[e.span.range()], "WALK 'x' TOP 3");
    // EXPLAIN: the inner statement's span.
    refuse("EXPLAIN «WALK 'x'»", &none, "no model bound");
}

#[test]
fn statements_without_a_model() {
    let none = EmptyCatalog;
    assert!(matches!(plan("USE 'm.gguf'", &none), LogicalPlan::Use(_)));
    assert!(matches!(plan("SHOW MODELS", &none), LogicalPlan::Show(_)));
    assert!(matches!(
        plan("EXTRACT MODEL 'a' INTO 'b'", &none),
        LogicalPlan::Extract(_)
    ));
    assert!(matches!(
        plan("COMPACT 'c'", &none),
        LogicalPlan::Compact { .. }
    ));
    assert!(matches!(
        plan("VERIFY 'c'", &none),
        LogicalPlan::Verify { .. }
    ));
    assert!(matches!(plan("DIFF 'a' 'b'", &none), LogicalPlan::Diff(_)));
    refuse("DIFF 'a' «CURRENT»", &none, "CURRENT needs a bound model");
    refuse(
        "COMPILE «CURRENT» INTO GGUF 'x'",
        &none,
        "CURRENT needs a bound model",
    );
}

#[test]
fn use_plans() {
    let none = EmptyCatalog;
    let LogicalPlan::Use(u) = plan("USE 'pkg' LAYERS 0-14 PROFILE 'fast'", &none) else {
        panic!()
    };
    assert_eq!(u.target, BindTarget::Path("pkg".into()));
    assert_eq!(u.layers, Some(LayerRange::new(0, 14)));
    assert_eq!(u.profile.as_deref(), Some("fast"));
    let LogicalPlan::Use(u) = plan("USE MODEL 'smollm2-135m-instruct'", &none) else {
        panic!()
    };
    assert_eq!(
        u.target,
        BindTarget::Catalogue("smollm2-135m-instruct".into())
    );
    refuse("USE 'pkg' «LAYERS 9-3»", &none, "reversed");
    refuse("USE «''»", &none, "empty model path");
}

#[test]
fn defaults_are_filled() {
    let m = smollm();
    let LogicalPlan::Walk(w) = plan("WALK 'France'", &m) else {
        panic!()
    };
    assert_eq!(
        (w.top, w.layers, w.mode),
        (10, LayerRange::new(0, 29), WalkMode::Residual),
        "the binder picks RESIDUAL when the model can run"
    );
    assert_eq!(w.mode_choice, ModeChoice::Default);
    let browse_only = ModelFacts {
        can_execute: false,
        missing_for_execute: vec!["blk.0.attn_q".into()],
        ..smollm()
    };
    let LogicalPlan::Walk(w) = plan("WALK 'France'", &browse_only) else {
        panic!()
    };
    assert_eq!(w.mode, WalkMode::Embedding);
    assert!(
        matches!(w.mode_choice, ModeChoice::DefaultBrowseOnly(ref why) if why.contains("blk.0.attn_q"))
    );
    refuse(
        "WALK 'France' «MODE RESIDUAL»",
        &browse_only,
        "needs a forward pass",
    );
    let LogicalPlan::Infer(i) = plan("INFER 'x'", &m) else {
        panic!()
    };
    assert_eq!(i.top, 5);
    let LogicalPlan::Generate(g) = plan("GENERATE 'x'", &m) else {
        panic!()
    };
    assert_eq!(g.max_tokens, 64);
    assert!(g.sampling.is_greedy());
    let LogicalPlan::Describe(d) = plan("DESCRIBE 'France'", &m) else {
        panic!()
    };
    assert_eq!(
        (d.layers, d.detail),
        (LayerRange::new(0, 29), Detail::Brief)
    );
    let LogicalPlan::Trace(t) = plan("TRACE 'x'", &m) else {
        panic!()
    };
    assert_eq!(t.positions, Positions::Last);
    let LogicalPlan::Extract(e) = plan("EXTRACT MODEL 'a' INTO 'b'", &m) else {
        panic!()
    };
    assert_eq!(
        (e.format, e.encoding),
        (ExtractFormat::Vindex3, Encoding::Source)
    );
}

#[test]
fn infer_generate_alias() {
    let m = smollm();
    let LogicalPlan::Generate(g) = plan("INFER 'x' GENERATE 12", &m) else {
        panic!()
    };
    assert_eq!(g.max_tokens, 12);
    assert!(g.sampling.is_greedy());
    assert_eq!(plan("INFER 'x' GENERATE 12", &m).name(), "GENERATE");
    refuse(
        "INFER 'x' «TOP 3» GENERATE 12",
        &m,
        "TOP has no effect with GENERATE",
    );
    refuse("INFER 'x' «GENERATE 0»", &m, "at least 1");
    refuse(
        "INFER 'x' «GENERATE 100000»",
        &m,
        "exceeds the context length",
    );
}

#[test]
fn layer_ranges_are_checked() {
    let m = smollm();
    let e = refuse(
        "WALK 'x' «LAYERS 25-30»",
        &m,
        "layer 30 out of range: smollm2 has 30 layers (0-29)",
    );
    assert_eq!(e.labels[0].1, "layers run 0-29");
    refuse("WALK 'x' TOP 3 «LAYERS 40»", &m, "layer 40 out of range");
    refuse("WALK 'x' «LAYERS 9-3»", &m, "layer range 9-3 is reversed");
    refuse("TRACE 'x' DECOMPOSE «LAYERS 0-99»", &m, "out of range");
    refuse("DESCRIBE 'x' «AT LAYER 30»", &m, "layer 30 out of range");
    refuse("DESCRIBE 'x' «LAYERS 3-31» VERBOSE", &m, "out of range");
    refuse(
        "INSERT INTO edges (entity, relation, target) VALUES ('a', 'b', 'c') «AT LAYER 31»",
        &m,
        "out of range",
    );
    let LogicalPlan::Walk(w) = plan("WALK 'x' LAYERS ALL", &m) else {
        panic!()
    };
    assert_eq!(w.layers, LayerRange::new(0, 29));
    let LogicalPlan::Walk(w) = plan("WALK 'x' LAYERS 29", &m) else {
        panic!()
    };
    assert_eq!(w.layers, LayerRange::new(29, 29));
}

#[test]
fn bound_stage_limits_layers() {
    let staged = ModelFacts {
        stage: Some((0, 14)),
        ..smollm()
    };
    refuse(
        "WALK 'x' «LAYERS 10-20»",
        &staged,
        "not in the bound stage (0-14)",
    );
    let LogicalPlan::Walk(w) = plan("WALK 'x'", &staged) else {
        panic!()
    };
    assert_eq!(w.layers, LayerRange::new(0, 14));
}

#[test]
fn counts_are_checked() {
    let m = smollm();
    refuse("INFER 'x' «TOP 0»", &m, "TOP must be at least 1");
    refuse("INFER 'x' «TOP -3»", &m, "TOP must be at least 1");
    refuse(
        "INFER 'x' «TOP 50000»",
        &m,
        "TOP 50000 exceeds the vocabulary size (49152)",
    );
    refuse(
        "WALK 'x' «TOP 2000»",
        &m,
        "exceeds the features per layer (1536)",
    );
    refuse("GENERATE 'x' «MAX 0»", &m, "at least 1");
    refuse(
        "GENERATE 'x' «TEMPERATURE -0.5»",
        &m,
        "TEMPERATURE must be at least 0",
    );
    refuse(
        "GENERATE 'x' TEMPERATURE 1 «TOP_P 1.5»",
        &m,
        "TOP_P must be in (0, 1]",
    );
    // Values sampling (f32) cannot hold are refused as the user wrote them.
    refuse(
        "GENERATE 'x' «TEMPERATURE 1e39»",
        &m,
        "TEMPERATURE must be at most 3.4028235e38, got 1e39",
    );
    refuse("GENERATE 'x' TEMPERATURE 1 «TOP_P 1e-50»", &m, "got 1e-50");
    refuse(
        "GENERATE 'x' TEMPERATURE 1 «TOP_K 0»",
        &m,
        "TOP_K must be at least 1",
    );
    refuse(
        "GENERATE 'x' TEMPERATURE 1 «SEED -1»",
        &m,
        "SEED must be non-negative",
    );
    refuse(
        "GENERATE 'x' «SEED 7»",
        &m,
        "SEED has no effect with greedy decoding",
    );
    refuse(
        "SELECT * FROM features «LIMIT -1»",
        &m,
        "LIMIT must be non-negative",
    );
    let LogicalPlan::Generate(g) = plan(
        "GENERATE 'x' TEMPERATURE 0.7 TOP_K 40 TOP_P 0.9 SEED 1 MAX 8 STOP '\\n'",
        &m,
    ) else {
        panic!()
    };
    assert_eq!(g.sampling.temperature, 0.7);
    assert_eq!(
        (g.sampling.top_k, g.sampling.top_p, g.sampling.seed),
        (Some(40), Some(0.9), Some(1))
    );
    assert_eq!(g.stop, vec!["\n".to_string()]);
}

#[test]
fn capability_refusals_name_missing_operands() {
    let b = browse_only();
    let e = refuse(
        "WALK 'x' «MODE RESIDUAL»",
        &b,
        "WALK MODE RESIDUAL needs a forward pass, but browse.vindex lacks attn_q (layer 0), attn_k (layer 0)",
    );
    assert!(e.help.is_some());
    refuse("«INFER 'x'»", &b, "INFER needs a forward pass");
    refuse("«GENERATE 'x'»", &b, "GENERATE needs a forward pass");
    refuse("«TRACE 'x'»", &b, "TRACE needs a forward pass");
    // Browsing still works.
    assert!(matches!(
        plan("WALK 'x' MODE EMBEDDING", &b),
        LogicalPlan::Walk(_)
    ));
    assert!(matches!(plan("DESCRIBE 'x'", &b), LogicalPlan::Describe(_)));

    let no_gates = ModelFacts {
        can_browse: false,
        missing_for_browse: vec!["ffn_gate (layers 0-29)".into()],
        ..smollm()
    };
    refuse(
        "«WALK 'x'»",
        &no_gates,
        "WALK reads FFN gates, but smollm2 lacks ffn_gate (layers 0-29)",
    );
    let no_tok = ModelFacts {
        can_tokenize: false,
        ..smollm()
    };
    refuse("«TOKENIZE 'x'»", &no_tok, "has no tokenizer");
}

#[test]
fn select_resolves_columns() {
    let m = smollm();
    let LogicalPlan::Select(s) = plan(
        "SELECT Layer, top_token FROM features WHERE c_score > 0.5 AND layer BETWEEN 20 AND 29 ORDER BY c_score DESC LIMIT 10",
        &m,
    ) else {
        panic!()
    };
    assert_eq!(
        s.columns
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        ["layer", "top_token"]
    );
    assert_eq!(
        s.order_by
            .iter()
            .map(|k| (k.expr.to_string(), k.descending))
            .collect::<Vec<_>>(),
        vec![("c_score".to_string(), true)]
    );
    assert_eq!(s.limit, Some(10));
    // Pushdown: the layers WHERE allows; labels early because WHERE reads c_score.
    let (_, scan) = s.source.table().unwrap();
    assert_eq!(scan.layers, Some((20..=29).collect()));
    assert_eq!(scan.labels, LabelTiming::Early);
    let LogicalPlan::Select(s) = plan("SELECT * FROM tokens", &m) else {
        panic!()
    };
    assert_eq!(s.columns.len(), 3);
    let e = refuse(
        "SELECT «top_tokn» FROM features",
        &m,
        "unknown column `top_tokn` in table features",
    );
    assert_eq!(e.help.as_deref(), Some("did you mean top_token?"));
    refuse(
        "SELECT * FROM features WHERE «relaton» = 'capital'",
        &m,
        "unknown column `relaton`",
    );
    refuse(
        "SELECT * FROM features ORDER BY «gatee»",
        &m,
        "unknown column",
    );
    refuse(
        "SELECT * FROM features WHERE layer = 1 OR (NOT «zz» IN (1))",
        &m,
        "unknown column `zz`",
    );
    // Types are checked by the binder, with the span of the sub-expression at fault.
    refuse(
        "SELECT * FROM features WHERE «top_token > 3»",
        &m,
        "type mismatch",
    );
}

#[test]
fn routes_needs_its_prompt() {
    let m = smollm();
    refuse(
        "SELECT * FROM «routes» WHERE layer = 1",
        &m,
        "add WHERE prompt",
    );
    let LogicalPlan::Select(s) = plan(
        "SELECT layer, count(*) FROM routes WHERE layer < 2 AND 'hi' = prompt GROUP BY layer",
        &m,
    ) else {
        panic!()
    };
    assert_eq!(s.source.table().unwrap().1.prompt.as_deref(), Some("hi"));
}

#[test]
fn every_schema_comes_from_the_planner() {
    let m = smollm();
    // Tables that do not answer SELECT yet are refused at their name, with the ones that do.
    let e = bind(
        &lql_grammar::parse_statement("SELECT * FROM representations").unwrap(),
        &m,
    )
    .unwrap_err();
    assert_eq!(e.kind, PlanErrorKind::Unsupported);
    assert!(
        e.message
            .contains("not supported yet: SELECT FROM representations"),
        "{e:?}"
    );
    assert!(e.help.as_deref().unwrap_or("").contains(
        "features, layers, tokens, tensors, edges, routes, attention, heads, contexts, histograms"
    ));
    for t in QUERYABLE_TABLES {
        let cols = table_columns(t).unwrap();
        // `routes` runs a prompt, which WHERE names.
        let filter = match t {
            Table::Routes | Table::Attention | Table::Heads => " WHERE prompt = 'x'",
            Table::Contexts | Table::Histograms => " WHERE corpus = 'c.txt'",
            _ => "",
        };
        let LogicalPlan::Select(s) = plan(&format!("SELECT * FROM {}{filter}", t.name()), &m)
        else {
            panic!()
        };
        // `SELECT *` shows every column but the hidden ones.
        let shown: Vec<_> = cols.iter().filter(|c| !c.hidden).cloned().collect();
        assert_eq!(s.columns, shown);
        assert_eq!(statement_columns(&LogicalPlan::Select(s)), shown);
        assert!(
            cols.iter().all(|c| !c.meaning.is_empty()),
            "{t:?} documents its columns"
        );
    }
}

#[test]
fn edits() {
    let m = smollm();
    let LogicalPlan::Insert(i) = plan(
        "INSERT INTO edges (target, entity, relation) VALUES ('Paris', 'France', 'capital') AT LAYER 24 ALPHA 0.25",
        &m,
    ) else {
        panic!()
    };
    assert_eq!(
        i.rows,
        vec![EdgeRow {
            entity: "France".into(),
            relation: "capital".into(),
            target: "Paris".into(),
            prompt: None,
        }]
    );
    assert_eq!(
        (i.settings.layer, i.settings.pinned, i.settings.alpha),
        (24, true, 0.25)
    );
    // AT LAYER pins one feature there: no subject write.
    assert_eq!(i.settings.subject_layer, None);
    refuse(
        "INSERT INTO «features» (entity) VALUES ('a')",
        &m,
        "INSERT cannot change table features",
    );
    refuse(
        "INSERT INTO edges (entity, «relaton», target) VALUES ('a','b','c')",
        &m,
        "not `relaton`",
    );
    refuse(
        "INSERT INTO edges («entity, relation») VALUES ('a','b')",
        &m,
        "needs column target",
    );
    refuse(
        "INSERT INTO edges (entity, relation, target) VALUES «('a','b')»",
        &m,
        "2 values for 3 columns",
    );
    refuse(
        "INSERT INTO edges (entity, relation, target) VALUES ('a', «5», 'c')",
        &m,
        "relation must be a non-empty string",
    );
    refuse(
        "INSERT INTO edges (entity, relation, target) VALUES ('a','b','c') «ALPHA 2»",
        &m,
        "ALPHA must be in (0, 1]",
    );
    refuse("«DELETE FROM features»", &m, "needs a WHERE clause");
    refuse(
        "DELETE FROM «tokens» WHERE token_id = 1",
        &m,
        "DELETE cannot change table tokens",
    );
    let LogicalPlan::Update(u) = plan(
        "UPDATE features SET top_token = 'x' WHERE layer = 3 AND feature = 9",
        &m,
    ) else {
        panic!()
    };
    assert_eq!(
        u.assignments,
        vec![("top_token".to_string(), Value::String("x".into()))]
    );
    refuse(
        "UPDATE features SET «top_tokn» = 'x' WHERE layer = 1",
        &m,
        "unknown column",
    );
    refuse(
        "UPDATE features SET top_token = 'x', «top_token = 'y'» WHERE layer = 1",
        &m,
        "assigned twice",
    );
    assert!(plan("SAVE PATCH", &m).mutates_session());
}

#[test]
fn diff_forms() {
    let m = smollm();
    let LogicalPlan::Diff(d) = plan("DIFF CURRENT", &m) else {
        panic!()
    };
    assert_eq!((d.left, d.right), (ModelRef::Current, None));
    refuse("DIFF «'a'»", &m, "give two paths");
    // A model against itself binds (its DIFF is empty).
    let LogicalPlan::Diff(d) = plan("DIFF 'a' 'a' LAYER 2 LIMIT 4 PHYSICAL", &m) else {
        panic!()
    };
    assert_eq!((d.layer, d.limit, d.physical), (Some(2), Some(4), true));
    refuse("DIFF CURRENT «LIMIT -1»", &m, "LIMIT must be 0 or more");
}

#[test]
fn names_for_unsupported_messages() {
    let m = smollm();
    let cases = [
        (
            "INSERT INTO edges (entity, relation, target) VALUES ('a','b','c')",
            "INSERT",
        ),
        ("DIFF 'a' 'b'", "DIFF"),
        ("BEGIN PATCH 'p.vlp'", "BEGIN PATCH"),
        ("COMPILE CURRENT INTO GGUF 'o.gguf'", "COMPILE"),
        ("SHOW PATCHES", "SHOW"),
        ("EXPLAIN WALK 'x'", "EXPLAIN"),
        ("VERIFY", "VERIFY"),
        ("STATS", "STATS"),
    ];
    for (src, name) in cases {
        assert_eq!(plan(src, &m).name(), name, "{src}");
    }
    let e = PlanError::unsupported("not supported yet: INSERT", lql_grammar::Span::new(0, 6));
    assert_eq!(e.kind, PlanErrorKind::Unsupported);
}

#[test]
fn a_where_clause_has_a_size_cap() {
    let m = smollm();
    let terms: Vec<String> = (0..6000).map(|i| format!("feature = {i}")).collect();
    let src = format!("SELECT * FROM features WHERE {}", terms.join(" OR "));
    let e = bind(&lql_grammar::parse_statement(&src).unwrap(), &m).unwrap_err();
    assert!(e.message.contains("at most 10000"), "{e:?}");
    let list: Vec<String> = (0..20_000).map(|i| i.to_string()).collect();
    let src = format!(
        "SELECT * FROM features WHERE feature IN ({})",
        list.join(", ")
    );
    let e = bind(&lql_grammar::parse_statement(&src).unwrap(), &m).unwrap_err();
    assert!(e.message.contains("terms"), "{e:?}");
}

#[test]
fn patch_defaults_and_refusals() {
    let LogicalPlan::Patch(p) = plan("PATCH 'a' FROM 'b'", &smollm()) else {
        panic!("not a PATCH plan")
    };
    assert_eq!(p.layers, LayerRange::new(0, 29));
    assert_eq!(p.positions, PatchPositions::All);
    assert_eq!(p.component, PatchComponent::ResidPre);
    assert_eq!(p.metric, None);
    let LogicalPlan::Patch(p) = plan("PATCH 'a b' NOISE ON 'a'", &smollm()) else {
        panic!("not a PATCH plan")
    };
    assert_eq!(
        p.corruption,
        PatchCorruption::Noise {
            subject: "a".into(),
            scale: 3.0,
            seed: 0
        }
    );
    refuse(
        "PATCH 'a' FROM 'b' «LAYERS 30»",
        &smollm(),
        "layer 30 out of range",
    );
    refuse(
        "PATCH 'a' FROM 'b' «COMPONENT head 9»",
        &smollm(),
        "head 9 does not exist: smollm2 has 9 heads per layer (0-8)",
    );
    refuse(
        "PATCH 'a' NOISE ON 'a' «SCALE 0»",
        &smollm(),
        "SCALE 0 gives no noise",
    );
    refuse(
        "PATCH 'a' «FROM ''»",
        &smollm(),
        "the clean prompt is empty",
    );
    refuse(
        "PATCH 'a' FROM 'b' «METRIC PROB('')»",
        &smollm(),
        "a METRIC token is empty",
    );
    refuse("«PATCH 'a' FROM 'b'»", &browse_only(), "PATCH");
}

/// The binder decides what INSERT, USE and UPDATE run with, so EXPLAIN PLAN shows it.
#[test]
fn the_binder_decides_the_values_that_run() {
    let m = smollm();
    let LogicalPlan::Insert(i) = plan(
        "INSERT INTO edges (entity, relation, target) VALUES ('France', 'capital', 'Paris')",
        &m,
    ) else {
        panic!()
    };
    // 60 % and 20 % of SmolLM2's 30 layers; ALPHA's default.
    assert_eq!(
        (
            i.settings.layer,
            i.settings.pinned,
            i.settings.subject_layer,
            i.settings.alpha
        ),
        (18, false, Some(6), DEFAULT_ALPHA)
    );
    let tree = lower(&LogicalPlan::Insert(i)).to_string();
    assert!(
        tree.contains("OverlayInsert edges rows=1 layer=18 subject_layer=6 alpha=0.9"),
        "{tree}"
    );
    // USE runs on the session's backend unless it names one.
    struct Gpu;
    impl Catalog for Gpu {
        fn bound(&self) -> Option<ModelFacts> {
            None
        }
        fn backend(&self) -> lql_grammar::BackendChoice {
            lql_grammar::BackendChoice::Gpu
        }
    }
    let LogicalPlan::Use(u) = plan("USE 'm.gguf'", &Gpu) else {
        panic!()
    };
    assert_eq!(u.backend, lql_grammar::BackendChoice::Gpu);
    let LogicalPlan::Use(u) = plan("USE 'm.gguf' BACKEND cpu", &Gpu) else {
        panic!()
    };
    assert_eq!(u.backend, lql_grammar::BackendChoice::Cpu);
    assert!(lower(&LogicalPlan::Use(u))
        .to_string()
        .contains("Bind \"m.gguf\" backend=cpu"));
    // `auto` is resolved when it binds: the GPU backend on the first adapter (ops it lacks on
    // the host) when the catalog has one, else the CPU; EXPLAIN prints where it runs.
    struct Adapter;
    impl Catalog for Adapter {
        fn bound(&self) -> Option<ModelFacts> {
            None
        }
        fn gpu_adapter(&self) -> Option<String> {
            Some("llvmpipe".into())
        }
    }
    let shown = |sql: &str, catalog: &dyn Catalog| {
        let LogicalPlan::Use(u) = plan(sql, catalog) else {
            panic!()
        };
        (u.runs_on.clone(), lower(&LogicalPlan::Use(u)).to_string())
    };
    let (runs_on, tree) = shown("USE 'm.gguf' BACKEND auto", &Adapter);
    assert_eq!(
        runs_on,
        RunsOn::Gpu {
            adapter: "llvmpipe".into(),
            host_fallback: true
        }
    );
    assert!(
        tree.contains("Bind \"m.gguf\" backend=auto→gpu adapter=\"llvmpipe\" host-fallback"),
        "{tree}"
    );
    let (runs_on, tree) = shown("USE 'm.gguf' BACKEND auto", &EmptyCatalog);
    assert_eq!(runs_on, RunsOn::Cpu);
    assert!(tree.contains("Bind \"m.gguf\" backend=auto→cpu"), "{tree}");
    let (_, tree) = shown("USE 'm.gguf' BACKEND gpu", &Adapter);
    assert!(
        tree.contains("backend=gpu adapter=\"llvmpipe\"") && !tree.contains("fallback"),
        "{tree}"
    );
    // UPDATE's scales: a number, finite, within range.
    let e = refuse(
        "UPDATE features SET gate_scale = «'x'» WHERE layer = 1",
        &m,
        "gate_scale takes a number, not a string",
    );
    assert_eq!(e.code, Some(PlanErrorCode::WrongType));
    let e = refuse(
        "UPDATE features SET down_scale = «2e7» WHERE layer = 1",
        &m,
        "out of range",
    );
    assert_eq!(e.code, Some(PlanErrorCode::OutOfRange));
    plan("UPDATE features SET down_scale = 0 WHERE layer = 1", &m);
}

#[test]
fn a_layer_package_without_its_identity_is_refused_when_it_binds() {
    let m = smollm();
    // EXPLAIN PLAN refuses it too: the binder decides, not the operator that writes.
    refuse(
        r#"EXTRACT MODEL "m.gguf" INTO "out" «FORMAT PACKAGE» SOURCE_REVISION "r""#,
        &m,
        "needs MODEL_ID",
    );
    refuse(
        r#"EXPLAIN PLAN EXTRACT MODEL "m.gguf" INTO "out" «FORMAT PACKAGE» MODEL_ID "a/b:c""#,
        &m,
        "a layer package from a local file needs SOURCE_REVISION",
    );
    refuse(
        r#"COMPILE CURRENT INTO «PACKAGE» "out" MODEL_ID "a/b:c""#,
        &m,
        "a compiled layer package needs SOURCE_REVISION",
    );
    let ok = lql_grammar::parse_statement(
        r#"EXTRACT MODEL "m.gguf" INTO "out" FORMAT PACKAGE MODEL_ID "a/b:c" SOURCE_REVISION "r""#,
    )
    .unwrap();
    assert!(bind(&ok, &m).is_ok());
}
