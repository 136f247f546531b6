//! The cluster decode step (session 36): which captured step graphs `decode_layers_cluster`
//! (kernels.cu) can run, and with what arguments.
//!
//! A replayed one-row decode step of a llama-shaped model of SmolLM2-135M's dimensions is a
//! chain of six kernels a layer (`norm_mmv3_fast1_3`, `attention_decode_rope_64`,
//! `mmv_fast1_3`, `norm_gate_up_fast1_3`, `quantize_q8_32`, `mmv_fast1_3`; layer 0 begins with
//! `rms_norm` and `mmv3_fast1_3`; the output norm, `residual_norm`, follows the last), and most
//! of its time is the boundaries between them. The cluster kernel runs every layer and the
//! output norm as phases of one kernel on 16 SMs, with those kernels'
//! arithmetic bit for bit (kernels.cu explains how), so the rewrite is a schedule, not a change
//! of numbers: the eager (and tapped) steps keep the six kernels, and `check`'s
//! replayed-vs-tapped invariance compares every replay with them, bitwise.
//!
//! [`plan`] reads the captured chain as the kernels were launched (names and argument values,
//! [`Call`]) and accepts it only when every kernel is the one expected, with the expected shapes,
//! and each one's inputs are the outputs of the one before it (the residual, the quantized
//! activations, the cache and the step's tables). Anything else keeps the captured graph. It is
//! plain data in and out, so CI tests it without a GPU; `graph_exec::cluster_rewrite` does the
//! driver's part.

/// One kernel argument's value, as the launch passed it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg {
    /// A device pointer.
    P(u64),
    I(i32),
    F(f32),
    D(f64),
    /// A `size_t`.
    Z(u64),
}

/// An argument's kind, for reading a launch's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    P,
    I,
    F,
    D,
    Z,
}

impl Kind {
    pub fn size(self) -> usize {
        match self {
            Kind::I | Kind::F => 4,
            Kind::P | Kind::D | Kind::Z => 8,
        }
    }
}

/// A kernel of the captured chain: its name and arguments (empty for kernels the rewrite does
/// not read).
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub name: String,
    pub args: Vec<Arg>,
    /// Threads a block (`blockDim.x`; 0 where unknown).
    pub block: u32,
}

use Kind::{D as KD, F as KF, I as KI, P as KP, Z as KZ};

/// The argument kinds of the kernels [`plan`] reads, in kernels.cu's order.
pub fn signature(name: &str) -> Option<&'static [Kind]> {
    const EMBED: &[Kind] = &[KP, KP, KP, KI, KI, KI, KI];
    const RMS_NORM: &[Kind] = &[KP, KP, KP, KI, KF, KP, KP];
    // NORM_IN_ARGS: a, b, pw, bn, sum, nw, out, g, eps, nt, q, ds
    const NORM_MMV3: &[Kind] = &[
        KP, KP, KP, KP, KP, KP, KP, KI, KF, KI, KP, KP, KP, KP, KP, KP, KP, KP, KI, KI, KI,
    ];
    // NORM_MMV3_ARGS, then the scale
    const SCALE_NORM_MMV3: &[Kind] = &[
        KP, KP, KP, KP, KP, KP, KP, KI, KF, KI, KP, KP, KP, KP, KP, KP, KP, KP, KI, KI, KI, KF,
    ];
    const NORM_GATE_UP: &[Kind] = &[
        KP, KP, KP, KP, KP, KP, KP, KI, KF, KI, KP, KP, KP, KP, KP, KP, KP, KI, KI, KD,
    ];
    const MMV3: &[Kind] = &[KP, KP, KP, KP, KP, KP, KP, KP, KI, KI, KI, KI, KI];
    const MMV: &[Kind] = &[KP, KP, KP, KP, KI, KI, KI];
    const QUANTIZE: &[Kind] = &[KP, KP, KP, KI];
    const ATT_ROPE: &[Kind] = &[
        KP, KP, KP, KP, KP, KP, KP, KP, KZ, KI, KI, KF, KI, KI, KP, KP, KP, KP, KP, KP, KF, KP, KP,
        KP, KP, KP, KZ, KP, KI, KI, KI,
    ];
    const RESIDUAL_NORM: &[Kind] = &[KP, KP, KP, KP, KP, KP, KP, KI, KF, KP, KP];
    Some(match name {
        "embed_rows" => EMBED,
        "rms_norm" => RMS_NORM,
        "norm_mmv3_fast1_3" => NORM_MMV3,
        "scale_norm_mmv3_fast1_3" => SCALE_NORM_MMV3,
        "norm_gate_up_fast1_3" => NORM_GATE_UP,
        "mmv3_fast1_3" => MMV3,
        "mmv_fast1_3" => MMV,
        "quantize_q8_32" => QUANTIZE,
        "attention_decode_rope_64" => ATT_ROPE,
        "residual_norm" => RESIDUAL_NORM,
        _ => return None,
    })
}

