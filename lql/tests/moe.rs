//! A mixture-of-experts model through the engine: STATS and SHOW LAYERS name the bank;
//! WALK, DESCRIBE and the features table browse its experts (checked against a direct
//! computation from the file's weights and the executor's own routes); bank containers
//! browse as their GGUF.

use lql::Connection;
use lql_storage::format::gguf::synth::{TinyModel, TinyMoe};

/// The Mixtral-style tiny model with one BPE merge, so its byte-level tokenizer builds and
/// INFER runs on text.
fn open_with_tokenizer() -> (tempfile::TempDir, Connection) {
    use lql_storage::format::gguf::MetaValue;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mixtral.gguf");
    let tiny = TinyModel::mixtral();
    let mut w = tiny.writer().unwrap();
    let mut tokens = lql_storage::format::gguf::synth::byte_level_vocab(tiny.vocab);
    tokens[259] = "ab".into();
    w.set_kv("tokenizer.ggml.tokens", MetaValue::str_array(tokens))
        .unwrap();
    w.set_kv(
        "tokenizer.ggml.merges",
        MetaValue::str_array(vec!["a b".to_string()]),
    )
    .unwrap();
    w.write(&path).unwrap();
    let conn = Connection::open(path.to_str().unwrap()).unwrap();
    (dir, conn)
}

fn open() -> (tempfile::TempDir, Connection) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mixtral.gguf");
    TinyModel::mixtral().write(&path).unwrap();
    let conn = Connection::open(path.to_str().unwrap()).unwrap();
    (dir, conn)
}

#[test]
fn stats_and_layers_name_the_bank() {
    let (_dir, conn) = open();
    let rows = conn.execute("STATS").unwrap();
    let get = |k: &str| {
        (0..rows.len())
            .map(|i| rows.row(i).unwrap())
            .find(|r| r.get::<_, String>("key").unwrap() == k)
            .map(|r| r.get::<_, String>("value").unwrap_or_default())
    };
    assert!(get("experts").is_some());
    assert_eq!(
        get("expert_selection").as_deref(),
        Some("top-k then softmax")
    );
    let layers = conn.execute("SHOW LAYERS").unwrap();
    assert_eq!(
        layers
            .row(0)
            .unwrap()
            .get::<_, String>("ffn_encoding")
            .unwrap(),
        "F32"
    );
}

/// A tiny MoE model with one BPE merge ("ab"), so its byte-level tokenizer builds and
/// statements run on text.
fn write_tiny(tiny: &TinyModel, path: &std::path::Path) {
    use lql_storage::format::gguf::MetaValue;
    let mut w = tiny.writer().unwrap();
    let mut tokens = lql_storage::format::gguf::synth::byte_level_vocab(tiny.vocab);
    tokens[259] = "ab".into();
    w.set_kv("tokenizer.ggml.tokens", MetaValue::str_array(tokens))
        .unwrap();
    w.set_kv(
        "tokenizer.ggml.merges",
        MetaValue::str_array(vec!["a b".to_string()]),
    )
    .unwrap();
    w.write(path).unwrap();
}

/// What the model computes at the last position of a prompt, per layer: the normed FFN
/// input and the routed experts the router chose — captured by an observer of the
/// executor, independently of the browse code.
struct Ran {
    ffn_input: Vec<f32>,
    experts: Vec<usize>,
}

fn run_directly(path: &std::path::Path, ids: &[u32]) -> Vec<Ran> {
    struct Obs(Vec<Ran>);
    impl lql_exec::Observer for Obs {
        fn on_layer(&mut self, r: &lql_exec::LayerRecord<'_>) {
            let n = r.positions.len();
            let last = r.positions.end - 1;
            self.0.push(Ran {
                ffn_input: r.ffn_input[(n - 1) * r.hidden..n * r.hidden].to_vec(),
                experts: r
                    .routes
                    .iter()
                    .filter(|x| x.position == last)
                    .map(|x| x.expert)
                    .collect(),
            });
        }
    }
    let model = std::sync::Arc::new(lql_storage::import::open(path).unwrap());
    let n_layers = model.surface.n_layers;
    let exec = lql_exec::Executor::new(model, 1).unwrap();
    let mut obs = Obs(Vec::new());
    exec.observe_layers(ids, n_layers - 1, &mut obs).unwrap();
    obs.0
}

/// The model's weights decoded to f32, read straight from the file.
struct Weights {
    model: lql_storage::Model,
}

impl Weights {
    fn open(path: &std::path::Path) -> Weights {
        Weights {
            model: lql_storage::import::open(path).unwrap(),
        }
    }

