//! Measures the reference matmul: `cargo run --release -p lockstep-backend-ref --example matmul_speed`.
use std::sync::Arc;
use std::time::Instant;

use lockstep_backend_ref::{RefBackend, RefWeight};
use lockstep_graph::{Backend, HostTensor};

fn main() {
    let b = RefBackend::new();
    for &(n, k, m) in &[
        (1usize, 576usize, 1536usize),
        (512, 576, 1536),
        (512, 640, 2048),
    ] {
        let x = HostTensor::matrix(n, k, (0..n * k).map(|i| (i % 13) as f32 * 0.1).collect());
        let w = RefWeight {
            rows: m,
            cols: k,
            data: Arc::new((0..m * k).map(|i| (i % 7) as f32 * 0.1).collect()),
        };
        let reps = if n == 1 { 200 } else { 5 };
        let t = Instant::now();
        for _ in 0..reps {
            std::hint::black_box(b.matmul(&x, &w));
        }
        let s = t.elapsed().as_secs_f64() / reps as f64;
        println!(
            "n={n} k={k} m={m}: {:.3} ms, {:.2} GFLOP/s",
            s * 1e3,
            2.0 * (n * k * m) as f64 / s / 1e9
        );
    }
}
