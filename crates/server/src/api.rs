//! Parsing OpenAI requests field by field, so that every error names the offending field and
//! says what it accepts (a derived deserializer would only say "invalid type at column 37").

use lockstep_engine::scheduler::MAX_TOP_LOGPROBS;
use lockstep_sampling::SamplingParams;
use lockstep_tokenizer::ChatMessage;
use serde_json::{Map, Value};

use crate::error::ApiError;

/// Most choices one request may ask for (`n` times the number of prompts).
pub const MAX_CHOICES: usize = 16;
/// Most stop strings per request.
pub const MAX_STOPS: usize = 16;

#[derive(Clone, Debug, PartialEq)]
pub enum PromptInput {
    Text(String),
    Tokens(Vec<u32>),
}

/// A completion or chat request, validated.
#[derive(Clone, Debug)]
pub struct GenRequest {
    pub model: String,
    /// Completions: the prompts; chat: empty (see `messages`).
    pub prompts: Vec<PromptInput>,
    pub messages: Option<Vec<ChatMessage>>,
    /// Parameters of choice 0; choice `i` uses `seed + i`.
    pub params: SamplingParams,
    /// Whether `seed` was given (for the echo in the response only).
    pub n: usize,
    pub stream: bool,
    pub include_usage: bool,
    /// `Some(k)`: logprobs with the `k` most likely tokens.
    pub logprobs: Option<usize>,
    pub logit_bias: Vec<(u32, f32)>,
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn wrong_type(field: &str, expected: &str, got: &Value) -> ApiError {
    ApiError::invalid(
        field,
        format!("`{field}` must be {expected}, got {}", type_name(got)),
    )
}

/// A present, non-null field.
fn field<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.get(name).filter(|v| !v.is_null())
}

fn opt_f32(obj: &Map<String, Value>, name: &str) -> Result<Option<f32>, ApiError> {
    match field(obj, name) {
        None => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if x.is_finite() && x.abs() <= f64::from(f32::MAX) => Ok(Some(x as f32)),
            Some(x) => Err(ApiError::invalid(
                name,
                format!("`{name}` = {x} is out of range"),
            )),
            None => Err(wrong_type(name, "a number", v)),
        },
    }
}

fn opt_i64(obj: &Map<String, Value>, name: &str) -> Result<Option<i64>, ApiError> {
    match field(obj, name) {
        None => Ok(None),
        Some(v) => match (v.as_i64(), v.as_u64()) {
            (Some(x), _) => Ok(Some(x)),
            (None, Some(x)) => Ok(Some(x as i64)),
            _ => Err(wrong_type(name, "an integer", v)),
        },
    }
}

fn opt_bool(obj: &Map<String, Value>, name: &str) -> Result<Option<bool>, ApiError> {
    match field(obj, name) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(wrong_type(name, "a boolean", v)),
    }
}

fn positive(name: &str, v: Option<i64>, max: usize) -> Result<Option<usize>, ApiError> {
    match v {
        None => Ok(None),
        Some(x) if x >= 1 && x as u64 <= max as u64 => Ok(Some(x as usize)),
        Some(x) => Err(ApiError::invalid(
            name,
            format!("`{name}` = {x}: must be an integer in [1, {max}]"),
        )),
    }
}

fn token_id(field: &str, v: &Value) -> Result<u32, ApiError> {
    v.as_u64()
        .and_then(|x| u32::try_from(x).ok())
        .ok_or_else(|| wrong_type(field, "a token id (an integer >= 0)", v))
}

/// The body as a JSON object.
pub fn parse_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_body(format!("the request body is not valid JSON: {e}")))?;
    match v {
        Value::Object(m) => Ok(m),
        other => Err(ApiError::bad_body(format!(
            "the request body must be a JSON object, got {}",
            type_name(&other)
        ))),
    }
}

fn parse_prompts(v: &Value) -> Result<Vec<PromptInput>, ApiError> {
    let bad = || {
        ApiError::invalid(
            "prompt",
            "`prompt` must be a string, an array of strings, an array of token ids or an array of arrays of token ids",
        )
    };
    let out = match v {
        Value::String(s) => vec![PromptInput::Text(s.clone())],
        Value::Array(items) if items.is_empty() => {
            return Err(ApiError::invalid("prompt", "`prompt` is an empty array"))
        }
        Value::Array(items) => match &items[0] {
            Value::String(_) => items
                .iter()
                .map(|i| {
                    i.as_str()
                        .map(|s| PromptInput::Text(s.into()))
                        .ok_or_else(bad)
                })
                .collect::<Result<_, _>>()?,
            Value::Number(_) => vec![PromptInput::Tokens(
                items
                    .iter()
                    .map(|i| token_id("prompt", i))
                    .collect::<Result<_, _>>()?,
            )],
            Value::Array(_) => items
                .iter()
                .map(|i| match i {
                    Value::Array(ids) => Ok(PromptInput::Tokens(
                        ids.iter()
                            .map(|t| token_id("prompt", t))
                            .collect::<Result<_, _>>()?,
                    )),
                    _ => Err(bad()),
                })
                .collect::<Result<_, _>>()?,
            _ => return Err(bad()),
        },
        _ => return Err(bad()),
    };
    Ok(out)
}

