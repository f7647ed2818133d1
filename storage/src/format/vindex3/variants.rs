//! The representation-variant catalogue and profiles of `index.json` (seed 002 §9.0–9.3).
//!
//! ```text
//! "variants": { "<region set = object id>": {
//!     "region_set": "<object id>",
//!     "variants": { "<variant name>": { "storage": "<segment path>",
//!                                       "representation": "<object>@<encoding>",
//!                                       "fidelity": "<level>" } },
//!     "baseline": "<variant name>" } }
//! "profiles": [ { "profile": "<name>", "select": { "<object id>": "<variant name>" } } ]
//! ```
//!
//! A profile selects present variants only and carries no authority claim of its own: its
//! authority is derived — the weakest fidelity among its active selections. A profile that
//! states an `authority` above that is refused; one below it is kept as a voluntary claim.
//! The index keeps both fields as raw JSON (unknown fields survive a rewrite); this module
//! reads them on demand, refusing malformed entries by name.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::index::Vindex3Index;
use crate::error::{Result, StorageError};

/// Fidelity levels, strongest first (seed 002 §9.2).
pub const FIDELITY_LEVELS: [&str; 5] = [
    "source-exact",
    "source-equivalent",
    "numerically-approximate",
    "structurally-approximate",
    "analysis-only",
];

/// Standard profile names (seed 002 §9.3).
pub const STANDARD_PROFILES: [&str; 9] = [
    "exact",
    "native-lowbit",
    "mixed-precision",
    "attn-local-ffn-remote",
    "partial-residency",
    "reduced-top-k",
    "shared-only",
    "router-browse",
    "compact-approximate",
];

/// The rank of a fidelity level (0 = source-exact); `None` for an unknown level.
pub fn fidelity_rank(level: &str) -> Option<usize> {
    FIDELITY_LEVELS.iter().position(|l| *l == level)
}

/// The weaker of two levels (an unknown level is weaker than every known one).
pub fn weaker<'a>(a: &'a str, b: &'a str) -> &'a str {
    let r = |l: &str| fidelity_rank(l).unwrap_or(FIDELITY_LEVELS.len());
    if r(b) > r(a) {
        b
    } else {
        a
    }
}

/// One present variant of a region set.
#[derive(Debug, Clone, PartialEq)]
pub struct Variant {
    pub storage: String,
    pub representation: String,
    pub fidelity: String,
}

/// A region set's entry in the catalogue.
#[derive(Debug, Clone, PartialEq)]
pub struct RegionSet {
    pub region_set: String,
    pub variants: BTreeMap<String, Variant>,
    pub baseline: String,
}

/// A profile: a name and its selections (object → variant name).
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub name: String,
    pub select: BTreeMap<String, String>,
    /// A claim the profile states, if any (a voluntary claim below the derived level).
    pub claimed: Option<String>,
}

fn bad(dir: &Path, field: String, message: String) -> StorageError {
    StorageError::Format {
        path: dir.join("index.json"),
        offset: 0,
        field,
        message,
    }
}

fn string_field(dir: &Path, v: &Map<String, Value>, field: &str, at: &str) -> Result<String> {
    v.get(field)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| {
            bad(
                dir,
                format!("{at}.{field}"),
                "missing or not a string".into(),
            )
        })
}

