//! `lockstep tokenize`, `detokenize` and `template`: the tokenizer and chat template alone.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use lockstep_gguf::GgufFile;
use lockstep_tokenizer::{ChatMessage, ChatTemplate, TemplateSource, Tokenizer};
use serde_json::json;

#[derive(Args, Debug)]
pub struct TokenizeArgs {
    /// Model: a GGUF path or a short name (smollm2, gemma3).
    #[arg(short = 'm', long = "model", default_value = "smollm2")]
    pub model: String,
    #[arg(long)]
    pub models_dir: Option<PathBuf>,
    /// Parse special tokens written as text (e.g. `<|im_start|>`), as llama.cpp's parse_special.
    #[arg(long)]
    pub special: bool,
    /// Do not add BOS/EOS even if the model asks for them.
    #[arg(long)]
    pub no_bos: bool,
    /// Also print each token's piece.
    #[arg(long)]
    pub pieces: bool,
    #[arg(long)]
    pub json: bool,
    /// Text to tokenize.
    pub text: String,
}

#[derive(Args, Debug)]
pub struct DetokenizeArgs {
    #[arg(short = 'm', long = "model", default_value = "smollm2")]
    pub model: String,
    #[arg(long)]
    pub models_dir: Option<PathBuf>,
    /// Render control tokens as their text.
    #[arg(long)]
    pub special: bool,
    /// Token ids (separated by spaces or commas).
    #[arg(required = true)]
    pub ids: Vec<String>,
}

#[derive(Args, Debug)]
pub struct TemplateArgs {
    #[arg(short = 'm', long = "model", default_value = "smollm2")]
    pub model: String,
    #[arg(long)]
    pub models_dir: Option<PathBuf>,
    /// JSON file: an array of {"role": ..., "content": ...} (or {"messages": [...]}).
    #[arg(long)]
    pub messages: PathBuf,
    /// Do not append the assistant turn's opening.
    #[arg(long)]
    pub no_generation_prompt: bool,
    /// Also print the token ids of the rendered prompt.
    #[arg(long)]
    pub ids: bool,
}

fn load_tokenizer(model: &str, dir: Option<&Path>) -> Result<(GgufFile, Tokenizer)> {
    let path = crate::resolve_model(model, dir)?;
    let file = GgufFile::open(&path).with_context(|| format!("{}", path.display()))?;
    let tok = Tokenizer::from_metadata(file.metadata())
        .with_context(|| format!("{}: tokenizer", path.display()))?;
    Ok((file, tok))
}

pub fn tokenize(args: TokenizeArgs) -> Result<()> {
    let (_, tok) = load_tokenizer(&args.model, args.models_dir.as_deref())?;
    let ids = tok.encode(&args.text, !args.no_bos, args.special);
    let pieces: Vec<String> = ids
        .iter()
        .map(|&id| {
            tok.token_to_piece(id, true)
                .map(|p| String::from_utf8_lossy(p).into_owned())
        })
        .collect::<Result<_, _>>()?;
    if args.json {
        let mut v = json!({ "ids": ids });
        if args.pieces {
            v["pieces"] = json!(pieces);
        }
        println!("{v}");
    } else if args.pieces {
        for (id, p) in ids.iter().zip(&pieces) {
            println!("{id:>8} {p:?}");
        }
    } else {
        let s: Vec<String> = ids.iter().map(u32::to_string).collect();
        println!("{}", s.join(" "));
    }
    Ok(())
}

pub fn detokenize(args: DetokenizeArgs) -> Result<()> {
    let (_, tok) = load_tokenizer(&args.model, args.models_dir.as_deref())?;
    let mut ids = Vec::new();
    for part in args.ids.iter().flat_map(|s| s.split([',', ' '])) {
        if part.is_empty() {
            continue;
        }
        let id: u32 = part
            .parse()
            .with_context(|| format!("`{part}` is not a token id"))?;
        ids.push(id);
    }
    let bytes = tok.detokenize(&ids, false, args.special)?;
    println!("{}", String::from_utf8_lossy(&bytes));
    Ok(())
}

pub fn parse_messages(text: &str) -> Result<Vec<ChatMessage>> {
    let v: serde_json::Value = serde_json::from_str(text).context("messages file is not JSON")?;
    let arr = match &v {
        serde_json::Value::Array(a) => a,
        serde_json::Value::Object(o) => match o.get("messages") {
            Some(serde_json::Value::Array(a)) => a,
            _ => bail!("messages JSON: expected an array or an object with `messages`"),
        },
        _ => bail!("messages JSON: expected an array of messages"),
    };
    arr.iter()
        .enumerate()
        .map(|(i, m)| {
            let role = m["role"]
                .as_str()
                .with_context(|| format!("message {i}: `role` must be a string"))?;
            let content = m["content"]
                .as_str()
                .with_context(|| format!("message {i}: `content` must be a string"))?;
            Ok(ChatMessage::new(role, content))
        })
        .collect()
}

pub fn template(args: TemplateArgs) -> Result<()> {
    let (file, tok) = load_tokenizer(&args.model, args.models_dir.as_deref())?;
    let text = std::fs::read_to_string(&args.messages)
        .with_context(|| format!("{}", args.messages.display()))?;
    let messages = parse_messages(&text).with_context(|| format!("{}", args.messages.display()))?;
    let t = ChatTemplate::from_metadata(file.metadata(), &tok)?;
    if let TemplateSource::Builtin(name) = t.source() {
        eprintln!(
            "note: the model has no chat template; using llama.cpp's built-in `{name}` format"
        );
    }
    let r = t.render(&messages, !args.no_generation_prompt)?;
    print!("{}", r.text);
    if args.ids {
        let ids = super::run::chat_prompt_ids(&tok, &r.text);
        let s: Vec<String> = ids.iter().map(u32::to_string).collect();
        println!("\n{}", s.join(" "));
    }
    Ok(())
}
