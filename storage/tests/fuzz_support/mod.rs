//! Shared machinery of the reader fuzz targets (`fuzz_*.rs`): seed corpora committed under
//! `storage/tests/fuzz_corpus/<target>/`, proptest strategies that mutate a seed (byte
//! flips, inserts, deletes, truncation, hostile integers written over fields, and for JSON
//! seeds structural edits of the parsed document), and the time budget.
//!
//! `cargo test` runs a bounded number of cases per target (a few seconds in CI).
//! `LQL_FUZZ_SECS=600 cargo test -p lql-storage --release --test fuzz_gguf -- --nocapture`
//! runs for that many seconds and prints the number of cases run.
//! `LQL_FUZZ_WRITE_CORPUS=1` rewrites the seed corpus of a target from the project's own
//! writers.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::Value;

/// The corpus folder of `target`.
pub fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz_corpus")
        .join(target)
}

/// Write the seeds of `target` when `LQL_FUZZ_WRITE_CORPUS` is set.
pub fn maybe_write_corpus(target: &str, seeds: impl FnOnce() -> Vec<(String, Vec<u8>)>) {
    if std::env::var_os("LQL_FUZZ_WRITE_CORPUS").is_none() {
        return;
    }
    let dir = corpus_dir(target);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in seeds() {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}

/// The committed seeds of `target`, sorted by file name.
pub fn load_corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = corpus_dir(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let seeds: Vec<Vec<u8>> = files.iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert!(!seeds.is_empty(), "empty corpus {}", dir.display());
    seeds
}

/// One edit of a byte buffer.
#[derive(Debug, Clone)]
pub enum Mutation {
    Flip(usize, u8),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Truncate(usize),
    /// Write a hostile integer (LE, 2/4/8 bytes) at a position.
    Word(usize, u64, u8),
    /// Copy a run of the buffer elsewhere.
    Splice(usize, usize, usize),
}

/// Integers that break naive readers: zero, one, sign and width boundaries, huge counts.
pub const HOSTILE: [u64; 14] = [
    0,
    1,
    2,
    0x7F,
    0xFF,
    0xFFFF,
    0x7FFF_FFFF,
    0xFFFF_FFFF,
    1_000_000_000,
    1 << 32,
    1 << 40,
    i64::MAX as u64,
    u64::MAX,
    u64::MAX - 7,
];

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<usize>(), 1u8..=255).prop_map(|(a, b)| Mutation::Flip(a, b)),
        2 => (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(a, b)| Mutation::Insert(a, b)),
        2 => (any::<usize>(), 1usize..64).prop_map(|(a, n)| Mutation::Delete(a, n)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        4 => (any::<usize>(), prop::sample::select(&HOSTILE[..]), prop::sample::select(&[2u8, 4, 8][..]))
            .prop_map(|(a, v, w)| Mutation::Word(a, v, w)),
        1 => (any::<usize>(), any::<usize>(), 1usize..256)
            .prop_map(|(a, b, n)| Mutation::Splice(a, b, n)),
    ]
}

/// Apply `m` to `b`.
pub fn apply(b: &mut Vec<u8>, m: &Mutation) {
    let len = b.len();
    let at = |x: usize| if len == 0 { 0 } else { x % len };
    match m {
        Mutation::Flip(a, x) if len > 0 => {
            let i = at(*a);
            b[i] ^= x;
        }
        Mutation::Insert(a, v) => {
            let i = if len == 0 { 0 } else { a % (len + 1) };
            b.splice(i..i, v.iter().copied());
        }
        Mutation::Delete(a, n) if len > 0 => {
            let i = at(*a);
            let e = (i + n).min(len);
            b.drain(i..e);
        }
        Mutation::Truncate(a) => b.truncate(if len == 0 { 0 } else { a % (len + 1) }),
        Mutation::Word(a, v, w) if len >= *w as usize => {
            let w = *w as usize;
            let i = a % (len - w + 1);
            b[i..i + w].copy_from_slice(&v.to_le_bytes()[..w]);
        }
        Mutation::Splice(a, c, n) if len > 0 => {
            let (s, d) = (at(*a), at(*c));
            let n = (*n).min(len - s).min(len - d);
            let run = b[s..s + n].to_vec();
            b[d..d + n].copy_from_slice(&run);
        }
        _ => {}
    }
}

/// A seed with a few mutations applied (or, now and then, random bytes).
pub fn mutated_bytes(seeds: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    let n = seeds.len();
    prop_oneof![
        12 => (0..n, prop::collection::vec(mutation(), 0..8)).prop_map(move |(i, ms)| {
            let mut b = seeds[i].clone();
            for m in &ms {
                apply(&mut b, m);
            }
            b
        }),
        1 => prop::collection::vec(any::<u8>(), 0..256),
    ]
}

