//! Tool calling in chat completions, in the chat template's own tool format.
//!
//! The request's `tools` are handed to the chat template as Hugging Face's
//! `apply_chat_template(tools=…)` hands them (the OpenAI `{"type": "function", "function":
//! {…}}` objects), and earlier turns' `tool_calls` and `role: "tool"` results are rendered by
//! the template too. What the model writes back is read in the template's format:
//!
//! - [`ToolFormat::Hermes`]: `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`, the
//!   format of Hermes, Qwen 2.5 / Qwen 3 and the templates derived from them (recognised by
//!   `<tool_call>` in the template's source).
//!
//! A template without a known format answers a request with tools "not supported" (a
//! template file with one can be given with `lql serve --chat-template FILE`).
//!
//! `tool_choice`: `"auto"` (the default) lets the model answer or call, and the answer is
//! read for calls; `"none"` renders the tools and reads nothing; `"required"` and
//! `{"type": "function", "function": {"name": …}}` constrain decoding ([`ToolCalling::constraint`])
//! to exactly one call block whose JSON is `{"name": <a declared tool>, "arguments": <its
//! parameters schema>}` (written as structured output writes JSON: one line, and no keys
//! beyond those a schema lists), so even a small model calls a declared tool with valid
//! arguments.
//! Calls come back in OpenAI's shape (`message.tool_calls[]` with `arguments` as JSON text,
//! `finish_reason: "tool_calls"`).

use lql::generation::{guided_schema, ConstraintSpec};
use serde_json::{json, Value};

use crate::error::ApiError;

/// How a template's model writes tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>\n{"name": …, "arguments": …}\n</tool_call>`.
    Hermes,
}

const HERMES_OPEN: &str = "<tool_call>";
const HERMES_CLOSE: &str = "</tool_call>";

impl ToolFormat {
    /// The format a chat template's source uses, if it renders tools in a known one.
    pub fn of_template(source: &str) -> Option<ToolFormat> {
        (source.contains("tools") && source.contains(HERMES_OPEN)).then_some(ToolFormat::Hermes)
    }
}

/// One declared function.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    pub name: String,
    /// The JSON schema of its arguments (`{"type": "object"}` when none is given).
    pub parameters: Value,
}

/// `tool_choice`.
#[derive(Debug, Clone, PartialEq)]
pub enum Choice {
    None,
    Auto,
    Required,
    Named(String),
}

/// One call the model made.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub name: String,
    /// The arguments as compact JSON text (OpenAI's `function.arguments`).
    pub arguments: String,
}

/// What an answer holds: text outside the call blocks, and the calls.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Parsed {
    pub content: Option<String>,
    pub calls: Vec<Call>,
}

/// A request's tools, how it wants them used, and the format to read calls in.
#[derive(Debug, Clone)]
pub struct ToolCalling {
    pub format: ToolFormat,
    pub tools: Vec<Tool>,
    pub choice: Choice,
    /// The `tools` value as the request gave it (what the template renders).
    pub declared: Value,
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Reads `tools`: OpenAI's `[{"type": "function", "function": {"name", "description",
/// "parameters"}}]`.
pub fn parse_tools(tools: &Value) -> Result<Vec<Tool>, ApiError> {
    let bad = |m: String| ApiError::invalid_param("tools", m);
    let list = tools
        .as_array()
        .ok_or_else(|| bad("tools must be an array".into()))?;
    let mut out: Vec<Tool> = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        if t.get("type").and_then(Value::as_str) != Some("function") {
            return Err(bad(format!(
                "tools[{i}].type must be \"function\" (the only tool type)"
            )));
        }
        let f = t
            .get("function")
            .and_then(Value::as_object)
            .ok_or_else(|| bad(format!("tools[{i}].function must be an object")))?;
        let name = f.get("name").and_then(Value::as_str).unwrap_or_default();
        if !valid_name(name) {
            return Err(bad(format!(
                "tools[{i}].function.name {name:?} must be 1 to 64 letters, digits, '_' or '-'"
            )));
        }
        if out.iter().any(|o| o.name == name) {
            return Err(bad(format!(
                "tools[{i}]: the function {name:?} is declared twice"
            )));
        }
        let parameters = match f.get("parameters") {
            None | Some(Value::Null) => json!({"type": "object"}),
            Some(p) if p.is_object() => p.clone(),
            Some(_) => {
                return Err(bad(format!(
                    "tools[{i}].function.parameters must be a JSON schema object"
                )))
            }
        };
        out.push(Tool {
            name: name.to_string(),
            parameters,
        });
    }
    Ok(out)
}

