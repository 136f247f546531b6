//! The fast CPU backend.
//!
//! Weights stay in their GGUF format (a copy of the quantized bytes; no f32 copy of any
//! matrix). A matmul quantizes each activation row once to 8-bit blocks (see `act`), decodes a
//! few weight rows at a time into an int8 layout shared by every quant type (see `decode`) and
//! runs AVX2 int8 dot products over them (see `dot`), with a portable build of every kernel for
//! CPUs without AVX2. The KV cache is f16 by default (f32 on request); attention reads only
//! the keys a query can see (the causal range, cut to the sliding window).
//!
//! Determinism: every output element is computed by one fixed sequence of operations that
//! does not depend on the batch's other rows, on tiling, or on the thread count, so this
//! backend is batch-invariant and thread-count-invariant bit for bit, like the reference.

// Kernels index several arrays by the same lane / tile index, and take many plain arguments.
#![allow(clippy::needless_range_loop, clippy::too_many_arguments)]

/// `planted!(sel, Variant)`: whether seeded fault `Variant` is selected. In builds without
/// the `faults` feature it is the constant `false` (the selector is a zero-sized nothing), so
/// every fault branch compiles away and the shipped binary holds no fault code.
#[cfg(feature = "faults")]
macro_rules! planted {
    ($sel:expr, $f:ident) => {
        $sel == Some(crate::faults::Fault::$f)
    };
}
#[cfg(not(feature = "faults"))]
macro_rules! planted {
    ($sel:expr, $f:ident) => {
        crate::not_planted(&$sel)
    };
}

#[cfg(feature = "faults")]
pub mod faults;
#[cfg(feature = "faults")]
pub use faults::Fault;

/// The selected seeded fault, carried to the kernels.
#[cfg(feature = "faults")]
pub(crate) type Planted = Option<faults::Fault>;
/// Builds without `faults` carry nothing.
#[cfg(not(feature = "faults"))]
pub(crate) type Planted = NoFault;

/// The fault selector of a build without faults: zero-sized, always "none".
#[cfg(not(feature = "faults"))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct NoFault;

/// What `planted!` is in a build without faults: always `false` (a function, so that two
/// fault tests in one expression are not "equal operands" to the linter).
#[cfg(not(feature = "faults"))]
#[inline(always)]
pub(crate) const fn not_planted(_: &NoFault) -> bool {
    false
}

mod act;
mod attn;
mod decode;
mod dot;
mod guard;
mod pool;
mod unpack;
mod vmath;

use std::sync::{Mutex, OnceLock};

use lockstep_graph::{
    Activation, AttentionParams, Backend, BackendError, Batch, HostTensor, KvLayout, RopeParams,
    RopeStyle, Taps, WeightView,
};
use lockstep_quant::GgmlType;

use act::Q8Act;
use decode::{Decoded, Family};
use dot::{Out, QAct};

/// Which build of the kernels runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// Plain Rust, any CPU.
    Portable,
    /// x86-64 with AVX2, FMA and F16C.
    Avx2,
}

impl Isa {
    /// The best build this CPU supports.
    pub fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
                && std::arch::is_x86_feature_detected!("f16c")
            {
                return Isa::Avx2;
            }
        }
        Isa::Portable
    }

    /// Every build this CPU can run (for tests comparing them).
    pub fn available() -> Vec<Isa> {
        let mut v = vec![Isa::Portable];
        if Isa::detect() == Isa::Avx2 {
            v.push(Isa::Avx2);
        }
        v
    }
}

/// Element type of the KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum KvType {
    #[default]
    F16,
    F32,
}

#[derive(Clone, Debug, Default)]
pub struct CpuOptions {
    /// Kernel threads; `None` = all available cores.
    pub threads: Option<usize>,
    pub kv_type: KvType,
    /// Force a kernel build (`None` = the best this CPU supports).
    pub isa: Option<Isa>,
}

pub struct CpuBackend {
    isa: Isa,
    kv_type: KvType,
    pool: pool::Pool,
    scratch: Vec<Mutex<Scratch>>,
    rope_cache: Mutex<Vec<RopeTable>>,
    fault: Planted,
    /// `cpu`, or `cpu[FAULT]` with a fault planted (what traces and diffs print).
    #[cfg(feature = "faults")]
    label: String,
    guards: guard::Guards,
}

struct Scratch {
    attn: attn::AttnScratch,
    dec: Decoded,
    f: Vec<f32>,
}

struct RopeTable {
    positions: Vec<u32>,
    n_rot: usize,
    base: u32,
    /// `(cos, sin)` per position and rotated pair.
    cs: Vec<(f32, f32)>,
}

/// An activation: `[rows, cols]` f32, with its Q8 quantization made on first use (shared by
/// every matmul that reads it, e.g. Q, K and V of one normed input).
pub struct CpuTensor {
    rows: usize,
    cols: usize,
    data: Vec<f32>,
    q8: OnceLock<Q8Act>,
}

impl CpuTensor {
    fn new(rows: usize, cols: usize, data: Vec<f32>) -> CpuTensor {
        debug_assert_eq!(rows * cols, data.len());
        CpuTensor {
            rows,
            cols,
            data,
            q8: OnceLock::new(),
        }
    }

