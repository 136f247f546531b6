//! `lockstep doctor`: is this model file healthy? File structure, per-tensor sanity, metadata
//! consistency, tokenizer sanity and a short monitored generation on the reference backend.

use std::collections::BTreeMap;
use std::path::Path;

use lockstep_backend_ref::RefBackend;
use lockstep_engine::{
    generate_with, Engine, EngineConfig, GenerateError, GenerateOptions, MonitorConfig,
    SamplingParams,
};
use lockstep_gguf::GgufFile;
use lockstep_models::{Arch, Model, ModelConfig};
use lockstep_tokenizer::{ChatMessage, ChatTemplate, Tokenizer};
use serde::Serialize;

use crate::taps::parse_tap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    Pass,
    Info,
    Warn,
    Fail,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Info => "INFO",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    pub section: &'static str,
    pub status: Status,
    pub message: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct DoctorReport {
    pub path: String,
    pub findings: Vec<Finding>,
}

impl DoctorReport {
    /// The worst status found (INFO counts as PASS).
    pub fn status(&self) -> Status {
        match self.findings.iter().map(|f| f.status).max() {
            Some(Status::Info) | None => Status::Pass,
            Some(s) => s,
        }
    }

    /// 0 PASS, 2 WARN, 1 FAIL.
    pub fn exit_code(&self) -> i32 {
        match self.status() {
            Status::Pass | Status::Info => 0,
            Status::Warn => 2,
            Status::Fail => 1,
        }
    }

    pub fn render(&self) -> String {
        let mut s = format!("lockstep doctor: {}\n", self.path);
        let mut last = "";
        for f in &self.findings {
            if f.section != last {
                s.push_str(&format!("{}:\n", f.section));
                last = f.section;
            }
            s.push_str(&format!("  {:<4}  {}\n", f.status.name(), f.message));
        }
        s.push_str(&format!("result: {}\n", self.status().name()));
        s
    }
}

#[derive(Clone, Debug)]
pub struct DoctorOptions {
    /// Tokens of the monitored generation (0 = skip it).
    pub gen_tokens: usize,
    pub prompt: String,
}

impl Default for DoctorOptions {
    fn default() -> DoctorOptions {
        DoctorOptions {
            gen_tokens: 16,
            prompt: "The capital of France is".into(),
        }
    }
}

struct Doctor {
    findings: Vec<Finding>,
}

impl Doctor {
    fn add(&mut self, section: &'static str, status: Status, message: impl Into<String>) {
        self.findings.push(Finding {
            section,
            status,
            message: message.into(),
        });
    }
}

/// Per-tensor statistics.
#[derive(Clone, Debug, Default)]
struct TStats {
    n: usize,
    nan: usize,
    inf: usize,
    zeros: usize,
    rms: f64,
    mean: f64,
}

fn stats(x: &[f32]) -> TStats {
    let mut s = TStats {
        n: x.len(),
        ..TStats::default()
    };
    let (mut ss, mut sum) = (0f64, 0f64);
    for &v in x {
        if v.is_nan() {
            s.nan += 1;
        } else if v.is_infinite() {
            s.inf += 1;
        } else {
            if v == 0.0 {
                s.zeros += 1;
            }
            ss += f64::from(v) * f64::from(v);
            sum += f64::from(v);
        }
    }
    let finite = (s.n - s.nan - s.inf).max(1) as f64;
    s.rms = (ss / finite).sqrt();
    s.mean = sum / finite;
    s
}

fn list_ids(ids: &[usize], max: usize) -> String {
    let mut v: Vec<String> = ids.iter().take(max).map(|i| i.to_string()).collect();
    if ids.len() > max {
        v.push(format!("... ({} more)", ids.len() - max));
    }
    v.join(", ")
}

