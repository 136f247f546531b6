//! The register-tiled AVX2 attention kernel against the portable one, bitwise, on shapes the
//! model tests do not reach: long spans (several key chunks), sliding windows cutting through a
//! block of queries, explicit masks with holes, whole rows masked out, several sequences with
//! their own cache histories, grouped heads and head sizes 64, 128 and 256. And the kernel's
//! debug mode (which also stores its scores and softmax weights as the `kq`/`kq_softmax` taps)
//! against its normal mode, bitwise, with the taps checked against the output they produced.

use lockstep_backend_cpu::{CpuBackend, CpuOptions, CpuTensor, Isa, KvType};
use lockstep_backend_ref::RefBackend;
use lockstep_graph::taps::Recorder;
use lockstep_graph::{AttentionParams, Backend, Batch, BatchSeq, HostTensor, KvLayout, Taps};

/// A deterministic stream of values in [-2, 2).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
    }

    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.next()).collect()
    }
}

struct Case {
    head_dim: usize,
    n_heads: usize,
    n_kv_heads: usize,
    window: Option<u32>,
    /// Per sequence: (tokens already cached, new tokens, mask every n-th key off (0 = no mask)).
    seqs: Vec<(usize, usize, usize)>,
}

fn run(isa: Isa, kv: KvType, case: &Case, seed: u64) -> Vec<u32> {
    run_full(isa, kv, case, seed, None).out
}

/// One attention call's inputs, output and (debug mode) taps.
struct Ran {
    out: Vec<u32>,
    q: Vec<f32>,
    batch: Batch,
    params: AttentionParams,
}

fn run_full(isa: Isa, kv: KvType, case: &Case, seed: u64, rec: Option<&mut Recorder>) -> Ran {
    let b = CpuBackend::new(CpuOptions {
        threads: Some(2),
        kv_type: kv,
        isa: Some(isa),
    });
    run_on(&b, CpuTensor::from_vec, case, seed, rec)
}

/// One attention call on any backend (`tensor` builds its activations from rows).
fn run_on<B: Backend>(
    b: &B,
    tensor: impl Fn(usize, usize, Vec<f32>) -> B::Tensor,
    case: &Case,
    seed: u64,
    rec: Option<&mut Recorder>,
) -> Ran {
    let kv_dim = case.n_kv_heads * case.head_dim;
    let q_dim = case.n_heads * case.head_dim;
    let total: usize = case.seqs.iter().map(|s| s.0 + s.1).sum();
    let layout = KvLayout {
        n_layers: 1,
        n_blocks: total.div_ceil(16) + case.seqs.len(),
        block_size: 16,
        kv_dim,
    };
    let mut cache = b.alloc_kv(layout).expect("alloc");
    let mut rng = Rng(seed);
    // Every position of every sequence gets a slot; sequences interleave in the cache.
    let mut next_slot = 0u32;
    let mut seq_slots: Vec<Vec<u32>> = Vec::new();
    for s in &case.seqs {
        seq_slots.push(
            (0..s.0 + s.1)
                .map(|_| {
                    next_slot += 1;
                    next_slot - 1
                })
                .collect(),
        );
    }
    // Store the history and the new tokens' K/V (the attention reads only the cache).
    let mut tokens = Vec::new();
    let mut positions = Vec::new();
    let mut slots = Vec::new();
    for (si, s) in case.seqs.iter().enumerate() {
        for (p, &slot) in seq_slots[si].iter().enumerate().take(s.0 + s.1) {
            tokens.push(0);
            positions.push(p as u32);
            slots.push(slot);
        }
    }
    let all = Batch {
        tokens: tokens.clone(),
        positions: positions.clone(),
        slots: slots.clone(),
        seqs: Vec::new(),
        output_rows: Vec::new(),
    };
    let n = tokens.len();
    let k = tensor(n, kv_dim, rng.vec(n * kv_dim));
    let v = tensor(n, kv_dim, rng.vec(n * kv_dim));
    b.kv_store(&mut cache, 0, &k, &v, &all).expect("store");

    // The batch: only the new tokens of each sequence.
    let mut seqs = Vec::new();
    let mut rows = 0;
    for (si, s) in case.seqs.iter().enumerate() {
        let n_kv = s.0 + s.1;
        let mask = (s.2 > 0).then(|| {
            (0..s.1 * n_kv)
                .map(|i| {
                    let (r, j) = (i / n_kv, i % n_kv);
                    // Holes, plus one row with nothing visible at all.
                    !(j % s.2 == r % s.2 || (r == 1 && s.1 > 2))
                })
                .collect()
        });
        seqs.push(BatchSeq {
            first_row: rows,
            n_rows: s.1,
            first_pos: s.0 as u32,
            kv_slots: seq_slots[si].clone(),
            mask,
        });
        rows += s.1;
    }
    let batch = Batch {
        tokens: vec![0; rows],
        positions: Vec::new(),
        slots: Vec::new(),
        seqs,
        output_rows: Vec::new(),
    };
    let q_data = rng.vec(rows * q_dim);
    let q = tensor(rows, q_dim, q_data.clone());
    let p = AttentionParams {
        n_heads: case.n_heads,
        n_kv_heads: case.n_kv_heads,
        head_dim: case.head_dim,
        scale: 1.0 / (case.head_dim as f32).sqrt(),
        window: case.window,
    };
    let out = match rec {
        Some(r) => b.attention(&cache, 0, &q, &batch, p, &mut Taps::new(r)),
        None => b.attention(&cache, 0, &q, &batch, p, &mut Taps::none()),
    }
    .expect("attention");
    Ran {
        out: b.to_host(&out).data.iter().map(|x| x.to_bits()).collect(),
        q: q_data,
        batch,
        params: p,
    }
}

