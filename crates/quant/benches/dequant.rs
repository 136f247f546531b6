//! Dequantization throughput: `cargo bench -p lockstep-quant --bench dequant`.
//!
//! For every supported type, quantizes ~16M pseudo-random values once, then times
//! `dequantize_row` over all of them (median of 5 runs, after one untimed run that faults the
//! output pages in) and reports GB/s of f32 written. A second column uses
//! `dequantize_row_parallel` with every available core.

use std::time::{Duration, Instant};

use lockstep_quant::{dequantize_row, dequantize_row_parallel, quantize_row, GgmlType, ALL_TYPES};

const DEFAULT_N: usize = 16 * 1024 * 1024;
const RUNS: usize = 5;

/// Values per pass: 16M by default (64 MiB of output, so the table shows memory-bound rates);
/// `DEQUANT_BENCH_N=65536` keeps the data in cache to compare the kernels themselves.
fn n_values() -> usize {
    std::env::var("DEQUANT_BENCH_N")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .map_or(DEFAULT_N, |n| (n / 256).max(1) * 256)
}

/// splitmix64: deterministic, dependency-free.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// Roughly normal values (sum of four uniforms) with a scale that changes every 4096 values,
/// like rows of a weight matrix.
fn input(n: usize) -> Vec<f32> {
    let mut rng = Rng(0x5eed);
    let mut scale = 1.0f32;
    (0..n)
        .map(|i| {
            if i % 4096 == 0 {
                scale = 0.02 + 2.0 * (rng.uniform() + 1.0);
            }
            let g = rng.uniform() + rng.uniform() + rng.uniform() + rng.uniform();
            g * scale
        })
        .collect()
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Quantizes in parallel chunks of whole blocks: setup time only, not measured.
fn quantize_all(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let bytes = x.len() / ty.block_size() * ty.type_size();
    let mut q = vec![0u8; bytes];
    let blocks = x.len() / ty.block_size();
    let per = blocks.div_ceil(threads());
    std::thread::scope(|s| {
        for (src, dst) in x
            .chunks(per * ty.block_size())
            .zip(q.chunks_mut(per * ty.type_size()))
        {
            s.spawn(move || quantize_row(ty, src, dst).expect("quantize"));
        }
    });
    q
}

/// Median and best time of one call of `f` over `RUNS` runs; small inputs are repeated within
/// each run so that a run lasts long enough to time. The best run shows the kernel's own speed
/// on a machine that is busy with other work; the median is the figure to report.
fn time(reps: usize, mut f: impl FnMut()) -> (Duration, Duration) {
    f();
    let mut t: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..reps {
                f();
            }
            start.elapsed() / reps as u32
        })
        .collect();
    t.sort();
    (t[t.len() / 2], t[0])
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument is taken as a type-name filter.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let n = n_values();
    let reps = (DEFAULT_N / n).clamp(1, 1000);
    let x = input(n);
    let mut y = vec![0.0f32; n];
    let n_threads = threads();
    let gb = (n * 4) as f64 / 1e9;
    println!("dequantize {n} values, median of {RUNS} runs, GB/s of f32 output");
    println!(
        "{:<8} {:>12} {:>10} {:>10} {:>14}",
        "type",
        "GB/s median",
        "GB/s best",
        "ms median",
        format!("GB/s {n_threads} thr")
    );
    for &ty in ALL_TYPES.iter().filter(|t| t.is_supported()) {
        if !filter.is_empty() && !filter.iter().any(|f| f.eq_ignore_ascii_case(ty.name())) {
            continue;
        }
        let q = quantize_all(ty, &x);
        let (single, best) = time(reps, || dequantize_row(ty, &q, &mut y).expect("dequantize"));
        let (par, _) = time(reps, || {
            dequantize_row_parallel(ty, &q, &mut y, n_threads).expect("dequantize")
        });
        println!(
            "{:<8} {:>12.2} {:>10.2} {:>10.3} {:>14.2}",
            ty.name(),
            gb / single.as_secs_f64(),
            gb / best.as_secs_f64(),
            single.as_secs_f64() * 1e3,
            gb / par.as_secs_f64()
        );
        std::hint::black_box(&y);
    }
}
