//! `lockstep inspect`: what is in a GGUF file, and a tensor dequantized to safetensors.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use lockstep_gguf::{GgufFile, TensorInfo, Value};
use serde_json::{json, Map, Value as Json};

/// Appends a line to a `String` (which cannot fail, hence the ignored result).
macro_rules! out {
    ($o:expr) => {{
        $o.push('\n');
    }};
    ($o:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($o, $($arg)*);
    }};
}

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// A GGUF path, or a short name (smollm2, gemma3), fetched if missing.
    pub model: String,
    /// Print one JSON object instead of the human-readable report.
    #[arg(long)]
    pub json: bool,
    /// Show only this tensor (with --dequant: the tensor to write).
    #[arg(long, value_name = "NAME")]
    pub tensor: Option<String>,
    /// Write the tensor dequantized to f32 into this safetensors file (row-major: the shape is
    /// ggml's dims reversed).
    #[arg(long, value_name = "OUT.safetensors", requires = "tensor")]
    pub dequant: Option<PathBuf>,
    /// Where fetched models live (default: $LOCKSTEP_MODELS_DIR, else
    /// $XDG_CACHE_HOME/lockstep/models, else ~/.cache/lockstep/models).
    #[arg(long)]
    pub models_dir: Option<PathBuf>,
}

/// Array items shown in summaries (human and JSON).
const ARRAY_ITEMS: usize = 3;
/// Longer strings are cut in the human report (chat templates run to kilobytes).
const STRING_CHARS: usize = 120;

pub fn run(args: InspectArgs) -> Result<()> {
    let path = crate::resolve_model(&args.model, args.models_dir.as_deref())?;
    // Context is the file name alone so a malformed file prints as one line:
    // `error: <file>: <GgufError message>`.
    let file = GgufFile::open(&path).with_context(|| path.display().to_string())?;

    if let Some(name) = &args.tensor {
        let t = file
            .tensor_info(name)
            .with_context(|| path.display().to_string())?;
        if let Some(out) = &args.dequant {
            return dequant(&file, t, out);
        }
        let mut o = String::new();
        if args.json {
            out!(
                o,
                "{}",
                serde_json::to_string_pretty(&tensor_json(&file, t))?
            );
        } else {
            tensor_table(&mut o, &file, std::slice::from_ref(t));
        }
        return emit(&o);
    }
    if args.json {
        let mut o = serde_json::to_string_pretty(&report_json(&file))?;
        o.push('\n');
        emit(&o)
    } else {
        emit(&report(&file))
    }
}

/// Writes the finished report to stdout. A closed pipe (`lockstep inspect x | head`) is not an
/// error worth reporting.
fn emit(text: &str) -> Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// ggml dims as shape text, in ggml order (`ne[0]` first), as llama.cpp and gguf-py print it.
fn dims_text(dims: &[u64]) -> String {
    let d: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    format!("[{}]", d.join(", "))
}

/// One line per value: long strings cut, arrays as `[type; length] [first items, ...]`.
fn human_value(v: &Value) -> String {
    match v {
        Value::String(s) if s.chars().count() > STRING_CHARS => {
            let head: String = s.chars().take(STRING_CHARS).collect();
            format!("{head:?}... ({} bytes)", s.len())
        }
        Value::Array(t, items) => {
            let mut shown: Vec<String> = items.iter().take(ARRAY_ITEMS).map(human_value).collect();
            if items.len() > ARRAY_ITEMS {
                shown.push("...".into());
            }
            format!("[{t}; {}] [{}]", items.len(), shown.join(", "))
        }
        _ => v.summary(ARRAY_ITEMS),
    }
}

fn mib(n: u64) -> String {
    format!("{:.1} MiB", n as f64 / (1024.0 * 1024.0))
}

fn by_type(file: &GgufFile) -> BTreeMap<&'static str, (usize, u64)> {
    let mut m: BTreeMap<&'static str, (usize, u64)> = BTreeMap::new();
    for t in file.tensors() {
        let e = m.entry(t.ty.name()).or_default();
        e.0 += 1;
        e.1 += t.size;
    }
    m
}

fn report(file: &GgufFile) -> String {
    let mut o = String::new();
    let h = file.header();
    out!(o, "file:         {}", file.path().display());
    out!(o, "version:      {}", h.version);
    out!(
        o,
        "size:         {} bytes ({})",
        h.file_len,
        mib(h.file_len)
    );
    out!(o, "alignment:    {}", h.alignment);
    out!(o, "data offset:  {}", h.data_offset);
    out!(
        o,
        "tensors:      {} ({} bytes of data)",
        file.tensors().len(),
        file.tensor_bytes()
    );
    out!(o, "metadata:     {} keys", file.metadata().len());
    let key_w = file
        .metadata()
        .iter()
        .map(|(k, _)| k.len())
        .max()
        .unwrap_or(0);
    for (k, v) in file.metadata().iter() {
        let ty = v.value_type().name();
        out!(o, "  {k:<key_w$}  {ty:<6}  {}", human_value(v));
    }
    out!(o);
    tensor_table(&mut o, file, file.tensors());
    out!(o);
    out!(o, "by type:");
    for (ty, (count, bytes)) in by_type(file) {
        let noun = if count == 1 { "tensor" } else { "tensors" };
        out!(
            o,
            "  {ty:<8} {count:>5} {noun:<8} {bytes:>12} bytes ({})",
            mib(bytes)
        );
    }
    out!(
        o,
        "  {:<8} {:>5} {:<8} {:>12} bytes ({})",
        "total",
        file.tensors().len(),
        "tensors",
        file.tensor_bytes(),
        mib(file.tensor_bytes())
    );
    o
}