    /// A `[rows, cols]` tensor of `data` (panics if the sizes disagree: a caller bug).
    pub fn from_vec(rows: usize, cols: usize, data: Vec<f32>) -> CpuTensor {
        assert_eq!(
            rows * cols,
            data.len(),
            "CpuTensor::from_vec: {rows} x {cols} vs {}",
            data.len()
        );
        CpuTensor::new(rows, cols, data)
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    pub fn data(&self) -> &[f32] {
        &self.data
    }

    fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.cols..(i + 1) * self.cols]
    }
}

enum WKind {
    /// Quantized rows in their file format.
    Quant {
        fam: Family,
        data: Vec<u8>,
    },
    /// F16 / BF16 rows, converted to f32 a few rows at a time.
    Half {
        data: Vec<u16>,
    },
    F32(Vec<f32>),
}

/// A weight: `[rows, cols]` in its file format (vectors are held as f32).
pub struct CpuWeight {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    kind: WKind,
    #[cfg(feature = "faults")]
    role: faults::WeightRole,
}

impl CpuWeight {
    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        match &self.kind {
            WKind::Quant { data, .. } => data.len(),
            WKind::Half { data } => data.len() * 2,
            WKind::F32(v) => v.len() * 4,
        }
    }

    fn row_bytes(&self) -> usize {
        self.cols / self.ty.block_size() * self.ty.type_size()
    }

    fn vector(&self) -> Option<&[f32]> {
        match &self.kind {
            WKind::F32(v) if self.rows == 1 => Some(v),
            _ => None,
        }
    }
}

enum KvStore {
    F16(Vec<u16>),
    F32(Vec<f32>),
}

/// The paged KV cache: per layer, `n_slots` rows of K and of V.
pub struct CpuKvCache {
    layout: KvLayout,
    k: KvStore,
    v: KvStore,
    /// Fault `prefill-no-kv-write`: (layer, slot) rows a prefill wrote to staging only.
    #[cfg(feature = "faults")]
    unpersisted: Vec<(usize, u32)>,
}

impl CpuKvCache {
    fn offset(&self, layer: usize, slot: u32) -> usize {
        (layer * self.layout.n_slots() + slot as usize) * self.layout.kv_dim
    }

    pub fn bytes(&self) -> usize {
        let n = |s: &KvStore| match s {
            KvStore::F16(v) => v.len() * 2,
            KvStore::F32(v) => v.len() * 4,
        };
        n(&self.k) + n(&self.v)
    }
}

impl CpuBackend {
    pub fn new(opts: CpuOptions) -> CpuBackend {
        let threads = opts
            .threads
            .unwrap_or_else(|| {
                std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(1)
            })
            .max(1);
        let isa = match opts.isa {
            Some(Isa::Avx2) if Isa::detect() == Isa::Avx2 => Isa::Avx2,
            Some(_) => Isa::Portable,
            None => Isa::detect(),
        };
        CpuBackend {
            isa,
            kv_type: opts.kv_type,
            pool: pool::Pool::new(threads),
            scratch: (0..threads)
                .map(|_| {
                    Mutex::new(Scratch {
                        attn: attn::AttnScratch::default(),
                        dec: Decoded::new(),
                        f: Vec::new(),
                    })
                })
                .collect(),
            rope_cache: Mutex::new(Vec::new()),
            fault: Planted::default(),
            #[cfg(feature = "faults")]
            label: "cpu".to_string(),
            guards: guard::Guards::default(),
        }
    }

    /// Plants a seeded fault in this backend's kernels (`None` = clean); takes effect from the
    /// next op. Builds with the `faults` feature only.
    #[cfg(feature = "faults")]
    pub fn set_fault(&mut self, fault: Option<Fault>) {
        self.fault = fault;
        self.label = match fault {
            Some(f) => format!("cpu[{}]", f.name()),
            None => "cpu".to_string(),
        };
    }

    #[cfg(feature = "faults")]
    pub fn fault(&self) -> Option<Fault> {
        self.fault
    }

    /// Guard-checked outputs: canaries around every output a kernel writes through a raw
    /// pointer, checked after each op (`Backend::guard_violations`). For `check --ops`.
    pub fn with_output_guards(mut self) -> CpuBackend {
        self.guards.enabled = true;
        self
    }

    pub fn isa(&self) -> Isa {
        self.isa
    }

    pub fn threads(&self) -> usize {
        self.pool.n_threads()
    }

    fn scratch(&self, worker: usize) -> std::sync::MutexGuard<'_, Scratch> {
        self.scratch[worker % self.scratch.len()]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Weight rows per task: enough tasks to balance the threads, few enough that each task's
    /// decoded rows are reused against every activation row while in cache.
    fn rows_per_task(&self, m: usize, n: usize) -> usize {
        let t = self.threads();
        let rc = if n <= dot::FUSED_MAX_ROWS {
            m / (t * 8)
        } else {
            (m / (t * 16)).clamp(8, 32)
        };
        rc.clamp(4, 512).div_ceil(4) * 4
    }

