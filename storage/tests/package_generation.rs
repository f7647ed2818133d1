//! The generation policy and speculative-decoding rules of seed 000, each with a valid and
//! an invalid manifest fragment; unknown policy values are reported, never reinterpreted.

use lql_storage::format::package::generation::{resolve, validate};
use lql_storage::StorageError;
use serde_json::{json, Value};

fn check_of(g: &Value) -> Option<String> {
    match validate(g, 48) {
        Ok(()) => None,
        Err(StorageError::Package { check, .. }) => Some(check.to_string()),
        Err(e) => panic!("{e}"),
    }
}

fn spec(default: &str, proposers: Value, strategies: Value) -> Value {
    json!({"speculative_decoding": {"default": default, "proposers": proposers, "strategies": strategies}})
}

fn mtp() -> Value {
    json!({"type": "native-mtp", "prediction_depth": 1, "layer_indices": [47]})
}

#[test]
fn the_seed_examples_are_valid() {
    let glm = json!({
        "policy": {"profile": "glm-dsa-v1", "decode": "compact-flash", "short_prefill": "dense",
                   "long_prefill": "sparse-chunked", "verify": "auto", "indexshare": "required",
                   "experimental": {"selected_row_flash": "evidence-gated"}},
        "thresholds": {"short_prefill_max_tokens": 2048, "compact_flash_min_kv": 1},
        "speculative_decoding": {"default": "mtp", "strategies": {"mtp": {
            "type": "native-mtp", "prediction_depth": 1, "layer_indices": [47],
            "window_policy": {"default": "fixed", "initial_window": 1, "min_window": 1, "max_window": 1, "pipeline_depth": 1}}}}
    });
    assert_eq!(check_of(&glm), None);
    let composite = spec(
        "mtp-cache",
        json!({"mtp": mtp(), "cache": {"type": "ngram-cache", "ngram_min": 2, "ngram_max": 4, "max_proposal_tokens": 10, "history_scope": "request"}}),
        json!({"mtp-cache": {"type": "composite", "primary": "mtp", "extender": "cache", "extension_policy": {"max_tokens": 8}}}),
    );
    assert_eq!(check_of(&composite), None);
}

#[test]
fn native_mtp_prediction_depth_must_be_1() {
    let mut p = mtp();
    p["prediction_depth"] = 2.into();
    let g = spec("mtp", json!({}), json!({"mtp": p}));
    assert_eq!(check_of(&g).as_deref(), Some("native_mtp_prediction_depth"));
}

#[test]
fn native_mtp_layer_indices_must_be_package_layers() {
    let mut p = mtp();
    p["layer_indices"] = json!([48]);
    assert_eq!(
        check_of(&spec("mtp", json!({}), json!({"mtp": p}))).as_deref(),
        Some("native_mtp_layer_indices")
    );
    let mut p = mtp();
    p["layer_indices"] = json!([]);
    assert_eq!(
        check_of(&spec("mtp", json!({}), json!({"mtp": p}))).as_deref(),
        Some("native_mtp_layer_indices")
    );
}

#[test]
fn ngram_history_scope_must_be_request() {
    let p =
        json!({"type": "ngram-cache", "ngram_min": 2, "ngram_max": 4, "history_scope": "global"});
    let g = spec(
        "c",
        json!({"c": p}),
        json!({"c": {"type": "ngram-cache", "proposer": "c"}}),
    );
    assert_eq!(check_of(&g).as_deref(), Some("ngram_history_scope"));
}

#[test]
fn ngram_cache_max_is_at_most_4() {
    let ok =
        json!({"type": "ngram-cache", "ngram_min": 2, "ngram_max": 4, "history_scope": "request"});
    let bad =
        json!({"type": "ngram-cache", "ngram_min": 2, "ngram_max": 5, "history_scope": "request"});
    let st = json!({"c": {"type": "ngram-cache", "proposer": "c"}});
    assert_eq!(check_of(&spec("c", json!({"c": ok}), st.clone())), None);
    assert_eq!(
        check_of(&spec("c", json!({"c": bad}), st)).as_deref(),
        Some("ngram_bounds")
    );
}

#[test]
fn ngram_suffix_bounds_are_3_to_64() {
    let st = json!({"s": {"type": "ngram-suffix", "proposer": "s"}});
    for (lo, hi, ok) in [(3, 64, true), (2, 8, false), (8, 4, false), (3, 65, false)] {
        let p = json!({"type": "ngram-suffix", "ngram_min": lo, "ngram_max": hi, "history_scope": "request"});
        let got = check_of(&spec("s", json!({"s": p}), st.clone()));
        assert_eq!(got.is_none(), ok, "{lo}..{hi}: {got:?}");
    }
    let missing = json!({"type": "ngram-suffix", "ngram_min": 3, "history_scope": "request"});
    assert_eq!(
        check_of(&spec("s", json!({"s": missing}), st)).as_deref(),
        Some("ngram_bounds")
    );
}

