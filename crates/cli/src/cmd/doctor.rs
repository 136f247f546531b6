//! `lockstep doctor MODEL`: file structure, per-tensor sanity, metadata consistency, tokenizer
//! sanity and a short monitored generation on the reference backend. Exit 0 PASS, 2 WARN,
//! 1 FAIL.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use lockstep_verify::doctor::{doctor, DoctorOptions};

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Model: a GGUF path or a short name (smollm2, gemma3).
    pub model: String,
    /// Where fetched models live (default: $LOCKSTEP_MODELS_DIR or ~/.cache/lockstep/models).
    #[arg(long)]
    pub models_dir: Option<PathBuf>,
    /// Tokens of the monitored test generation (0 = skip).
    #[arg(short = 'n', long = "n-predict", default_value_t = 16)]
    pub n_predict: usize,
    /// Prompt of the test generation.
    #[arg(
        short = 'p',
        long = "prompt",
        default_value = "The capital of France is"
    )]
    pub prompt: String,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: DoctorArgs) -> Result<i32> {
    // A path that exists is examined as is (even when damaged); otherwise it is a model name.
    let path = if std::path::Path::new(&args.model).exists() {
        PathBuf::from(&args.model)
    } else {
        crate::resolve_model(&args.model, args.models_dir.as_deref())?
    };
    let opts = DoctorOptions {
        gen_tokens: args.n_predict,
        prompt: args.prompt.clone(),
    };
    let report = doctor(&path, &opts);
    if args.json {
        let j = serde_json::json!({
            "path": report.path,
            "status": report.status().name(),
            "findings": report.findings,
        });
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else {
        print!("{}", report.render());
    }
    Ok(report.exit_code())
}
