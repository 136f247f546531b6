//! A load generator for `lockstep serve`: loopback only, bounded in request count and time.
//!
//! It speaks just enough HTTP/1.1 (one request per connection, `Connection: close`, chunked or
//! sized bodies) to time each server-sent event as it arrives, and reports what vLLM's
//! `benchmark_serving` reports, with its definitions:
//!
//! - TTFT: request sent to first token received;
//! - TPOT: `(e2e - TTFT) / (output tokens - 1)` per request;
//! - ITL: the time between consecutive streamed chunks carrying tokens, over all requests;
//! - throughput: completed requests and output tokens per second of the whole run;
//! - goodput: completed requests per second that met every SLO given (TTFT, TPOT, e2e).
//!
//! `check` mode first runs every distinct request alone (concurrency 1), then the whole load,
//! and compares each response with its solo run: text, token strings and the bits of every
//! logprob, so a lost, duplicated or cross-wired stream cannot pass.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A response: status, and the body (or the SSE data payloads with their arrival times).
#[derive(Debug, Default)]
pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
    pub events: Vec<(Instant, String)>,
}

fn ensure_loopback(addr: &SocketAddr) -> Result<()> {
    if !addr.ip().is_loopback() {
        bail!("the load generator talks to loopback addresses only, not {addr}");
    }
    Ok(())
}

/// Decodes a chunked body incrementally: returns the bytes of complete chunks in `buf` and
/// leaves a partial chunk there. `Ok(true)` once the last chunk was seen.
fn dechunk(buf: &mut Vec<u8>, out: &mut Vec<u8>) -> Result<bool> {
    loop {
        let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") else {
            return Ok(false);
        };
        let line = std::str::from_utf8(&buf[..eol]).context("chunk size line")?;
        let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
            .with_context(|| format!("bad chunk size {line:?}"))?;
        if size == 0 {
            return Ok(true);
        }
        if buf.len() < eol + 2 + size + 2 {
            return Ok(false);
        }
        out.extend_from_slice(&buf[eol + 2..eol + 2 + size]);
        buf.drain(..eol + 2 + size + 2);
    }
}

/// Sends one request and reads the whole reply, timing SSE events as they arrive.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    headers: &[(&str, &str)],
    timeout: Duration,
) -> Result<Reply> {
    ensure_loopback(&addr)?;
    tokio::time::timeout(timeout, request_inner(addr, method, path, body, headers))
        .await
        .with_context(|| format!("{method} {path}: no complete reply within {timeout:?}"))?
}

async fn request_inner(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    headers: &[(&str, &str)],
) -> Result<Reply> {
    let mut s = TcpStream::connect(addr).await?;
    let body = body.unwrap_or(b"");
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).await?;
    s.write_all(body).await?;

    let mut raw = Vec::new();
    let mut tmp = vec![0u8; 16 << 10];
    // Headers.
    let header_end = loop {
        let n = s.read(&mut tmp).await?;
        if n == 0 {
            bail!("connection closed before the response headers");
        }
        raw.extend_from_slice(&tmp[..n]);
        if let Some(p) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
    };
    let head = String::from_utf8_lossy(&raw[..header_end]).to_string();
    let mut rest: Vec<u8> = raw[header_end + 4..].to_vec();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("no status code")?;
    let lower = head.to_ascii_lowercase();
    let chunked = lower.contains("transfer-encoding: chunked");
    let sse = lower.contains("content-type: text/event-stream");
    let mut reply = Reply {
        status,
        ..Reply::default()
    };
    let mut body_buf = Vec::new();
    let mut sse_pending = String::new();
    let mut ended = false;
    loop {
        if chunked {
            ended = dechunk(&mut rest, &mut body_buf)?;
        } else {
            body_buf.append(&mut rest);
        }
        if sse {
            let now = Instant::now();
            sse_pending.push_str(&String::from_utf8_lossy(&std::mem::take(&mut body_buf)));
            while let Some(p) = sse_pending.find("\n\n") {
                let ev: String = sse_pending.drain(..p + 2).collect();
                for line in ev.lines() {
                    if let Some(d) = line.strip_prefix("data:") {
                        reply.events.push((now, d.trim_start().to_string()));
                    }
                }
            }
        }
        if ended {
            break;
        }
        let n = s.read(&mut tmp).await?;
        if n == 0 {
            break;
        }
        rest.extend_from_slice(&tmp[..n]);
    }
    reply.body = body_buf;
    Ok(reply)
}

