//! `cargo run --release -p lockstep-backend-cpu --example bench -- -m smollm2`: the `lockstep
//! bench` command (crates/cli/src/cmd/bench.rs) built on its own, for kernel work.

#[path = "../../cli/src/cmd/bench.rs"]
mod bench;

use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: bench::BenchArgs,
}

fn main() -> anyhow::Result<()> {
    let _ = bench::make_cpu_backend;
    bench::bench(Cli::parse().args)
}
