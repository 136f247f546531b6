//! Times one weight's matmul (kernel work): `[MM_REPS=30] mm MODEL TENSOR ROWS THREADS`.
use lockstep_backend_cpu::{CpuBackend, CpuOptions};
use lockstep_gguf::GgufFile;
use lockstep_graph::{Backend, WeightView};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let f = GgufFile::open(std::path::Path::new(&a[1])).expect("open");
    let info = f.header().tensor(&a[2]).expect("tensor");
    let n: usize = a[3].parse().expect("rows");
    let threads: usize = a[4].parse().expect("threads");
    let b = CpuBackend::new(CpuOptions {
        threads: Some(threads),
        ..Default::default()
    });
    let w = b
        .load_weight(WeightView {
            name: &info.name,
            ty: info.ty,
            dims: &info.dims,
            data: f.tensor_data(info),
        })
        .expect("load");
    let k = info.dims[0] as usize;
    let bytes = w.bytes();
    let ids: Vec<u32> = (0..n as u32).collect();
    let emb = f.header().tensor("token_embd.weight").expect("embd");
    let e = b
        .load_weight(WeightView {
            name: &emb.name,
            ty: emb.ty,
            dims: &emb.dims,
            data: f.tensor_data(emb),
        })
        .expect("load");
    let x = b.embed(&e, &ids).expect("embed");
    let x = if x.cols() == k {
        x
    } else {
        // Any activation of the right width will do.
        let h: Vec<u32> = (0..(n * k).div_ceil(x.cols()) as u32).collect();
        let y = b.embed(&e, &h).expect("embed");
        let d: Vec<f32> = y.data()[..n * k].to_vec();
        b.scale(&tensor(&b, n, k, d), 1.0)
    };
    for _ in 0..3 {
        let _ = b.matmul(&x, &w);
    }
    let reps: usize = std::env::var("MM_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    // Best of 5 batches: the kernel's speed, not the machine's other load.
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t0 = std::time::Instant::now();
        for _ in 0..reps.div_ceil(5) {
            let x2 = b.scale(&x, 1.0);
            let _ = b.matmul(&x2, &w);
        }
        best = best.min(t0.elapsed().as_secs_f64() / reps.div_ceil(5) as f64);
    }
    let macs =
        (bytes as f64) / (info.ty.type_size() as f64) * info.ty.block_size() as f64 * n as f64;
    let _ = ids;
    println!(
        "{} {:?} n={n}: {:.3} ms (best of 5 batches of MM_REPS / 5), {:.1} GB/s weights, {:.1} GMAC/s",
        a[2],
        info.dims,
        best * 1e3,
        bytes as f64 / best / 1e9,
        macs / best / 1e9
    );
}

/// An activation tensor with the given contents (via embed of an F32-free path: scale of an
/// embedding slice would change values, so build it from a one-row embedding and copy).
fn tensor(
    b: &CpuBackend,
    rows: usize,
    cols: usize,
    data: Vec<f32>,
) -> lockstep_backend_cpu::CpuTensor {
    let _ = b;
    lockstep_backend_cpu::CpuTensor::from_vec(rows, cols, data)
}
