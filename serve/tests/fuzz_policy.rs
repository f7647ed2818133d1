//! Fuzz target: a `/v1/lql` request → the HTTP file policy, through the code the server
//! runs (`lql_http::params_of`, `check_statements`, and with parameters `prepare` +
//! `check_bound` on the statement bound with its values; each statement's effects as its
//! bound plan declares them, which is also what the engine's gate sees when it runs). Each case is a statement of every kind
//! with every path argument drawn from hostile spellings (outside the folder, `..`, a
//! symbolic link out, relative names, quotes and escapes, empty), each given literally,
//! as `?` or as `:name`; on a server with or without `--allow-writes`, POST or GET; with
//! extra, missing or misnamed parameters, or the text mangled.
//!
//! Properties: the gate never panics; it never lets through what an independent oracle
//! (built from the template, not from the classifier) refuses — no USE or SET, no file
//! outside the folder however it is spelled, nothing but reads on GET; and it lets through
//! every well-formed request the oracle allows.
//!
//! `LQL_FUZZ_SECS=600 cargo test --release -p lql-serve --test fuzz_policy -- --nocapture`
//! for a long run (`cargo test` runs a short one).

#[path = "../../storage/tests/fuzz_support/mod.rs"]
mod fuzz_support;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use lql_serve::lql_http::{check_bound, check_statements, params_of};
use proptest::prelude::*;
use serde_json::{json, Value as Json};

/// What the oracle knows of a template.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// Reads only the served model.
    Read,
    /// Edits the session's overlay.
    Session,
    /// Names files in its slots.
    Files,
    /// SAVE PATCH: writes where BEGIN PATCH said (checked then).
    SavePatch,
    /// Never over HTTP.
    Refused,
}

/// Every statement kind; `{a}`, `{b}`, `{c}` are path slots, `{t}` a text slot.
const TEMPLATES: &[(&str, Kind)] = &[
    ("USE {a}", Kind::Refused),
    ("USE MODEL {t}", Kind::Refused),
    ("SET backend = 'cpu'", Kind::Refused),
    ("REPRESENT LABELS", Kind::Refused),
    ("INFER {t} TOP 1", Kind::Read),
    ("GENERATE {t} MAX 1", Kind::Read),
    ("WALK {t} TOP 1", Kind::Read),
    ("DESCRIBE {t}", Kind::Read),
    ("SELECT count(*) FROM tokens WHERE text LIKE {t}", Kind::Read),
    ("TRACE {t}", Kind::Read),
    ("TOKENIZE {t}", Kind::Read),
    ("STATS", Kind::Read),
    ("SHOW LAYERS", Kind::Read),
    ("DESCRIBE TABLE layers", Kind::Read),
    ("DIFF CURRENT", Kind::Read),
    ("VERIFY", Kind::Read),
    ("EXPLAIN INFER {t}", Kind::Read),
    ("EXPLAIN ANALYZE TOKENIZE {t}", Kind::Read),
    ("EXPLAIN PLAN WALK {t}", Kind::Read),
    (
        "INSERT INTO edges (entity, relation, target) VALUES ({t}, 'capital', 'Rome')",
        Kind::Session,
    ),
    ("DELETE FROM edges WHERE entity = {t}", Kind::Session),
    (
        "UPDATE features SET down_scale = 0 WHERE layer = 1 AND feature = 2",
        Kind::Session,
    ),
    ("SAVE PATCH", Kind::SavePatch),
    ("TRACE {t} SAVE {a}", Kind::Files),
    ("EXTRACT MODEL {a} INTO {b}", Kind::Files),
    (
        "EXTRACT MODEL {a} INTO {b} FORMAT PACKAGE MODEL_ID 'o/r:d' SOURCE_REVISION 'r' PROJECTOR {c}",
        Kind::Files,
    ),
    ("COMPILE CURRENT INTO GGUF {a}", Kind::Files),
    ("COMPILE {a} INTO VINDEX {b}", Kind::Files),
    ("DIFF {a} CURRENT INTO PATCH {b}", Kind::Files),
    ("DIFF {a} {b}", Kind::Files),
    ("BEGIN PATCH {a}", Kind::Files),
    ("APPLY PATCH {a}", Kind::Files),
    ("REMOVE PATCH {a}", Kind::Files),
    ("VERIFY {a} AGAINST {b}", Kind::Files),
    ("INSPECT {a}", Kind::Files),
    ("DESCRIBE OBJECT {a} 'L0'", Kind::Files),
    ("PRECISION {a}", Kind::Files),
    ("SHOW COMPONENTS {a}", Kind::Files),
    ("SHOW PROFILES {a}", Kind::Files),
    ("REPRESENT LABELS {a}", Kind::Files),
    ("REPRESENT ALL AS F16 INTO {a}", Kind::Files),
    ("COMPACT {a}", Kind::Files),
    ("COMPACT {a} INTO {b}", Kind::Files),
    ("RUN STAGE {t} INTO {a}", Kind::Files),
    ("RUN STAGE FROM {a} INTO {b}", Kind::Files),
    ("INFER FROM {a}", Kind::Files),
    // EXPLAIN PLAN (and plain EXPLAIN of a statement other than WALK and INFER) runs
    // nothing: it touches no file.
    ("EXPLAIN PLAN EXTRACT MODEL {a} INTO {b}", Kind::Read),
    ("EXPLAIN ANALYZE TRACE {t} SAVE {a}", Kind::Files),
    ("EXPLAIN COMPILE CURRENT INTO GGUF {a}", Kind::Read),
];

