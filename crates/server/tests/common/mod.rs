//! Starting a server in-process on an ephemeral loopback port, and talking to it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use lockstep_backend_cpu::{CpuBackend, CpuOptions};
use lockstep_engine::scheduler::{Scheduler, SchedulerConfig};
use lockstep_engine::EngineConfig;
use lockstep_gguf::GgufFile;
use lockstep_graph::Backend;
use lockstep_server::loadgen::{self, Reply};
use lockstep_server::{Served, ServerConfig, ServerHandle};
use lockstep_tokenizer::{ChatTemplate, Tokenizer};
use serde_json::Value;

pub use lockstep_testkit::*;

pub fn cpu(threads: usize) -> CpuBackend {
    CpuBackend::new(CpuOptions {
        threads: Some(threads),
        ..CpuOptions::default()
    })
}

pub fn tokenizer(path: &Path) -> Arc<Tokenizer> {
    let f = GgufFile::open(path).expect("open model");
    Arc::new(Tokenizer::from_metadata(f.metadata()).expect("tokenizer"))
}

/// A scheduler over `backend` with the model at `path`.
pub fn scheduler<B: Backend>(
    path: &Path,
    backend: B,
    ecfg: EngineConfig,
    scfg: SchedulerConfig,
) -> Scheduler<B> {
    Scheduler::new(engine(path, backend, ecfg), tokenizer(path), scfg).expect("scheduler")
}

/// Starts a server for the model at `path` on 127.0.0.1 with an ephemeral port.
pub fn start_server<B, F>(
    path: &Path,
    make_backend: F,
    ecfg: EngineConfig,
    scfg: SchedulerConfig,
    cfg: ServerConfig,
) -> ServerHandle
where
    B: Backend + 'static,
    F: FnOnce() -> B + Send + 'static,
{
    let tok = tokenizer(path);
    let file = GgufFile::open(path).expect("open model");
    let template = ChatTemplate::from_metadata(file.metadata(), &tok).ok();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let p = path.to_path_buf();
    let t = tok.clone();
    lockstep_server::start(
        move || Ok(Scheduler::new(engine(&p, make_backend(), ecfg), t, scfg)?),
        Served {
            tokenizer: tok,
            template,
        },
        cfg,
        listener,
    )
    .expect("start server")
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// One request, bounded in time.
pub fn call(
    rt: &tokio::runtime::Runtime,
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> Reply {
    rt.block_on(loadgen::request(
        addr,
        method,
        path,
        body.map(str::as_bytes),
        headers,
        Duration::from_secs(120),
    ))
    .unwrap_or_else(|e| panic!("{method} {path}: {e:#}"))
}

pub fn json_of(r: &Reply) -> Value {
    serde_json::from_slice(&r.body)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&r.body)))
}

/// Asserts an OpenAI-shaped error with this status and `param`.
pub fn assert_error(r: &Reply, status: u16, param: Option<&str>) -> Value {
    assert_eq!(
        r.status,
        status,
        "body: {}",
        String::from_utf8_lossy(&r.body)
    );
    let v = json_of(r);
    let e = &v["error"];
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    assert!(e["type"].as_str().is_some(), "{v}");
    assert_eq!(e["param"].as_str(), param, "{v}");
    v
}

/// The value of an unlabelled metric line `name value`.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("metric {name} missing"))
}
