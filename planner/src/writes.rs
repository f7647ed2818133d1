//! Which statements write: files (EXTRACT, COMPILE, COMPACT, patches, DIFF … INTO, RUN
//! STAGE's activation file, TRACE … SAVE) or the connection's model state (INSERT, DELETE,
//! UPDATE, APPLY/REMOVE PATCH). A read-only connection (`lql::OpenFlags::READ_ONLY`)
//! refuses them before they run. The match names every plan, so a new statement must be
//! classified here to compile.

use crate::logical::{ExplainMode, LogicalPlan};

/// What `plan` writes, in a few words (`None`: it only reads). EXPLAIN PLAN runs nothing;
/// EXPLAIN ANALYZE runs its statement and writes what it writes.
pub fn writes(plan: &LogicalPlan) -> Option<&'static str> {
    match plan {
        LogicalPlan::Insert(_) | LogicalPlan::Delete(_) | LogicalPlan::Update(_) => {
            Some("edits the model state")
        }
        LogicalPlan::BeginPatch { .. } | LogicalPlan::SavePatch => Some("writes a patch file"),
        LogicalPlan::ApplyPatch { .. } | LogicalPlan::RemovePatch { .. } => {
            Some("changes the model state by a patch")
        }
        LogicalPlan::Diff(d) if d.into_patch.is_some() => Some("writes a patch file"),
        LogicalPlan::Compile(_) => Some("writes a model file"),
        LogicalPlan::Extract(_) => Some("writes a container or package"),
        LogicalPlan::Compact { .. } => Some("rewrites a container"),
        LogicalPlan::Represent(_) => Some("adds a segment to a container"),
        LogicalPlan::RunStage { .. } => Some("writes an activation file"),
        LogicalPlan::SaveSteering { .. } => Some("writes a control-vector file"),
        LogicalPlan::Trace(t) if t.save.is_some() => Some("writes a trace file"),
        LogicalPlan::Patch(p) if p.save.is_some() => Some("writes a heat map"),
        LogicalPlan::Explain(e) => match e.mode {
            ExplainMode::Plan => None,
            ExplainMode::Analyze | ExplainMode::Trace => writes(&e.inner),
        },
        LogicalPlan::Use(_)
        | LogicalPlan::Infer(_)
        | LogicalPlan::Generate(_)
        | LogicalPlan::Walk(_)
        | LogicalPlan::Describe(_)
        | LogicalPlan::Select(_)
        | LogicalPlan::Trace(_)
        | LogicalPlan::Patch(_)
        | LogicalPlan::Diff(_)
        | LogicalPlan::Verify { .. }
        | LogicalPlan::InferFrom { .. }
        | LogicalPlan::Show(_)
        | LogicalPlan::Stats
        | LogicalPlan::Tokenize { .. }
        | LogicalPlan::DescribeTable { .. }
        | LogicalPlan::Artifact { .. }
        | LogicalPlan::Set(_)
        | LogicalPlan::SetSteering(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::writes;
    use crate::{bind, ModelFacts};

    fn plan(text: &str) -> crate::LogicalPlan {
        let facts = ModelFacts {
            name: "m".into(),
            n_layers: 30,
            vocab: 49152,
            hidden: 576,
            ffn: 1536,
            can_execute: true,
            can_browse: true,
            can_tokenize: true,
            ..Default::default()
        };
        bind(&lql_grammar::parse_statement(text).unwrap(), &facts).unwrap()
    }

    #[test]
    fn writers_and_readers() {
        for w in [
            "INSERT INTO edges (entity, relation, target) VALUES ('A', 'r', 'B')",
            "DELETE FROM edges WHERE entity = 'A'",
            "SAVE PATCH",
            "BEGIN PATCH 'p.vlp'",
            "APPLY PATCH 'p.vlp'",
            "EXTRACT MODEL 'm.gguf' INTO 'o.vindex'",
            "COMPILE CURRENT INTO GGUF 'o.gguf'",
            "COMPACT 'c.vindex'",
            "REPRESENT LABELS 'c.vindex'",
            "TRACE 'x' SAVE 't.trace'",
            "EXPLAIN ANALYZE COMPACT 'c.vindex'",
        ] {
            assert!(writes(&plan(w)).is_some(), "{w}");
        }
        for r in [
            "INFER 'x'",
            "SELECT * FROM layers",
            "TRACE 'x'",
            "DIFF CURRENT",
            "VERIFY",
            "EXPLAIN PLAN COMPACT 'c.vindex'",
            "STATS",
            "INSPECT 'c.vindex'",
            "PRECISION 'c.vindex'",
        ] {
            assert!(writes(&plan(r)).is_none(), "{r}");
        }
    }
}
