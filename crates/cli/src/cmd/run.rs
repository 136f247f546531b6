//! `lockstep run` and `lockstep chat`: generate text, streamed as it is produced.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use lockstep_backend_ref::RefBackend;
use lockstep_engine::{generate, Engine, EngineConfig, SamplingParams};
use lockstep_gguf::GgufFile;
use lockstep_graph::Backend;
use lockstep_models::Model;
use lockstep_tokenizer::{ChatMessage, ChatTemplate, TemplateSource, Tokenizer};

/// Options shared by every command that loads a model and generates.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// Model: a GGUF path or a short name (smollm2, gemma3); fetched if missing.
    #[arg(short = 'm', long = "model", default_value = "smollm2")]
    pub model: String,
    /// Where fetched models live (default: $LOCKSTEP_MODELS_DIR or ~/.cache/lockstep/models).
    #[arg(long)]
    pub models_dir: Option<PathBuf>,
    /// Compute backend: `cpu` (quantized kernels, the default), `ref` (the reference) or
    /// `cuda` (an NVIDIA GPU; `cuda-exact`: its kernels bitwise the reference's).
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "ref", "cuda", "cuda-exact"])]
    pub backend: String,
    /// Context length (tokens).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 4096)]
    pub ctx_size: usize,
}

#[derive(Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Tokens to generate at most.
    #[arg(short = 'n', long = "n-predict", default_value_t = 128)]
    pub n_predict: usize,
    /// Temperature; 0 = greedy.
    #[arg(long = "temp", default_value_t = 0.8)]
    pub temperature: f32,
    #[arg(long = "top-k", default_value_t = 40)]
    pub top_k: usize,
    #[arg(long = "top-p", default_value_t = 0.95)]
    pub top_p: f32,
    #[arg(long = "min-p", default_value_t = 0.05)]
    pub min_p: f32,
    #[arg(long = "repeat-penalty", default_value_t = 1.0)]
    pub repeat_penalty: f32,
    #[arg(long = "repeat-last-n", default_value_t = 64)]
    pub repeat_last_n: usize,
    #[arg(long = "presence-penalty", default_value_t = 0.0)]
    pub presence_penalty: f32,
    #[arg(long = "frequency-penalty", default_value_t = 0.0)]
    pub frequency_penalty: f32,
    #[arg(long, default_value_t = lockstep_sampling::DEFAULT_SEED)]
    pub seed: u64,
    /// Stop when this text is generated (repeatable).
    #[arg(long = "stop")]
    pub stop: Vec<String>,
    /// Keep going past end-of-generation tokens.
    #[arg(long)]
    pub ignore_eos: bool,
}

impl SamplingArgs {
    pub fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: Some(self.repeat_last_n),
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            seed: self.seed,
            max_tokens: Some(self.n_predict),
            stop: self.stop.clone(),
            ignore_eos: self.ignore_eos,
        }
    }
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// The prompt (or give it as the positional argument).
    #[arg(short = 'p', long = "prompt")]
    pub prompt: Option<String>,
    /// The prompt, if -p is not given.
    #[arg(conflicts_with = "prompt")]
    pub text: Option<String>,
    /// Wrap the prompt as a user message in the model's chat template.
    #[arg(long)]
    pub chat: bool,
    /// System message for --chat.
    #[arg(long)]
    pub system: Option<String>,
    /// Print timing figures to stderr at the end.
    #[arg(long)]
    pub verbose: bool,
    /// Also run the tap-based monitors (near-uniform attention, dead layers, frozen hidden
    /// states); slower.
    #[arg(long)]
    pub watch: bool,
    /// Turn the generation monitors off.
    #[arg(long, conflicts_with = "watch")]
    pub no_monitors: bool,
    /// Copy each step's whole logits row to the host and sample there. By default, when the
    /// sampler needs only the largest logits (greedy, or top-k up to 64 without penalties),
    /// the backend reduces the row where it computed it (on a GPU, only those cross to the
    /// host); without top-k (and penalties) the backend draws there (temperature alone), or
    /// hands back the row's total weight and a sorted prefix holding the top-p nucleus; the
    /// tokens are the same either way.
    #[arg(long)]
    pub full_logits: bool,
}

#[derive(Args, Debug)]
pub struct ChatArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// System message.
    #[arg(long)]
    pub system: Option<String>,
}

/// A loaded model with its tokenizer and an engine on the chosen backend.
pub struct Session<B: Backend> {
    pub file: GgufFile,
    pub tokenizer: Tokenizer,
    pub engine: Engine<B>,
}

/// Runs `$body` with `$s` bound to a session on the backend `$args.backend` names. The model
/// file is opened first: a wrong path, a damaged file or a missing tokenizer is reported before
/// any backend starts (the CUDA backend compiles its kernels at start, a minute or more when
/// they are not cached).
macro_rules! with_session {
    ($args:expr, |$s:ident| $body:expr) => {{
        let opened = super::trace::open_model_file(&$args.model, $args.models_dir.as_deref())?;
        match $args.backend.as_str() {
            "ref" => {
                let mut $s = load_session(opened, &$args, RefBackend::new())?;
                $body
            }
            "cpu" => {
                let mut $s = load_session(opened, &$args, super::bench::make_cpu_backend(None))?;
                $body
            }
            #[cfg(feature = "cuda")]
            name @ ("cuda" | "cuda-exact") => {
                let mut $s = load_session(opened, &$args, super::trace::cuda_backend(name)?)?;
                $body
            }
            other => bail!("unknown backend `{other}`"),
        }
    }};
}

