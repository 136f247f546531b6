//! The real models and all 15 tiny-llama fixtures parse, with the numbers cross-checked
//! against the Python `gguf` package (gguf 0.19.0, `GGUFReader`; see the numbers quoted in
//! each test). A missing file fails the test naming `lockstep fetch`.

mod common;

use std::collections::BTreeMap;

use lockstep_gguf::{GgmlType, GgufFile, Value, ValueType};

fn type_counts(f: &GgufFile) -> BTreeMap<&'static str, usize> {
    let mut m = BTreeMap::new();
    for t in f.tensors() {
        *m.entry(t.ty.name()).or_default() += 1;
    }
    m
}

fn assert_tensor(f: &GgufFile, name: &str, ty: GgmlType, dims: &[u64], size: u64, rel_off: u64) {
    let t = f.tensor_info(name).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(t.ty, ty, "{name}");
    assert_eq!(t.dims, dims, "{name}");
    assert_eq!(t.size, size, "{name}");
    assert_eq!(t.offset, rel_off, "{name}");
    assert_eq!(f.tensor_data(t).len() as u64, size);
}

/// Invariants that must hold for any file `parse` accepts.
fn check_invariants(f: &GgufFile) {
    let h = f.header();
    assert_eq!(h.file_len, f.bytes().len() as u64);
    assert_eq!(h.data_offset % h.alignment, 0);
    let mut ranges: Vec<_> = f.tensors().iter().map(|t| h.tensor_range(t)).collect();
    ranges.sort_by_key(|r| r.start);
    for w in ranges.windows(2) {
        assert!(w[0].end <= w[1].start);
    }
    for t in f.tensors() {
        assert_eq!(Some(t.size), t.ty.row_bytes(t.n_elements()), "{}", t.name);
        assert!(t.dims.len() <= 4);
    }
}

/// python: `SmolLM2-135M-Instruct.Q4_1.gguf version 3 tensors 272 kv 33 data_offset 1785664
/// {'F32': 61, 'Q4_1': 210, 'Q8_0': 1}`; `token_embd.weight Q8_0 [576, 49152] 30081024`.
#[test]
fn smollm2_header_matches_gguf_python() {
    let path = common::model(common::SMOLLM2);
    let f = GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let h = f.header();
    assert_eq!(h.version, 3);
    assert_eq!(h.file_len, 98_362_432);
    assert_eq!(f.tensors().len(), 272);
    assert_eq!(f.metadata().len(), 33);
    assert_eq!(h.alignment, 32);
    assert_eq!(h.data_offset, 1_785_664);
    assert_eq!(
        type_counts(&f),
        BTreeMap::from([("F32", 61), ("Q4_1", 210), ("Q8_0", 1)])
    );
    let q81 = GgmlType::Q8_0;
    assert_tensor(&f, "token_embd.weight", q81, &[576, 49152], 30_081_024, 0);
    assert_tensor(
        &f,
        "blk.0.attn_norm.weight",
        GgmlType::F32,
        &[576],
        2304,
        30_081_024,
    );
    assert_tensor(
        &f,
        "output_norm.weight",
        GgmlType::F32,
        &[576],
        2304,
        96_574_464,
    );
    let t = f.tensor_info("blk.0.attn_q.weight").unwrap();
    assert_eq!(
        (t.ty, t.dims.as_slice(), t.size),
        (GgmlType::Q4_1, &[576u64, 576][..], 207_360)
    );
    let t = f.tensor_info("blk.0.attn_k.weight").unwrap();
    assert_eq!(
        (t.ty, t.dims.as_slice(), t.size),
        (GgmlType::Q4_1, &[576u64, 192][..], 69_120)
    );
    let t = f.tensor_info("blk.0.ffn_down.weight").unwrap();
    assert_eq!(
        (t.ty, t.dims.as_slice(), t.size),
        (GgmlType::Q4_1, &[1536u64, 576][..], 552_960)
    );

    let m = f.metadata();
    assert_eq!(m.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(
        m.get_str("general.name").unwrap(),
        "Smollm2 135M 8k Lc100K Mix1 Ep2"
    );
    assert_eq!(m.get_u64("llama.block_count").unwrap(), 30);
    assert_eq!(m.get_u64("llama.embedding_length").unwrap(), 576);
    assert_eq!(m.get_u64("llama.context_length").unwrap(), 8192);
    assert_eq!(m.get_u64("general.file_type").unwrap(), 3);
    assert_eq!(m.get_str("tokenizer.ggml.model").unwrap(), "gpt2");
    let tokens = m.get_str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.len(), 49152);
    assert_eq!(tokens[..3], ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]);
    let keys: Vec<&str> = m.iter().map(|(k, _)| k).take(4).collect();
    assert_eq!(
        keys,
        [
            "general.architecture",
            "general.type",
            "general.name",
            "general.organization"
        ]
    );
    assert_eq!(
        m.get("tokenizer.ggml.tokens").unwrap().summary(1),
        "[string; 49152] [\"<|endoftext|>\", ...]"
    );
    check_invariants(&f);
}