fn cases() -> Vec<Case> {
    vec![
        // gemma3-like: 4 heads over 1 KV head of 256, window cutting a 300-key span.
        Case {
            head_dim: 256,
            n_heads: 4,
            n_kv_heads: 1,
            window: Some(100),
            seqs: vec![(0, 300, 0)],
        },
        // SmolLM2-like: 9 heads over 3 KV heads of 64; decode rows after long histories.
        Case {
            head_dim: 64,
            n_heads: 9,
            n_kv_heads: 3,
            window: None,
            seqs: vec![(290, 1, 0), (7, 1, 0), (0, 37, 0)],
        },
        // Masks with holes and a fully masked row, several sequences, one window.
        Case {
            head_dim: 128,
            n_heads: 4,
            n_kv_heads: 2,
            window: Some(40),
            seqs: vec![(5, 23, 3), (130, 9, 2), (0, 3, 0)],
        },
        Case {
            head_dim: 64,
            n_heads: 2,
            n_kv_heads: 2,
            window: None,
            seqs: vec![(0, 150, 5)],
        },
    ]
}

#[test]
fn tiled_avx2_attention_is_bitwise_the_portable_kernel() {
    if Isa::detect() != Isa::Avx2 {
        eprintln!("no AVX2 on this CPU: only the portable kernel exists here");
        return;
    }
    for (ci, case) in cases().iter().enumerate() {
        for kv in [KvType::F16, KvType::F32] {
            let fast = run(Isa::Avx2, kv, case, 7 + ci as u64);
            let portable = run(Isa::Portable, kv, case, 7 + ci as u64);
            assert_eq!(fast.len(), portable.len());
            let diff = fast.iter().zip(&portable).filter(|(a, b)| a != b).count();
            assert_eq!(
                diff,
                0,
                "case {ci} {kv:?}: {diff} of {} outputs differ",
                fast.len()
            );
            // Not all zeros: the case really attended.
            assert!(
                fast.iter().filter(|&&b| b != 0).count() > fast.len() / 2,
                "case {ci}"
            );
        }
    }
}

/// The debug mode (an observer wants `kq`/`kq_softmax`) gives bitwise the normal output, and
/// its taps are the values that output was made of: every output row is the tapped weights
/// times the tapped `v_read` rows, the weights are a softmax of the tapped scores, and the
/// scores are `q . k_read * scale` where visible, `-inf` elsewhere.
#[test]
fn debug_mode_is_bitwise_normal() {
    for isa in Isa::available() {
        for (ci, case) in cases().iter().enumerate() {
            let seed = 11 + ci as u64;
            let normal = run_full(isa, KvType::F16, case, seed, None);
            let mut rec = Recorder::new();
            let debug = run_full(isa, KvType::F16, case, seed, Some(&mut rec));
            assert_eq!(
                normal.out, debug.out,
                "{isa:?} case {ci}: debug mode changed kqv"
            );
            let get = |n: &str| rec.get(n).unwrap_or_else(|| panic!("tap {n}")).data.clone();
            let (kq, probs) = (get("blk.0.kq"), get("blk.0.kq_softmax"));
            let (k_read, v_read) = (get("blk.0.k_read"), get("blk.0.v_read"));
            check_taps_explain_output(case, &debug, &kq, &probs, &k_read, &v_read, ci);
        }
    }
}

