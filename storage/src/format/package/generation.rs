//! The manifest's optional `generation` object: execution policy, thresholds and
//! speculative-decoding strategies (seed 000, "Generation Defaults" and "Speculative
//! Decoding").
//!
//! [`validate`] refuses malformed maps and broken speculative rules by name; [`resolve`]
//! reports what this runtime does with each policy field. This runtime has one attention
//! path (dense, exact) and no speculative decoding, so every package recommendation
//! resolves either to that path (`dense`, `auto`) or to a logged correctness fallback with
//! its reason; unknown profiles and values are reported as unsupported, never
//! reinterpreted.

use serde_json::{Map, Value};

use super::refuse;
use crate::error::Result;

const AT: &str = "model-package.json generation";

fn bad(check: &'static str, msg: impl Into<String>) -> crate::StorageError {
    refuse(check, AT, msg)
}

/// Policy profiles this runtime knows.
pub const KNOWN_PROFILES: [&str; 1] = ["glm-dsa-v1"];
/// Phase path values the seed defines.
pub const PHASE_VALUES: [&str; 6] = [
    "auto",
    "dense",
    "direct-sparse",
    "compact-flash",
    "sparse-chunked",
    "fallback",
];
/// Phase fields of `generation.policy`.
pub const PHASES: [&str; 4] = ["decode", "short_prefill", "long_prefill", "verify"];
/// Experimental switches the seed defines.
pub const EXPERIMENTAL: [&str; 3] = [
    "selected_row_flash",
    "moe_weighted_down",
    "moe_merged_shared_gate_up",
];

/// Check `generation` against the seed's rules (`layer_count` bounds MTP layer indices).
pub fn validate(g: &Value, layer_count: u64) -> Result<()> {
    let g = g
        .as_object()
        .ok_or_else(|| bad("generation", "generation must be a JSON object"))?;
    if let Some(p) = g.get("policy") {
        let p = p
            .as_object()
            .ok_or_else(|| bad("generation_policy", "generation.policy must be an object"))?;
        for (k, v) in p {
            if k == "experimental" {
                let e = v.as_object().ok_or_else(|| {
                    bad(
                        "generation_policy",
                        "generation.policy.experimental must be an object",
                    )
                })?;
                if let Some((k, _)) = e.iter().find(|(_, v)| !v.is_string()) {
                    return Err(bad(
                        "generation_policy",
                        format!("generation.policy.experimental.{k} must be a string"),
                    ));
                }
            } else if !v.is_string() {
                return Err(bad(
                    "generation_policy",
                    format!("generation.policy.{k} must be a string"),
                ));
            }
        }
    }
    if let Some(t) = g.get("thresholds") {
        if !t.is_object() {
            return Err(bad(
                "generation_thresholds",
                "generation.thresholds must be an object",
            ));
        }
    }
    if let Some(s) = g.get("speculative_decoding") {
        speculative(s, layer_count)?;
    }
    Ok(())
}

fn obj<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>> {
    v.as_object()
        .ok_or_else(|| bad("speculative_decoding", format!("{what} must be an object")))
}

fn uint(o: &Map<String, Value>, key: &str, what: &str) -> Result<Option<u64>> {
    match o.get(key) {
        None => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            bad(
                "speculative_decoding",
                format!("{what}.{key} must be a non-negative integer"),
            )
        }),
    }
}