/// The folder a server allows writes under, and a symbolic link inside it that leads out.
fn folder() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = tempfile::tempdir().unwrap().keep();
        let d = std::fs::canonicalize(d).unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink("/tmp", d.join("out-link")).unwrap();
        d
    })
}

/// A path spelling, and whether it lies under the folder (the oracle's own judgement).
fn path_choice(i: u8, dir: &Path) -> (String, bool) {
    let d = dir.display().to_string();
    match i % 12 {
        0 => (format!("{d}/ok.vindex"), true),
        1 => (format!("{d}/sub/new.svg"), true),
        2 => ("/etc/passwd".into(), false),
        3 => (format!("{d}/../escape.gguf"), false),
        4 => (format!("{d}/out-link/x.svg"), false),
        5 => ("relative.svg".into(), false),
        6 => ("".into(), false),
        7 => (format!("{d}/a\"b'c\\\\.svg"), true),
        8 => ("/tmp/../etc/shadow".into(), false),
        9 => (format!("{d}/ü/ñ.lqlpatch"), true),
        10 => ("~/x.gguf".into(), false),
        _ => (format!("{d}/./././k.trace"), true),
    }
}

/// One request.
#[derive(Debug, Clone)]
struct Case {
    template: usize,
    /// Per slot a, b, c: the path choice and the form (0 literal, 1 `?`, 2 `:name`).
    slots: [(u8, u8); 3],
    text_form: u8,
    with_dir: bool,
    get: bool,
    /// 0 none, 1 an extra positional, 2 a misnamed one, 3 empty list, 4 a JSON object.
    params_noise: u8,
    /// Mangle the text: 0 none, else the byte count cut from the end.
    cut: u8,
}

fn case() -> impl Strategy<Value = Case> {
    (
        0..TEMPLATES.len(),
        any::<[(u8, u8); 3]>(),
        any::<u8>(),
        any::<bool>(),
        any::<bool>(),
        0u8..8,
        prop_oneof![9 => Just(0u8), 1 => 1u8..40],
    )
        .prop_map(
            |(template, slots, text_form, with_dir, get, params_noise, cut)| Case {
                template,
                slots: slots.map(|(p, f)| (p, f % 3)),
                text_form: text_form % 3,
                with_dir,
                get,
                params_noise,
                cut,
            },
        )
}

/// The request body's text and params, the oracle's verdict on the request as built
/// (before noise), and whether the request is well formed (one placeholder style).
fn build(c: &Case, dir: &Path) -> (String, Option<Json>, bool, bool) {
    let (template, kind) = TEMPLATES[c.template];
    let mut text = template.to_string();
    let mut positional: Vec<Json> = Vec::new();
    let mut named = serde_json::Map::new();
    let mut all_inside = true;
    // Slots in the order they appear in the text, so positional parameters line up.
    let mut order: Vec<(usize, &str)> = ["{a}", "{b}", "{c}", "{t}"]
        .iter()
        .filter_map(|s| text.find(s).map(|at| (at, *s)))
        .collect();
    order.sort();
    for (_, slot) in order {
        let (value, form, inside) = if slot == "{t}" {
            ("The capital of France is".to_string(), c.text_form, true)
        } else {
            let i = (slot.as_bytes()[1] - b'a') as usize;
            let (p, form) = c.slots[i];
            let (path, inside) = path_choice(p, dir);
            (path, form, inside)
        };
        let is_path = slot != "{t}";
        let spelled = match form {
            0 => lql::quote(&value),
            1 => {
                positional.push(json!(value));
                "?".to_string()
            }
            _ => {
                let name = format!("p{}", named.len());
                named.insert(format!(":{name}"), json!(value));
                format!(":{name}")
            }
        };
        if is_path {
            all_inside &= inside;
        }
        text = text.replacen(slot, &spelled, 1);
    }
    let (positional_count, named_count) = (positional.len(), named.len());
    // A text mixing ? and :name is refused by the engine; keep one style per request.
    let params = match (positional.is_empty(), named.is_empty()) {
        (true, true) => None,
        (false, true) => Some(Json::Array(positional)),
        (true, false) => Some(Json::Object(named)),
        (false, false) => {
            // Mixed: send the positional ones only (the request is then malformed).
            Some(Json::Array(positional))
        }
    };
    let allowed = match kind {
        Kind::Refused => false,
        Kind::Read => true,
        Kind::Session => !c.get,
        Kind::SavePatch => c.with_dir && !c.get,
        Kind::Files => c.with_dir && !c.get && all_inside,
    };
    let well_formed = positional_count == 0 || named_count == 0;
    (text, params, allowed, well_formed)
}