/// One load-test request.
#[derive(Clone, Debug)]
pub struct LoadRequest {
    pub prompt: String,
    pub seed: u64,
    pub max_tokens: usize,
    pub temperature: f32,
    /// Ask for each token's logprob. Without, the server may reduce logits rows to the
    /// sampler's top-k where it computes them; the output is then counted from the usage
    /// report and the inter-token gaps from the chunks that carry text.
    pub logprobs: bool,
    /// `top_k` to send (OpenAI's API has none: sampling then draws from the whole row).
    pub top_k: Option<usize>,
    /// `top_p` to send (by default none: the server's default, 1).
    pub top_p: Option<f32>,
    /// `frequency_penalty` and `presence_penalty` to send (by default none: 0).
    pub frequency_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
}

/// What one streamed completion produced.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Streamed {
    pub text: String,
    pub tokens: Vec<String>,
    /// `f32` bits of each token's logprob (the JSON numbers round-trip exactly).
    pub logprob_bits: Vec<u32>,
    pub finish: Option<String>,
    pub n_completion: Option<u64>,
}

/// Timing of one request.
#[derive(Clone, Debug)]
pub struct Timing {
    pub ttft: Duration,
    pub e2e: Duration,
    /// Gaps between consecutive token-carrying chunks.
    pub itl: Vec<Duration>,
    pub n_output: usize,
}

