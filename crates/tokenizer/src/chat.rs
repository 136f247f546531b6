//! Chat templates: `tokenizer.chat_template` (Jinja) rendered with minijinja the way llama.cpp
//! and Hugging Face render it, or llama.cpp's built-in `gemma` format for gemma models that
//! ship without a template.

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use lockstep_gguf::Metadata;
use minijinja::syntax::SyntaxConfig;
use minijinja::{context, Environment, Error, ErrorKind, Value};

use crate::error::TokenizerError;
use crate::vocab::Tokenizer;

const KEY_TEMPLATE: &str = "tokenizer.chat_template";
const KEY_ARCH: &str = "general.architecture";

/// One chat message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` (or whatever the template accepts).
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// Where the template that rendered a prompt came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TemplateSource {
    /// The model's `tokenizer.chat_template`.
    Gguf,
    /// A template given by the caller ([`ChatTemplate::from_jinja`]).
    Custom,
    /// A llama.cpp built-in format, used because the model has no template (e.g. `"gemma"`).
    Builtin(&'static str),
}

/// A rendered chat prompt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderedPrompt {
    /// The prompt text. Tokenize it with `encode(text, add_special = true,
    /// parse_special = true)`: like llama.cpp, a BOS (EOS) text the template put at the start
    /// (end) has been removed when the tokenizer adds that token itself, so it is never doubled.
    pub text: String,
    pub source: TemplateSource,
}

#[derive(Clone, Debug)]
enum Kind {
    Jinja(String),
    Gemma,
}

/// A chat template ready to render messages.
#[derive(Clone, Debug)]
pub struct ChatTemplate {
    kind: Kind,
    source: TemplateSource,
    bos_token: String,
    eos_token: String,
    add_bos: bool,
    add_eos: bool,
}

impl ChatTemplate {
    /// The model's chat template: `tokenizer.chat_template` if present; otherwise llama.cpp's
    /// built-in `gemma` format for gemma-family architectures (`general.architecture` starting
    /// with "gemma"); otherwise [`TokenizerError::NoChatTemplate`].
    pub fn from_metadata(
        md: &Metadata,
        tokenizer: &Tokenizer,
    ) -> Result<ChatTemplate, TokenizerError> {
        if let Some(src) = md.opt_str(KEY_TEMPLATE)? {
            let mut t = ChatTemplate::from_jinja(src, tokenizer)?;
            t.source = TemplateSource::Gguf;
            return Ok(t);
        }
        let arch = md.opt_str(KEY_ARCH)?.unwrap_or_default();
        if arch.starts_with("gemma") {
            return Ok(ChatTemplate::builtin_gemma(tokenizer));
        }
        Err(TokenizerError::NoChatTemplate {
            arch: arch.to_string(),
        })
    }

    /// A Jinja template given as text (checked for syntax errors now).
    pub fn from_jinja(source: &str, tokenizer: &Tokenizer) -> Result<ChatTemplate, TokenizerError> {
        let env = environment(Arc::new(Mutex::new(None)))?;
        env.template_from_str(source)
            .map_err(|e| TokenizerError::Template(describe(&e)))?;
        let mut t = ChatTemplate::base(tokenizer, Kind::Jinja(source.to_string()));
        t.source = TemplateSource::Custom;
        Ok(t)
    }

    /// llama.cpp's built-in `gemma` format: `<start_of_turn>{role}\n{content}<end_of_turn>\n`
    /// with `assistant` named `model`, system text prepended to the next user turn, and
    /// `<start_of_turn>model\n` as the generation prompt.
    pub fn builtin_gemma(tokenizer: &Tokenizer) -> ChatTemplate {
        let mut t = ChatTemplate::base(tokenizer, Kind::Gemma);
        t.source = TemplateSource::Builtin("gemma");
        t
    }

    fn base(tokenizer: &Tokenizer, kind: Kind) -> ChatTemplate {
        // llama.cpp passes the tokens' pieces rendered with special = true.
        let piece = |id: Option<u32>| {
            id.and_then(|id| tokenizer.token_to_piece(id, true).ok())
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .unwrap_or_default()
        };
        ChatTemplate {
            kind,
            source: TemplateSource::Custom,
            bos_token: piece(tokenizer.bos()),
            eos_token: piece(tokenizer.eos()),
            add_bos: tokenizer.add_bos(),
            add_eos: tokenizer.add_eos(),
        }
    }

    /// Where this template comes from.
    pub fn source(&self) -> &TemplateSource {
        &self.source
    }

    /// The Jinja source, unless this is a built-in format.
    pub fn jinja_source(&self) -> Option<&str> {
        match &self.kind {
            Kind::Jinja(s) => Some(s),
            Kind::Gemma => None,
        }
    }