#[test]
fn composite_needs_an_mtp_primary_and_an_ngram_extender() {
    let cache =
        json!({"type": "ngram-cache", "ngram_min": 2, "ngram_max": 3, "history_scope": "request"});
    let props = json!({"mtp": mtp(), "cache": cache});
    let bad_primary = json!({"x": {"type": "composite", "primary": "cache", "extender": "cache"}});
    assert_eq!(
        check_of(&spec("x", props.clone(), bad_primary)).as_deref(),
        Some("composite_strategy")
    );
    let bad_ext = json!({"x": {"type": "composite", "primary": "mtp", "extender": "mtp"}});
    assert_eq!(
        check_of(&spec("x", props.clone(), bad_ext)).as_deref(),
        Some("composite_strategy")
    );
    let bad_policy = json!({"x": {"type": "composite", "primary": "mtp", "extender": "cache",
        "extension_policy": {"initial_tokens": 9, "max_tokens": 8}}});
    assert_eq!(
        check_of(&spec("x", props.clone(), bad_policy)).as_deref(),
        Some("composite_strategy")
    );
    let undeclared = json!({"x": {"type": "composite", "primary": "nope", "extender": "cache"}});
    assert_eq!(
        check_of(&spec("x", props, undeclared)).as_deref(),
        Some("speculative_proposer_ref")
    );
}

#[test]
fn window_policy_bounds_are_checked() {
    for (w, check) in [
        (
            json!({"min_window": 3, "max_window": 2}),
            "invalid_window_policy_bounds",
        ),
        (
            json!({"initial_window": 5, "min_window": 1, "max_window": 2}),
            "invalid_window_policy_initial",
        ),
        (
            json!({"pipeline_depth": 0}),
            "invalid_window_policy_pipeline_depth",
        ),
    ] {
        let mut s = mtp();
        s["window_policy"] = w;
        assert_eq!(
            check_of(&spec("mtp", json!({}), json!({"mtp": s}))).as_deref(),
            Some(check)
        );
    }
}

#[test]
fn unknown_strategy_types_are_ignored_unless_default() {
    let strategies = json!({"mtp": mtp(), "draft": {"type": "draft-model", "draft_model": "x"}});
    assert_eq!(check_of(&spec("mtp", json!({}), strategies.clone())), None);
    assert_eq!(
        check_of(&spec("draft", json!({}), strategies)).as_deref(),
        Some("speculative_default_unsupported")
    );
}

#[test]
fn the_default_must_name_a_declared_strategy() {
    assert_eq!(
        check_of(&spec("ghost", json!({}), json!({"mtp": mtp()}))).as_deref(),
        Some("missing_speculative_default_strategy")
    );
    assert_eq!(
        check_of(&spec("", json!({}), json!({"mtp": mtp()}))).as_deref(),
        Some("empty_speculative_default")
    );
    assert_eq!(
        check_of(&spec("disabled", json!({}), json!({"disabled": mtp()}))).as_deref(),
        Some("speculative_strategy")
    );
}

#[test]
fn policy_fields_must_be_strings() {
    assert_eq!(
        check_of(&json!({"policy": {"decode": 3}})).as_deref(),
        Some("generation_policy")
    );
    assert_eq!(
        check_of(&json!({"policy": {"experimental": {"selected_row_flash": true}}})).as_deref(),
        Some("generation_policy")
    );
    assert_eq!(
        check_of(&json!({"thresholds": 7})).as_deref(),
        Some("generation_thresholds")
    );
    assert_eq!(check_of(&json!([1])).as_deref(), Some("generation"));
}

#[test]
fn unknown_policy_values_are_reported_not_reinterpreted() {
    let g = json!({"policy": {"profile": "mystery-v9", "decode": "warp-drive", "short_prefill": "dense",
        "long_prefill": "sparse-chunked", "indexshare": "required", "frobnicate": "yes",
        "experimental": {"selected_row_flash": "evidence-gated", "new_thing": "on"}},
        "speculative_decoding": {"default": "mtp", "strategies": {"mtp": mtp()}}});
    assert_eq!(check_of(&g), None);
    let r = resolve(Some(&g));
    let by = |f: &str| {
        r.iter()
            .find(|x| x.field == f)
            .unwrap_or_else(|| panic!("{f}: {r:#?}"))
    };
    assert_eq!(by("policy.profile").status, "unsupported");
    assert_eq!(by("policy.decode").status, "unsupported");
    assert_eq!(by("policy.short_prefill").status, "used");
    let long = by("policy.long_prefill");
    assert_eq!((long.status, long.resolved.as_str()), ("fallback", "dense"));
    assert!(!long.reason.is_empty());
    assert_eq!(by("policy.frobnicate").status, "unsupported");
    assert_eq!(by("policy.experimental.new_thing").status, "unsupported");
    assert_eq!(by("policy.experimental.selected_row_flash").resolved, "off");
    assert_eq!(by("speculative_decoding.default").status, "fallback");
}
