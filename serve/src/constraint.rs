//! Structured output on the OpenAI routes: `response_format` (`json_object`, `json_schema`),
//! llama.cpp's own `grammar` (GBNF) and `json_schema` fields, and `text.format` on
//! `/v1/responses`, read into one [`ConstraintSpec`] and compiled for the served tokenizer
//! (docs/serve.md "Constrained decoding").

use std::sync::Arc;

use lql::generation::{ConstraintSpec, Grammar, Tokenizer};
use serde::Deserialize;
use serde_json::Value;

use crate::error::ApiError;

/// The constraint fields every generating route may carry.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ConstraintFields {
    /// OpenAI's `{"type": "text" | "json_object" | "json_schema", …}`.
    pub response_format: Option<Value>,
    /// llama.cpp's server: a GBNF grammar.
    pub grammar: Option<String>,
    /// llama.cpp's server: a JSON schema.
    pub json_schema: Option<Value>,
}

impl ConstraintFields {
    /// The one constraint these fields ask for (none for `text` or no field); two at once
    /// are refused.
    pub fn spec(&self) -> Result<Option<(ConstraintSpec, &'static str)>, ApiError> {
        let mut found: Vec<(ConstraintSpec, &'static str)> = Vec::new();
        if let Some(rf) = &self.response_format {
            if let Some(spec) = response_format(rf, "response_format")? {
                found.push((spec, "response_format"));
            }
        }
        if let Some(g) = &self.grammar {
            if g.trim().is_empty() {
                return Err(ApiError::invalid_param("grammar", "the grammar is empty"));
            }
            found.push((ConstraintSpec::Gbnf(g.clone()), "grammar"));
        }
        if let Some(s) = &self.json_schema {
            found.push((ConstraintSpec::JsonSchema(s.clone()), "json_schema"));
        }
        if found.len() > 1 {
            return Err(ApiError::invalid_param(
                found[1].1,
                format!(
                    "give one of response_format, grammar and json_schema, not {} and {}",
                    found[0].1, found[1].1
                ),
            ));
        }
        Ok(found.pop())
    }

    /// [`ConstraintFields::spec`], compiled for `tok` (a grammar that does not compile is
    /// a 400 naming its field).
    pub fn compile(&self, tok: &Tokenizer) -> Result<Option<Arc<Grammar>>, ApiError> {
        let Some((spec, param)) = self.spec()? else {
            return Ok(None);
        };
        compile(&spec, param, tok).map(Some)
    }
}

/// Compile `spec` for `tok`; a fault is a 400 with `param`.
pub fn compile(
    spec: &ConstraintSpec,
    param: &str,
    tok: &Tokenizer,
) -> Result<Arc<Grammar>, ApiError> {
    Grammar::compile(spec, tok).map_err(|e| ApiError::invalid_param(param, e.to_string()))
}

/// OpenAI's `response_format` (chat, completions) or `text.format` (responses: the schema
/// sits beside `type` there). llama.cpp's `{"type": "json_object", "schema": {…}}` is read
/// as a schema, as its server does.
pub fn response_format(rf: &Value, param: &str) -> Result<Option<ConstraintSpec>, ApiError> {
    let bad = |m: &str| ApiError::invalid_param(param, m.to_string());
    let Some(obj) = rf.as_object() else {
        return Err(bad("must be an object with a `type`"));
    };
    match obj.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(match obj.get("schema") {
            Some(s) => ConstraintSpec::JsonSchema(s.clone()),
            None => ConstraintSpec::JsonObject,
        })),
        Some("json_schema") => {
            // Chat completions nest it as `json_schema.schema`; responses put `schema` in
            // the format itself.
            let schema = obj
                .get("json_schema")
                .and_then(|j| j.get("schema"))
                .or_else(|| obj.get("schema"));
            match schema {
                Some(s) => Ok(Some(ConstraintSpec::JsonSchema(s.clone()))),
                None => Err(bad("type json_schema needs json_schema.schema")),
            }
        }
        Some(other) => Err(bad(&format!(
            "unknown type {other:?}: text, json_object or json_schema"
        ))),
        None => Err(bad("must be an object with a `type`")),
    }
}
