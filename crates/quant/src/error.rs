//! Errors of the row functions: every one names the type and the lengths involved, because the
//! caller usually holds a tensor name and can only act on "which format, how many bytes".

use crate::GgmlType;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuantError {
    /// The type exists but this crate has no kernel for it in that direction.
    #[error("{op} of {ty} (ggml type {id}) is not supported", id = ty.id())]
    Unsupported { ty: GgmlType, op: &'static str },

    /// The element count does not split into whole blocks.
    #[error("{ty}: {n_elements} elements is not a whole number of {block_size}-element blocks")]
    PartialBlock {
        ty: GgmlType,
        n_elements: usize,
        block_size: usize,
    },

    /// The quantized buffer does not hold exactly the blocks that the element count needs.
    #[error(
        "{ty}: {n_elements} elements take {expected} bytes ({type_size} per {block_size}-element \
         block), but the buffer has {actual} bytes"
    )]
    ByteLength {
        ty: GgmlType,
        n_elements: usize,
        block_size: usize,
        type_size: usize,
        expected: usize,
        actual: usize,
    },

    /// Fewer input values than the caller asked to quantize.
    #[error("{ty}: asked to quantize {n_elements} values, but the input has only {actual}")]
    InputTooShort {
        ty: GgmlType,
        n_elements: usize,
        actual: usize,
    },

    /// The requested size does not fit in memory addresses.
    #[error("{ty}: {n_elements} elements overflow the address space")]
    Overflow { ty: GgmlType, n_elements: usize },
}

/// Bytes that `n_elements` of `ty` take, after checking that they form whole blocks.
pub(crate) fn expected_bytes(ty: GgmlType, n_elements: usize) -> Result<usize, QuantError> {
    let block_size = ty.block_size();
    if !n_elements.is_multiple_of(block_size) {
        return Err(QuantError::PartialBlock {
            ty,
            n_elements,
            block_size,
        });
    }
    (n_elements / block_size)
        .checked_mul(ty.type_size())
        .ok_or(QuantError::Overflow { ty, n_elements })
}

/// Checks that `bytes` holds exactly the blocks of `n_elements` values of `ty`.
pub(crate) fn check_lengths(
    ty: GgmlType,
    n_elements: usize,
    bytes: usize,
) -> Result<(), QuantError> {
    let expected = expected_bytes(ty, n_elements)?;
    if expected != bytes {
        return Err(QuantError::ByteLength {
            ty,
            n_elements,
            block_size: ty.block_size(),
            type_size: ty.type_size(),
            expected,
            actual: bytes,
        });
    }
    Ok(())
}
