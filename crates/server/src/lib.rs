//! `lockstep serve`: an OpenAI-compatible HTTP server (tokio + axum) over the engine's
//! continuous-batching [`Scheduler`].
//!
//! The HTTP layer only parses, validates, tokenizes and formats; batching happens in the engine
//! thread ([`engine_loop`]), which owns the backend and steps the scheduler. The server is
//! generic over the backend: anything implementing `lockstep_graph::Backend` serves.
//!
//! Endpoints: `POST /v1/completions`, `POST /v1/chat/completions` (SSE streaming or not),
//! `GET /v1/models`, `GET /health`, `POST /tokenize`, `POST /detokenize`, `GET /metrics`.
//! Every response that ends a generation carries a `lockstep` field per choice with what the
//! generation monitors noticed.

pub mod api;
pub mod audit;
pub mod engine_loop;
pub mod error;
pub mod loadgen;
pub mod metrics;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use lockstep_engine::scheduler::{
    Event, Finished, Request, RequestId, Scheduler, SubmitError, TokenLogprob,
};
use lockstep_engine::MonitorConfig;
use lockstep_graph::Backend;
use lockstep_tokenizer::{ChatTemplate, Tokenizer};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use crate::api::{GenRequest, PromptInput};
use crate::engine_loop::Command;
pub use crate::error::ApiError;
use crate::metrics::Metrics;

/// How the server behaves (the model and the engine are given separately).
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The name `/v1/models` lists and requests must use.
    pub model_id: String,
    /// Require `Authorization: Bearer <key>` on `/v1/*`, `/tokenize` and `/detokenize`.
    pub api_key: Option<String>,
    /// Fraction of requests replayed on the reference backend (0 = off).
    pub audit_rate: f64,
    /// The GGUF file the audit loads on the reference backend.
    pub audit_model: Option<PathBuf>,
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    /// The generation monitors run on every request with this configuration.
    pub monitor: MonitorConfig,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            model_id: "lockstep".into(),
            api_key: None,
            audit_rate: 0.0,
            audit_model: None,
            max_body_bytes: 4 << 20,
            monitor: MonitorConfig::default(),
        }
    }
}

/// The model as the HTTP layer needs it: tokenizer and chat template.
pub struct Served {
    pub tokenizer: Arc<Tokenizer>,
    /// `None`: the model has no chat template and chat requests are refused.
    pub template: Option<ChatTemplate>,
}

struct AppState {
    cfg: ServerConfig,
    tokenizer: Arc<Tokenizer>,
    template: Option<ChatTemplate>,
    commands: Mutex<std::sync::mpsc::Sender<Command>>,
    metrics: Arc<Metrics>,
    alive: Arc<AtomicBool>,
    /// Longest prompt + generation a request may reach.
    max_len: usize,
    /// Audit sampling: credit accumulates `audit_rate` per request; a request is audited
    /// each time it reaches 1 (deterministic, exactly the asked fraction over time).
    audit_credit: Mutex<f64>,
    next_http_id: std::sync::atomic::AtomicU64,
}

type Shared = Arc<AppState>;

