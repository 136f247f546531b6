//! Shared helpers for the GGUF integration tests: where the real files are, and a small
//! independent walker that records where each field of a valid header sits, so the malformed
//! corpus can corrupt exactly one field of a real file.
#![allow(dead_code)] // each test binary uses a different subset

use std::path::PathBuf;

/// The two real models (see `lockstep fetch`).
pub const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const GEMMA3: &str = "gemma-3-270m-q4_k_m.gguf";

/// The 15 tiny-llama fixture types.
pub const TINY_TYPES: [&str; 15] = [
    "BF16", "F16", "F32", "IQ4_NL", "IQ4_XS", "Q2_K", "Q3_K", "Q4_0", "Q4_1", "Q4_K", "Q5_0",
    "Q5_1", "Q5_K", "Q6_K", "Q8_0",
];

pub fn models_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("LOCKSTEP_MODELS_DIR") {
        return PathBuf::from(d);
    }
    let home =
        std::env::var_os("HOME").expect("HOME is not set and LOCKSTEP_MODELS_DIR is not set");
    PathBuf::from(home).join(".cache/lockstep/models")
}

/// A real model's path. A missing model fails the test: these tests exist to run on real
/// files, so skipping silently would hide that they never ran.
pub fn model(file: &str) -> PathBuf {
    let p = models_dir().join(file);
    assert!(
        p.is_file(),
        "model {} is missing: run `lockstep fetch all` (or `cargo run -p lockstep-cli -- fetch all`) \
         or set LOCKSTEP_MODELS_DIR",
        p.display()
    );
    p
}

pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures"
    ))
}

pub fn fixture(rel: &str) -> PathBuf {
    let p = fixtures_dir().join(rel);
    assert!(
        p.is_file(),
        "fixture {} is missing: the shared fixtures must sit beside the repository \
         (../shared/fixtures); models themselves come from `lockstep fetch`",
        p.display()
    );
    p
}

pub fn tiny_llama(ty: &str) -> PathBuf {
    fixture(&format!("tiny-llama/tiny-llama-{ty}.gguf"))
}

pub fn read(p: &std::path::Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

/// Where one key/value pair sits.
#[derive(Debug, Clone)]
pub struct KvLayout {
    pub key: String,
    /// Start of the key's length prefix.
    pub key_off: usize,
    /// Start of the u32 value type.
    pub type_off: usize,
    pub type_id: u32,
    /// Start of the value (for an array: its element type).
    pub value_off: usize,
}

/// Where one tensor info record sits.
#[derive(Debug, Clone)]
pub struct TensorLayout {
    pub name: String,
    pub info_off: usize,
    pub n_dims_off: usize,
    pub dims_off: usize,
    pub n_dims: u32,
    pub type_off: usize,
    pub offset_off: usize,
}

#[derive(Debug, Clone)]
pub struct Layout {
    pub kvs: Vec<KvLayout>,
    pub tensors: Vec<TensorLayout>,
    /// End of the last tensor info (before padding).
    pub header_end: usize,
}

impl Layout {
    pub fn kv(&self, key: &str) -> &KvLayout {
        self.kvs
            .iter()
            .find(|k| k.key == key)
            .unwrap_or_else(|| panic!("no key {key}"))
    }
    pub fn tensor(&self, name: &str) -> &TensorLayout {
        self.tensors
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("no tensor {name}"))
    }
}

fn rd_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn rd_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Skips one value of type `ty` at `at`, returning the offset after it. Trusts the input: it
/// is only ever run on files the real parser accepted.
fn skip_value(b: &[u8], ty: u32, at: usize) -> usize {
    match ty {
        0 | 1 | 7 => at + 1,
        2 | 3 => at + 2,
        4..=6 => at + 4,
        10..=12 => at + 8,
        8 => at + 8 + rd_u64(b, at) as usize,
        9 => {
            let elem = rd_u32(b, at);
            let n = rd_u64(b, at + 4);
            let mut p = at + 12;
            for _ in 0..n {
                p = skip_value(b, elem, p);
            }
            p
        }
        _ => panic!("layout walker: unknown type {ty}"),
    }
}

/// Records the offset of every field of a valid GGUF header (written independently of the
/// library's parser so the malformed tests do not trust the code under test to find fields).
pub fn layout(b: &[u8]) -> Layout {
    assert_eq!(&b[..4], b"GGUF");
    let n_tensors = rd_u64(b, 8) as usize;
    let n_kv = rd_u64(b, 16) as usize;
    let mut p = 24;
    let mut kvs = Vec::with_capacity(n_kv);
    for _ in 0..n_kv {
        let key_off = p;
        let len = rd_u64(b, p) as usize;
        let key = String::from_utf8(b[p + 8..p + 8 + len].to_vec()).unwrap();
        p += 8 + len;
        let type_off = p;
        let type_id = rd_u32(b, p);
        p += 4;
        let value_off = p;
        p = skip_value(b, type_id, p);
        kvs.push(KvLayout {
            key,
            key_off,
            type_off,
            type_id,
            value_off,
        });
    }
    let mut tensors = Vec::with_capacity(n_tensors);
    for _ in 0..n_tensors {
        let info_off = p;
        let len = rd_u64(b, p) as usize;
        let name = String::from_utf8(b[p + 8..p + 8 + len].to_vec()).unwrap();
        p += 8 + len;
        let n_dims_off = p;
        let n_dims = rd_u32(b, p);
        p += 4;
        let dims_off = p;
        p += 8 * n_dims as usize;
        let type_off = p;
        p += 4;
        let offset_off = p;
        p += 8;
        tensors.push(TensorLayout {
            name,
            info_off,
            n_dims_off,
            dims_off,
            n_dims,
            type_off,
            offset_off,
        });
    }
    Layout {
        kvs,
        tensors,
        header_end: p,
    }
}

pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

pub fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

pub fn get_u64(b: &[u8], at: usize) -> u64 {
    rd_u64(b, at)
}
