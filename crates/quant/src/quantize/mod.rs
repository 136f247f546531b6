//! f32 to blocks.
//!
//! Every quantizer here follows the one `ggml_quantize_chunk` runs without an importance matrix
//! (for most types that is ggml's `quantize_row_*_ref`; for IQ4_NL and IQ4_XS it is
//! `quantize_iq4_*` with 7 extra scale tries), step for step, so the blocks are the same bytes
//! that llama-quantize writes. Q8_0 and Q8_K are the activation formats of ggml's CPU dot
//! products.
//!
//! Inputs are not checked for NaN or infinity: like ggml, such values produce some block
//! without panicking.

mod kquants;
mod legacy;
mod nl;
pub(crate) mod search;

use crate::blocks::{f32_to_bf16, f32_to_fp16};
use crate::error::{check_lengths, expected_bytes};
use crate::{GgmlType, QuantError};

/// Quantizes `src` (a whole number of blocks of `ty`) into `dst`, which must be exactly
/// `src.len() / ty.block_size() * ty.type_size()` bytes.
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    let kernel = kernel(ty)?;
    check_lengths(ty, src.len(), dst.len())?;
    kernel(src, dst);
    Ok(())
}

/// Quantizes the first `n_elements` values of `src` into a new buffer.
pub fn quantize(ty: GgmlType, src: &[f32], n_elements: usize) -> Result<Vec<u8>, QuantError> {
    let kernel = kernel(ty)?;
    let bytes = expected_bytes(ty, n_elements)?;
    let src = src.get(..n_elements).ok_or(QuantError::InputTooShort {
        ty,
        n_elements,
        actual: src.len(),
    })?;
    let mut out = vec![0u8; bytes];
    kernel(src, &mut out);
    Ok(out)
}

type Kernel = fn(&[f32], &mut [u8]);

fn kernel(ty: GgmlType) -> Result<Kernel, QuantError> {
    use GgmlType::*;
    Ok(match ty {
        F32 => f32_row,
        F16 => f16_row,
        Bf16 => bf16_row,
        Q4_0 => legacy::q4_0,
        Q4_1 => legacy::q4_1,
        Q5_0 => legacy::q5_0,
        Q5_1 => legacy::q5_1,
        Q8_0 => legacy::q8_0,
        Q2K => kquants::q2_k,
        Q3K => kquants::q3_k,
        Q4K => kquants::q4_k,
        Q5K => kquants::q5_k,
        Q6K => kquants::q6_k,
        Q8K => kquants::q8_k,
        Iq4Nl => nl::iq4_nl,
        Iq4Xs => nl::iq4_xs,
        _ => {
            return Err(QuantError::Unsupported {
                ty,
                op: "quantization",
            })
        }
    })
}

/// Pairs each `N`-value group of `src` with its `B`-byte block. Lengths were checked by the
/// caller; the array conversions cannot fail on `chunks_exact` pieces.
#[inline(always)]
pub(crate) fn blocks_mut<'a, const N: usize, const B: usize>(
    src: &'a [f32],
    dst: &'a mut [u8],
) -> impl Iterator<Item = (&'a [f32; N], &'a mut [u8; B])> {
    src.chunks_exact(N)
        .zip(dst.chunks_exact_mut(B))
        .filter_map(|(s, d)| Some((s.try_into().ok()?, d.try_into().ok()?)))
}

#[inline(always)]
pub(crate) fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

#[inline(always)]
pub(crate) fn put_f16(b: &mut [u8], at: usize, v: f32) {
    put_u16(b, at, f32_to_fp16(v));
}

fn f32_row(src: &[f32], dst: &mut [u8]) {
    for (v, b) in src.iter().zip(dst.chunks_exact_mut(4)) {
        b.copy_from_slice(&v.to_le_bytes());
    }
}

fn f16_row(src: &[f32], dst: &mut [u8]) {
    for (v, b) in src.iter().zip(dst.chunks_exact_mut(2)) {
        b.copy_from_slice(&f32_to_fp16(*v).to_le_bytes());
    }
}

fn bf16_row(src: &[f32], dst: &mut [u8]) {
    for (v, b) in src.iter().zip(dst.chunks_exact_mut(2)) {
        b.copy_from_slice(&f32_to_bf16(*v).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_unsupported_types() {
        let err = quantize_row(GgmlType::Iq1S, &[0.0; 256], &mut [0u8; 50]).unwrap_err();
        assert!(matches!(err, QuantError::Unsupported { .. }));
        assert!(err.to_string().contains("IQ1_S"), "{err}");
        assert!(quantize(GgmlType::Mxfp4, &[0.0; 32], 32).is_err());
    }

    #[test]
    fn rejects_wrong_lengths() {
        let err = quantize_row(GgmlType::Q8_0, &[0.0; 31], &mut [0u8; 34]).unwrap_err();
        assert!(matches!(err, QuantError::PartialBlock { .. }), "{err}");
        let err = quantize_row(GgmlType::Q8_0, &[0.0; 64], &mut [0u8; 34]).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("Q8_0") && msg.contains("68") && msg.contains("34"),
            "{msg}"
        );
        let err = quantize(GgmlType::Q4K, &[0.0; 256], 512).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Q4_K: asked to quantize 512 values, but the input has only 256"
        );
        assert!(quantize(GgmlType::Q4K, &[0.0; 256], 100).is_err());
        assert_eq!(
            quantize(GgmlType::Q4K, &[0.0; 300], 256).unwrap().len(),
            144
        );
    }

    #[test]
    fn odd_inputs_do_not_panic() {
        let mut x = vec![0.0f32; 512];
        x[3] = f32::NAN;
        x[40] = f32::INFINITY;
        x[300] = -f32::INFINITY;
        x[301] = 3e38;
        x[302] = -3e38;
        x[400] = 1e-40;
        for &ty in crate::ALL_TYPES.iter().filter(|t| t.is_supported()) {
            let q = quantize(ty, &x, x.len()).unwrap();
            crate::dequantize(ty, &q, x.len()).unwrap();
        }
    }

    #[test]
    fn round_trip_is_close_for_plain_data() {
        let x: Vec<f32> = (0..1024)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0)
            .collect();
        for &ty in crate::ALL_TYPES.iter().filter(|t| t.is_supported()) {
            let q = quantize(ty, &x, x.len()).unwrap();
            let y = crate::dequantize(ty, &q, x.len()).unwrap();
            let err: f32 = x.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum();
            let norm: f32 = x.iter().map(|a| a * a).sum();
            // Loose: 2-bit Q2_K on uniform data lands near 0.06; real defects give ~1.
            assert!(err / norm < 0.1, "{ty}: nmse {}", err / norm);
        }
    }
}
