//! Guard-checked output buffers (`CpuBackend::with_output_guards`, used by `lockstep check
//! --ops`): every output a kernel writes through a raw pointer (`dot::Out`) is allocated with a
//! run of canary values on both sides, checked when the op returns. A kernel that writes past
//! either end of its output leaves a changed canary, reported by `Backend::guard_violations`.
//! Off by default: normal runs allocate exactly the output.

use std::sync::Mutex;

/// Canary values on each side of a guarded output.
const GUARD: usize = 64;
/// A NaN with a payload no arithmetic produces, compared by bits.
const CANARY: u32 = 0x7fa5_a5a5;

#[derive(Default)]
pub struct Guards {
    pub enabled: bool,
    violations: Mutex<Vec<String>>,
}

/// An output buffer, with guard regions when enabled.
pub struct OutBuf {
    v: Vec<f32>,
    off: usize,
    len: usize,
}

impl OutBuf {
    /// The output itself (without the guards).
    pub fn as_mut_slice(&mut self) -> &mut [f32] {
        &mut self.v[self.off..self.off + self.len]
    }

    /// Pointer to the first output element, for `dot::Out`.
    pub fn as_mut_ptr(&mut self) -> *mut f32 {
        self.as_mut_slice().as_mut_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

impl Guards {
    /// A zeroed output of `len` values.
    pub fn alloc(&self, len: usize) -> OutBuf {
        if !self.enabled {
            return OutBuf {
                v: vec![0f32; len],
                off: 0,
                len,
            };
        }
        let mut v = vec![f32::from_bits(CANARY); len + 2 * GUARD];
        v[GUARD..GUARD + len].fill(0.0);
        OutBuf { v, off: GUARD, len }
    }

    /// The output values; with guards, checks the canaries and records any that changed.
    pub fn finish(&self, op: &str, b: OutBuf) -> Vec<f32> {
        if !self.enabled {
            return b.v;
        }
        let before = b.v[..b.off]
            .iter()
            .filter(|v| v.to_bits() != CANARY)
            .count();
        let after = b.v[b.off + b.len..]
            .iter()
            .filter(|v| v.to_bits() != CANARY)
            .count();
        if before + after > 0 {
            let mut log = self.violations.lock().unwrap_or_else(|e| e.into_inner());
            log.push(format!(
                "{op}: wrote {before} value(s) before and {after} after its output of {}",
                b.len
            ));
        }
        b.v[b.off..b.off + b.len].to_vec()
    }

    /// The violations recorded since the last call.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.violations.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_past_either_end_is_reported() {
        let g = Guards {
            enabled: true,
            ..Guards::default()
        };
        let mut b = g.alloc(10);
        b.as_mut_slice().fill(1.0);
        assert_eq!(g.finish("clean", b), vec![1.0; 10]);
        assert!(g.take().is_empty());
        let mut b = g.alloc(10);
        let end = b.off + b.len;
        b.v[end] = 0.0; // one past the end
        b.v[b.off - 3] = 2.0; // before the start
        assert_eq!(g.finish("op", b).len(), 10);
        assert_eq!(
            g.take(),
            vec!["op: wrote 1 value(s) before and 1 after its output of 10".to_string()]
        );
        // Off: exact allocation, nothing checked.
        let off = Guards::default();
        assert_eq!(off.alloc(5).v.len(), 5);
    }
}
