//! `lockstep synth`: a GGUF with the exact shape and metadata of a known model and random
//! weights, for benchmarks and GPU checks where the real file cannot travel.
//!
//! Shapes are built in (the published configs). Metadata other than the shape (the tokenizer
//! above all) is copied from the real file where this project has one (`smollm2`, `gemma3`:
//! every key of the real file, so the tokenizer and chat template are the real ones); the
//! other families get a small synthetic SentencePiece vocabulary of the right size (byte
//! tokens plus numbered pieces), enough to run token ids and byte-level text.
//!
//! Quant types follow llama.cpp's rules: a plain type (`Q8_0`, `Q4_0`, ...) applies to every
//! matrix, except that the output projection (or the tied embedding) takes Q6_K unless the
//! type is 8-bit or wider; `Q4_K_M` is Q4_K with Q6_K for the output, and for `attn_v` and
//! `ffn_down` in the layers llama.cpp gives more bits. A K-quant that does not fit a row length
//! falls back as llama.cpp does (Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0, Q2_K/Q3_K/IQ4_XS
//! to IQ4_NL). Vectors (norms, biases) stay F32.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use lockstep_gguf::{GgmlType, GgufFile, GgufWriter, Metadata, Value, ValueType};
use rayon::prelude::*;

#[derive(Args, Debug)]
pub struct SynthArgs {
    /// The model whose shape to copy: llama-8b, llama-1b, smollm2, gemma3, qwen2-0.5b.
    #[arg(long = "like")]
    pub like: String,
    /// Weight type: Q4_K_M (llama.cpp's mixture) or one GGUF type (Q8_0, Q4_0, Q4_1, Q5_0,
    /// Q5_1, Q2_K..Q6_K, IQ4_NL, IQ4_XS, F16, BF16, F32).
    #[arg(long = "type", default_value = "Q4_K_M")]
    pub ty: String,
    /// Keep only the first N layers (a cut-down model for device checks).
    #[arg(long)]
    pub layers: Option<usize>,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the metadata only, no tensors (to carry a real tokenizer to a machine that lacks
    /// the real model, for `--metadata-from` there).
    #[arg(long)]
    pub metadata_only: bool,
    /// Take the non-shape metadata from this GGUF instead of the real model in the models
    /// directory (smollm2, gemma3 only).
    #[arg(long)]
    pub metadata_from: Option<PathBuf>,
    /// Where fetched models live (default: $LOCKSTEP_MODELS_DIR or ~/.cache/lockstep/models).
    #[arg(long)]
    pub models_dir: Option<PathBuf>,
    /// Output file.
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
}

/// The published shape of a model family member.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    pub name: &'static str,
    pub arch: &'static str,
    pub n_layers: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub n_vocab: usize,
    pub n_ctx: usize,
    pub rope_base: f32,
    pub rms_eps: f32,
    pub tied: bool,
    /// The real model this project fetches (short name), whose metadata is copied.
    pub real: Option<&'static str>,
}

pub const SHAPES: &[Shape] = &[
    Shape {
        name: "llama-8b",
        arch: "llama",
        n_layers: 32,
        n_embd: 4096,
        n_ff: 14336,
        n_heads: 32,
        n_kv_heads: 8,
        head_dim: 128,
        n_vocab: 128256,
        n_ctx: 131072,
        rope_base: 500000.0,
        rms_eps: 1e-5,
        tied: false,
        real: None,
    },
    Shape {
        name: "llama-1b",
        arch: "llama",
        n_layers: 16,
        n_embd: 2048,
        n_ff: 8192,
        n_heads: 32,
        n_kv_heads: 8,
        head_dim: 64,
        n_vocab: 128256,
        n_ctx: 131072,
        rope_base: 500000.0,
        rms_eps: 1e-5,
        tied: true,
        real: None,
    },
    Shape {
        name: "smollm2",
        arch: "llama",
        n_layers: 30,
        n_embd: 576,
        n_ff: 1536,
        n_heads: 9,
        n_kv_heads: 3,
        head_dim: 64,
        n_vocab: 49152,
        n_ctx: 8192,
        rope_base: 100000.0,
        rms_eps: 1e-5,
        tied: true,
        real: Some("smollm2"),
    },
    Shape {
        name: "gemma3",
        arch: "gemma3",
        n_layers: 18,
        n_embd: 640,
        n_ff: 2048,
        n_heads: 4,
        n_kv_heads: 1,
        head_dim: 256,
        n_vocab: 262144,
        n_ctx: 32768,
        rope_base: 1000000.0,
        rms_eps: 1e-6,
        tied: true,
        real: Some("gemma3"),
    },
    Shape {
        name: "qwen2-0.5b",
        arch: "qwen2",
        n_layers: 24,
        n_embd: 896,
        n_ff: 4864,
        n_heads: 14,
        n_kv_heads: 2,
        head_dim: 64,
        n_vocab: 151936,
        n_ctx: 32768,
        rope_base: 1000000.0,
        rms_eps: 1e-6,
        tied: true,
        real: None,
    },
];

