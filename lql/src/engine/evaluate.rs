//! `EVALUATE EDITS FROM "facts.json"`: inserts a fact set through the same INSERT every
//! edit takes (`edit::insert`), in one batch or `SEQUENTIAL BATCH n` at a time, and scores
//! every fact before anything is inserted, right after its own batch and at the end
//! (retention), by ROME's and EasyEdit's definitions (`score`), with the KL divergence of
//! the next-token distribution over unrelated prompts. Every fact is checked before any is
//! inserted, and a failure part-way (an interrupt included) takes back every edit the
//! statement made. The edits stay in force afterwards, as an INSERT's do.

mod score;

use std::time::Instant;

use lql_exec::Executor;
use lql_planner::{EdgeRow, EvaluatePlan, InsertPlan};

use self::score::{FactScores, Metrics, PromptTokens};
use super::datum::Datum;
use super::facts::{self, Fact};
use super::{edit, Cx};
use crate::error::{Error, Result};
use crate::progress::report_items;
use crate::rows::Rows;
use crate::value::Value;

/// Text unrelated to any fact: the edited state's next-token distribution after each
/// should stay the unedited one's (EVALUATE EDITS' `kl`).
pub const UNRELATED_PROMPTS: [&str; 50] = [
    "The weather forecast for tomorrow says",
    "To bake bread you first need to",
    "My favourite hobby is",
    "The meeting was postponed because",
    "She picked up the phone and said",
    "The best way to learn a language is",
    "Once upon a time there was a",
    "The stock market today",
    "He opened the door and saw",
    "In mathematics, a prime number is",
    "The recipe calls for two cups of",
    "Our team won the game by",
    "The children played in the",
    "A good night's sleep helps",
    "The train leaves the station at",
    "Please remember to bring your",
    "The computer crashed while I was",
    "They decided to go hiking in the",
    "The museum opens every day at",
    "Water is made of hydrogen and",
    "The doctor told him to",
    "I would like to order a",
    "The movie was so boring that",
    "Every morning I drink a cup of",
    "The library is closed on",
    "The dog barked at the",
    "Learning to play the piano takes",
    "The price of the house was",
    "We need to buy more",
    "The teacher asked the students to",
    "After the rain, the sky turned",
    "The most important thing in life is",
    "He wrote a letter to his",
    "The garden was full of",
    "My brother works as a",
    "The car would not start because",
    "The answer to the question is",
    "She likes to read books about",
    "The concert starts at eight and",
    "The new phone has a better",
    "Scientists discovered that",
    "The river flows into the",
    "At the party, everyone was",
    "The shop sells fresh",
    "The airplane landed safely at",
    "On weekends we usually",
    "The password must contain at least",
    "The farmer grew wheat and",
    "The baby started to",
    "The president gave a speech about",
];

/// A fact's prompts, tokenized once.
struct Prepared {
    rewrite: PromptTokens,
    paraphrase: Vec<PromptTokens>,
    neighbourhood: Vec<PromptTokens>,
}

/// A fact's scores at each stage.
struct Scored {
    before: FactScores,
    after_batch: Option<FactScores>,
    last: Option<FactScores>,
    batch: usize,
}

impl Scored {
    /// The fact's scores at `stage` (after its batch is the end when there was one batch).
    fn at(&self, stage: Stage) -> Option<&FactScores> {
        match stage {
            Stage::Before => Some(&self.before),
            Stage::AfterBatch => self.after_batch.as_ref().or(self.last.as_ref()),
            Stage::Final => self.last.as_ref(),
        }
    }
}

/// The stages a row reports.
#[derive(Clone, Copy, PartialEq)]
enum Stage {
    Before,
    AfterBatch,
    Final,
}

impl Stage {
    fn name(self) -> &'static str {
        match self {
            Stage::Before => "before",
            Stage::AfterBatch => "after_batch",
            Stage::Final => "final",
        }
    }
}