fn tensor_table(o: &mut String, file: &GgufFile, tensors: &[TensorInfo]) {
    let h = file.header();
    let name_w = tensors
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let shapes: Vec<String> = tensors.iter().map(|t| dims_text(&t.dims)).collect();
    let shape_w = shapes.iter().map(|s| s.len()).max().unwrap_or(5).max(5);
    out!(
        o,
        "{:<name_w$}  {:<7} {:<shape_w$} {:>12} {:>12}",
        "name",
        "type",
        "shape",
        "bytes",
        "file offset"
    );
    for (t, shape) in tensors.iter().zip(&shapes) {
        out!(
            o,
            "{:<name_w$}  {:<7} {:<shape_w$} {:>12} {:>12}",
            t.name,
            t.ty.name(),
            shape,
            t.size,
            h.data_offset + t.offset
        );
    }
}

/// A metadata value as JSON: scalars as themselves (non-finite floats become null, as JSON
/// has no NaN), arrays summarised to their element type, length and first items.
fn value_json(v: &Value) -> Json {
    match v {
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        // Through the shortest decimal form, so 1e-5f32 prints as 0.00001, not as the f64
        // 9.999999747378752e-6.
        Value::F32(x) => json!(x.to_string().parse::<f64>().ok().filter(|v| v.is_finite())),
        Value::Bool(x) => json!(x),
        Value::String(s) => json!(s),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::F64(x) => json!(x),
        Value::Array(t, items) => json!({
            "element_type": t.name(),
            "length": items.len(),
            "first": items.iter().take(ARRAY_ITEMS).map(value_json).collect::<Vec<_>>(),
        }),
    }
}

fn tensor_json(file: &GgufFile, t: &TensorInfo) -> Json {
    json!({
        "name": t.name,
        "type": t.ty.name(),
        "dims": t.dims,
        "n_elements": t.n_elements(),
        "bytes": t.size,
        "offset": t.offset,
        "file_offset": file.header().data_offset + t.offset,
    })
}

fn report_json(file: &GgufFile) -> Json {
    let h = file.header();
    let mut metadata = Map::new();
    let mut metadata_types = Map::new();
    for (k, v) in file.metadata().iter() {
        metadata.insert(k.to_string(), value_json(v));
        metadata_types.insert(k.to_string(), json!(v.value_type().name()));
    }
    let mut types = Map::new();
    for (ty, (count, bytes)) in by_type(file) {
        types.insert(ty.to_string(), json!({ "count": count, "bytes": bytes }));
    }
    json!({
        "file": file.path().display().to_string(),
        "version": h.version,
        "file_size": h.file_len,
        "alignment": h.alignment,
        "data_offset": h.data_offset,
        "tensor_count": file.tensors().len(),
        "tensor_data_bytes": file.tensor_bytes(),
        "metadata_count": file.metadata().len(),
        "metadata": metadata,
        "metadata_types": metadata_types,
        "tensors": file.tensors().iter().map(|t| tensor_json(file, t)).collect::<Vec<_>>(),
        "by_type": types,
    })
}

fn dequant(file: &GgufFile, t: &TensorInfo, out: &Path) -> Result<()> {
    let n = usize::try_from(t.n_elements()).context("tensor too large for this machine")?;
    let values = lockstep_quant::dequantize(t.ty, file.tensor_data(t), n)
        .with_context(|| format!("{}: tensor `{}`", file.path().display(), t.name))?;
    // safetensors is row-major: its first dimension is ggml's last.
    let shape: Vec<usize> = t
        .dims
        .iter()
        .rev()
        .map(|&d| usize::try_from(d))
        .collect::<Result<_, _>>()
        .context("dimension too large for this machine")?;
    let bytes: Vec<u8> = values.iter().flat_map(|x| x.to_le_bytes()).collect();
    drop(values);
    let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), &bytes)
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let meta: HashMap<String, String> = HashMap::from([
        ("source".to_string(), file.path().display().to_string()),
        ("ggml_type".to_string(), t.ty.name().to_string()),
        ("ggml_dims".to_string(), dims_text(&t.dims)),
    ]);
    safetensors::serialize_to_file([(t.name.as_str(), view)], &Some(meta), out)
        .map_err(|e| anyhow::anyhow!("{e:?}"))
        .with_context(|| format!("writing {}", out.display()))?;
    println!(
        "wrote {}: `{}` {} {} -> F32 shape {:?}",
        out.display(),
        t.name,
        t.ty.name(),
        dims_text(&t.dims),
        shape
    );
    Ok(())
}