    /// `out[c, j] = dot(w row j, x row c)` for weight rows `j0..j0 + rows` of a quantized
    /// weight: straight from the blocks for small batches, through decoded rows otherwise.
    #[allow(clippy::too_many_arguments)]
    fn quant_rows(
        &self,
        w: &CpuWeight,
        fam: Family,
        data: &[u8],
        qa: &QAct<'_>,
        j0: usize,
        rows: usize,
        o: Out,
        s: &mut Scratch,
    ) {
        let (isa, k, rb) = (self.isa, w.cols, w.row_bytes());
        let src = &data[j0 * rb..(j0 + rows) * rb];
        let pair = decode::pair_scheme(w.ty, k);
        // The Q8_0 scale faults live in the decoded scale vector, so they take the decoded
        // path at every batch size (bitwise the fused one when clean).
        let q8_fault = w.ty == GgmlType::Q8_0
            && (planted!(self.fault, Q8WrongScale) || planted!(self.fault, Q8BlockScale));
        if !q8_fault && dot::fused_chunk(isa, w.ty, fam, pair, k, src, rows, qa, o, j0, &mut s.f) {
            return;
        }
        s.dec.reserve(rows, k);
        decode::decode_rows(isa, w.ty, src, rows, k, &mut s.dec);
        if q8_fault {
            // Q8_0 is never under the pair scheme: 8 scale entries per 32-value block.
            let nb = k / 32;
            for r in 0..rows {
                let sc = &mut s.dec.sc8[r * k / 4..(r + 1) * k / 4];
                if planted!(self.fault, Q8WrongScale) && nb > 1 {
                    let first = sc[0];
                    sc.copy_within(8.., 0);
                    sc[(nb - 1) * 8..].fill(first);
                } else {
                    for b in (0..nb).step_by(2) {
                        sc[b * 8..b * 8 + 8].iter_mut().for_each(|v| *v *= 1.06);
                    }
                }
            }
        }
        dot::q8_chunk(isa, fam, pair, k, &s.dec, rows, qa, o, j0);
    }

    /// `x` quantized for the int8 kernels (once, shared by every matmul that reads it), with
    /// the pair layout when the AVX2 pair kernels may read it.
    fn q8<'a>(&self, x: &'a CpuTensor) -> &'a Q8Act {
        let (n, k) = (x.rows, x.cols);
        let pairs = self.isa == Isa::Avx2 && k.is_multiple_of(64);
        x.q8.get_or_init(|| {
            Q8Act::quantize(self.isa, &x.data, n, k, pairs, |jobs| {
                self.par_each(jobs, |j| j.run())
            })
        })
    }

    /// Runs `f` on every item, spread over the pool (items must be independent).
    fn par_each<T: Send>(&self, items: &mut [T], f: impl Fn(&mut T) + Sync) {
        if items.len() <= 1 {
            items.iter_mut().for_each(f);
            return;
        }
        let cells: Vec<Mutex<&mut T>> = items.iter_mut().map(Mutex::new).collect();
        self.pool.run(cells.len(), &|t, _| {
            let mut g = cells[t].lock().unwrap_or_else(|e| e.into_inner());
            f(&mut g)
        });
    }

    /// Faults that replace a whole matmul by what a wrong weight upload gives.
    #[cfg(feature = "faults")]
    fn weight_fault(&self, x: &CpuTensor, w: &CpuWeight) -> Option<CpuTensor> {
        use faults::WeightRole;
        let (n, m) = (x.rows, w.rows);
        if planted!(self.fault, LmHeadSkipped) && w.role == WeightRole::Head {
            // The normed hidden state returned as logits, zero-padded.
            let mut out = vec![0f32; n * m];
            let c = x.cols.min(m);
            for r in 0..n {
                out[r * m..r * m + c].copy_from_slice(&x.row(r)[..c]);
            }
            return Some(CpuTensor::new(n, m, out));
        }
        if planted!(self.fault, FfnDownZero) && w.role == WeightRole::FfnDownLayer1 {
            return Some(CpuTensor::new(n, m, vec![0.0; n * m]));
        }
        if planted!(self.fault, AttnOutSwapped) && w.role == WeightRole::AttnOutput {
            // The upload kept the bytes but swapped the dimensions: W'[j][c] = W[c * m + j]
            // of the same buffer (dequantized, as the upload converted it).
            let k = w.cols;
            let flat = match &w.kind {
                WKind::F32(v) => v.clone(),
                WKind::Half { data } => data
                    .iter()
                    .map(|&h| lockstep_quant::fp16_to_f32(h))
                    .collect(),
                WKind::Quant { data, .. } => lockstep_quant::dequantize(w.ty, data, m * k).ok()?,
            };
            let mut t = vec![0f32; m * k];
            for j in 0..m {
                for c in 0..k {
                    t[j * k + c] = flat[c * m + j];
                }
            }
            let wt = CpuWeight {
                ty: GgmlType::F32,
                rows: m,
                cols: k,
                kind: WKind::F32(t),
                role: WeightRole::Other,
            };
            return Some(self.matmul(x, &wt));
        }
        None
    }

    /// Fault `prefill-no-kv-write`: a prefill's rows go to a staging area its own attention
    /// reads, but never persist; the next write to the layer reuses the staging rows, and the
    /// cache is left with zeros where the prompt's K/V should be.
    #[cfg(feature = "faults")]
    fn unpersist(&self, cache: &mut CpuKvCache, layer: usize, batch: &Batch) {
        let d = cache.layout.kv_dim;
        let staged: Vec<u32> = cache
            .unpersisted
            .iter()
            .filter(|(l, _)| *l == layer)
            .map(|&(_, s)| s)
            .collect();
        for slot in staged {
            let o = cache.offset(layer, slot);
            for store in [&mut cache.k, &mut cache.v] {
                match store {
                    KvStore::F16(s) => s[o..o + d].fill(0),
                    KvStore::F32(s) => s[o..o + d].fill(0.0),
                }
            }
        }
        cache.unpersisted.retain(|(l, _)| *l != layer);
        let prefill = batch.n_tokens() > 1 && batch.seqs.iter().all(|s| s.first_pos == 0);
        if prefill {
            cache
                .unpersisted
                .extend(batch.slots.iter().map(|&s| (layer, s)));
        }
    }

    fn rope_table(&self, positions: &[u32], p: RopeParams) -> std::sync::Arc<Vec<(f32, f32)>> {
        let half = p.n_rot / 2;
        let mut cache = self.rope_cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = cache
            .iter()
            .find(|t| t.n_rot == p.n_rot && t.base == p.base.to_bits() && t.positions == positions)
        {
            return std::sync::Arc::new(t.cs.clone());
        }
        let inv: Vec<f64> = (0..half)
            .map(|i| f64::from(p.base).powf(-2.0 * i as f64 / p.n_rot as f64))
            .collect();
        let mut cs = Vec::with_capacity(positions.len() * half);
        for &pos in positions {
            for &f in &inv {
                let (s, c) = (f64::from(pos) * f).sin_cos();
                cs.push((c as f32, s as f32));
            }
        }
        if cache.len() >= 4 {
            cache.remove(0);
        }
        cache.push(RopeTable {
            positions: positions.to_vec(),
            n_rot: p.n_rot,
            base: p.base.to_bits(),
            cs: cs.clone(),
        });
        std::sync::Arc::new(cs)
    }
}