fn speculative(s: &Value, layer_count: u64) -> Result<()> {
    let s = obj(s, "generation.speculative_decoding")?;
    let default = match s.get("default") {
        None => None,
        Some(Value::String(d)) if !d.trim().is_empty() => Some(d.as_str()),
        Some(_) => {
            return Err(bad(
                "empty_speculative_default",
                "speculative_decoding.default must be a non-empty strategy id",
            ))
        }
    };
    let empty = Map::new();
    let proposers = match s.get("proposers") {
        None => &empty,
        Some(p) => obj(p, "speculative_decoding.proposers")?,
    };
    let strategies = match s.get("strategies") {
        None => &empty,
        Some(p) => obj(p, "speculative_decoding.strategies")?,
    };
    // Proposers: known types checked; unknown ones ignored unless something the default
    // strategy uses refers to them (checked below).
    for (id, p) in proposers {
        let what = format!("proposers.{id}");
        let p = obj(p, &what)?;
        check_proposer(p, &what, layer_count, false)?;
    }
    if strategies.contains_key("disabled") {
        return Err(bad(
            "speculative_strategy",
            "`disabled` is a runtime baseline, not a package strategy id",
        ));
    }
    for (id, st) in strategies {
        let what = format!("strategies.{id}");
        let st = obj(st, &what)?;
        let is_default = default == Some(id.as_str());
        let ty = st.get("type").and_then(Value::as_str).unwrap_or("");
        match ty {
            "native-mtp" | "ngram-cache" | "ngram-suffix" => {
                match st.get("proposer") {
                    Some(Value::String(pid)) => {
                        let p = proposers.get(pid).ok_or_else(|| {
                            bad(
                                "speculative_proposer_ref",
                                format!("{what} refers to undeclared proposer {pid:?}"),
                            )
                        })?;
                        let pty = p.get("type").and_then(Value::as_str).unwrap_or("");
                        if pty != ty {
                            return Err(bad(
                                "speculative_proposer_ref",
                                format!("{what} of type {ty} refers to proposer {pid:?} of type {pty:?}"),
                            ));
                        }
                    }
                    Some(_) => {
                        return Err(bad(
                            "speculative_proposer_ref",
                            format!("{what}.proposer must be a string"),
                        ))
                    }
                    None => check_proposer(st, &what, layer_count, true)?,
                }
            }
            "composite" => composite(st, &what, proposers)?,
            other => {
                if is_default {
                    return Err(bad(
                        "speculative_default_unsupported",
                        format!("the default strategy {id:?} has type {other:?}, which this runtime does not support"),
                    ));
                }
                // Unknown strategy types are ignored unless they are the default.
                continue;
            }
        }
        if let Some(w) = st.get("window_policy") {
            window(obj(w, &format!("{what}.window_policy"))?, &what)?;
        }
    }
    if let Some(d) = default {
        if !strategies.contains_key(d) {
            return Err(bad(
                "missing_speculative_default_strategy",
                format!("speculative_decoding.default {d:?} names no declared strategy"),
            ));
        }
    }
    Ok(())
}

/// The rules of one proposer (or a strategy that carries a proposer's fields inline).
fn check_proposer(
    p: &Map<String, Value>,
    what: &str,
    layer_count: u64,
    strict: bool,
) -> Result<()> {
    let ty = p.get("type").and_then(Value::as_str).unwrap_or("");
    match ty {
        "native-mtp" => {
            let depth = uint(p, "prediction_depth", what)?;
            if depth != Some(1) {
                return Err(bad(
                    "native_mtp_prediction_depth",
                    format!("{what}: native-mtp prediction_depth must be 1, found {depth:?}"),
                ));
            }
            let idx = p.get("layer_indices").and_then(Value::as_array);
            let idx = match idx {
                Some(a) if !a.is_empty() => a,
                _ => {
                    return Err(bad(
                        "native_mtp_layer_indices",
                        format!("{what}: native-mtp needs a non-empty layer_indices list"),
                    ))
                }
            };
            for v in idx {
                match v.as_u64() {
                    Some(i) if i < layer_count => {}
                    _ => {
                        return Err(bad(
                            "native_mtp_layer_indices",
                            format!(
                                "{what}: layer index {v} is not a package layer (0..{layer_count})"
                            ),
                        ))
                    }
                }
            }
        }
        "ngram-cache" | "ngram-suffix" => {
            if p.get("history_scope").and_then(Value::as_str) != Some("request") {
                return Err(bad(
                    "ngram_history_scope",
                    format!("{what}: {ty} must use history_scope \"request\""),
                ));
            }
            let (lo, hi) = (uint(p, "ngram_min", what)?, uint(p, "ngram_max", what)?);
            let (Some(lo), Some(hi)) = (lo, hi) else {
                return Err(bad(
                    "ngram_bounds",
                    format!("{what}: ngram_min and ngram_max are both required"),
                ));
            };
            if lo > hi || lo == 0 {
                return Err(bad(
                    "ngram_bounds",
                    format!("{what}: need 1 <= ngram_min ({lo}) <= ngram_max ({hi})"),
                ));
            }
            if ty == "ngram-cache" && hi > 4 {
                return Err(bad(
                    "ngram_bounds",
                    format!(
                        "{what}: ngram-cache ngram_max {hi} exceeds the cache match window of 4"
                    ),
                ));
            }
            if ty == "ngram-suffix" && !(3..=64).contains(&lo) || hi > 64 {
                return Err(bad(
                    "ngram_bounds",
                    format!("{what}: ngram-suffix needs 3 <= ngram_min ({lo}) <= ngram_max ({hi}) <= 64"),
                ));
            }
            if uint(p, "max_proposal_tokens", what)? == Some(0) {
                return Err(bad(
                    "ngram_bounds",
                    format!("{what}: max_proposal_tokens must be positive"),
                ));
            }
        }
        other if strict => {
            return Err(bad(
                "speculative_proposer_type",
                format!("{what}: unsupported proposer type {other:?}"),
            ))
        }
        _ => {}
    }
    Ok(())
}