/// Streams one completion; returns its content and timing, or the HTTP status and body.
pub async fn stream_completion(
    addr: SocketAddr,
    model: &str,
    r: &LoadRequest,
    timeout: Duration,
) -> Result<std::result::Result<(Streamed, Timing), (u16, String)>> {
    let mut body = json!({
        "model": model,
        "prompt": r.prompt,
        "max_tokens": r.max_tokens,
        "temperature": r.temperature,
        "seed": r.seed,
        "ignore_eos": true,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if r.logprobs {
        body["logprobs"] = json!(0);
    }
    if let Some(p) = r.top_p {
        body["top_p"] = json!(p);
    }
    if let Some(k) = r.top_k {
        body["top_k"] = json!(k);
    }
    if let Some(f) = r.frequency_penalty {
        body["frequency_penalty"] = json!(f);
    }
    if let Some(p) = r.presence_penalty {
        body["presence_penalty"] = json!(p);
    }
    let body = body.to_string();
    let start = Instant::now();
    let reply = request(
        addr,
        "POST",
        "/v1/completions",
        Some(body.as_bytes()),
        &[],
        timeout,
    )
    .await?;
    if reply.status != 200 {
        return Ok(Err((
            reply.status,
            String::from_utf8_lossy(&reply.body).into_owned(),
        )));
    }
    let mut out = Streamed::default();
    let mut token_times = Vec::new();
    let mut done = false;
    for (t, data) in &reply.events {
        if data == "[DONE]" {
            done = true;
            continue;
        }
        let v: Value = serde_json::from_str(data).with_context(|| format!("bad chunk {data}"))?;
        if let Some(e) = v.get("error") {
            bail!("error in stream: {e}");
        }
        if let Some(u) = v.get("usage").and_then(|u| u.get("completion_tokens")) {
            out.n_completion = u.as_u64();
        }
        for c in v["choices"].as_array().into_iter().flatten() {
            out.text.push_str(c["text"].as_str().unwrap_or(""));
            if let Some(f) = c["finish_reason"].as_str() {
                out.finish = Some(f.to_string());
            }
            let lp = &c["logprobs"];
            let toks = lp["tokens"].as_array().cloned().unwrap_or_default();
            if !toks.is_empty()
                || (!r.logprobs && c["text"].as_str().is_some_and(|x| !x.is_empty()))
            {
                token_times.push(*t);
            }
            for (tok, l) in toks
                .iter()
                .zip(lp["token_logprobs"].as_array().into_iter().flatten())
            {
                out.tokens.push(tok.as_str().unwrap_or("").to_string());
                out.logprob_bits
                    .push((l.as_f64().unwrap_or(f64::NAN) as f32).to_bits());
            }
        }
    }
    if !done {
        bail!("the stream ended without [DONE]");
    }
    let e2e = reply
        .events
        .last()
        .map_or(start.elapsed(), |(t, _)| t.duration_since(start));
    let ttft = token_times.first().map_or(e2e, |t| t.duration_since(start));
    let itl = token_times
        .windows(2)
        .map(|w| w[1].duration_since(w[0]))
        .collect();
    let n_output = if r.logprobs {
        out.tokens.len()
    } else {
        out.n_completion.map_or(0, |n| n as usize)
    };
    Ok(Ok((
        out.clone(),
        Timing {
            ttft,
            e2e,
            itl,
            n_output,
        },
    )))
}

/// Service-level objectives for goodput (any left `None` is not checked).
#[derive(Clone, Copy, Debug, Default)]
pub struct Slo {
    pub ttft: Option<Duration>,
    pub tpot: Option<Duration>,
    pub e2e: Option<Duration>,
}

/// The figures of one run.
#[derive(Clone, Debug)]
pub struct Report {
    pub concurrency: usize,
    pub completed: usize,
    pub failed: usize,
    pub duration: Duration,
    pub output_tokens: usize,
    pub request_throughput: f64,
    pub output_throughput: f64,
    pub goodput: f64,
    pub ttft_ms: Percentiles,
    pub tpot_ms: Percentiles,
    pub itl_ms: Percentiles,
    pub e2e_ms: Percentiles,
    /// Statuses of failed requests.
    pub statuses: BTreeMap<u16, usize>,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct Percentiles {
    pub mean: f64,
    pub median: f64,
    pub p99: f64,
}

fn percentiles(mut v: Vec<f64>) -> Percentiles {
    if v.is_empty() {
        return Percentiles::default();
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    Percentiles {
        mean: v.iter().sum::<f64>() / v.len() as f64,
        median: at(0.5),
        p99: at(0.99),
    }
}

impl Report {
    pub fn to_json(&self) -> Value {
        let p = |p: &Percentiles| json!({"mean": p.mean, "median": p.median, "p99": p.p99});
        json!({
            "concurrency": self.concurrency,
            "completed": self.completed,
            "failed": self.failed,
            "duration_s": self.duration.as_secs_f64(),
            "output_tokens": self.output_tokens,
            "request_throughput": self.request_throughput,
            "output_throughput": self.output_throughput,
            "goodput": self.goodput,
            "ttft_ms": p(&self.ttft_ms),
            "tpot_ms": p(&self.tpot_ms),
            "itl_ms": p(&self.itl_ms),
            "e2e_ms": p(&self.e2e_ms),
            "failed_statuses": self.statuses.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        })
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "concurrency {:>4} | completed {} failed {} in {:.2} s",
            self.concurrency,
            self.completed,
            self.failed,
            self.duration.as_secs_f64()
        )?;
        writeln!(
            f,
            "  throughput: {:.2} req/s, {:.1} output tok/s, goodput {:.2} req/s",
            self.request_throughput, self.output_throughput, self.goodput
        )?;
        for (name, p) in [
            ("TTFT", &self.ttft_ms),
            ("TPOT", &self.tpot_ms),
            ("ITL", &self.itl_ms),
            ("E2E", &self.e2e_ms),
        ] {
            writeln!(
                f,
                "  {name:<4} ms: mean {:8.1} median {:8.1} p99 {:8.1}",
                p.mean, p.median, p.p99
            )?;
        }
        Ok(())
    }
}

/// The outcome of each request of a run, in request order.
pub type Outcomes = Vec<std::result::Result<(Streamed, Timing), String>>;

/// Runs `requests` with at most `concurrency` in flight; stops starting new ones after
/// `time_limit` (those count as failed), and gives each `per_request` to finish.
pub async fn run_load(
    addr: SocketAddr,
    model: &str,
    requests: &[LoadRequest],
    concurrency: usize,
    time_limit: Duration,
    per_request: Duration,
    slo: Slo,
) -> Result<(Report, Outcomes)> {
    ensure_loopback(&addr)?;
    let concurrency = concurrency.max(1);
    let start = Instant::now();
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(concurrency));
    let mut tasks = Vec::with_capacity(requests.len());
    for r in requests {
        let permit = sem.clone().acquire_owned().await?;
        let r = r.clone();
        let model = model.to_string();
        let late = start.elapsed() > time_limit;
        tasks.push(tokio::spawn(async move {
            let _permit = permit;
            if late {
                return Err("not started: the run's time limit was reached".to_string());
            }
            match stream_completion(addr, &model, &r, per_request).await {
                Ok(Ok(x)) => Ok(x),
                Ok(Err((status, body))) => Err(format!("HTTP {status}: {body}")),
                Err(e) => Err(format!("{e:#}")),
            }
        }));
    }
    let mut outcomes = Vec::with_capacity(tasks.len());
    for t in tasks {
        outcomes.push(t.await.unwrap_or_else(|e| Err(format!("task failed: {e}"))));
    }
    let duration = start.elapsed();
    let mut ttft = Vec::new();
    let mut tpot = Vec::new();
    let mut itl = Vec::new();
    let mut e2e = Vec::new();
    let mut good = 0;
    let mut output_tokens = 0;
    let mut statuses = BTreeMap::new();
    for o in &outcomes {
        match o {
            Ok((_, t)) => {
                let ms = |d: Duration| d.as_secs_f64() * 1e3;
                ttft.push(ms(t.ttft));
                e2e.push(ms(t.e2e));
                let tp = if t.n_output > 1 {
                    Some((t.e2e - t.ttft) / (t.n_output as u32 - 1))
                } else {
                    None
                };
                if let Some(tp) = tp {
                    tpot.push(ms(tp));
                }
                itl.extend(t.itl.iter().map(|&d| ms(d)));
                output_tokens += t.n_output;
                let ok = slo.ttft.is_none_or(|s| t.ttft <= s)
                    && slo.e2e.is_none_or(|s| t.e2e <= s)
                    && slo.tpot.is_none_or(|s| tp.is_none_or(|tp| tp <= s));
                if ok {
                    good += 1;
                }
            }
            Err(m) => {
                let status = m
                    .strip_prefix("HTTP ")
                    .and_then(|r| r.split(':').next())
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0);
                *statuses.entry(status).or_insert(0) += 1;
            }
        }
    }
    let completed = e2e.len();
    let secs = duration.as_secs_f64().max(1e-9);
    Ok((
        Report {
            concurrency,
            completed,
            failed: outcomes.len() - completed,
            duration,
            output_tokens,
            request_throughput: completed as f64 / secs,
            output_throughput: output_tokens as f64 / secs,
            goodput: good as f64 / secs,
            ttft_ms: percentiles(ttft),
            tpot_ms: percentiles(tpot),
            itl_ms: percentiles(itl),
            e2e_ms: percentiles(e2e),
            statuses,
        },
        outcomes,
    ))
}

/// `n` requests over `distinct` (prompt, seed) pairs, deterministic.
pub fn synthetic_requests(n: usize, distinct: usize, max_tokens: usize) -> Vec<LoadRequest> {
    const TOPICS: &[&str] = &[
        "the sea",
        "a lighthouse",
        "bread",
        "trains",
        "the moon",
        "rivers",
        "a library",
        "winter",
        "bees",
        "clocks",
        "mountains",
        "a garden",
        "rain",
        "maps",
        "violins",
        "salt",
    ];
    (0..n)
        .map(|i| {
            let k = i % distinct.max(1);
            LoadRequest {
                prompt: format!(
                    "Story {k}. Write a few sentences about {} and {}.",
                    TOPICS[k % TOPICS.len()],
                    TOPICS[(k / TOPICS.len() + 3 * k + 1) % TOPICS.len()]
                ),
                seed: k as u64,
                max_tokens,
                temperature: 0.8,
                logprobs: true,
                top_k: None,
                top_p: None,
                frequency_penalty: None,
                presence_penalty: None,
            }
        })
        .collect()
}

/// Runs every distinct request alone, then all of them at `concurrency`, and checks each
/// response against its solo run. Returns the load report; an error lists every mismatch.
pub async fn check_against_solo(
    addr: SocketAddr,
    model: &str,
    requests: &[LoadRequest],
    concurrency: usize,
    time_limit: Duration,
) -> Result<Report> {
    let per_request = time_limit;
    let mut solo: BTreeMap<(String, u64), Streamed> = BTreeMap::new();
    for r in requests {
        let key = (r.prompt.clone(), r.seed);
        if solo.contains_key(&key) {
            continue;
        }
        match stream_completion(addr, model, r, per_request).await? {
            Ok((s, _)) => {
                solo.insert(key, s);
            }
            Err((status, body)) => bail!("solo run failed: HTTP {status}: {body}"),
        }
    }
    // Distinct requests must give distinct outputs, or a cross-wired stream could pass.
    let mut texts: Vec<&Streamed> = solo.values().collect();
    texts.sort_by(|a, b| (&a.logprob_bits, &a.text).cmp(&(&b.logprob_bits, &b.text)));
    texts.dedup_by(|a, b| {
        a.logprob_bits == b.logprob_bits && a.tokens == b.tokens && a.text == b.text
    });
    if texts.len() != solo.len() {
        bail!("some distinct requests produced identical outputs; the check would be blind");
    }
    let (report, outcomes) = run_load(
        addr,
        model,
        requests,
        concurrency,
        time_limit,
        per_request,
        Slo::default(),
    )
    .await?;
    let mut problems = Vec::new();
    for (i, (r, o)) in requests.iter().zip(&outcomes).enumerate() {
        let want = &solo[&(r.prompt.clone(), r.seed)];
        match o {
            Ok((got, _)) if got == want => {
                let n = if r.logprobs {
                    got.tokens.len()
                } else {
                    r.max_tokens
                };
                if n != r.max_tokens || got.n_completion != Some(r.max_tokens as u64) {
                    problems.push(format!(
                        "request {i}: {} tokens, usage {:?}, asked {}",
                        got.tokens.len(),
                        got.n_completion,
                        r.max_tokens
                    ));
                }
            }
            Ok((got, _)) => problems.push(format!(
                "request {i}: differs from its solo run: {:?} vs {:?}",
                got.text, want.text
            )),
            Err(e) => problems.push(format!("request {i}: {e}")),
        }
    }
    if !problems.is_empty() {
        bail!(
            "{} of {} requests wrong:\n{}",
            problems.len(),
            requests.len(),
            problems.join("\n")
        );
    }
    Ok(report)
}
