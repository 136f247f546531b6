//! `lockstep serve` over HTTP with SmolLM2 on the cpu backend: the endpoints, OpenAI error
//! shapes for every kind of bad input, stop strings split across tokens, `n`, auth, metrics,
//! a client that disconnects mid-stream, a flood beyond the queue, and 256 concurrent streams
//! each checked against its solo run.

mod common;

use std::time::Duration;

use common::*;
use lockstep_engine::scheduler::SchedulerConfig;
use lockstep_engine::EngineConfig;
use lockstep_server::loadgen;
use lockstep_server::ServerConfig;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn smollm2_server(scfg: SchedulerConfig, cfg: ServerConfig) -> lockstep_server::ServerHandle {
    start_server(
        &model_path("smollm2"),
        || cpu(2),
        EngineConfig {
            n_ctx: 512,
            cache_tokens: 16384,
            prefix_cache: true,
            ..EngineConfig::default()
        },
        scfg,
        ServerConfig {
            model_id: "smollm2".into(),
            max_body_bytes: 64 << 10,
            ..cfg
        },
    )
}

/// Long enough (over 16 tokens) for repeated requests to hit the prefix cache.
const PROMPT: &str =
    "The capital of Germany is Berlin. The capital of Italy is Rome. The capital of France is";

fn completion(prompt: &str, extra: Value) -> String {
    let mut v = json!({"model": "smollm2", "prompt": prompt, "max_tokens": 12, "temperature": 0});
    if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
        o.extend(e);
    }
    v.to_string()
}

