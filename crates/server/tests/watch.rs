//! The server watches its own output: monitor alarms reach the response and `/metrics`, and
//! `--audit` replays served requests on the reference backend and exports the divergence.
//! Faults are planted in the cpu backend's own kernels (feature `faults`), on the tiny-llama
//! fixture. A server running the reference backend itself must get an audit of exactly zero.

mod common;

use std::time::Duration;

use common::*;
use lockstep_backend_cpu::{CpuBackend, CpuOptions, Fault, KvType};
use lockstep_backend_ref::RefBackend;
use lockstep_engine::scheduler::SchedulerConfig;
use lockstep_engine::EngineConfig;
use lockstep_server::{ServerConfig, ServerHandle};
use serde_json::{json, Value};

fn tiny() -> std::path::PathBuf {
    fixtures().join("tiny-llama/tiny-llama-F32.gguf")
}

fn server_config(audit_rate: f64) -> ServerConfig {
    ServerConfig {
        model_id: "tiny".into(),
        audit_rate,
        audit_model: Some(tiny()),
        ..ServerConfig::default()
    }
}

/// The cpu backend (f32 KV, so a clean prefill is within rounding of the reference) with
/// `fault` planted in its kernels.
fn server(fault: Option<Fault>, audit_rate: f64) -> ServerHandle {
    start_server(
        &tiny(),
        move || {
            let mut b = CpuBackend::new(CpuOptions {
                kv_type: KvType::F32,
                ..CpuOptions::default()
            });
            b.set_fault(fault);
            b
        },
        EngineConfig::default(),
        SchedulerConfig::default(),
        server_config(audit_rate),
    )
}

/// The reference backend serving: what it serves is what the audit replays.
fn reference_server(audit_rate: f64) -> ServerHandle {
    start_server(
        &tiny(),
        RefBackend::new,
        EngineConfig::default(),
        SchedulerConfig::default(),
        server_config(audit_rate),
    )
}

fn complete(
    rt: &tokio::runtime::Runtime,
    s: &ServerHandle,
    prompt: &[u32],
    stream: bool,
) -> lockstep_server::loadgen::Reply {
    let body = json!({"model": "tiny", "prompt": prompt, "max_tokens": 12, "temperature": 0,
                      "ignore_eos": true, "stream": stream})
    .to_string();
    let r = call(rt, s.addr, "POST", "/v1/completions", Some(&body), &[]);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r
}

fn metrics(rt: &tokio::runtime::Runtime, s: &ServerHandle) -> String {
    String::from_utf8_lossy(&call(rt, s.addr, "GET", "/metrics", None, &[]).body).into_owned()
}

