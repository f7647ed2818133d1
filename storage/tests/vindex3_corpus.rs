//! The VINDEX3 conformance corpus (`tests/fixtures/vindex3/`): small valid and invalid
//! containers, one per rule of seed 002 §5.7, §9 and §12 this build enforces, each with
//! its expected verdict in `manifest.json` — a harness another implementation can run.
//!
//! - `corpus_verdicts` reads the manifest and checks every case against this build.
//! - `corpus_matches_its_generator` rebuilds the corpus in a temporary folder and compares
//!   it byte for byte with the committed one (`LQL_WRITE_VINDEX3_CORPUS=1` rewrites the
//!   committed corpus instead).
//!
//! Manifest entries: `case` (folder under `cases/`), `op` (`open`: bind for execution;
//! `open_profile`: bind with `profile`; `verify`: re-hash; `detect`: generation and shape;
//! `compact`: COMPACT a copy INTO a new folder — `accept` when the output keeps the
//! index byte for byte and verifies as the input did, the report searched for `expect`),
//! `verdict` (`accept` | `refuse` for open/detect; `ok` | `failed` | `unverified` for
//! verify — the worst row), `expect` (substrings the refusal, a failing row's detail or
//! COMPACT's report must contain), `rule` (the seed section).

mod vindex3_support;

use std::path::{Path, PathBuf};

use lql_storage::format::vindex3::{
    self, extract, open_model, open_model_profile, verify, ExtractEncoding, VerifyStatus,
};
use lql_storage::DType;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use vindex3_support::{hex, lyrw_dense, synthetic, Geometry};

/// The tiny model every case is encoded from (a few KB per container).
const TINY: Geometry = Geometry {
    layers: 1,
    hidden: 32,
    ffn: 32,
    heads: 2,
    kv_heads: 1,
    vocab: 8,
    tied: true,
    matrix: DType::Q8_0,
};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/vindex3")
}

fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

fn write_json(p: &Path, v: &Value) {
    let mut b = serde_json::to_vec_pretty(v).unwrap();
    b.push(b'\n');
    std::fs::write(p, b).unwrap();
}

fn edit(p: &Path, f: impl FnOnce(&mut Value)) {
    let mut v = read_json(p);
    f(&mut v);
    write_json(p, &v);
}

/// One corpus case being built.
struct Case {
    name: String,
    op: &'static str,
    profile: Option<&'static str>,
    verdict: &'static str,
    expect: Vec<&'static str>,
    rule: &'static str,
}

struct Builder {
    cases_dir: PathBuf,
    cases: Vec<Case>,
}

impl Builder {
    fn dir(&self, name: &str) -> PathBuf {
        self.cases_dir.join(name)
    }

    /// Extract the tiny model as `name` with `enc` (tied or not).
    fn extract(&self, name: &str, enc: ExtractEncoding, tied: bool) -> PathBuf {
        let out = self.dir(name);
        let model = synthetic(Geometry { tied, ..TINY });
        extract(&model, &out, enc, &mut |_| {}).unwrap();
        out
    }

    /// A SOURCE extract of the tiny model as `name`, then `f` applied to it.
    fn graph_case(&self, name: &str, f: impl FnOnce(&Path)) {
        let d = self.extract(name, ExtractEncoding::Source, true);
        f(&d);
    }

    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        name: &str,
        op: &'static str,
        profile: Option<&'static str>,
        verdict: &'static str,
        expect: &[&'static str],
        rule: &'static str,
    ) {
        self.cases.push(Case {
            name: name.into(),
            op,
            profile,
            verdict,
            expect: expect.to_vec(),
            rule,
        });
    }

    /// A tiny Mixtral-style model (1 layer, hidden 16, 4 experts of width 16, top-2)
    /// written by `EXTRACT … SHAPE BANK GROUP 2` as `name`, then `f` applied to it.
    fn moe_bank(&self, name: &str, f: impl FnOnce(&Path)) {
        use lql_storage::format::gguf::synth::{TinyModel, TinyMoe};
        let t = tempfile::tempdir().unwrap();
        let gguf = t.path().join("tiny-moe.gguf");
        TinyModel {
            layers: 1,
            hidden: 16,
            ffn: 16,
            heads: 2,
            kv_heads: 1,
            vocab: 259,
            moe: Some(TinyMoe {
                experts: 4,
                used: 2,
                expert_ffn: 16,
                shared_ffn: 0,
                shared_gate: false,
                sigmoid: false,
            }),
            ..TinyModel::llama()
        }
        .write(&gguf)
        .unwrap();
        let model = lql_storage::import::open(&gguf).unwrap();
        let out = self.dir(name);
        vindex3::extract_bank(
            &model,
            &out,
            Some(2),
            &mut |_| {},
            &std::sync::atomic::AtomicBool::new(false),
        )
        .unwrap();
        f(&out);
    }

    fn bank(&self, name: &str, segments: Value, files: &[(&str, Vec<u8>)]) {
        let d = self.dir(name);
        std::fs::create_dir_all(&d).unwrap();
        write_json(
            &d.join("index.json"),
            &json!({"version": 4, "model": "tiny-moe", "family": "gpt-oss", "hidden_size": 16,
                    "num_layers": 1, "system_graph": null, "moe_manifest": "moe_manifest.json",
                    "representations": {}, "segments": segments, "profiles": [],
                    "variants": {}, "authority": "canonical"}),
        );
        write_json(
            &d.join("moe_manifest.json"),
            &json!({"moe_layer": {"layer": 0}}),
        );
        for (f, bytes) in files {
            std::fs::write(d.join(f), bytes).unwrap();
        }
    }
}

/// Overwrite `bytes` at `at` in file `f`.
fn patch_file(f: &Path, at: usize, bytes: &[u8]) {
    let mut b = std::fs::read(f).unwrap();
    b[at..at + bytes.len()].copy_from_slice(bytes);
    std::fs::write(f, b).unwrap();
}

