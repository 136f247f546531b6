//! The activation quantizer's scale and inverse (kernels.cu `q8_scale`, `q8_inverse`: d = a / 127
//! by one multiply and an FMA correction, 1 / d by a reciprocal approximation and one Newton
//! step, without nvcc's division branches) are bit for bit IEEE's a / 127.0f and 1.0f / d: proven
//! here on every non-negative float, as the CPU emulations compile them
//! (`bench/q8_exhaustive/run_cpu.sh` cuts them out of kernels.cu as they are). The device's
//! reciprocal approximation differs from the CPU's start; `bench/q8_exhaustive/run.sh` runs the
//! same sweep on the GPU (BENCHMARKS.md, session 43). The fast norms' mean (`norm_mean`: ss / g
//! formed in f64, no f32 division) is swept the same way for several g.

mod common;

use common::gxx_or_skip;
use std::process::Command;

#[test]
fn q8_scale_inverse_and_norm_mean_are_ieee_on_every_float() {
    if !gxx_or_skip() {
        return;
    }
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../bench/q8_exhaustive/run_cpu.sh"
    );
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(1, 8));
    let out = Command::new("bash")
        .args([script, &threads.to_string()])
        .output()
        .expect("bash runs the sweep");
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "the sweep found a difference or failed"
    );
    for what in [
        "q8_scale vs a / 127.0f, all 2^31 non-negative a: 0 differ",
        "q8_inverse(q8_scale(a)) vs 1.0f / (a / 127.0f), all a: 0 differ",
        "q8_inverse(d) vs 1.0f / d, all d < 2^126: 0 differ",
        "norm_mean(ss, g) vs ss / (float)g, all 2^31 non-negative ss, g in {64, 256, 576, 640, \
         896, 1152, 3, 127, 2^24 - 1}: 0 differ",
    ] {
        assert!(text.lines().any(|l| l == what), "missing: {what}");
    }
}