/// A running server: its address, and how to stop it.
pub struct ServerHandle {
    pub addr: SocketAddr,
    pub metrics: Arc<Metrics>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServerHandle {
    /// Stops accepting, lets the engine finish, and joins the server thread.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Blocks until the server stops by itself (it does not, unless its runtime fails).
    pub fn wait(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// Starts the engine thread (building the scheduler there with `make`, so the backend never
/// has to cross threads) and the HTTP server on `listener`, each on its own thread. Returns once
/// the model is loaded and the server accepts connections.
pub fn start<B, F>(
    make: F,
    served: Served,
    cfg: ServerConfig,
    listener: std::net::TcpListener,
) -> anyhow::Result<ServerHandle>
where
    B: Backend + 'static,
    F: FnOnce() -> anyhow::Result<Scheduler<B>> + Send + 'static,
{
    let metrics = Arc::new(Metrics::default());
    let alive = Arc::new(AtomicBool::new(true));
    let (cmd_tx, cmd_rx) = std::sync::mpsc::channel::<Command>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<anyhow::Result<usize>>();

    // The audit thread learns the longest sequence once the engine is built.
    let (audit_tx, audit_rx) = if cfg.audit_rate > 0.0 {
        if cfg.audit_model.is_none() {
            anyhow::bail!("--audit needs the model file");
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(8);
        (Some(tx), Some(rx))
    } else {
        (None, None)
    };

    {
        let metrics = metrics.clone();
        let alive = alive.clone();
        std::thread::Builder::new()
            .name("engine".into())
            .spawn(move || match make() {
                Ok(s) => {
                    let _ = ready_tx.send(Ok(s.max_len()));
                    metrics.scheduler(s.stats());
                    engine_loop::run(s, cmd_rx, metrics, audit_tx, alive);
                }
                Err(e) => {
                    alive.store(false, Ordering::SeqCst);
                    let _ = ready_tx.send(Err(e));
                }
            })?;
    }
    let max_len = ready_rx
        .recv()
        .map_err(|_| anyhow::anyhow!("the engine thread died while loading"))??;
    if let (Some(rx), Some(model)) = (audit_rx, cfg.audit_model.clone()) {
        let m = metrics.clone();
        std::thread::Builder::new()
            .name("audit".into())
            .spawn(move || audit::run(model, max_len, rx, m))?;
    }

    let state = Arc::new(AppState {
        tokenizer: served.tokenizer,
        template: served.template,
        commands: Mutex::new(cmd_tx),
        metrics: metrics.clone(),
        alive,
        max_len,
        audit_credit: Mutex::new(0.0),
        next_http_id: std::sync::atomic::AtomicU64::new(0),
        cfg,
    });
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
    let (up_tx, up_rx) = std::sync::mpsc::channel::<anyhow::Result<()>>();
    let thread = std::thread::Builder::new()
        .name("http".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = up_tx.send(Err(e.into()));
                    return;
                }
            };
            rt.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = up_tx.send(Err(e.into()));
                        return;
                    }
                };
                let _ = up_tx.send(Ok(()));
                let app = router(state);
                let r = axum::serve(listener, app)
                    .with_graceful_shutdown(async move {
                        let _ = shutdown_rx.await;
                    })
                    .await;
                if let Err(e) = r {
                    eprintln!("server error: {e}");
                }
            });
        })?;
    up_rx
        .recv()
        .map_err(|_| anyhow::anyhow!("the server thread died while starting"))??;
    Ok(ServerHandle {
        addr,
        metrics,
        shutdown: Some(shutdown_tx),
        thread: Some(thread),
    })
}

fn router(state: Shared) -> Router {
    let limit = state.cfg.max_body_bytes;
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/metrics", get(metrics_text))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .fallback(|uri: Uri| async move { ApiError::not_found(uri.path()) })
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn check_auth(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(key) = &state.cfg.api_key else {
        return Ok(());
    };
    let given = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if given == Some(key.as_str()) {
        Ok(())
    } else {
        Err(ApiError::unauthorized())
    }
}

/// Records an error response in the metrics and returns it.
fn fail(state: &AppState, e: ApiError) -> Response {
    state.metrics.http_error(e.status.as_u16());
    e.into_response()
}

fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|r| {
        let status = r.status();
        let mut e = ApiError::bad_body(format!("cannot read the request body: {}", r.body_text()));
        e.status = status;
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            e.code = Some("request_too_large");
        }
        e
    })
}

async fn health(State(state): State<Shared>) -> Response {
    if state.alive.load(Ordering::SeqCst) {
        Json(json!({"status": "ok"})).into_response()
    } else {
        fail(&state, ApiError::unavailable("the engine has stopped"))
    }
}

async fn metrics_text(State(state): State<Shared>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}

async fn models(State(state): State<Shared>, headers: HeaderMap) -> Response {
    if let Err(e) = check_auth(&state, &headers) {
        return fail(&state, e);
    }
    Json(json!({
        "object": "list",
        "data": [{
            "id": state.cfg.model_id,
            "object": "model",
            "created": 0,
            "owned_by": "lockstep",
            "max_model_len": state.max_len,
        }]
    }))
    .into_response()
}

