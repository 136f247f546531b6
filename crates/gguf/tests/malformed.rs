//! A malformed-file corpus built from real files: each case corrupts one field of a real
//! header (found by an independent walker, `common::layout`) and asserts the specific
//! `GgufError` variant and that its message names the offset or the tensor.

mod common;

use lockstep_gguf::{parse, GgufError, GgufFile, GgufWriter, Value, ValueType};

use common::{get_u64, layout, put_u32, put_u64, Layout};

/// The tiny-llama Q4_0 fixture: a small, complete llama.cpp-written file.
fn tiny() -> (Vec<u8>, Layout) {
    let b = common::read(&common::tiny_llama("Q4_0"));
    let l = layout(&b);
    (b, l)
}

/// The header region (everything before the data section) of the real SmolLM2 file.
fn smollm2_header() -> (Vec<u8>, Layout) {
    let f = GgufFile::open(common::model(common::SMOLLM2)).unwrap_or_else(|e| panic!("{e}"));
    let b = f.bytes()[..f.header().data_offset as usize].to_vec();
    let l = layout(&b);
    (b, l)
}

fn err(bytes: &[u8]) -> GgufError {
    match parse(bytes) {
        Ok(h) => panic!("malformed file accepted ({} tensors)", h.tensors.len()),
        Err(e) => e,
    }
}

/// The message names `offset N`.
fn names_offset(e: &GgufError, offset: usize) {
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("offset {offset}")),
        "message should name offset {offset}: {msg}"
    );
}

/// The message names the tensor (in backquotes).
fn names_tensor(e: &GgufError, name: &str) {
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("`{name}`")),
        "message should name `{name}`: {msg}"
    );
}

#[test]
fn bad_magic() {
    let (mut b, _) = tiny();
    b[..4].copy_from_slice(b"GGML");
    let e = err(&b);
    assert!(
        matches!(e, GgufError::BadMagic { found } if &found == b"GGML"),
        "{e:?}"
    );
    names_offset(&e, 0);
    // Empty and tiny files too.
    for n in 0..4 {
        let e = err(&b[..n]);
        assert!(matches!(e, GgufError::Truncated { offset: 0, .. }), "{e:?}");
        names_offset(&e, 0);
    }
}

#[test]
fn bad_versions() {
    let (b, _) = tiny();
    for (version, hint) in [
        (1u32.to_le_bytes(), "obsolete"),
        (99u32.to_le_bytes(), ""),
        (0u32.to_le_bytes(), ""),
        (3u32.to_be_bytes(), "big-endian"),
        (2u32.to_be_bytes(), "big-endian"),
    ] {
        let mut m = b.clone();
        m[4..8].copy_from_slice(&version);
        let e = err(&m);
        let v = u32::from_le_bytes(version);
        assert!(
            matches!(e, GgufError::BadVersion { version, .. } if version == v),
            "{e:?}"
        );
        names_offset(&e, 4);
        assert!(e.to_string().contains(hint), "{e}");
    }
}

/// Every prefix of the header region must be refused with an error naming an offset (or, once
/// the tensor infos are complete, the tensor whose data is missing); none may panic.
#[test]
fn every_truncation_of_the_tiny_header_is_an_error() {
    let (b, l) = tiny();
    let data_offset = 19_328;
    for n in 0..data_offset {
        let e = err(&b[..n]);
        match &e {
            GgufError::Truncated { offset, .. } | GgufError::CountTooLarge { offset, .. } => {
                assert!(*offset <= n as u64, "prefix {n}: {e}");
                names_offset(&e, *offset as usize);
            }
            // Header complete, data section missing.
            GgufError::TensorOutOfBounds { name, .. } => {
                assert!(n >= l.header_end, "prefix {n}: {e}");
                names_tensor(&e, name);
            }
            other => panic!("prefix {n}: unexpected {other:?}"),
        }
    }
}

#[test]
fn truncation_in_the_data_section_names_the_tensor() {
    let (b, _) = tiny();
    // The last tensor, blk.1.ffn_down.weight, ends exactly at the end of the file.
    assert_eq!(b.len(), 19_328 + 1_074_176 + 110_592);
    for cut in [1, 2, 4096, 110_592] {
        let e = err(&b[..b.len() - cut]);
        assert!(
            matches!(&e, GgufError::TensorOutOfBounds { name, .. } if name == "blk.1.ffn_down.weight"),
            "{e:?}"
        );
        names_tensor(&e, "blk.1.ffn_down.weight");
    }
    // Cutting into an earlier tensor blames the first tensor (in file order) that does not fit.
    let e = err(&b[..19_328 + 100]);
    names_tensor(&e, "token_embd.weight");
    // The complete file parses.
    assert!(parse(&b).is_ok());
}