fn parse_messages(v: &Value) -> Result<Vec<ChatMessage>, ApiError> {
    let Value::Array(items) = v else {
        return Err(wrong_type("messages", "an array of messages", v));
    };
    if items.is_empty() {
        return Err(ApiError::invalid("messages", "`messages` is empty"));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let name = format!("messages[{i}]");
            let Value::Object(m) = m else {
                return Err(wrong_type(&name, "an object with `role` and `content`", m));
            };
            let role = match m.get("role") {
                Some(Value::String(r)) => r.clone(),
                Some(v) => return Err(wrong_type(&format!("{name}.role"), "a string", v)),
                None => {
                    return Err(ApiError::invalid(
                        format!("{name}.role"),
                        format!("`{name}.role` is missing"),
                    ))
                }
            };
            let content = match m.get("content") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => {
                    let mut text = String::new();
                    for (j, p) in parts.iter().enumerate() {
                        let pname = format!("{name}.content[{j}]");
                        match (p.get("type").and_then(Value::as_str), p.get("text")) {
                            (Some("text"), Some(Value::String(t))) => text.push_str(t),
                            _ => {
                                return Err(ApiError::invalid(
                                    pname.clone(),
                                    format!("`{pname}` must be {{\"type\": \"text\", \"text\": ...}} (only text is supported)"),
                                ))
                            }
                        }
                    }
                    text
                }
                Some(v) => {
                    return Err(wrong_type(
                        &format!("{name}.content"),
                        "a string or an array of text parts",
                        v,
                    ))
                }
            };
            Ok(ChatMessage::new(role, content))
        })
        .collect()
}

fn parse_stop(v: Option<&Value>) -> Result<Vec<String>, ApiError> {
    let stops = match v {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, s)| {
                s.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| wrong_type(&format!("stop[{i}]"), "a string", s))
            })
            .collect::<Result<_, _>>()?,
        Some(v) => return Err(wrong_type("stop", "a string or an array of strings", v)),
    };
    if stops.len() > MAX_STOPS {
        return Err(ApiError::invalid(
            "stop",
            format!("at most {MAX_STOPS} stop strings, got {}", stops.len()),
        ));
    }
    Ok(stops)
}

fn parse_logit_bias(v: Option<&Value>) -> Result<Vec<(u32, f32)>, ApiError> {
    let Some(v) = v else {
        return Ok(Vec::new());
    };
    let Value::Object(m) = v else {
        return Err(wrong_type(
            "logit_bias",
            "an object mapping token ids to numbers",
            v,
        ));
    };
    m.iter()
        .map(|(k, b)| {
            let id: u32 = k.parse().map_err(|_| {
                ApiError::invalid(
                    "logit_bias",
                    format!("`logit_bias` key {k:?} is not a token id"),
                )
            })?;
            let bias = b
                .as_f64()
                .ok_or_else(|| wrong_type(&format!("logit_bias.{k}"), "a number", b))?;
            if !(-100.0..=100.0).contains(&bias) {
                return Err(ApiError::invalid(
                    "logit_bias",
                    format!("`logit_bias.{k}` = {bias}: must be in [-100, 100]"),
                ));
            }
            Ok((id, bias as f32))
        })
        .collect()
}