/// Examines the model at `path`.
pub fn doctor(path: &Path, opts: &DoctorOptions) -> DoctorReport {
    let mut d = Doctor {
        findings: Vec::new(),
    };
    let report = |d: Doctor| DoctorReport {
        path: path.display().to_string(),
        findings: d.findings,
    };

    // 1. Structure.
    const S1: &str = "file structure";
    let file = match GgufFile::open(path) {
        Ok(f) => f,
        Err(e) => {
            d.add(S1, Status::Fail, format!("not a valid GGUF file: {e}"));
            return report(d);
        }
    };
    let h = file.header();
    d.add(
        S1,
        Status::Pass,
        format!(
            "GGUF v{}, {} metadata keys, {} tensors, {:.1} MiB of tensor data; every offset and size checked",
            h.version,
            file.metadata().len(),
            h.tensors.len(),
            file.tensor_bytes() as f64 / (1024.0 * 1024.0)
        ),
    );

    // 2. Metadata consistency.
    const S2: &str = "metadata";
    let cfg = match ModelConfig::from_metadata(file.metadata()) {
        Ok(c) => Some(c),
        Err(e) => {
            d.add(S2, Status::Fail, e.to_string());
            None
        }
    };
    let n_tokens = file
        .metadata()
        .get_array("tokenizer.ggml.tokens")
        .map(|(_, t)| t.len())
        .ok();
    if let Some(c) = &cfg {
        metadata_checks(&mut d, &file, c, n_tokens);
    }

    // 3. Tensors.
    tensor_checks(&mut d, &file, cfg.as_ref());

    // 4. Tokenizer.
    const S4: &str = "tokenizer";
    let tok = match Tokenizer::from_metadata(file.metadata()) {
        Ok(t) => Some(t),
        Err(e) => {
            d.add(S4, Status::Fail, format!("cannot build the tokenizer: {e}"));
            None
        }
    };
    if let Some(t) = &tok {
        tokenizer_checks(&mut d, &file, t);
    }

    // 5. Generation.
    const S5: &str = "generation (reference backend, monitors on)";
    // Damaged tensors still load (and the monitors show what they do); a file whose
    // structure, metadata or tokenizer failed cannot run.
    let healthy_so_far = !d
        .findings
        .iter()
        .any(|f| f.status == Status::Fail && f.section != "tensors");
    if opts.gen_tokens > 0 {
        if !healthy_so_far {
            d.add(S5, Status::Info, "skipped: the checks above failed");
        } else if let Some(t) = &tok {
            generation_check(&mut d, &file, t, opts);
        }
    }
    report(d)
}

