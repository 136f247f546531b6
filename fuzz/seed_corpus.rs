//! Writes the seed corpus for `gguf_parse` from real GGUF headers.
//!
//! Real files are megabytes to hundreds of megabytes, far past a useful fuzz input size, so each
//! real header is shrunk into small *valid* files that keep every real key, value type and
//! tensor type: arrays capped to a few items, every tensor cut to one block, zero data. The
//! fuzzer then mutates structures that look like what llama.cpp writes. Also written: the raw
//! header bytes of the small fixture files (valid up to their missing tensor data).
//!
//! Usage: `cargo run --release --bin seed_corpus [OUT_DIR]` (default `corpus/gguf_parse`).
//! Reads `$LOCKSTEP_MODELS_DIR` (else `$HOME/.cache/lockstep/models`) and `../../shared/fixtures`.

use std::path::{Path, PathBuf};

use lockstep_gguf::{GgufFile, GgufWriter, Value};

/// Longest seed worth writing: libFuzzer is run with `-max_len=65536`.
const MAX_SEED: usize = 65536;

fn cap_arrays(v: &Value, max_items: usize) -> Value {
    match v {
        Value::Array(t, items) => Value::Array(
            *t,
            items
                .iter()
                .take(max_items)
                .map(|x| cap_arrays(x, max_items))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// A valid file with `src`'s metadata (arrays capped) and up to `max_tensors` of its tensors,
/// each cut to a single block so the file stays small.
fn shrink(src: &GgufFile, max_items: usize, max_tensors: usize) -> Result<Vec<u8>, String> {
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata().iter() {
        w.set(k, cap_arrays(v, max_items));
    }
    for t in src.tensors().iter().take(max_tensors) {
        let mut dims = vec![1u64; t.dims.len().max(1)];
        dims[0] = t.ty.block_size() as u64;
        let data = vec![0u8; t.ty.type_size()];
        w.add_tensor(t.name.clone(), &dims, t.ty, data)
            .map_err(|e| e.to_string())?;
    }
    Ok(w.to_bytes())
}

fn gguf_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn main() -> Result<(), String> {
    let out_dir = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("corpus/gguf_parse"));
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;

    let models = std::env::var_os("LOCKSTEP_MODELS_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/lockstep/models"))
        });
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/tiny-llama");

    let mut inputs = gguf_files(&fixtures);
    if let Some(m) = &models {
        inputs.extend(gguf_files(m));
    }
    if inputs.is_empty() {
        return Err("no GGUF files found: run `lockstep fetch all` first".into());
    }

    let mut written = 0;
    for path in &inputs {
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("model")
            .to_string();
        let file = GgufFile::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut seeds: Vec<(String, Vec<u8>)> = Vec::new();
        for (max_items, max_tensors, tag) in [(4, usize::MAX, "all"), (2, 3, "few"), (0, 0, "meta")]
        {
            let bytes = shrink(&file, max_items, max_tensors)?;
            seeds.push((format!("{stem}.{tag}"), bytes.clone()));
            // Version 2 has the same layout; seed it so both paths get mutated.
            let mut v2 = bytes;
            v2[4..8].copy_from_slice(&2u32.to_le_bytes());
            seeds.push((format!("{stem}.{tag}.v2"), v2));
        }
        // The raw header as written by llama.cpp's tools, where it is small enough.
        let data_offset = file.header().data_offset as usize;
        if data_offset <= MAX_SEED {
            seeds.push((
                format!("{stem}.rawheader"),
                file.bytes()[..data_offset].to_vec(),
            ));
        }
        for (name, bytes) in seeds {
            if bytes.len() > MAX_SEED {
                eprintln!("skipping {name}: {} bytes", bytes.len());
                continue;
            }
            let p = out_dir.join(name);
            std::fs::write(&p, &bytes).map_err(|e| format!("{}: {e}", p.display()))?;
            written += 1;
        }
    }
    eprintln!("wrote {written} seeds to {}", out_dir.display());
    Ok(())
}