#[test]
fn endpoints_errors_stops_and_disconnects() {
    let server = smollm2_server(SchedulerConfig::default(), ServerConfig::default());
    let addr = server.addr;
    let rt = rt();
    let post = |path: &str, body: &str| call(&rt, addr, "POST", path, Some(body), &[]);

    // Health, models.
    let r = call(&rt, addr, "GET", "/health", None, &[]);
    assert_eq!(
        (r.status, json_of(&r)["status"].as_str()),
        (200, Some("ok"))
    );
    let r = call(&rt, addr, "GET", "/v1/models", None, &[]);
    assert_eq!(json_of(&r)["data"][0]["id"], "smollm2");

    // A plain greedy completion; its text is what the engine's `generate` gives.
    let r = post("/v1/completions", &completion(PROMPT, json!({})));
    assert_eq!(r.status, 200);
    let v = json_of(&r);
    let text = v["choices"][0]["text"].as_str().expect("text").to_string();
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 12);
    let path = model_path("smollm2");
    let tok = tokenizer(&path);
    let ids = tok.encode(PROMPT, true, true);
    assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(ids.len() as u64));
    {
        let mut e = engine(&path, cpu(2), EngineConfig::default());
        let params = lockstep_engine::SamplingParams {
            max_tokens: Some(12),
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_last_n: None,
            ..lockstep_engine::SamplingParams::greedy()
        };
        let g = lockstep_engine::generate(&mut e, &tok, &ids, &params, |_| {}).expect("generate");
        assert_eq!(text, g.text, "server and generate disagree");
    }

    // A stop string spanning several tokens, in the middle of the text.
    let cut = text
        .char_indices()
        .nth(3)
        .map(|(i, _)| i)
        .expect("text long enough");
    let stop = text[cut..].chars().take(8).collect::<String>();
    assert!(
        stop.chars().count() == 8,
        "need 8 characters after the cut in {text:?}"
    );
    let r = post(
        "/v1/completions",
        &completion(PROMPT, json!({"stop": [stop.clone()], "stream": true})),
    );
    let mut streamed = String::new();
    let mut finish = None;
    for (_, d) in &r.events {
        if d == "[DONE]" {
            continue;
        }
        let c: Value = serde_json::from_str(d).expect("chunk");
        streamed.push_str(c["choices"][0]["text"].as_str().unwrap_or(""));
        if let Some(f) = c["choices"][0]["finish_reason"].as_str() {
            finish = Some(f.to_string());
        }
    }
    assert_eq!(streamed, text[..cut], "stop {stop:?} in {text:?}");
    assert_eq!(finish.as_deref(), Some("stop"));
    assert_eq!(r.events.last().map(|e| e.1.as_str()), Some("[DONE]"));

    // n = 2: choice 0 is the single request with the same seed, choice 1 uses seed + 1.
    let sampled = |seed: u64, n: usize| {
        let r = post(
            "/v1/completions",
            &completion(
                "Once upon a time",
                json!({"temperature": 0.9, "seed": seed, "n": n}),
            ),
        );
        assert_eq!(r.status, 200);
        json_of(&r)["choices"]
            .as_array()
            .expect("choices")
            .iter()
            .map(|c| c["text"].as_str().unwrap_or("").to_string())
            .collect::<Vec<_>>()
    };
    let both = sampled(5, 2);
    assert_eq!(both.len(), 2);
    assert_eq!(both[0], sampled(5, 1)[0]);
    assert_eq!(both[1], sampled(6, 1)[0]);
    assert_ne!(both[0], both[1]);

    // Tokenize / detokenize.
    let r = post("/tokenize", r#"{"content": "Hello world"}"#);
    let toks: Vec<u32> = json_of(&r)["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .filter_map(|t| t.as_u64().map(|x| x as u32))
        .collect();
    assert_eq!(toks, tok.encode("Hello world", true, true));
    let r = post("/detokenize", &json!({"tokens": toks}).to_string());
    assert_eq!(json_of(&r)["content"], "Hello world");

    // Faults: each gets its status and names the field.
    assert_error(&post("/v1/completions", "{not json"), 400, None);
    assert_error(&post("/v1/completions", "[1, 2]"), 400, None);
    assert_error(
        &post(
            "/v1/completions",
            &completion("x", json!({"max_tokens": "ten"})),
        ),
        400,
        Some("max_tokens"),
    );
    assert_error(
        &post(
            "/v1/completions",
            &completion("x", json!({"temperature": -0.5})),
        ),
        400,
        Some("temperature"),
    );
    assert_error(
        &post("/v1/completions", &completion("x", json!({"top_p": 1.5}))),
        400,
        Some("top_p"),
    );
    assert_error(
        &post("/v1/completions", &completion("x", json!({"min_p": 2}))),
        400,
        Some("min_p"),
    );
    assert_error(
        &post("/v1/completions", &completion("x", json!({"n": 0}))),
        400,
        Some("n"),
    );
    assert_error(
        &post(
            "/v1/completions",
            &completion("x", json!({"logit_bias": {"999999": 5}})),
        ),
        400,
        Some("logit_bias"),
    );
    assert_error(
        &post("/v1/completions", &completion("x", json!({"logprobs": 50}))),
        400,
        Some("logprobs"),
    );
    assert_error(
        &post(
            "/v1/completions",
            &json!({"model": "gpt-4", "prompt": "x"}).to_string(),
        ),
        404,
        Some("model"),
    );
    assert_error(
        &post(
            "/v1/chat/completions",
            &json!({"model": "smollm2", "messages": "hi"}).to_string(),
        ),
        400,
        Some("messages"),
    );
    let long = "word ".repeat(600);
    let v = assert_error(
        &post("/v1/completions", &completion(&long, json!({}))),
        400,
        Some("prompt"),
    );
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    let huge = format!(
        "{{\"model\": \"smollm2\", \"prompt\": \"{}\"}}",
        "a".repeat(100 << 10)
    );
    assert_eq!(post("/v1/completions", &huge).status, 413);
    assert_error(&call(&rt, addr, "GET", "/v1/nothing", None, &[]), 404, None);

    // A client that disconnects mid-stream: its request is cancelled and its blocks freed.
    rt.block_on(async {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let body = completion("Tell me a long story", json!({"max_tokens": 400, "stream": true, "ignore_eos": true}));
        let head = format!("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        s.write_all(head.as_bytes()).await.expect("write");
        let mut buf = vec![0u8; 4096];
        let mut got = Vec::new();
        while !String::from_utf8_lossy(&got).contains("data:") {
            let n = tokio::time::timeout(Duration::from_secs(60), s.read(&mut buf)).await.expect("first chunk in time").expect("read");
            assert!(n > 0, "closed before any chunk");
            got.extend_from_slice(&buf[..n]);
        }
        drop(s);
    });
    let mut freed = false;
    for _ in 0..200 {
        std::thread::sleep(Duration::from_millis(50));
        let m = String::from_utf8_lossy(&call(&rt, addr, "GET", "/metrics", None, &[]).body)
            .into_owned();
        if metric(&m, "lockstep_running_requests") == 0.0
            && metric(&m, "lockstep_kv_blocks_used") == 0.0
        {
            freed = true;
            break;
        }
    }
    assert!(freed, "the disconnected request still holds blocks");

    // Still healthy, and the metrics counted what happened.
    assert_eq!(call(&rt, addr, "GET", "/health", None, &[]).status, 200);
    let m =
        String::from_utf8_lossy(&call(&rt, addr, "GET", "/metrics", None, &[]).body).into_owned();
    assert!(
        m.contains("lockstep_requests_total{outcome=\"length\"}"),
        "{m}"
    );
    assert!(
        m.contains("lockstep_http_errors_total{status=\"400\"}"),
        "{m}"
    );
    assert!(metric(&m, "lockstep_time_to_first_token_seconds_count") >= 5.0);
    assert!(metric(&m, "lockstep_inter_token_latency_seconds_count") >= 50.0);
    assert!(
        metric(&m, "lockstep_prefix_cache_hits_total") >= 1.0,
        "repeated prompts hit the prefix cache"
    );
    server.stop();
}

#[test]
fn api_key_is_required_when_set() {
    let server = smollm2_server(
        SchedulerConfig::default(),
        ServerConfig {
            api_key: Some("sekrit".into()),
            ..ServerConfig::default()
        },
    );
    let rt = rt();
    let body = completion("Hi", json!({"max_tokens": 2}));
    let r = call(
        &rt,
        server.addr,
        "POST",
        "/v1/completions",
        Some(&body),
        &[],
    );
    assert_error(&r, 401, None);
    let r = call(
        &rt,
        server.addr,
        "POST",
        "/v1/completions",
        Some(&body),
        &[("Authorization", "Bearer wrong")],
    );
    assert_error(&r, 401, None);
    let r = call(
        &rt,
        server.addr,
        "POST",
        "/v1/completions",
        Some(&body),
        &[("Authorization", "Bearer sekrit")],
    );
    assert_eq!(r.status, 200);
    // Health stays open for probes.
    assert_eq!(
        call(&rt, server.addr, "GET", "/health", None, &[]).status,
        200
    );
}

#[test]
fn a_flood_beyond_the_queue_gets_429_and_the_server_stays_healthy() {
    let server = smollm2_server(
        SchedulerConfig {
            max_seqs: 2,
            max_batch_tokens: 256,
            max_queue: 4,
        },
        ServerConfig::default(),
    );
    let addr = server.addr;
    let rt = rt();
    let reqs = loadgen::synthetic_requests(40, 8, 6);
    let (report, outcomes) = rt
        .block_on(loadgen::run_load(
            addr,
            "smollm2",
            &reqs,
            40,
            Duration::from_secs(120),
            Duration::from_secs(120),
            loadgen::Slo::default(),
        ))
        .expect("load");
    let rejected = report.statuses.get(&429).copied().unwrap_or(0);
    assert!(
        rejected > 0,
        "40 at once against 2 seats + 4 queued must overflow: {report}"
    );
    assert_eq!(
        report.completed + rejected,
        40,
        "only 429s may fail: {:?}",
        report.statuses
    );
    assert!(report.completed >= 2, "{report}");
    for o in outcomes.iter().flatten() {
        assert_eq!(o.0.tokens.len(), 6);
    }
    assert_eq!(call(&rt, addr, "GET", "/health", None, &[]).status, 200);
    let m =
        String::from_utf8_lossy(&call(&rt, addr, "GET", "/metrics", None, &[]).body).into_owned();
    assert!(
        m.contains(&format!(
            "lockstep_requests_total{{outcome=\"rejected\"}} {rejected}"
        )),
        "{m}"
    );
    // And it serves normally afterwards.
    let r = call(
        &rt,
        addr,
        "POST",
        "/v1/completions",
        Some(&completion("Hi", json!({"max_tokens": 3}))),
        &[],
    );
    assert_eq!(r.status, 200);
}

#[test]
fn many_concurrent_streams_match_their_solo_runs() {
    let server = smollm2_server(
        SchedulerConfig {
            max_seqs: 64,
            max_batch_tokens: 512,
            max_queue: 512,
        },
        ServerConfig::default(),
    );
    let rt = rt();
    // 256 streams over 32 distinct (prompt, seed) pairs, sampled at temperature 0.8.
    let reqs = loadgen::synthetic_requests(256, 32, 8);
    let report = rt
        .block_on(loadgen::check_against_solo(
            server.addr,
            "smollm2",
            &reqs,
            256,
            Duration::from_secs(600),
        ))
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(report.completed, 256);
    assert_eq!(report.output_tokens, 256 * 8);
    eprintln!("{report}");
}
