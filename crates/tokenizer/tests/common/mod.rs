//! Shared test helpers: locating models and fixtures.
#![allow(dead_code)]

use std::path::PathBuf;

use lockstep_gguf::GgufFile;
use lockstep_tokenizer::Tokenizer;

pub const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const GEMMA3: &str = "gemma-3-270m-q4_k_m.gguf";

/// `$LOCKSTEP_MODELS_DIR`, else `$HOME/.cache/lockstep/models`.
pub fn models_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("LOCKSTEP_MODELS_DIR") {
        return PathBuf::from(d);
    }
    let home =
        std::env::var_os("HOME").expect("HOME is not set and LOCKSTEP_MODELS_DIR is not set");
    PathBuf::from(home).join(".cache/lockstep/models")
}

pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures"
    ))
}

/// Opens a model; a missing file fails the test with instructions (never a silent skip).
pub fn open_model(file: &str) -> GgufFile {
    let path = models_dir().join(file);
    assert!(
        path.exists(),
        "model file {} is missing: run `lockstep fetch` to download the test models \
         (or set LOCKSTEP_MODELS_DIR to the directory holding them)",
        path.display()
    );
    GgufFile::open(&path).unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()))
}

pub fn load(file: &str) -> (GgufFile, Tokenizer) {
    let f = open_model(file);
    let t = Tokenizer::from_metadata(f.metadata())
        .unwrap_or_else(|e| panic!("cannot build tokenizer for {file}: {e}"));
    (f, t)
}

pub fn read_json(rel: &str) -> serde_json::Value {
    let path = fixtures_dir().join(rel);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read fixture {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad JSON in {}: {e}", path.display()))
}

pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("id list")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