pub fn shape(name: &str) -> Result<Shape> {
    match SHAPES.iter().find(|s| s.name == name) {
        Some(s) => Ok(*s),
        None => bail!(
            "unknown shape `{name}` (known: {})",
            SHAPES.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// The requested weight types: one type, or llama.cpp's Q4_K_M mixture.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TypeSpec {
    Plain(GgmlType),
    Q4KM,
}

pub fn parse_type(s: &str) -> Result<TypeSpec> {
    if s.eq_ignore_ascii_case("Q4_K_M") {
        return Ok(TypeSpec::Q4KM);
    }
    let Some(ty) = GgmlType::from_name(s) else {
        bail!("unknown type `{s}` (Q4_K_M, Q8_0, Q4_0, Q4_K, ...)");
    };
    if !lockstep_backend_cpu_supported(ty) {
        bail!("type {ty} cannot be written (no quantizer or no kernels for it)");
    }
    Ok(TypeSpec::Plain(ty))
}

fn lockstep_backend_cpu_supported(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        F32 | F16
            | Bf16
            | Q4_0
            | Q4_1
            | Q5_0
            | Q5_1
            | Q8_0
            | Q2K
            | Q3K
            | Q4K
            | Q5K
            | Q6K
            | Iq4Nl
            | Iq4Xs
    )
}

/// What a matrix does, for the type rules.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Role {
    /// The output projection, or the embedding table when it is tied to it.
    Output,
    Embedding,
    AttnV,
    FfnDown,
    Other,
}

/// llama.cpp's `use_more_bits`.
fn use_more_bits(layer: usize, n_layers: usize) -> bool {
    let eighth = n_layers / 8;
    match layer.checked_sub(eighth) {
        None => true,
        Some(past) => layer >= 7 * n_layers / 8 || past % 3 == 2,
    }
}

/// The type llama.cpp would give a matrix with rows of `cols` values.
pub fn type_for(
    spec: TypeSpec,
    role: Role,
    layer: usize,
    n_layers: usize,
    cols: usize,
) -> GgmlType {
    use GgmlType::*;
    let wide = |t: GgmlType| matches!(t, Q8_0 | F16 | Bf16 | F32);
    let ty = match (spec, role) {
        (TypeSpec::Plain(t), Role::Output) if !wide(t) => Q6K,
        (TypeSpec::Plain(t), _) => t,
        (TypeSpec::Q4KM, Role::Output) => Q6K,
        (TypeSpec::Q4KM, Role::AttnV | Role::FfnDown) if use_more_bits(layer, n_layers) => Q6K,
        (TypeSpec::Q4KM, _) => Q4K,
    };
    if cols.is_multiple_of(ty.block_size()) {
        return ty;
    }
    match ty {
        Q4K => Q5_0,
        Q5K => Q5_1,
        Q6K => Q8_0,
        Q2K | Q3K | Iq4Xs => Iq4Nl,
        other => other,
    }
}

/// One tensor to write: name, GGUF dims, role, layer.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorPlan {
    pub name: String,
    pub dims: Vec<u64>,
    pub role: Role,
    pub layer: usize,
    /// A norm weight (values near 1) rather than a matrix or bias (values near 0).
    pub norm: bool,
}