fn metadata_checks(d: &mut Doctor, file: &GgufFile, c: &ModelConfig, n_tokens: Option<usize>) {
    const S: &str = "metadata";
    let h = file.header();
    let mut problems = Vec::new();
    let (dm, q, kv, ff) = (
        c.n_embd as u64,
        c.q_dim() as u64,
        c.kv_dim() as u64,
        c.n_ff as u64,
    );
    let hd = c.head_dim as u64;
    // Layers present in the tensors vs block_count.
    let max_layer = h
        .tensors
        .iter()
        .filter_map(|t| parse_tap(&t.name).layer)
        .max()
        .map(|l| l + 1)
        .unwrap_or(0);
    if max_layer != c.n_layers {
        problems.push(format!(
            "block_count is {} but the file has tensors for {max_layer} layers",
            c.n_layers
        ));
    }
    let mut expect = |name: String, shape: Vec<u64>, required: bool| match h.tensor(&name) {
        Some(t) if t.dims != shape => problems.push(format!(
            "{name} has shape {:?}, but the metadata implies {:?}",
            t.dims, shape
        )),
        None if required => problems.push(format!("{name} is missing")),
        _ => {}
    };
    let gemma = c.arch == Arch::Gemma3;
    for l in 0..c.n_layers {
        let n = |s: &str| format!("blk.{l}.{s}.weight");
        expect(n("attn_norm"), vec![dm], true);
        expect(n("attn_q"), vec![dm, q], true);
        expect(n("attn_k"), vec![dm, kv], true);
        expect(n("attn_v"), vec![dm, kv], true);
        expect(n("attn_output"), vec![q, dm], true);
        expect(n("ffn_norm"), vec![dm], true);
        expect(n("ffn_gate"), vec![dm, ff], true);
        expect(n("ffn_up"), vec![dm, ff], true);
        expect(n("ffn_down"), vec![ff, dm], true);
        expect(n("attn_q_norm"), vec![hd], gemma);
        expect(n("attn_k_norm"), vec![hd], gemma);
    }
    expect("output_norm.weight".into(), vec![dm], true);
    match h.tensor("token_embd.weight") {
        None => problems.push("token_embd.weight is missing".into()),
        Some(t) => {
            let rows = t.dims.get(1).copied().unwrap_or(0) as usize;
            if t.dims.first().copied() != Some(dm) {
                problems.push(format!(
                    "token_embd.weight rows are {:?} wide, embedding_length is {dm}",
                    t.dims.first()
                ));
            }
            if let Some(nt) = n_tokens {
                if rows < nt {
                    problems.push(format!(
                        "the vocabulary has {nt} tokens but token_embd.weight has {rows} rows"
                    ));
                } else if rows > nt {
                    d.add(
                        S,
                        Status::Info,
                        format!("token_embd.weight has {rows} rows for {nt} tokens (padding)"),
                    );
                }
            }
        }
    }
    if c.n_rot > c.head_dim || !c.n_rot.is_multiple_of(2) {
        problems.push(format!(
            "rope dimension {} vs head_dim {}",
            c.n_rot, c.head_dim
        ));
    }
    if problems.is_empty() {
        d.add(
            S,
            Status::Pass,
            format!(
                "{}: {} layers, d={}, {} heads ({} KV) x {}, rope {} dims, ff {}, vocab {}, ctx {}; all tensor shapes agree",
                c.arch.name(),
                c.n_layers,
                c.n_embd,
                c.n_heads,
                c.n_kv_heads,
                c.head_dim,
                c.n_rot,
                c.n_ff,
                n_tokens.unwrap_or(c.n_vocab),
                c.n_ctx_train
            ),
        );
    }
    for p in problems.into_iter().take(12) {
        d.add(S, Status::Fail, p);
    }
}

fn is_norm(name: &str) -> bool {
    name.contains("norm")
}

fn tensor_checks(d: &mut Doctor, file: &GgufFile, cfg: Option<&ModelConfig>) {
    // RMS-norm weights multiply activations. llama-family values sit around 0.01..10;
    // gemma's include the +1 and its deep post-norms grow to a few hundred (gemma-3-270m:
    // up to 324). Far outside the family's range, or mostly negative, is damage.
    let norm_max = match cfg.map(|c| c.arch) {
        Some(Arch::Gemma3) => 2000.0,
        _ => 100.0,
    };
    const S: &str = "tensors";
    let mut by_kind: BTreeMap<String, Vec<(usize, f64)>> = BTreeMap::new();
    let mut n_ok = 0usize;
    let mut fails = 0usize;
    for t in file.tensors() {
        let n = t.n_elements() as usize;
        let data = match lockstep_quant::dequantize(t.ty, file.tensor_data(t), n) {
            Ok(x) => x,
            Err(e) => {
                d.add(
                    S,
                    Status::Fail,
                    format!("{}: cannot dequantize {:?}: {e}", t.name, t.ty),
                );
                fails += 1;
                continue;
            }
        };
        let s = stats(&data);
        let mut ok = true;
        if s.nan + s.inf > 0 {
            d.add(
                S,
                Status::Fail,
                format!(
                    "{}: {} NaN and {} Inf values of {}",
                    t.name, s.nan, s.inf, s.n
                ),
            );
            ok = false;
        } else if s.zeros == s.n && s.n > 0 {
            d.add(
                S,
                Status::Fail,
                format!("{}: all {} values are zero", t.name, s.n),
            );
            ok = false;
        }
        if ok && is_norm(&t.name) {
            let mean_abs = data.iter().map(|v| f64::from(v.abs())).sum::<f64>() / n.max(1) as f64;
            if !(1e-3..=norm_max).contains(&mean_abs) || s.mean < -0.5 * mean_abs {
                d.add(
                    S,
                    Status::Warn,
                    format!(
                        "{}: norm weights out of the family range (mean {:.3}, mean |w| {:.3}; expected 0.001..{norm_max}, mostly positive)",
                        t.name, s.mean, mean_abs
                    ),
                );
                ok = false;
            }
        }
        if t.name == "token_embd.weight" && ok {
            embedding_rows(d, file, &data, t.row_len() as usize);
        }
        let p = parse_tap(&t.name);
        if let Some(l) = p.layer {
            by_kind
                .entry(p.op.to_string())
                .or_default()
                .push((l, s.rms));
        }
        if ok {
            n_ok += 1;
        } else {
            fails += 1;
        }
    }
    // A layer unlike its siblings: a weight's RMS far from the median over layers.
    let mut odd = Vec::new();
    for (kind, v) in &by_kind {
        if v.len() < 4 || kind.contains("norm") {
            continue;
        }
        let mut r: Vec<f64> = v.iter().map(|x| x.1).collect();
        r.sort_by(f64::total_cmp);
        let med = r[r.len() / 2];
        for &(l, rms) in v {
            if med > 0.0 && (rms > 8.0 * med || rms < med / 8.0) {
                odd.push(format!(
                    "blk.{l}.{kind}: RMS {rms:.3e} vs {med:.3e} (median over {} layers)",
                    v.len()
                ));
            }
        }
    }
    for o in &odd {
        d.add(S, Status::Warn, format!("a layer unlike its siblings: {o}"));
    }
    if fails == 0 {
        d.add(
            S,
            Status::Pass,
            format!(
                "{n_ok} tensors dequantized: no NaN/Inf, none all-zero, norm weights in range{}",
                if odd.is_empty() {
                    ", no layer unlike its siblings"
                } else {
                    ""
                }
            ),
        );
    }
}