fn other(msg: String) -> BackendError {
    BackendError::Other(msg)
}

impl Backend for CpuBackend {
    type Tensor = CpuTensor;
    type Weight = CpuWeight;
    type KvCache = CpuKvCache;

    fn name(&self) -> &str {
        #[cfg(feature = "faults")]
        return &self.label;
        #[cfg(not(feature = "faults"))]
        "cpu"
    }

    fn guard_violations(&self) -> Vec<String> {
        self.guards.take()
    }

    fn load_weight(&self, w: WeightView<'_>) -> Result<CpuWeight, BackendError> {
        let err = |why: String| BackendError::Weight {
            name: w.name.to_string(),
            why,
        };
        let n: u64 = w.dims.iter().product();
        let cols = w.dims.first().copied().unwrap_or(1) as usize;
        let rows = (n as usize).checked_div(cols).unwrap_or(0);
        let expected =
            w.ty.row_bytes(cols as u64)
                .and_then(|rb| rb.checked_mul(rows as u64))
                .ok_or_else(|| {
                    err(format!(
                        "{} rows of {cols} {} values are not whole blocks",
                        rows, w.ty
                    ))
                })?;
        if w.data.len() as u64 != expected {
            return Err(err(format!("{} bytes, expected {expected}", w.data.len())));
        }
        let kind = if rows == 1 || w.ty == GgmlType::F32 {
            let v = lockstep_quant::dequantize(w.ty, w.data, n as usize)
                .map_err(|e| err(e.to_string()))?;
            WKind::F32(v)
        } else if matches!(w.ty, GgmlType::F16 | GgmlType::Bf16) {
            WKind::Half {
                data: w
                    .data
                    .chunks_exact(2)
                    .map(|b| u16::from_le_bytes([b[0], b[1]]))
                    .collect(),
            }
        } else if let Some(fam) = decode::family(w.ty) {
            WKind::Quant {
                fam,
                data: w.data.to_vec(),
            }
        } else {
            return Err(err(format!(
                "type {} is not supported by the cpu backend",
                w.ty
            )));
        };
        Ok(CpuWeight {
            ty: w.ty,
            rows,
            cols,
            kind,
            #[cfg(feature = "faults")]
            role: faults::WeightRole::of(w.name),
        })
    }

    fn alloc_kv(&self, layout: KvLayout) -> Result<CpuKvCache, BackendError> {
        let n = layout
            .n_layers
            .checked_mul(layout.n_slots())
            .and_then(|n| n.checked_mul(layout.kv_dim))
            .ok_or_else(|| BackendError::Kv(format!("layout {layout:?} overflows")))?;
        let store = || match self.kv_type {
            KvType::F16 => KvStore::F16(vec![0; n]),
            KvType::F32 => KvStore::F32(vec![0.0; n]),
        };
        Ok(CpuKvCache {
            layout,
            k: store(),
            v: store(),
            #[cfg(feature = "faults")]
            unpersisted: Vec::new(),
        })
    }

    fn to_host(&self, t: &CpuTensor) -> HostTensor {
        HostTensor::matrix(t.rows, t.cols, t.data.clone())
    }

