//! The one table of what is not built yet: statements and clauses that parse and bind but
//! that the engine does not run. Each refusal is `not supported yet: …` with the span of the
//! clause at fault. EXPLAIN PLAN still shows their operator trees.

use lql_grammar::{CompileTarget, Span, Statement, StatementKind};

use crate::error::PlanError;
use crate::logical::{ExplainMode, ExtractFormat, LogicalPlan, ShowWhat};

/// Refuses a statement (or one of its clauses) that is not built yet.
pub fn check_built(stmt: &Statement, plan: &LogicalPlan) -> Result<(), PlanError> {
    let refuse = |what: &str, span: Span| {
        Err(PlanError::unsupported(
            format!("not supported yet: {what}"),
            span,
        ))
    };
    match (&stmt.kind, plan) {
        (_, LogicalPlan::Explain(e)) if e.mode == ExplainMode::Plan => Ok(()),
        (
            StatementKind::Explain(inner)
            | StatementKind::ExplainAnalyze(inner)
            | StatementKind::ExplainPlan(inner),
            LogicalPlan::Explain(e),
        ) => check_built(inner, &e.inner),
        (StatementKind::Use(u), LogicalPlan::Use(p)) => match (&u.profile, &p.layers) {
            (Some(c), Some(_)) => refuse("USE … LAYERS … PROFILE (a profile selects container variants; layer ranges bind packages)", c.span),
            _ => Ok(()),
        },
        (StatementKind::Extract(x), LogicalPlan::Extract(p)) => {
            if p.format == ExtractFormat::Package {
                return match &x.layers {
                    Some(l) => refuse(
                        "EXTRACT … FORMAT PACKAGE LAYERS (a package holds every layer; bind a range with USE … LAYERS)",
                        l.span,
                    ),
                    None => Ok(()),
                };
            }
            match &x.layers {
                Some(l) => refuse(
                    "EXTRACT … LAYERS into a VINDEX3 container (a container holds every layer)",
                    l.span,
                ),
                None => Ok(()),
            }
        }
        (StatementKind::Show(s), LogicalPlan::Show(p))
            if matches!(p.what, ShowWhat::Patches) =>
        {
            refuse(&format!("SHOW {}", p.what), s.what.span)
        }
        (StatementKind::Diff(d), LogicalPlan::Diff(_)) => match &d.into_patch {
            Some(p) => refuse(
                "DIFF … INTO PATCH (the patch format is not built yet)",
                p.span,
            ),
            None => Ok(()),
        },
        (StatementKind::Compile(c), LogicalPlan::Compile(p)) => match p.target {
            CompileTarget::Package => refuse("COMPILE … INTO PACKAGE", c.target.span),
            CompileTarget::Vindex | CompileTarget::Gguf => Ok(()),
        },
        (
            _,
            LogicalPlan::Insert(_)
            | LogicalPlan::Delete(_)
            | LogicalPlan::Update(_)
            | LogicalPlan::BeginPatch { .. }
            | LogicalPlan::SavePatch
            | LogicalPlan::ApplyPatch { .. }
            | LogicalPlan::RemovePatch { .. }
            | LogicalPlan::Diff(_)
            | LogicalPlan::Compile(_),
        ) => refuse(plan.name(), stmt.span),
        _ => Ok(()),
    }
}