/// The real SmolLM2 header (1.7 MB, a 49152-entry vocabulary): truncation at every field
/// boundary and a stride through the rest.
#[test]
fn truncations_of_the_smollm2_header_are_errors() {
    let (b, l) = smollm2_header();
    // Each cut past the metadata re-parses the whole 100k-string vocabulary, so sample: a
    // stride, every key/value boundary, and the info records of the first and last tensors.
    let mut cuts: Vec<usize> = (0..b.len()).step_by(9973).collect();
    for kv in &l.kvs {
        for at in [kv.key_off, kv.type_off, kv.value_off] {
            cuts.extend([at.saturating_sub(1), at, at + 1, at + 5]);
        }
    }
    let n = l.tensors.len();
    for t in l.tensors[..3].iter().chain(&l.tensors[n - 3..]) {
        for at in [
            t.info_off,
            t.n_dims_off,
            t.dims_off,
            t.type_off,
            t.offset_off,
        ] {
            cuts.extend([at.saturating_sub(1), at, at + 3]);
        }
    }
    cuts.extend(l.header_end - 2..=b.len());
    for n in cuts {
        let n = n.min(b.len());
        let e = err(&b[..n]);
        match &e {
            GgufError::Truncated { offset, .. } | GgufError::CountTooLarge { offset, .. } => {
                names_offset(&e, *offset as usize)
            }
            GgufError::TensorOutOfBounds { name, .. } => {
                assert!(n >= l.header_end, "prefix {n}: {e}");
                names_tensor(&e, name);
            }
            other => panic!("prefix {n}: unexpected {other:?}"),
        }
    }
}

#[test]
fn huge_counts_are_refused_before_allocating() {
    let (b, l) = tiny();
    for v in [u64::MAX, 1 << 40, 1_000_000] {
        let mut m = b.clone();
        put_u64(&mut m, 8, v);
        let e = err(&m);
        assert!(
            matches!(e, GgufError::CountTooLarge { what: "tensor", offset: 8, count, .. } if count == v),
            "{e:?}"
        );
        names_offset(&e, 8);

        let mut m = b.clone();
        put_u64(&mut m, 16, v);
        let e = err(&m);
        assert!(
            matches!(
                e,
                GgufError::CountTooLarge {
                    what: "metadata",
                    offset: 16,
                    ..
                }
            ),
            "{e:?}"
        );
        names_offset(&e, 16);

        // Array length of the vocabulary.
        let tok = l.kv("tokenizer.ggml.tokens");
        let mut m = b.clone();
        put_u64(&mut m, tok.value_off + 4, v);
        let e = err(&m);
        assert!(
            matches!(
                e,
                GgufError::CountTooLarge {
                    what: "array element",
                    ..
                }
            ),
            "{e:?}"
        );
        names_offset(&e, tok.value_off + 4);
    }
}

#[test]
fn slightly_wrong_counts_are_errors() {
    let (b, _) = tiny();
    let n_tensors = get_u64(&b, 8);
    let n_kv = get_u64(&b, 16);
    for (at, v) in [
        (8, n_tensors + 1),
        (8, n_tensors - 1),
        (16, n_kv + 1),
        (16, n_kv - 1),
        (8, 0),
    ] {
        let mut m = b.clone();
        put_u64(&mut m, at, v);
        match parse(&m) {
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.contains("offset") || msg.contains('`'), "{msg}");
            }
            // Fewer tensors declared: the rest of the infos are read as padding/data. That
            // shifts the data section, so it may or may not still validate; it must not panic.
            Ok(h) => assert!(h.tensors.len() as u64 <= n_tensors),
        }
    }
}

#[test]
fn huge_string_lengths() {
    let (b, l) = tiny();
    let name_kv = l.kv("general.name");
    let t0 = &l.tensors[0];
    for v in [u64::MAX, 1 << 40, b.len() as u64] {
        // A key's length.
        let mut m = b.clone();
        put_u64(&mut m, l.kvs[0].key_off, v);
        let e = err(&m);
        assert!(
            matches!(e, GgufError::Truncated { needed, .. } if needed == v),
            "{e:?}"
        );
        names_offset(&e, l.kvs[0].key_off + 8);
        // A string value's length.
        let mut m = b.clone();
        put_u64(&mut m, name_kv.value_off, v);
        let e = err(&m);
        assert!(matches!(e, GgufError::Truncated { .. }), "{e:?}");
        names_offset(&e, name_kv.value_off + 8);
        assert!(e.to_string().contains("general.name"), "{e}");
        // A tensor name's length.
        let mut m = b.clone();
        put_u64(&mut m, t0.info_off, v);
        let e = err(&m);
        assert!(matches!(e, GgufError::Truncated { .. }), "{e:?}");
        names_offset(&e, t0.info_off + 8);
    }
}

