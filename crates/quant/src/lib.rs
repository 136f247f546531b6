//! ggml's quantization formats.
//!
//! `types` is the table of formats; `dequant` turns blocks into f32 bit-identically to ggml;
//! `quantize` writes blocks (activations to Q8_0/Q8_K exactly as ggml's reference does, weights
//! of every type as `ggml_quantize_chunk` does without an importance matrix). `blocks` has the
//! byte layouts and the f16/bf16 conversions.
//!
//! ```
//! use lockstep_quant::{dequantize, quantize, GgmlType};
//!
//! let x: Vec<f32> = (0..512).map(|i| (i as f32 * 0.37).sin()).collect();
//! let q = quantize(GgmlType::Q4K, &x, x.len())?;
//! assert_eq!(q.len(), 2 * 144);
//! let y = dequantize(GgmlType::Q4K, &q, x.len())?;
//! let err: f32 = x.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum();
//! let norm: f32 = x.iter().map(|a| a * a).sum();
//! assert!(err / norm < 0.01); // about 4.5 bits per value
//! # Ok::<(), lockstep_quant::QuantError>(())
//! ```

pub mod blocks;
pub mod dequant;
pub mod error;
pub mod quantize;
pub mod types;

pub use blocks::{bf16_to_f32, f32_to_bf16, f32_to_fp16, fp16_to_f32};
pub use dequant::{dequantize, dequantize_row, dequantize_row_parallel, quantized_size};
pub use error::QuantError;
pub use quantize::{quantize, quantize_row};
pub use types::{GgmlType, ALL_TYPES};
