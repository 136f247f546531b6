//! The official `openai` Python client against `lockstep serve` (SmolLM2 and gemma3, cpu): completions
//! and chat, streamed and whole, logprobs, n, seed, stop, errors, auth. Fails (never skips)
//! when python3 or the `openai` package is missing; `.ci/run` installs it.

mod common;

use std::process::Command;

use common::*;
use lockstep_engine::scheduler::SchedulerConfig;
use lockstep_engine::EngineConfig;
use lockstep_server::ServerConfig;

fn run_client_checks(model: &str) {
    let server = start_server(
        &model_path(model),
        || cpu(2),
        EngineConfig {
            n_ctx: 1024,
            cache_tokens: 8192,
            prefix_cache: true,
            ..EngineConfig::default()
        },
        SchedulerConfig::default(),
        ServerConfig {
            model_id: model.into(),
            api_key: Some("test-key".into()),
            ..ServerConfig::default()
        },
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/openai_client.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(format!("http://{}/v1", server.addr))
        .arg(model)
        .arg("test-key")
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run python3 ({e}): install Python 3 and `python3 -m pip install openai==3.54.0`")
        });
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "openai client checks against {model} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.starts_with("ok: "), "{stdout}");
    eprintln!("{stdout}");
    server.stop();
}

#[test]
fn the_official_openai_client_works_with_smollm2() {
    run_client_checks("smollm2");
}

#[test]
fn the_official_openai_client_works_with_gemma3() {
    run_client_checks("gemma3");
}