#[test]
fn smollm2_vocabulary_corruptions() {
    let (b, l) = smollm2_header();
    let tok = l.kv("tokenizer.ggml.tokens");
    // Array length.
    let mut m = b.clone();
    put_u64(&mut m, tok.value_off + 4, u64::MAX / 8);
    let e = err(&m);
    assert!(
        matches!(
            e,
            GgufError::CountTooLarge {
                what: "array element",
                ..
            }
        ),
        "{e:?}"
    );
    names_offset(&e, tok.value_off + 4);
    // Element type.
    let mut m = b.clone();
    put_u32(&mut m, tok.value_off, 13);
    let e = err(&m);
    assert!(
        matches!(e, GgufError::UnknownValueType { type_id: 13, .. }),
        "{e:?}"
    );
    names_offset(&e, tok.value_off);
    // The length of token #0 ("<|endoftext|>", 13 bytes).
    let first = tok.value_off + 12;
    assert_eq!(get_u64(&b, first), 13);
    let mut m = b.clone();
    put_u64(&mut m, first, u64::MAX);
    let e = err(&m);
    assert!(matches!(e, GgufError::Truncated { .. }), "{e:?}");
    names_offset(&e, first + 8);
    // Invalid UTF-8 inside token #0.
    let mut m = b.clone();
    m[first + 8 + 3] = 0xff;
    let e = err(&m);
    assert!(matches!(e, GgufError::InvalidUtf8 { .. }), "{e:?}");
    names_offset(&e, first + 8 + 3);
    // The last tensor's type and dimensions.
    let last = l.tensors.last().unwrap();
    let mut m = b.clone();
    put_u32(&mut m, last.type_off, 31);
    let e = err(&m);
    assert!(
        matches!(e, GgufError::UnknownTensorType { type_id: 31, .. }),
        "{e:?}"
    );
    names_offset(&e, last.type_off);
    names_tensor(&e, &last.name);
    // The unmodified header region has no data section.
    let e = err(&b);
    assert!(matches!(e, GgufError::TensorOutOfBounds { .. }), "{e:?}");
    names_tensor(&e, "token_embd.weight");
}

#[test]
fn unknown_value_types() {
    let (b, l) = tiny();
    let kv = l.kv("llama.block_count");
    for bad in [13u32, 99, u32::MAX] {
        let mut m = b.clone();
        put_u32(&mut m, kv.type_off, bad);
        let e = err(&m);
        assert!(
            matches!(&e, GgufError::UnknownValueType { key, type_id, .. } if key == "llama.block_count" && *type_id == bad),
            "{e:?}"
        );
        names_offset(&e, kv.type_off);
    }
    // The element type of an array.
    let tt = l.kv("tokenizer.ggml.token_type");
    let mut m = b.clone();
    put_u32(&mut m, tt.value_off, 42);
    let e = err(&m);
    assert!(
        matches!(e, GgufError::UnknownValueType { type_id: 42, .. }),
        "{e:?}"
    );
    names_offset(&e, tt.value_off);
}

#[test]
fn unknown_tensor_types() {
    let (b, l) = tiny();
    let t = l.tensor("blk.0.attn_v.weight");
    // 4 and 5 are the retired Q4_2/Q4_3; 1000 was never a type.
    for bad in [4u32, 5, 1000] {
        let mut m = b.clone();
        put_u32(&mut m, t.type_off, bad);
        let e = err(&m);
        assert!(
            matches!(&e, GgufError::UnknownTensorType { type_id, .. } if *type_id == bad),
            "{e:?}"
        );
        names_offset(&e, t.type_off);
        names_tensor(&e, "blk.0.attn_v.weight");
    }
}