/// Reads `tool_choice` against the declared tools.
pub fn parse_choice(choice: Option<&Value>, tools: &[Tool]) -> Result<Choice, ApiError> {
    let bad = |m: String| ApiError::invalid_param("tool_choice", m);
    match choice {
        None | Some(Value::Null) => Ok(Choice::Auto),
        Some(Value::String(s)) => match s.as_str() {
            "auto" => Ok(Choice::Auto),
            "none" => Ok(Choice::None),
            "required" => Ok(Choice::Required),
            other => Err(bad(format!(
                "tool_choice {other:?} must be \"auto\", \"none\", \"required\" or a function"
            ))),
        },
        Some(v) => {
            let name = v
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .filter(|_| v.get("type").and_then(Value::as_str) == Some("function"))
                .ok_or_else(|| {
                    bad("tool_choice must be a string or {\"type\": \"function\", \"function\": {\"name\": …}}".into())
                })?;
            if !tools.iter().any(|t| t.name == name) {
                return Err(bad(format!(
                    "tool_choice names {name:?}, which tools does not declare"
                )));
            }
            Ok(Choice::Named(name.to_string()))
        }
    }
}

impl ToolCalling {
    /// The request's tool calling, or `None` when it declares no tools. `format` is the
    /// template's (`None`: the template cannot render tools, refused).
    pub fn from_request(
        tools: Option<&Value>,
        choice: Option<&Value>,
        format: Option<ToolFormat>,
    ) -> Result<Option<ToolCalling>, ApiError> {
        let Some(declared) = tools.filter(|t| !t.is_null()) else {
            if choice.is_some_and(|c| !c.is_null() && c != "none" && c != "auto") {
                return Err(ApiError::invalid_param(
                    "tool_choice",
                    "tool_choice asks for a call, but the request declares no tools",
                ));
            }
            return Ok(None);
        };
        let tools = parse_tools(declared)?;
        if tools.is_empty() {
            return Ok(None);
        }
        let choice = parse_choice(choice, &tools)?;
        let format = format.ok_or_else(|| {
            ApiError::not_supported(
                "tools",
                "tools with this model's chat template, which has no tool-call format \
                 LQL reads (it reads <tool_call> blocks, as Hermes and Qwen templates write \
                 them); start the server with --chat-template FILE naming such a template",
            )
        })?;
        Ok(Some(ToolCalling {
            format,
            tools,
            choice,
            declared: declared.clone(),
        }))
    }

    /// Whether answers are read for calls.
    pub fn reads_calls(&self) -> bool {
        self.choice != Choice::None
    }

    /// The grammar a `required` or named choice decodes under: exactly one call of a
    /// declared (or the named) tool with arguments valid for its schema.
    pub fn constraint(&self) -> Option<ConstraintSpec> {
        let allowed: Vec<&Tool> = match &self.choice {
            Choice::None | Choice::Auto => return None,
            Choice::Required => self.tools.iter().collect(),
            Choice::Named(n) => self.tools.iter().filter(|t| &t.name == n).collect(),
        };
        let one = |t: &Tool| {
            json!({
                "type": "object",
                "properties": {"name": {"const": t.name}, "arguments": t.parameters},
                "required": ["name", "arguments"],
                "additionalProperties": false,
            })
        };
        let schema = guided_schema(match allowed.as_slice() {
            [t] => one(t),
            many => json!({"anyOf": many.iter().map(|t| one(t)).collect::<Vec<_>>()}),
        });
        match self.format {
            ToolFormat::Hermes => Some(ConstraintSpec::Lark(format!(
                "start: \"{HERMES_OPEN}\\n\" call \"\\n{HERMES_CLOSE}\"\ncall: %json {schema}\n"
            ))),
        }
    }

    /// Reads an answer for calls of declared tools; a block that is not one (bad JSON, an
    /// undeclared name) stays in the content, as text.
    pub fn parse(&self, text: &str) -> Parsed {
        match self.format {
            ToolFormat::Hermes => self.parse_hermes(text),
        }
    }

    fn parse_hermes(&self, text: &str) -> Parsed {
        let mut calls = Vec::new();
        let mut content = String::new();
        let mut rest = text;
        while let Some(open) = rest.find(HERMES_OPEN) {
            let body_start = open + HERMES_OPEN.len();
            let (body, next) = match rest[body_start..].find(HERMES_CLOSE) {
                Some(close) => (
                    &rest[body_start..body_start + close],
                    body_start + close + HERMES_CLOSE.len(),
                ),
                // An unterminated last block (the answer ended, or hit its length).
                None => (&rest[body_start..], rest.len()),
            };
            match self.call_of(body) {
                Some(call) => {
                    content.push_str(&rest[..open]);
                    calls.push(call);
                }
                None => content.push_str(&rest[..next]),
            }
            rest = &rest[next..];
        }
        content.push_str(rest);
        let content = content.trim();
        Parsed {
            content: (!content.is_empty()).then(|| content.to_string()),
            calls,
        }
    }

    fn call_of(&self, body: &str) -> Option<Call> {
        let v: Value = serde_json::from_str(body.trim()).ok()?;
        let name = v.get("name")?.as_str()?;
        if !self.tools.iter().any(|t| t.name == name) {
            return None;
        }
        let arguments = match v.get("arguments").or_else(|| v.get("parameters")) {
            None | Some(Value::Null) => "{}".to_string(),
            // Some models write the arguments as a JSON string already.
            Some(Value::String(s)) if serde_json::from_str::<Value>(s).is_ok() => s.clone(),
            Some(a) => a.to_string(),
        };
        Some(Call {
            name: name.to_string(),
            arguments,
        })
    }
}

