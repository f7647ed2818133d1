//! Chat templates: the model's own Jinja template (GGUF `tokenizer.chat_template`, or the
//! `tokenizer_config.json` beside a Hugging Face folder) rendered with minijinja (Python
//! string methods through minijinja-contrib's pycompat), as Hugging Face's
//! `apply_chat_template` renders it.

use minijinja::{context, Environment, Error, ErrorKind};
use serde::Serialize;

/// One chat message as the template sees it.
#[derive(Debug, Clone, Serialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
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
            bos_token,
            eos_token,
        })
    }

    /// The prompt for `messages`, ending with the assistant's turn opened.
    pub fn render(&self, messages: &[Message]) -> Result<String, String> {
        let tmpl = self
            .env
            .get_template("chat")
            .map_err(|e| format!("chat template: {e}"))?;
        tmpl.render(context! {
            messages => messages,
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
        let out = t
            .render(&[Message {
                role: "user".into(),
                content: " hi ".into(),
            }])
            .unwrap();
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
        let e = bad.render(&[]).unwrap_err();
        assert!(e.contains("no system role"), "{e}");
    }
}