#[test]
fn tensor_data_out_of_bounds() {
    let (b, l) = tiny();
    let t = l.tensor("output.weight");
    let past_end = (b.len() as u64).next_multiple_of(32);
    // Past the end; aligned but so large that offset + size overflows; partly past the end.
    for off in [past_end, !31u64, 1_074_176 + 32] {
        let mut m = b.clone();
        put_u64(&mut m, t.offset_off, off);
        let e = err(&m);
        assert!(
            matches!(&e, GgufError::TensorOutOfBounds { name, .. } if name == "output.weight"),
            "{e:?}"
        );
        names_tensor(&e, "output.weight");
    }
    // A shape too large for the data: token_embd with 1024 → 4096 rows.
    let te = l.tensor("token_embd.weight");
    let mut m = b.clone();
    put_u64(&mut m, te.dims_off + 8, 1 << 20);
    let e = err(&m);
    assert!(matches!(e, GgufError::TensorOutOfBounds { .. }), "{e:?}");
    names_tensor(&e, "token_embd.weight");
}

/// A zero-byte tensor must still start inside the file: slicing its data at a start past the
/// end would panic. Regression test for a bug where only `offset + size <= data length` was
/// checked, with the data length saturating to 0 when the file ended inside the padding.
#[test]
fn empty_tensor_past_the_end_of_the_file() {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("x".into()));
    w.add_tensor("empty", &[0], lockstep_gguf::GgmlType::F32, vec![])
        .unwrap();
    let full = w.to_bytes();
    let l = layout(&full);
    assert!(parse(&full).is_ok());
    // Cut the file inside the padding between the tensor infos and the data section.
    assert!(full.len() > l.header_end);
    let e = err(&full[..l.header_end]);
    assert!(
        matches!(&e, GgufError::TensorOutOfBounds { name, .. } if name == "empty"),
        "{e:?}"
    );
    names_tensor(&e, "empty");
}

#[test]
fn overlapping_tensors() {
    let (b, l) = tiny();
    // output.weight (same size as token_embd) moved onto token_embd's data.
    let mut m = b.clone();
    put_u64(&mut m, l.tensor("output.weight").offset_off, 0);
    let e = err(&m);
    assert!(
        matches!(&e, GgufError::TensorOverlap { name, other, .. } if name == "output.weight" && other == "token_embd.weight"),
        "{e:?}"
    );
    names_tensor(&e, "output.weight");
    names_tensor(&e, "token_embd.weight");
    // A partial overlap: output_norm (1024 bytes) moved 32 bytes before the end of token_embd.
    let mut m = b.clone();
    put_u64(
        &mut m,
        l.tensor("output_norm.weight").offset_off,
        147_456 - 32,
    );
    let e = err(&m);
    assert!(matches!(e, GgufError::TensorOverlap { .. }), "{e:?}");
    names_tensor(&e, "output_norm.weight");
}

#[test]
fn misaligned_tensor_offset() {
    let (b, l) = tiny();
    let t = l.tensor("output_norm.weight");
    for delta in [1u64, 4, 16] {
        let mut m = b.clone();
        put_u64(&mut m, t.offset_off, 147_456 + delta);
        let e = err(&m);
        assert!(
            matches!(&e, GgufError::MisalignedTensor { name, alignment: 32, .. } if name == "output_norm.weight"),
            "{e:?}"
        );
        names_tensor(&e, "output_norm.weight");
    }
}

#[test]
fn shape_and_type_mismatch() {
    let (b, l) = tiny();
    let t = l.tensor("token_embd.weight");
    // 256 × 1024 Q4_0 → 16 × 16384: the same element count, but a 16-element row is half a block.
    let mut m = b.clone();
    put_u64(&mut m, t.dims_off, 16);
    put_u64(&mut m, t.dims_off + 8, 16_384);
    let e = err(&m);
    assert!(
        matches!(&e, GgufError::ShapeTypeMismatch { name, row: 16, block: 32, .. } if name == "token_embd.weight"),
        "{e:?}"
    );
    names_tensor(&e, "token_embd.weight");
    // The same shape is fine as F32 (block size 1) but then needs 4× the bytes.
    let mut m2 = m.clone();
    put_u32(&mut m2, t.type_off, 0);
    let e = err(&m2);
    assert!(
        matches!(
            e,
            GgufError::TensorOutOfBounds { .. } | GgufError::TensorOverlap { .. }
        ),
        "{e:?}"
    );
    names_tensor(&e, "token_embd.weight");
    // Dimensions that overflow.
    for (d0, d1) in [(u64::MAX, 1), (1 << 32, 1 << 32), (i64::MAX as u64 + 1, 1)] {
        let mut m = b.clone();
        put_u64(&mut m, t.dims_off, d0);
        put_u64(&mut m, t.dims_off + 8, d1);
        let e = err(&m);
        assert!(matches!(e, GgufError::BadShape { .. }), "{e:?}");
        names_offset(&e, t.info_off);
        names_tensor(&e, "token_embd.weight");
    }
}