    fn decoded(&self, layer: Option<usize>, role: lql_storage::Role) -> (Vec<usize>, Vec<f32>) {
        let key = match layer {
            Some(l) => lql_storage::OperandKey::layer(l, role),
            None => lql_storage::OperandKey::global(role),
        };
        let op = self.model.operand(key).unwrap();
        let n: usize = op.shape.iter().product();
        let mut out = vec![0.0f32; n];
        let view = self.model.view_of(op);
        lql_storage::codec::decode_row(op.dtype, view.bytes, &mut out).unwrap();
        (op.shape.clone(), out)
    }

    /// Expert `e`'s (-1: shared) gate and up rows of feature `f`.
    fn gate_up(&self, layer: usize, e: i64, f: usize) -> (Vec<f32>, Vec<f32>) {
        use lql_storage::Role::*;
        let (g, u, index) = if e < 0 {
            (FfnGateShexp, FfnUpShexp, 0)
        } else {
            (FfnGateExps, FfnUpExps, e as usize)
        };
        let row = |role| {
            let (shape, v) = self.decoded(Some(layer), role);
            let (h, ef) = (shape[0], shape[1]);
            let r = index * ef + f;
            v[r * h..(r + 1) * h].to_vec()
        };
        (row(g), row(u))
    }

    /// Column `f` of expert `e`'s (-1: shared) down matrix.
    fn down_column(&self, layer: usize, e: i64, f: usize) -> Vec<f32> {
        use lql_storage::Role::*;
        let (role, index) = if e < 0 {
            (FfnDownShexp, 0)
        } else {
            (FfnDownExps, e as usize)
        };
        let (shape, v) = self.decoded(Some(layer), role);
        let (ef, hidden) = (shape[0], shape[1]);
        (0..hidden)
            .map(|r| v[(index * hidden + r) * ef + f])
            .collect()
    }

