//! Writer → parser round trips: every metadata value type (edge values, nested and empty
//! arrays), versions 2 and 3, custom alignment, tensor data, and byte-exact reproduction of a
//! real file.

mod common;

use lockstep_gguf::{parse, GgmlType, GgufError, GgufFile, GgufWriter, Value, ValueType};

/// Compares values treating floats by bit pattern, so NaN payloads and -0.0 must survive.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::F32(x), Value::F32(y)) => x.to_bits() == y.to_bits(),
        (Value::F64(x), Value::F64(y)) => x.to_bits() == y.to_bits(),
        (Value::Array(ta, xa), Value::Array(tb, xb)) => {
            ta == tb && xa.len() == xb.len() && xa.iter().zip(xb).all(|(x, y)| same(x, y))
        }
        _ => a == b,
    }
}

fn every_scalar() -> Vec<(&'static str, Value)> {
    vec![
        ("t.u8.min", Value::U8(0)),
        ("t.u8.max", Value::U8(u8::MAX)),
        ("t.i8.min", Value::I8(i8::MIN)),
        ("t.i8.max", Value::I8(i8::MAX)),
        ("t.u16", Value::U16(u16::MAX)),
        ("t.i16", Value::I16(i16::MIN)),
        ("t.u32", Value::U32(u32::MAX)),
        ("t.i32", Value::I32(i32::MIN)),
        ("t.f32", Value::F32(-1.5e-38)),
        ("t.f32.nan", Value::F32(f32::from_bits(0x7fc0_1234))),
        ("t.f32.negzero", Value::F32(-0.0)),
        ("t.f32.inf", Value::F32(f32::INFINITY)),
        ("t.bool.t", Value::Bool(true)),
        ("t.bool.f", Value::Bool(false)),
        ("t.str", Value::String("héllo ✓ \u{1F600}".into())),
        ("t.str.empty", Value::String(String::new())),
        ("t.str.nul", Value::String("a\0b".into())),
        ("t.u64", Value::U64(u64::MAX)),
        ("t.i64", Value::I64(i64::MIN)),
        ("t.f64", Value::F64(std::f64::consts::PI)),
        (
            "t.f64.nan",
            Value::F64(f64::from_bits(0x7ff8_0000_0000_0001)),
        ),
        ("", Value::String("an empty key is legal".into())),
    ]
}

fn every_array() -> Vec<(&'static str, Value)> {
    use ValueType as T;
    let strs = |v: &[&str]| {
        v.iter()
            .map(|s| Value::String(s.to_string()))
            .collect::<Vec<_>>()
    };
    let mut out = vec![
        (
            "a.u8",
            Value::Array(T::U8, vec![Value::U8(1), Value::U8(255)]),
        ),
        (
            "a.i8",
            Value::Array(T::I8, vec![Value::I8(-1), Value::I8(7)]),
        ),
        ("a.u16", Value::Array(T::U16, vec![Value::U16(9)])),
        ("a.i16", Value::Array(T::I16, vec![Value::I16(-9)])),
        (
            "a.u32",
            Value::Array(T::U32, (0..100).map(Value::U32).collect()),
        ),
        (
            "a.i32",
            Value::Array(T::I32, vec![Value::I32(-3), Value::I32(3)]),
        ),
        (
            "a.f32",
            Value::Array(T::F32, vec![Value::F32(0.25), Value::F32(f32::NAN)]),
        ),
        (
            "a.bool",
            Value::Array(T::Bool, vec![Value::Bool(true), Value::Bool(false)]),
        ),
        (
            "a.str",
            Value::Array(T::String, strs(&["<s>", "", "▁the", "\n"])),
        ),
        ("a.u64", Value::Array(T::U64, vec![Value::U64(u64::MAX)])),
        ("a.i64", Value::Array(T::I64, vec![Value::I64(i64::MIN)])),
        ("a.f64", Value::Array(T::F64, vec![Value::F64(-2.5)])),
        (
            "a.nested",
            Value::Array(
                T::Array,
                vec![
                    Value::Array(T::String, strs(&["x", "y"])),
                    Value::Array(T::String, vec![]),
                    Value::Array(T::I32, vec![Value::I32(1)]),
                ],
            ),
        ),
        ("a.nested.empty", Value::Array(T::Array, vec![])),
    ];
    // An empty array of every element type keeps its element type.
    const EMPTY_KEYS: [&str; 13] = [
        "e.u8", "e.i8", "e.u16", "e.i16", "e.u32", "e.i32", "e.f32", "e.bool", "e.str", "e.arr",
        "e.u64", "e.i64", "e.f64",
    ];
    for (id, key) in EMPTY_KEYS.iter().enumerate() {
        let t = ValueType::from_id(id as u32).unwrap();
        out.push((key, Value::Array(t, vec![])));
    }
    out
}

/// Eight levels of array nesting: the deepest the parser accepts.
fn nested(levels: usize) -> Value {
    let mut v = Value::Array(ValueType::U8, vec![Value::U8(42)]);
    for _ in 1..levels {
        v = Value::Array(ValueType::Array, vec![v]);
    }
    v
}

fn writer_with_everything() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("llama".into()));
    for (k, v) in every_scalar().into_iter().chain(every_array()) {
        w.set(k, v);
    }
    w.set("deep.8", nested(8));
    w
}