/// Waits (bounded) until `n` audits are done; returns the metrics text.
fn wait_audits(rt: &tokio::runtime::Runtime, s: &ServerHandle, n: f64) -> String {
    for _ in 0..600 {
        let m = metrics(rt, s);
        if metric(&m, "lockstep_audit_requests_total") >= n {
            return m;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("audits not done in 60 s:\n{}", metrics(rt, s));
}

const PROMPTS: [&[u32]; 3] = [
    &[1022, 5, 77, 300, 12],
    &[1022, 900, 901, 3],
    &[1022, 42, 42, 42, 8, 16, 600],
];

#[test]
fn the_audit_finds_nothing_on_the_reference_itself() {
    let s = reference_server(1.0);
    let rt = rt();
    for p in PROMPTS {
        complete(&rt, &s, p, false);
    }
    let m = wait_audits(&rt, &s, 3.0);
    assert_eq!(metric(&m, "lockstep_audit_positions_total"), 36.0);
    assert_eq!(metric(&m, "lockstep_audit_top1_mismatches_total"), 0.0);
    assert_eq!(
        metric(&m, "lockstep_audit_max_kl"),
        0.0,
        "bitwise the reference: KL exactly 0"
    );
    assert_eq!(metric(&m, "lockstep_audit_errors_total"), 0.0);
}

#[test]
fn the_audit_measures_a_decode_kernel_bug() {
    // RoPE off by one in the single-token kernel only: prefill is right, decode is not.
    let s = server(Some(Fault::RopeDecodeOffByOne), 0.5);
    let rt = rt();
    for p in PROMPTS.iter().chain(&PROMPTS[..1]) {
        complete(&rt, &s, p, true);
    }
    // A rate of 0.5 audits every second request: 2 of 4.
    let m = wait_audits(&rt, &s, 2.0);
    std::thread::sleep(Duration::from_millis(300));
    let m2 = metrics(&rt, &s);
    assert_eq!(metric(&m2, "lockstep_audit_requests_total"), 2.0, "{m}");
    let kl = metric(&m2, "lockstep_audit_max_kl");
    assert!(
        kl > 1e-4,
        "a wrong RoPE in decode must show as divergence (max KL {kl})"
    );
    // The first position of each request comes from the prefill, which is right.
    let le_tiny = m2
        .lines()
        .find_map(|l| l.strip_prefix("lockstep_audit_kl_bucket{le=\"0.000001\"} "))
        .and_then(|v| v.parse::<f64>().ok())
        .expect("kl histogram");
    assert!(
        le_tiny >= 2.0,
        "the prefill positions agree ({le_tiny} below 1e-6)"
    );
}

#[test]
fn monitor_alarms_reach_the_response_and_the_metrics() {
    // The final norm's weight never uploaded: every logit is 0 and the distribution is flat.
    let s = server(Some(Fault::OutputNormZero), 0.0);
    let rt = rt();
    let r = complete(&rt, &s, PROMPTS[0], false);
    let v = json_of(&r);
    let warnings = &v["choices"][0]["lockstep"]["monitor_warnings"];
    let kinds: Vec<&str> = warnings
        .as_array()
        .expect("warnings")
        .iter()
        .filter_map(|w| w["kind"].as_str())
        .collect();
    // All logits 0: flat, and greedy picks token 0 every time.
    assert!(
        kinds.contains(&"flat-logits") && kinds.contains(&"repeated-token"),
        "{v}"
    );
    // Streaming: the final chunk carries them too.
    let r = complete(&rt, &s, PROMPTS[1], true);
    let last: Value = r
        .events
        .iter()
        .rev()
        .filter(|(_, d)| d != "[DONE]")
        .find_map(|(_, d)| {
            serde_json::from_str::<Value>(d)
                .ok()
                .filter(|c| c["choices"][0]["finish_reason"].is_string())
        })
        .expect("a final chunk");
    assert!(
        last["choices"][0]["lockstep"]["monitor_warnings"]
            .to_string()
            .contains("flat-logits"),
        "{last}"
    );
    let m = metrics(&rt, &s);
    assert!(
        m.contains("lockstep_monitor_alarms_total{kind=\"flat-logits\"} 2"),
        "{m}"
    );
    assert!(
        m.contains("lockstep_monitor_alarms_total{kind=\"repeated-token\"} 2"),
        "{m}"
    );
    // The healthy backend does not repeat itself on the same request. (The tiny fixture's
    // random weights are close to flat anyway, so flat-logits is no contrast here.)
    let clean = server(None, 0.0);
    let r = complete(&rt, &clean, PROMPTS[0], false);
    let v = json_of(&r);
    assert!(
        !v["choices"][0]["lockstep"]["monitor_warnings"]
            .to_string()
            .contains("repeated-token"),
        "{v}"
    );
}

#[test]
fn garbage_logits_fail_the_request_with_the_reason_and_the_server_stays_up() {
    // The causal mask off by one: the first row sees no key and its softmax is NaN.
    let s = server(Some(Fault::CausalOffByOne), 0.0);
    let rt = rt();
    let body = json!({"model": "tiny", "prompt": PROMPTS[0], "max_tokens": 4, "temperature": 0})
        .to_string();
    let r = call(&rt, s.addr, "POST", "/v1/completions", Some(&body), &[]);
    let v = assert_error(&r, 500, None);
    let msg = v["error"]["message"].as_str().unwrap_or("");
    assert!(msg.contains("not finite"), "{msg}");
    assert_eq!(call(&rt, s.addr, "GET", "/health", None, &[]).status, 200);
    let m = metrics(&rt, &s);
    assert!(
        m.contains("lockstep_requests_total{outcome=\"error\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("lockstep_http_errors_total{status=\"500\"} 1"),
        "{m}"
    );
}