/// `EvaluateEdits`.
pub(crate) fn evaluate(cx: &mut Cx<'_>, plan: &EvaluatePlan) -> Result<Datum> {
    if let Some(out) = &plan.save {
        super::protect::refuse_overwrite(cx, out, "EVALUATE EDITS", &[])?;
        refuse_missing_folder(out)?;
    }
    let facts = facts::read(&plan.facts, plan.limit)?;
    if let Some((n, f)) = facts
        .iter()
        .enumerate()
        .find(|(_, f)| f.target_true.is_none())
    {
        return Err(Error::semantic(format!(
            "fact {n} ({}) has no true target: EVALUATE EDITS compares the new target with it",
            f.subject
        ))
        .with_help("give each fact \"true\" (LQL's fact files) or requested_rewrite.target_true (CounterFact)"));
    }
    let rows: Vec<EdgeRow> = facts.iter().map(Fact::edge_row).collect();
    let name = |n: usize, row: &EdgeRow| format!("fact {n} ({} → {})", row.entity, row.target);
    edit::refuse_long_text(&rows)?;
    edit::check_rows(cx, &rows, true, name)?;
    let prepared = prepare(cx, &facts)?;
    edit::all_or_nothing(cx, |cx| run(cx, plan, &facts, &rows, &prepared))
}

/// The folder a SAVE writes into must exist before hours of work, not after.
fn refuse_missing_folder(out: &str) -> Result<()> {
    let parent = std::path::Path::new(out)
        .parent()
        .filter(|p| !p.as_os_str().is_empty());
    match parent {
        Some(p) if !p.is_dir() => Err(Error::io(format!(
            "cannot SAVE to {out:?}: the folder {} does not exist",
            p.display()
        ))),
        _ => Ok(()),
    }
}

/// Tokenizes every fact's prompts and both targets (a leading space before a target, as
/// INSERT implies one); a true target that tokenizes to nothing is refused by fact.
fn prepare(cx: &mut Cx<'_>, facts: &[Fact]) -> Result<Vec<Prepared>> {
    let tok = cx.tokenizer()?;
    facts
        .iter()
        .enumerate()
        .map(|(n, f)| {
            let tokens = |prompt: &str| -> Result<PromptTokens> {
                let target = |t: &str| tok.encode(&edit::continuation(prompt, t), false);
                let p = PromptTokens {
                    prompt: prompt.to_string(),
                    ids: tok.encode(prompt, true)?,
                    target_new: target(&f.target_new)?,
                    target_true: target(f.target_true.as_deref().unwrap_or_default())?,
                };
                if p.ids.is_empty() || p.target_true.is_empty() || p.target_new.is_empty() {
                    return Err(Error::semantic(format!(
                        "fact {n} ({}): the prompt {prompt:?} or a target after it tokenizes to nothing; nothing was inserted",
                        f.subject
                    )));
                }
                Ok(p)
            };
            Ok(Prepared {
                rewrite: tokens(&f.prompt)?,
                paraphrase: f.paraphrases.iter().map(|p| tokens(p)).collect::<Result<_>>()?,
                neighbourhood: f.neighbours.iter().map(|p| tokens(p)).collect::<Result<_>>()?,
            })
        })
        .collect()
}

fn score_fact(exec: &Executor, p: &Prepared) -> Result<FactScores> {
    let all = |v: &[PromptTokens]| -> Result<Vec<_>> {
        v.iter().map(|t| score::score(exec, t)).collect()
    };
    Ok(FactScores {
        rewrite: score::score(exec, &p.rewrite)?,
        paraphrase: all(&p.paraphrase)?,
        neighbourhood: all(&p.neighbourhood)?,
    })
}