/// The shape the kernel is built for (kernels.cu `CL_*`).
pub const D: i32 = 576;
pub const N_HEADS: i32 = 9;
pub const N_KV_HEADS: i32 = 3;
pub const HEAD_DIM: i32 = 64;
pub const FFN: i32 = 1536;
/// plan::norm_threads(576).
pub const NORM_THREADS: i32 = 256;
/// The most layers the kernel takes (kernels.cu `CL_MAX_LAYERS`: its table in shared memory).
pub const MAX_LAYERS: usize = 32;
/// One cluster of this many blocks of [`THREADS`] threads.
pub const BLOCKS: u32 = 16;
pub const THREADS: u32 = 512;
/// The kernel's dynamic shared memory: the weight slots (kernels.cu `CL_SLOT_BYTES`) and its
/// vectors (`sizeof(ClusterVecs)`, checked against the compiled kernel's needs by the launch).
pub const SLOT_BYTES: u32 = {
    let rb_d = D / 32 * 20;
    let rb_f = FFN / 32 * 20;
    let norm = D * 4;
    let s0 = norm + HEAD_DIM * rb_d;
    let s1 = D / 16 * rb_d;
    let s2 = 2 * (FFN / 16) * rb_d;
    let s3 = D / 16 * rb_f;
    let s4 = norm;
    (s0 + s1 + s2 + s3 + s4) as u32
};
/// Room for the kernel's vectors after the slots (kernels.cu asserts `sizeof(ClusterVecs)` fits,
/// and the kernel traps when launched with less dynamic shared memory than both need).
pub const VEC_BYTES: u32 = 24 * 1024;
pub const SMEM_BYTES: u32 = SLOT_BYTES + VEC_BYTES;

/// A layer's tensors (kernels.cu `ClusterLayer`, the same layout).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClusterLayer {
    pub wq: u64,
    pub wk: u64,
    pub wv: u64,
    pub wo: u64,
    pub wg: u64,
    pub wu: u64,
    pub wd: u64,
    pub attn_norm: u64,
    pub ffn_norm: u64,
    pub cs: u64,
    pub base: u64,
}

/// The kernel's argument (kernels.cu `ClusterStep`, the same layout); `layers` is the device
/// copy of [`Plan::layers`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ClusterArgs {
    pub layers: u64,
    pub n_layers: i32,
    pub half: i32,
    pub style: i32,
    pub eps: f32,
    pub scale: f32,
    pub act: i32,
    pub cgelu: f64,
    pub kc: u64,
    pub vc: u64,
    pub slots: u64,
    pub info: u64,
    pub mask: u64,
    pub new_slots: u64,
    pub x_in: u64,
    pub x_out: u64,
    pub ffn_out: u64,
}

/// The output norm the kernel runs after the layers (the chain's `residual_norm`; kernels.cu
/// `ClusterOut`, the same layout): its weights, then where it writes. The kernel reads it as
/// the record after the layers in its layer table.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClusterOut {
    pub norm: u64,
    pub sum: u64,
    pub f32: u64,
    pub q: u64,
    pub d: u64,
}

/// What the rewrite replaces: chain positions `first ..= last` (kernel calls only) by one
/// launch of the cluster kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub first: usize,
    pub last: usize,
    pub layers: Vec<ClusterLayer>,
    pub out: ClusterOut,
    pub args: ClusterArgs,
}

// Argument `i` of a call as one kind: `ptr(c, 3)` is its fourth argument, a pointer.
macro_rules! accessor {
    ($name:ident, $variant:ident, $ty:ty, $what:literal) => {
        fn $name(c: &Call, i: usize) -> Result<$ty, String> {
            match c.args.get(i) {
                Some(Arg::$variant(v)) => Ok(*v),
                other => Err(format!(
                    "{}: argument {i} is {other:?}, not {}",
                    c.name, $what
                )),
            }
        }
    };
}
accessor!(ptr, P, u64, "a pointer");
accessor!(int, I, i32, "an int");
accessor!(flt, F, f32, "a float");
accessor!(dbl, D, f64, "a double");
accessor!(size, Z, u64, "a size");

fn expect(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}
fn named<'a>(chain: &'a [Call], i: usize, name: &str) -> Result<&'a Call, String> {
    match chain.get(i) {
        Some(c) if c.name == name => Ok(c),
        Some(c) => Err(format!("kernel {i} is {}, not {name}", c.name)),
        None => Err(format!("the chain ends before {name} (kernel {i})")),
    }
}

/// The step's shared state every attention launch must agree on.
#[derive(Clone, Copy, PartialEq)]
struct AttShared {
    kc: u64,
    vc: u64,
    slots: u64,
    info: u64,
    mask: u64,
    new_slots: u64,
    cs: u64,
    scale: f32,
    half: i32,
    style: i32,
}