/// What the server does with a request.
#[derive(Debug, PartialEq)]
enum Verdict {
    /// Its statements run.
    Runs,
    /// Refused: by the gate (`LQL-E1001`) or as a malformed request.
    Refused(String),
    /// The engine answers with its own error (a statement that does not bind); nothing runs.
    EngineError(String),
}

/// The server's gate on one request, then what the engine does with each statement the
/// gate lets through (it runs only if it binds).
fn gate(
    conn: &lql::Connection,
    text: &str,
    params: Option<Json>,
    dir: Option<&Path>,
    get: bool,
) -> Verdict {
    let verdict = |e: lql::Error| {
        if e.code() == lql_serve::access::REFUSED_CODE || e.code() == "LQL-E0701" {
            Verdict::Refused(e.message)
        } else {
            Verdict::EngineError(e.message)
        }
    };
    let params = match params_of(params) {
        Ok(p) => p,
        Err(e) => return Verdict::Refused(format!("400: {e:?}")),
    };
    if let Err(e) = check_statements(conn, text, dir, get, params.is_some()) {
        return verdict(e);
    }
    match params {
        Some(p) => {
            let st = match conn.prepare(text) {
                Ok(st) => st,
                Err(e) => return verdict(e),
            };
            if let Err(e) = check_bound(&st, &p, dir, get) {
                return verdict(e);
            }
        }
        None => {
            for piece in lql::split_statements(text) {
                if let Err(e) = conn.effects(&text[piece.range()]) {
                    return verdict(e);
                }
            }
        }
    }
    Verdict::Runs
}

#[test]
fn fuzz_policy() {
    let dir = folder().clone();
    let conn = std::sync::Arc::new(
        lql::Connection::open(lql_tests::default_model_path().to_str().unwrap())
            .expect("the default model opens"),
    );
    fuzz_support::fuzz("fuzz_policy", 3000, case(), move |c: Case| {
        let (text, mut params, allowed, well_formed) = build(&c, &dir);
        let noisy = c.params_noise >= 5 || c.cut > 0 || !well_formed;
        match c.params_noise {
            5 => {
                let extra = json!("/etc/passwd");
                match params.as_mut() {
                    Some(Json::Array(a)) => a.push(extra),
                    _ => params = Some(json!([extra])),
                }
            }
            6 => params = Some(json!({":zz": "/etc/passwd"})),
            7 => params = Some(json!([])),
            _ => {}
        }
        let with_dir = c.with_dir.then_some(dir.as_path());
        if c.cut > 0 {
            // A mangled text, literal paths only: whatever it became, a file outside the
            // folder that still stands quoted in a statement that parses must not pass.
            let (literal, _, _, _) = build(
                &Case {
                    slots: c.slots.map(|(p, _)| (p, 0)),
                    text_form: 0,
                    ..c.clone()
                },
                &dir,
            );
            let mut n = literal.len().saturating_sub(c.cut as usize);
            while !literal.is_char_boundary(n) {
                n -= 1;
            }
            let cut = &literal[..n];
            if gate(&conn, cut, None, with_dir, c.get) == Verdict::Runs {
                for i in 0..12u8 {
                    let (p, inside) = path_choice(i, &dir);
                    if !inside && !p.is_empty() {
                        assert!(
                            !cut.contains(&lql::quote(&p)),
                            "let through a mangled statement naming {p:?}: {cut:?}"
                        );
                    }
                }
            }
            return;
        }
        let verdict = gate(&conn, &text, params.clone(), with_dir, c.get);
        if verdict == Verdict::Runs && !allowed {
            panic!("let through what the policy refuses: {text:?} params {params:?} dir {with_dir:?} get {}", c.get);
        }
        if !noisy && allowed {
            assert!(
                !matches!(verdict, Verdict::Refused(_)),
                "refused what the policy allows: {text:?} params {params:?} dir {with_dir:?} get {}: {verdict:?}",
                c.get
            );
        }
    });
}