fn embedding_rows(d: &mut Doctor, file: &GgufFile, data: &[f32], cols: usize) {
    const S: &str = "tensors";
    if cols == 0 {
        return;
    }
    let rows = data.len() / cols;
    let rms: Vec<f64> = data
        .chunks(cols)
        .map(|r| (r.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / cols as f64).sqrt())
        .collect();
    let mut sorted = rms.clone();
    sorted.sort_by(f64::total_cmp);
    let med = sorted[rows / 2];
    let zero: Vec<usize> = (0..rows).filter(|&i| rms[i] == 0.0).collect();
    let tiny: Vec<usize> = (0..rows)
        .filter(|&i| rms[i] > 0.0 && rms[i] < 0.01 * med)
        .collect();
    // Zero rows of tokens the tokenizer actually produces (normal tokens) are suspicious;
    // unused or control tokens with zero rows are normal.
    let types = file
        .metadata()
        .get_i64_array("tokenizer.ggml.token_type")
        .ok();
    let is_normal = |i: usize| {
        types
            .as_ref()
            .and_then(|t| t.get(i))
            .is_none_or(|&t| t == 1)
    };
    let normal_zero: Vec<usize> = zero.iter().copied().filter(|&i| is_normal(i)).collect();
    if !zero.is_empty() || !tiny.is_empty() {
        d.add(
            S,
            Status::Info,
            format!(
                "token_embd.weight: {} all-zero rows (ids {}), {} near-zero rows (< 1% of the median row RMS {med:.3e}; ids {})",
                zero.len(),
                list_ids(&zero, 8),
                tiny.len(),
                list_ids(&tiny, 8)
            ),
        );
    }
    if normal_zero.len() > rows / 100
        || (!normal_zero.is_empty()
            && normal_zero.len() * 2 > zero.len().max(1)
            && normal_zero.len() > 8)
    {
        d.add(
            S,
            Status::Warn,
            format!(
                "token_embd.weight: {} NORMAL tokens have all-zero embeddings (ids {}): text using them is unreadable to the model",
                normal_zero.len(),
                list_ids(&normal_zero, 8)
            ),
        );
    }
}