async fn tokenize(
    State(state): State<Shared>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let r = (|| {
        check_auth(&state, &headers)?;
        let obj = api::parse_object(&body_bytes(body)?)?;
        // llama.cpp names the text `content`, vLLM `prompt`.
        let text = match obj.get("content").or_else(|| obj.get("prompt")) {
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(ApiError::invalid("content", "`content` must be a string")),
            None => {
                return Err(ApiError::invalid(
                    "content",
                    "`content` (or `prompt`) is required",
                ))
            }
        };
        let add_special = match obj.get("add_special") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(ApiError::invalid(
                    "add_special",
                    "`add_special` must be a boolean",
                ))
            }
        };
        let tokens = state.tokenizer.encode(&text, add_special, true);
        Ok(Json(json!({
            "tokens": tokens,
            "count": tokens.len(),
            "max_model_len": state.max_len,
        })))
    })();
    match r {
        Ok(j) => j.into_response(),
        Err(e) => fail(&state, e),
    }
}

async fn detokenize(
    State(state): State<Shared>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let r = (|| {
        check_auth(&state, &headers)?;
        let obj = api::parse_object(&body_bytes(body)?)?;
        let Some(Value::Array(items)) = obj.get("tokens") else {
            return Err(ApiError::invalid(
                "tokens",
                "`tokens` must be an array of token ids",
            ));
        };
        let vocab = state.tokenizer.vocab_size();
        let mut ids = Vec::with_capacity(items.len());
        for (i, v) in items.iter().enumerate() {
            match v.as_u64().and_then(|x| u32::try_from(x).ok()) {
                Some(id) if (id as usize) < vocab => ids.push(id),
                _ => {
                    return Err(ApiError::invalid(
                        format!("tokens[{i}]"),
                        format!("`tokens[{i}]` = {v} is not a token id below {vocab}"),
                    ))
                }
            }
        }
        let text = state
            .tokenizer
            .decode(&ids, false)
            .map_err(|e| ApiError::invalid("tokens", e.to_string()))?;
        Ok(Json(json!({"content": text, "prompt": text})))
    })();
    match r {
        Ok(j) => j.into_response(),
        Err(e) => fail(&state, e),
    }
}

/// Tokenizes a rendered chat prompt as llama.cpp (and `lockstep chat`) do: BOS per the model's
/// flag, special tokens parsed, and a second BOS dropped when the template already wrote one.
pub fn chat_prompt_ids(tokenizer: &Tokenizer, text: &str) -> Vec<u32> {
    let mut ids = tokenizer.encode(text, true, true);
    if let Some(bos) = tokenizer.bos() {
        if tokenizer.add_bos() && ids.len() >= 2 && ids[0] == bos && ids[1] == bos {
            ids.remove(0);
        }
    }
    ids
}