    fn embed(&self, table: &CpuWeight, ids: &[u32]) -> Result<CpuTensor, BackendError> {
        let d = table.cols;
        let mut out = vec![0f32; ids.len() * d];
        for (row, (&id, o)) in ids.iter().zip(out.chunks_exact_mut(d.max(1))).enumerate() {
            if id as usize >= table.rows {
                return Err(BackendError::TokenOutOfRange {
                    id,
                    row,
                    vocab: table.rows,
                });
            }
            // Fault `embd-broadcast`: a zero row stride, every row is the first token's.
            let i = if planted!(self.fault, EmbedBroadcast) {
                ids[0] as usize
            } else {
                id as usize
            };
            // Fault `embd-zeros`: the upper half of the table was never loaded.
            if planted!(self.fault, EmbedZeros) && i >= table.rows / 2 {
                o.fill(0.0);
                continue;
            }
            match &table.kind {
                WKind::F32(v) => o.copy_from_slice(&v[i * d..(i + 1) * d]),
                WKind::Half { data } => {
                    for (y, &h) in o.iter_mut().zip(&data[i * d..(i + 1) * d]) {
                        *y = if table.ty == GgmlType::F16 {
                            lockstep_quant::fp16_to_f32(h)
                        } else {
                            lockstep_quant::bf16_to_f32(h)
                        };
                    }
                }
                WKind::Quant { data, .. } => {
                    let rb = table.row_bytes();
                    lockstep_quant::dequantize_row(table.ty, &data[i * rb..(i + 1) * rb], o)
                        .map_err(|e| other(e.to_string()))?;
                }
            }
        }
        Ok(CpuTensor::new(ids.len(), d, out))
    }

    fn matmul(&self, x: &CpuTensor, w: &CpuWeight) -> CpuTensor {
        #[cfg(feature = "faults")]
        if let Some(t) = self.weight_fault(x, w) {
            return t;
        }
        let (n, k) = (x.rows, x.cols);
        assert_eq!(
            k, w.cols,
            "matmul: x has {k} columns, weight rows have {}",
            w.cols
        );
        let m = w.rows;
        let mut out = self.guards.alloc(n * m);
        if n == 0 || m == 0 {
            return CpuTensor::new(n, m, self.guards.finish("matmul", out));
        }
        let o = Out {
            ptr: out.as_mut_ptr(),
            m,
            len: n * m,
        };
        let rc = self.rows_per_task(m, n);
        let tasks = m.div_ceil(rc);
        let isa = self.isa;
        match &w.kind {
            WKind::Quant { fam, data } => {
                let a = self.q8(x);
                let qa = a.view(n);
                self.pool.run(tasks, &|t, wid| {
                    let j0 = t * rc;
                    let rows = rc.min(m - j0);
                    let mut s = self.scratch(wid);
                    self.quant_rows(w, *fam, data, &qa, j0, rows, o, &mut s);
                });
            }
            WKind::Half { data } => {
                let bf = w.ty == GgmlType::Bf16;
                self.pool.run(tasks, &|t, wid| {
                    let j0 = t * rc;
                    let rows = rc.min(m - j0);
                    let mut s = self.scratch(wid);
                    s.f.clear();
                    s.f.extend(data[j0 * k..(j0 + rows) * k].iter().map(|&h| {
                        if bf {
                            lockstep_quant::bf16_to_f32(h)
                        } else {
                            lockstep_quant::fp16_to_f32(h)
                        }
                    }));
                    dot::f32_chunk(isa, k, &s.f, rows, &x.data, n, o, j0);
                });
            }
            WKind::F32(v) => {
                self.pool.run(tasks, &|t, _| {
                    let j0 = t * rc;
                    let rows = rc.min(m - j0);
                    dot::f32_chunk(isa, k, &v[j0 * k..(j0 + rows) * k], rows, &x.data, n, o, j0);
                });
            }
        }
        CpuTensor::new(n, m, self.guards.finish("matmul", out))
    }

    fn add_bias(&self, x: &CpuTensor, bias: &CpuWeight) -> CpuTensor {
        let b = bias.vector().expect("bias is a vector");
        assert_eq!(x.cols, b.len(), "bias length");
        let mut out = x.data.clone();
        for row in out.chunks_exact_mut(x.cols.max(1)) {
            for (o, v) in row.iter_mut().zip(b) {
                *o += v;
            }
        }
        CpuTensor::new(x.rows, x.cols, out)
    }