#[test]
fn duplicate_tensor_names() {
    let (b, l) = tiny();
    let q = l.tensor("blk.0.attn_q.weight");
    let k = l.tensor("blk.0.attn_k.weight");
    let mut m = b.clone();
    let name = b"blk.0.attn_q.weight";
    m[k.info_off + 8..k.info_off + 8 + name.len()].copy_from_slice(name);
    let e = err(&m);
    assert!(
        matches!(&e, GgufError::DuplicateTensor { name, offset } if name == "blk.0.attn_q.weight" && *offset == k.info_off as u64),
        "{e:?}"
    );
    assert!(q.info_off < k.info_off);
    names_offset(&e, k.info_off);
    names_tensor(&e, "blk.0.attn_q.weight");
}

#[test]
fn duplicate_keys() {
    let (b, l) = tiny();
    // Two keys of the same length: overwrite the second with the first.
    let (i, j) = (0..l.kvs.len())
        .flat_map(|i| (i + 1..l.kvs.len()).map(move |j| (i, j)))
        .find(|&(i, j)| l.kvs[i].key.len() == l.kvs[j].key.len())
        .expect("two keys of equal length");
    let (a, z) = (&l.kvs[i], &l.kvs[j]);
    let mut m = b.clone();
    m[z.key_off + 8..z.key_off + 8 + a.key.len()].copy_from_slice(a.key.as_bytes());
    let e = err(&m);
    assert!(
        matches!(&e, GgufError::DuplicateKey { key, offset } if *key == a.key && *offset == z.key_off as u64),
        "{e:?}"
    );
    names_offset(&e, z.key_off);
    assert!(e.to_string().contains(&a.key));
}

#[test]
fn invalid_utf8() {
    let (b, l) = tiny();
    // In a key.
    let kv = &l.kvs[3];
    let mut m = b.clone();
    m[kv.key_off + 8 + 2] = 0xff;
    let e = err(&m);
    assert!(matches!(e, GgufError::InvalidUtf8 { .. }), "{e:?}");
    names_offset(&e, kv.key_off + 8 + 2);
    assert!(e.to_string().contains("metadata key #3"), "{e}");
    // In a string value: a lone continuation byte.
    let name = l.kv("general.name");
    let mut m = b.clone();
    m[name.value_off + 8] = 0x80;
    let e = err(&m);
    assert!(matches!(e, GgufError::InvalidUtf8 { .. }), "{e:?}");
    names_offset(&e, name.value_off + 8);
    assert!(e.to_string().contains("general.name"), "{e}");
    // In a tensor name.
    let t = l.tensor("output.weight");
    let mut m = b.clone();
    m[t.info_off + 8] = 0xc3; // a 2-byte lead followed by ASCII
    let e = err(&m);
    assert!(matches!(e, GgufError::InvalidUtf8 { .. }), "{e:?}");
    names_offset(&e, t.info_off + 8);
}

/// `llama.block_count` is a u32 key with a 17-byte name, like `general.alignment`: renaming it
/// in place gives a real file with an alignment key whose value and type we then spoil.
#[test]
fn bad_general_alignment() {
    let (b, l) = tiny();
    let kv = l.kv("llama.block_count");
    assert_eq!(kv.key.len(), "general.alignment".len());
    assert_eq!(kv.type_id, ValueType::U32 as u32);
    let mut renamed = b.clone();
    renamed[kv.key_off + 8..kv.key_off + 8 + 17].copy_from_slice(b"general.alignment");
    // A valid value (the default, 32) still parses.
    put_u32(&mut renamed, kv.value_off, 32);
    let h = parse(&renamed).expect("alignment 32");
    assert_eq!(h.alignment, 32);

    for (value, ty) in [
        (0u32, ValueType::U32),
        (3, ValueType::U32),
        (32, ValueType::I32),
        (32, ValueType::F32),
    ] {
        let mut m = renamed.clone();
        put_u32(&mut m, kv.type_off, ty as u32);
        put_u32(&mut m, kv.value_off, value);
        let e = err(&m);
        assert!(matches!(e, GgufError::BadAlignment { .. }), "{e:?}");
        names_offset(&e, kv.key_off);
        assert!(e.to_string().contains(ty.name()), "{e}");
    }
}

