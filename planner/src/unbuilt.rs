//! The one table of what is not built yet: statements and clauses that parse and bind but
//! that the engine does not run. Each refusal is `not supported yet: …` with the span of the
//! clause at fault. EXPLAIN PLAN still shows their operator trees.

use lql_grammar::{Span, Statement, StatementKind, Table};

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
        (StatementKind::Use(u), _) => match &u.profile {
            Some(p) => refuse("USE … PROFILE", p.span),
            None => Ok(()),
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
        (StatementKind::Show(s), LogicalPlan::Show(p)) if matches!(p.what, ShowWhat::Profiles) => {
            refuse(&format!("SHOW {}", p.what), s.what.span)
        }
        (_, LogicalPlan::Update(u)) => {
            if u.table != Table::Features {
                return refuse(&format!("UPDATE {}", u.table.name()), stmt.span);
            }
            match u
                .assignments
                .iter()
                .find(|(c, _)| c != "gate_scale" && c != "down_scale")
            {
                Some((c, _)) => refuse(
                    &format!("UPDATE features SET {c} (gate_scale and down_scale are built)"),
                    stmt.span,
                ),
                None => Ok(()),
            }
        }
        (_, LogicalPlan::Diff(_) | LogicalPlan::Compile(_) | LogicalPlan::Compact { .. }) => {
            refuse(plan.name(), stmt.span)
        }
        _ => Ok(()),
    }
}