/// Whether `chain` (a captured step's kernels, in order) is a one-row decode step the cluster
/// kernel runs, and with what; `Err` says why not.
pub fn plan(chain: &[Call]) -> Result<Plan, String> {
    let e = chain
        .iter()
        .position(|c| c.name == "embed_rows")
        .ok_or("no embed_rows")?;
    let embed = &chain[e];
    let x0 = ptr(embed, 2)?;
    // Layer 0's attention norm and q/k/v: one launch (`Backend::scale_norm_then` without a
    // scale), or rms_norm then mmv3_fast1_3.
    if let Some(sn) = chain
        .get(e + 1)
        .filter(|c| c.name == "scale_norm_mmv3_fast1_3")
    {
        expect(ptr(sn, 0)? == x0, || {
            "layer 0's norm does not read the embedding".into()
        })?;
        // No residual sum, no post norm, no scale (a scaled row would be written to `sum`).
        for j in [1, 2, 3, 4] {
            expect(ptr(sn, j)? == 0, || {
                format!("layer 0's norm argument {j} is set")
            })?;
        }
        expect(
            (int(sn, 7)?, int(sn, 9)?, flt(sn, 21)?) == (D, NORM_THREADS, 1.0)
                && (int(sn, 18)?, int(sn, 19)?, int(sn, 20)?)
                    == (
                        N_HEADS * HEAD_DIM,
                        N_KV_HEADS * HEAD_DIM,
                        N_KV_HEADS * HEAD_DIM,
                    ),
            || "layer 0's norm and q/k/v shapes".into(),
        )?;
        expect(ptr(sn, 10)? != 0 && ptr(sn, 11)? != 0, || {
            "layer 0's norm does not quantize".into()
        })?;
        return layers_from(
            chain,
            e,
            x0,
            flt(sn, 8)?,
            ptr(sn, 5)?,
            [ptr(sn, 12)?, ptr(sn, 13)?, ptr(sn, 14)?],
            [ptr(sn, 15)?, ptr(sn, 16)?, ptr(sn, 17)?],
            e + 2,
        );
    }
    let rn = named(chain, e + 1, "rms_norm")?;
    expect(ptr(rn, 0)? == x0, || {
        "rms_norm does not read the embedding".into()
    })?;
    expect(int(rn, 3)? == D, || {
        format!("rows of {}", int(rn, 3).unwrap_or(0))
    })?;
    let eps = flt(rn, 4)?;
    let (q8, d8) = (ptr(rn, 5)?, ptr(rn, 6)?);
    expect(q8 != 0 && d8 != 0, || "rms_norm does not quantize".into())?;
    let m3 = named(chain, e + 2, "mmv3_fast1_3")?;
    expect(ptr(m3, 3)? == q8 && ptr(m3, 4)? == d8, || {
        "q/k/v do not read the norm's quantization".into()
    })?;
    expect(
        (
            int(m3, 8)?,
            int(m3, 9)?,
            int(m3, 10)?,
            int(m3, 11)?,
            int(m3, 12)?,
        ) == (
            1,
            D,
            N_HEADS * HEAD_DIM,
            N_KV_HEADS * HEAD_DIM,
            N_KV_HEADS * HEAD_DIM,
        ),
        || "q/k/v shapes".into(),
    )?;
    layers_from(
        chain,
        e,
        x0,
        eps,
        ptr(rn, 1)?,
        [ptr(m3, 0)?, ptr(m3, 1)?, ptr(m3, 2)?],
        [ptr(m3, 5)?, ptr(m3, 6)?, ptr(m3, 7)?],
        e + 3,
    )
}

