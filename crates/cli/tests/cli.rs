//! Runs the built `lockstep` binary: `inspect` on both real models (numbers cross-checked with
//! the Python `gguf` package, see crates/gguf/tests/real_files.rs), on malformed files written
//! here (one-line errors naming the offset or tensor), `--dequant` against lockstep_quant, and
//! `fetch` without touching the network.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use lockstep_gguf::{parse, GgufFile};
use serde_json::Value as Json;

fn models_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("LOCKSTEP_MODELS_DIR") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").expect("HOME or LOCKSTEP_MODELS_DIR must be set");
    PathBuf::from(home).join(".cache/lockstep/models")
}

/// A real model; missing fails the test (these tests exist to run on the real files).
fn model(file: &str) -> PathBuf {
    let p = models_dir().join(file);
    assert!(
        p.is_file(),
        "model {} is missing: run `lockstep fetch all` (or set LOCKSTEP_MODELS_DIR)",
        p.display()
    );
    p
}

fn smollm2() -> PathBuf {
    model("SmolLM2-135M-Instruct.Q4_1.gguf")
}

fn tiny_q4_0() -> PathBuf {
    let p = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/tiny-llama/tiny-llama-Q4_0.gguf"
    ));
    assert!(
        p.is_file(),
        "fixture {} is missing (shared/fixtures must sit beside the repository; models come from \
         `lockstep fetch`)",
        p.display()
    );
    p
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p =
            std::env::temp_dir().join(format!("lockstep-cli-test-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn lockstep(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(args)
        .env("LOCKSTEP_QUIET", "1")
        .output()
        .expect("run lockstep")
}

fn ok_stdout(args: &[&str]) -> String {
    let out = lockstep(args);
    assert!(
        out.status.success(),
        "lockstep {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn json(args: &[&str]) -> Json {
    serde_json::from_str(&ok_stdout(args)).expect("one JSON object")
}

fn tensor<'a>(report: &'a Json, name: &str) -> &'a Json {
    report["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tensor {name}"))
}

/// Fails unless the command failed with exit code 1, printed nothing on stdout, and exactly
/// one line on stderr that starts `error: <file>: ` and contains `needle`. Returns the line.
fn one_line_error(args: &[&str], file: &Path, needle: &str) -> String {
    let out = lockstep(args);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?}");
    let line = stderr.strip_suffix('\n').unwrap_or(&stderr);
    assert!(!line.contains('\n'), "more than one line: {stderr}");
    let prefix = format!("error: {}: ", file.display());
    assert!(line.starts_with(&prefix), "{line}");
    assert!(line.contains(needle), "expected `{needle}` in: {line}");
    line.to_string()
}

#[test]
fn inspect_smollm2_json() {
    let p = smollm2();
    let r = json(&["inspect", p.to_str().unwrap(), "--json"]);
    assert_eq!(r["version"], 3);
    assert_eq!(r["tensor_count"], 272);
    assert_eq!(r["metadata_count"], 33);
    assert_eq!(r["file_size"], 98_362_432u64);
    assert_eq!(r["data_offset"], 1_785_664);
    assert_eq!(r["alignment"], 32);
    assert_eq!(r["by_type"]["F32"]["count"], 61);
    assert_eq!(r["by_type"]["Q4_1"]["count"], 210);
    assert_eq!(r["by_type"]["Q8_0"]["count"], 1);
    let t = tensor(&r, "token_embd.weight");
    assert_eq!(t["type"], "Q8_0");
    assert_eq!(t["dims"], serde_json::json!([576, 49152]));
    assert_eq!(t["bytes"], 30_081_024);
    assert_eq!(t["file_offset"], 1_785_664);
    let t = tensor(&r, "blk.0.attn_k.weight");
    assert_eq!(
        (t["type"].as_str(), t["bytes"].as_u64()),
        (Some("Q4_1"), Some(69_120))
    );
    assert_eq!(t["dims"], serde_json::json!([576, 192]));
    let tokens = &r["metadata"]["tokenizer.ggml.tokens"];
    assert_eq!(tokens["length"], 49152);
    assert_eq!(tokens["element_type"], "string");
    assert_eq!(tokens["first"][0], "<|endoftext|>");
    assert_eq!(r["metadata"]["llama.block_count"], 30);
    assert_eq!(r["metadata_types"]["llama.block_count"], "u32");
    assert_eq!(
        r["metadata"]["llama.attention.layer_norm_rms_epsilon"],
        0.00001
    );
}