pub fn tensor_plan(s: &Shape, n_layers: usize) -> Vec<TensorPlan> {
    let (d, q, kv, ff, v, hd) = (
        s.n_embd as u64,
        (s.n_heads * s.head_dim) as u64,
        (s.n_kv_heads * s.head_dim) as u64,
        s.n_ff as u64,
        s.n_vocab as u64,
        s.head_dim as u64,
    );
    let t = |name: String, dims: Vec<u64>, role: Role, layer: usize, norm: bool| TensorPlan {
        name,
        dims,
        role,
        layer,
        norm,
    };
    let embd_role = if s.tied {
        Role::Output
    } else {
        Role::Embedding
    };
    let mut out = vec![t(
        "token_embd.weight".into(),
        vec![d, v],
        embd_role,
        0,
        false,
    )];
    for i in 0..n_layers {
        let n = |x: &str| format!("blk.{i}.{x}");
        out.push(t(n("attn_norm.weight"), vec![d], Role::Other, i, true));
        out.push(t(n("attn_q.weight"), vec![d, q], Role::Other, i, false));
        out.push(t(n("attn_k.weight"), vec![d, kv], Role::Other, i, false));
        out.push(t(n("attn_v.weight"), vec![d, kv], Role::AttnV, i, false));
        out.push(t(
            n("attn_output.weight"),
            vec![q, d],
            Role::Other,
            i,
            false,
        ));
        if s.arch == "qwen2" {
            out.push(t(n("attn_q.bias"), vec![q], Role::Other, i, false));
            out.push(t(n("attn_k.bias"), vec![kv], Role::Other, i, false));
            out.push(t(n("attn_v.bias"), vec![kv], Role::Other, i, false));
        }
        if s.arch == "gemma3" {
            out.push(t(n("attn_q_norm.weight"), vec![hd], Role::Other, i, true));
            out.push(t(n("attn_k_norm.weight"), vec![hd], Role::Other, i, true));
            out.push(t(
                n("post_attention_norm.weight"),
                vec![d],
                Role::Other,
                i,
                true,
            ));
            out.push(t(n("post_ffw_norm.weight"), vec![d], Role::Other, i, true));
        }
        out.push(t(n("ffn_norm.weight"), vec![d], Role::Other, i, true));
        out.push(t(n("ffn_gate.weight"), vec![d, ff], Role::Other, i, false));
        out.push(t(n("ffn_up.weight"), vec![d, ff], Role::Other, i, false));
        out.push(t(
            n("ffn_down.weight"),
            vec![ff, d],
            Role::FfnDown,
            i,
            false,
        ));
    }
    out.push(t(
        "output_norm.weight".into(),
        vec![d],
        Role::Other,
        0,
        true,
    ));
    if !s.tied {
        out.push(t(
            "output.weight".into(),
            vec![d, v],
            Role::Output,
            0,
            false,
        ));
    }
    out
}

/// Shape metadata (`{arch}.*`) of a shape cut to `n_layers`.
fn shape_metadata(s: &Shape, n_layers: usize, md: &mut Metadata) {
    let a = s.arch;
    let u = |v: usize| Value::U32(v as u32);
    md.insert("general.architecture", Value::String(a.into()));
    md.insert(format!("{a}.block_count"), u(n_layers));
    md.insert(format!("{a}.context_length"), u(s.n_ctx));
    md.insert(format!("{a}.embedding_length"), u(s.n_embd));
    md.insert(format!("{a}.feed_forward_length"), u(s.n_ff));
    md.insert(format!("{a}.attention.head_count"), u(s.n_heads));
    md.insert(format!("{a}.attention.head_count_kv"), u(s.n_kv_heads));
    md.insert(format!("{a}.attention.key_length"), u(s.head_dim));
    md.insert(format!("{a}.attention.value_length"), u(s.head_dim));
    md.insert(format!("{a}.rope.dimension_count"), u(s.head_dim));
    md.insert(format!("{a}.rope.freq_base"), Value::F32(s.rope_base));
    md.insert(
        format!("{a}.attention.layer_norm_rms_epsilon"),
        Value::F32(s.rms_eps),
    );
    md.insert(format!("{a}.vocab_size"), u(s.n_vocab));
    if a == "gemma3" {
        md.insert(format!("{a}.attention.sliding_window"), u(512));
    }
    md.insert("general.quantization_version", Value::U32(2));
}

/// A SentencePiece-style vocabulary of `n` tokens: unk, bos, eos, the 256 byte tokens, then
/// numbered pieces.
fn synthetic_tokenizer(n: usize, md: &mut Metadata) {
    let mut tokens = Vec::with_capacity(n);
    let mut types = Vec::with_capacity(n);
    let mut scores = Vec::with_capacity(n);
    for (t, ty) in [("<unk>", 2), ("<s>", 3), ("</s>", 3)] {
        tokens.push(Value::String(t.into()));
        types.push(Value::I32(ty));
        scores.push(Value::F32(0.0));
    }
    for b in 0..256 {
        tokens.push(Value::String(format!("<0x{b:02X}>")));
        types.push(Value::I32(6));
        scores.push(Value::F32(0.0));
    }
    let mut i = 0usize;
    while tokens.len() < n {
        tokens.push(Value::String(format!("\u{2581}t{i}")));
        types.push(Value::I32(1));
        scores.push(Value::F32(-(i as f32)));
        i += 1;
    }
    tokens.truncate(n);
    types.truncate(n);
    scores.truncate(n);
    md.insert("tokenizer.ggml.model", Value::String("llama".into()));
    md.insert(
        "tokenizer.ggml.tokens",
        Value::Array(ValueType::String, tokens),
    );
    md.insert(
        "tokenizer.ggml.scores",
        Value::Array(ValueType::F32, scores),
    );
    md.insert(
        "tokenizer.ggml.token_type",
        Value::Array(ValueType::I32, types),
    );
    md.insert("tokenizer.ggml.bos_token_id", Value::U32(1));
    md.insert("tokenizer.ggml.eos_token_id", Value::U32(2));
    md.insert("tokenizer.ggml.unknown_token_id", Value::U32(0));
}