/// [`plan`] from layer 0's attention (chain index `i`) on: `e` the embedding's index, `x0` its
/// row, layer 0's norm weights, q/k/v weights and outputs as its first launches had them.
#[allow(clippy::too_many_arguments)]
fn layers_from(
    chain: &[Call],
    e: usize,
    x0: u64,
    eps: f32,
    attn_norm: u64,
    w: [u64; 3],
    y: [u64; 3],
    i: usize,
) -> Result<Plan, String> {
    let mut attn_norm = attn_norm;
    let [mut wq, mut wk, mut wv] = w;
    let [mut yq, mut yk, mut yv] = y;
    let mut residual = x0;
    let mut layers = Vec::new();
    let mut shared: Option<AttShared> = None;
    let mut act = None;
    let mut i = i;
    loop {
        let l = layers.len();
        let at = named(chain, i, "attention_decode_rope_64")?;
        expect(
            ptr(at, 0)? == yq && ptr(at, 16)? == yk && ptr(at, 17)? == yv,
            || format!("layer {l}: the attention does not read its q/k/v"),
        )?;
        expect(
            (int(at, 9)?, int(at, 10)?, int(at, 12)?, int(at, 30)?) == (N_HEADS, N_KV_HEADS, 0, 1),
            || format!("layer {l}: heads, window or rows"),
        )?;
        // No scores, no per-head norms, no taps' copies.
        for j in [6, 18, 19, 21, 22, 23, 24] {
            expect(ptr(at, j)? == 0, || {
                format!("layer {l}: attention argument {j} is set")
            })?;
        }
        expect(flt(at, 20)? == eps, || format!("layer {l}: eps"))?;
        let base = size(at, 8)?;
        expect(size(at, 26)? == base, || {
            format!("layer {l}: the cache is written off its read base")
        })?;
        let (aq, ad) = (ptr(at, 14)?, ptr(at, 15)?);
        expect(aq != 0 && ad != 0, || {
            format!("layer {l}: the attention does not quantize")
        })?;
        let s = AttShared {
            kc: ptr(at, 1)?,
            vc: ptr(at, 2)?,
            slots: ptr(at, 3)?,
            info: ptr(at, 4)?,
            mask: ptr(at, 5)?,
            new_slots: ptr(at, 25)?,
            cs: ptr(at, 27)?,
            scale: flt(at, 11)?,
            half: int(at, 28)?,
            style: int(at, 29)?,
        };
        // The kernel rotates whole heads of adjacent pairs (a constant there).
        expect(2 * s.half == HEAD_DIM && s.style == 0, || {
            format!("layer {l}: rope over {} pairs, style {}", s.half, s.style)
        })?;
        match shared {
            None => shared = Some(s),
            Some(t) => expect(t == s, || {
                format!("layer {l}: the attention's cache, tables or rope differ from layer 0's")
            })?,
        }
        // o
        let o = named(chain, i + 1, "mmv_fast1_3")?;
        expect(ptr(o, 1)? == aq && ptr(o, 2)? == ad, || {
            format!("layer {l}: o does not read the attention's quantization")
        })?;
        expect((int(o, 4)?, int(o, 5)?, int(o, 6)?) == (1, D, D), || {
            format!("layer {l}: o's shape")
        })?;
        let o_out = ptr(o, 3)?;
        // the residual add, the feed-forward norm, gate/up
        let gu = named(chain, i + 2, "norm_gate_up_fast1_3")?;
        expect(ptr(gu, 0)? == residual && ptr(gu, 1)? == o_out, || {
            format!("layer {l}: the feed-forward norm's inputs")
        })?;
        expect(ptr(gu, 2)? == 0 && ptr(gu, 3)? == 0, || {
            format!("layer {l}: a post norm")
        })?;
        expect(
            (int(gu, 7)?, flt(gu, 8)?, int(gu, 9)?, int(gu, 17)?) == (D, eps, NORM_THREADS, FFN),
            || format!("layer {l}: the feed-forward norm's shape"),
        )?;
        let a = (int(gu, 18)?, dbl(gu, 19)?);
        // SiLU (a constant in the kernel).
        expect(a.0 == 0, || format!("layer {l}: activation {}", a.0))?;
        match act {
            None => act = Some(a),
            Some(b) => expect(a == b, || format!("layer {l}: another activation"))?,
        }
        let ffn_inp = ptr(gu, 4)?;
        let aa = ptr(gu, 16)?;
        let qz = named(chain, i + 3, "quantize_q8_32")?;
        expect(ptr(qz, 0)? == aa && int(qz, 3)? == FFN / 32, || {
            format!("layer {l}: the activation's quantizer")
        })?;
        let dn = named(chain, i + 4, "mmv_fast1_3")?;
        expect(
            ptr(dn, 1)? == ptr(qz, 1)? && ptr(dn, 2)? == ptr(qz, 2)?,
            || format!("layer {l}: down does not read the activation's quantization"),
        )?;
        expect(
            (int(dn, 4)?, int(dn, 5)?, int(dn, 6)?) == (1, FFN, D),
            || format!("layer {l}: down's shape"),
        )?;
        let ffn_out = ptr(dn, 3)?;
        layers.push(ClusterLayer {
            wq,
            wk,
            wv,
            wo: ptr(o, 0)?,
            wg: ptr(gu, 12)?,
            wu: ptr(gu, 13)?,
            wd: ptr(dn, 0)?,
            attn_norm,
            ffn_norm: ptr(gu, 5)?,
            cs: s.cs,
            base,
        });
        // the next layer's residual add, norm and q/k/v, or the output norm
        expect(layers.len() <= MAX_LAYERS, || {
            format!("more than {MAX_LAYERS} layers")
        })?;
        let next = chain.get(i + 5).ok_or("the chain ends after a layer")?;
        if next.name == "residual_norm" {
            expect(ptr(next, 0)? == ffn_inp && ptr(next, 1)? == ffn_out, || {
                "the output norm does not read the last layer".into()
            })?;
            // The kernel runs it as residual_norm's one block of plan::norm_threads(576)
            // threads does (the same sum of squares and reduction), with no post norm, and
            // writes every output the kernel writes.
            expect(
                ptr(next, 2)? == 0
                    && ptr(next, 3)? == 0
                    && int(next, 7)? == D
                    && flt(next, 8)? == eps
                    && next.block == NORM_THREADS as u32,
                || "the output norm's shape".into(),
            )?;
            let outs = [4, 5, 6, 9, 10].map(|j| ptr(next, j));
            let [out_sum, out_norm, out_f32, out_q, out_d] = outs;
            let (out_sum, out_norm, out_f32, out_q, out_d) =
                (out_sum?, out_norm?, out_f32?, out_q?, out_d?);
            expect(
                [out_sum, out_norm, out_f32, out_q, out_d]
                    .iter()
                    .all(|&p| p != 0),
                || "the output norm does not quantize".into(),
            )?;
            let s = shared.ok_or("no attention")?;
            let (act, cgelu) = act.ok_or("no feed-forward")?;
            return Ok(Plan {
                first: e + 1,
                last: i + 5,
                args: ClusterArgs {
                    layers: 0,
                    n_layers: i32::try_from(layers.len()).map_err(|e| e.to_string())?,
                    half: s.half,
                    style: s.style,
                    eps,
                    scale: s.scale,
                    act,
                    cgelu,
                    kc: s.kc,
                    vc: s.vc,
                    slots: s.slots,
                    info: s.info,
                    mask: s.mask,
                    new_slots: s.new_slots,
                    x_in: x0,
                    x_out: ffn_inp,
                    ffn_out,
                },
                out: ClusterOut {
                    norm: out_norm,
                    sum: out_sum,
                    f32: out_f32,
                    q: out_q,
                    d: out_d,
                },
                layers,
            });
        }
        let nm = named(chain, i + 5, "norm_mmv3_fast1_3")?;
        expect(ptr(nm, 0)? == ffn_inp && ptr(nm, 1)? == ffn_out, || {
            format!("layer {}: the attention norm's inputs", l + 1)
        })?;
        expect(ptr(nm, 2)? == 0 && ptr(nm, 3)? == 0, || {
            format!("layer {}: a post norm", l + 1)
        })?;
        expect(
            (int(nm, 7)?, flt(nm, 8)?, int(nm, 9)?) == (D, eps, NORM_THREADS)
                && (int(nm, 18)?, int(nm, 19)?, int(nm, 20)?)
                    == (
                        N_HEADS * HEAD_DIM,
                        N_KV_HEADS * HEAD_DIM,
                        N_KV_HEADS * HEAD_DIM,
                    ),
            || format!("layer {}: the attention norm's shape", l + 1),
        )?;
        residual = ptr(nm, 4)?;
        attn_norm = ptr(nm, 5)?;
        (wq, wk, wv) = (ptr(nm, 12)?, ptr(nm, 13)?, ptr(nm, 14)?);
        (yq, yk, yv) = (ptr(nm, 15)?, ptr(nm, 16)?, ptr(nm, 17)?);
        i += 6;
    }
}