pub fn load_session<B: Backend>(
    opened: super::trace::Opened,
    args: &ModelArgs,
    backend: B,
) -> Result<Session<B>> {
    let super::trace::Opened {
        path,
        file,
        tokenizer,
    } = opened;
    let model = Model::load(&file, &backend).with_context(|| format!("{}", path.display()))?;
    let cfg = EngineConfig {
        n_ctx: args.ctx_size,
        cache_tokens: args.ctx_size,
        ..EngineConfig::default()
    };
    let engine = Engine::new(backend, model, cfg)?;
    Ok(Session {
        file,
        tokenizer,
        engine,
    })
}

fn render_chat<B: Backend>(s: &Session<B>, messages: &[ChatMessage]) -> Result<Vec<u32>> {
    let template = ChatTemplate::from_metadata(s.file.metadata(), &s.tokenizer)?;
    if let TemplateSource::Builtin(name) = template.source() {
        eprintln!(
            "note: the model has no chat template; using llama.cpp's built-in `{name}` format"
        );
    }
    let rendered = template.render(messages, true)?;
    Ok(chat_prompt_ids(&s.tokenizer, &rendered.text))
}

/// Tokenizes a rendered chat prompt as llama.cpp does; one definition shared with the server,
/// so `lockstep serve` tokenizes chats exactly as `lockstep chat`.
pub use lockstep_server::chat_prompt_ids;

pub fn run(args: RunArgs) -> Result<()> {
    let prompt = match (&args.prompt, &args.text) {
        (Some(p), _) | (None, Some(p)) => p.clone(),
        (None, None) => bail!("no prompt: give one with -p TEXT or as an argument"),
    };
    if prompt.is_empty() {
        bail!("the prompt is empty");
    }
    with_session!(args.model, |s| run_on(&args, &prompt, &mut s))
}

fn run_on<B: Backend>(args: &RunArgs, prompt: &str, s: &mut Session<B>) -> Result<()> {
    let ids = if args.chat {
        let mut msgs = Vec::new();
        if let Some(sys) = &args.system {
            msgs.push(ChatMessage::new("system", sys.clone()));
        }
        msgs.push(ChatMessage::new("user", prompt.to_string()));
        render_chat(s, &msgs)?
    } else {
        s.tokenizer.encode(prompt, true, true)
    };
    if ids.is_empty() {
        bail!("the prompt tokenized to no tokens");
    }
    let params = args.sampling.params();
    let mut out = std::io::stdout().lock();
    if !args.chat {
        write!(out, "{prompt}")?;
    }
    out.flush()?;
    let Session {
        tokenizer, engine, ..
    } = s;
    let gopts = lockstep_engine::GenerateOptions {
        monitor: lockstep_engine::MonitorConfig {
            enabled: !args.no_monitors,
            watch: args.watch,
            ..Default::default()
        },
        full_logits: args.full_logits,
    };
    let res = lockstep_engine::generate_with(engine, tokenizer, &ids, &params, &gopts, |t| {
        let _ = write!(out, "{t}");
        let _ = out.flush();
    })?;
    writeln!(out)?;
    for w in &res.warnings {
        eprintln!("warning: {w}");
    }
    if args.verbose {
        let pp = res.n_prompt as f64 / res.prompt_time.as_secs_f64();
        let tg = res.ids.len() as f64 / res.gen_time.as_secs_f64();
        eprintln!(
            "prompt: {} tokens, {pp:.1} tok/s | generated: {} tokens, {tg:.1} tok/s | finish: {:?}",
            res.n_prompt,
            res.ids.len(),
            res.finish
        );
    }
    Ok(())
}

pub fn chat(args: ChatArgs) -> Result<()> {
    with_session!(args.model, |s| chat_on(&args, &mut s))
}

fn chat_on<B: Backend>(args: &ChatArgs, s: &mut Session<B>) -> Result<()> {
    let params = args.sampling.params();
    let mut messages = Vec::new();
    if let Some(sys) = &args.system {
        messages.push(ChatMessage::new("system", sys.clone()));
    }
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    eprintln!(
        "chat with {} (empty line or Ctrl-D to quit)",
        args.model.model
    );
    loop {
        write!(out, "> ")?;
        out.flush()?;
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
        messages.push(ChatMessage::new("user", line.trim_end().to_string()));
        // The whole conversation is re-rendered and re-evaluated each turn: simple and always
        // exactly what the template says.
        let ids = render_chat(s, &messages)?;
        let Session {
            tokenizer, engine, ..
        } = &mut *s;
        let res = generate(engine, tokenizer, &ids, &params, |t| {
            let _ = write!(out, "{t}");
            let _ = out.flush();
        })?;
        writeln!(out)?;
        messages.push(ChatMessage::new("assistant", res.text.trim().to_string()));
    }
    Ok(())
}