#[test]
fn inspect_gemma3_by_short_name() {
    let dir = models_dir();
    model("gemma-3-270m-q4_k_m.gguf");
    let r = json(&[
        "inspect",
        "gemma3",
        "--models-dir",
        dir.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(r["tensor_count"], 236);
    assert_eq!(r["metadata_count"], 33);
    assert_eq!(r["data_offset"], 6_525_120);
    for (ty, n) in [
        ("F32", 109),
        ("Q4_K", 27),
        ("Q5_0", 81),
        ("Q6_K", 9),
        ("Q8_0", 10),
    ] {
        assert_eq!(r["by_type"][ty]["count"], n, "{ty}");
    }
    let t = tensor(&r, "token_embd.weight");
    assert_eq!(t["type"], "Q8_0");
    assert_eq!(t["dims"], serde_json::json!([640, 262144]));
    assert_eq!(t["offset"], 2560);
    let t = tensor(&r, "blk.0.ffn_down.weight");
    assert_eq!(
        (t["type"].as_str(), t["bytes"].as_u64()),
        (Some("Q6_K"), Some(1_075_200))
    );
    assert_eq!(t["dims"], serde_json::json!([2048, 640]));
    assert_eq!(r["metadata"]["general.architecture"], "gemma3");
    assert_eq!(r["metadata"]["tokenizer.ggml.tokens"]["length"], 262_144);
}

#[test]
fn inspect_human_report() {
    let p = smollm2();
    let out = ok_stdout(&["inspect", p.to_str().unwrap()]);
    for needle in [
        "version:      3",
        "size:         98362432 bytes",
        "alignment:    32",
        "data offset:  1785664",
        "tensors:      272",
        "metadata:     33 keys",
        "[string; 49152] [\"<|endoftext|>\", \"<|im_start|>\", \"<|im_end|>\", ...]",
        "by type:",
    ] {
        assert!(out.contains(needle), "missing `{needle}`");
    }
    let embd = out
        .lines()
        .find(|l| l.starts_with("token_embd.weight "))
        .expect("tensor row");
    let cols: Vec<&str> = embd.split_whitespace().collect();
    assert_eq!(
        cols,
        [
            "token_embd.weight",
            "Q8_0",
            "[576,",
            "49152]",
            "30081024",
            "1785664"
        ]
    );
    let q41 = out
        .lines()
        .find(|l| l.trim_start().starts_with("Q4_1 "))
        .unwrap();
    assert!(q41.contains("210 tensors"), "{q41}");
    // Only one tensor with --tensor.
    let one = ok_stdout(&[
        "inspect",
        p.to_str().unwrap(),
        "--tensor",
        "output_norm.weight",
    ]);
    assert_eq!(one.lines().count(), 2, "{one}");
    assert!(one.contains("[576]"));
}

/// Byte offset of a tensor's type field, from its info record.
fn type_field(bytes: &[u8], name: &str) -> usize {
    let h = parse(bytes).unwrap();
    let t = h.tensor(name).unwrap();
    t.info_offset as usize + 8 + name.len() + 4 + 8 * t.dims.len()
}

#[test]
fn malformed_files_give_one_line_errors() {
    let tmp = TempDir::new("malformed");
    let good = std::fs::read(tiny_q4_0()).unwrap();
    let mut cases: Vec<(&str, Vec<u8>, &str)> = Vec::new();

    let mut m = good.clone();
    m[..4].copy_from_slice(b"GGML");
    cases.push(("bad-magic", m, "offset 0"));

    let mut m = good.clone();
    m[4..8].copy_from_slice(&3u32.to_be_bytes());
    cases.push(("big-endian", m, "big-endian"));

    cases.push(("empty", Vec::new(), "offset 0"));
    cases.push(("truncated-header", good[..5000].to_vec(), "offset "));
    cases.push((
        "truncated-data",
        good[..good.len() - 1].to_vec(),
        "`blk.1.ffn_down.weight`",
    ));

    let mut m = good.clone();
    let at = type_field(&good, "blk.0.attn_v.weight");
    m[at..at + 4].copy_from_slice(&1000u32.to_le_bytes());
    cases.push(("unknown-type", m, "`blk.0.attn_v.weight`"));

    let mut m = good.clone();
    m[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    cases.push(("huge-kv-count", m, "offset 16"));

    let mut m = good.clone();
    let at = type_field(&good, "output.weight") + 4;
    m[at..at + 8].copy_from_slice(&0u64.to_le_bytes());
    cases.push(("overlap", m, "`token_embd.weight`"));

    for (name, bytes, needle) in &cases {
        let p = tmp.0.join(format!("{name}.gguf"));
        std::fs::write(&p, bytes).unwrap();
        let line = one_line_error(&["inspect", p.to_str().unwrap()], &p, needle);
        // --json and --dequant fail the same way: the header is parsed first.
        let line2 = one_line_error(&["inspect", p.to_str().unwrap(), "--json"], &p, needle);
        assert_eq!(line, line2);
        let out = tmp.0.join("never.safetensors");
        let args = [
            "inspect",
            p.to_str().unwrap(),
            "--tensor",
            "output.weight",
            "--dequant",
        ];
        let line3 = one_line_error(&[&args[..], &[out.to_str().unwrap()]].concat(), &p, needle);
        assert_eq!(line, line3);
        assert!(!out.exists());
    }
}

#[test]
fn missing_files_and_names() {
    let tmp = TempDir::new("missing");
    let p = tmp.0.join("nope.gguf");
    let out = lockstep(&["inspect", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: ") && err.contains("nope.gguf") && err.contains("does not exist")
    );

    // `run` and `chat` open the model before their backend starts: on the CUDA backend a
    // wrong path or a damaged file is reported at once, not after the driver check (here, no
    // driver) or the kernels' compilation (a GPU machine, a minute or more uncached).
    for cmd in [&["run", "-p", "hi"][..], &["chat"]] {
        let out = lockstep(&[cmd, &["--backend", "cuda", "-m", p.to_str().unwrap()]].concat());
        assert_eq!(out.status.code(), Some(1), "{cmd:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(
            err.contains("nope.gguf") && err.contains("does not exist") && !err.contains("CUDA"),
            "{cmd:?}: {err}"
        );
    }
    let junk = tmp.0.join("junk.gguf");
    std::fs::write(&junk, b"not a gguf file at all, just words").unwrap();
    let out = lockstep(&[
        "run",
        "--backend",
        "cuda",
        "-m",
        junk.to_str().unwrap(),
        "-p",
        "hi",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("junk.gguf") && !err.contains("CUDA"),
        "a damaged file is named before the backend starts: {err}"
    );

    let out = lockstep(&["inspect", "no-such-model"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("no-such-model") && err.contains("smollm2"),
        "{err}"
    );

    // A missing tensor names the file and the tensor.
    let f = tiny_q4_0();
    one_line_error(
        &[
            "inspect",
            f.to_str().unwrap(),
            "--tensor",
            "blk.9.nope",
            "--dequant",
            "/dev/null",
        ],
        &f,
        "`blk.9.nope`",
    );
    // --dequant needs --tensor (a usage error: clap's exit code 2).
    let out = lockstep(&["inspect", f.to_str().unwrap(), "--dequant", "x.safetensors"]);
    assert_eq!(out.status.code(), Some(2));
}

/// `--dequant` writes exactly lockstep_quant's dequantization, in row-major shape.
fn check_dequant(path: &Path, name: &str, expected_shape: &[usize]) {
    let tmp = TempDir::new(&format!("dequant-{}", name.replace('.', "-")));
    let out = tmp.0.join("t.safetensors");
    ok_stdout(&[
        "inspect",
        path.to_str().unwrap(),
        "--tensor",
        name,
        "--dequant",
        out.to_str().unwrap(),
    ]);
    let bytes = std::fs::read(&out).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(st.names().len(), 1);
    let view = st.tensor(name).unwrap();
    assert_eq!(view.dtype(), safetensors::Dtype::F32);
    assert_eq!(view.shape(), expected_shape);

    let file = GgufFile::open(path).unwrap();
    let t = file.tensor_info(name).unwrap();
    let want =
        lockstep_quant::dequantize(t.ty, file.tensor_data(t), t.n_elements() as usize).unwrap();
    let got: Vec<f32> = view
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(got.len(), want.len());
    assert!(
        got.iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "{name}: values differ"
    );
    assert!(want.iter().any(|&x| x != 0.0));
}

#[test]
fn dequant_matches_lockstep_quant() {
    // ggml dims [256, 128] (128 rows of 256) -> row-major [128, 256].
    check_dequant(&tiny_q4_0(), "blk.0.attn_k.weight", &[128, 256]);
    check_dequant(&tiny_q4_0(), "output_norm.weight", &[256]);
    check_dequant(&smollm2(), "blk.0.attn_k.weight", &[192, 576]);
    check_dequant(
        &model("gemma-3-270m-q4_k_m.gguf"),
        "blk.0.ffn_down.weight",
        &[640, 2048],
    );
}

#[test]
fn fetch_finds_present_models_and_explains_a_missing_python() {
    let dir = models_dir();
    model("SmolLM2-135M-Instruct.Q4_1.gguf");
    model("gemma-3-270m-q4_k_m.gguf");
    // Both present: verified by hash, nothing downloaded; stdout is just the paths.
    let out = lockstep(&["fetch", "all", "--models-dir", dir.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stderr.matches("already present").count(), 2, "{stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let paths: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        paths,
        [
            dir.join("SmolLM2-135M-Instruct.Q4_1.gguf")
                .to_str()
                .unwrap(),
            dir.join("gemma-3-270m-q4_k_m.gguf").to_str().unwrap()
        ]
    );

    // An empty models dir and no python: a clear error, nothing left behind.
    let tmp = TempDir::new("fetch-nopython");
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["fetch", "smollm2", "--models-dir", tmp.0.to_str().unwrap()])
        .env("LOCKSTEP_QUIET", "1")
        .env("LOCKSTEP_PYTHON", "/nonexistent/python3")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("error: cannot run `/nonexistent/python3`") && err.contains("pip"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&tmp.0).unwrap().count(), 0);
}
