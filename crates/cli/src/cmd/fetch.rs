//! `lockstep fetch`: download and verify the reference models.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use lockstep_fetch::{Fetcher, Outcome, MODELS};

#[derive(Args, Debug)]
pub struct FetchArgs {
    /// Which model: a short name, or `all`.
    #[arg(default_value = "all", value_parser = ["smollm2", "gemma3", "all"])]
    pub model: String,
    /// Where models live (default: $LOCKSTEP_MODELS_DIR, else $XDG_CACHE_HOME/lockstep/models,
    /// else ~/.cache/lockstep/models).
    #[arg(long)]
    pub models_dir: Option<PathBuf>,
}

pub fn run(args: FetchArgs) -> Result<()> {
    let dir = lockstep_fetch::models_dir(args.models_dir.as_deref())?;
    let fetcher = Fetcher::default();
    for spec in MODELS
        .iter()
        .filter(|s| args.model == "all" || s.name == args.model)
    {
        eprintln!("{}: {} -> {}", spec.name, spec.description, dir.display());
        let got = fetcher.fetch(spec, &dir)?;
        let what = match got.outcome {
            Outcome::AlreadyPresent => "already present, sha256 verified",
            Outcome::Fetched => "fetched, sha256 verified",
        };
        eprintln!("{}: {what}", spec.name);
        // stdout gets only the path, so scripts can use `$(lockstep fetch smollm2)`.
        println!("{}", got.path.display());
    }
    Ok(())
}