    /// Renders `messages`; `add_generation_prompt` appends the opening of the assistant turn.
    ///
    /// Jinja templates see `messages` (list of `{role, content}`), `add_generation_prompt`,
    /// `bos_token`, `eos_token`, `tools = none`, and the functions `raise_exception(msg)` and
    /// `strftime_now(format)`; Python string/dict methods (`.strip()`, `.startswith()`,
    /// `.get()`, ...) work; blocks are trimmed (`trim_blocks`, `lstrip_blocks`) as in
    /// Hugging Face and llama.cpp. A template that calls `raise_exception` gives
    /// [`TokenizerError::TemplateRaised`] with its message.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<RenderedPrompt, TokenizerError> {
        let text = match &self.kind {
            Kind::Gemma => render_gemma(messages, add_generation_prompt),
            Kind::Jinja(src) => {
                let mut text = self.render_jinja(src, messages, add_generation_prompt)?;
                if self.add_bos && !self.bos_token.is_empty() && text.starts_with(&self.bos_token) {
                    text.drain(..self.bos_token.len());
                }
                if self.add_eos && !self.eos_token.is_empty() && text.ends_with(&self.eos_token) {
                    text.truncate(text.len() - self.eos_token.len());
                }
                text
            }
        };
        Ok(RenderedPrompt {
            text,
            source: self.source.clone(),
        })
    }

    fn render_jinja(
        &self,
        src: &str,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, TokenizerError> {
        let raised = Arc::new(Mutex::new(None::<String>));
        let env = environment(raised.clone())?;
        let tmpl = env
            .template_from_str(src)
            .map_err(|e| TokenizerError::Template(describe(&e)))?;
        let msgs: Vec<Value> = messages
            .iter()
            .map(|m| {
                let mut map = std::collections::BTreeMap::new();
                map.insert("role", Value::from(m.role.as_str()));
                map.insert("content", Value::from(m.content.as_str()));
                Value::from(map)
            })
            .collect();
        let ctx = context! {
            messages => Value::from(msgs),
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
            tools => Value::from(()),
        };
        tmpl.render(ctx).map_err(|e| {
            let msg = raised.lock().ok().and_then(|mut g| g.take());
            match msg {
                Some(m) => TokenizerError::TemplateRaised(m),
                None => TokenizerError::Template(describe(&e)),
            }
        })
    }
}

fn describe(e: &Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

fn environment(raised: Arc<Mutex<Option<String>>>) -> Result<Environment<'static>, TokenizerError> {
    let mut env = Environment::new();
    let syntax = SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()
        .map_err(|e| TokenizerError::Template(describe(&e)))?;
    env.set_syntax(syntax);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function(
        "raise_exception",
        move |msg: String| -> Result<Value, Error> {
            if let Ok(mut g) = raised.lock() {
                *g = Some(msg.clone());
            }
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        },
    );
    env.add_function("strftime_now", |fmt: String| -> String {
        strftime_now(&fmt)
    });
    Ok(env)
}

/// llama.cpp's `trim`: ASCII whitespace off both ends.
fn trim_ascii(s: &str) -> &str {
    s.trim_matches(|c: char| matches!(c, ' ' | '\t' | '\n' | '\x0B' | '\x0C' | '\r'))
}

fn render_gemma(messages: &[ChatMessage], add_generation_prompt: bool) -> String {
    let mut out = String::new();
    let mut system = String::new();
    for m in messages {
        if m.role == "system" {
            system.push_str(trim_ascii(&m.content));
            continue;
        }
        let role = if m.role == "assistant" {
            "model"
        } else {
            m.role.as_str()
        };
        out.push_str("<start_of_turn>");
        out.push_str(role);
        out.push('\n');
        if !system.is_empty() && role != "model" {
            out.push_str(&system);
            out.push_str("\n\n");
            system.clear();
        }
        out.push_str(trim_ascii(&m.content));
        out.push_str("<end_of_turn>\n");
    }
    if add_generation_prompt {
        out.push_str("<start_of_turn>model\n");
    }
    out
}

/// `strftime` for the current UTC time, for templates that print today's date. Supports
/// `%Y %y %m %d %e %H %I %M %S %p %b %B %a %A %j %%`; other specifiers are kept verbatim.
fn strftime_now(fmt: &str) -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    strftime_utc(fmt, secs)
}

fn strftime_utc(fmt: &str, secs: u64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
    ];
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (hour, min, sec) = (rem / 3600, (rem / 60) % 60, rem % 60);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let cum = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = cum[(month - 1) as usize] + day + i64::from(leap && month > 2);
    let weekday = DAYS[days.rem_euclid(7) as usize];
    let month_name = MONTHS[(month - 1) as usize];

    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&year.to_string()),
            Some('y') => out.push_str(&format!("{:02}", year.rem_euclid(100))),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('d') => out.push_str(&format!("{day:02}")),
            Some('e') => out.push_str(&format!("{day:>2}")),
            Some('H') => out.push_str(&format!("{hour:02}")),
            Some('I') => out.push_str(&format!("{:02}", (hour + 11) % 12 + 1)),
            Some('M') => out.push_str(&format!("{min:02}")),
            Some('S') => out.push_str(&format!("{sec:02}")),
            Some('p') => out.push_str(if hour < 12 { "AM" } else { "PM" }),
            Some('b') => out.push_str(&month_name[..3]),
            Some('B') => out.push_str(month_name),
            Some('a') => out.push_str(&weekday[..3]),
            Some('A') => out.push_str(weekday),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strftime_known_dates() {
        // 2024-07-26 13:25:09 UTC, a Friday.
        assert_eq!(
            strftime_utc("%Y-%m-%d %H:%M:%S %a %b %j", 1_722_000_309),
            "2024-07-26 13:25:09 Fri Jul 208"
        );
        assert_eq!(strftime_utc("%d %B %Y", 0), "01 January 1970");
        assert_eq!(strftime_utc("%A %e %%", 951_782_400), "Tuesday 29 %");
    }

    #[test]
    fn gemma_format() {
        let msgs = [
            ChatMessage::new("system", " Be brief. "),
            ChatMessage::new("user", "Hi"),
            ChatMessage::new("assistant", "Hello!"),
            ChatMessage::new("user", "Bye"),
        ];
        assert_eq!(
            render_gemma(&msgs, true),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n\
             <start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"
        );
    }
}
