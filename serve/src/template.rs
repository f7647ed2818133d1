//! Chat templates: the model's own Jinja template (GGUF `tokenizer.chat_template`, or the
//! `tokenizer_config.json` beside a Hugging Face folder) rendered with minijinja (Python
//! string methods through minijinja-contrib's pycompat), as Hugging Face's
//! `apply_chat_template` renders it.

use minijinja::{context, Environment, Error, ErrorKind};
use serde::Serialize;

/// One chat message as the template sees it (Hugging Face's message dicts).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Message {
    pub role: String,
    pub content: String,
    /// An assistant turn's calls: `[{"id", "type": "function", "function": {"name",
    /// "arguments": {…}}}]` (arguments as a JSON value, as templates read them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<serde_json::Value>,
    /// A `tool` turn: the call it answers, and the function's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Message {
    /// A plain text turn.
    pub fn text(role: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
            ..Message::default()
        }
    }
}

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    /// How the template's model writes tool calls (`None`: it renders no tools LQL reads).
    pub tool_format: Option<crate::tools::ToolFormat>,
    pub bos_token: String,
    pub eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").finish_non_exhaustive()
    }
}

fn raise_exception(message: String) -> Result<String, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

impl ChatTemplate {
    /// Compiles `source`; `bos_token`/`eos_token` are the texts templates refer to.
    pub fn new(source: &str, bos_token: String, eos_token: String) -> Result<ChatTemplate, String> {
        let mut env = Environment::new();
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| format!("the model's chat template does not compile: {e}"))?;
        Ok(ChatTemplate {
            env,
            tool_format: crate::tools::ToolFormat::of_template(source),
            bos_token,
            eos_token,
        })
    }

    /// The prompt for `messages`, ending with the assistant's turn opened; `tools` (the
    /// request's declarations) are passed as `tools`, as `apply_chat_template` passes them.
    pub fn render(
        &self,
        messages: &[Message],
        tools: Option<&serde_json::Value>,
    ) -> Result<String, String> {
        let tmpl = self
            .env
            .get_template("chat")
            .map_err(|e| format!("chat template: {e}"))?;
        tmpl.render(context! {
            messages => messages,
            tools => tools,
            add_generation_prompt => true,
            bos_token => self.bos_token,
            eos_token => self.eos_token,
        })
        .map_err(|e| format!("rendering the chat template: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_chatml_template_and_raises() {
        let src = "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'].strip() + '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
        let t = ChatTemplate::new(src, "<s>".into(), "</s>".into()).unwrap();
        let out = t.render(&[Message::text("user", " hi ")], None).unwrap();
        assert_eq!(
            out,
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
        let bad = ChatTemplate::new(
            "{{ raise_exception('no system role') }}",
            String::new(),
            String::new(),
        )
        .unwrap();
        let e = bad.render(&[], None).unwrap_err();
        assert!(e.contains("no system role"), "{e}");
    }
}