/// Cancels the engine requests of an HTTP request when it is dropped: a client that goes away
/// drops the handler's future (or the SSE stream), and its requests' blocks are freed at the
/// next step.
struct CancelGuard {
    state: Shared,
    ids: Vec<RequestId>,
    armed: bool,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(tx) = self.state.commands.lock() {
            for &id in &self.ids {
                let _ = tx.send(Command::Cancel(id));
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Completion,
    Chat,
}

/// A validated request turned into engine requests.
struct Submitted {
    kind: Kind,
    id: String,
    created: u64,
    model: String,
    n_choices: usize,
    /// Choices per prompt (`n`): choice `i` belongs to prompt `i / n_per_prompt`.
    n_per_prompt: usize,
    include_usage: bool,
    logprobs: Option<usize>,
    events: mpsc::UnboundedReceiver<(usize, Event)>,
    guard: CancelGuard,
    arrival: Instant,
}

fn submit_error(e: SubmitError, kind: Kind) -> ApiError {
    let prompt_field = if kind == Kind::Chat {
        "messages"
    } else {
        "prompt"
    };
    match e {
        SubmitError::QueueFull(_) => ApiError::overloaded(e.to_string()),
        SubmitError::EmptyPrompt => ApiError::invalid(prompt_field, e.to_string()),
        SubmitError::PromptTooLong { .. } => {
            ApiError::invalid(prompt_field, e.to_string()).with_code("context_length_exceeded")
        }
        SubmitError::TokenOutOfRange { .. } => ApiError::invalid(prompt_field, e.to_string()),
        SubmitError::BiasOutOfRange { .. } | SubmitError::BiasNotFinite { .. } => {
            ApiError::invalid("logit_bias", e.to_string())
        }
        SubmitError::TooManyLogprobs(_) => ApiError::invalid(
            if kind == Kind::Chat {
                "top_logprobs"
            } else {
                "logprobs"
            },
            e.to_string(),
        ),
        SubmitError::Params(p) => ApiError::invalid(p.field.clone(), p.to_string()),
    }
}

async fn submit(
    state: &Shared,
    body: Result<Bytes, BytesRejection>,
    headers: &HeaderMap,
    kind: Kind,
) -> Result<(Submitted, bool), ApiError> {
    check_auth(state, headers)?;
    if !state.alive.load(Ordering::SeqCst) {
        return Err(ApiError::unavailable("the engine has stopped"));
    }
    let arrival = Instant::now();
    let obj = api::parse_object(&body_bytes(body)?)?;
    let g: GenRequest = api::parse_generation(&obj, kind == Kind::Chat)?;
    if g.model != state.cfg.model_id {
        return Err(ApiError::model_not_found(&g.model, &state.cfg.model_id));
    }
    let prompts: Vec<Vec<u32>> = match &g.messages {
        Some(messages) => {
            let Some(t) = &state.template else {
                return Err(ApiError::invalid(
                    "messages",
                    "the model has no chat template; use /v1/completions",
                ));
            };
            let rendered = t
                .render(messages, true)
                .map_err(|e| ApiError::invalid("messages", format!("chat template: {e}")))?;
            vec![chat_prompt_ids(&state.tokenizer, &rendered.text)]
        }
        None => g
            .prompts
            .iter()
            .map(|p| match p {
                PromptInput::Text(t) => state.tokenizer.encode(t, true, true),
                PromptInput::Tokens(ids) => ids.clone(),
            })
            .collect(),
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let mut guard = CancelGuard {
        state: state.clone(),
        ids: Vec::new(),
        armed: true,
    };
    let mut choice = 0;
    for prompt in &prompts {
        for i in 0..g.n {
            let mut params = g.params.clone();
            params.seed = params.seed.wrapping_add(i as u64);
            let audit = {
                let mut c = state
                    .audit_credit
                    .lock()
                    .map_err(|_| ApiError::internal("audit lock"))?;
                *c += state.cfg.audit_rate;
                if *c >= 1.0 {
                    *c -= 1.0;
                    true
                } else {
                    false
                }
            };
            let req = Request {
                prompt: prompt.clone(),
                params,
                logprobs: g.logprobs,
                logit_bias: g.logit_bias.clone(),
                monitor: state.cfg.monitor.clone(),
                capture_logits: audit,
            };
            let (reply_tx, reply_rx) = oneshot::channel();
            state
                .commands
                .lock()
                .map_err(|_| ApiError::internal("command lock"))?
                .send(Command::Submit {
                    req: Box::new(req),
                    choice,
                    events: tx.clone(),
                    reply: reply_tx,
                })
                .map_err(|_| ApiError::unavailable("the engine has stopped"))?;
            match reply_rx.await {
                Ok(Ok(id)) => guard.ids.push(id),
                Ok(Err(e)) => return Err(submit_error(e, kind)),
                Err(_) => return Err(ApiError::unavailable("the engine has stopped")),
            }
            choice += 1;
        }
    }
    let n = state.next_http_id.fetch_add(1, Ordering::Relaxed);
    let prefix = if kind == Kind::Chat {
        "chatcmpl"
    } else {
        "cmpl"
    };
    Ok((
        Submitted {
            kind,
            id: format!("{prefix}-{n:016x}"),
            created: now_unix(),
            model: g.model,
            n_choices: choice,
            n_per_prompt: g.n,
            include_usage: g.include_usage,
            logprobs: g.logprobs,
            events: rx,
            guard,
            arrival,
        },
        g.stream,
    ))
}

fn token_str(tok: &Tokenizer, id: u32) -> String {
    tok.token_to_piece(id, false)
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default()
}

fn token_bytes(tok: &Tokenizer, id: u32) -> Vec<u8> {
    tok.token_to_piece(id, false)
        .map(<[u8]>::to_vec)
        .unwrap_or_default()
}

/// Logprobs of one position in the chat format.
fn chat_logprob(tok: &Tokenizer, lp: &TokenLogprob) -> Value {
    json!({
        "token": token_str(tok, lp.token),
        "logprob": lp.logprob,
        "bytes": token_bytes(tok, lp.token),
        "top_logprobs": lp.top.iter().map(|&(t, l)| json!({
            "token": token_str(tok, t),
            "logprob": l,
            "bytes": token_bytes(tok, t),
        })).collect::<Vec<_>>(),
    })
}

/// Per-choice accumulation.
#[derive(Default)]
struct ChoiceState {
    text: String,
    tokens: Vec<u32>,
    logprobs: Vec<TokenLogprob>,
    finished: Option<Finished>,
    failed: Option<String>,
    last_token_at: Option<Instant>,
}

fn lockstep_field(f: &Finished) -> Value {
    json!({
        "monitor_warnings": f.warnings.iter().map(|w| json!({
            "kind": w.kind.name(),
            "step": w.step,
            "message": w.message,
        })).collect::<Vec<_>>(),
        "cached_prompt_tokens": f.n_cached_prompt,
        "preemptions": f.preemptions,
    })
}

fn completion_logprobs(tok: &Tokenizer, lps: &[TokenLogprob], text_start: usize) -> Value {
    let mut offset = text_start;
    let mut offsets = Vec::new();
    for lp in lps {
        offsets.push(offset);
        offset += token_str(tok, lp.token).len();
    }
    json!({
        "tokens": lps.iter().map(|l| token_str(tok, l.token)).collect::<Vec<_>>(),
        "token_logprobs": lps.iter().map(|l| l.logprob).collect::<Vec<_>>(),
        "top_logprobs": lps.iter().map(|l| {
            let m: serde_json::Map<String, Value> = l.top.iter().map(|&(t, p)| (token_str(tok, t), json!(p))).collect();
            Value::Object(m)
        }).collect::<Vec<_>>(),
        "text_offset": offsets,
    })
}

fn usage(n_prompt: usize, n_gen: usize) -> Value {
    json!({"prompt_tokens": n_prompt, "completion_tokens": n_gen, "total_tokens": n_prompt + n_gen})
}

impl Submitted {
    /// Applies one event to the choice states; returns the token's timing for the metrics.
    fn apply(&self, state: &AppState, choices: &mut [ChoiceState], idx: usize, ev: Event) {
        let Some(c) = choices.get_mut(idx) else {
            return;
        };
        match ev {
            Event::Token {
                token,
                text,
                logprob,
                ..
            } => {
                let now = Instant::now();
                match c.last_token_at {
                    None => state
                        .metrics
                        .ttft(now.duration_since(self.arrival).as_secs_f64()),
                    Some(t) => state.metrics.itl(now.duration_since(t).as_secs_f64()),
                }
                c.last_token_at = Some(now);
                c.tokens.push(token);
                c.text.push_str(&text);
                if let Some(lp) = logprob {
                    c.logprobs.push(lp);
                }
            }
            Event::Finished(f) => {
                c.text.push_str(&f.tail);
                state.metrics.e2e(self.arrival.elapsed().as_secs_f64());
                state
                    .metrics
                    .request_done(f.finish.as_openai_str(), f.n_prompt, f.n_generated);
                c.finished = Some(f);
            }
            Event::Failed(m) => {
                state.metrics.request_done("error", 0, c.tokens.len());
                c.failed = Some(m);
            }
            // Counted and logged by the engine loop; reported with the final response.
            Event::Alarm(_) => {}
        }
    }
}

async fn completions(
    State(state): State<Shared>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    generation(state, headers, body, Kind::Completion).await
}

async fn chat_completions(
    State(state): State<Shared>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    generation(state, headers, body, Kind::Chat).await
}

async fn generation(
    state: Shared,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
    kind: Kind,
) -> Response {
    let (sub, stream) = match submit(&state, body, &headers, kind).await {
        Ok(s) => s,
        Err(e) => {
            if e.status == StatusCode::TOO_MANY_REQUESTS {
                state.metrics.request_done("rejected", 0, 0);
            }
            return fail(&state, e);
        }
    };
    if stream {
        streaming(state, sub).into_response()
    } else {
        whole(state, sub).await
    }
}

async fn whole(state: Shared, mut sub: Submitted) -> Response {
    let mut choices: Vec<ChoiceState> =
        (0..sub.n_choices).map(|_| ChoiceState::default()).collect();
    let mut open = sub.n_choices;
    while open > 0 {
        let Some((idx, ev)) = sub.events.recv().await else {
            return fail(
                &state,
                ApiError::unavailable("the engine stopped mid-request"),
            );
        };
        let last = matches!(ev, Event::Finished(_) | Event::Failed(_));
        sub.apply(&state, &mut choices, idx, ev);
        if last {
            open -= 1;
        }
    }
    sub.guard.armed = false;
    if let Some(m) = choices.iter().find_map(|c| c.failed.clone()) {
        return fail(&state, ApiError::internal(m));
    }
    let tok = &state.tokenizer;
    let mut n_prompt_total = 0;
    let mut n_gen_total = 0;
    let per_prompt = sub.n_per_prompt.max(1);
    let out: Vec<Value> = choices
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let f = c.finished.as_ref();
            let n_prompt = f.map_or(0, |f| f.n_prompt);
            // Prompt tokens count once per prompt (n choices share it), as OpenAI does.
            if i % per_prompt == 0 {
                n_prompt_total += n_prompt;
            }
            n_gen_total += f.map_or(0, |f| f.n_generated);
            let finish = f.map(|f| f.finish.as_openai_str());
            let lsf = f.map(lockstep_field);
            match sub.kind {
                Kind::Completion => json!({
                    "index": i,
                    "text": c.text,
                    "logprobs": sub.logprobs.map(|_| completion_logprobs(tok, &c.logprobs, 0)),
                    "finish_reason": finish,
                    "lockstep": lsf,
                }),
                Kind::Chat => json!({
                    "index": i,
                    "message": {"role": "assistant", "content": c.text},
                    "logprobs": sub.logprobs.map(|_| json!({"content": c.logprobs.iter().map(|l| chat_logprob(tok, l)).collect::<Vec<_>>()})),
                    "finish_reason": finish,
                    "lockstep": lsf,
                }),
            }
        })
        .collect();
    Json(json!({
        "id": sub.id,
        "object": if sub.kind == Kind::Chat { "chat.completion" } else { "text_completion" },
        "created": sub.created,
        "model": sub.model,
        "choices": out,
        "usage": usage(n_prompt_total, n_gen_total),
    }))
    .into_response()
}

/// State of one SSE stream.
struct StreamState {
    state: Shared,
    sub: Submitted,
    choices: Vec<ChoiceState>,
    open: usize,
    queue: std::collections::VecDeque<String>,
    sent_role: Vec<bool>,
    done: bool,
}

impl StreamState {
    fn chunk(&self, choices: Value, usage_v: Option<Value>) -> String {
        let object = if self.sub.kind == Kind::Chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        };
        let mut v = json!({
            "id": self.sub.id,
            "object": object,
            "created": self.sub.created,
            "model": self.sub.model,
            "choices": choices,
        });
        if self.sub.include_usage {
            v["usage"] = usage_v.unwrap_or(Value::Null);
        }
        v.to_string()
    }