    /// The top token and its logit of `unembedding · column`.
    fn label(&self, column: &[f32]) -> (i64, f64) {
        let s = &self.model.surface;
        let role = if s.tied_head {
            lql_storage::Role::TokenEmbedding
        } else {
            lql_storage::Role::Output
        };
        let (_, m) = self.decoded(None, role);
        let h = column.len();
        let mut best = (0i64, f32::NEG_INFINITY);
        for (t, row) in m.chunks_exact(h).enumerate() {
            let v = dot(row, column);
            if v > best.1 {
                best = (t as i64, v);
            }
        }
        (best.0, best.1 as f64)
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The row of expert `e` (-1: shared) that the v1-flattened feature number `flat` names
/// (seed 002 §15.2: routed experts' rows in order, then the shared expert's).
fn row_of(moe: &TinyMoe, e: i64, flat: i64) -> usize {
    let start = if e < 0 {
        moe.experts * moe.expert_ffn
    } else {
        e as usize * moe.expert_ffn
    };
    let row = flat as usize - start;
    assert!(
        row < if e < 0 {
            moe.shared_ffn
        } else {
            moe.expert_ffn
        },
        "feature {flat} is not a feature of expert {e}"
    );
    row
}

/// The v1-flattened feature number of row `f` of expert `e` (-1: shared).
fn flat_of(moe: &TinyMoe, e: i64, f: usize) -> usize {
    if e < 0 {
        moe.experts * moe.expert_ffn + f
    } else {
        e as usize * moe.expert_ffn + f
    }
}

fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-4 * (1.0 + b.abs())
}

type WalkRow = (i64, i64, i64, f64, Option<f64>, String);

fn walk_rows(conn: &Connection, q: &str) -> Vec<WalkRow> {
    let rows = conn.execute(q).unwrap();
    (0..rows.len())
        .map(|i| {
            let r = rows.row(i).unwrap();
            (
                r.get::<_, i64>("layer").unwrap(),
                r.get::<_, i64>("expert").unwrap(),
                r.get::<_, i64>("feature").unwrap(),
                r.get::<_, f64>("gate").unwrap(),
                r.get::<_, Option<f64>>("activation").unwrap(),
                r.get::<_, String>("top_token").unwrap(),
            )
        })
        .collect()
}

/// How a fixture re-encodes its tensors: tensor name and dimensions → encoding.
type Encoding = fn(&str, usize) -> Option<lql_storage::DType>;

/// A fixture: its name, model, and the re-encoding of a quantised one.
struct Fixture {
    name: &'static str,
    tiny: TinyModel,
    enc: Option<Encoding>,
}

impl Fixture {
    /// Writes the fixture into `dir` (with the "ab" merge) and returns its path.
    fn write(&self, dir: &std::path::Path) -> std::path::PathBuf {
        use lql_storage::format::gguf::{GgufFile, GgufWriter};
        let path = dir.join(format!("{}.gguf", self.name));
        write_tiny(&self.tiny, &path);
        let Some(enc) = self.enc else { return path };
        let file = GgufFile::open(&path).unwrap();
        let mut w = GgufWriter::from_file(&file).unwrap();
        for t in file.tensors() {
            let Some(dtype) = enc(&t.name, t.shape.len()) else {
                continue;
            };
            let mut vals = vec![0.0f32; t.elems()];
            lql_storage::codec::decode_rows(t.dtype, file.view(t).bytes, t.shape[0], &mut vals)
                .unwrap();
            let mut out = Vec::new();
            for row in vals.chunks(t.shape[0]) {
                lql_storage::codec::encode_row(dtype, row, &mut out).unwrap();
            }
            w.remove_tensor(&t.name);
            w.add_tensor(&t.name, dtype, &t.shape, std::borrow::Cow::Owned(out))
                .unwrap();
        }
        let q = dir.join(format!("{}.q.gguf", self.name));
        w.write(&q).unwrap();
        drop(file);
        std::fs::rename(&q, &path).unwrap();
        path
    }
}

/// The fixtures: Mixtral-style (4 experts of 96, top-2, no shared expert) and
/// qwen2moe-style (4 experts of 32, top-2, a gated shared expert of 128), each in F32 and
/// with encoded experts (Q4_0 gate / Q8_0 up / F16 down; Q8_0 routed, Q4_0 shared), so the
/// scans read block-encoded rows in place.
fn fixtures() -> Vec<Fixture> {
    use lql_storage::DType;
    let mixed: Encoding = |name, _| {
        Some(match name {
            n if n.contains("ffn_gate_exps") => DType::Q4_0,
            n if n.contains("ffn_up_exps") => DType::Q8_0,
            n if n.contains("ffn_down_exps") => DType::F16,
            "token_embd.weight" => DType::Q8_0,
            _ => return None,
        })
    };
    let q8_q4: Encoding = |name, dims| {
        Some(match name {
            n if n.contains("_exps") => DType::Q8_0,
            n if n.contains("_shexp") && dims >= 2 => DType::Q4_0,
            _ => return None,
        })
    };
    vec![
        Fixture {
            name: "mixtral",
            tiny: TinyModel::mixtral(),
            enc: None,
        },
        Fixture {
            name: "qwen2moe",
            tiny: TinyModel::qwen2moe(),
            enc: None,
        },
        Fixture {
            name: "mixtral_q4_q8_f16",
            tiny: TinyModel::mixtral(),
            enc: Some(mixed),
        },
        Fixture {
            name: "qwen2moe_q8_q4",
            tiny: TinyModel::qwen2moe(),
            enc: Some(q8_q4),
        },
    ]
}

/// WALK RESIDUAL over experts: each row's gate is the expert's own gate row · the FFN
/// input the model computed, its activation `silu(gate) · up`, and its expert one the router
/// chose at the last position (the routes table's choice) or the shared one; with TOP
/// covering every scanned row, the experts seen are exactly the routes' choices.
#[test]
fn walk_residual_reads_the_experts_that_ran() {
    for fx in fixtures() {
        let (name, tiny) = (fx.name, &fx.tiny);
        let dir = tempfile::tempdir().unwrap();
        let path = fx.write(dir.path());
        let conn = Connection::open(path.to_str().unwrap()).unwrap();
        let moe = tiny.moe.clone().unwrap();
        let prompt = "abcab";
        let ids: Vec<u32> = {
            let t = conn.execute(&format!("TOKENIZE '{prompt}'")).unwrap();
            (0..t.len())
                .map(|i| t.row(i).unwrap().get::<_, i64>("token_id").unwrap() as u32)
                .collect()
        };
        let ran = run_directly(&path, &ids);
        let w = Weights::open(&path);
        let scanned = moe.used * moe.expert_ffn + moe.shared_ffn;
        let rows = walk_rows(
            &conn,
            &format!("WALK '{prompt}' TOP {scanned} MODE RESIDUAL"),
        );
        assert_eq!(rows.len(), tiny.layers * scanned, "{name}");
        let last = ids.len() - 1;
        assert_eq!(ran.len(), tiny.layers);
        for (layer, ran_here) in ran.iter().enumerate() {
            let routes = conn
                .execute(&format!(
                    "SELECT expert FROM routes WHERE prompt = '{prompt}' AND layer = {layer} \
                     AND position = {last} ORDER BY expert"
                ))
                .unwrap();
            let mut chosen: Vec<i64> = (0..routes.len())
                .map(|i| routes.row(i).unwrap().get::<_, i64>("expert").unwrap())
                .collect();
            let mut direct: Vec<i64> = ran_here.experts.iter().map(|&e| e as i64).collect();
            direct.sort_unstable();
            assert_eq!(
                chosen, direct,
                "{name} layer {layer}: routes vs the executor"
            );
            if moe.shared_ffn > 0 {
                chosen.push(-1);
            }
            let mut seen: Vec<i64> = rows
                .iter()
                .filter(|r| r.0 == layer as i64)
                .map(|r| r.1)
                .collect();
            seen.sort_unstable();
            seen.dedup();
            chosen.sort_unstable();
            assert_eq!(seen, chosen, "{name} layer {layer}: experts walked");
        }
        for &(layer, e, f, gate, act, _) in &rows {
            let x = &ran[layer as usize].ffn_input;
            let (g, u) = w.gate_up(layer as usize, e, row_of(&moe, e, f));
            let want = dot(&g, x);
            assert!(
                close(gate, want as f64),
                "{name} {layer}:{e}:{f}: {gate} vs {want}"
            );
            let want_act = silu(want) * dot(&u, x);
            let act = act.unwrap();
            assert!(
                close(act, want_act as f64),
                "{name} {layer}:{e}:{f}: activation {act} vs {want_act}"
            );
        }
        // Rows are ordered by |gate| within a layer.
        for pair in rows.windows(2) {
            if pair[0].0 == pair[1].0 {
                assert!(pair[0].3.abs() >= pair[1].3.abs());
            }
        }
        // EXPLAIN WALK names the expert gate rows it read.
        let plan = conn
            .execute(&format!("EXPLAIN WALK '{prompt}' TOP 2 LAYERS 1-1"))
            .unwrap();
        let text: String = (0..plan.len())
            .map(|i| format!("{:?}\n", plan.row(i).unwrap()))
            .collect();
        assert!(text.contains("ffn_gate_exps"), "{text}");
        assert!(text.contains("GateScan"), "{text}");
        if moe.shared_ffn > 0 {
            assert!(text.contains("ffn_gate_shexp"), "{text}");
        }
    }
}

/// WALK EMBEDDING over experts scans every expert (and the shared one): gates equal the
/// scaled embedding row · the expert's gate row; labels come from the expert's down column.
#[test]
fn walk_embedding_scans_every_expert() {
    for fx in fixtures() {
        let (name, tiny) = (fx.name, &fx.tiny);
        let dir = tempfile::tempdir().unwrap();
        let path = fx.write(dir.path());
        let conn = Connection::open(path.to_str().unwrap()).unwrap();
        let moe = tiny.moe.clone().unwrap();
        let w = Weights::open(&path);
        let all = moe.experts * moe.expert_ffn + moe.shared_ffn;
        let rows = walk_rows(&conn, &format!("WALK 'c' TOP {all} MODE EMBEDDING"));
        assert_eq!(rows.len(), tiny.layers * all, "{name}");
        let (_, emb) = w.decoded(None, lql_storage::Role::TokenEmbedding);
        let id = b'c' as usize;
        let scale = w.model.surface.embedding_scale;
        let x: Vec<f32> = emb[id * tiny.hidden..(id + 1) * tiny.hidden]
            .iter()
            .map(|v| v * scale)
            .collect();
        let mut experts: Vec<i64> = rows.iter().map(|r| r.1).collect();
        experts.sort_unstable();
        experts.dedup();
        let mut want: Vec<i64> = (0..moe.experts as i64).collect();
        if moe.shared_ffn > 0 {
            want.insert(0, -1);
        }
        assert_eq!(experts, want, "{name}");
        for &(layer, e, f, gate, act, _) in rows.iter().step_by(7) {
            let (g, _) = w.gate_up(layer as usize, e, row_of(&moe, e, f));
            let want = dot(&g, &x);
            assert!(
                close(gate, want as f64),
                "{name} {layer}:{e}:{f}: {gate} vs {want}"
            );
            assert_eq!(act, None);
        }
        // The labels of a few hits, against the unembedding · the expert's down column.
        let text = |id: i64| {
            conn.execute(&format!("SELECT text FROM tokens WHERE id = {id}"))
                .unwrap()
                .row(0)
                .unwrap()
                .get::<_, String>("text")
                .unwrap()
        };
        for &(layer, e, f, _, _, ref top) in rows.iter().step_by(97) {
            let (t, _) = w.label(&w.down_column(layer as usize, e, row_of(&moe, e, f)));
            assert_eq!(top, &text(t), "{name} {layer}:{e}:{f}");
        }
    }
}

/// `SELECT … FROM features` over experts: one row per (layer, expert, feature) with the
/// shared expert as -1; labels from the expert's down rows; pushdown on layer and feature
/// and filters on expert work.
#[test]
fn features_table_lists_every_expert_feature() {
    for fx in fixtures() {
        let (name, tiny) = (fx.name, &fx.tiny);
        let dir = tempfile::tempdir().unwrap();
        let path = fx.write(dir.path());
        let conn = Connection::open(path.to_str().unwrap()).unwrap();
        let moe = tiny.moe.clone().unwrap();
        let w = Weights::open(&path);
        let n = conn
            .execute("SELECT count(*) AS n FROM features")
            .unwrap()
            .row(0)
            .unwrap()
            .get::<_, i64>("n")
            .unwrap();
        let per_layer = moe.experts * moe.expert_ffn + moe.shared_ffn;
        assert_eq!(n as usize, tiny.layers * per_layer, "{name}");
        let per = conn
            .execute(
                "SELECT expert, count(*) AS n FROM features WHERE layer = 1 \
                 GROUP BY expert ORDER BY expert",
            )
            .unwrap();
        let mut want: Vec<(i64, i64)> = (0..moe.experts as i64)
            .map(|e| (e, moe.expert_ffn as i64))
            .collect();
        if moe.shared_ffn > 0 {
            want.insert(0, (-1, moe.shared_ffn as i64));
        }
        let got: Vec<(i64, i64)> = (0..per.len())
            .map(|i| {
                let r = per.row(i).unwrap();
                (
                    r.get::<_, i64>("expert").unwrap(),
                    r.get::<_, i64>("n").unwrap(),
                )
            })
            .collect();
        assert_eq!(got, want, "{name}");
        let mut cases = vec![(0i64, 3usize, 5usize), (1, 2, 0)];
        if moe.shared_ffn > 0 {
            cases.push((-1, 1, 100));
        }
        for (e, layer, f) in cases {
            let layer = layer.min(tiny.layers - 1);
            let flat = flat_of(&moe, e, f);
            let rows = conn
                .execute(&format!(
                    "SELECT * FROM features WHERE layer = {layer} AND feature = {flat} AND expert = {e}"
                ))
                .unwrap();
            assert_eq!(rows.len(), 1, "{name} {layer}:{e}:{f}");
            let r = rows.row(0).unwrap();
            let (t, logit) = w.label(&w.down_column(layer, e, f));
            assert_eq!(
                r.get::<_, i64>("top_token_id").unwrap(),
                t,
                "{name} {layer}:{e}:{f}"
            );
            let c = r.get::<_, f64>("c_score").unwrap();
            assert!(close(c, logit), "{name} {layer}:{e}:{f}: {c} vs {logit}");
        }
        // Late labels (LIMIT first) agree with early ones (WHERE on a label column).
        let late = conn
            .execute("SELECT expert, feature, top_token_id FROM features WHERE layer = 0 LIMIT 200")
            .unwrap();
        let early = conn
            .execute(
                "SELECT expert, feature, top_token_id FROM features WHERE layer = 0 \
                 AND top_token_id >= 0 LIMIT 200",
            )
            .unwrap();
        assert_eq!(late.len(), 200.min(per_layer));
        for i in 0..late.len() {
            assert_eq!(
                format!("{:?}", late.row(i).unwrap()),
                format!("{:?}", early.row(i).unwrap())
            );
        }
    }
}

/// DESCRIBE over experts: each edge (RAW: one per kept hit) is a feature of an expert that
/// ran for the entity (run after BOS, as DESCRIBE runs it): its gate equals that expert's
/// gate row · the FFN input the executor computed, and its target is the top token of the
/// unembedding · that expert's down column. The entities are ones that give edges on these
/// random tiny models.
#[test]
fn describe_reads_expert_features() {
    for fx in fixtures() {
        let (name, tiny) = (fx.name, &fx.tiny);
        let dir = tempfile::tempdir().unwrap();
        let path = fx.write(dir.path());
        let conn = Connection::open(path.to_str().unwrap()).unwrap();
        let moe = tiny.moe.clone().unwrap();
        let w = Weights::open(&path);
        let bos = w.model.surface.special.bos.unwrap();
        let text = |id: i64| {
            conn.execute(&format!("SELECT text FROM tokens WHERE id = {id}"))
                .unwrap()
                .row(0)
                .unwrap()
                .get::<_, String>("text")
                .unwrap()
        };
        let mut edges = 0;
        for entity in ["y", "t", "hello"] {
            let rows = conn.execute(&format!("DESCRIBE '{entity}' RAW")).unwrap();
            let mut ids = vec![bos];
            ids.extend(entity.bytes().map(u32::from));
            let ran = run_directly(&path, &ids);
            for i in 0..rows.len() {
                let r = rows.row(i).unwrap();
                let layer = r.get::<_, i64>("layer").unwrap() as usize;
                let gate = r.get::<_, f64>("gate").unwrap();
                let target = r.get::<_, String>("target").unwrap();
                let mut experts: Vec<(i64, usize)> = ran[layer]
                    .experts
                    .iter()
                    .map(|&e| (e as i64, moe.expert_ffn))
                    .collect();
                if moe.shared_ffn > 0 {
                    experts.push((-1, moe.shared_ffn));
                }
                let x = &ran[layer].ffn_input;
                let found = experts.iter().any(|&(e, width)| {
                    (0..width).any(|f| {
                        close(gate, dot(&w.gate_up(layer, e, f).0, x) as f64)
                            && text(w.label(&w.down_column(layer, e, f)).0) == target
                    })
                });
                assert!(
                    found,
                    "{name} {entity:?}: edge L{layer} gate {gate} {target:?} is no feature that ran"
                );
                edges += 1;
            }
        }
        assert!(edges > 0, "{name}: no DESCRIBE edge to check");
    }
}

/// Scaling expert features is not built: DELETE and UPDATE of features refuse by name
/// rather than edit nothing. INSERT's added features sit beside the bank: AT LAYER edits.
#[test]
fn scaling_expert_features_refuses_by_name() {
    let (_dir, conn) = open_with_tokenizer();
    let r = conn
        .execute("INSERT INTO edges (entity, relation, target) VALUES ('ab', 'r', 'c') AT LAYER 1")
        .unwrap();
    assert_eq!(r.row(0).unwrap().get::<_, i64>("edits").unwrap(), 1);
    for q in [
        "DELETE FROM features WHERE layer = 1 AND feature = 3 AND expert = 2",
        "UPDATE features SET gate_scale = 2.0 WHERE layer = 1 AND feature = 3",
    ] {
        let e = conn.execute(q).unwrap_err().to_string();
        assert!(
            e.contains("not supported yet") && e.contains("mixture-of-experts"),
            "{q}: {e}"
        );
    }
    // Stored labels have no expert axis: EXTRACT … WITH LABELS refuses and writes nothing.
    let out = _dir.path().join("labelled.vindex");
    let e = conn
        .execute(&format!(
            "EXTRACT MODEL '{}' INTO '{}' WITH LABELS",
            _dir.path().join("mixtral.gguf").display(),
            out.display()
        ))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not supported yet"), "{e}");
    assert!(!out.exists());
}

/// A bank container answers WALK and the features table with the same rows as its GGUF.
#[test]
fn bank_container_browses_as_its_gguf() {
    for fx in fixtures() {
        let name = fx.name;
        let dir = tempfile::tempdir().unwrap();
        let path = fx.write(dir.path());
        let conn = Connection::open(path.to_str().unwrap()).unwrap();
        let out = dir.path().join(format!("{name}.bank"));
        conn.execute(&format!(
            "EXTRACT MODEL '{}' INTO '{}' SHAPE BANK GROUP 2",
            path.display(),
            out.display()
        ))
        .unwrap();
        let bank = Connection::open(out.to_str().unwrap()).unwrap();
        for q in [
            "WALK 'abcab' TOP 20 MODE RESIDUAL",
            "WALK 'abcab' TOP 20 MODE EMBEDDING",
            "SELECT * FROM features WHERE layer = 1 AND feature < 4",
            "SELECT layer, expert, feature, c_score FROM features WHERE top_token_id < 100 ORDER BY c_score DESC LIMIT 20",
            "DESCRIBE 'y' RAW",
            "DESCRIBE 'hello' VERBOSE",
        ] {
            let a = conn.execute(q).unwrap();
            let b = bank.execute(q).unwrap();
            assert!(!a.is_empty() || q.starts_with("DESCRIBE"), "{name}: {q}");
            assert_eq!(a.len(), b.len(), "{name}: {q}");
            for i in 0..a.len() {
                assert_eq!(
                    format!("{:?}", a.row(i).unwrap()),
                    format!("{:?}", b.row(i).unwrap()),
                    "{name}: {q}"
                );
            }
        }
    }
}

/// `EXTRACT … SHAPE BANK GROUP n` writes the seed-002 bank shape; bound, it answers INFER
/// exactly as the GGUF, VERIFY passes, and SHOW CAPABILITIES reports the rung.
#[test]
fn bank_shape_extract_infers_as_the_gguf_and_reports_capabilities() {
    let (dir, conn) = open_with_tokenizer();
    let gguf = dir.path().join("mixtral.gguf");
    let out = dir.path().join("mixtral.bank");
    conn.execute(&format!(
        "EXTRACT MODEL '{}' INTO '{}' FORMAT VINDEX3 SHAPE BANK GROUP 2",
        gguf.display(),
        out.display()
    ))
    .unwrap();
    assert!(out.join("moe_manifest.json").is_file());
    let want = conn.execute("INFER 'ab' TOP 5").unwrap();
    let bank = Connection::open(out.to_str().unwrap()).unwrap();
    let got = bank.execute("INFER 'ab' TOP 5").unwrap();
    let col = |r: &lql::Rows| -> Vec<(String, f64)> {
        (0..r.len())
            .map(|i| {
                let row = r.row(i).unwrap();
                (
                    row.get::<_, String>("token").unwrap(),
                    row.get::<_, f64>("logit").unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(col(&want), col(&got));
    let v = bank.execute("VERIFY").unwrap();
    assert!(!v.fault, "{v:?}");
    let caps = bank.execute("SHOW CAPABILITIES").unwrap();
    let row = caps.row(0).unwrap();
    assert_eq!(row.get::<_, String>("programme").unwrap(), "gated-mlp-v1");
    assert_eq!(row.get::<_, String>("grouping").unwrap(), "group of 2");
    assert_eq!(row.get::<_, String>("maturity").unwrap(), "dispatched");
    // The GGUF itself: stacked 3-D expert tensors, same programme.
    let caps = conn.execute("SHOW CAPABILITIES").unwrap();
    assert_eq!(
        caps.row(0).unwrap().get::<_, String>("grouping").unwrap(),
        "stacked"
    );
    // GROUP without SHAPE BANK, and ENCODING with it, refuse by name.
    let e = conn
        .execute(&format!(
            "EXTRACT MODEL '{}' INTO '{}/x' GROUP 2",
            gguf.display(),
            dir.path().display()
        ))
        .unwrap_err()
        .to_string();
    assert!(e.contains("SHAPE BANK"), "{e}");
    let e = conn
        .execute(&format!(
            "EXTRACT MODEL '{}' INTO '{}/y' SHAPE BANK ENCODING F16",
            gguf.display(),
            dir.path().display()
        ))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not supported yet"), "{e}");
    let e = conn
        .execute(&format!(
            "EXTRACT MODEL '{}' INTO '{}/z' SHAPE BANK GROUP 3",
            gguf.display(),
            dir.path().display()
        ))
        .unwrap_err()
        .to_string();
    assert!(e.contains("GROUP 3"), "{e}");
}

/// A bank container whose layer-1 routed bank lost its down region (its schema's role tag
/// rewritten to an unregistered one): USE opens it for browsing, INFER refuses naming the
/// layer, bank, role and segment, and SHOW CAPABILITIES says `representable`.
#[test]
fn bank_missing_down_region_browses_and_refuses_to_infer() {
    let (dir, conn) = open_with_tokenizer();
    let gguf = dir.path().join("mixtral.gguf");
    let out = dir.path().join("mixtral.bank");
    conn.execute(&format!(
        "EXTRACT MODEL '{}' INTO '{}' SHAPE BANK",
        gguf.display(),
        out.display()
    ))
    .unwrap();
    let file = out.join("banks/layer_001.lyrw");
    let mut b = std::fs::read(&file).unwrap();
    // Header 24 B, bank descriptors 24 B each, segment descriptors 12 B each, then the
    // routed bank's schemas (20 B): the third is `down` (role at byte 2 of the record).
    let (banks, segs) = (
        u16::from_le_bytes([b[12], b[13]]) as usize,
        u16::from_le_bytes([b[14], b[15]]) as usize,
    );
    let down = 24 + banks * 24 + segs * 12 + 2 * 20 + 2;
    assert_eq!(u16::from_le_bytes([b[down], b[down + 1]]), 3);
    b[down..down + 2].copy_from_slice(&300u16.to_le_bytes());
    std::fs::write(&file, &b).unwrap();

    let bank = Connection::open(out.to_str().unwrap()).unwrap();
    bank.execute("SHOW LAYERS").unwrap();
    bank.execute("TOKENIZE 'ab'").unwrap();
    let e = bank.execute("INFER 'ab'").unwrap_err().to_string();
    for part in [
        "layer 1",
        "bank 0",
        "role down",
        "segment banks/layer_001.lyrw",
    ] {
        assert!(e.contains(part), "{part}: {e}");
    }
    // Browsing works where it reads what is there: layer 0's experts whole, layer 1's gate
    // rows (EMBEDDING: the binding cannot run); labelling layer 1 names the missing down.
    let walk = bank.execute("WALK 'ab' TOP 3 LAYERS 0-0").unwrap();
    assert_eq!(walk.len(), 3);
    let mode = walk.row(0).unwrap().get::<_, String>("mode").unwrap();
    assert!(mode.starts_with("EMBEDDING"), "{mode}");
    let rows = bank
        .execute("SELECT layer, expert, feature FROM features WHERE layer = 1 LIMIT 5")
        .unwrap();
    assert_eq!(rows.len(), 5);
    let e = bank
        .execute("WALK 'ab' TOP 3 LAYERS 1-1")
        .unwrap_err()
        .to_string();
    assert!(e.contains("ffn_down_exps of layer 1"), "{e}");
    let caps = bank.execute("SHOW CAPABILITIES").unwrap();
    let rungs: Vec<String> = (0..caps.len())
        .map(|i| caps.row(i).unwrap().get::<_, String>("maturity").unwrap())
        .collect();
    assert!(rungs.contains(&"representable".to_string()), "{rungs:?}");
    assert!(rungs.contains(&"dispatched".to_string()), "{rungs:?}");
}

/// `routes` as SQL: the router's choices over a prompt, aggregated with GROUP BY; the
/// rows are the executor's own routes (best first, rank 1 the top choice).
#[test]
fn routes_are_a_table() {
    let (_dir, conn) = open_with_tokenizer();
    let rows = conn
        .execute("SELECT * FROM routes WHERE prompt = 'abc' ORDER BY layer, position, rank")
        .unwrap();
    // 2 layers × 3 positions ('ab' merges: "ab" + "c" = 2 tokens; no BOS) × top-2.
    let n_tokens = conn.execute("TOKENIZE 'abc'").unwrap().len();
    assert_eq!(rows.len(), 2 * n_tokens * 2);
    for i in 0..rows.len() {
        let r = rows.row(i).unwrap();
        assert_eq!(r.get::<_, String>("prompt").unwrap(), "abc");
        let rank = r.get::<_, i64>("rank").unwrap();
        assert!(rank == 1 || rank == 2);
        let e = r.get::<_, i64>("expert").unwrap();
        assert!((0..4).contains(&e));
    }
    // Weights of one position sum to 1 (top-k then softmax).
    let sums = conn
        .execute(
            "SELECT layer, position, sum(weight) AS w FROM routes WHERE prompt = 'abc' \
             GROUP BY layer, position",
        )
        .unwrap();
    assert_eq!(sums.len(), 2 * n_tokens);
    for i in 0..sums.len() {
        let w = sums.row(i).unwrap().get::<_, f64>("w").unwrap();
        assert!((w - 1.0).abs() < 1e-6, "{w}");
    }
    let per = conn
        .execute(
            "SELECT layer, expert, count(*) AS n FROM routes WHERE prompt = 'abc' AND rank = 1 \
             GROUP BY layer, expert ORDER BY layer, expert",
        )
        .unwrap();
    let total: i64 = (0..per.len())
        .map(|i| per.row(i).unwrap().get::<_, i64>("n").unwrap())
        .sum();
    assert_eq!(total as usize, 2 * n_tokens);
    let e = conn
        .execute("SELECT * FROM routes")
        .unwrap_err()
        .to_string();
    assert!(e.contains("WHERE prompt"), "{e}");
    // SHOW TABLES lists routes on a model with a router, with the predicate it needs.
    let tables = conn.execute("SHOW TABLES").unwrap();
    let routes = tables
        .iter()
        .find(|r| r.get::<_, String>("table").unwrap() == "routes")
        .expect("routes listed on a MoE model");
    assert!(routes
        .get::<_, String>("requires")
        .unwrap()
        .contains("WHERE prompt"));
    let plan = conn
        .execute("EXPLAIN PLAN SELECT count(*) FROM routes WHERE prompt = 'abc'")
        .unwrap();
    let text: String = (0..plan.len())
        .map(|i| format!("{:?}\n", plan.row(i).unwrap()))
        .collect();
    assert!(text.contains("prompt="), "{text}");
}