/// python: `gemma-3-270m-q4_k_m.gguf version 3 tensors 236 kv 33 data_offset 6525120
/// {'F32': 109, 'Q4_K': 27, 'Q5_0': 81, 'Q6_K': 9, 'Q8_0': 10}`.
#[test]
fn gemma3_header_matches_gguf_python() {
    let path = common::model(common::GEMMA3);
    let f = GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let h = f.header();
    assert_eq!(h.version, 3);
    assert_eq!(h.file_len, 253_113_024);
    assert_eq!(f.tensors().len(), 236);
    assert_eq!(f.metadata().len(), 33);
    assert_eq!(h.alignment, 32);
    assert_eq!(h.data_offset, 6_525_120);
    assert_eq!(
        type_counts(&f),
        BTreeMap::from([
            ("F32", 109),
            ("Q4_K", 27),
            ("Q5_0", 81),
            ("Q6_K", 9),
            ("Q8_0", 10)
        ])
    );
    assert_tensor(&f, "output_norm.weight", GgmlType::F32, &[640], 2560, 0);
    assert_tensor(
        &f,
        "token_embd.weight",
        GgmlType::Q8_0,
        &[640, 262144],
        178_257_920,
        2560,
    );
    assert_tensor(
        &f,
        "blk.17.post_ffw_norm.weight",
        GgmlType::F32,
        &[640],
        2560,
        246_585_344,
    );
    let t = f.tensor_info("blk.0.attn_q.weight").unwrap();
    assert_eq!(
        (t.ty, t.dims.as_slice(), t.size),
        (GgmlType::Q5_0, &[640u64, 1024][..], 450_560)
    );
    let t = f.tensor_info("blk.0.attn_v.weight").unwrap();
    assert_eq!(
        (t.ty, t.dims.as_slice(), t.size),
        (GgmlType::Q8_0, &[640u64, 256][..], 174_080)
    );
    let t = f.tensor_info("blk.0.ffn_down.weight").unwrap();
    assert_eq!(
        (t.ty, t.dims.as_slice(), t.size),
        (GgmlType::Q6K, &[2048u64, 640][..], 1_075_200)
    );
    assert!(f.tensors().iter().any(|t| t.ty == GgmlType::Q4K));

    let m = f.metadata();
    assert_eq!(m.get_str("general.architecture").unwrap(), "gemma3");
    assert_eq!(m.get_str("general.name").unwrap(), "Gemma 3 270m");
    assert_eq!(m.get_u64("gemma3.block_count").unwrap(), 18);
    assert_eq!(m.get_u64("gemma3.embedding_length").unwrap(), 640);
    assert_eq!(m.get_u64("gemma3.context_length").unwrap(), 32768);
    assert_eq!(m.get_u64("general.file_type").unwrap(), 15);
    assert_eq!(m.get_u64("tokenizer.ggml.bos_token_id").unwrap(), 2);
    let (elem, tokens) = m.get_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(elem, ValueType::String);
    assert_eq!(tokens.len(), 262_144);
    assert_eq!(tokens[2], Value::String("<bos>".into()));
    check_invariants(&f);
}

