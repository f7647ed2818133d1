//! `VERIFY "c" AGAINST "src"` (seed 002 §20.1–20.2, §17): a container compared with the
//! source it was made from through four explicit authorities, plus payload equivalence
//! with both ends re-hashed.
//!
//! | pair | what is compared |
//! |---|---|
//! | Declared ↔ Resolved | the source's own metadata (GGUF keys, `config.json`) against what the importer judges from it now (layers, widths, heads, vocabulary, RoPE θ, norm ε) |
//! | Resolved ↔ Graph | that judgement against the container's graph: the execution surface field by field, and the operand table (every source operand bound once, under its source name) |
//! | Graph ↔ Encoded | the graph against the segments: every profile's binding closes (every operand present with the shape the surface implies) |
//! | Encoded ↔ Recorded | the container against its own hashes (plain VERIFY): a mismatch is **container corrupted**, naming the segment |
//! | Declared ↔ Encoded | payload equivalence, per tensor, both ends re-hashed now: the container's bytes against the recorded hash, and the source's bytes (re-encoded the way the representation was, when its encoding differs) against the same hash. Container ≠ recorded is **container corrupted** (segment, tensor, byte range); source ≠ recorded with the container intact is **source drifted** (the source tensor) |
//!
//! Streamed: tensors are hashed one at a time from the two mappings (re-encoding in bounded
//! batches; a representation REPRESENT made from a re-encoded base is re-derived through the
//! same steps, one tensor in memory); no model is held in memory. A derived container (made from another
//! container or an edited state) has no byte-level relation to a checkpoint: its payload
//! rows are `unverified` with the reason.

use std::collections::BTreeMap;
use std::path::Path;

use rayon::prelude::*;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::index::{read_json, resolve, Authority};
use super::reader::Container;
use super::segment::parse_header;
use super::verify::{verify, VerifyStatus};
use super::{variants, TEXT_COMPONENT};
use crate::dtype::DType;
use crate::error::{Result, StorageError};
use crate::fsutil::hex;
use crate::import::{self, SourceFormat};
use crate::model::{Model, OperandKey, Role};

/// One row of `VERIFY … AGAINST`.
#[derive(Debug, Clone, PartialEq)]
pub struct AgainstRow {
    /// The authority pair compared (`Declared ↔ Resolved`, …).
    pub authorities: String,
    /// Logical object, representation or fact.
    pub object: String,
    pub check: String,
    pub status: VerifyStatus,
    pub expected: String,
    pub actual: String,
    pub detail: String,
}

const DECLARED_RESOLVED: &str = "Declared ↔ Resolved";
const RESOLVED_GRAPH: &str = "Resolved ↔ Graph";
const GRAPH_ENCODED: &str = "Graph ↔ Encoded";
const ENCODED_RECORDED: &str = "Encoded ↔ Recorded";
const DECLARED_ENCODED: &str = "Declared ↔ Encoded";

fn row(
    authorities: &str,
    object: impl Into<String>,
    check: impl Into<String>,
    ok: bool,
    expected: impl Into<String>,
    actual: impl Into<String>,
    detail: impl Into<String>,
) -> AgainstRow {
    AgainstRow {
        authorities: authorities.into(),
        object: object.into(),
        check: check.into(),
        status: if ok {
            VerifyStatus::Ok
        } else {
            VerifyStatus::Failed
        },
        expected: expected.into(),
        actual: actual.into(),
        detail: detail.into(),
    }
}

