//! PATCH (activation patching): the statement's clauses, each at most once, with exactly
//! one corruption (FROM a clean prompt, or NOISE ON a subject).

use super::{
    at_layer_spec, choose, clause_float, clause_int, clause_str, internal, last_child, layer_spec,
    need_prompt, set, span, string, unsigned, Result, Rule,
};
use crate::ast::*;
use crate::error::SyntaxError;
use pest::iterators::Pair;

pub(super) fn patch_stmt(p: Pair<Rule>) -> Result<StatementKind> {
    let sp = span(&p);
    let mut prompt = None;
    let mut from: Option<Spanned<String>> = None;
    let mut noise: Option<Spanned<String>> = None;
    let mut scale: Option<Spanned<f64>> = None;
    let mut seed: Option<Spanned<i64>> = None;
    let mut layers = None;
    let mut positions = None;
    let mut component = None;
    let mut metric = None;
    let mut method = None;
    let mut window = None;
    let mut save = None;
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_patch => {}
            Rule::string => prompt = Some(string(q)?),
            Rule::patch_from => set(&mut from, clause_str(q)?, "FROM")?,
            Rule::noise_clause => set(&mut noise, clause_str(q)?, "NOISE ON")?,
            Rule::scale_clause => set(&mut scale, clause_float(q)?, "SCALE")?,
            Rule::seed_clause => set(&mut seed, clause_int(q)?, "SEED")?,
            Rule::layers_clause => set(&mut layers, layer_spec(q)?, "LAYERS")?,
            Rule::at_layer_clause => set(&mut layers, at_layer_spec(q)?, "LAYERS")?,
            Rule::patch_positions => {
                let at = span(&q);
                let v = match last_child(q)?.as_rule() {
                    Rule::kw_last => PatchPositions::Last,
                    Rule::kw_together => PatchPositions::Together,
                    _ => PatchPositions::All,
                };
                set(&mut positions, Spanned::new(v, at), "POSITIONS")?
            }
            Rule::position_clause => {
                let at = span(&q);
                let v = PatchPositions::One(unsigned(last_child(q)?)?.value);
                set(&mut positions, Spanned::new(v, at), "POSITIONS")?
            }
            Rule::component_clause => set(&mut component, component_clause(q)?, "COMPONENT")?,
            Rule::metric_clause => set(&mut metric, metric_clause(q)?, "METRIC")?,
            Rule::patch_method => {
                let at = span(&q);
                let mut word = None;
                let mut steps = None;
                for r in q.into_inner() {
                    match r.as_rule() {
                        Rule::kw_by | Rule::kw_steps => {}
                        Rule::word => word = Some(r),
                        Rule::unsigned => steps = Some(unsigned(r)?),
                        _ => return Err(internal(&r)),
                    }
                }
                let word = word.ok_or_else(|| SyntaxError::new("expected a method", at))?;
                let m = choose(
                    &word,
                    "patching method",
                    &[
                        ("runs", PatchMethod::Runs),
                        ("attribution", PatchMethod::Attribution(None)),
                    ],
                )?
                .value;
                let m = match (m, steps) {
                    (PatchMethod::Attribution(_), s) => {
                        PatchMethod::Attribution(s.map(|s| s.value))
                    }
                    (m, None) => m,
                    (_, Some(s)) => {
                        return Err(SyntaxError::new("only attribution takes STEPS", s.span)
                            .with_label(s.span, "runs restore each cell exactly")
                            .with_help("BY ATTRIBUTION STEPS 8 averages the gradient over 8 runs"))
                    }
                };
                set(&mut method, Spanned::new(m, at), "BY")?
            }
            Rule::window_clause => {
                let at = span(&q);
                let n = unsigned(last_child(q)?)?.value;
                set(&mut window, Spanned::new(n, at), "WINDOW")?
            }
            Rule::save_clause => set(&mut save, clause_str(q)?, "SAVE")?,
            _ => return Err(internal(&q)),
        }
    }
    let corruption = match (from, noise) {
        (Some(clean), None) => {
            if let Some(extra) = scale.as_ref().map(|s| s.span).or(seed.as_ref().map(|s| s.span))
            {
                return Err(SyntaxError::new("SCALE and SEED shape NOISE", extra)
                    .with_label(extra, "there is no noise: the corruption is FROM a prompt")
                    .with_help("drop it, or corrupt with NOISE ON \"subject\" instead of FROM"));
            }
            Spanned::new(Corruption::Prompt(clean.clone()), clean.span)
        }
        (None, Some(subject)) => {
            let at = subject.span;
            Spanned::new(
                Corruption::Noise {
                    subject,
                    scale,
                    seed,
                },
                at,
            )
        }
        (Some(clean), Some(subject)) => {
            return Err(
                SyntaxError::new("PATCH takes one corruption", subject.span)
                    .with_label(clean.span, "a clean prompt here")
                    .with_label(subject.span, "and noise here")
                    .with_help("patch from another prompt (FROM) or from noise (NOISE ON), not both"),
            )
        }
        (None, None) => {
            return Err(SyntaxError::new("PATCH needs a corruption", sp).with_help(
                "PATCH \"corrupted prompt\" FROM \"clean prompt\" …, or PATCH \"prompt\" NOISE ON \"subject\" …",
            ))
        }
    };
    Ok(StatementKind::Patch(Patch {
        prompt: need_prompt(prompt)?,
        corruption,
        layers,
        positions,
        component,
        metric,
        method,
        window,
        save,
    }))
}