fn composite(st: &Map<String, Value>, what: &str, proposers: &Map<String, Value>) -> Result<()> {
    let kind_of = |field: &str| -> Result<String> {
        let id = st.get(field).and_then(Value::as_str).ok_or_else(|| {
            bad(
                "composite_strategy",
                format!("{what}: composite needs a {field} proposer id"),
            )
        })?;
        let p = proposers.get(id).ok_or_else(|| {
            bad(
                "speculative_proposer_ref",
                format!("{what}.{field} refers to undeclared proposer {id:?}"),
            )
        })?;
        Ok(p.get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string())
    };
    if kind_of("primary")? != "native-mtp" {
        return Err(bad(
            "composite_strategy",
            format!("{what}: a composite primary must be a native-mtp proposer"),
        ));
    }
    let ext = kind_of("extender")?;
    if ext != "ngram-cache" && ext != "ngram-suffix" {
        return Err(bad(
            "composite_strategy",
            format!("{what}: a composite extender must be an N-gram proposer, found {ext:?}"),
        ));
    }
    if let Some(e) = st.get("extension_policy") {
        let e = obj(e, &format!("{what}.extension_policy"))?;
        let w = format!("{what}.extension_policy");
        let init = uint(e, "initial_tokens", &w)?;
        let max = uint(e, "max_tokens", &w)?;
        uint(e, "tail_backoff_proposals", &w)?;
        if max == Some(0) || init.zip(max).is_some_and(|(i, m)| i > m) {
            return Err(bad(
                "composite_strategy",
                format!("{w}: need 0 < max_tokens and initial_tokens <= max_tokens"),
            ));
        }
    }
    Ok(())
}

fn window(w: &Map<String, Value>, what: &str) -> Result<()> {
    let wh = format!("{what}.window_policy");
    let (init, lo, hi) = (
        uint(w, "initial_window", &wh)?,
        uint(w, "min_window", &wh)?,
        uint(w, "max_window", &wh)?,
    );
    if let (Some(lo), Some(hi)) = (lo, hi) {
        if lo > hi {
            return Err(bad(
                "invalid_window_policy_bounds",
                format!("{wh}: min_window {lo} > max_window {hi}"),
            ));
        }
    }
    if let Some(i) = init {
        if lo.is_some_and(|lo| i < lo) || hi.is_some_and(|hi| i > hi) {
            return Err(bad(
                "invalid_window_policy_initial",
                format!("{wh}: initial_window {i} lies outside [min_window, max_window]"),
            ));
        }
    }
    if uint(w, "pipeline_depth", &wh)? == Some(0) {
        return Err(bad(
            "invalid_window_policy_pipeline_depth",
            format!("{wh}: pipeline_depth must be positive"),
        ));
    }
    Ok(())
}