fn tokenizer_checks(d: &mut Doctor, file: &GgufFile, t: &Tokenizer) {
    const S: &str = "tokenizer";
    let n = t.vocab_size();
    let mut bad = Vec::new();
    for (k, v) in file.metadata().iter() {
        if k.starts_with("tokenizer.ggml.") && k.ends_with("_token_id") {
            if let Some(id) = v.as_i64() {
                if id >= 0 && id as usize >= n {
                    bad.push(format!("{k} = {id} is outside the vocabulary ({n})"));
                }
            }
        }
    }
    for b in &bad {
        d.add(S, Status::Fail, b.clone());
    }
    let samples = [
        "Hello world! The quick brown fox jumps over the lazy dog.",
        "def f(x):\n    return x * 2  # comment",
        "Café naïve — 東京 😀 Привет",
        "  leading spaces and\ttabs\n\nnew lines",
    ];
    let mut rt_fail = Vec::new();
    for s in samples {
        let ids = t.encode(s, false, false);
        match t.decode(&ids, false) {
            Ok(back) if back == s => {}
            Ok(back) => rt_fail.push(format!("{s:?} came back as {back:?}")),
            Err(e) => rt_fail.push(format!("{s:?}: {e}")),
        }
    }
    for r in &rt_fail {
        d.add(S, Status::Warn, format!("round trip: {r}"));
    }
    let tmpl = match ChatTemplate::from_metadata(file.metadata(), t) {
        Ok(tm) => match tm.render(&[ChatMessage::new("user", "Hi")], true) {
            Ok(r) if r.text.contains("Hi") => Ok(format!("{:?}", tm.source())),
            Ok(r) => Err(format!(
                "the chat template rendered without the message: {:?}",
                r.text
            )),
            Err(e) => Err(format!("the chat template does not render: {e}")),
        },
        Err(e) => Err(format!("no usable chat template: {e}")),
    };
    if let Err(e) = &tmpl {
        d.add(S, Status::Warn, e.clone());
    }
    if bad.is_empty() && rt_fail.is_empty() {
        d.add(
            S,
            Status::Pass,
            format!(
                "{n} tokens; special ids in range (bos {:?}, eos {:?}); {} sample texts round-trip; chat template {}",
                t.bos(),
                t.eos(),
                samples.len(),
                tmpl.as_ref().map(|s| format!("renders ({s})")).unwrap_or_else(|_| "see above".into())
            ),
        );
    }
}

fn generation_check(d: &mut Doctor, file: &GgufFile, t: &Tokenizer, opts: &DoctorOptions) {
    const S: &str = "generation (reference backend, monitors on)";
    let backend = RefBackend::new();
    let model = match Model::load(file, &backend) {
        Ok(m) => m,
        Err(e) => {
            d.add(S, Status::Fail, format!("cannot load the model: {e}"));
            return;
        }
    };
    let cfg = EngineConfig {
        n_ctx: 512,
        cache_tokens: 512,
        ..EngineConfig::default()
    };
    let mut engine = match Engine::new(backend, model, cfg) {
        Ok(e) => e,
        Err(e) => {
            d.add(S, Status::Fail, format!("cannot start the engine: {e}"));
            return;
        }
    };
    let ids = t.encode(&opts.prompt, true, true);
    if ids.is_empty() {
        d.add(S, Status::Fail, "the sample prompt tokenized to nothing");
        return;
    }
    let params = SamplingParams {
        temperature: 0.0,
        max_tokens: Some(opts.gen_tokens),
        ignore_eos: true,
        ..SamplingParams::default()
    };
    let gopts = GenerateOptions {
        monitor: MonitorConfig {
            watch: true,
            ..MonitorConfig::default()
        },
        full_logits: false,
    };
    match generate_with(&mut engine, t, &ids, &params, &gopts, |_| {}) {
        Ok(out) => {
            for w in &out.warnings {
                d.add(S, Status::Warn, w.to_string());
            }
            if out.warnings.is_empty() {
                d.add(
                    S,
                    Status::Pass,
                    format!(
                        "{:?} -> {:?} ({} tokens, greedy); no monitor fired",
                        opts.prompt,
                        out.text,
                        out.ids.len()
                    ),
                );
            }
        }
        Err(GenerateError::Monitor(w)) => d.add(S, Status::Fail, w.to_string()),
        Err(e) => d.add(S, Status::Fail, format!("generation failed: {e}")),
    }
}