/// The next-token log-distribution after each unrelated prompt, in the current state.
fn unrelated(cx: &mut Cx<'_>) -> Result<Vec<Vec<f64>>> {
    let exec = cx.executor()?;
    let tok = cx.tokenizer()?;
    UNRELATED_PROMPTS
        .iter()
        .map(|p| {
            let logits = exec.session().prefill(&tok.encode(p, true)?)?;
            Ok(score::log_softmax(&logits))
        })
        .collect()
}

/// Reports `done` of `total` items of `task` to the connection's progress handler.
fn report(cx: &Cx<'_>, task: &str, done: usize, total: usize) {
    report_items(
        cx.engine.progress.as_ref(),
        &format!("EVALUATE EDITS: {task}"),
        done as u64,
        total as u64,
        done == total,
    );
}

/// Scores the facts of `range` in the current state, reporting progress as `task`.
fn score_range(
    cx: &mut Cx<'_>,
    prepared: &[Prepared],
    range: std::ops::Range<usize>,
    task: &str,
) -> Result<Vec<FactScores>> {
    let exec = cx.executor()?;
    let total = range.len();
    let mut out = Vec::with_capacity(total);
    for (k, p) in prepared[range].iter().enumerate() {
        cx.check_cancel()?;
        out.push(score_fact(&exec, p)?);
        report(cx, task, k + 1, total);
    }
    Ok(out)
}

fn run(
    cx: &mut Cx<'_>,
    plan: &EvaluatePlan,
    facts: &[Fact],
    rows: &[EdgeRow],
    prepared: &[Prepared],
) -> Result<Datum> {
    let n = facts.len();
    let before = score_range(cx, prepared, 0..n, "score before")?;
    let unrelated_before = unrelated(cx)?;
    let size = plan.batch.unwrap_or(n).max(1);
    let batches: Vec<std::ops::Range<usize>> =
        (0..n).step_by(size).map(|s| s..(s + size).min(n)).collect();
    let sequential = batches.len() > 1;
    let mut scored: Vec<Scored> = before
        .into_iter()
        .enumerate()
        .map(|(i, b)| Scored {
            before: b,
            after_batch: None,
            last: None,
            batch: i / size,
        })
        .collect();
    let mut edit_seconds = 0.0;
    for range in &batches {
        cx.check_cancel()?;
        let started = Instant::now();
        edit::insert(
            cx,
            &InsertPlan {
                table: lql_grammar::Table::Edges,
                rows: rows[range.clone()].to_vec(),
                file: None,
                query: None,
                settings: plan.settings,
                confidence: None,
            },
        )?;
        edit_seconds += started.elapsed().as_secs_f64();
        report(cx, "insert", range.end, n);
        if sequential {
            let now = score_range(cx, prepared, range.clone(), "score after batch")?;
            for (s, f) in scored[range.clone()].iter_mut().zip(now) {
                s.after_batch = Some(f);
            }
        }
    }
    let last = score_range(cx, prepared, 0..n, "score final")?;
    for (s, f) in scored.iter_mut().zip(last) {
        s.last = Some(f);
    }
    let unrelated_kl: Vec<f64> = unrelated(cx)?
        .iter()
        .zip(&unrelated_before)
        .map(|(now, was)| score::kl(was, now))
        .collect();
    let kl = unrelated_kl.iter().sum::<f64>() / unrelated_kl.len() as f64;
    let first_batch = batches.first().cloned().unwrap_or(0..0);
    let out = rows_of(
        plan,
        facts,
        &scored,
        sequential.then_some(first_batch),
        kl,
        edit_seconds,
    )?;
    if let Some(path) = &plan.save {
        save(path, plan, facts, &scored, &unrelated_kl, &out)?;
    }
    Ok(Datum::Rows(out))
}

/// The metrics of each fact at `stage`.
fn metrics_at(scored: &[Scored], stage: Stage) -> Result<Vec<Metrics>> {
    scored
        .iter()
        .map(|s| {
            let now = s
                .at(stage)
                .ok_or_else(|| Error::internal("a fact was not scored"))?;
            Ok(Metrics::of(now, &s.before))
        })
        .collect()
}