/// Compare the container at `dir` with `source` (a GGUF file or a Hugging Face folder).
/// Errors only when either cannot be read at all; every finding is a row.
pub fn verify_against(dir: &Path, source: &Path) -> Result<Vec<AgainstRow>> {
    let c = Container::load(dir)?;
    let graph = c.require_graph("VERIFY … AGAINST")?.clone();
    let comp = graph
        .components
        .iter()
        .find(|k| k.id == TEXT_COMPONENT)
        .ok_or_else(|| {
            StorageError::Invalid(format!(
                "{}: no component {TEXT_COMPONENT:?}",
                dir.display()
            ))
        })?;
    let src = import::open(source)?;
    let mut rows = Vec::new();

    // Declared ↔ Resolved.
    for (fact, declared, resolved) in declared_facts(source, &src)? {
        crate::interrupt::check(|| format!("{}: declared facts", source.display()))?;
        match declared {
            Some(d) => {
                let ok = d == resolved;
                rows.push(row(
                    DECLARED_RESOLVED,
                    fact.clone(),
                    format!("{fact}: source metadata against the importer's judgement"),
                    ok,
                    d,
                    resolved,
                    if ok {
                        "equal".to_string()
                    } else {
                        format!("the source declares a different {fact} than the importer resolves")
                    },
                ));
            }
            None => rows.push(AgainstRow {
                status: VerifyStatus::Unverified,
                ..row(
                    DECLARED_RESOLVED,
                    fact.clone(),
                    format!("{fact}: source metadata against the importer's judgement"),
                    true,
                    "",
                    resolved,
                    "the source does not declare it",
                )
            }),
        }
    }

    // Resolved ↔ Graph: the execution surface, field by field.
    let resolved =
        serde_json::to_value(&src.surface).map_err(|e| StorageError::Internal(e.to_string()))?;
    let recorded = &comp.execution_surface;
    let (Value::Object(r), Value::Object(g)) = (&resolved, recorded) else {
        return Err(StorageError::Internal(
            "execution surface is not an object".into(),
        ));
    };
    let mut equal = 0;
    let keys: std::collections::BTreeSet<&String> = r.keys().chain(g.keys()).collect();
    for k in keys {
        let (a, b) = (r.get(k), g.get(k));
        if a == b {
            equal += 1;
            continue;
        }
        let show = |v: Option<&Value>| v.map(Value::to_string).unwrap_or_else(|| "absent".into());
        rows.push(row(
            RESOLVED_GRAPH,
            format!("{TEXT_COMPONENT}.execution_surface.{k}"),
            "execution surface field",
            false,
            show(a),
            show(b),
            format!("the importer resolves {k} differently from what the graph records"),
        ));
    }
    rows.push(row(
        RESOLVED_GRAPH,
        format!("{TEXT_COMPONENT}.execution_surface"),
        "execution surface",
        true,
        "",
        "",
        format!("{equal} fields equal"),
    ));

    // Resolved ↔ Graph: the operand table.
    let mut bound: BTreeMap<OperandKey, &super::graph::OperandBinding> = BTreeMap::new();
    let mut table_problems = Vec::new();
    for (i, b) in comp.operands.iter().enumerate() {
        crate::interrupt::every(i as u64, || format!("{}: operand table", dir.display()))?;
        let Some(role) = Role::ALL.into_iter().find(|r| r.name() == b.role) else {
            table_problems.push(format!("unknown role {:?}", b.role));
            continue;
        };
        let key = OperandKey {
            layer: b.layer.map(|l| l as usize),
            role,
        };
        if bound.insert(key, b).is_some() {
            table_problems.push(format!("{key} is bound twice"));
        }
    }
    for (key, op) in &src.operands {
        match bound.get(key) {
            None => table_problems.push(format!(
                "source operand {key} ({}) has no binding in the graph",
                op.source_name
            )),
            Some(b) if b.source_name.as_deref() != Some(op.source_name.as_str()) => table_problems
                .push(format!(
                    "{key}: the graph records source tensor {:?}, the source names it {:?}",
                    b.source_name, op.source_name
                )),
            Some(_) => {}
        }
    }
    for key in bound.keys() {
        if !src.operands.contains_key(key) {
            table_problems.push(format!("the graph binds {key}, which the source lacks"));
        }
    }
    let n = src.operands.len();
    rows.push(row(
        RESOLVED_GRAPH,
        format!("{TEXT_COMPONENT}.operands"),
        "operand table",
        table_problems.is_empty(),
        n.to_string(),
        comp.operands.len().to_string(),
        if table_problems.is_empty() {
            format!("{n} source operands, each bound once under its source name")
        } else {
            table_problems.join("; ")
        },
    ));

    // Graph ↔ Encoded: every profile's binding closes.
    let mut profiles: Vec<Option<String>> = vec![None];
    profiles.extend(
        variants::profiles(dir, &c.index)?
            .into_iter()
            .map(|p| Some(p.name)),
    );
    for p in profiles {
        let what = match &p {
            Some(p) => format!("profile {p:?}"),
            None => "baselines".to_string(),
        };
        let r = super::reader::open_model_profile(dir, p.as_deref());
        rows.push(row(
            GRAPH_ENCODED,
            what.clone(),
            "operand closure",
            r.is_ok(),
            "",
            "",
            match r {
                Ok(m) => format!(
                    "{} operands bound with the shapes the surface implies",
                    m.operands.len()
                ),
                Err(e) => e.to_string(),
            },
        ));
    }

    // Encoded ↔ Recorded: the container against its own hashes.
    for v in verify(dir)? {
        let failed = v.status == VerifyStatus::Failed;
        rows.push(AgainstRow {
            authorities: ENCODED_RECORDED.into(),
            object: v.object,
            check: format!("hashes of {}", v.representation),
            status: v.status,
            expected: v.expected,
            actual: v.actual,
            detail: if failed {
                format!("container corrupted: {}", v.detail)
            } else {
                v.detail
            },
        });
    }

    // Declared ↔ Encoded: payload equivalence, both ends re-hashed.
    let derived = c.index.authority == Authority::Derived;
    for (id, e) in &c.index.representations {
        crate::interrupt::check(|| format!("{}: representation {id}", dir.display()))?;
        if derived {
            rows.push(AgainstRow {
                status: VerifyStatus::Unverified,
                ..row(
                    DECLARED_ENCODED,
                    e.object.clone(),
                    format!("payload of {id}"),
                    true,
                    "",
                    "",
                    format!(
                        "not compared: the container is derived (from {}), not encoded from \
                         this source",
                        c.index
                            .derived_from_model
                            .as_deref()
                            .unwrap_or("another state")
                    ),
                )
            });
            continue;
        }
        // A representation REPRESENT added was encoded from its base's values: the source
        // is re-encoded through the same steps (bottom of the chain first).
        let mut below = Vec::new();
        let chain = super::represent::base_chain(&c, id);
        let mut chain_problem = None;
        let reps: &[String] = chain.as_deref().unwrap_or(&[]);
        for rep in reps.iter().skip(1).rev() {
            let seg = &c.index.representations[rep].segment;
            match resolve(dir, seg, "representations.segment")
                .and_then(|p| super::segment::read_header(&p))
            {
                Ok(p) => below.push(
                    p.header
                        .tensors
                        .into_iter()
                        .map(|t| (t.name, t.dtype))
                        .collect::<BTreeMap<String, String>>(),
                ),
                Err(err) => chain_problem = Some(format!("container corrupted: base {rep}: {err}")),
            }
        }
        if let Err(err) = &chain {
            chain_problem = Some(format!("container corrupted: {err}"));
        }
        if let Some(p) = chain_problem {
            rows.push(row(
                DECLARED_ENCODED,
                e.object.clone(),
                format!("payload of {id}"),
                false,
                "",
                "",
                p,
            ));
            continue;
        }
        rows.extend(payload_rows(dir, id, e, &below, &bound, &src, source)?);
    }
    Ok(rows)
}