#[test]
fn every_value_type_round_trips_in_order() {
    let w = writer_with_everything();
    let bytes = w.to_bytes();
    let h = parse(&bytes).expect("parse");
    assert_eq!(h.version, 3);
    assert_eq!(h.metadata.len(), w.metadata.len());
    // Same keys, same order, same values bit for bit.
    for ((ka, va), (kb, vb)) in w.metadata.iter().zip(h.metadata.iter()) {
        assert_eq!(ka, kb);
        assert!(same(va, vb), "`{ka}`: wrote {va:?}, read {vb:?}");
    }
    // Every type tag 0..=12 occurs both as a scalar (or array) and as an array element type.
    let mut seen_scalar = [false; 13];
    let mut seen_elem = [false; 13];
    for (_, v) in h.metadata.iter() {
        seen_scalar[v.value_type() as usize] = true;
        if let Value::Array(t, _) = v {
            seen_elem[*t as usize] = true;
        }
    }
    assert!(seen_scalar.iter().all(|&s| s), "{seen_scalar:?}");
    assert!(seen_elem.iter().all(|&s| s), "{seen_elem:?}");
}

#[test]
fn version_2_reads_like_version_3() {
    let mut bytes = writer_with_everything().to_bytes();
    let v3 = parse(&bytes).expect("v3");
    bytes[4..8].copy_from_slice(&2u32.to_le_bytes());
    let v2 = parse(&bytes).expect("v2");
    assert_eq!(v2.version, 2);
    assert_eq!(v3.version, 3);
    assert_eq!(v2.metadata.len(), v3.metadata.len());
    for ((ka, va), (kb, vb)) in v2.metadata.iter().zip(v3.metadata.iter()) {
        assert_eq!(ka, kb);
        assert!(same(va, vb));
    }
    assert_eq!(v2.data_offset, v3.data_offset);
}

#[test]
fn nesting_limit_is_exactly_eight_levels() {
    let mut w = GgufWriter::new();
    w.set("deep", nested(8));
    assert!(parse(&w.to_bytes()).is_ok());
    let mut w = GgufWriter::new();
    w.set("deep", nested(9));
    match parse(&w.to_bytes()) {
        Err(e @ GgufError::NestingTooDeep { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("`deep`") && msg.contains("offset"), "{msg}");
        }
        other => panic!("expected NestingTooDeep, got {other:?}"),
    }
}

fn tensor_bytes(ty: GgmlType, n_elements: u64, seed: u8) -> Vec<u8> {
    let len = ty.row_bytes(n_elements).unwrap() as usize;
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn tensors_round_trip_through_a_file_with_custom_alignment() {
    for align in [32u32, 64, 1, 4096] {
        let mut w = GgufWriter::new();
        w.set("general.alignment", Value::U32(align));
        let specs: [(&str, &[u64], GgmlType); 5] = [
            ("a", &[7], GgmlType::F32),
            ("b", &[64, 3], GgmlType::Q4_0),
            ("c", &[256, 2, 1], GgmlType::Q6K),
            ("d", &[0, 5], GgmlType::F16),
            ("e", &[32, 1, 2, 3], GgmlType::Q8_0),
        ];
        for (i, (name, dims, ty)) in specs.iter().enumerate() {
            let n: u64 = dims.iter().product();
            w.add_tensor(*name, dims, *ty, tensor_bytes(*ty, n, i as u8))
                .unwrap();
        }
        let path = std::env::temp_dir().join(format!(
            "lockstep-gguf-roundtrip-{}-{align}.gguf",
            std::process::id()
        ));
        w.write_file(&path).unwrap();
        let f = GgufFile::open(&path).unwrap();
        let h = f.header();
        assert_eq!(h.alignment, u64::from(align));
        assert_eq!(h.data_offset % u64::from(align), 0);
        assert_eq!(f.tensors().len(), specs.len());
        for ((name, dims, ty), (wt, rt)) in specs.iter().zip(w.tensors.iter().zip(f.tensors())) {
            assert_eq!(rt.name, *name);
            assert_eq!(rt.dims, dims.to_vec());
            assert_eq!(rt.ty, *ty);
            assert_eq!(rt.offset % u64::from(align), 0);
            assert_eq!(f.tensor_data(rt), wt.data.as_slice(), "tensor {name}");
            assert_eq!(f.tensor_info(name).unwrap(), rt);
        }
        assert!(matches!(
            f.tensor_info("nope"),
            Err(GgufError::NoSuchTensor(_))
        ));
        drop(f);
        let _ = std::fs::remove_file(&path);
    }
}

#[test]
fn writer_refuses_rows_that_are_not_whole_blocks() {
    let mut w = GgufWriter::new();
    // 16 × 2 = 32 elements is one Q4_0 block in total, but each 16-element row is half a block:
    // the reader would refuse this file, so the writer must too.
    let err = w
        .add_tensor("t", &[16, 2], GgmlType::Q4_0, vec![0; 18])
        .unwrap_err();
    assert!(err.to_string().contains("`t`"), "{err}");
    let err = w
        .add_tensor("u", &[32], GgmlType::Q4_0, vec![0; 17])
        .unwrap_err();
    assert!(err.to_string().contains("18"), "{err}");
}

/// Reading a real file and writing its metadata and tensors back out reproduces it byte for
/// byte (llama.cpp's tools pad the last tensor to the alignment; our writer does not).
#[test]
fn real_fixture_is_reproduced_byte_for_byte() {
    for ty in common::TINY_TYPES {
        let path = common::tiny_llama(ty);
        let original = common::read(&path);
        let f = GgufFile::open(&path).unwrap();
        let mut w = GgufWriter::new();
        for (k, v) in f.metadata().iter() {
            w.set(k, v.clone());
        }
        for t in f.tensors() {
            w.add_tensor(t.name.clone(), &t.dims, t.ty, f.tensor_data(t).to_vec())
                .unwrap();
        }
        let written = w.to_bytes();
        assert!(written.len() <= original.len());
        assert_eq!(written[..], original[..written.len()], "{ty}");
        assert!(
            original[written.len()..].iter().all(|&b| b == 0),
            "{ty}: only padding may follow"
        );
    }
}