/// What this runtime does with one package recommendation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    /// `policy.decode`, `policy.experimental.selected_row_flash`, `speculative.default`, …
    pub field: String,
    /// The package's value.
    pub declared: String,
    /// The path this runtime takes.
    pub resolved: String,
    /// `used`, `fallback` or `unsupported`.
    pub status: &'static str,
    pub reason: String,
}

/// The resolved policy of a package's `generation` (assumed [`validate`]d).
pub fn resolve(g: Option<&Value>) -> Vec<Resolution> {
    let mut out = Vec::new();
    let Some(g) = g.and_then(Value::as_object) else {
        return out;
    };
    if let Some(p) = g.get("policy").and_then(Value::as_object) {
        if let Some(profile) = p.get("profile").and_then(Value::as_str) {
            let known = KNOWN_PROFILES.contains(&profile);
            out.push(Resolution {
                field: "policy.profile".into(),
                declared: profile.into(),
                resolved: if known { profile.into() } else { "none".into() },
                status: if known { "used" } else { "unsupported" },
                reason: if known {
                    "known profile; phase paths resolved below".into()
                } else {
                    "unknown policy profile; not reinterpreted".into()
                },
            });
        }
        for phase in PHASES {
            if let Some(v) = p.get(phase).and_then(Value::as_str) {
                out.push(phase_resolution(phase, v));
            }
        }
        for (k, v) in p {
            let v = v.as_str().unwrap_or("");
            match k.as_str() {
                "profile" | "experimental" => {}
                k if PHASES.contains(&k) => {}
                "indexshare" => out.push(Resolution {
                    field: "policy.indexshare".into(),
                    declared: v.into(),
                    resolved: "not applicable".into(),
                    status: if v == "required" { "fallback" } else { "unsupported" },
                    reason: if v == "required" {
                        "this runtime has no sparse attention layers that share top-k state; attention is dense and exact".into()
                    } else {
                        format!("unknown indexshare value {v:?}")
                    },
                }),
                other => out.push(Resolution {
                    field: format!("policy.{other}"),
                    declared: v.into(),
                    resolved: "ignored".into(),
                    status: "unsupported",
                    reason: "unknown policy field; not reinterpreted".into(),
                }),
            }
        }
        if let Some(e) = p.get("experimental").and_then(Value::as_object) {
            for (k, v) in e {
                let v = v.as_str().unwrap_or("");
                let known = EXPERIMENTAL.contains(&k.as_str());
                out.push(Resolution {
                    field: format!("policy.experimental.{k}"),
                    declared: v.into(),
                    resolved: "off".into(),
                    status: if known && v == "evidence-gated" {
                        "used"
                    } else {
                        "unsupported"
                    },
                    reason: if !known {
                        "unknown experimental switch; not reinterpreted".into()
                    } else if v == "evidence-gated" {
                        "evidence-gated: off without backend evidence".into()
                    } else {
                        format!("unknown experimental value {v:?}; left off")
                    },
                });
            }
        }
    }
    if let Some(s) = g.get("speculative_decoding").and_then(Value::as_object) {
        if let Some(d) = s.get("default").and_then(Value::as_str) {
            out.push(Resolution {
                field: "speculative_decoding.default".into(),
                declared: d.into(),
                resolved: "disabled".into(),
                status: "fallback",
                reason: "this runtime has no speculative decoding; plain decoding is exact".into(),
            });
        }
    }
    out
}

fn phase_resolution(phase: &str, v: &str) -> Resolution {
    let field = format!("policy.{phase}");
    let (resolved, status, reason) = match v {
        "dense" | "auto" => ("dense", "used", "the runtime's dense exact attention".to_string()),
        v if PHASE_VALUES.contains(&v) => (
            "dense",
            "fallback",
            format!("this runtime has no {v} attention path; dense attention is the correctness-preserving fallback"),
        ),
        v => (
            "dense",
            "unsupported",
            format!("unknown phase value {v:?}; reported, not reinterpreted (runs the dense path)"),
        ),
    };
    Resolution {
        field,
        declared: v.into(),
        resolved: resolved.into(),
        status,
        reason,
    }
}