#[test]
fn too_many_dimensions() {
    let (b, l) = tiny();
    let t = l.tensor("blk.1.attn_q.weight");
    for n in [5u32, 64, u32::MAX] {
        let mut m = b.clone();
        put_u32(&mut m, t.n_dims_off, n);
        let e = err(&m);
        assert!(
            matches!(&e, GgufError::TooManyDims { name, n_dims, .. } if name == "blk.1.attn_q.weight" && *n_dims == n),
            "{e:?}"
        );
        names_offset(&e, t.info_off);
        names_tensor(&e, "blk.1.attn_q.weight");
    }
}

#[test]
fn bool_byte_other_than_0_or_1() {
    let (b, l) = tiny();
    let kv = l.kv("tokenizer.ggml.add_bos_token");
    let mut m = b.clone();
    m[kv.value_off] = 2;
    let e = err(&m);
    assert!(
        matches!(&e, GgufError::BadBool { key, byte: 2, .. } if key == "tokenizer.ggml.add_bos_token"),
        "{e:?}"
    );
    names_offset(&e, kv.value_off);
}

/// Nine levels of arrays, added to the real tiny-llama metadata and tensors.
#[test]
fn nesting_too_deep() {
    let f = GgufFile::open(common::tiny_llama("Q4_0")).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in f.metadata().iter() {
        w.set(k, v.clone());
    }
    let mut deep = Value::Array(ValueType::I32, vec![]);
    for _ in 0..8 {
        deep = Value::Array(ValueType::Array, vec![deep]);
    }
    w.set("x.deep", deep);
    for t in f.tensors() {
        w.add_tensor(t.name.clone(), &t.dims, t.ty, f.tensor_data(t).to_vec())
            .unwrap();
    }
    let bytes = w.to_bytes();
    let l = layout_until_key(&bytes, "x.deep");
    let e = err(&bytes);
    assert!(
        matches!(&e, GgufError::NestingTooDeep { key, max_depth: 8, .. } if key == "x.deep"),
        "{e:?}"
    );
    // The innermost (ninth) array starts 12 bytes (element type + length) per level in.
    names_offset(&e, l + 8 * 12);
}

/// The value offset of `key` in a file the layout walker cannot finish (it refuses nothing,
/// but the file is only valid up to that key's value).
fn layout_until_key(b: &[u8], key: &str) -> usize {
    let needle = [&(key.len() as u64).to_le_bytes()[..], key.as_bytes()].concat();
    let at = b
        .windows(needle.len())
        .position(|w| w == needle.as_slice())
        .expect("key present");
    at + needle.len() + 4
}

/// Every single-byte corruption of the fixed part of the header and of the first tensor info,
/// with a few values each: any result but a panic is acceptable.
#[test]
fn single_byte_corruptions_never_panic() {
    let (b, l) = tiny();
    let t = &l.tensors[0];
    let regions = [
        0..64,
        t.info_off..t.offset_off + 8,
        l.header_end - 64..l.header_end + 64,
    ];
    for r in regions {
        for at in r {
            for v in [0u8, 1, 0x7f, 0x80, 0xff] {
                let mut m = b.clone();
                m[at] = v;
                let _ = parse(&m);
            }
        }
    }
}

#[test]
fn too_many_metadata_values_are_refused() {
    // One u8 array with exactly as many elements as the budget: with the array value itself that
    // is one value too many. Every count is plausible for the file's size, but parsing them all
    // would allocate ~32 bytes per byte of file; the cap bounds that.
    let n = lockstep_gguf::MAX_METADATA_VALUES;
    let key = b"junk.big";
    let mut f = Vec::new();
    f.extend_from_slice(b"GGUF");
    f.extend_from_slice(&3u32.to_le_bytes());
    f.extend_from_slice(&0u64.to_le_bytes());
    f.extend_from_slice(&1u64.to_le_bytes());
    f.extend_from_slice(&(key.len() as u64).to_le_bytes());
    f.extend_from_slice(key);
    f.extend_from_slice(&(ValueType::Array as u32).to_le_bytes());
    f.extend_from_slice(&(ValueType::U8 as u32).to_le_bytes());
    f.extend_from_slice(&n.to_le_bytes());
    f.resize(f.len() + n as usize, 1);
    let e = err(&f);
    assert!(matches!(e, GgufError::TooManyValues { .. }), "{e}");
    assert!(e.to_string().contains("junk.big"), "{e}");
    names_offset(&e, f.len() - 1);
}