    /// Turns one engine event into zero or more SSE data payloads.
    fn on_event(&mut self, idx: usize, ev: Event) {
        let tok = self.state.tokenizer.clone();
        let (text, lp, fin, failed) = match &ev {
            Event::Token { text, logprob, .. } => (text.clone(), logprob.clone(), None, None),
            Event::Finished(f) => (f.tail.clone(), None, Some(f.clone()), None),
            Event::Failed(m) => (String::new(), None, None, Some(m.clone())),
            // Reported in the final chunk's `lockstep` field.
            Event::Alarm(_) => return,
        };
        let text_start = self.choices.get(idx).map_or(0, |c| c.text.len());
        let last = fin.is_some() || failed.is_some();
        self.sub.apply(&self.state, &mut self.choices, idx, ev);
        if last {
            self.open = self.open.saturating_sub(1);
        }
        if let Some(m) = failed {
            let e = ApiError::internal(m);
            self.queue.push_back(e.body().to_string());
            return;
        }
        // Chat: the first chunk of a choice carries the role.
        if self.sub.kind == Kind::Chat && !self.sent_role[idx] {
            self.sent_role[idx] = true;
            let c = json!([{"index": idx, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}]);
            let s = self.chunk(c, None);
            self.queue.push_back(s);
        }
        let has_content = !text.is_empty() || lp.is_some();
        if !has_content && fin.is_none() {
            return; // nothing to say yet (the text is held back)
        }
        let finish = fin.as_ref().map(|f| f.finish.as_openai_str());
        let lsf = fin.as_ref().map(lockstep_field);
        let c = match self.sub.kind {
            Kind::Completion => json!([{
                "index": idx,
                "text": text,
                "logprobs": lp.as_ref().map(|l| completion_logprobs(&tok, std::slice::from_ref(l), text_start)),
                "finish_reason": finish,
                "lockstep": lsf,
            }]),
            Kind::Chat => {
                let delta = if fin.is_some() && text.is_empty() {
                    json!({})
                } else {
                    json!({"content": text})
                };
                json!([{
                    "index": idx,
                    "delta": delta,
                    "logprobs": lp.as_ref().map(|l| json!({"content": [chat_logprob(&tok, l)]})),
                    "finish_reason": finish,
                    "lockstep": lsf,
                }])
            }
        };
        let s = self.chunk(c, None);
        self.queue.push_back(s);
        if self.open == 0 {
            if self.sub.include_usage {
                let mut n_prompt = 0;
                let mut n_gen = 0;
                let per_prompt = self.sub.n_per_prompt.max(1);
                for (i, c) in self.choices.iter().enumerate() {
                    if let Some(f) = &c.finished {
                        if i % per_prompt == 0 {
                            n_prompt += f.n_prompt;
                        }
                        n_gen += f.n_generated;
                    }
                }
                let s = self.chunk(json!([]), Some(usage(n_prompt, n_gen)));
                self.queue.push_back(s);
            }
            self.queue.push_back("[DONE]".into());
            self.sub.guard.armed = false;
        }
    }
}

fn streaming(state: Shared, sub: Submitted) -> impl IntoResponse {
    let n = sub.n_choices;
    let st = StreamState {
        state,
        choices: (0..n).map(|_| ChoiceState::default()).collect(),
        open: n,
        queue: std::collections::VecDeque::new(),
        sent_role: vec![false; n],
        done: false,
        sub,
    };
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        loop {
            if let Some(data) = st.queue.pop_front() {
                return Some((
                    Ok::<_, std::convert::Infallible>(SseEvent::default().data(data)),
                    st,
                ));
            }
            if st.done || st.open == 0 {
                return None;
            }
            match st.sub.events.recv().await {
                Some((idx, ev)) => st.on_event(idx, ev),
                None => {
                    st.done = true;
                    let e = ApiError::unavailable("the engine stopped mid-request");
                    st.queue.push_back(e.body().to_string());
                }
            }
        }
    });
    Sse::new(stream)
}
