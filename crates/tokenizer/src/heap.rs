//! A 4-ary max-heap. Merging long words keeps hundreds of thousands of queued pairs; a 4-ary
//! heap is half as deep as a binary one and its children share cache lines, which matters once
//! the queue outgrows the CPU caches.

pub(crate) struct QuadHeap<T> {
    data: Vec<T>,
}

impl<T> Default for QuadHeap<T> {
    fn default() -> Self {
        QuadHeap { data: Vec::new() }
    }
}

impl<T: Ord + Copy> QuadHeap<T> {
    pub(crate) fn with_capacity(n: usize) -> Self {
        QuadHeap {
            data: Vec::with_capacity(n),
        }
    }

    pub(crate) fn clear(&mut self) {
        self.data.clear();
    }

    pub(crate) fn push(&mut self, item: T) {
        let mut i = self.data.len();
        self.data.push(item);
        while i > 0 {
            let parent = (i - 1) / 4;
            if self.data[parent] >= item {
                break;
            }
            self.data[i] = self.data[parent];
            i = parent;
        }
        self.data[i] = item;
    }

    /// Removes and returns the greatest item.
    pub(crate) fn pop(&mut self) -> Option<T> {
        let last = self.data.pop()?;
        let n = self.data.len();
        if n == 0 {
            return Some(last);
        }
        let top = self.data[0];
        // Sift `last` down from the root.
        let mut i = 0;
        loop {
            let first = 4 * i + 1;
            if first >= n {
                break;
            }
            let end = (first + 4).min(n);
            let mut best = first;
            for c in first + 1..end {
                if self.data[c] > self.data[best] {
                    best = c;
                }
            }
            if self.data[best] <= last {
                break;
            }
            self.data[i] = self.data[best];
            i = best;
        }
        self.data[i] = last;
        Some(top)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_order() {
        let mut h = QuadHeap::default();
        let mut x: u64 = 12345;
        let mut v = Vec::new();
        for _ in 0..1000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = (x >> 40) % 100;
            h.push(k);
            v.push(k);
        }
        v.sort_unstable_by(|a, b| b.cmp(a));
        let mut out = Vec::new();
        while let Some(k) = h.pop() {
            out.push(k);
        }
        assert_eq!(out, v);
    }
}
