//! The one table of what is not built yet: statements and clauses that parse and bind but
//! that the engine does not run. Each refusal is `not supported yet: …` with the span of the
//! clause at fault. EXPLAIN PLAN still shows their operator trees.

use lql_grammar::{Span, Statement, StatementKind, Table};

use crate::error::PlanError;
use crate::logical::{Encoding, ExplainMode, ExtractFormat, ExtractShape, LogicalPlan};

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
            if let (ExtractFormat::Package, Some(l)) = (p.format, &x.labels) {
                return refuse(
                    "EXTRACT … FORMAT PACKAGE WITH LABELS (stored labels are a VINDEX3 segment)",
                    l.span,
                );
            }
            if p.format == ExtractFormat::Package {
                return match &x.layers {
                    Some(l) => refuse(
                        "EXTRACT … FORMAT PACKAGE LAYERS (a package holds every layer; bind a range with USE … LAYERS)",
                        l.span,
                    ),
                    None => Ok(()),
                };
            }
            if let (Some(s), Some(enc)) = (
                x.shape.as_ref().filter(|s| s.value == ExtractShape::Bank),
                x.encoding.as_ref().filter(|e| e.value != Encoding::Source),
            ) {
                return refuse(
                    "EXTRACT … SHAPE BANK ENCODING (the bank shape copies each region as stored)",
                    Span { start: s.span.start.min(enc.span.start), end: s.span.end.max(enc.span.end) },
                );
            }
            match &x.layers {
                Some(l) => refuse(
                    "EXTRACT … LAYERS into a VINDEX3 container (a container holds every layer)",
                    l.span,
                ),
                None => Ok(()),
            }
        }
        (_, LogicalPlan::Update(u)) => {
            match u.table {
                Table::Features => {}
                // The binder checked the columns (entity, relation, target, prompt).
                Table::Edges => return Ok(()),
                t => return refuse(&format!("UPDATE {}", t.name()), stmt.span),
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
        _ => Ok(()),
    }
}