/// python, for every type: `version 3 tensors 21 kv 20 data_offset 19328`, 16 matrices of the
/// type and 5 F32 norms (all 21 F32 in the F32 file); e.g. Q4_0 `token_embd.weight [256, 1024]
/// 147456 rel_off 0`, `blk.1.ffn_down.weight [768, 256] 110592 rel_off 1074176`; Q6_K
/// `token_embd.weight 215040`, `blk.1.ffn_down.weight 161280 rel_off 1564160`.
#[test]
fn all_tiny_llama_fixtures_parse() {
    for ty_name in common::TINY_TYPES {
        let path = common::tiny_llama(ty_name);
        let f = GgufFile::open(&path).unwrap_or_else(|e| panic!("{ty_name}: {e}"));
        let ty = GgmlType::from_name(ty_name).unwrap();
        let h = f.header();
        assert_eq!(h.version, 3, "{ty_name}");
        assert_eq!(f.tensors().len(), 21, "{ty_name}");
        assert_eq!(f.metadata().len(), 20, "{ty_name}");
        assert_eq!(h.data_offset, 19_328, "{ty_name}");
        let counts = type_counts(&f);
        if ty == GgmlType::F32 {
            assert_eq!(counts, BTreeMap::from([("F32", 21)]));
        } else {
            assert_eq!(
                counts,
                BTreeMap::from([("F32", 5), (ty.name(), 16)]),
                "{ty_name}"
            );
        }
        let rb = |n: u64| ty.row_bytes(n).unwrap();
        assert_tensor(&f, "token_embd.weight", ty, &[256, 1024], rb(256 * 1024), 0);
        assert_tensor(
            &f,
            "output_norm.weight",
            GgmlType::F32,
            &[256],
            1024,
            rb(256 * 1024),
        );
        for (name, dims) in [
            ("output.weight", [256u64, 1024]),
            ("blk.0.attn_q.weight", [256, 256]),
            ("blk.0.attn_k.weight", [256, 128]),
            ("blk.1.attn_v.weight", [256, 128]),
            ("blk.1.attn_output.weight", [256, 256]),
            ("blk.0.ffn_gate.weight", [256, 768]),
            ("blk.1.ffn_up.weight", [256, 768]),
            ("blk.1.ffn_down.weight", [768, 256]),
        ] {
            let t = f.tensor_info(name).unwrap();
            assert_eq!(
                (t.ty, t.dims.as_slice()),
                (ty, &dims[..]),
                "{ty_name} {name}"
            );
        }
        assert_eq!(f.metadata().get_u64("llama.block_count").unwrap(), 2);
        assert_eq!(
            f.metadata().get_str("general.name").unwrap(),
            format!("tiny-llama-{ty_name}")
        );
        check_invariants(&f);
    }
    // Spot values quoted from python above.
    let q4 = GgufFile::open(common::tiny_llama("Q4_0")).unwrap();
    assert_eq!(q4.tensor_info("token_embd.weight").unwrap().size, 147_456);
    assert_eq!(
        q4.tensor_info("blk.1.ffn_down.weight").unwrap().offset,
        1_074_176
    );
    let q6 = GgufFile::open(common::tiny_llama("Q6_K")).unwrap();
    assert_eq!(q6.tensor_info("token_embd.weight").unwrap().size, 215_040);
    assert_eq!(
        q6.tensor_info("blk.1.ffn_down.weight").unwrap().offset,
        1_564_160
    );
}