/// Rewrite one tensor's dtype in a segment header (same header length) and re-record the
/// segment hash so the container stays self-consistent.
fn set_tensor_dtype(d: &Path, object: &str, tensor: &str, dtype: &str) {
    let rel = format!("segments/{object}.bin");
    let seg = d.join(&rel);
    let mut b = std::fs::read(&seg).unwrap();
    let hlen = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    let mut h: Value = serde_json::from_slice(&b[8..8 + hlen]).unwrap();
    let t = h["tensors"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|t| t["name"] == json!(tensor))
        .unwrap_or_else(|| panic!("no tensor {tensor} in {rel}"));
    t["dtype"] = json!(dtype);
    let mut hb = serde_json::to_vec(&h).unwrap();
    assert!(hb.len() <= hlen);
    hb.resize(hlen, b' ');
    b[8..8 + hlen].copy_from_slice(&hb);
    std::fs::write(&seg, &b).unwrap();
    edit(&d.join("index.json"), |i| {
        i["representations"][format!("{object}@source")]["segment_sha256"] =
            json!(hex(Sha256::digest(&b)));
    });
}

/// Write every case and the manifest under `out`.
fn build(out: &Path) {
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(out.join("cases")).unwrap();
    let mut b = Builder {
        cases_dir: out.join("cases"),
        cases: Vec::new(),
    };
    let ig = |d: &Path| d.join("index.json");
    let gg = |d: &Path| d.join("system_graph.json");

    // ---- valid containers --------------------------------------------------------------
    b.extract("valid-source-tied", ExtractEncoding::Source, true);
    b.add("valid-source-tied", "open", None, "accept", &[], "§5.3");
    b.add("valid-source-tied", "verify", None, "ok", &[], "§20");
    b.extract("valid-source-untied", ExtractEncoding::Source, false);
    b.add("valid-source-untied", "open", None, "accept", &[], "§5.3");
    b.add("valid-source-untied", "verify", None, "ok", &[], "§20");
    for (name, enc) in [
        ("valid-q8_0", ExtractEncoding::Q8_0),
        ("valid-f16", ExtractEncoding::F16),
        ("valid-f32", ExtractEncoding::F32),
    ] {
        b.extract(name, enc, true);
        b.add(name, "open", None, "accept", &[], "§9.2");
        b.add(name, "verify", None, "ok", &[], "§20");
    }
    {
        let src = open_model(&b.dir("valid-f16")).unwrap();
        extract(
            &src,
            &b.dir("valid-derived-from-f16"),
            ExtractEncoding::Source,
            &mut |_| {},
        )
        .unwrap();
        b.add(
            "valid-derived-from-f16",
            "open",
            None,
            "accept",
            &[],
            "§9.2",
        );
        b.add("valid-derived-from-f16", "verify", None, "ok", &[], "§20");
    }
    b.graph_case("valid-index-version-3", |d| {
        edit(&ig(d), |i| i["version"] = json!(3))
    });
    b.add(
        "valid-index-version-3",
        "open",
        None,
        "accept",
        &[],
        "§12.1",
    );
    b.graph_case("valid-unknown-fields", |d| {
        edit(&ig(d), |i| {
            i["future_field"] = json!({"x": 1});
            i["representations"]["text.embedding@source"]["future"] = json!(true);
        });
        edit(&gg(d), |g| g["future_graph_field"] = json!([1, 2]));
    });
    b.add("valid-unknown-fields", "open", None, "accept", &[], "§5.7");
    b.graph_case("valid-unknown-file", |d| {
        std::fs::write(d.join("NOTES.unknown"), b"ignored by readers\n").unwrap()
    });
    b.add("valid-unknown-file", "open", None, "accept", &[], "§5.7");
    b.add("valid-unknown-file", "verify", None, "ok", &[], "§5.7");
    b.graph_case("valid-unknown-encoding-one-tensor", |d| {
        set_tensor_dtype(d, "text.decoder_stack", "ffn_down.weight", "Q4_X")
    });
    b.add(
        "valid-unknown-encoding-one-tensor",
        "open",
        None,
        "accept",
        &[],
        "§5.7 (refused at capability check, not at read)",
    );
    b.graph_case("valid-second-profile", |d| {
        edit(&ig(d), |i| {
            let sel = i["profiles"][0]["select"].clone();
            i["profiles"]
                .as_array_mut()
                .unwrap()
                .push(json!({"profile": "mixed-precision", "select": sel}));
        })
    });
    b.add(
        "valid-second-profile",
        "open_profile",
        Some("mixed-precision"),
        "accept",
        &[],
        "§9.1",
    );
    // A second variant beside the baseline (an incremental pack: a new segment file) and a
    // profile selecting it.
    b.graph_case("valid-second-variant", |d| {
        let donor = b.dir("valid-f16");
        let di = read_json(&ig(&donor));
        let mut entry = di["representations"]["text.decoder_stack@f16"].clone();
        let seg = "segments/text.decoder_stack.f16.bin";
        std::fs::copy(donor.join(entry["segment"].as_str().unwrap()), d.join(seg)).unwrap();
        entry["segment"] = json!(seg);
        edit(&ig(d), |i| {
            i["representations"]["text.decoder_stack@f16"] = entry.clone();
            i["variants"]["text.decoder_stack"]["variants"]["f16"] = json!({
                "storage": seg, "representation": "text.decoder_stack@f16",
                "fidelity": entry["fidelity"].clone()});
            let mut p = i["profiles"][0].clone();
            p["profile"] = json!("mixed-precision");
            p["select"]["text.decoder_stack"] = json!("f16");
            i["profiles"].as_array_mut().unwrap().push(p);
        });
    });
    b.add("valid-second-variant", "open", None, "accept", &[], "§9.1");
    b.add(
        "valid-second-variant",
        "open_profile",
        Some("mixed-precision"),
        "accept",
        &[],
        "§9.1.4",
    );
    b.add("valid-second-variant", "verify", None, "ok", &[], "§20");
    // §9.2: COMPILE of an edited state records the changed objects at the fidelity they
    // have and never names its profile `exact`.
    {
        let out = b.dir("compiled-edited-state");
        let model = synthetic(TINY);
        lql_storage::format::vindex3::extract_stamped(
            &model,
            &out,
            ExtractEncoding::Source,
            Some(&lql_storage::format::vindex3::Derivation {
                derived_from_model: "0".repeat(64),
                applied_patches: vec!["1".repeat(64)],
                changed_objects: ["text.decoder_stack".to_string()].into_iter().collect(),
            }),
            &mut |_| {},
            &std::sync::atomic::AtomicBool::new(false),
        )
        .unwrap();
    }
    b.add(
        "compiled-edited-state",
        "profiles",
        None,
        "accept",
        &[
            "authority=derived",
            "text.decoder_stack@source=numerically-approximate",
            "text.embedding@source=source-exact",
            "profile edited=numerically-approximate",
        ],
        "§9.2",
    );
    b.add(
        "valid-source-untied",
        "extract",
        None,
        "accept",
        &["objects"],
        "§17.4",
    );
    b.graph_case("valid-voluntary-lower-claim", |d| {
        edit(&ig(d), |i| {
            i["profiles"][0]["authority"] = json!("numerically-approximate")
        })
    });
    b.add(
        "valid-voluntary-lower-claim",
        "open_profile",
        Some("exact"),
        "accept",
        &[],
        "§9.2",
    );

    // ---- generation and envelope (§12) -------------------------------------------------
    for (name, v, want) in [
        ("refuse-version-1", json!(1), "VINDEX2"),
        ("refuse-version-2", json!(2), "VINDEX2"),
        ("refuse-version-5", json!(5), "version 5 is unknown"),
        ("refuse-version-string", json!("4"), "not an integer"),
    ] {
        b.graph_case(name, |d| edit(&ig(d), |i| i["version"] = v));
        b.add(name, "detect", None, "refuse", &[want], "§12.1");
    }
    b.graph_case("refuse-version-missing", |d| {
        edit(&ig(d), |i| {
            i.as_object_mut().unwrap().remove("version");
        })
    });
    b.add(
        "refuse-version-missing",
        "detect",
        None,
        "refuse",
        &["no \"version\""],
        "§12.1",
    );
    b.graph_case("refuse-no-graph-no-manifest", |d| {
        edit(&ig(d), |i| i["system_graph"] = Value::Null)
    });
    b.add(
        "refuse-no-graph-no-manifest",
        "detect",
        None,
        "refuse",
        &["system_graph"],
        "§5.2",
    );
    b.graph_case("refuse-duplicate-key", |d| {
        let t = std::fs::read_to_string(ig(d)).unwrap();
        std::fs::write(ig(d), t.replacen('{', "{\n  \"version\": 4,", 1)).unwrap();
    });
    b.add(
        "refuse-duplicate-key",
        "detect",
        None,
        "refuse",
        &["version"],
        "§5.2",
    );

    // ---- graph schema, census and facts stored twice (§12.4, §17.9–17.10) --------------
    b.graph_case("refuse-graph-schema-5", |d| {
        edit(&gg(d), |g| g["schema"] = json!(5))
    });
    b.add(
        "refuse-graph-schema-5",
        "open",
        None,
        "refuse",
        &["schema 5", "schema 6"],
        "§12.4",
    );
    b.graph_case("refuse-graph-schema-missing", |d| {
        edit(&gg(d), |g| {
            g.as_object_mut().unwrap().remove("schema");
        })
    });
    b.add(
        "refuse-graph-schema-missing",
        "open",
        None,
        "refuse",
        &["schema"],
        "§12.4",
    );
    b.graph_case("refuse-attention-missing", |d| {
        edit(&gg(d), |g| {
            g["components"][0]
                .as_object_mut()
                .unwrap()
                .remove("attention");
        })
    });
    b.add(
        "refuse-attention-missing",
        "open",
        None,
        "refuse",
        &["census", "layer 0"],
        "§17.9",
    );
    b.graph_case("refuse-attention-extra-layer", |d| {
        edit(&gg(d), |g| {
            let a = g["components"][0]["attention"][0].clone();
            let mut a2 = a.clone();
            a2["layer"] = json!(1);
            g["components"][0]["attention"] = json!([a, a2]);
        })
    });
    b.add(
        "refuse-attention-extra-layer",
        "open",
        None,
        "refuse",
        &["census"],
        "§17.9",
    );
    b.graph_case("refuse-attention-wrong-layer", |d| {
        edit(&gg(d), |g| {
            g["components"][0]["attention"][0]["layer"] = json!(7)
        })
    });
    b.add(
        "refuse-attention-wrong-layer",
        "open",
        None,
        "refuse",
        &["census", "layer 7"],
        "§17.9",
    );
    b.graph_case("refuse-attention-operator-linear", |d| {
        edit(&gg(d), |g| {
            g["components"][0]["attention"][0]["operator"] = json!("linear")
        })
    });
    b.add(
        "refuse-attention-operator-linear",
        "open",
        None,
        "refuse",
        &["not supported yet", "linear"],
        "§17.10",
    );
    b.graph_case("refuse-attention-span-sliding", |d| {
        edit(&gg(d), |g| {
            g["components"][0]["attention"][0]["span"] = json!("sliding")
        })
    });
    b.add(
        "refuse-attention-span-sliding",
        "open",
        None,
        "refuse",
        &["sliding", "stored twice"],
        "§17.10",
    );
    // Schema 6 (§17.4): the recorded operation program and continuation state must be the
    // ones the surface and the bound operands imply, and close over the layer's operands.
    b.graph_case("refuse-program-drops-an-operation", |d| {
        edit(&gg(d), |g| {
            let ops = g["components"][0]["program"][0]["ops"]
                .as_array_mut()
                .unwrap();
            ops.retain(|o| o["op"] != json!("ffn"));
        })
    });
    b.add(
        "refuse-program-drops-an-operation",
        "open",
        None,
        "refuse",
        &["program", "ffn_gate", "close over"],
        "§17.4",
    );
    b.graph_case("refuse-program-role-outside-its-operation", |d| {
        edit(&gg(d), |g| {
            let roles = g["components"][0]["program"][0]["ops"][1]["roles"]
                .as_array_mut()
                .unwrap();
            roles.push(json!("ffn_down"));
        })
    });
    b.add(
        "refuse-program-role-outside-its-operation",
        "open",
        None,
        "refuse",
        &["program", "ffn_down"],
        "§17.4",
    );
    b.graph_case("refuse-continuation-without-kv", |d| {
        edit(&gg(d), |g| {
            g["components"][0]["continuation"][0]["regions"] = json!([]);
        })
    });
    b.add(
        "refuse-continuation-without-kv",
        "open",
        None,
        "refuse",
        &["continuation", "kv"],
        "§17.4",
    );
    b.graph_case("refuse-program-census-short", |d| {
        edit(&gg(d), |g| {
            g["components"][0]["program"] = json!([]);
        })
    });
    b.add(
        "refuse-program-census-short",
        "open",
        None,
        "refuse",
        &["continuation entries", "every layer"],
        "§17.4",
    );
    b.graph_case("refuse-rope-theta-disagrees", |d| {
        edit(&gg(d), |g| {
            g["components"][0]["attention"][0]["position"]["rope"]["theta"] = json!(500000.0)
        })
    });
    b.add(
        "refuse-rope-theta-disagrees",
        "open",
        None,
        "refuse",
        &["theta", "stored twice"],
        "§17.9",
    );
    b.graph_case("refuse-rope-pairing-disagrees", |d| {
        edit(&gg(d), |g| {
            g["components"][0]["attention"][0]["position"]["rope"]["pairing"] = json!("half_split")
        })
    });
    b.add(
        "refuse-rope-pairing-disagrees",
        "open",
        None,
        "refuse",
        &["pairing", "stored twice"],
        "§17.9",
    );
    b.graph_case("refuse-position-none-with-rope", |d| {
        edit(&gg(d), |g| {
            g["components"][0]["attention"][0]["position"] = json!("none")
        })
    });
    b.add(
        "refuse-position-none-with-rope",
        "open",
        None,
        "refuse",
        &["position", "stored twice"],
        "§17.9",
    );
    b.graph_case("refuse-index-hidden-size-disagrees", |d| {
        edit(&ig(d), |i| i["hidden_size"] = json!(48))
    });
    b.add(
        "refuse-index-hidden-size-disagrees",
        "open",
        None,
        "refuse",
        &["hidden_size 48", "stored twice"],
        "§5.2",
    );
    b.graph_case("refuse-index-num-layers-disagrees", |d| {
        edit(&ig(d), |i| i["num_layers"] = json!(2))
    });
    b.add(
        "refuse-index-num-layers-disagrees",
        "open",
        None,
        "refuse",
        &["num_layers 2"],
        "§5.2",
    );
    b.graph_case("refuse-component-hidden-size-disagrees", |d| {
        edit(&gg(d), |g| g["components"][0]["hidden_size"] = json!(48))
    });
    b.add(
        "refuse-component-hidden-size-disagrees",
        "open",
        None,
        "refuse",
        &["hidden_size", "stored twice"],
        "§17",
    );
    b.graph_case("refuse-two-components", |d| {
        edit(&gg(d), |g| {
            let mut c = g["components"][0].clone();
            c["id"] = json!("drafter");
            c["role"] = json!("drafter");
            g["components"].as_array_mut().unwrap().push(c);
        })
    });
    b.add(
        "refuse-two-components",
        "open",
        None,
        "refuse",
        &["not supported yet", "drafter"],
        "§5.1",
    );
    b.graph_case("refuse-duplicate-object-id", |d| {
        edit(&gg(d), |g| {
            let o = g["objects"][0].clone();
            g["objects"].as_array_mut().unwrap().push(o);
        })
    });
    b.add(
        "refuse-duplicate-object-id",
        "open",
        None,
        "refuse",
        &["appears twice"],
        "§5.1",
    );

    // ---- operand closure (§5.7, §11, §17) ----------------------------------------------
    b.graph_case("refuse-operand-missing", |d| {
        edit(&gg(d), |g| {
            g["components"][0]["operands"]
                .as_array_mut()
                .unwrap()
                .retain(|o| !(o["role"] == json!("ffn_up") && o["layer"] == json!(0)));
        })
    });
    b.add(
        "refuse-operand-missing",
        "open",
        None,
        "refuse",
        &["ffn_up", "text.decoder_stack", "segment"],
        "§5.7",
    );
    b.graph_case("refuse-operand-tensor-absent", |d| {
        edit(&gg(d), |g| {
            for o in g["components"][0]["operands"].as_array_mut().unwrap() {
                if o["role"] == json!("attn_q") {
                    o["tensor"] = json!("0.no_such_tensor.weight");
                }
            }
        })
    });
    b.add(
        "refuse-operand-tensor-absent",
        "open",
        None,
        "refuse",
        &["no_such_tensor", "text.decoder_stack.bin"],
        "§5.7",
    );
    b.graph_case("refuse-operand-role-unknown", |d| {
        edit(&gg(d), |g| {
            g["components"][0]["operands"][0]["role"] = json!("router_logits")
        })
    });
    b.add(
        "refuse-operand-role-unknown",
        "open",
        None,
        "refuse",
        &["not supported yet", "router_logits"],
        "§5.7",
    );
    b.graph_case("refuse-operand-shape-disagrees", |d| {
        edit(&gg(d), |g| {
            g["components"][0]["execution_surface"]["ffn"] = json!(64)
        })
    });
    b.add(
        "refuse-operand-shape-disagrees",
        "open",
        None,
        "refuse",
        &["shape", "ffn_"],
        "§17",
    );

    // ---- variants and profiles (§9) ----------------------------------------------------
    b.graph_case("refuse-profile-selects-absent-variant", |d| {
        edit(&ig(d), |i| {
            i["profiles"][0]["select"]["text.final_norm"] = json!("nvfp4")
        });
        std::fs::remove_file(d.join("segments/text.embedding.bin")).unwrap();
    });
    b.add(
        "refuse-profile-selects-absent-variant",
        "open_profile",
        Some("exact"),
        "refuse",
        &["text.final_norm", "\"nvfp4\"", "\"source\""],
        "§9.1 (before any segment byte is read)",
    );
    b.graph_case("refuse-profile-unknown", |d| {
        let _ = d;
    });
    b.add(
        "refuse-profile-unknown",
        "open_profile",
        Some("native-lowbit"),
        "refuse",
        &["native-lowbit", "exact"],
        "§9.1",
    );
    b.graph_case("refuse-profile-named-twice", |d| {
        edit(&ig(d), |i| {
            let p = i["profiles"][0].clone();
            i["profiles"].as_array_mut().unwrap().push(p);
        })
    });
    b.add(
        "refuse-profile-named-twice",
        "open_profile",
        Some("exact"),
        "refuse",
        &["named twice"],
        "§9.1",
    );
    {
        // F16 of Q8_0 matrices is lossy: the profile derives numerically-approximate.
        let d = b.extract(
            "refuse-profile-claims-above-derived",
            ExtractEncoding::F16,
            true,
        );
        edit(&ig(&d), |i| {
            i["profiles"][0]["profile"] = json!("compact-approximate");
            i["profiles"][0]["authority"] = json!("source-exact");
        });
    }
    b.add(
        "refuse-profile-claims-above-derived",
        "open_profile",
        Some("compact-approximate"),
        "refuse",
        &["claims authority", "numerically-approximate"],
        "§9.2",
    );
    b.graph_case("refuse-variant-catalogue-missing-object", |d| {
        edit(&ig(d), |i| {
            i["variants"]
                .as_object_mut()
                .unwrap()
                .remove("text.final_norm");
        })
    });
    b.add(
        "refuse-variant-catalogue-missing-object",
        "open",
        None,
        "refuse",
        &["text.final_norm", "variant catalogue"],
        "§9.1",
    );
    b.graph_case("refuse-variant-baseline-absent", |d| {
        edit(&ig(d), |i| {
            i["variants"]["text.final_norm"]["baseline"] = json!("bf16")
        })
    });
    b.add(
        "refuse-variant-baseline-absent",
        "open",
        None,
        "refuse",
        &["baseline", "bf16"],
        "§9.1",
    );
    b.graph_case("refuse-variant-names-unrecorded-representation", |d| {
        edit(&ig(d), |i| {
            i["variants"]["text.final_norm"]["variants"]["source"]["representation"] =
                json!("text.final_norm@bf16")
        })
    });
    b.add(
        "refuse-variant-names-unrecorded-representation",
        "open",
        None,
        "refuse",
        &["text.final_norm@bf16"],
        "§9.1",
    );
    b.graph_case("refuse-variant-unknown-fidelity", |d| {
        edit(&ig(d), |i| {
            i["variants"]["text.final_norm"]["variants"]["source"]["fidelity"] = json!("perfect")
        })
    });
    b.add(
        "refuse-variant-unknown-fidelity",
        "open",
        None,
        "refuse",
        &["unknown fidelity", "perfect"],
        "§9.2",
    );

    // ---- segments (§5.3, §5.7) ---------------------------------------------------------
    b.graph_case("refuse-segment-missing", |d| {
        std::fs::remove_file(d.join("segments/text.final_norm.bin")).unwrap()
    });
    b.add(
        "refuse-segment-missing",
        "open",
        None,
        "refuse",
        &["text.final_norm.bin"],
        "§5.7",
    );
    b.add(
        "refuse-segment-missing",
        "verify",
        None,
        "failed",
        &["text.final_norm.bin"],
        "§20",
    );
    b.graph_case("refuse-segment-truncated", |d| {
        let p = d.join("segments/text.decoder_stack.bin");
        let s = std::fs::read(&p).unwrap();
        std::fs::write(&p, &s[..s.len() - 5]).unwrap();
    });
    b.add(
        "refuse-segment-truncated",
        "open",
        None,
        "refuse",
        &["truncated", "text.decoder_stack"],
        "§5.3",
    );
    b.graph_case("refuse-segment-header-length-absurd", |d| {
        let p = d.join("segments/text.embedding.bin");
        let mut s = std::fs::read(&p).unwrap();
        s[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        std::fs::write(&p, &s).unwrap();
    });
    b.add(
        "refuse-segment-header-length-absurd",
        "open",
        None,
        "refuse",
        &["header length"],
        "§5.3",
    );
    b.graph_case("refuse-segment-path-escapes", |d| {
        edit(&ig(d), |i| {
            i["representations"]["text.final_norm@source"]["segment"] =
                json!("../valid-source-tied/segments/text.final_norm.bin")
        })
    });
    b.add(
        "refuse-segment-path-escapes",
        "open",
        None,
        "refuse",
        &["representations.segment"],
        "§5.2",
    );

    // ---- verification (§20) ------------------------------------------------------------
    b.graph_case("verify-payload-byte-flipped", |d| {
        let p = d.join("segments/text.decoder_stack.bin");
        let mut s = std::fs::read(&p).unwrap();
        let n = s.len();
        s[n - 3] ^= 0x40;
        std::fs::write(&p, &s).unwrap();
    });
    b.add(
        "verify-payload-byte-flipped",
        "open",
        None,
        "accept",
        &[],
        "§20 (open never hashes)",
    );
    b.add(
        "verify-payload-byte-flipped",
        "verify",
        None,
        "failed",
        &["differs", "text.decoder_stack.bin"],
        "§20",
    );
    b.graph_case("verify-graph-edited", |d| {
        edit(&gg(d), |g| g["annotation"] = json!("edited after encode"))
    });
    b.add(
        "verify-graph-edited",
        "verify",
        None,
        "failed",
        &["system_graph.json"],
        "§20",
    );
    b.graph_case("verify-capability-edited", |d| {
        std::fs::write(d.join("chat_template.jinja"), b"{{ edited }}").unwrap()
    });
    b.add(
        "verify-capability-edited",
        "verify",
        None,
        "failed",
        &["chat_template.jinja"],
        "§20",
    );

    b.graph_case("verify-records-no-hash", |d| {
        edit(&ig(d), |i| {
            let m = i.as_object_mut().unwrap();
            m.remove("system_graph_sha256");
            m.remove("capabilities");
            m.insert("representations".into(), json!({}));
        })
    });
    b.add(
        "verify-records-no-hash",
        "verify",
        None,
        "failed",
        &["records no hash", "nothing could be verified"],
        "§20 (no hash recorded is not verified)",
    );

    // ---- COMPACT (§5.7, §20): keeps what is referenced, byte for byte -----------------
    b.add(
        "valid-second-variant",
        "compact",
        None,
        "accept",
        &[
            "kept segment segments/text.decoder_stack.f16.bin",
            "text.decoder_stack@f16 (f16)",
            "selected by a profile",
        ],
        "§5.7 (every index-referenced segment is carried)",
    );
    // §17.4 / §5.7: an operand this build cannot decode is never re-encoded or dropped
    // by EXTRACT: it refuses before writing anything.
    b.add(
        "valid-unknown-encoding-one-tensor",
        "extract",
        None,
        "refuse",
        &["unknown encoding", "Q4_X"],
        "§17.4 (closure at encode)",
    );
    b.add(
        "valid-unknown-encoding-one-tensor",
        "compact",
        None,
        "accept",
        &["kept segment segments/text.decoder_stack.bin"],
        "§20 (carries byte-identically what it cannot decode)",
    );
    b.add(
        "valid-unknown-fields",
        "compact",
        None,
        "accept",
        &["kept graph system_graph.json"],
        "§5.7 (unknown index and graph fields are not dropped)",
    );
    b.add(
        "valid-unknown-file",
        "compact",
        None,
        "accept",
        &["carried unknown file NOTES.unknown"],
        "§5.7",
    );
    b.graph_case("compact-unreferenced-files", |d| {
        std::fs::write(d.join("segments/stray.bin"), b"no index names this").unwrap();
        std::fs::write(d.join("system_graph.0123456789abcdef.json"), b"{}").unwrap();
        std::fs::write(d.join("segments/sidecar.bin"), b"named by a future field").unwrap();
        edit(&ig(d), |i| {
            i["future_sidecar"] = json!({"file": "segments/sidecar.bin"})
        });
    });
    b.add(
        "compact-unreferenced-files",
        "compact",
        None,
        "accept",
        &[
            "discarded stray segment file segments/stray.bin",
            "discarded stale graph file system_graph.0123456789abcdef.json",
            "kept referenced file segments/sidecar.bin: index.json names it at future_sidecar.file",
            "kept capability file chat_template.jinja",
        ],
        "§5.7 (discards only unreferenced files, each by name)",
    );
    b.add(
        "refuse-segment-missing",
        "compact",
        None,
        "refuse",
        &["text.final_norm.bin", "absent", "changed nothing"],
        "§5.7",
    );

    // ---- bank shape (§5.4, §5.5) -------------------------------------------------------
    let lyrw = lyrw_dense(0, 16, 64);
    let sha = hex(Sha256::digest(&lyrw));
    b.bank(
        "bank-valid-hashed",
        json!({"layer_000.lyrw": {"codec": "lyrw", "format_version": 2, "sha256": sha}}),
        &[("layer_000.lyrw", lyrw.clone())],
    );
    b.add(
        "bank-valid-hashed",
        "detect",
        None,
        "accept",
        &["bank"],
        "§5.4",
    );
    b.add("bank-valid-hashed", "verify", None, "ok", &[], "§20");
    // §6.4: a block-quantized region declares blocks_with_scales_inline, never row_major.
    let mut q8_row_major = lyrw.clone();
    q8_row_major[64..66].copy_from_slice(&6u16.to_le_bytes()); // schema 0: format q8_0
    let q8_sha = hex(Sha256::digest(&q8_row_major));
    b.bank(
        "verify-bank-block-format-row-major",
        json!({"layer_000.lyrw": {"codec": "lyrw", "format_version": 2, "sha256": q8_sha}}),
        &[("layer_000.lyrw", q8_row_major)],
    );
    b.add(
        "verify-bank-block-format-row-major",
        "verify",
        None,
        "failed",
        &["q8_0", "row_major", "blocks_with_scales_inline"],
        "§6.4",
    );
    b.add(
        "bank-valid-hashed",
        "open",
        None,
        "refuse",
        &["MoE manifest schema missing"],
        "§8, §12",
    );
    b.bank(
        "bank-declared-by-tag-not-name",
        json!({"layer_000.bin": {"codec": "lyrw", "format_version": 2, "sha256": sha}}),
        &[("layer_000.bin", lyrw.clone())],
    );
    b.add(
        "bank-declared-by-tag-not-name",
        "verify",
        None,
        "ok",
        &[],
        "§5.5 (dispatch on declared tags)",
    );
    b.bank(
        "bank-unhashed",
        json!({"layer_000.lyrw": {"format_version": 2}}),
        &[("layer_000.lyrw", lyrw.clone())],
    );
    b.add(
        "bank-unhashed",
        "verify",
        None,
        "unverified",
        &["no recorded sha256"],
        "§20",
    );
    b.bank(
        "bank-unknown-codec",
        json!({"layer_000.lyrw": {"codec": "nvbank", "format_version": 1}}),
        &[("layer_000.lyrw", lyrw.clone())],
    );
    b.add(
        "bank-unknown-codec",
        "verify",
        None,
        "unverified",
        &["not supported yet"],
        "§5.7 (preserved, not read)",
    );
    b.bank(
        "bank-hash-mismatch",
        json!({"layer_000.lyrw": {"format_version": 2, "sha256": "00".repeat(32)}}),
        &[("layer_000.lyrw", lyrw.clone())],
    );
    b.add(
        "bank-hash-mismatch",
        "verify",
        None,
        "failed",
        &["recorded sha256"],
        "§20",
    );
    b.bank(
        "bank-file-missing",
        json!({"layer_000.bin": {"format_version": 2}}),
        &[],
    );
    b.add(
        "bank-file-missing",
        "verify",
        None,
        "failed",
        &["layer_000.bin"],
        "§20",
    );
    b.bank("bank-no-segments", json!({}), &[]);
    b.add(
        "bank-no-segments",
        "verify",
        None,
        "failed",
        &["lists no segment"],
        "§20",
    );
    b.bank(
        "bank-truncated",
        json!({"layer_000.lyrw": {"format_version": 2}}),
        &[("layer_000.lyrw", lyrw[..lyrw.len() - 1].to_vec())],
    );
    b.add(
        "bank-truncated",
        "verify",
        None,
        "failed",
        &["layer_000.lyrw"],
        "§6",
    );

    // ---- bank shape written by EXTRACT … SHAPE BANK (§6, §7, §8) ----------------------
    // One layer, 4 experts of width 16 (f32), top-2, group extents of 2. In each LYRW file:
    // header 24 B, one bank descriptor (24), one segment descriptor (12), three region
    // schemas (60), then the entry table at byte 120: entry e, role r at 120 + 16·(3e + r).
    const ENTRIES: usize = 120;
    let lyrw = "banks/layer_000.lyrw";
    b.moe_bank("bank-shape-valid", |_| {});
    b.add(
        "bank-shape-valid",
        "detect",
        None,
        "accept",
        &["bank"],
        "§5.4",
    );
    b.add(
        "bank-shape-valid",
        "open",
        None,
        "accept",
        &[],
        "§5.4, §6, §8",
    );
    b.add("bank-shape-valid", "verify", None, "ok", &[], "§20");
    b.moe_bank("refuse-bank-group-not-dividing", |d| {
        edit(&d.join("index.json"), |v| {
            v["segments"][lyrw]["group_width"] = json!(3)
        });
        edit(&d.join("moe_manifest.json"), |v| {
            v["layers"][0]["moe_layer"]["routed_bank"]["group_width"] = json!(3)
        });
    });
    b.add(
        "refuse-bank-group-not-dividing",
        "open",
        None,
        "refuse",
        &["bad group extents", "group width of 3", "4 entries"],
        "§7",
    );
    b.moe_bank("refuse-bank-count-exceeds-file", |d| {
        patch_file(&d.join(lyrw), 12, &u16::MAX.to_le_bytes());
    });
    b.add(
        "refuse-bank-count-exceeds-file",
        "open",
        None,
        "refuse",
        &["layer_000.lyrw", "bank descriptors", "65535 records"],
        "§6.1",
    );
    b.moe_bank("refuse-bank-overlapping-groups", |d| {
        // Entry 2 (the second group extent) points its gate region at entry 1's bytes.
        let f = d.join(lyrw);
        let bytes = std::fs::read(&f).unwrap();
        let e1 = ENTRIES + 16 * 3;
        let off = bytes[e1..e1 + 8].to_vec();
        patch_file(&f, ENTRIES + 16 * 6, &off);
    });
    b.add(
        "refuse-bank-overlapping-groups",
        "open",
        None,
        "refuse",
        &["layer_000.lyrw", "overlapping regions", "entry 2"],
        "§6.4, §7",
    );
    b.moe_bank("refuse-bank-region-outside-file", |d| {
        patch_file(
            &d.join(lyrw),
            ENTRIES + 16 * 11,
            &(1u64 << 40).to_le_bytes(),
        );
    });
    b.add(
        "refuse-bank-region-outside-file",
        "open",
        None,
        "refuse",
        &["layer_000.lyrw", "not a 64-byte-aligned range inside"],
        "§6.4",
    );
    b.moe_bank("refuse-bank-manifest-schema-2", |d| {
        edit(&d.join("moe_manifest.json"), |v| v["schema"] = json!(2));
    });
    b.add(
        "refuse-bank-manifest-schema-2",
        "open",
        None,
        "refuse",
        &["MoE manifest schema 2", "reads schema 1"],
        "§12",
    );
    b.moe_bank("refuse-bank-entries-disagree", |d| {
        edit(&d.join("moe_manifest.json"), |v| {
            v["layers"][0]["moe_layer"]["routed_bank"]["experts"] = json!(8)
        });
    });
    b.add(
        "refuse-bank-entries-disagree",
        "open",
        None,
        "refuse",
        &["layers[0].moe_layer", "disagree with the surface"],
        "§8.1",
    );

    let manifest: Vec<Value> = b
        .cases
        .iter()
        .map(|c| {
            let mut v = json!({"case": c.name, "op": c.op, "verdict": c.verdict,
                               "expect": c.expect, "rule": c.rule});
            if let Some(p) = c.profile {
                v["profile"] = json!(p);
            }
            v
        })
        .collect();
    write_json(
        &out.join("manifest.json"),
        &json!({
            "about": "VINDEX3 conformance corpus (seed 002). Regenerate: \
                      LQL_WRITE_VINDEX3_CORPUS=1 cargo test -p lql-storage --test vindex3_corpus",
            "cases": manifest,
        }),
    );
}

/// What this build says about one manifest entry: the verdict and the text to search.
fn run_case(dir: &Path, op: &str, profile: Option<&str>) -> (String, String) {
    let outcome = |r: Result<(), String>| match r {
        Ok(()) => ("accept".to_string(), String::new()),
        Err(e) => ("refuse".to_string(), e),
    };
    match op {
        "open" => outcome(open_model(dir).map(|_| ()).map_err(|e| e.to_string())),
        "open_profile" => outcome(
            open_model_profile(dir, profile)
                .map(|_| ())
                .map_err(|e| e.to_string()),
        ),
        "detect" => match vindex3::detect(dir) {
            Ok(shape) => ("accept".into(), shape.name().to_string()),
            Err(e) => ("refuse".into(), e.to_string()),
        },
        "verify" => match verify(dir) {
            Err(e) => ("error".into(), e.to_string()),
            Ok(rows) => {
                let worst = if rows.iter().any(|r| r.status == VerifyStatus::Failed) {
                    "failed"
                } else if rows.iter().any(|r| r.status == VerifyStatus::Unverified) {
                    "unverified"
                } else {
                    "ok"
                };
                let text = rows
                    .iter()
                    .filter(|r| r.status != VerifyStatus::Ok)
                    .map(|r| format!("{}: {}", r.representation, r.detail))
                    .collect::<Vec<_>>()
                    .join("\n");
                (worst.into(), text)
            }
        },
        "compact" => match compact_case(dir) {
            Ok(text) => ("accept".into(), text),
            Err(e) => ("refuse".into(), e),
        },
        "extract" => match extract_case(dir) {
            Ok(text) => ("accept".into(), text),
            Err(e) => ("refuse".into(), e),
        },
        "profiles" => match profiles_case(dir) {
            Ok(text) => ("accept".into(), text),
            Err(e) => ("refuse".into(), e),
        },
        other => panic!("manifest names unknown op {other:?}"),
    }
}

/// A recursive copy of a folder.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// `extract`: EXTRACT the case (opened as a container) into a new folder. Accepted when
/// it writes a container that opens; refused with the error otherwise, and then the
/// output folder must not exist (§17.4: a failing closure leaves no output).
fn extract_case(dir: &Path) -> Result<String, String> {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("out");
    let model = open_model(dir).map_err(|e| e.to_string())?;
    match extract(&model, &out, ExtractEncoding::Source, &mut |_| {}) {
        Ok(r) => {
            open_model(&out).map_err(|e| format!("the written container: {e}"))?;
            Ok(format!("{} objects", r.objects))
        }
        Err(e) if out.exists() => Err(format!("{e}; and the output folder was left behind")),
        Err(e) => Err(e.to_string()),
    }
}

/// `profiles`: the container's authority, every representation's fidelity and every
/// profile's derived authority, one `key=value` line each (`authority=derived`,
/// `text.decoder_stack@source=numerically-approximate`, `profile edited=…`).
fn profiles_case(dir: &Path) -> Result<String, String> {
    let index: Value =
        serde_json::from_slice(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
    let mut lines = vec![format!(
        "authority={}",
        index["authority"].as_str().unwrap_or("?")
    )];
    for (id, r) in index["representations"].as_object().into_iter().flatten() {
        lines.push(format!("{id}={}", r["fidelity"].as_str().unwrap_or("?")));
    }
    for p in lql_storage::format::vindex3::artifact::profiles(dir).map_err(|e| e.to_string())? {
        lines.push(format!("profile {}={}", p.profile, p.authority));
    }
    Ok(lines.join("\n"))
}

/// `compact`: COMPACT a copy of the case INTO a new folder. Accepted when it succeeds,
/// the output's `index.json` is the input's byte for byte and every file the input's
/// VERIFY checked verifies the same; the text is the report, one `action kind path:
/// detail` line per file.
fn compact_case(dir: &Path) -> Result<String, String> {
    use lql_storage::format::vindex3::compact;
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("c");
    copy_dir(dir, &src);
    let staged = compact::stage(
        &src,
        compact::Placement::Copy,
        &mut |_| {},
        &std::sync::atomic::AtomicBool::new(false),
    )
    .map_err(|e| e.to_string())?;
    let out = t.path().join("out");
    compact::publish(&staged, Some(&out)).map_err(|e| e.to_string())?;
    if std::fs::read(src.join("index.json")).unwrap()
        != std::fs::read(out.join("index.json")).unwrap()
    {
        return Err("the compacted index.json differs from the source's".into());
    }
    let status = |d: &Path| -> Vec<(String, VerifyStatus)> {
        verify(d)
            .map(|rows| {
                rows.into_iter()
                    .map(|r| (r.representation, r.status))
                    .collect()
            })
            .unwrap_or_default()
    };
    if status(&src) != status(&out) {
        return Err(format!(
            "VERIFY differs after COMPACT: {:?} then {:?}",
            status(&src),
            status(&out)
        ));
    }
    Ok(staged
        .rows
        .iter()
        .map(|r| format!("{} {} {}: {}", r.action, r.kind, r.path, r.detail))
        .collect::<Vec<_>>()
        .join("\n"))
}

#[test]
fn corpus_verdicts() {
    let manifest = read_json(&root().join("manifest.json"));
    let cases = manifest["cases"].as_array().expect("cases");
    let folders: std::collections::BTreeSet<&str> =
        cases.iter().filter_map(|c| c["case"].as_str()).collect();
    assert!(
        folders.len() >= 40,
        "the corpus holds {} containers",
        folders.len()
    );
    let mut wrong = Vec::new();
    for c in cases {
        let name = c["case"].as_str().unwrap();
        let op = c["op"].as_str().unwrap();
        let dir = root().join("cases").join(name);
        let (verdict, text) = run_case(&dir, op, c["profile"].as_str());
        let want = c["verdict"].as_str().unwrap();
        let missing: Vec<&str> = c["expect"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e.as_str())
            .filter(|e| !text.contains(e))
            .collect();
        if verdict != want || !missing.is_empty() {
            wrong.push(format!(
                "{name} [{op}]: want {want} with {missing:?}, got {verdict}: {text}"
            ));
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

/// Every file under `dir`, relative, sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn corpus_matches_its_generator() {
    if std::env::var_os("LQL_WRITE_VINDEX3_CORPUS").is_some() {
        build(&root());
    }
    let t = tempfile::tempdir().unwrap();
    let fresh = t.path().join("vindex3");
    build(&fresh);
    let (a, b) = (files(&root()), files(&fresh));
    assert_eq!(
        a, b,
        "the committed corpus lists other files than its generator writes (regenerate: \
         LQL_WRITE_VINDEX3_CORPUS=1 cargo test -p lql-storage --test vindex3_corpus)"
    );
    for f in &a {
        assert!(
            std::fs::read(root().join(f)).unwrap() == std::fs::read(fresh.join(f)).unwrap(),
            "{} differs from its generator's output (regenerate: LQL_WRITE_VINDEX3_CORPUS=1 \
             cargo test -p lql-storage --test vindex3_corpus)",
            f.display()
        );
    }
}
