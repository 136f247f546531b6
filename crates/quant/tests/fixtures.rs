//! Checks against ggml's own output (shared/fixtures/quant, made by tools/make_quant_zoo.py
//! through ggml's C API): dequantization bit for bit, the reference quantizers byte for byte,
//! and the round-trip error of every quantizer against ggml's.

use std::path::PathBuf;

use lockstep_quant::{dequantize, quantize, GgmlType};
use safetensors::{Dtype, SafeTensors};

const TYPES: &[&str] = &[
    "F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
    "Q6_K", "IQ4_NL", "IQ4_XS", "Q8_K",
];

fn fixture_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/quant");
    assert!(
        dir.is_dir(),
        "quant fixtures not found at {} (expected shared/fixtures/quant next to the workspace); \
         these tests need them and do not skip",
        dir.display()
    );
    dir
}

struct Fixture {
    name: &'static str,
    ty: GgmlType,
    input: Vec<f32>,
    quantized: Option<Vec<u8>>,
    dequantized: Option<Vec<f32>>,
    ref_quantized: Option<Vec<u8>>,
    ref_dequantized: Option<Vec<f32>>,
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn load(name: &'static str) -> Fixture {
    let path = fixture_dir().join(format!("{name}.safetensors"));
    let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let st = SafeTensors::deserialize(&data).unwrap_or_else(|e| panic!("{name}: {e}"));
    let get_f32 = |key: &str| {
        st.tensor(key).ok().map(|t| {
            assert_eq!(t.dtype(), Dtype::F32, "{name}.{key}");
            f32s(t.data())
        })
    };
    let get_u8 = |key: &str| {
        st.tensor(key).ok().map(|t| {
            assert_eq!(t.dtype(), Dtype::U8, "{name}.{key}");
            t.data().to_vec()
        })
    };
    let ty = GgmlType::from_name(name).unwrap_or_else(|| panic!("unknown type {name}"));
    let input = get_f32("input").unwrap_or_else(|| panic!("{name}: no input"));
    assert_eq!(input.len(), 16 * 512, "{name}: input shape");
    Fixture {
        name,
        ty,
        input,
        quantized: get_u8("quantized"),
        dequantized: get_f32("dequantized"),
        ref_quantized: get_u8("ref_quantized"),
        ref_dequantized: get_f32("ref_dequantized"),
    }
}

fn all() -> Vec<Fixture> {
    TYPES.iter().map(|n| load(n)).collect()
}

/// Index and bits of the first differing value, if any.
fn first_bit_diff(a: &[f32], b: &[f32]) -> Option<(usize, u32, u32)> {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .enumerate()
        .find(|(_, (x, y))| x.to_bits() != y.to_bits())
        .map(|(i, (x, y))| (i, x.to_bits(), y.to_bits()))
}

fn nmse(approx: &[f32], exact: &[f32]) -> f64 {
    let mut err = 0.0f64;
    let mut norm = 0.0f64;
    for (&a, &b) in approx.iter().zip(exact) {
        err += (a as f64 - b as f64).powi(2);
        norm += (b as f64).powi(2);
    }
    err / norm
}

#[test]
fn every_fixture_is_present() {
    for f in all() {
        assert!(
            f.quantized.is_some() || f.ref_quantized.is_some(),
            "{}: no quantized data",
            f.name
        );
    }
}

#[test]
fn dequantize_is_bit_identical_to_ggml() {
    let mut checked = 0;
    for f in all() {
        let n = f.input.len();
        for (q, want, what) in [
            (&f.quantized, &f.dequantized, "quantized"),
            (&f.ref_quantized, &f.ref_dequantized, "ref_quantized"),
        ] {
            let (Some(q), Some(want)) = (q, want) else {
                continue;
            };
            let got = dequantize(f.ty, q, n).unwrap_or_else(|e| panic!("{}: {e}", f.name));
            if let Some((i, a, b)) = first_bit_diff(&got, want) {
                panic!(
                    "{} {what}: element {i} is {a:#010x} ({}), ggml has {b:#010x} ({})",
                    f.name,
                    f32::from_bits(a),
                    f32::from_bits(b)
                );
            }
            checked += 1;
        }
    }
    // 15 storage types have `quantized`, 13 of them also `ref_quantized`; Q8_K has only the ref.
    assert!(checked >= 16, "only {checked} fixtures checked");
}

fn first_byte_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).position(|(x, y)| x != y)
}

#[test]
fn activation_quantizers_match_ggml_reference_exactly() {
    for name in ["Q8_0", "Q8_K"] {
        let f = load(name);
        let want = f.ref_quantized.as_ref().expect("ref_quantized");
        let got = quantize(f.ty, &f.input, f.input.len()).unwrap();
        if let Some(i) = first_byte_diff(&got, want) {
            panic!(
                "{name}: byte {i} (block {}) is {:#04x}, ggml's reference has {:#04x}",
                i / f.ty.type_size(),
                got[i],
                want[i]
            );
        }
    }
}

/// Types whose quantizer reproduces ggml's blocks byte for byte: the `quantized` tensor
/// (ggml_quantize_chunk) and, where ggml's `from_float_ref` is the same algorithm, the
/// `ref_quantized` one.
#[test]
fn quantizers_match_ggml_byte_for_byte() {
    let mut report = Vec::new();
    for f in all() {
        let got = quantize(f.ty, &f.input, f.input.len()).unwrap();
        for (want, what) in [
            (&f.quantized, "quantized"),
            (&f.ref_quantized, "ref_quantized"),
        ] {
            let Some(want) = want else { continue };
            // IQ4_NL's from_float_ref searches with ntry = -1 (and reuses stale levels for
            // all-zero blocks); we follow ggml_quantize_chunk's ntry = 7, as llama-quantize does.
            if f.name == "IQ4_NL" && what == "ref_quantized" {
                continue;
            }
            if let Some(i) = first_byte_diff(&got, want) {
                panic!(
                    "{} vs {what}: byte {i} (block {}) is {:#04x}, ggml has {:#04x}",
                    f.name,
                    i / f.ty.type_size(),
                    got[i],
                    want[i]
                );
            }
            report.push(format!("{}:{what}", f.name));
        }
    }
    eprintln!("byte-identical: {}", report.join(" "));
}

#[test]
fn round_trip_error_is_within_ggml_bound() {
    let mut lines = Vec::new();
    for f in all() {
        let n = f.input.len();
        let ggml_y = f
            .dequantized
            .as_ref()
            .or(f.ref_dequantized.as_ref())
            .expect("dequantized");
        let ggml = nmse(ggml_y, &f.input);
        let q = quantize(f.ty, &f.input, n).unwrap();
        let ours = nmse(&dequantize(f.ty, &q, n).unwrap(), &f.input);
        lines.push(format!("{:>7}: ours {ours:.4e}  ggml {ggml:.4e}", f.name));
        // The tiny absolute slack only matters for F32, where both are exactly zero.
        assert!(
            ours <= 1.10 * ggml + 1e-30,
            "{}: round-trip NMSE {ours:.4e} exceeds 1.10 x ggml's {ggml:.4e}",
            f.name
        );
    }
    eprintln!("{}", lines.join("\n"));
}