/// The catalogue entry of `object`.
pub fn region_set(dir: &Path, index: &Vindex3Index, object: &str) -> Result<RegionSet> {
    let at = format!("variants[{object:?}]");
    let entry = index
        .variants
        .get(object)
        .and_then(Value::as_object)
        .ok_or_else(|| {
            bad(
                dir,
                at.clone(),
                format!("the variant catalogue has no region set {object:?}"),
            )
        })?;
    let region_set = string_field(dir, entry, "region_set", &at)?;
    if region_set != object {
        return Err(bad(
            dir,
            format!("{at}.region_set"),
            format!("entry of {object:?} names region set {region_set:?}"),
        ));
    }
    let baseline = string_field(dir, entry, "baseline", &at)?;
    let list = entry
        .get("variants")
        .and_then(Value::as_object)
        .ok_or_else(|| {
            bad(
                dir,
                format!("{at}.variants"),
                "missing or not an object".into(),
            )
        })?;
    let mut variants = BTreeMap::new();
    for (i, (name, v)) in list.iter().enumerate() {
        crate::interrupt::every(i as u64, || format!("index.json {at}: variants"))?;
        let vat = format!("{at}.variants[{name:?}]");
        let v = v
            .as_object()
            .ok_or_else(|| bad(dir, vat.clone(), "not an object".into()))?;
        let fidelity = string_field(dir, v, "fidelity", &vat)?;
        if fidelity_rank(&fidelity).is_none() {
            return Err(bad(
                dir,
                format!("{vat}.fidelity"),
                format!("unknown fidelity level {fidelity:?} (levels: {FIDELITY_LEVELS:?})"),
            ));
        }
        variants.insert(
            name.clone(),
            Variant {
                storage: string_field(dir, v, "storage", &vat)?,
                representation: string_field(dir, v, "representation", &vat)?,
                fidelity,
            },
        );
    }
    if !variants.contains_key(&baseline) {
        return Err(bad(
            dir,
            format!("{at}.baseline"),
            format!(
                "baseline {baseline:?} is not a present variant; present: {:?}",
                variants.keys().collect::<Vec<_>>()
            ),
        ));
    }
    Ok(RegionSet {
        region_set,
        variants,
        baseline,
    })
}

/// Every profile, in index order; refuses a malformed entry or a name used twice.
pub fn profiles(dir: &Path, index: &Vindex3Index) -> Result<Vec<Profile>> {
    let mut out: Vec<Profile> = Vec::new();
    for (i, p) in index.profiles.iter().enumerate() {
        crate::interrupt::every(i as u64, || {
            format!("{}: index.json profiles", dir.display())
        })?;
        let at = format!("profiles[{i}]");
        let p = p
            .as_object()
            .ok_or_else(|| bad(dir, at.clone(), "not an object".into()))?;
        let name = string_field(dir, p, "profile", &at)?;
        if out.iter().any(|q| q.name == name) {
            return Err(bad(
                dir,
                at,
                format!("profile {name:?} is named twice (a reader would pick one silently)"),
            ));
        }
        let mut select = BTreeMap::new();
        if let Some(s) = p.get("select") {
            let s = s
                .as_object()
                .ok_or_else(|| bad(dir, format!("{at}.select"), "not an object".into()))?;
            for (object, v) in s {
                let v = v.as_str().ok_or_else(|| {
                    bad(
                        dir,
                        format!("{at}.select[{object:?}]"),
                        "not a variant name".into(),
                    )
                })?;
                select.insert(object.clone(), v.to_string());
            }
        }
        let claimed = p
            .get("authority")
            .and_then(Value::as_str)
            .map(str::to_string);
        out.push(Profile {
            name,
            select,
            claimed,
        });
    }
    Ok(out)
}

/// The profile named `name`, or a refusal naming the profiles present.
pub fn profile(dir: &Path, index: &Vindex3Index, name: &str) -> Result<Profile> {
    let all = profiles(dir, index)?;
    let names: Vec<String> = all.iter().map(|p| p.name.clone()).collect();
    all.into_iter().find(|p| p.name == name).ok_or_else(|| {
        StorageError::Invalid(format!(
            "{}: no profile {name:?}; profiles present: {names:?}",
            dir.display()
        ))
    })
}

/// The catalogue entry for a region set with one variant.
pub fn single_variant_entry(object: &str, name: &str, variant: &Variant) -> Value {
    serde_json::json!({
        "region_set": object,
        "variants": { name: {
            "storage": variant.storage,
            "representation": variant.representation,
            "fidelity": variant.fidelity,
        }},
        "baseline": name,
    })
}
