//! Paged KV bookkeeping: fixed-size blocks, a free list, and a block table per sequence.
//!
//! The backend owns the cache memory; this module only decides which block holds which
//! positions. Slot of position `p` of a sequence = `table[p / block_size] * block_size +
//! p % block_size`, one formula for every backend and for prefill and decode alike.

use crate::EngineError;

#[derive(Clone, Debug)]
pub struct BlockAllocator {
    block_size: usize,
    n_blocks: usize,
    /// Free block ids. Popped from the end; the initial order is configurable so tests can
    /// hand out blocks out of order (fragmented tables).
    free: Vec<u32>,
}

impl BlockAllocator {
    pub fn new(n_blocks: usize, block_size: usize) -> BlockAllocator {
        // Reverse so blocks are handed out 0, 1, 2, ... by default.
        let free = (0..n_blocks as u32).rev().collect();
        BlockAllocator {
            block_size,
            n_blocks,
            free,
        }
    }

    /// An allocator that hands blocks out in a scrambled order (for invariance checks: a
    /// sequence's blocks then are neither contiguous nor ascending).
    pub fn new_scrambled(n_blocks: usize, block_size: usize, seed: u64) -> BlockAllocator {
        let mut a = BlockAllocator::new(n_blocks, block_size);
        let mut s = seed | 1;
        for i in (1..a.free.len()).rev() {
            // xorshift64: any fixed permutation will do.
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            a.free.swap(i, (s % (i as u64 + 1)) as usize);
        }
        a
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn n_blocks(&self) -> usize {
        self.n_blocks
    }

    pub fn n_free(&self) -> usize {
        self.free.len()
    }

    /// Grows `table` so it covers `n_positions` positions.
    pub fn ensure(&mut self, table: &mut Vec<u32>, n_positions: usize) -> Result<(), EngineError> {
        let need = n_positions.div_ceil(self.block_size);
        if need > table.len() {
            let more = need - table.len();
            if more > self.free.len() {
                return Err(EngineError::CacheFull {
                    needed_blocks: more,
                    free_blocks: self.free.len(),
                    block_size: self.block_size,
                });
            }
            for _ in 0..more {
                if let Some(b) = self.free.pop() {
                    table.push(b);
                }
            }
        }
        Ok(())
    }

    /// Returns a sequence's blocks to the free list.
    pub fn release(&mut self, table: &mut Vec<u32>) {
        self.free.extend(table.drain(..).rev());
    }

    pub fn slot(&self, table: &[u32], pos: usize) -> u32 {
        table[pos / self.block_size] * self.block_size as u32 + (pos % self.block_size) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_block_table() {
        let mut a = BlockAllocator::new(4, 16);
        let mut t = Vec::new();
        a.ensure(&mut t, 17).unwrap();
        assert_eq!(t, vec![0, 1]);
        assert_eq!(a.slot(&t, 0), 0);
        assert_eq!(a.slot(&t, 16), 16);
        let mut t2 = Vec::new();
        a.ensure(&mut t2, 1).unwrap();
        a.ensure(&mut t, 33).unwrap();
        assert_eq!(t, vec![0, 1, 3]);
        assert_eq!(a.slot(&t, 32), 48);
        assert!(matches!(
            a.ensure(&mut t, 100),
            Err(EngineError::CacheFull { .. })
        ));
        a.release(&mut t);
        assert_eq!(a.n_free(), 3);
    }

    #[test]
    fn scrambled_allocator_hands_out_every_block_once() {
        let mut a = BlockAllocator::new_scrambled(32, 4, 7);
        let mut t = Vec::new();
        a.ensure(&mut t, 128).unwrap();
        let mut sorted = t.clone();
        sorted.sort();
        assert_eq!(sorted, (0..32).collect::<Vec<u32>>());
        assert_ne!(t, sorted, "scrambled order should not be ascending");
    }
}