    fn rms_norm(&self, x: &CpuTensor, weight: &CpuWeight, eps: f32) -> CpuTensor {
        #[cfg(feature = "faults")]
        if planted!(self.fault, OutputNormZero) && weight.role == faults::WeightRole::OutputNorm {
            return CpuTensor::new(x.rows, x.cols, vec![0.0; x.data.len()]);
        }
        let w = weight.vector().expect("norm weight is a vector");
        let g = w.len();
        assert!(
            g > 0 && x.cols.is_multiple_of(g),
            "rms_norm group {g} vs {} columns",
            x.cols
        );
        let mut out = vec![0f32; x.data.len()];
        let isa = self.isa;
        let norm = |(xs, os): &mut (&[f32], &mut [f32])| {
            for (xg, og) in xs.chunks_exact(g).zip(os.chunks_exact_mut(g)) {
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: `Isa::Avx2` implies AVX2 and FMA.
                    Isa::Avx2 => unsafe { rms_group_avx2(xg, w, eps, og) },
                    _ => rms_group(xg, w, eps, og),
                }
            }
        };
        let per = 32 * x.cols.max(1);
        let mut parts: Vec<(&[f32], &mut [f32])> =
            x.data.chunks(per).zip(out.chunks_mut(per)).collect();
        self.par_each(&mut parts, norm);
        CpuTensor::new(x.rows, x.cols, out)
    }

    fn add(&self, a: &CpuTensor, b: &CpuTensor) -> CpuTensor {
        assert!(a.rows == b.rows && a.cols == b.cols, "add: shapes differ");
        let data = a.data.iter().zip(&b.data).map(|(x, y)| x + y).collect();
        CpuTensor::new(a.rows, a.cols, data)
    }

    fn scale(&self, x: &CpuTensor, s: f32) -> CpuTensor {
        CpuTensor::new(x.rows, x.cols, x.data.iter().map(|v| v * s).collect())
    }

    fn act_mul(&self, gate: &CpuTensor, up: &CpuTensor, act: Activation) -> CpuTensor {
        assert!(
            gate.rows == up.rows && gate.cols == up.cols,
            "act_mul: shapes differ"
        );
        let mut out = self.guards.alloc(gate.data.len());
        let cols = gate.cols.max(1);
        if gate.rows > 8 {
            let o = Out {
                ptr: out.as_mut_ptr(),
                m: cols,
                len: out.len(),
            };
            let rows_per = 8;
            self.pool.run(gate.rows.div_ceil(rows_per), &|t, _| {
                let r0 = t * rows_per;
                let r1 = (r0 + rows_per).min(gate.rows);
                let mut tmp = vec![0f32; cols];
                for r in r0..r1 {
                    vmath::act_mul(self.isa, gate.row(r), up.row(r), &mut tmp, act);
                    for (j, v) in tmp.iter().enumerate() {
                        o.put(r, j, *v);
                    }
                }
            });
        } else {
            vmath::act_mul(self.isa, &gate.data, &up.data, out.as_mut_slice(), act);
        }
        CpuTensor::new(gate.rows, gate.cols, self.guards.finish("act_mul", out))
    }

    /// Fused: each task computes a block of gate rows and the same block of up rows against
    /// every activation row, then the activation over that block while it is in cache; one
    /// dispatch instead of three, one quantization of `x`. Per element the operations are
    /// those of `matmul` and `act_mul`, so the results are bitwise the unfused ones.
    fn gate_up_act(
        &self,
        x: &CpuTensor,
        gate: &CpuWeight,
        up: &CpuWeight,
        act: Activation,
    ) -> (CpuTensor, CpuTensor, CpuTensor) {
        let (WKind::Quant { fam: fg, data: dg }, WKind::Quant { fam: fu, data: du }) =
            (&gate.kind, &up.kind)
        else {
            let g = self.matmul(x, gate);
            let u = self.matmul(x, up);
            let a = self.act_mul(&g, &u, act);
            return (g, u, a);
        };
        let (n, k, m) = (x.rows, x.cols, gate.rows);
        assert!(
            k == gate.cols && k == up.cols && up.rows == m,
            "gate_up_act: x has {k} columns, gate is {m} x {}, up is {} x {}",
            gate.cols,
            up.rows,
            up.cols
        );
        let mut g = self.guards.alloc(n * m);
        let mut u = self.guards.alloc(n * m);
        let mut a = self.guards.alloc(n * m);
        if n > 0 && m > 0 {
            let out = |v: &mut guard::OutBuf| Out {
                ptr: v.as_mut_ptr(),
                m,
                len: n * m,
            };
            let (og, ou, oa) = (out(&mut g), out(&mut u), out(&mut a));
            let isa = self.isa;
            let qa = self.q8(x).view(n);
            let rc = self.rows_per_task(m, n);
            self.pool.run(m.div_ceil(rc), &|t, wid| {
                let j0 = t * rc;
                let rows = rc.min(m - j0);
                let mut s = self.scratch(wid);
                self.quant_rows(gate, *fg, dg, &qa, j0, rows, og, &mut s);
                self.quant_rows(up, *fu, du, &qa, j0, rows, ou, &mut s);
                for c in 0..n {
                    // SAFETY: this task alone owns columns j0..j0 + rows of the three outputs,
                    // and these are the only live slices of them.
                    unsafe {
                        vmath::act_mul(
                            isa,
                            og.segment(c, j0, rows),
                            ou.segment(c, j0, rows),
                            oa.segment(c, j0, rows),
                            act,
                        );
                    }
                }
            });
        }
        (
            CpuTensor::new(n, m, self.guards.finish("gate_up_act (gate)", g)),
            CpuTensor::new(n, m, self.guards.finish("gate_up_act (up)", u)),
            CpuTensor::new(n, m, self.guards.finish("gate_up_act (act)", a)),
        )
    }

    fn rope(&self, x: &CpuTensor, positions: &[u32], p: RopeParams) -> CpuTensor {
        assert_eq!(x.rows, positions.len(), "rope: one position per row");
        assert!(
            x.cols.is_multiple_of(p.head_dim),
            "rope: columns are whole heads"
        );
        let half = p.n_rot / 2;
        let shifted;
        let positions =
            if planted!(self.fault, RopeDecodeOffByOne) && positions.len() == 1 && positions[0] > 0
            {
                shifted = [positions[0] + 1];
                &shifted[..]
            } else {
                positions
            };
        let table = self.rope_table(positions, p);
        let mut out = x.data.clone();
        for (r, row) in out.chunks_exact_mut(x.cols.max(1)).enumerate() {
            let cs = &table[r * half..(r + 1) * half];
            for head in row.chunks_exact_mut(p.head_dim) {
                for (i, &(c, s)) in cs.iter().enumerate() {
                    let (a, b) = match p.style {
                        RopeStyle::Norm => (2 * i, 2 * i + 1),
                        RopeStyle::Neox => (i, i + half),
                    };
                    let (x0, x1) = (head[a], head[b]);
                    head[a] = x0 * c - x1 * s;
                    head[b] = x0 * s + x1 * c;
                }
            }
        }
        CpuTensor::new(x.rows, x.cols, out)
    }

    fn select_rows(&self, x: &CpuTensor, rows: &[usize]) -> CpuTensor {
        let mut data = Vec::with_capacity(rows.len() * x.cols);
        for &r in rows {
            data.extend_from_slice(x.row(r));
        }
        CpuTensor::new(rows.len(), x.cols, data)
    }

    fn kv_store(
        &self,
        cache: &mut CpuKvCache,
        layer: usize,
        k: &CpuTensor,
        v: &CpuTensor,
        batch: &Batch,
    ) -> Result<(), BackendError> {
        let d = cache.layout.kv_dim;
        if k.cols != d || v.cols != d || k.rows != batch.slots.len() || v.rows != k.rows {
            return Err(BackendError::Kv(format!(
                "kv_store: K [{}, {}] / V [{}, {}] for {} slots of width {d}",
                k.rows,
                k.cols,
                v.rows,
                v.cols,
                batch.slots.len()
            )));
        }
        let l = cache.layout;
        if layer >= l.n_layers {
            return Err(BackendError::Kv(format!(
                "layer {layer} outside the cache ({} layers)",
                l.n_layers
            )));
        }
        #[cfg(feature = "faults")]
        if planted!(self.fault, PrefillNoKvWrite) {
            self.unpersist(cache, layer, batch);
        }
        for (i, &slot) in batch.slots.iter().enumerate() {
            if slot as usize >= l.n_slots() {
                return Err(BackendError::Kv(format!(
                    "slot {slot} outside the cache ({} slots)",
                    l.n_slots()
                )));
            }
            let o = cache.offset(layer, slot);
            for (store, src) in [(&mut cache.k, k.row(i)), (&mut cache.v, v.row(i))] {
                match store {
                    KvStore::F16(s) => vmath::to_f16_row(self.isa, src, &mut s[o..o + d]),
                    KvStore::F32(s) => s[o..o + d].copy_from_slice(src),
                }
            }
        }
        Ok(())
    }

    fn attention(
        &self,
        cache: &CpuKvCache,
        layer: usize,
        q: &CpuTensor,
        batch: &Batch,
        p: AttentionParams,
        taps: &mut Taps<'_>,
    ) -> Result<CpuTensor, BackendError> {
        let hd = p.head_dim;
        let q_dim = p.n_heads * hd;
        let kv_dim = p.n_kv_heads * hd;
        if p.n_kv_heads == 0 || !p.n_heads.is_multiple_of(p.n_kv_heads) || !hd.is_multiple_of(8) {
            return Err(BackendError::Kv(format!(
                "attention: {} heads over {} KV heads of {hd} (need a whole group, head_dim % 8 == 0)",
                p.n_heads, p.n_kv_heads
            )));
        }
        let group = p.n_heads / p.n_kv_heads;
        if q.cols != q_dim || kv_dim != cache.layout.kv_dim || layer >= cache.layout.n_layers {
            return Err(BackendError::Kv(format!(
                "attention: q has {} columns for {} heads of {hd}; cache rows are {} wide",
                q.cols, p.n_heads, cache.layout.kv_dim
            )));
        }
        // Validate everything a task will index before any runs.
        let mut items = Vec::new();
        for (si, seq) in batch.seqs.iter().enumerate() {
            let n_kv = seq.kv_slots.len();
            if let Some(&bad) = seq
                .kv_slots
                .iter()
                .find(|&&s| s as usize >= cache.layout.n_slots())
            {
                return Err(BackendError::Kv(format!("slot {bad} outside the cache")));
            }
            if let Some(m) = &seq.mask {
                if m.len() != seq.n_rows * n_kv {
                    return Err(BackendError::Kv(format!(
                        "mask has {} entries, expected {} x {n_kv}",
                        m.len(),
                        seq.n_rows
                    )));
                }
            }
            if seq.first_row + seq.n_rows > q.rows {
                return Err(BackendError::Kv(format!(
                    "sequence rows {}..{} outside the batch of {}",
                    seq.first_row,
                    seq.first_row + seq.n_rows,
                    q.rows
                )));
            }
            for i in 0..seq.n_rows {
                items.push((si, i));
            }
        }
        let mut out = self.guards.alloc(q.rows * q_dim);
        let o = Out {
            ptr: out.as_mut_ptr(),
            m: q_dim,
            len: out.len(),
        };
        let nh = p.n_heads;
        // Debug mode: the kernel itself stores its scores and softmax weights, per sequence
        // `[n_rows * n_heads, n_kv]`; keys a block never looks at keep `-inf` / 0.
        let keep_scores = taps.wants_layer(layer, "kq") || taps.wants_layer(layer, "kq_softmax");
        let score_len: usize = batch
            .seqs
            .iter()
            .map(|s| s.n_rows * nh * s.kv_slots.len())
            .sum();
        let (mut kq_all, mut probs_all) = if keep_scores {
            (vec![f32::NEG_INFINITY; score_len], vec![0f32; score_len])
        } else {
            (Vec::new(), Vec::new())
        };
        // Tasks: a few rows of one sequence (one row when the batch is small, as in decode) x
        // the heads of one KV head, which share its keys: one task converts them once and fills
        // the kernel's four query slots. (Single-head tasks in decode spread better over the
        // threads but convert the keys once per head: attention took a third longer per token.)
        let rows_per = if items.len() <= 4 { 1 } else { 4 };
        let heads_per = group;
        let mut blocks = Vec::new();
        let mut seq_base = 0;
        for seq in &batch.seqs {
            let n_kv = seq.kv_slots.len();
            let len = seq.n_rows * nh * n_kv;
            let score_taps = keep_scores.then(|| {
                let sink = |v: &mut Vec<f32>| Out {
                    ptr: v[seq_base..].as_mut_ptr(),
                    m: n_kv,
                    len,
                };
                attn::ScoreTaps {
                    kq: sink(&mut kq_all),
                    probs: sink(&mut probs_all),
                    n_heads: nh,
                }
            });
            seq_base += len;
            for i0 in (0..seq.n_rows).step_by(rows_per) {
                for h0 in (0..nh).step_by(heads_per) {
                    let kh = if planted!(self.fault, GqaKvHead) {
                        h0 % p.n_kv_heads
                    } else {
                        h0 / group
                    };
                    blocks.push(attn::Block {
                        seq,
                        i0,
                        i1: (i0 + rows_per).min(seq.n_rows),
                        h0,
                        h1: h0 + heads_per,
                        kh,
                        taps: score_taps,
                        fault: self.fault,
                    });
                }
            }
        }
        self.pool.run(blocks.len(), &|t, wid| {
            let mut s = self.scratch(wid);
            attn::attend_block(
                self.isa,
                cache,
                layer,
                &q.data,
                q_dim,
                &p,
                &blocks[t],
                &mut s.attn,
                o,
            );
        });
        drop(blocks);
        // The first tap query after the kernel is `kq`, as before the debug mode existed:
        // `bench --profile` clocks ops by their tap queries and reports attention under `kq`.
        let _ = taps.wants_layer(layer, "kq");

        // Copies of the cache rows only when asked for: a profiler or a trace of other taps
        // must not pay for them.
        if taps.wants_layer(layer, "k_read") || taps.wants_layer(layer, "v_read") {
            let (mut k_read, mut v_read) = (Vec::new(), Vec::new());
            for seq in &batch.seqs {
                attn::read_kv_rows(
                    self.isa,
                    cache,
                    layer,
                    &seq.kv_slots,
                    self.fault,
                    &mut k_read,
                    &mut v_read,
                );
            }
            let n = k_read.len() / kv_dim.max(1);
            taps.emit_layer(layer, "k_read", || HostTensor::matrix(n, kv_dim, k_read));
            taps.emit_layer(layer, "v_read", || HostTensor::matrix(n, kv_dim, v_read));
        }
        if keep_scores {
            taps.emit_layer(layer, "kq", || HostTensor::new(vec![score_len], kq_all));
            taps.emit_layer(layer, "kq_softmax", || {
                HostTensor::new(vec![score_len], probs_all)
            });
        }
        Ok(CpuTensor::new(
            q.rows,
            q_dim,
            self.guards.finish("attention", out),
        ))
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rms_group_avx2(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    rms_group(x, w, eps, out)
}

/// RMS norm of one group: eight-lane sum of squares (fused), fixed reduction, then
/// `(x * scale) * w`.
#[inline(always)]
fn rms_group(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let n8 = x.len() / 8 * 8;
    let mut acc = [0f32; 8];
    for c in x[..n8].chunks_exact(8) {
        for l in 0..8 {
            acc[l] = c[l].mul_add(c[l], acc[l]);
        }
    }
    let mut tail = 0f32;
    for &v in &x[n8..] {
        tail = v.mul_add(v, tail);
    }
    let ss = dot::hsum_lanes(&acc) + tail;
    let scale = 1.0 / (ss / x.len() as f32 + eps).sqrt();
    for ((o, &v), &wv) in out.iter_mut().zip(x).zip(w) {
        *o = (v * scale) * wv;
    }
}
