//! Paged KV bookkeeping: fixed-size blocks, a free list, and a block table per sequence.
//!
//! The backend owns the cache memory; this module only decides which block holds which
//! positions. Slot of position `p` of a sequence = `table[p / block_size] * block_size +
//! p % block_size`, one formula for every backend and for prefill and decode alike.
//!
//! Prefix caching (as vLLM's): a *full* block whose contents are known is registered under a
//! key chained from its parent's hash and its own tokens, so two prompts sharing a prefix of
//! whole blocks share those blocks. Blocks are reference counted; a registered block nobody
//! holds any more stays cached (its K/V still valid) until the allocator needs it, least
//! recently released first. Only whole blocks are shared, and a sequence only ever writes
//! positions past its shared prefix, so a shared block is never written again.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

use crate::EngineError;

/// Identity of a full block's contents: the hash of everything before it, and its own tokens
/// (compared exactly, so a hash collision of the tokens themselves cannot alias two blocks).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct BlockKey {
    parent: u64,
    tokens: Vec<u32>,
}

impl BlockKey {
    /// The chained hash a child block uses as its `parent`.
    fn chain_hash(&self) -> u64 {
        // SipHash with fixed keys: stable within a process, which is all a cache needs.
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.hash(&mut h);
        h.finish()
    }
}

/// The `parent` of a sequence's first block.
const ROOT_HASH: u64 = 0x6c6f_636b_7374_6570;

#[derive(Clone, Debug)]
pub struct BlockAllocator {
    block_size: usize,
    n_blocks: usize,
    /// Free block ids. Popped from the end; the initial order is configurable so tests can
    /// hand out blocks out of order (fragmented tables).
    free: Vec<u32>,
    /// Holders of each block (sequences whose table contains it).
    refs: Vec<u32>,
    /// The key a block is registered under in the prefix cache, if any.
    key_of: Vec<Option<BlockKey>>,
    /// Registered blocks by key.
    cached: HashMap<BlockKey, u32>,
    /// Registered blocks nobody holds, by release tick (oldest evicted first).
    evictable: BTreeMap<u64, u32>,
    /// Release tick of each evictable block (key into `evictable`).
    evictable_tick: Vec<Option<u64>>,
    tick: u64,
    /// Prefix-cache counters: blocks looked up and blocks found.
    pub prefix_queries: u64,
    pub prefix_hits: u64,
}

