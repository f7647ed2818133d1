//! Edit-quality bench (docs/editing.md): applies the fact set of
//! `tests/fixtures/edit/facts.json` to SmolLM2-135M and reports efficacy, paraphrase and
//! neighbourhood success and the KL divergence on unrelated prompts — with all edits in one
//! patch, then after 500 sequential edits — plus the patch's apply time and bytes per edit.
//!
//! `cargo run --release -p lql-engine --example edit_quality [-- --facts N] [--sequential N]
//!  [--layer L] [--alpha A] [--skip-sequential] [--skip-one-patch] [--show-failures]
//!  [--near-duplicate-names]`
//!
//! The sequential run edits the known facts, then the rest of the set, then invented cities
//! with distinct names ("Kalorin", "Mivendu", …; `--near-duplicate-names` uses "Zarvel0ia",
//! "Zarvel1ia", …, names that differ in one digit, as earlier builds did).
//!
//! Metrics (CounterFact's, on the first token of each target):
//! - efficacy: P(new) > P(true) on the edit prompt;
//! - paraphrase: P(new) > P(true) on each of the two paraphrase prompts;
//! - neighbourhood: P(true) > P(new) on each of the three neighbour prompts;
//! - KL: mean KL(base ‖ edited) of the next-token distribution over 50 unrelated prompts.
//!
//! Only facts the base model knows (P(true) > P(new) on the edit prompt) are used.

use std::time::Instant;

use lql::{Connection, Database, Value, UNRELATED_PROMPTS as UNRELATED};

struct Fact {
    entity: String,
    relation: String,
    true_t: String,
    new_t: String,
    prompt: String,
    paraphrases: Vec<String>,
    neighbourhood: Vec<String>,
}

fn facts(path: &str) -> Vec<Fact> {
    let text = std::fs::read_to_string(path).expect("read the fact set");
    let v: serde_json::Value = serde_json::from_str(&text).expect("fact set JSON");
    let s = |x: &serde_json::Value| x.as_str().expect("string").to_string();
    let list = |x: &serde_json::Value| -> Vec<String> {
        x.as_array().expect("list").iter().map(s).collect()
    };
    v["facts"]
        .as_array()
        .expect("facts")
        .iter()
        .map(|f| Fact {
            entity: s(&f["entity"]),
            relation: s(&f["relation"]),
            true_t: s(&f["true"]),
            new_t: s(&f["new"]),
            prompt: s(&f["prompt"]),
            paraphrases: list(&f["paraphrases"]),
            neighbourhood: list(&f["neighbourhood"]),
        })
        .collect()
}

