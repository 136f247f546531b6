//! `lockstep`: the command-line tool. Each subcommand lives in its own module under `cmd/`
//! (its clap `Args` struct and a `run` function); this file only dispatches and prints errors.

mod cmd;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "lockstep",
    version,
    about = "An LLM inference engine for GGUF models"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// CUDA backend: batch-invariant kernels for every step (no tensor-core GEMM for long
    /// prefills), so each row's result is bitwise independent of what else is in the batch.
    /// `serve` always runs this way.
    #[arg(long, global = true)]
    deterministic: bool,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Download a reference model (verified by sha256) into the models directory.
    Fetch(cmd::fetch::FetchArgs),
    /// Show a GGUF file's header, metadata and tensors; dequantize a tensor to safetensors.
    Inspect(cmd::inspect::InspectArgs),
    /// Generate text from a prompt, streamed as it is produced.
    Run(cmd::run::RunArgs),
    /// Chat interactively using the model's chat template.
    Chat(cmd::run::ChatArgs),
    /// Measure prompt processing (pp) and generation (tg) speed, as llama-bench defines them.
    Bench(cmd::bench::BenchArgs),
    /// Print the token ids of a text.
    Tokenize(cmd::tokenize::TokenizeArgs),
    /// Turn token ids back into text.
    Detokenize(cmd::tokenize::DetokenizeArgs),
    /// Render chat messages with the model's template.
    Template(cmd::tokenize::TemplateArgs),
    /// Record the taps of a run (prefill, decode steps) to a safetensors trace.
    Trace(cmd::trace::TraceArgs),
    /// Compare two backends (or two traces) tap by tap; name the first diverging op.
    Diff(cmd::diff::DiffArgs),
    /// Check the invariances a backend must hold (batching, prefill vs decode, masks, KV blocks).
    Check(cmd::check::CheckArgs),
    /// Check a model file: structure, tensors, metadata, tokenizer, a short generation.
    Doctor(cmd::doctor::DoctorArgs),
    /// Serve the model over an OpenAI-compatible HTTP API with continuous batching.
    Serve(cmd::serve::ServeArgs),
    /// Load-test a running `lockstep serve` (loopback only): TTFT, ITL, throughput, goodput.
    Loadgen(cmd::serve::LoadgenArgs),
    /// Write a GGUF with a known model's shape and metadata and random weights.
    Synth(cmd::synth::SynthArgs),
}

/// Exits with `code` when it is not 0 (commands whose exit status carries a verdict).
fn exit_on_verdict(code: i32) {
    if code != 0 {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        std::process::exit(code);
    }
}

/// A model argument (path or short name such as `smollm2`) to a file, fetching if needed.
pub fn resolve_model(arg: &str, models_dir: Option<&Path>) -> anyhow::Result<PathBuf> {
    Ok(lockstep_fetch::resolve_model(arg, models_dir)?)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    cmd::trace::set_cuda_deterministic(cli.deterministic);
    let result = match cli.command {
        Command::Fetch(args) => cmd::fetch::run(args),
        Command::Inspect(args) => cmd::inspect::run(args),
        Command::Run(args) => cmd::run::run(args),
        Command::Chat(args) => cmd::run::chat(args),
        Command::Bench(args) => cmd::bench::bench(args),
        Command::Tokenize(args) => cmd::tokenize::tokenize(args),
        Command::Detokenize(args) => cmd::tokenize::detokenize(args),
        Command::Template(args) => cmd::tokenize::template(args),
        Command::Trace(args) => cmd::trace::run(args),
        Command::Diff(args) => cmd::diff::run(args).map(exit_on_verdict),
        Command::Check(args) => cmd::check::run(args).map(exit_on_verdict),
        Command::Doctor(args) => cmd::doctor::run(args).map(exit_on_verdict),
        Command::Serve(args) => cmd::serve::serve(args),
        Command::Loadgen(args) => cmd::serve::loadgen_cmd(args),
        Command::Synth(args) => cmd::synth::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}` joins the context chain on one line: "error: <file>: <what is wrong>".
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