/// `COMPONENT resid_pre | resid_mid | attn_out | mlp_out | head [h]`
fn component_clause(p: Pair<Rule>) -> Result<Spanned<PatchComponent>> {
    let sp = span(&p);
    let mut word = None;
    let mut head = None;
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_component => {}
            Rule::word => word = Some(q),
            Rule::unsigned => head = Some(unsigned(q)?),
            _ => return Err(internal(&q)),
        }
    }
    let word = word.ok_or_else(|| SyntaxError::new("expected a component", sp))?;
    let c = choose(
        &word,
        "component",
        &[
            ("resid_pre", PatchComponent::ResidPre),
            ("resid_mid", PatchComponent::ResidMid),
            ("attn_out", PatchComponent::AttnOut),
            ("mlp_out", PatchComponent::MlpOut),
            ("head", PatchComponent::Head(None)),
        ],
    )?
    .value;
    let c = match (c, head) {
        (PatchComponent::Head(_), h) => PatchComponent::Head(h.map(|h| h.value)),
        (_, Some(h)) => {
            return Err(SyntaxError::new("only a head takes a number", h.span)
                .with_label(
                    h.span,
                    format!("{} is one vector per position", word.as_str()),
                )
                .with_help("COMPONENT head 3 restores one head; drop the number otherwise"))
        }
        (c, None) => c,
    };
    Ok(Spanned::new(c, sp))
}

/// `METRIC logit_diff("a", "b") | logit("a") | prob("a")`
fn metric_clause(p: Pair<Rule>) -> Result<Spanned<PatchMetric>> {
    let sp = span(&p);
    let mut word = None;
    let mut tokens = Vec::new();
    for q in p.into_inner() {
        match q.as_rule() {
            Rule::kw_metric | Rule::lparen | Rule::rparen | Rule::comma => {}
            Rule::word => word = Some(q),
            Rule::string => tokens.push(string(q)?),
            _ => return Err(internal(&q)),
        }
    }
    let word = word.ok_or_else(|| SyntaxError::new("expected a metric", sp))?;
    #[derive(Clone, Copy)]
    enum Kind {
        Diff,
        Logit,
        Prob,
    }
    let kind = choose(
        &word,
        "metric",
        &[
            ("logit_diff", Kind::Diff),
            ("logit", Kind::Logit),
            ("prob", Kind::Prob),
        ],
    )?
    .value;
    let arity = |want: usize| -> Result<()> {
        if tokens.len() == want {
            return Ok(());
        }
        Err(SyntaxError::new(
            format!(
                "{} takes {want} token{}, not {}",
                word.as_str().to_ascii_uppercase(),
                if want == 1 { "" } else { "s" },
                tokens.len()
            ),
            sp,
        )
        .with_help(match want {
            2 => "LOGIT_DIFF(\" right\", \" wrong\")",
            _ => "LOGIT(\" token\") or PROB(\" token\")",
        }))
    };
    let mut it = tokens.iter().map(|t| t.value.clone());
    let m = match kind {
        Kind::Diff => {
            arity(2)?;
            PatchMetric::LogitDiff(it.next().unwrap_or_default(), it.next().unwrap_or_default())
        }
        Kind::Logit => {
            arity(1)?;
            PatchMetric::Logit(it.next().unwrap_or_default())
        }
        Kind::Prob => {
            arity(1)?;
            PatchMetric::Prob(it.next().unwrap_or_default())
        }
    };
    Ok(Spanned::new(m, sp))
}