/// The payload rows of one representation: one `ok` row, or a `FAILED` row per tensor
/// that differs (container corrupted / source drifted).
fn payload_rows(
    dir: &Path,
    id: &str,
    e: &super::index::RepresentationEntry,
    below: &[BTreeMap<String, String>],
    bound: &BTreeMap<OperandKey, &super::graph::OperandBinding>,
    src: &Model,
    source: &Path,
) -> Result<Vec<AgainstRow>> {
    let check = format!("payload of {id}");
    let fail = |detail: String| {
        vec![row(
            DECLARED_ENCODED,
            e.object.clone(),
            check.clone(),
            false,
            "",
            "",
            detail,
        )]
    };
    let path = match resolve(dir, &e.segment, "representations.segment") {
        Ok(p) => p,
        Err(err) => return Ok(fail(format!("container corrupted: {err}"))),
    };
    let map = match crate::mapped::map_file(&path, "segment") {
        Ok(m) => m,
        Err(err) => {
            return Ok(fail(format!(
                "container corrupted: segment {}: {err}",
                e.segment
            )))
        }
    };
    let parsed = match parse_header(&path, &map, map.len() as u64) {
        Ok(p) => p,
        Err(err) => {
            return Ok(fail(format!(
                "container corrupted: segment {}: {err}",
                e.segment
            )))
        }
    };
    super::meter::count_payload(map.len() as u64);
    // Tensor name → source operand (through the graph's binding of this object).
    let by_tensor: BTreeMap<&str, OperandKey> = bound
        .iter()
        .filter(|(_, b)| b.object == e.object)
        .map(|(k, b)| (b.tensor.as_str(), *k))
        .collect();
    let single = parsed.header.tensors.len() == 1;
    let results: Vec<Option<AgainstRow>> = parsed
        .header
        .tensors
        .par_iter()
        .map(|t| -> Result<Option<AgainstRow>> {
            crate::interrupt::check(|| format!("{}: tensor {}", e.segment, t.name))?;
            let recorded = match (e.tensor_sha256.get(&t.name), single) {
                (Some(h), _) => h.clone(),
                (None, true) => e.payload_sha256.clone(),
                (None, false) => {
                    return Ok(Some(row(
                        DECLARED_ENCODED,
                        e.object.clone(),
                        check.clone(),
                        false,
                        "",
                        "",
                        format!("tensor {:?} of {id} has no recorded hash", t.name),
                    )))
                }
            };
            let start = (parsed.payload_start + t.offset) as usize;
            let end = start + t.len as usize;
            let container = hex(Sha256::digest(&map[start..end]));
            if container != recorded {
                return Ok(Some(row(
                    DECLARED_ENCODED,
                    e.object.clone(),
                    format!("tensor {}", t.name),
                    false,
                    recorded,
                    container,
                    format!(
                        "container corrupted: segment {}, tensor {:?}, file bytes [{start}, {end}) \
                         differ from the recorded sha256",
                        e.segment, t.name
                    ),
                )));
            }
            let Some(key) = by_tensor.get(t.name.as_str()) else {
                return Ok(Some(row(
                    DECLARED_ENCODED,
                    e.object.clone(),
                    format!("tensor {}", t.name),
                    false,
                    recorded,
                    "",
                    format!(
                        "tensor {:?} of segment {} is bound to no operand",
                        t.name, e.segment
                    ),
                )));
            };
            let Some(op) = src.operands.get(key) else {
                return Ok(Some(row(
                    DECLARED_ENCODED,
                    e.object.clone(),
                    format!("tensor {}", t.name),
                    false,
                    recorded,
                    "",
                    format!("the source has no operand {key} (tensor {:?})", t.name),
                )));
            };
            let bytes = src.view_of(op).bytes;
            // The encodings the bytes went through: the source's, each base's that holds
            // the tensor, this representation's.
            let mut path = vec![Some(op.dtype)];
            path.extend(
                below
                    .iter()
                    .filter_map(|m| m.get(&t.name))
                    .map(|d| DType::from_name(d)),
            );
            path.push(DType::from_name(&t.dtype));
            path.dedup();
            let path: Option<Vec<DType>> = path.into_iter().collect();
            let from_source = match path {
                Some(path) if path.len() == 1 => hex(Sha256::digest(bytes)),
                Some(path) => {
                    // Intermediate steps are one tensor in memory; the last is streamed.
                    let mut cur = std::borrow::Cow::Borrowed(bytes);
                    for w in path[..path.len() - 1].windows(2) {
                        let mut next = Vec::new();
                        super::encode::reencode(w[0], w[1], &op.shape, &cur, &mut |b| {
                            next.extend_from_slice(b);
                            Ok(())
                        })?;
                        cur = std::borrow::Cow::Owned(next);
                    }
                    let n = path.len();
                    let mut h = Sha256::new();
                    super::encode::reencode(path[n - 2], path[n - 1], &op.shape, &cur, &mut |b| {
                        h.update(b);
                        Ok(())
                    })?;
                    hex(h.finalize())
                }
                None => {
                    return Ok(Some(AgainstRow {
                        status: VerifyStatus::Unverified,
                        ..row(
                            DECLARED_ENCODED,
                            e.object.clone(),
                            format!("tensor {}", t.name),
                            true,
                            recorded,
                            "",
                            format!("encoding {} is not one this build can produce", t.dtype),
                        )
                    }))
                }
            };
            if from_source != recorded {
                return Ok(Some(row(
                    DECLARED_ENCODED,
                    e.object.clone(),
                    format!("tensor {}", t.name),
                    false,
                    recorded,
                    from_source,
                    format!(
                        "source drifted: tensor {:?} of {} no longer has the bytes the container \
                         was encoded from (the container's copy is intact)",
                        op.source_name,
                        source.display()
                    ),
                )));
            }
            Ok(None)
        })
        .collect::<Result<_>>()?;
    let mut out: Vec<AgainstRow> = results.into_iter().flatten().collect();
    if out.is_empty() {
        out.push(row(
            DECLARED_ENCODED,
            e.object.clone(),
            check,
            true,
            e.payload_sha256.clone(),
            e.payload_sha256.clone(),
            format!(
                "{} tensors: container and source re-hashed, both match the record{}",
                parsed.header.tensors.len(),
                if e.encoding == "source" {
                    String::new()
                } else {
                    format!(" (source re-encoded as {})", e.encoding)
                }
            ),
        ));
    }
    Ok(out)
}