/// An assistant message's OpenAI `tool_calls` in the shape templates read: each
/// `function.arguments` (JSON text on the wire) as a JSON value.
pub fn template_tool_calls(calls: &Value, param: &str) -> Result<Value, ApiError> {
    let bad = |m: String| ApiError::invalid_param(param, m);
    let list = calls
        .as_array()
        .ok_or_else(|| bad("tool_calls must be an array".into()))?;
    let mut out = Vec::with_capacity(list.len());
    for (i, c) in list.iter().enumerate() {
        let f = c
            .get("function")
            .ok_or_else(|| bad(format!("tool_calls[{i}].function is missing")))?;
        let name = f
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("tool_calls[{i}].function.name is missing")))?;
        let arguments = match f.get("arguments") {
            Some(Value::String(s)) => serde_json::from_str(s).map_err(|e| {
                bad(format!(
                    "tool_calls[{i}].function.arguments is not JSON: {e}"
                ))
            })?,
            Some(v) => v.clone(),
            None => json!({}),
        };
        out.push(json!({
            "id": c.get("id").cloned().unwrap_or(Value::Null),
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }));
    }
    Ok(Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calling(choice: Choice) -> ToolCalling {
        let declared = json!([
            {"type": "function", "function": {"name": "get_weather", "parameters": {
                "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
            {"type": "function", "function": {"name": "now"}},
        ]);
        ToolCalling {
            format: ToolFormat::Hermes,
            tools: parse_tools(&declared).unwrap(),
            choice,
            declared,
        }
    }

    #[test]
    fn reads_hermes_calls_and_keeps_the_rest_as_content() {
        let c = calling(Choice::Auto);
        let p = c.parse("Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": \"now\"}</tool_call>");
        assert_eq!(p.content.as_deref(), Some("Let me look."));
        assert_eq!(
            p.calls,
            vec![
                Call {
                    name: "get_weather".into(),
                    arguments: "{\"city\":\"Paris\"}".into()
                },
                Call {
                    name: "now".into(),
                    arguments: "{}".into()
                },
            ]
        );
        // Undeclared names and bad JSON stay text; an unterminated last block is read.
        let p = c.parse("<tool_call>{\"name\": \"rm\"}</tool_call> <tool_call>{oops</tool_call>");
        assert!(p.calls.is_empty());
        assert!(p.content.unwrap().contains("rm"));
        let p = c.parse("<tool_call>\n{\"name\": \"now\", \"arguments\": {}}");
        assert_eq!(p.calls.len(), 1);
        assert_eq!(p.content, None);
        assert_eq!(
            c.parse("plain answer").content.as_deref(),
            Some("plain answer")
        );
    }

    #[test]
    fn required_and_named_choices_constrain_to_one_call() {
        assert!(calling(Choice::Auto).constraint().is_none());
        let Some(ConstraintSpec::Lark(g)) = calling(Choice::Named("now".into())).constraint()
        else {
            panic!("a named choice constrains");
        };
        assert!(g.starts_with("start: \"<tool_call>\\n\" call \"\\n</tool_call>\""));
        assert!(g.contains("\"const\":\"now\"") && !g.contains("get_weather"));
        let Some(ConstraintSpec::Lark(g)) = calling(Choice::Required).constraint() else {
            panic!("required constrains");
        };
        assert!(g.contains("anyOf") && g.contains("get_weather"));
    }

    #[test]
    fn bad_declarations_are_refused_by_field() {
        let e = parse_tools(&json!([{"type": "retrieval"}])).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools"));
        assert!(parse_tools(&json!([{"type": "function", "function": {"name": "a b"}}])).is_err());
        assert!(parse_tools(&json!([
            {"type": "function", "function": {"name": "a"}},
            {"type": "function", "function": {"name": "a"}}
        ]))
        .is_err());
        let tools = parse_tools(&json!([{"type": "function", "function": {"name": "a"}}])).unwrap();
        assert!(parse_choice(
            Some(&json!({"type": "function", "function": {"name": "b"}})),
            &tools
        )
        .is_err());
        assert!(parse_choice(Some(&json!("sometimes")), &tools).is_err());
        assert_eq!(
            parse_choice(Some(&json!("required")), &tools).unwrap(),
            Choice::Required
        );
        // A template without a tool format refuses a request with tools.
        let declared = json!([{"type": "function", "function": {"name": "a"}}]);
        assert!(ToolCalling::from_request(Some(&declared), None, None).is_err());
        assert!(ToolCalling::from_request(None, Some(&json!("required")), None).is_err());
    }

    #[test]
    fn wire_tool_calls_become_template_values() {
        let v = template_tool_calls(
            &json!([{"id": "call_1", "type": "function", "function": {"name": "now", "arguments": "{\"tz\": \"UTC\"}"}}]),
            "messages[1].tool_calls",
        )
        .unwrap();
        assert_eq!(v[0]["function"]["arguments"]["tz"], "UTC");
        assert!(template_tool_calls(
            &json!([{"function": {"name": "now", "arguments": "{nope"}}]),
            "messages[1].tool_calls"
        )
        .is_err());
    }
}