fn check_taps_explain_output(
    case: &Case,
    r: &Ran,
    kq: &[f32],
    probs: &[f32],
    k_read: &[f32],
    v_read: &[f32],
    ci: usize,
) {
    let (hd, nh) = (case.head_dim, case.n_heads);
    let group = nh / case.n_kv_heads;
    let kv_dim = case.n_kv_heads * hd;
    let q_dim = nh * hd;
    let (mut at, mut kv_at, mut masked, mut visible) = (0usize, 0usize, 0usize, 0usize);
    for seq in &r.batch.seqs {
        let n_kv = seq.kv_slots.len();
        for i in 0..seq.n_rows {
            let row = seq.first_row + i;
            for h in 0..nh {
                let kh = h / group;
                let qv = &r.q[row * q_dim + h * hd..row * q_dim + (h + 1) * hd];
                let s = &kq[at..at + n_kv];
                let w = &probs[at..at + n_kv];
                at += n_kv;
                let mut out = vec![0f64; hd];
                for j in 0..n_kv {
                    let key = &k_read[(kv_at + j) * kv_dim + kh * hd..][..hd];
                    let val = &v_read[(kv_at + j) * kv_dim + kh * hd..][..hd];
                    if s[j] == f32::NEG_INFINITY {
                        assert_eq!(w[j], 0.0, "case {ci}: a masked key has weight");
                        masked += 1;
                        continue;
                    }
                    visible += 1;
                    let dot: f64 = qv.iter().zip(key).map(|(&a, &b)| f64::from(a * b)).sum();
                    let want = dot * f64::from(r.params.scale);
                    assert!(
                        (f64::from(s[j]) - want).abs() <= 1e-4 * (1.0 + want.abs()),
                        "case {ci}: score {} vs q.k*scale {want}",
                        s[j]
                    );
                    for (o, &v) in out.iter_mut().zip(val) {
                        *o += f64::from(w[j]) * f64::from(v);
                    }
                }
                let total: f64 = w.iter().map(|&x| f64::from(x)).sum();
                let got = &r.out[row * q_dim + h * hd..row * q_dim + (h + 1) * hd];
                if total == 0.0 {
                    assert!(got.iter().all(|&b| f32::from_bits(b) == 0.0));
                    continue;
                }
                assert!(
                    (total - 1.0).abs() < 1e-5,
                    "case {ci}: weights sum to {total}"
                );
                for (o, &g) in out.iter().zip(got) {
                    let g = f64::from(f32::from_bits(g));
                    assert!(
                        (o - g).abs() <= 1e-5 * (1.0 + g.abs()),
                        "case {ci}: kqv {g} vs taps' weighted sum {o}"
                    );
                }
            }
        }
        kv_at += n_kv;
    }
    assert_eq!(at, kq.len(), "case {ci}: kq layout");
    assert!(
        visible > 0 && (case.window.is_none() || masked > 0),
        "case {ci}"
    );
}

/// The cpu kernel's taps and the reference's have one layout and agree (a fully masked row
/// included: weights 0 on both sides, no 0/0 in the reference's tap).
#[test]
fn debug_taps_match_the_reference() {
    let rb = RefBackend::new();
    let cb = CpuBackend::new(CpuOptions {
        threads: Some(2),
        ..CpuOptions::default()
    });
    for (ci, case) in cases().iter().enumerate() {
        let mut rr = Recorder::new();
        let mut cr = Recorder::new();
        run_on(&rb, HostTensor::matrix, case, 5 + ci as u64, Some(&mut rr));
        run_on(&cb, CpuTensor::from_vec, case, 5 + ci as u64, Some(&mut cr));
        for tap in [
            "blk.0.k_read",
            "blk.0.v_read",
            "blk.0.kq",
            "blk.0.kq_softmax",
        ] {
            let (a, b) = (rr.get(tap).expect("ref tap"), cr.get(tap).expect("cpu tap"));
            assert_eq!(a.shape, b.shape, "case {ci} {tap}");
            for (i, (&x, &y)) in a.data.iter().zip(&b.data).enumerate() {
                let ok = (x == f32::NEG_INFINITY && y == f32::NEG_INFINITY)
                    || (x - y).abs() <= 2e-2 * (1.0 + x.abs());
                assert!(ok, "case {ci} {tap}[{i}]: ref {x} vs cpu {y}");
            }
        }
    }
}