/// Values a JSON leaf is replaced with: hostile numbers, paths that try to leave the
/// container, wrong types, a long string.
fn hostile_json() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(&HOSTILE[..]).prop_map(Value::from),
        Just(Value::from(-1)),
        Just(Value::from(1e300)),
        Just(Value::Null),
        Just(Value::Bool(true)),
        Just(Value::from("../../../etc/passwd")),
        Just(Value::from("/etc/passwd")),
        Just(Value::from("segments/../index.json")),
        Just(Value::from("")),
        Just(Value::from("x".repeat(4096))),
        Just(Value::Array(vec![])),
        Just(Value::Object(Default::default())),
    ]
}

/// One structural edit of a JSON document: the `n`-th node (pre-order) is replaced,
/// removed (from its object or array) or duplicated (within its array).
#[derive(Debug, Clone)]
pub enum JsonEdit {
    Replace(usize, Value),
    Remove(usize),
    Duplicate(usize),
}

fn count(v: &Value) -> usize {
    1 + match v {
        Value::Array(a) => a.iter().map(count).sum(),
        Value::Object(o) => o.values().map(count).sum(),
        _ => 0,
    }
}

/// Apply `e` to the node numbered `k` (pre-order, root 0); returns true when done.
fn edit_at(v: &mut Value, k: &mut usize, e: &JsonEdit) -> bool {
    let children: Vec<usize> = match v {
        Value::Array(a) => (0..a.len()).collect(),
        Value::Object(o) => (0..o.len()).collect(),
        _ => Vec::new(),
    };
    for i in children {
        *k -= 1;
        if *k == 0 {
            match (v, e) {
                (Value::Array(a), JsonEdit::Replace(_, x)) => a[i] = x.clone(),
                (Value::Object(o), JsonEdit::Replace(_, x)) => {
                    if let Some((_, slot)) = o.iter_mut().nth(i) {
                        *slot = x.clone();
                    }
                }
                (Value::Array(a), JsonEdit::Remove(_)) => {
                    a.remove(i);
                }
                (Value::Object(o), JsonEdit::Remove(_)) => {
                    let key = o.keys().nth(i).cloned().unwrap();
                    o.remove(&key);
                }
                (Value::Array(a), JsonEdit::Duplicate(_)) => {
                    let x = a[i].clone();
                    a.insert(i, x);
                }
                _ => {}
            }
            return true;
        }
        let child = match v {
            Value::Array(a) => &mut a[i],
            Value::Object(o) => o.iter_mut().nth(i).unwrap().1,
            _ => unreachable!(),
        };
        if edit_at(child, k, e) {
            return true;
        }
    }
    false
}

/// Apply a list of structural edits to the JSON text `seed`.
pub fn apply_json(seed: &[u8], edits: &[JsonEdit]) -> Vec<u8> {
    let Ok(mut v) = serde_json::from_slice::<Value>(seed) else {
        return seed.to_vec();
    };
    for e in edits {
        let n = count(&v);
        if n < 2 {
            break;
        }
        let target = match e {
            JsonEdit::Replace(t, _) | JsonEdit::Remove(t) | JsonEdit::Duplicate(t) => t,
        };
        let mut k = 1 + target % (n - 1);
        edit_at(&mut v, &mut k, e);
    }
    serde_json::to_vec_pretty(&v).unwrap()
}

fn json_edit() -> impl Strategy<Value = JsonEdit> {
    prop_oneof![
        4 => (any::<usize>(), hostile_json()).prop_map(|(k, v)| JsonEdit::Replace(k, v)),
        2 => any::<usize>().prop_map(JsonEdit::Remove),
        1 => any::<usize>().prop_map(JsonEdit::Duplicate),
    ]
}

/// A JSON seed with structural edits, then (sometimes) byte mutations on top.
pub fn mutated_json(seeds: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    let n = seeds.len();
    (
        0..n,
        prop::collection::vec(json_edit(), 0..4),
        prop::collection::vec(mutation(), 0..3),
    )
        .prop_map(move |(i, edits, muts)| {
            let mut b = apply_json(&seeds[i], &edits);
            for m in &muts {
                apply(&mut b, m);
            }
            b
        })
}

/// Seconds of fuzzing asked for by `LQL_FUZZ_SECS` (0: the short default run).
pub fn budget_secs() -> u64 {
    std::env::var("LQL_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Run `check` over cases from `strategy`: `default_cases` once, or batches until the
/// `LQL_FUZZ_SECS` budget is spent. Prints the case count.
pub fn fuzz<S: Strategy>(
    name: &str,
    default_cases: u32,
    strategy: S,
    check: impl Fn(S::Value) + Clone,
) where
    S::Value: std::fmt::Debug,
{
    let run = |cases: u32| {
        let mut runner = TestRunner::new(Config {
            cases,
            failure_persistence: None,
            max_shrink_iters: 2000,
            ..Config::default()
        });
        let c = check.clone();
        runner
            .run(&strategy, move |v| {
                c(v);
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        u64::from(cases)
    };
    let secs = budget_secs();
    if secs == 0 {
        let n = run(default_cases);
        println!("fuzz {name}: {n} cases");
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut total = 0u64;
    while Instant::now() < deadline {
        total += run(1000);
    }
    println!("fuzz {name}: {total} cases in {secs} s, 0 failures");
}