impl BlockAllocator {
    pub fn new(n_blocks: usize, block_size: usize) -> BlockAllocator {
        // Reverse so blocks are handed out 0, 1, 2, ... by default.
        let free = (0..n_blocks as u32).rev().collect();
        BlockAllocator {
            block_size,
            n_blocks,
            free,
            refs: vec![0; n_blocks],
            key_of: vec![None; n_blocks],
            cached: HashMap::new(),
            evictable: BTreeMap::new(),
            evictable_tick: vec![None; n_blocks],
            tick: 0,
            prefix_queries: 0,
            prefix_hits: 0,
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

    /// Blocks that can be handed out: never used, or cached but held by nobody.
    pub fn n_free(&self) -> usize {
        self.free.len() + self.evictable.len()
    }

    /// Blocks held by at least one sequence.
    pub fn n_used(&self) -> usize {
        self.n_blocks - self.n_free()
    }

    /// Blocks registered in the prefix cache (held or not).
    pub fn n_cached(&self) -> usize {
        self.cached.len()
    }

    /// How many sequences hold `block`.
    pub fn ref_count(&self, block: u32) -> u32 {
        self.refs.get(block as usize).copied().unwrap_or(0)
    }

    /// Takes one block: a never-used one first, else the least recently released cached one
    /// (which leaves the prefix cache).
    fn take_block(&mut self) -> Option<u32> {
        let b = match self.free.pop() {
            Some(b) => b,
            None => {
                let (_, b) = self.evictable.pop_first()?;
                self.evictable_tick[b as usize] = None;
                if let Some(key) = self.key_of[b as usize].take() {
                    self.cached.remove(&key);
                }
                b
            }
        };
        self.refs[b as usize] = 1;
        Some(b)
    }

    /// Grows `table` so it covers `n_positions` positions.
    pub fn ensure(&mut self, table: &mut Vec<u32>, n_positions: usize) -> Result<(), EngineError> {
        let need = n_positions.div_ceil(self.block_size);
        if need > table.len() {
            let more = need - table.len();
            if more > self.n_free() {
                return Err(EngineError::CacheFull {
                    needed_blocks: more,
                    free_blocks: self.n_free(),
                    block_size: self.block_size,
                });
            }
            for _ in 0..more {
                if let Some(b) = self.take_block() {
                    table.push(b);
                }
            }
        }
        Ok(())
    }

    /// Drops a sequence's hold on its blocks. A block nobody holds goes back to the free
    /// list, or, when registered in the prefix cache, stays cached until it is needed.
    pub fn release(&mut self, table: &mut Vec<u32>) {
        for b in table.drain(..).rev() {
            let r = &mut self.refs[b as usize];
            *r = r.saturating_sub(1);
            if *r > 0 {
                continue;
            }
            if self.key_of[b as usize].is_some() {
                self.tick += 1;
                self.evictable.insert(self.tick, b);
                self.evictable_tick[b as usize] = Some(self.tick);
            } else {
                self.free.push(b);
            }
        }
    }

    /// The cached blocks holding the longest prefix of whole blocks of `tokens`, each now
    /// held once more by the caller (append them to a table; [`release`](Self::release)
    /// gives them back). At most `max_blocks` are returned.
    pub fn lookup_prefix(&mut self, tokens: &[u32], max_blocks: usize) -> Vec<u32> {
        let mut found = Vec::new();
        let mut parent = ROOT_HASH;
        for chunk in tokens.chunks_exact(self.block_size).take(max_blocks) {
            self.prefix_queries += 1;
            let key = BlockKey {
                parent,
                tokens: chunk.to_vec(),
            };
            let Some(&b) = self.cached.get(&key) else {
                break;
            };
            self.prefix_hits += 1;
            if self.refs[b as usize] == 0 {
                if let Some(t) = self.evictable_tick[b as usize].take() {
                    self.evictable.remove(&t);
                }
            }
            self.refs[b as usize] += 1;
            parent = key.chain_hash();
            found.push(b);
        }
        found
    }

    /// Registers the full blocks of a sequence whose cached tokens are `tokens` (positions
    /// `0..tokens.len()` of `table`), so later prompts sharing that prefix reuse them. A
    /// block whose contents are already cached under another block stays private.
    pub fn register_prefix(&mut self, table: &[u32], tokens: &[u32]) {
        let mut parent = ROOT_HASH;
        for (chunk, &b) in tokens.chunks_exact(self.block_size).zip(table) {
            let key = BlockKey {
                parent,
                tokens: chunk.to_vec(),
            };
            parent = key.chain_hash();
            if self.key_of[b as usize].as_ref() == Some(&key) {
                continue;
            }
            if self.key_of[b as usize].is_some() || self.cached.contains_key(&key) {
                // Either the block already means something else (impossible for a full block
                // a sequence holds) or an equal block exists: keep the first one.
                continue;
            }
            self.cached.insert(key.clone(), b);
            self.key_of[b as usize] = Some(key);
        }
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

    #[test]
    fn prefix_blocks_are_shared_refcounted_and_evicted_when_needed() {
        let mut a = BlockAllocator::new(4, 2);
        let tokens = [1, 2, 3, 4, 5];
        let mut t1 = Vec::new();
        a.ensure(&mut t1, 5).unwrap();
        a.register_prefix(&t1, &tokens);
        // Two whole blocks registered; the partial third is not.
        assert_eq!(a.n_cached(), 2);
        // A second prompt sharing the first block only.
        let hit = a.lookup_prefix(&[1, 2, 9, 9, 7], 2);
        assert_eq!(hit, vec![t1[0]]);
        assert_eq!(a.ref_count(t1[0]), 2);
        assert_eq!((a.prefix_queries, a.prefix_hits), (2, 1));
        // The chain matters: the same tokens after a different first block do not match.
        assert!(a.lookup_prefix(&[9, 9, 3, 4], 2).is_empty());
        let mut t2 = hit;
        a.release(&mut t1);
        // Block 0 is still held by t2; block 1 is cached and unheld; block 2 is free.
        assert_eq!(a.n_free(), 3);
        assert_eq!(a.n_used(), 1);
        a.release(&mut t2);
        assert_eq!(a.n_free(), 4);
        assert_eq!(a.n_cached(), 2);
        // A full prompt hit takes both cached blocks back.
        let again = a.lookup_prefix(&tokens, 2);
        assert_eq!(again.len(), 2);
        let mut t3 = again;
        a.release(&mut t3);
        // Needing every block evicts the cached ones (oldest first) and forgets them.
        let mut big = Vec::new();
        a.ensure(&mut big, 8).unwrap();
        assert_eq!(a.n_cached(), 0);
        assert!(a.lookup_prefix(&tokens, 2).is_empty());
        assert!(matches!(
            a.ensure(&mut big, 9),
            Err(EngineError::CacheFull { .. })
        ));
    }
}