/// (fact, declared by the source's own metadata, resolved by the importer).
fn declared_facts(source: &Path, src: &Model) -> Result<Vec<(String, Option<String>, String)>> {
    let s = &src.surface;
    let resolved: [(&str, String); 8] = [
        ("n_layers", s.n_layers.to_string()),
        ("hidden", s.hidden.to_string()),
        ("ffn", s.ffn.to_string()),
        ("n_heads", s.n_heads.to_string()),
        ("n_kv_heads", s.n_kv_heads.to_string()),
        ("vocab", s.vocab.to_string()),
        ("rope_theta", s.rope_theta.to_string()),
        ("norm_eps", s.norm_eps.to_string()),
    ];
    let declared: BTreeMap<&str, String> = match import::detect(source)? {
        SourceFormat::Gguf => {
            let f = crate::format::gguf::GgufFile::open(source)?;
            let arch = f.get_str("general.architecture")?.unwrap_or("").to_string();
            let u = |k: &str| -> Result<Option<String>> {
                Ok(f.get_u64(&format!("{arch}.{k}"))?.map(|v| v.to_string()))
            };
            let fl = |k: &str| -> Result<Option<String>> {
                Ok(f.get_f32(&format!("{arch}.{k}"))?.map(|v| v.to_string()))
            };
            let mut m = BTreeMap::new();
            let pairs = [
                ("n_layers", u("block_count")?),
                ("hidden", u("embedding_length")?),
                ("ffn", u("feed_forward_length")?),
                ("n_heads", u("attention.head_count")?),
                ("n_kv_heads", u("attention.head_count_kv")?),
                (
                    "vocab",
                    f.get_array("tokenizer.ggml.tokens")?
                        .map(|a| a.len().to_string()),
                ),
                ("rope_theta", fl("rope.freq_base")?),
                ("norm_eps", fl("attention.layer_norm_rms_epsilon")?),
            ];
            for (k, v) in pairs {
                if let Some(v) = v {
                    m.insert(k, v);
                }
            }
            m
        }
        SourceFormat::HfFolder => {
            let cfg = read_json(&source.join("config.json"), 16 << 20)?;
            let cfg = cfg.get("text_config").cloned().unwrap_or(cfg);
            let mut m = BTreeMap::new();
            for (fact, key) in [
                ("n_layers", "num_hidden_layers"),
                ("hidden", "hidden_size"),
                ("ffn", "intermediate_size"),
                ("n_heads", "num_attention_heads"),
                ("n_kv_heads", "num_key_value_heads"),
                ("vocab", "vocab_size"),
                ("rope_theta", "rope_theta"),
                ("norm_eps", "rms_norm_eps"),
            ] {
                let v = match cfg.get(key) {
                    Some(Value::Number(n)) if fact == "rope_theta" || fact == "norm_eps" => {
                        n.as_f64().map(|x| (x as f32).to_string())
                    }
                    Some(Value::Number(n)) => n.as_u64().map(|x| x.to_string()),
                    _ => None,
                };
                if let Some(v) = v {
                    m.insert(fact, v);
                }
            }
            m
        }
        other => {
            return Err(StorageError::Unsupported(format!(
                "not supported yet: VERIFY … AGAINST a {other:?} source ({}); name the GGUF \
                 file or Hugging Face folder the container was made from",
                source.display()
            )))
        }
    };
    Ok(resolved
        .into_iter()
        .map(|(k, r)| (k.to_string(), declared.get(k).cloned(), r))
        .collect())
}