/// splitmix64: a small, fast, well-mixed generator (weights only need to be arbitrary).
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Random values for one tensor: norms near 1, everything else uniform with std 0.02 (a
/// typical init; keeps activations of a deep random model finite).
fn random_values(t: &TensorPlan, seed: u64, index: usize) -> Vec<f32> {
    let n: u64 = t.dims.iter().product();
    let row = t.dims.first().copied().unwrap_or(1).max(1) as usize;
    let mut out = vec![0f32; n as usize];
    let half_width = 0.02f32 * 3f32.sqrt();
    out.par_chunks_mut(row * 64)
        .enumerate()
        .for_each(|(c, chunk)| {
            let mut st = seed ^ ((index as u64) << 40) ^ (c as u64).wrapping_mul(0x1000_0000_01B3);
            for v in chunk.iter_mut() {
                let u = (splitmix(&mut st) >> 40) as f32 / (1u64 << 24) as f32; // [0, 1)
                let x = (2.0 * u - 1.0) * half_width;
                *v = if t.norm { 1.0 + x } else { x };
            }
        });
    out
}

fn encode(ty: GgmlType, values: &[f32], row: usize) -> Result<Vec<u8>> {
    let row_bytes = ty.row_bytes(row as u64).context("row bytes")? as usize;
    let rows = values.len() / row.max(1);
    let mut out = vec![0u8; rows * row_bytes];
    out.par_chunks_mut(row_bytes * 64)
        .zip(values.par_chunks(row * 64))
        .try_for_each(|(dst, src)| lockstep_quant::quantize_row(ty, src, dst))?;
    Ok(out)
}

/// Builds the file in memory.
pub fn synthesize(
    s: &Shape,
    spec: TypeSpec,
    layers: Option<usize>,
    seed: u64,
    donor: Option<&Metadata>,
    metadata_only: bool,
) -> Result<GgufWriter> {
    let n_layers = match layers {
        Some(0) => bail!("--layers must be at least 1"),
        Some(n) if n > s.n_layers => {
            bail!("{} has {} layers; --layers {n} is more", s.name, s.n_layers)
        }
        Some(n) => n,
        None => s.n_layers,
    };
    let mut w = GgufWriter::new();
    match donor {
        Some(md) => {
            if md.get("general.architecture").and_then(|v| v.as_str()) != Some(s.arch) {
                bail!("the metadata donor is not a {} model", s.arch);
            }
            for (k, v) in md.iter() {
                w.metadata.insert(k, v.clone());
            }
        }
        None => synthetic_tokenizer(s.n_vocab, &mut w.metadata),
    }
    w.metadata.insert(
        "general.name",
        Value::String(format!("synthetic {} (random weights)", s.name)),
    );
    shape_metadata(s, n_layers, &mut w.metadata);
    if metadata_only {
        return Ok(w);
    }
    for (i, t) in tensor_plan(s, n_layers).iter().enumerate() {
        let row = t.dims[0] as usize;
        let ty = if t.dims.len() == 1 {
            GgmlType::F32
        } else {
            // The full model's rule: a cut model keeps the types its layers have in the whole.
            type_for(spec, t.role, t.layer, s.n_layers, row)
        };
        let values = random_values(t, seed, i);
        let data = encode(ty, &values, row)?;
        w.add_tensor(t.name.clone(), &t.dims, ty, data)?;
    }
    Ok(w)
}

pub fn run(args: SynthArgs) -> Result<()> {
    let s = shape(&args.like)?;
    let spec = parse_type(&args.ty)?;
    let donor_file = match (&args.metadata_from, s.real) {
        (Some(p), _) => Some(GgufFile::open(p).with_context(|| format!("{}", p.display()))?),
        (None, Some(real)) => {
            let path = lockstep_fetch::resolve_model(real, args.models_dir.as_deref())
                .with_context(|| {
                    format!(
                        "{}: the real model's metadata (tokenizer) is copied from it",
                        s.name
                    )
                })?;
            Some(GgufFile::open(&path).with_context(|| format!("{}", path.display()))?)
        }
        (None, None) => None,
    };
    let t0 = std::time::Instant::now();
    let w = synthesize(
        &s,
        spec,
        args.layers,
        args.seed,
        donor_file.as_ref().map(|f| f.metadata()),
        args.metadata_only,
    )?;
    w.write_file(&args.output)?;
    let bytes: usize = w.tensors.iter().map(|t| t.data.len()).sum();
    eprintln!(
        "wrote {}: {} like {}, {} tensors, {:.1} MiB of weights, {:.1}s",
        args.output.display(),
        args.ty,
        s.name,
        w.tensors.len(),
        bytes as f64 / (1024.0 * 1024.0),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_k_m_follows_llama_cpp_rules_and_fallbacks() {
        use GgmlType::*;
        // gemma3-270m's real Q4_K_M file: 640-wide rows cannot hold K blocks.
        assert_eq!(type_for(TypeSpec::Q4KM, Role::Output, 0, 18, 640), Q8_0);
        assert_eq!(type_for(TypeSpec::Q4KM, Role::Other, 0, 18, 640), Q5_0);
        assert_eq!(type_for(TypeSpec::Q4KM, Role::AttnV, 0, 18, 640), Q8_0);
        assert_eq!(type_for(TypeSpec::Q4KM, Role::AttnV, 3, 18, 640), Q5_0);
        assert_eq!(type_for(TypeSpec::Q4KM, Role::FfnDown, 1, 18, 2048), Q6K);
        assert_eq!(type_for(TypeSpec::Q4KM, Role::Other, 0, 18, 1024), Q4K);
        // The 8B shape: everything fits.
        assert_eq!(type_for(TypeSpec::Q4KM, Role::Output, 0, 32, 4096), Q6K);
        assert_eq!(type_for(TypeSpec::Q4KM, Role::Embedding, 0, 32, 4096), Q4K);
        assert_eq!(type_for(TypeSpec::Q4KM, Role::FfnDown, 6, 32, 14336), Q6K);
        assert_eq!(type_for(TypeSpec::Q4KM, Role::FfnDown, 5, 32, 14336), Q4K);
        // SmolLM2 Q4_1 as llama.cpp writes it: the tied embedding is Q8_0.
        assert_eq!(
            type_for(TypeSpec::Plain(Q4_1), Role::Output, 0, 30, 576),
            Q8_0
        );
        assert_eq!(
            type_for(TypeSpec::Plain(Q4_1), Role::Other, 0, 30, 576),
            Q4_1
        );
        assert_eq!(
            type_for(TypeSpec::Plain(Q8_0), Role::Output, 0, 30, 576),
            Q8_0
        );
        assert_eq!(
            type_for(TypeSpec::Plain(Q2K), Role::Other, 0, 30, 576),
            Iq4Nl
        );
    }

    #[test]
    fn use_more_bits_matches_llama_cpp_for_32_layers() {
        let more: Vec<usize> = (0..32).filter(|&i| use_more_bits(i, 32)).collect();
        assert_eq!(
            more,
            vec![0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
        );
    }

    #[test]
    fn plans_have_every_tensor_the_graph_loads() {
        let s = shape("qwen2-0.5b").unwrap();
        let p = tensor_plan(&s, 2);
        assert!(p
            .iter()
            .any(|t| t.name == "blk.1.attn_k.bias" && t.dims == vec![128]));
        assert!(!p.iter().any(|t| t.name == "output.weight"));
        let s = shape("llama-8b").unwrap();
        let p = tensor_plan(&s, 32);
        assert_eq!(p.len(), 1 + 32 * 9 + 2);
        let out = p.iter().find(|t| t.name == "output.weight").unwrap();
        assert_eq!(out.dims, vec![4096, 128256]);
        let s = shape("gemma3").unwrap();
        let p = tensor_plan(&s, 1);
        assert!(p
            .iter()
            .any(|t| t.name == "blk.0.attn_q_norm.weight" && t.dims == vec![256]));
        assert!(shape("llama-70b").is_err());
        assert!(parse_type("Q4_K_M").is_ok());
        assert!(parse_type("q8_0").is_ok());
        assert!(parse_type("IQ2_XXS").is_err());
        assert!(parse_type("nonsense").is_err());
    }
}
