//! `lockstep synth`: the files have the named model's exact shape and metadata (the real
//! tokenizer where the project has the real model), load in the engine and run a forward pass
//! on the cpu backend that agrees with the reference.

use std::path::{Path, PathBuf};
use std::process::Command;

use lockstep_gguf::{GgmlType, GgufFile};

fn lockstep() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lockstep"))
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("lockstep-synth-{}-{name}", std::process::id()))
}

fn synth(args: &[&str], out: &Path) {
    let o = lockstep()
        .arg("synth")
        .args(args)
        .arg("-o")
        .arg(out)
        .output()
        .expect("run synth");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `lockstep diff --a ref --b cpu` on the file: loads it and runs prefill + 1 decode step.
fn agrees_on_cpu(path: &Path) {
    let o = lockstep()
        .args([
            "diff", "--a", "ref", "--b", "cpu", "--ids", "1,2,3,4", "--decode", "1", "-m",
        ])
        .arg(path)
        .output()
        .expect("run diff");
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(text.contains("verdict: AGREE"), "{text}");
}

fn dims(f: &GgufFile, name: &str) -> (Vec<u64>, GgmlType) {
    let t = f.tensor_info(name).expect(name);
    (t.dims.clone(), t.ty)
}

#[test]
fn smollm2_shape_keeps_the_real_metadata() {
    let out = tmp("smollm2.gguf");
    synth(
        &["--like", "smollm2", "--type", "Q4_1", "--layers", "2"],
        &out,
    );
    let f = GgufFile::open(&out).expect("open");
    let real_path = lockstep_fetch::resolve_model("smollm2", None).expect("smollm2");
    let real = GgufFile::open(&real_path).expect("open real");
    // Every tokenizer key is the real one.
    for (k, v) in real
        .metadata()
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
    {
        assert_eq!(f.metadata().get(k), Some(v), "{k}");
    }
    assert_eq!(f.metadata().get_u64("llama.block_count").unwrap(), 2);
    assert_eq!(f.metadata().get_u64("llama.embedding_length").unwrap(), 576);
    // Shapes and types as llama.cpp writes a Q4_1 SmolLM2 (tied embedding as Q8_0).
    for name in [
        "token_embd.weight",
        "blk.1.ffn_down.weight",
        "blk.0.attn_k.weight",
    ] {
        assert_eq!(dims(&f, name), dims(&real, name), "{name}");
    }
    assert!(f.tensor_info("blk.2.attn_q.weight").is_err());
    agrees_on_cpu(&out);
    let _ = std::fs::remove_file(&out);
}

#[test]
fn gemma3_q4_k_m_matches_the_real_files_types() {
    let out = tmp("gemma3.gguf");
    synth(
        &["--like", "gemma3", "--type", "Q4_K_M", "--layers", "2"],
        &out,
    );
    let f = GgufFile::open(&out).expect("open");
    let real_path = lockstep_fetch::resolve_model("gemma3", None).expect("gemma3");
    let real = GgufFile::open(&real_path).expect("open real");
    // The real file is llama.cpp's Q4_K_M: every tensor of the first two layers has the same
    // shape and type here.
    for t in f.tensors() {
        assert_eq!(dims(&f, &t.name), dims(&real, &t.name), "{}", t.name);
    }
    assert_eq!(f.tensors().len(), 1 + 2 * 13 + 1);
    agrees_on_cpu(&out);
    let _ = std::fs::remove_file(&out);
}

#[test]
fn qwen2_and_llama_shapes_load_and_run() {
    let out = tmp("qwen2.gguf");
    synth(
        &["--like", "qwen2-0.5b", "--type", "Q8_0", "--layers", "1"],
        &out,
    );
    let f = GgufFile::open(&out).expect("open");
    assert_eq!(
        dims(&f, "token_embd.weight"),
        (vec![896, 151936], GgmlType::Q8_0)
    );
    assert_eq!(dims(&f, "blk.0.attn_k.bias"), (vec![128], GgmlType::F32));
    assert_eq!(
        f.metadata()
            .get_u64("qwen2.attention.head_count_kv")
            .unwrap(),
        2
    );
    agrees_on_cpu(&out);
    let _ = std::fs::remove_file(&out);

    // The 8B shape's metadata alone (its weights are 4.6 GiB): the shape keys.
    let out = tmp("llama8b.gguf");
    synth(&["--like", "llama-8b", "--metadata-only"], &out);
    let f = GgufFile::open(&out).expect("open");
    let md = f.metadata();
    assert_eq!(md.get_u64("llama.block_count").unwrap(), 32);
    assert_eq!(md.get_u64("llama.embedding_length").unwrap(), 4096);
    assert_eq!(md.get_u64("llama.feed_forward_length").unwrap(), 14336);
    assert_eq!(md.get_u64("llama.attention.head_count_kv").unwrap(), 8);
    assert_eq!(md.get_u64("llama.vocab_size").unwrap(), 128256);
    assert!(f.tensors().is_empty());
    let _ = std::fs::remove_file(&out);
}

#[test]
fn bad_requests_fail_with_clear_errors() {
    let out = tmp("bad.gguf");
    for (args, needle) in [
        (vec!["--like", "llama-70b"], "unknown shape `llama-70b`"),
        (
            vec!["--like", "smollm2", "--type", "IQ2_XXS"],
            "cannot be written",
        ),
        (vec!["--like", "smollm2", "--layers", "31"], "has 30 layers"),
        (vec!["--like", "smollm2", "--layers", "0"], "at least 1"),
    ] {
        let o = lockstep()
            .arg("synth")
            .args(&args)
            .arg("-o")
            .arg(&out)
            .output()
            .expect("run synth");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?}");
        assert!(e.contains(needle), "{args:?}: {e}");
        assert!(!e.contains("panicked"), "{e}");
    }
}