/// Parses a `/v1/completions` (`chat = false`) or `/v1/chat/completions` body.
pub fn parse_generation(obj: &Map<String, Value>, chat: bool) -> Result<GenRequest, ApiError> {
    let model = match obj.get("model") {
        Some(Value::String(s)) => s.clone(),
        Some(v) => return Err(wrong_type("model", "a string", v)),
        None => return Err(ApiError::invalid("model", "`model` is required")),
    };
    let (prompts, messages) = if chat {
        let m = obj
            .get("messages")
            .ok_or_else(|| ApiError::invalid("messages", "`messages` is required"))?;
        (Vec::new(), Some(parse_messages(m)?))
    } else {
        let p = field(obj, "prompt")
            .ok_or_else(|| ApiError::invalid("prompt", "`prompt` is required"))?;
        (parse_prompts(p)?, None)
    };
    for unsupported in ["suffix", "tools", "functions", "response_format"] {
        if field(obj, unsupported).is_some() {
            return Err(ApiError::invalid(
                unsupported,
                format!("`{unsupported}` is not supported by this server"),
            ));
        }
    }
    if opt_bool(obj, "echo")? == Some(true) {
        return Err(ApiError::invalid("echo", "`echo` is not supported"));
    }
    if let Some(b) = opt_i64(obj, "best_of")? {
        if b != 1 {
            return Err(ApiError::invalid(
                "best_of",
                "only `best_of` = 1 is supported",
            ));
        }
    }

    let max_tokens = if chat {
        // `max_tokens` is deprecated in chat in favour of `max_completion_tokens`.
        match positive(
            "max_completion_tokens",
            opt_i64(obj, "max_completion_tokens")?,
            usize::MAX >> 1,
        )? {
            Some(n) => Some(n),
            None => positive("max_tokens", opt_i64(obj, "max_tokens")?, usize::MAX >> 1)?,
        }
    } else {
        // OpenAI's legacy completions default.
        Some(positive("max_tokens", opt_i64(obj, "max_tokens")?, usize::MAX >> 1)?.unwrap_or(16))
    };
    let top_k = match opt_i64(obj, "top_k")? {
        None | Some(-1) | Some(0) => 0,
        Some(k) if k > 0 => k as usize,
        Some(k) => {
            return Err(ApiError::invalid(
                "top_k",
                format!("`top_k` = {k}: must be -1 or 0 (off) or a positive integer"),
            ))
        }
    };
    for name in ["presence_penalty", "frequency_penalty"] {
        if let Some(p) = opt_f32(obj, name)? {
            if !(-2.0..=2.0).contains(&p) {
                return Err(ApiError::invalid(
                    name,
                    format!("`{name}` = {p}: must be in [-2, 2]"),
                ));
            }
        }
    }
    let params = SamplingParams {
        temperature: opt_f32(obj, "temperature")?.unwrap_or(1.0),
        top_k,
        top_p: opt_f32(obj, "top_p")?.unwrap_or(1.0),
        min_p: opt_f32(obj, "min_p")?.unwrap_or(0.0),
        repeat_penalty: opt_f32(obj, "repetition_penalty")?.unwrap_or(1.0),
        repeat_last_n: None,
        presence_penalty: opt_f32(obj, "presence_penalty")?.unwrap_or(0.0),
        frequency_penalty: opt_f32(obj, "frequency_penalty")?.unwrap_or(0.0),
        seed: opt_i64(obj, "seed")?.map_or(lockstep_sampling::DEFAULT_SEED, |s| s as u64),
        max_tokens,
        stop: parse_stop(field(obj, "stop"))?,
        ignore_eos: opt_bool(obj, "ignore_eos")?.unwrap_or(false),
    };
    params.validate().map_err(|e| {
        let name = if e.field == "repeat_penalty" {
            "repetition_penalty".to_string()
        } else {
            e.field.clone()
        };
        ApiError::invalid(
            name.clone(),
            format!("`{name}` = {}: {}", e.value, e.reason),
        )
    })?;
    let n = positive("n", opt_i64(obj, "n")?, MAX_CHOICES)?.unwrap_or(1);
    let n_prompts = prompts.len().max(1);
    if n * n_prompts > MAX_CHOICES {
        return Err(ApiError::invalid(
            "n",
            format!(
                "{n_prompts} prompts x n = {n} is {} choices; at most {MAX_CHOICES}",
                n * n_prompts
            ),
        ));
    }
    let stream = opt_bool(obj, "stream")?.unwrap_or(false);
    let include_usage = match field(obj, "stream_options") {
        None => false,
        Some(Value::Object(o)) => {
            if !stream {
                return Err(ApiError::invalid(
                    "stream_options",
                    "`stream_options` is only allowed with `stream: true`",
                ));
            }
            opt_bool(o, "include_usage")
                .map_err(|_| {
                    wrong_type(
                        "stream_options.include_usage",
                        "a boolean",
                        o.get("include_usage").unwrap_or(&Value::Null),
                    )
                })?
                .unwrap_or(false)
        }
        Some(v) => return Err(wrong_type("stream_options", "an object", v)),
    };
    let logprobs = if chat {
        let on = opt_bool(obj, "logprobs")?.unwrap_or(false);
        let top = opt_i64(obj, "top_logprobs")?;
        match (on, top) {
            (false, Some(_)) => {
                return Err(ApiError::invalid(
                    "top_logprobs",
                    "`top_logprobs` needs `logprobs: true`",
                ))
            }
            (false, None) => None,
            (true, None) => Some(0),
            (true, Some(k)) if (0..=MAX_TOP_LOGPROBS as i64).contains(&k) => Some(k as usize),
            (true, Some(k)) => {
                return Err(ApiError::invalid(
                    "top_logprobs",
                    format!("`top_logprobs` = {k}: must be in [0, {MAX_TOP_LOGPROBS}]"),
                ))
            }
        }
    } else {
        match opt_i64(obj, "logprobs")? {
            None => None,
            Some(k) if (0..=MAX_TOP_LOGPROBS as i64).contains(&k) => Some(k as usize),
            Some(k) => {
                return Err(ApiError::invalid(
                    "logprobs",
                    format!("`logprobs` = {k}: must be in [0, {MAX_TOP_LOGPROBS}]"),
                ))
            }
        }
    };
    Ok(GenRequest {
        model,
        prompts,
        messages,
        params,
        n,
        stream,
        include_usage,
        logprobs,
        logit_bias: parse_logit_bias(field(obj, "logit_bias"))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value, chat: bool) -> Result<GenRequest, ApiError> {
        match v {
            Value::Object(m) => parse_generation(&m, chat),
            _ => panic!("test body must be an object"),
        }
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (json!({"prompt": "x"}), "model"),
            (json!({"model": "m"}), "prompt"),
            (json!({"model": "m", "prompt": 5}), "prompt"),
            (
                json!({"model": "m", "prompt": "x", "temperature": "hot"}),
                "temperature",
            ),
            (
                json!({"model": "m", "prompt": "x", "temperature": -1}),
                "temperature",
            ),
            (json!({"model": "m", "prompt": "x", "top_p": 0}), "top_p"),
            (
                json!({"model": "m", "prompt": "x", "max_tokens": 0}),
                "max_tokens",
            ),
            (json!({"model": "m", "prompt": "x", "n": 100}), "n"),
            (json!({"model": "m", "prompt": "x", "stop": [1]}), "stop[0]"),
            (
                json!({"model": "m", "prompt": "x", "logit_bias": {"a": 1}}),
                "logit_bias",
            ),
            (
                json!({"model": "m", "prompt": "x", "logit_bias": {"5": 500}}),
                "logit_bias",
            ),
            (
                json!({"model": "m", "prompt": "x", "presence_penalty": 3}),
                "presence_penalty",
            ),
            (
                json!({"model": "m", "prompt": "x", "repetition_penalty": 0}),
                "repetition_penalty",
            ),
            (
                json!({"model": "m", "prompt": "x", "stream_options": {"include_usage": true}}),
                "stream_options",
            ),
            (json!({"model": "m", "messages": []}), "messages"),
            (
                json!({"model": "m", "messages": [{"content": "hi"}]}),
                "messages[0].role",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": 3}]}),
                "messages[0].content",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 3}),
                "top_logprobs",
            ),
        ];
        for (body, param) in cases {
            let chat = body.get("messages").is_some();
            let e = parse(body.clone(), chat).expect_err(&format!("{body} must be refused"));
            assert_eq!(e.status, 400, "{body}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
        }
    }

    #[test]
    fn defaults_and_values_are_read() {
        let r = parse(
            json!({"model": "m", "prompt": [[1, 2], [3]], "n": 2, "stop": "\n", "top_k": -1,
                   "seed": 7, "logprobs": 3, "logit_bias": {"42": -100}, "stream": true,
                   "stream_options": {"include_usage": true}}),
            false,
        )
        .expect("valid");
        assert_eq!(
            r.prompts,
            vec![
                PromptInput::Tokens(vec![1, 2]),
                PromptInput::Tokens(vec![3])
            ]
        );
        assert_eq!(r.params.max_tokens, Some(16));
        assert_eq!(r.params.temperature, 1.0);
        assert_eq!(r.params.top_k, 0);
        assert_eq!(r.params.seed, 7);
        assert_eq!(r.params.stop, vec!["\n".to_string()]);
        assert_eq!(r.logprobs, Some(3));
        assert_eq!(r.logit_bias, vec![(42, -100.0)]);
        assert!(r.stream && r.include_usage);
        let c = parse(
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                   "max_completion_tokens": 5, "logprobs": true, "top_logprobs": 2}),
            true,
        )
        .expect("valid");
        assert_eq!(c.params.max_tokens, Some(5));
        assert_eq!(c.logprobs, Some(2));
        assert_eq!(
            c.messages.as_ref().map(|m| m[0].content.as_str()),
            Some("hi")
        );
    }
}