/// Whether the rewrite runs (`LOCKSTEP_CUDA_CLUSTER_STEP=0` keeps the captured kernels).
pub fn enabled() -> bool {
    std::env::var("LOCKSTEP_CUDA_CLUSTER_STEP").map_or(true, |v| v != "0")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn call(name: &str, args: Vec<Arg>) -> Call {
        Call {
            name: name.into(),
            args,
            block: 256,
        }
    }
    use Arg::{D as AD, F as AF, I as AI, P as AP, Z as AZ};

    /// A SmolLM2-shaped chain of `n` layers as the cuda backend captures it, pointers drawn
    /// from a counter (distinct buffers), plus the head.
    fn chain(n: usize) -> Vec<Call> {
        let mut next = 0x1000u64;
        let mut p = || {
            next += 0x100;
            next
        };
        let eps = 1e-5f32;
        let (kc, vc, slots, info, mask, new_slots, cs) = (p(), p(), p(), p(), p(), p(), p());
        let (q8, d8, aq8, ad8, fq8, fd8) = (p(), p(), p(), p(), p(), p());
        let mut c = vec![call(
            "embed_rows",
            vec![AP(p()), AP(p()), AP(p()), AI(576), AI(3), AI(32), AI(20)],
        )];
        let x0 = match c[0].args[2] {
            AP(x) => x,
            _ => unreachable!(),
        };
        let (mut q, mut k, mut v) = (p(), p(), p());
        c.push(call(
            "rms_norm",
            vec![AP(x0), AP(p()), AP(p()), AI(576), AF(eps), AP(q8), AP(d8)],
        ));
        c.push(call(
            "mmv3_fast1_3",
            vec![
                AP(p()),
                AP(p()),
                AP(p()),
                AP(q8),
                AP(d8),
                AP(q),
                AP(k),
                AP(v),
                AI(1),
                AI(576),
                AI(576),
                AI(192),
                AI(192),
            ],
        ));
        let mut residual = x0;
        for l in 0..n {
            let base = (l * 256) as u64;
            let att_out = p();
            c.push(call(
                "attention_decode_rope_64",
                vec![
                    AP(q),
                    AP(kc),
                    AP(vc),
                    AP(slots),
                    AP(info),
                    AP(mask),
                    AP(0),
                    AP(att_out),
                    AZ(base),
                    AI(9),
                    AI(3),
                    AF(0.125),
                    AI(0),
                    AI(3),
                    AP(aq8),
                    AP(ad8),
                    AP(k),
                    AP(v),
                    AP(0),
                    AP(0),
                    AF(eps),
                    AP(0),
                    AP(0),
                    AP(0),
                    AP(0),
                    AP(new_slots),
                    AZ(base),
                    AP(cs),
                    AI(32),
                    AI(0),
                    AI(1),
                ],
            ));
            let o_out = p();
            c.push(call(
                "mmv_fast1_3",
                vec![
                    AP(p()),
                    AP(aq8),
                    AP(ad8),
                    AP(o_out),
                    AI(1),
                    AI(576),
                    AI(576),
                ],
            ));
            let (ffn_inp, aa) = (p(), p());
            c.push(call(
                "norm_gate_up_fast1_3",
                vec![
                    AP(residual),
                    AP(o_out),
                    AP(0),
                    AP(0),
                    AP(ffn_inp),
                    AP(p()),
                    AP(p()),
                    AI(576),
                    AF(eps),
                    AI(256),
                    AP(q8),
                    AP(d8),
                    AP(p()),
                    AP(p()),
                    AP(p()),
                    AP(p()),
                    AP(aa),
                    AI(1536),
                    AI(0),
                    AD(0.7978845608028654),
                ],
            ));
            c.push(call(
                "quantize_q8_32",
                vec![AP(aa), AP(fq8), AP(fd8), AI(48)],
            ));
            let ffn_out = p();
            c.push(call(
                "mmv_fast1_3",
                vec![
                    AP(p()),
                    AP(fq8),
                    AP(fd8),
                    AP(ffn_out),
                    AI(1),
                    AI(1536),
                    AI(576),
                ],
            ));
            if l + 1 < n {
                let sum = p();
                (q, k, v) = (p(), p(), p());
                c.push(call(
                    "norm_mmv3_fast1_3",
                    vec![
                        AP(ffn_inp),
                        AP(ffn_out),
                        AP(0),
                        AP(0),
                        AP(sum),
                        AP(p()),
                        AP(p()),
                        AI(576),
                        AF(eps),
                        AI(256),
                        AP(q8),
                        AP(d8),
                        AP(p()),
                        AP(p()),
                        AP(p()),
                        AP(q),
                        AP(k),
                        AP(v),
                        AI(576),
                        AI(192),
                        AI(192),
                    ],
                ));
                residual = sum;
            } else {
                c.push(call(
                    "residual_norm",
                    vec![
                        AP(ffn_inp),
                        AP(ffn_out),
                        AP(0),
                        AP(0),
                        AP(p()),
                        AP(p()),
                        AP(p()),
                        AI(576),
                        AF(eps),
                        AP(q8),
                        AP(d8),
                    ],
                ));
            }
        }
        c.push(call("mmv_fast2r_8", vec![]));
        c
    }

    #[test]
    fn a_smollm2_decode_chain_is_planned() {
        for n in [1, 2, 30, MAX_LAYERS] {
            let c = chain(n);
            let p = plan(&c).unwrap_or_else(|e| panic!("{n} layers: {e}"));
            assert_eq!((p.first, p.last), (1, 2 + 6 * n), "{n} layers");
            assert_eq!(p.layers.len(), n);
            // The output norm is the cluster's too: the LM head follows it.
            assert_eq!(c[p.last].name, "residual_norm");
            assert_eq!(c[p.last + 1].name, "mmv_fast2r_8");
            assert_eq!(p.args.n_layers as usize, n);
            assert_eq!((p.args.half, p.args.style, p.args.act), (32, 0, 0));
            // Layer l's weights are the ones its kernels read.
            for (l, w) in p.layers.iter().enumerate() {
                let at = 3 + 6 * l;
                assert_eq!(Some(&AP(w.wo)), c[at + 1].args.first());
                assert_eq!(Some(&AP(w.wd)), c[at + 4].args.first());
                assert_eq!(AZ(w.base), c[at].args[8]);
            }
            let rn = &c[p.last].args;
            assert_eq!(AP(p.args.x_out), rn[0]);
            assert_eq!(AP(p.args.ffn_out), rn[1]);
            let o = &p.out;
            assert_eq!(
                [o.sum, o.norm, o.f32, o.q, o.d].map(AP),
                [rn[4], rn[5], rn[6], rn[9], rn[10]]
            );
        }
    }

    /// `chain(n)` with layer 0's rms_norm and mmv3_fast1_3 as the one launch
    /// `scale_norm_mmv3_fast1_3` (no scale) makes of them.
    fn chain_layer0_fused(n: usize) -> Vec<Call> {
        let mut c = chain(n);
        let (rn, m3) = (c[1].args.clone(), c[2].args.clone());
        let fused = call(
            "scale_norm_mmv3_fast1_3",
            vec![
                rn[0],
                AP(0),
                AP(0),
                AP(0),
                AP(0),
                rn[1],
                rn[2],
                AI(576),
                rn[4],
                AI(256),
                rn[5],
                rn[6],
                m3[0],
                m3[1],
                m3[2],
                m3[5],
                m3[6],
                m3[7],
                AI(576),
                AI(192),
                AI(192),
                AF(1.0),
            ],
        );
        c.splice(1..3, [fused]);
        c
    }

    #[test]
    fn a_chain_whose_layer_0_norm_is_inside_its_q_k_v_is_planned_the_same() {
        for n in [1, 2, 30] {
            let (two, one) = (chain(n), chain_layer0_fused(n));
            let (a, b) = (
                plan(&two).expect("two launches"),
                plan(&one).expect("one launch"),
            );
            assert_eq!((b.first, b.last), (1, 1 + 6 * n), "{n} layers");
            assert_eq!(a.layers, b.layers);
            assert_eq!(a.args, b.args);
            assert_eq!(a.out, b.out);
        }
        // A scaled row (Gemma's embedding scale), a residual sum, another row or block size.
        let good = chain_layer0_fused(2);
        for (j, bad, why) in [
            (21, AF(24.0), "shapes"),
            (4, AP(0x77), "argument 4"),
            (1, AP(0x78), "argument 1"),
            (9, AI(512), "shapes"),
            (10, AP(0), "quantize"),
        ] {
            let mut c = good.clone();
            c[1].args[j] = bad;
            let e = plan(&c).unwrap_err();
            assert!(e.contains(why), "argument {j}: {e}");
        }
    }

    #[test]
    fn anything_else_keeps_the_captured_kernels() {
        let good = chain(3);
        // A kernel the cluster does not run (another weight type, another head size).
        let mut c = good.clone();
        c[4].name = "mmv_fast1_2".into();
        assert!(plan(&c).is_err());
        // A tap listening (the scores buffer given).
        let mut c = good.clone();
        c[3].args[6] = AP(0x99);
        assert!(plan(&c).unwrap_err().contains("argument 6"));
        // A sliding window.
        let mut c = good.clone();
        c[9].args[12] = AI(4096);
        assert!(plan(&c).is_err());
        // Broken dataflow: o reads another quantization.
        let mut c = good.clone();
        c[4].args[1] = AP(0x42);
        assert!(plan(&c).unwrap_err().contains("o does not read"));
        // Another activation (GELU), another rope (NeoX's halves).
        let mut c = good.clone();
        c[5].args[18] = AI(1);
        assert!(plan(&c).unwrap_err().contains("activation"));
        let mut c = good.clone();
        c[3].args[29] = AI(1);
        assert!(plan(&c).unwrap_err().contains("rope"));
        // Another shape.
        let mut c = good.clone();
        c[5].args[17] = AI(2048);
        assert!(plan(&c).is_err());
        // Layers that read different caches.
        let mut c = good.clone();
        c[9].args[1] = AP(0x77);
        assert!(plan(&c).unwrap_err().contains("differ"));
        // More layers than the kernel's table holds.
        assert!(plan(&chain(MAX_LAYERS + 1))
            .unwrap_err()
            .contains("more than"));
        // An output norm the kernel does not run as residual_norm does: a post norm, another
        // block size (another reduction), no quantization for the head.
        let last = good.len() - 2;
        let mut c = good.clone();
        c[last].args[2] = AP(0x55);
        assert!(plan(&c).unwrap_err().contains("output norm's shape"));
        let mut c = good.clone();
        c[last].block = 512;
        assert!(plan(&c).unwrap_err().contains("output norm's shape"));
        let mut c = good.clone();
        c[last].args[9] = AP(0);
        assert!(plan(&c).unwrap_err().contains("does not quantize"));
        // A chain without its output norm.
        let mut c = good;
        c.truncate(c.len() - 2);
        assert!(plan(&c).is_err());
    }

    /// The parameter kinds of a kernel as kernels.cu declares it: the list after `marker`, up to
    /// its closing parenthesis, with the two argument macros expanded.
    pub(crate) fn declared(marker: &str) -> Vec<Kind> {
        let src = crate::KERNEL_SOURCE;
        let macro_body = |name: &str| -> String {
            let at = src
                .find(&format!("#define {name}"))
                .unwrap_or_else(|| panic!("{name}"));
            let body = &src[at + name.len() + 8..];
            // the definition runs over lines ending in a backslash
            let mut out = String::new();
            for line in body.lines() {
                out.push_str(line.trim_end_matches('\\'));
                if !line.trim_end().ends_with('\\') {
                    break;
                }
            }
            out
        };
        let at = src.find(marker).unwrap_or_else(|| panic!("{marker}")) + marker.len();
        let end = at + src[at..].find(')').expect("a parameter list");
        let list = src[at..end]
            .replace('\\', " ")
            .replace("NORM_MMV3_ARGS", &macro_body("NORM_MMV3_ARGS"))
            .replace("NORM_IN_ARGS", &macro_body("NORM_IN_ARGS"));
        list.split(',')
            .map(|p| {
                let p = p.split_whitespace().collect::<Vec<_>>().join(" ");
                if p.contains('*') {
                    Kind::P
                } else if p.starts_with("int ") {
                    Kind::I
                } else if p.starts_with("float ") {
                    Kind::F
                } else if p.starts_with("double ") {
                    Kind::D
                } else if p.starts_with("size_t ") {
                    Kind::Z
                } else {
                    panic!("{marker}: parameter `{p}`")
                }
            })
            .collect()
    }

    #[test]
    fn the_signatures_are_the_kernels_declarations() {
        for (name, marker) in [
            ("embed_rows", "__global__ void embed_rows("),
            ("rms_norm", "__launch_bounds__(1024) rms_norm("),
            ("residual_norm", "__launch_bounds__(1024) residual_norm("),
            ("quantize_q8_32", "__global__ void quantize_q8_32("),
            ("norm_mmv3_fast1_3", "norm_mmv3_fast1_##TY("),
            (
                "scale_norm_mmv3_fast1_3",
                "__launch_bounds__(NORM_FUSED_THREADS) NAME(",
            ),
            ("norm_gate_up_fast1_3", "norm_gate_up_fast1_##TY("),
            ("mmv_fast1_3", "mmv_##NAME##_##TY("),
            ("mmv3_fast1_3", "mmv3_##NAME##_##TY("),
            ("attention_decode_rope_64", "attention_decode_rope_##D("),
        ] {
            let want = signature(name).unwrap_or_else(|| panic!("{name}"));
            assert_eq!(declared(marker), want, "{name}");
        }
    }

    #[test]
    fn the_argument_structs_have_the_kernels_layouts() {
        assert_eq!(std::mem::size_of::<ClusterLayer>(), 88);
        assert_eq!(std::mem::size_of::<ClusterArgs>(), 112);
        assert_eq!(std::mem::offset_of!(ClusterArgs, cgelu), 32);
        assert_eq!(std::mem::offset_of!(ClusterArgs, kc), 40);
        assert_eq!(std::mem::offset_of!(ClusterArgs, ffn_out), 104);
        assert_eq!(std::mem::size_of::<ClusterOut>(), 40);
        // The kernel's table holds the layers and the output norm's record after them.
        assert!(crate::KERNEL_SOURCE.contains("layers[CL_MAX_LAYERS + 1];"));
        // The slots and vectors the kernel declares (kernels.cu CL_*), read from the source.
        let src = crate::KERNEL_SOURCE;
        assert!(src.contains("#define CL_D 576") && src.contains("#define CL_F 1536"));
        assert!(src.contains(&format!("#define CL_MAX_LAYERS {MAX_LAYERS}")));
        assert_eq!(SLOT_BYTES, 144_288);
    }

    /// The value of kernels.cu's `#define CL_<name>`, its expression evaluated (integers,
    /// other CL_ macros, + - * / and parentheses, as the preprocessor and C would).
    fn cl_macro(name: &str) -> i64 {
        let key = format!("#define CL_{name} ");
        let line = crate::KERNEL_SOURCE
            .lines()
            .find(|l| l.starts_with(&key))
            .unwrap_or_else(|| panic!("kernels.cu has no {key}"));
        let toks: Vec<String> = {
            let mut t = Vec::new();
            let mut cur = String::new();
            for c in line[key.len()..].chars() {
                if c.is_ascii_alphanumeric() || c == '_' {
                    cur.push(c);
                } else {
                    if !cur.is_empty() {
                        t.push(std::mem::take(&mut cur));
                    }
                    if "+-*/()".contains(c) {
                        t.push(c.to_string());
                    } else {
                        assert!(c.is_whitespace(), "CL_{name}: `{c}`");
                    }
                }
            }
            if !cur.is_empty() {
                t.push(cur);
            }
            t
        };
        // sum := product (('+' | '-') product)*; product := atom (('*' | '/') atom)*
        fn atom(t: &[String], i: &mut usize) -> i64 {
            let tok = &t[*i];
            *i += 1;
            if tok == "(" {
                let v = sum(t, i);
                assert_eq!(t[*i], ")");
                *i += 1;
                v
            } else if let Some(m) = tok.strip_prefix("CL_") {
                cl_macro(m)
            } else {
                tok.parse().unwrap_or_else(|_| panic!("token `{tok}`"))
            }
        }
        fn product(t: &[String], i: &mut usize) -> i64 {
            let mut v = atom(t, i);
            while *i < t.len() && (t[*i] == "*" || t[*i] == "/") {
                let op = t[*i].clone();
                *i += 1;
                let r = atom(t, i);
                v = if op == "*" { v * r } else { v / r };
            }
            v
        }
        fn sum(t: &[String], i: &mut usize) -> i64 {
            let mut v = product(t, i);
            while *i < t.len() && (t[*i] == "+" || t[*i] == "-") {
                let op = t[*i].clone();
                *i += 1;
                let r = product(t, i);
                v = if op == "+" { v + r } else { v - r };
            }
            v
        }
        let mut i = 0;
        let v = sum(&toks, &mut i);
        assert_eq!(i, toks.len(), "CL_{name}: trailing tokens");
        v
    }

    #[test]
    fn the_host_gives_the_kernel_the_shared_memory_it_declares() {
        // The kernel traps when launched with less than its slots and vectors need, and the
        // host sizes the launch from these constants: each is held to the kernel's macro.
        assert_eq!(cl_macro("SLOT_BYTES"), i64::from(SLOT_BYTES));
        assert_eq!(cl_macro("D"), i64::from(D));
        assert_eq!(cl_macro("F"), i64::from(FFN));
        assert_eq!(cl_macro("HD"), i64::from(HEAD_DIM));
        assert_eq!(cl_macro("NH"), i64::from(N_HEADS));
        assert_eq!(cl_macro("NKV"), i64::from(N_KV_HEADS));
        assert_eq!(cl_macro("CS"), i64::from(BLOCKS));
        assert_eq!(cl_macro("THREADS"), i64::from(THREADS));
        assert_eq!(cl_macro("MAX_LAYERS"), MAX_LAYERS as i64);
        assert_eq!(VEC_BYTES % 1024, 0);
        let vecs = format!(
            "static_assert(sizeof(ClusterVecs) <= {} * 1024,",
            VEC_BYTES / 1024
        );
        assert!(crate::KERNEL_SOURCE.contains(&vecs), "kernels.cu: {vecs}");
        // the evaluator itself: precedence, parentheses and integer division as C's
        assert_eq!(
            cl_macro("OFF3"),
            cl_macro("S0") + cl_macro("S1") + cl_macro("S2")
        );
        assert_eq!(cl_macro("RB_D"), 576 / 32 * 20);
    }
}