fn rows_of(
    plan: &EvaluatePlan,
    facts: &[Fact],
    scored: &[Scored],
    first_batch: Option<std::ops::Range<usize>>,
    kl: f64,
    edit_seconds: f64,
) -> Result<Rows> {
    let mut rows = Rows::new(super::columns_of(&lql_planner::evaluate_edits_columns()));
    let stages = [Stage::Before, Stage::AfterBatch, Stage::Final];
    let per_stage: Vec<Vec<Metrics>> = stages
        .iter()
        .map(|&s| metrics_at(scored, s))
        .collect::<Result<_>>()?;
    let opt = |v: Option<f64>| v.map_or(Value::Null, Value::from);
    let row = |scope: &str,
               fact: Option<usize>,
               stage: Stage,
               count: usize,
               m: &Metrics,
               aggregate: bool| {
        let mut r = vec![
            Value::from(scope),
            fact.map_or(Value::Null, Value::from),
            fact.map_or(Value::Null, |i| Value::from(facts[i].subject.as_str())),
            Value::from(stage.name()),
            Value::from(count),
        ];
        r.extend(m.values().into_iter().map(opt));
        let done = stage != Stage::Before;
        r.push(match (aggregate, stage) {
            (true, Stage::Before) => Value::from(0.0),
            (true, Stage::Final) => Value::from(kl),
            _ => Value::Null,
        });
        r.push(if aggregate {
            Value::from(if done { edit_seconds } else { 0.0 })
        } else {
            Value::Null
        });
        r
    };
    let mut scopes = vec![("all", 0..facts.len())];
    if let Some(r) = first_batch {
        scopes.push(("first_batch", r));
    }
    for (scope, range) in scopes {
        for (k, &stage) in stages.iter().enumerate() {
            let m = Metrics::aggregate(per_stage[k][range.clone()].iter());
            rows.push(row(scope, None, stage, range.len(), &m, true));
        }
    }
    if plan.per_fact {
        for i in 0..facts.len() {
            for (&stage, metrics) in stages.iter().zip(&per_stage) {
                rows.push(row("fact", Some(i), stage, 1, &metrics[i], false));
            }
        }
    }
    Ok(rows)
}

/// SAVE: every scored prompt's token log-probabilities and top-1 tokens at every stage, the
/// unrelated prompts' KL, and the result rows, as one JSON document (written under a
/// temporary name and renamed last).
fn save(
    path: &str,
    plan: &EvaluatePlan,
    facts: &[Fact],
    scored: &[Scored],
    unrelated_kl: &[f64],
    rows: &Rows,
) -> Result<()> {
    use serde_json::json;
    let doc = json!({
        "version": 1,
        "facts_file": plan.facts,
        "batch": plan.batch,
        "settings": plan.settings,
        "facts": facts.iter().zip(scored).enumerate().map(|(i, (f, s))| json!({
            "fact": i,
            "subject": f.subject,
            "prompt": f.prompt,
            "target_new": f.target_new,
            "target_true": f.target_true,
            "batch": s.batch,
            "before": s.at(Stage::Before),
            "after_batch": s.at(Stage::AfterBatch),
            "final": s.at(Stage::Final),
        })).collect::<Vec<_>>(),
        "unrelated": UNRELATED_PROMPTS.iter().zip(unrelated_kl)
            .map(|(p, kl)| json!({"prompt": p, "kl": kl})).collect::<Vec<_>>(),
        "result": crate::json::statement_json("EVALUATE EDITS", rows),
    });
    let text = serde_json::to_vec_pretty(&doc)
        .map_err(|e| Error::internal(format!("EVALUATE EDITS scores as JSON: {e}")))?;
    lql_storage::fsutil::write_atomic(std::path::Path::new(path), &text)?;
    Ok(())
}