fn q(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// First token id of `text` (no BOS).
fn first_token(c: &Connection, text: &str) -> lql::Result<i64> {
    let r = c.execute(&format!("TOKENIZE {}", q(text)))?;
    Ok(match r.rows.first().map(|row| &row[1]) {
        Some(Value::Int(i)) => *i,
        _ => -1,
    })
}

/// The next-token distribution after `prompt`, indexed by token id.
fn dist(c: &Connection, prompt: &str, vocab: usize) -> lql::Result<Vec<f64>> {
    let r = c.execute(&format!("INFER {} TOP {vocab}", q(prompt)))?;
    let mut p = vec![0.0f64; vocab];
    for row in &r.rows {
        if let (Value::Int(id), Value::Float(pr)) = (&row[2], &row[3]) {
            p[*id as usize] = *pr;
        }
    }
    Ok(p)
}

fn kl(p: &[f64], q: &[f64]) -> f64 {
    p.iter()
        .zip(q)
        .filter(|(a, _)| **a > 0.0)
        .map(|(a, b)| a * (a / b.max(1e-30)).ln())
        .sum::<f64>()
        .max(0.0)
}

struct Ids {
    t: usize,
    n: usize,
}

struct Scores {
    efficacy: f64,
    paraphrase: f64,
    neighbourhood: f64,
}

/// Which failing prompts [`score`] prints.
#[derive(Clone, Copy, PartialEq)]
enum Show {
    Nothing,
    Neighbours,
    All,
}

/// Scores the facts; prints the failing prompts `show` names.
fn score(c: &Connection, fs: &[(&Fact, Ids)], vocab: usize, show: Show) -> lql::Result<Scores> {
    let (mut e, mut p, mut nb) = (0usize, 0usize, 0usize);
    let (mut pn, mut nn) = (0usize, 0usize);
    for (f, ids) in fs {
        let d = dist(c, &f.prompt, vocab)?;
        e += usize::from(d[ids.n] > d[ids.t]);
        if show == Show::All && d[ids.n] <= d[ids.t] {
            println!(
                "  edit prompt fails: {:?} P({}) {:.3} ≤ P({}) {:.3}",
                f.prompt, f.new_t, d[ids.n], f.true_t, d[ids.t]
            );
        }
        for pp in &f.paraphrases {
            let d = dist(c, pp, vocab)?;
            p += usize::from(d[ids.n] > d[ids.t]);
            pn += 1;
            if show == Show::All && d[ids.n] <= d[ids.t] {
                println!(
                    "  paraphrase fails: {pp:?} P({}) {:.3} ≤ P({}) {:.3}",
                    f.new_t, d[ids.n], f.true_t, d[ids.t]
                );
            }
        }
        for np in &f.neighbourhood {
            let d = dist(c, np, vocab)?;
            nb += usize::from(d[ids.t] > d[ids.n]);
            nn += 1;
            if show != Show::Nothing && d[ids.t] <= d[ids.n] {
                println!(
                    "  neighbour fails ({} → {}): {np:?} P({}) {:.3} ≤ P({}) {:.3}",
                    f.entity, f.new_t, f.true_t, d[ids.t], f.new_t, d[ids.n]
                );
            }
        }
    }
    Ok(Scores {
        efficacy: e as f64 / fs.len() as f64,
        paraphrase: p as f64 / pn as f64,
        neighbourhood: nb as f64 / nn as f64,
    })
}

fn mean_kl(c: &Connection, base: &[Vec<f64>], vocab: usize) -> lql::Result<f64> {
    let mut s = 0.0;
    for (prompt, b) in UNRELATED.iter().zip(base) {
        let k = kl(b, &dist(c, prompt, vocab)?);
        if k > 0.01 {
            println!("  unrelated prompt {prompt:?} moved: KL {k:.3} nats");
        }
        s += k;
    }
    Ok(s / base.len() as f64)
}

fn insert_text(f: &Fact, target: &str, clauses: &str) -> String {
    format!(
        "INSERT INTO edges (entity, relation, target, prompt) VALUES ({}, {}, {}, {}){clauses}",
        q(&f.entity),
        q(&f.relation),
        q(target),
        q(&f.prompt)
    )
}

fn main() -> lql::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opt = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let n_facts: usize = opt("--facts").map_or(150, |v| v.parse().expect("--facts N"));
    let n_seq: usize = opt("--sequential").map_or(500, |v| v.parse().expect("--sequential N"));
    let mut clauses = String::new();
    if let Some(l) = opt("--layer") {
        clauses += &format!(" AT LAYER {l}");
    }
    if let Some(a) = opt("--alpha") {
        clauses += &format!(" ALPHA {a}");
    }
    let path = opt("--fact-file").unwrap_or_else(|| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/edit/facts.json"
        )
        .to_string()
    });
    let all = facts(&path);
    let db = Database::open("smollm2-135m-instruct")?;
    let c = db.connect()?;
    let vocab = match &c
        .execute("SELECT id FROM tokens ORDER BY id DESC LIMIT 1")?
        .rows[0][0]
    {
        Value::Int(v) => *v as usize + 1,
        _ => 49152,
    };

    // The facts the base model knows.
    let t0 = Instant::now();
    let mut known = Vec::new();
    let mut rest = Vec::new();
    let quick = args.iter().any(|a| a == "--skip-sequential");
    let show = if args.iter().any(|a| a == "--show-failures") {
        Show::All
    } else {
        Show::Nothing
    };
    let near_duplicates = args.iter().any(|a| a == "--near-duplicate-names");
    for f in &all {
        if quick && known.len() == n_facts {
            break;
        }
        let ids = Ids {
            t: first_token(&c, &format!(" {}", f.true_t))? as usize,
            n: first_token(&c, &format!(" {}", f.new_t))? as usize,
        };
        let d = dist(&c, &f.prompt, vocab)?;
        if ids.t != ids.n && d[ids.t] > d[ids.n] && known.len() < n_facts {
            known.push((f, ids));
        } else {
            rest.push((f, ids));
        }
    }
    let relations: std::collections::BTreeSet<&str> =
        known.iter().map(|(f, _)| f.relation.as_str()).collect();
    println!(
        "fact set: {} facts, {} known by the base model and used ({} relations) [{:.0}s]",
        all.len(),
        known.len(),
        relations.len(),
        t0.elapsed().as_secs_f64()
    );
    // The base model's own neighbour failures, beside the edited model's (its edit prompts
    // and most paraphrases fail by definition).
    let base_show = if show == Show::All {
        println!("base model's neighbour failures:");
        Show::Neighbours
    } else {
        Show::Nothing
    };
    let base_scores = score(&c, &known, vocab, base_show)?;
    println!(
        "base model: efficacy {:.3} paraphrase {:.3} neighbourhood {:.3}",
        base_scores.efficacy, base_scores.paraphrase, base_scores.neighbourhood
    );
    let base_dists: Vec<Vec<f64>> = UNRELATED
        .iter()
        .map(|p| dist(&c, p, vocab))
        .collect::<lql::Result<_>>()?;

    // All edits in one patch.
    let dir = tempdir();
    if !args.iter().any(|a| a == "--skip-one-patch") {
        let patch = format!("{dir}/facts.lqlpatch");
        let t0 = Instant::now();
        c.execute(&format!("BEGIN PATCH {}", q(&patch)))?;
        let rows: Vec<String> = known
            .iter()
            .map(|(f, _)| {
                format!(
                    "({}, {}, {}, {})",
                    q(&f.entity),
                    q(&f.relation),
                    q(&f.new_t),
                    q(&f.prompt)
                )
            })
            .collect();
        c.execute(&format!(
            "INSERT INTO edges (entity, relation, target, prompt) VALUES {}{clauses}",
            rows.join(", ")
        ))?;
        c.execute("SAVE PATCH")?;
        let insert_s = t0.elapsed().as_secs_f64();
        let s = score(&c, &known, vocab, show)?;
        let k = mean_kl(&c, &base_dists, vocab)?;
        println!(
            "{} edits in one patch{clauses}: efficacy {:.3} paraphrase {:.3} neighbourhood {:.3} unrelated KL {:.2e} nats [insert {:.1}s]",
            known.len(),
            s.efficacy,
            s.paraphrase,
            s.neighbourhood,
            k,
            insert_s
        );
        let bytes = std::fs::metadata(&patch).map(|m| m.len()).unwrap_or(0);
        let c2 = db.connect()?;
        let t0 = Instant::now();
        c2.execute(&format!("APPLY PATCH {}", q(&patch)))?;
        println!(
            "patch file: {bytes} bytes ({:.0} bytes per edit); APPLY PATCH {:.3}s",
            bytes as f64 / known.len().max(1) as f64,
            t0.elapsed().as_secs_f64()
        );
        c.execute(&format!("REMOVE PATCH {}", q(&patch)))?;
        let same = UNRELATED
            .iter()
            .take(5)
            .zip(&base_dists)
            .all(|(p, b)| dist(&c, p, vocab).map(|d| &d == b).unwrap_or(false));
        println!("REMOVE PATCH: distributions bit-identical to the base: {same}");
    }

    if args.iter().any(|a| a == "--skip-sequential") || n_seq == 0 {
        return Ok(());
    }
    // Sequential edits: the known facts first, then the others, then fictional entities.
    let big = format!("{dir}/seq.lqlpatch");
    c.execute(&format!("BEGIN PATCH {}", q(&big)))?;
    let t0 = Instant::now();
    let mut done = 0usize;
    for (f, _) in known.iter().chain(rest.iter()) {
        if done == n_seq {
            break;
        }
        c.execute(&insert_text(f, &f.new_t, &clauses))?;
        done += 1;
    }
    let countries = ["France", "Germany", "Italy", "Spain", "Japan", "Canada"];
    let mut i = 0usize;
    while done < n_seq {
        let name = if near_duplicates {
            format!("Zarvel{i}ia")
        } else {
            invented_name(i)
        };
        let f = Fact {
            entity: name.clone(),
            relation: "city_country".into(),
            true_t: String::new(),
            new_t: countries[i % countries.len()].into(),
            prompt: format!("{name} is a city in the country of"),
            paraphrases: Vec::new(),
            neighbourhood: Vec::new(),
        };
        c.execute(&insert_text(&f, &f.new_t, &clauses))?;
        done += 1;
        i += 1;
    }
    let seq_s = t0.elapsed().as_secs_f64();
    let s = score(&c, &known, vocab, show)?;
    let k = mean_kl(&c, &base_dists, vocab)?;
    println!(
        "after {done} sequential edits: first {} efficacy {:.3} paraphrase {:.3} neighbourhood {:.3} unrelated KL {:.2e} nats [{:.0}s]",
        known.len(),
        s.efficacy,
        s.paraphrase,
        s.neighbourhood,
        k,
        seq_s
    );
    c.execute("SAVE PATCH")?;
    let bytes = std::fs::metadata(&big).map(|m| m.len()).unwrap_or(0);
    let c3 = db.connect()?;
    let t0 = Instant::now();
    c3.execute(&format!("APPLY PATCH {}", q(&big)))?;
    let apply_s = t0.elapsed().as_secs_f64();
    c3.execute("INFER \"The capital of France is\"")?;
    println!(
        "{done}-edit patch file: {bytes} bytes ({:.0} bytes per edit); APPLY PATCH {:.3}s (first INFER after it included: {:.3}s)",
        bytes as f64 / done.max(1) as f64,
        apply_s,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The `i`-th invented place name: three syllables, distinct for every `i` below 4096.
fn invented_name(i: usize) -> String {
    const SYLLABLES: [&str; 16] = [
        "ka", "lo", "rin", "ven", "tor", "mi", "sa", "dun", "bel", "qua", "zor", "fi", "nel",
        "ast", "gra", "pe",
    ];
    let s = [i % 16, (i / 16) % 16, (i / 256) % 16].map(|k| SYLLABLES[k]);
    let mut name = format!("{}{}{}", s[0], s[1], s[2]);
    name[..1].make_ascii_uppercase();
    name
}

fn tempdir() -> String {
    let d = std::env::temp_dir().join(format!("lql-edit-quality-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d.to_string_lossy().into_owned()
}
