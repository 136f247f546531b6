//! Step graphs: a captured forward step, its kernel-to-kernel edges made programmatic.
//!
//! A decode step of a small model is a chain of a few hundred short kernels, and the GPU
//! spends much of the step between them: one kernel's last blocks drain, its writes are
//! flushed, and only then is the next one launched and its blocks scheduled. With a
//! programmatic edge (Hopper's programmatic dependent launch) the next kernel is launched as
//! soon as every block of the one before it is running, and its blocks wait on the device, at
//! `griddepcontrol.wait`, for that kernel to complete and its writes to become visible.
//!
//! Why this keeps every result bitwise the same: each of our kernels executes that wait before
//! its first global memory access (`GRID_ENTER` in kernels.cu), so no kernel reads or writes
//! anything earlier than it would have under the plain edge; only its launch and the
//! scheduling of its blocks overlap the kernel before it. An edge is made programmatic only
//! when its consumer is one of our kernels (a kernel of our module): a library kernel (cuBLAS)
//! does not wait, so the edges into it stay plain. Memory copies and sets keep plain edges too.

use std::sync::Arc;

use cudarc::driver::{result, sys, CudaSlice, CudaStream, DevicePtr, DriverError};

use crate::cluster;

/// An instantiated step graph that owns its graph and executable.
pub(crate) struct StepGraph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    stream: Arc<CudaStream>,
    /// Edges made programmatic (for `LOCKSTEP_CUDA_STATS`).
    pub(crate) programmatic_edges: usize,
    /// With the cluster decode step: its layer table, which the graph's kernel reads, and the
    /// layers it runs.
    cluster: Option<(CudaSlice<u64>, usize)>,
    /// With the LM head as `mmv_head2r` ([`head_rewrite`]): where it can also write the logits
    /// on the host.
    head: Option<HostHead>,
    /// With the embedding as `embed_rows_gated` ([`gate_rewrite`]): the gate its token comes
    /// through.
    gate: Option<Gate>,
    /// O projections whose weights load before their grid wait ([`preload_rewrite`]).
    pub(crate) preloaded: usize,
}

/// A one-token step graph's gate (kernels.cu `embed_rows_gated`): the word in mapped
/// page-locked memory the embedding polls for its launch's ticket and token, the word it
/// answers with the token it used, and the launches so far (the device counts them too).
/// A launch made before its token is known ([`StepGraph::prelaunch`]) stays `pending` until
/// [`StepGraph::open`] or [`StepGraph::cancel`] writes its gate.
struct Gate {
    /// The two mapped words, owned here (the device and `gate_ptr` / `ack_ptr` use them).
    _gate: cudarc::driver::PinnedHostSlice<u64>,
    _ack: cudarc::driver::PinnedHostSlice<u64>,
    /// The host's addresses of `gate` and `ack`, taken once (their accessors synchronize).
    gate_ptr: *mut u64,
    ack_ptr: *const u64,
    /// Device words: the launches counted, and the head's skip flag.
    _count: CudaSlice<u32>,
    _skip: CudaSlice<u32>,
    tickets: Tickets,
}

/// The host's count of a gated graph's launches, which the device keeps too (kernels.cu
/// `embed_rows_gated`: launch k waits for ticket k), and the launch made ahead that waits at
/// the gate, if any. A launch that failed took no ticket (the device never ran it).
#[derive(Debug, Default)]
struct Tickets {
    launches: std::cell::Cell<u32>,
    pending: std::cell::Cell<Option<u32>>,
}

impl Tickets {
    /// The next launch's ticket.
    fn next(&self) -> u32 {
        self.launches.get().wrapping_add(1)
    }

    /// Launch `ticket` was made; `ahead`: before its token was known (it waits at the gate).
    fn launched(&self, ticket: u32, ahead: bool) {
        self.launches.set(ticket);
        if ahead {
            self.pending.set(Some(ticket));
        }
    }

    /// Whether a launch may be made ahead (none waits at the gate).
    fn can_launch_ahead(&self) -> bool {
        self.pending.get().is_none()
    }

    /// The launch waiting at the gate, no longer waiting (its gate is about to be written).
    fn release(&self) -> Option<u32> {
        self.pending.take()
    }
}

/// What the gate holds to cancel a launch: a token no table has (kernels.cu treats it as a
/// timeout: token 0, the host's logits untouched).
const GATE_CANCEL: u32 = u32::MAX;

/// A gate word: the launch's ticket and its token.
pub(crate) fn gate_word(ticket: u32, token: u32) -> u64 {
    (u64::from(ticket) << 32) | u64::from(token)
}

/// What the embedding answers for a launch that ran with `token`, or for one that timed out or
/// was cancelled (`None`).
pub(crate) fn ack_word(ticket: u32, token: Option<u32>) -> u64 {
    gate_word(ticket, token.unwrap_or(GATE_CANCEL))
}

/// A replayed step's LM head that can write its rows into mapped page-locked memory as it
/// computes them (kernels.cu `mmv_head2r_<id>`), so a step whose caller wants the logits on the
/// host needs no copy after the graph.
struct HostHead {
    node: sys::CUgraphNode,
    /// The node's launch, its arguments but the last (`yh`) as captured.
    params: sys::CUDA_KERNEL_NODE_PARAMS,
    args: [u64; 4],
    ints: [i32; 3],
    host: cudarc::driver::PinnedHostSlice<f32>,
    /// The device's address of `host`.
    host_dev: u64,
    /// Whether the executable graph's head writes `host` now (`yh` given).
    writes: std::cell::Cell<bool>,
    /// The gate's skip flag (device address), or 0 without a gate.
    skip: u64,
}

// SAFETY: a graph must not be used from two threads at once; it is reachable only through the
// backend's `RefCell` (the backend is not `Sync`), so every use is from the one thread that
// owns the backend at the time, and `launch` binds the context to that thread.
unsafe impl Send for StepGraph {}

impl Drop for StepGraph {
    fn drop(&mut self) {
        // A launch of a gated graph reads `gate` and writes `ack`, which go with this value: a
        // launch waiting at its gate is released, and every launch finishes first.
        if self.gate.is_some() {
            self.cancel();
            let _ = self.stream.synchronize();
        }
        // SAFETY: both handles were created by `end_capture` and are destroyed once, here;
        // errors at teardown have nowhere to go.
        unsafe {
            let _ = result::graph::exec_destroy(self.exec);
            let _ = result::graph::destroy(self.graph);
        }
    }
}

/// Whether step graphs use programmatic edges (`LOCKSTEP_CUDA_PDL=0` turns them off, for
/// comparisons).
pub(crate) fn pdl_enabled() -> bool {
    std::env::var("LOCKSTEP_CUDA_PDL").map_or(true, |v| v != "0")
}

impl StepGraph {
    /// Ends the capture on `stream` and instantiates it. With `cluster` (the cluster decode
    /// step's kernel), a captured one-row decode step that [`cluster::plan`] accepts has its
    /// layers' kernels replaced by that kernel. With `ours` (the module our kernels live in),
    /// every kernel-to-kernel edge into one of our kernels becomes programmatic. The o
    /// projection after a decode attention loads its weights before its grid wait
    /// ([`preload_rewrite`]) unless `LOCKSTEP_CUDA_O_PRELOAD=0`.
    /// `Ok(None)`: the capture recorded nothing.
    pub(crate) fn end_capture(
        stream: &Arc<CudaStream>,
        ours: Option<sys::CUmodule>,
        cluster: Option<sys::CUfunction>,
        head: Option<HeadOf>,
        gate: Option<GateOf>,
    ) -> Result<Option<StepGraph>, DriverError> {
        stream.context().bind_to_thread()?;
        // SAFETY: the stream is valid and capturing (the caller began the capture).
        let graph = unsafe { result::stream::end_capture(stream.cu_stream()) }?;
        if graph.is_null() {
            return Ok(None);
        }
        // A step's value, or on its error the graph destroyed (once: every error returns).
        let or_destroy = |e: DriverError| {
            // SAFETY: `graph` is the graph just captured, destroyed on this error path only.
            let _ = unsafe { result::graph::destroy(graph) };
            e
        };
        // SAFETY (the five rewrites): `graph` is the valid graph just captured, not yet
        // instantiated.
        let cluster = match cluster {
            Some(f) => unsafe { cluster_rewrite(graph, f, stream) }.map_err(or_destroy)?,
            None => None,
        };
        let preloaded = if crate::knobs::o_preload_knob() {
            unsafe { preload_rewrite(graph) }.map_err(or_destroy)?
        } else {
            0
        };
        let gate = match gate {
            Some(g) => unsafe { gate_rewrite(graph, g, stream) }.map_err(or_destroy)?,
            None => None,
        };
        let skip = gate.as_ref().map_or(0, |g| g._skip.device_ptr(stream).0);
        let head = match head {
            Some(h) => unsafe { head_rewrite(graph, h, skip, stream) }.map_err(or_destroy)?,
            None => None,
        };
        let edges = match ours {
            Some(m) => unsafe { make_programmatic(graph, m) }.map_err(or_destroy)?,
            None => 0,
        };
        // SAFETY: the valid graph, rewritten, not yet instantiated.
        unsafe { dot_print(graph) };
        // SAFETY: a valid graph; flags 0.
        let exec =
            match unsafe { result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) } {
                Ok(x) => x,
                Err(e) => {
                    // SAFETY: as above.
                    let _ = unsafe { result::graph::destroy(graph) };
                    return Err(e);
                }
            };
        Ok(Some(StepGraph {
            graph,
            exec,
            stream: stream.clone(),
            programmatic_edges: edges,
            cluster,
            head,
            gate,
            preloaded,
        }))
    }

    /// Whether this graph's embedding takes its token through a gate ([`gate_rewrite`]): every
    /// launch then goes through [`launch_with`](Self::launch_with) or
    /// [`prelaunch`](Self::prelaunch).
    pub(crate) fn gated(&self) -> bool {
        self.gate.is_some()
    }

    /// Writes the gate word (a plain store to the mapped page; the device polls it).
    fn write_gate(g: &Gate, word: u64) {
        // SAFETY: `gate_ptr` is the host address of `gate`, a live mapped page-locked
        // allocation of one u64 owned by `g`; a volatile store, so it is made now and once.
        unsafe { std::ptr::write_volatile(g.gate_ptr, word) };
    }

    /// Launches a gated graph with its token already at the gate; returns the launch's
    /// ticket. An ungated graph is launched as it is (ticket 0).
    pub(crate) fn launch_with(&self, token: u32) -> Result<u32, DriverError> {
        let Some(g) = &self.gate else {
            self.launch()?;
            return Ok(0);
        };
        let ticket = g.tickets.next();
        Self::write_gate(g, gate_word(ticket, token));
        self.launch()?;
        g.tickets.launched(ticket, false);
        Ok(ticket)
    }

    /// Launches a gated graph before its token is known: the launch waits at its gate until
    /// [`open`](Self::open) or [`cancel`](Self::cancel) (or kernels.cu's timeout). `Ok(false)`:
    /// no gate, or a launch already pending; nothing launched.
    pub(crate) fn prelaunch(&self) -> Result<bool, DriverError> {
        let Some(g) = self.gate.as_ref().filter(|g| g.tickets.can_launch_ahead()) else {
            return Ok(false);
        };
        let ticket = g.tickets.next();
        self.launch()?;
        g.tickets.launched(ticket, true);
        Ok(true)
    }

    /// Releases the pending launch with `token`; returns its ticket (`None`: none pending).
    pub(crate) fn open(&self, token: u32) -> Option<u32> {
        let g = self.gate.as_ref()?;
        let ticket = g.tickets.release()?;
        Self::write_gate(g, gate_word(ticket, token));
        Some(ticket)
    }

    /// Releases the pending launch as cancelled: it runs on token 0, its K/V into the slot
    /// guessed for it, the host's logits untouched. Whether one was pending.
    pub(crate) fn cancel(&self) -> bool {
        let Some(g) = &self.gate else {
            return false;
        };
        let Some(ticket) = g.tickets.release() else {
            return false;
        };
        Self::write_gate(g, gate_word(ticket, GATE_CANCEL));
        true
    }

    /// Whether launch `ticket` (finished) ran with `token`: its embedding's answer.
    pub(crate) fn ran_with(&self, ticket: u32, token: u32) -> bool {
        let Some(g) = &self.gate else {
            return true;
        };
        // SAFETY: `ack_ptr` is the host address of `ack`, a live mapped page-locked allocation
        // of one u64 owned by `g`, written by the device; the launch has finished (the caller
        // synchronized), so its store is visible; a volatile load.
        let ack = unsafe { std::ptr::read_volatile(g.ack_ptr) };
        ack == ack_word(ticket, Some(token))
    }

    /// Whether this graph's LM head writes the logits on the host as well as on the device
    /// ([`head_rewrite`]).
    pub(crate) fn has_host_logits(&self) -> bool {
        self.head.is_some()
    }

    /// Makes the next launches' LM head write the logits into page-locked memory (`on`) or
    /// not; a driver call only when that changes. `Ok(false)`: this graph's head cannot.
    pub(crate) fn host_logits(&self, on: bool) -> Result<bool, DriverError> {
        let Some(h) = &self.head else {
            return Ok(false);
        };
        if h.writes.get() != on {
            let mut args = h.args;
            let mut ints = h.ints;
            let mut yh: u64 = if on { h.host_dev } else { 0 };
            let mut skip = h.skip;
            let mut argv = head_argv(&mut args, &mut ints, &mut yh, &mut skip);
            let mut p = h.params;
            p.kernelParams = argv.as_mut_ptr();
            p.extra = std::ptr::null_mut();
            self.stream.context().bind_to_thread()?;
            // SAFETY: `exec` was instantiated from `graph`, of which `node` is the head's kernel
            // node; the parameters are its own launch with the nine arguments of
            // mmv_head2r's signature, each pointing at a live value the driver copies during
            // the call; `yh` is null or `host`'s device address, `m` floats (the node's rows).
            unsafe { sys::cuGraphExecKernelNodeSetParams_v2(self.exec, h.node, &p) }.result()?;
            h.writes.set(on);
        }
        Ok(true)
    }

    /// The logits the last launch wrote on the host (valid once it has finished, with
    /// [`host_logits`](Self::host_logits) on).
    pub(crate) fn host_rows(&self) -> Option<&[f32]> {
        let h = self.head.as_ref().filter(|h| h.writes.get())?;
        h.host.as_slice().ok()
    }

    /// The layers the cluster decode step runs in this graph (0: none).
    pub(crate) fn cluster_layers(&self) -> usize {
        self.cluster.as_ref().map_or(0, |c| c.1)
    }

    pub(crate) fn launch(&self) -> Result<(), DriverError> {
        self.stream.context().bind_to_thread()?;
        // SAFETY: a valid executable graph and stream, both owned for as long as `self` lives.
        unsafe { result::graph::launch(self.exec, self.stream.cu_stream()) }
    }
}

/// The module a kernel node's function belongs to, if the node is a kernel launched through
/// a function handle (library kernels launched by the runtime may carry none).
///
/// # Safety
/// `node` must be a valid node of a live graph.
unsafe fn kernel_module(node: sys::CUgraphNode) -> Result<Option<sys::CUmodule>, DriverError> {
    let mut ty = std::mem::MaybeUninit::<sys::CUgraphNodeType>::uninit();
    unsafe { sys::cuGraphNodeGetType(node, ty.as_mut_ptr()) }.result()?;
    // SAFETY: initialized by the successful call above.
    if unsafe { ty.assume_init() } != sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL {
        return Ok(None);
    }
    // SAFETY: plain-data parameters, zero is a valid bit pattern for every field; the driver
    // fills them for a kernel node.
    let mut p: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
    unsafe { sys::cuGraphKernelNodeGetParams_v2(node, &mut p) }.result()?;
    if p.func.is_null() {
        return Ok(None);
    }
    let mut m = std::mem::MaybeUninit::<sys::CUmodule>::uninit();
    if unsafe { sys::cuFuncGetModule(m.as_mut_ptr(), p.func) }
        .result()
        .is_err()
    {
        return Ok(None);
    }
    // SAFETY: initialized by the successful call above.
    Ok(Some(unsafe { m.assume_init() }))
}

/// `LOCKSTEP_CUDA_GRAPH_DOT=PREFIX` (a diagnostic): each step graph, as it will be
/// instantiated, written by the driver's debug printer (nodes with their launch parameters,
/// edges with their ports) to `PREFIX.<n>.dot`, n counting the graphs of the process.
///
/// # Safety
/// `graph` must be a valid graph not being used elsewhere.
unsafe fn dot_print(graph: sys::CUgraph) {
    static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let Ok(prefix) = std::env::var("LOCKSTEP_CUDA_GRAPH_DOT") else {
        return;
    };
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let Ok(path) = std::ffi::CString::new(format!("{prefix}.{n}.dot")) else {
        return;
    };
    // SAFETY: a valid graph (the caller's) and a NUL-terminated path; flag 1 is
    // CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE. A failure only means no file.
    let _ = unsafe { sys::cuGraphDebugDotPrint(graph, path.as_ptr(), 1) };
}

/// Turns the plain edges from a kernel node into a kernel of `ours` into programmatic ones;
/// returns how many.
///
/// # Safety
/// `graph` must be a valid graph not being used elsewhere.
unsafe fn make_programmatic(
    graph: sys::CUgraph,
    ours: sys::CUmodule,
) -> Result<usize, DriverError> {
    // SAFETY: the caller's `graph` is valid.
    let (from, to, data) = unsafe { graph_edges(graph) }?;
    let n = from.len();
    if n == 0 {
        return Ok(0);
    }
    let programmatic = sys::CUgraphEdgeData {
        from_port: sys::CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC as u8,
        to_port: 0,
        type_: sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC as u8,
        reserved: [0; 5],
    };
    let mut made = 0;
    for i in 0..n {
        let plain = data[i].type_
            == sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_DEFAULT as u8
            && data[i].from_port == 0;
        if !plain {
            continue;
        }
        // SAFETY: nodes of `graph`, as the driver listed them.
        let (Some(_), Some(m)) = (unsafe { kernel_module(from[i]) }?, unsafe {
            kernel_module(to[i])
        }?) else {
            continue;
        };
        if m != ours {
            continue;
        }
        unsafe { sys::cuGraphRemoveDependencies_v2(graph, &from[i], &to[i], &data[i], 1) }
            .result()?;
        unsafe { sys::cuGraphAddDependencies_v2(graph, &from[i], &to[i], &programmatic, 1) }
            .result()?;
        made += 1;
    }
    Ok(made)
}

impl StepGraph {
    /// The graph's kernels in the order they run (the captured step is a chain, sorted here by
    /// its edges): each one's function name and block count, for the step timeline.
    pub(crate) fn kernel_chain(&self) -> Result<Vec<crate::timeline::KernelNode>, DriverError> {
        // SAFETY: `self.graph` is the valid graph this value owns.
        let chain = unsafe { chain_nodes(self.graph) }?;
        let mut out = Vec::new();
        for node in chain {
            // SAFETY: a node of `self.graph`, as the driver listed it.
            if let Some(k) = unsafe { kernel_node(node) }? {
                out.push(k);
            }
        }
        Ok(out)
    }
}

type Edges = (
    Vec<sys::CUgraphNode>,
    Vec<sys::CUgraphNode>,
    Vec<sys::CUgraphEdgeData>,
);

/// A graph's edges: (from, to, edge data), three lists of one length.
///
/// # Safety
/// `graph` must be a valid graph.
unsafe fn graph_edges(graph: sys::CUgraph) -> Result<Edges, DriverError> {
    let mut n = 0usize;
    unsafe {
        sys::cuGraphGetEdges_v2(
            graph,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut n,
        )
    }
    .result()?;
    let mut from: Vec<sys::CUgraphNode> = vec![std::ptr::null_mut(); n];
    let mut to: Vec<sys::CUgraphNode> = vec![std::ptr::null_mut(); n];
    // SAFETY: zero is a valid edge datum (the default edge).
    let mut data: Vec<sys::CUgraphEdgeData> = vec![unsafe { std::mem::zeroed() }; n];
    if n > 0 {
        unsafe {
            sys::cuGraphGetEdges_v2(
                graph,
                from.as_mut_ptr(),
                to.as_mut_ptr(),
                data.as_mut_ptr(),
                &mut n,
            )
        }
        .result()?;
    }
    from.truncate(n);
    to.truncate(n);
    data.truncate(n);
    Ok((from, to, data))
}

/// A graph's nodes.
///
/// # Safety
/// `graph` must be a valid graph.
unsafe fn graph_nodes(graph: sys::CUgraph) -> Result<Vec<sys::CUgraphNode>, DriverError> {
    let mut n = 0usize;
    unsafe { sys::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut n) }.result()?;
    let mut nodes: Vec<sys::CUgraphNode> = vec![std::ptr::null_mut(); n];
    if n > 0 {
        unsafe { sys::cuGraphGetNodes(graph, nodes.as_mut_ptr(), &mut n) }.result()?;
    }
    nodes.truncate(n);
    Ok(nodes)
}

/// A captured step graph's nodes in the order they run (the capture is a chain, sorted here
/// by its edges).
///
/// # Safety
/// `graph` must be a valid graph.
unsafe fn chain_nodes(graph: sys::CUgraph) -> Result<Vec<sys::CUgraphNode>, DriverError> {
    // SAFETY: the caller's `graph` is valid.
    let nodes = unsafe { graph_nodes(graph) }?;
    let (from, to, _) = unsafe { graph_edges(graph) }?;
    let index: std::collections::HashMap<sys::CUgraphNode, usize> =
        nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (f, t) in from.iter().zip(&to) {
        if let (Some(&f), Some(&t)) = (index.get(f), index.get(t)) {
            preds[t].push(f);
        }
    }
    let order = crate::timeline::chain_order(nodes.len(), |i| preds[i].clone());
    Ok(order.into_iter().map(|i| nodes[i]).collect())
}

/// A kernel node's function name and block count; `None` for other nodes.
///
/// # Safety
/// `node` must be a valid node of a live graph.
unsafe fn kernel_node(
    node: sys::CUgraphNode,
) -> Result<Option<crate::timeline::KernelNode>, DriverError> {
    let mut ty = std::mem::MaybeUninit::<sys::CUgraphNodeType>::uninit();
    unsafe { sys::cuGraphNodeGetType(node, ty.as_mut_ptr()) }.result()?;
    // SAFETY: initialized by the successful call above.
    if unsafe { ty.assume_init() } != sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL {
        return Ok(None);
    }
    // SAFETY: plain-data parameters, zero is a valid bit pattern; the driver fills them.
    let mut p: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
    unsafe { sys::cuGraphKernelNodeGetParams_v2(node, &mut p) }.result()?;
    let mut name = String::from("(library kernel)");
    if !p.func.is_null() {
        let mut c: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: a valid function handle; the driver returns a string it owns, valid while the
        // function's module is loaded, copied at once.
        if unsafe { sys::cuFuncGetName(&mut c, p.func) }
            .result()
            .is_ok()
            && !c.is_null()
        {
            name = unsafe { std::ffi::CStr::from_ptr(c) }
                .to_string_lossy()
                .into_owned();
        }
    }
    Ok(Some(crate::timeline::KernelNode {
        name,
        blocks: p.gridDimX as u64 * p.gridDimY as u64 * p.gridDimZ as u64,
    }))
}

/// A kernel node's call as [`cluster::plan`] reads it: the function's name and, for the
/// kernels it knows, the argument values the launch passed.
///
/// # Safety
/// `node` must be a valid kernel node of a live graph.
unsafe fn kernel_call(node: sys::CUgraphNode) -> Result<cluster::Call, DriverError> {
    // SAFETY: plain-data parameters, zero is a valid bit pattern; the driver fills them.
    let mut p: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
    unsafe { sys::cuGraphKernelNodeGetParams_v2(node, &mut p) }.result()?;
    let mut name = String::new();
    if !p.func.is_null() {
        let mut c: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: a valid function handle; the name is copied at once.
        if unsafe { sys::cuFuncGetName(&mut c, p.func) }
            .result()
            .is_ok()
            && !c.is_null()
        {
            name = unsafe { std::ffi::CStr::from_ptr(c) }
                .to_string_lossy()
                .into_owned();
        }
    }
    let mut args = Vec::new();
    if let (Some(sig), false) = (cluster::signature(&name), p.kernelParams.is_null()) {
        for (i, kind) in sig.iter().enumerate() {
            // SAFETY: the node was launched with kernelParams, one pointer per argument of the
            // kernel's signature (ours, in kernels.cu's order), each to a value of its size.
            let at = unsafe { *p.kernelParams.add(i) };
            if at.is_null() {
                break;
            }
            args.push(unsafe {
                match kind {
                    cluster::Kind::P => cluster::Arg::P((at as *const u64).read_unaligned()),
                    cluster::Kind::Z => cluster::Arg::Z((at as *const u64).read_unaligned()),
                    cluster::Kind::I => cluster::Arg::I((at as *const i32).read_unaligned()),
                    cluster::Kind::F => cluster::Arg::F((at as *const f32).read_unaligned()),
                    cluster::Kind::D => cluster::Arg::D((at as *const f64).read_unaligned()),
                }
            });
        }
    }
    Ok(cluster::Call {
        name,
        args,
        block: p.blockDimX,
    })
}

/// The kernel `name` of the module `func` belongs to (the rewrites' replacement kernels live
/// beside the ones captured); `None`: the module has no such kernel.
///
/// # Safety
/// `func` must be a valid function handle of a loaded module.
unsafe fn sibling_kernel(
    func: sys::CUfunction,
    name: &std::ffi::CStr,
) -> Result<Option<sys::CUfunction>, DriverError> {
    let mut module = std::mem::MaybeUninit::<sys::CUmodule>::uninit();
    // SAFETY: the caller's valid function handle.
    unsafe { sys::cuFuncGetModule(module.as_mut_ptr(), func) }.result()?;
    let mut found = std::mem::MaybeUninit::<sys::CUfunction>::uninit();
    // SAFETY: the module, initialized by the call above; a module without the kernel answers
    // an error.
    if unsafe { sys::cuModuleGetFunction(found.as_mut_ptr(), module.assume_init(), name.as_ptr()) }
        .result()
        .is_err()
    {
        return Ok(None);
    }
    // SAFETY: initialized by the successful call above.
    Ok(Some(unsafe { found.assume_init() }))
}

/// `n` zeroed values of page-locked host memory mapped into the device's address space
/// (DEVICEMAP), and their device address.
fn mapped_host<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
    stream: &Arc<CudaStream>,
    n: usize,
) -> Result<(cudarc::driver::PinnedHostSlice<T>, u64), DriverError> {
    // SAFETY: page-locked memory of plain values; every byte is zeroed below before anyone
    // reads it (zero is a valid `T`).
    let mut host = unsafe {
        stream
            .context()
            .alloc_pinned_with_flags::<T>(n, sys::CU_MEMHOSTALLOC_DEVICEMAP)
    }?;
    let ptr = host.as_mut_ptr()?;
    // SAFETY: `ptr` holds `n` values of `T`, just allocated and not yet shared.
    unsafe { std::ptr::write_bytes(ptr, 0, n) };
    let mut dev: sys::CUdeviceptr = 0;
    // SAFETY: `host` is a live mapped allocation of this context.
    unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev, ptr.cast(), 0) }.result()?;
    Ok((host, dev))
}

/// `mmv_head2r`'s kernel parameters (W, xq, xd, y; n, k, m; yh, skip), pointing at the values
/// given, which must outlive the driver call that reads them.
fn head_argv(
    args: &mut [u64; 4],
    ints: &mut [i32; 3],
    yh: &mut u64,
    skip: &mut u64,
) -> [*mut std::ffi::c_void; 9] {
    let [a0, a1, a2, a3] = args;
    let [n, k, m] = ints;
    [
        (a0 as *mut u64).cast(),
        (a1 as *mut u64).cast(),
        (a2 as *mut u64).cast(),
        (a3 as *mut u64).cast(),
        (n as *mut i32).cast(),
        (k as *mut i32).cast(),
        (m as *mut i32).cast(),
        (yh as *mut u64).cast(),
        (skip as *mut u64).cast(),
    ]
}

/// A step's LM head for [`head_rewrite`]: the device buffer its logits go to and their count.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeadOf {
    pub logits: u64,
    pub len: usize,
}

/// Where the captured `graph` has the one-row LM head as `mmv_fast2r_<id>` writing `head`'s
/// logits (its fourth argument), makes it `mmv_head2r_<id>` (the same launch and arithmetic,
/// kernels.cu) and gives it a mapped page-locked buffer to write them to when asked
/// ([`StepGraph::host_logits`]); `None`: no such node (the graph unchanged).
///
/// # Safety
/// `graph` must be a valid graph not being used elsewhere.
unsafe fn head_rewrite(
    graph: sys::CUgraph,
    head: HeadOf,
    skip: u64,
    stream: &Arc<CudaStream>,
) -> Result<Option<HostHead>, DriverError> {
    // SAFETY: the caller's `graph` is valid.
    let nodes = unsafe { graph_nodes(graph) }?;
    for node in nodes {
        // SAFETY: a node of `graph`, as the driver listed it.
        let Some(k) = unsafe { kernel_node(node) }? else {
            continue;
        };
        let Some(id) = k.name.strip_prefix("mmv_fast2r_") else {
            continue;
        };
        // SAFETY: plain-data parameters, zero is a valid bit pattern; the driver fills them.
        let mut p: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
        unsafe { sys::cuGraphKernelNodeGetParams_v2(node, &mut p) }.result()?;
        if p.kernelParams.is_null() || p.blockDimX != crate::plan::FAST_THREADS || p.gridDimY != 1 {
            continue;
        }
        // mmv_fast2r's arguments: W, xq, xd, y (pointers), n, k, m (ints).
        // SAFETY: the node was launched with kernelParams, one pointer per argument of the
        // kernel's signature (kernels.cu FAST_TWO_ROWS), each to a value of its size.
        let arg = |i: usize| unsafe { *p.kernelParams.add(i) };
        let (args, ints) = unsafe {
            (
                [0, 1, 2, 3].map(|i| (arg(i) as *const u64).read_unaligned()),
                [4, 5, 6].map(|i| (arg(i) as *const i32).read_unaligned()),
            )
        };
        if args[3] != head.logits || ints[0] != 1 || usize::try_from(ints[2]).ok() != Some(head.len)
        {
            continue;
        }
        let name = std::ffi::CString::new(format!("mmv_head2r_{id}"))
            .map_err(|_| DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE))?;
        // SAFETY: the node's function handle, valid while the module is loaded.
        let Some(func) = (unsafe { sibling_kernel(p.func, &name) })? else {
            return Ok(None);
        };
        p.func = func;
        // The head writes all `len` values before the host reads any.
        let (host, host_dev) = mapped_host::<f32>(stream, head.len)?;
        let mut a = args;
        let mut n = ints;
        let mut yh: u64 = 0;
        let mut sk = skip;
        let mut argv = head_argv(&mut a, &mut n, &mut yh, &mut sk);
        let mut q = p;
        q.kernelParams = argv.as_mut_ptr();
        q.extra = std::ptr::null_mut();
        // SAFETY: a kernel node of `graph`; the new parameters are its launch with the nine
        // arguments of mmv_head2r (the driver copies them during the call); yh null; skip
        // null or the gate's device word.
        unsafe { sys::cuGraphKernelNodeSetParams_v2(node, &q) }.result()?;
        p.kernelParams = std::ptr::null_mut();
        return Ok(Some(HostHead {
            node,
            params: p,
            args,
            ints,
            host,
            host_dev,
            writes: std::cell::Cell::new(false),
            skip,
        }));
    }
    Ok(None)
}

/// Where the captured `graph` has a decode attention kernel followed by a one-row
/// `mmv_fast2r_12` or `mmv_fast1_12` of at most 64 units a row (the o projection), makes that
/// node `mmv_pre2r_12` or `mmv_pre1r_12` (kernels.cu: the same launch and arithmetic, every
/// weight unit loaded before its grid wait, while the attention runs). Returns the nodes
/// changed.
///
/// # Safety
/// `graph` must be a valid graph not being used elsewhere.
unsafe fn preload_rewrite(graph: sys::CUgraph) -> Result<usize, DriverError> {
    // SAFETY: the caller's `graph` is valid.
    let chain = unsafe { chain_nodes(graph) }?;
    let mut changed = 0;
    let mut prev = String::new();
    for node in chain {
        // SAFETY: a node of `graph`, as the driver listed it.
        let k = unsafe { kernel_node(node) }?;
        let name = k.map_or_else(String::new, |k| k.name);
        let before = std::mem::replace(&mut prev, name.clone());
        if crate::plan::o_preload_kernel(&before, &name, 1, 0).is_none() {
            continue;
        }
        // SAFETY: plain-data parameters, zero is a valid bit pattern; the driver fills them.
        let mut p: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
        unsafe { sys::cuGraphKernelNodeGetParams_v2(node, &mut p) }.result()?;
        if p.kernelParams.is_null() {
            continue;
        }
        // mmv_fast1's and mmv_fast2r's arguments: W, xq, xd, y (pointers), n, k, m (ints).
        // SAFETY: the node was launched with kernelParams, one pointer per argument of the
        // kernel's signature (kernels.cu FAST_KERNELS, FAST_TWO_ROWS), each to a value of its
        // size.
        let int = |i: usize| unsafe { (*p.kernelParams.add(i) as *const i32).read_unaligned() };
        let Some(pre) = crate::plan::o_preload_kernel(&before, &name, int(4), int(5)) else {
            continue;
        };
        let pre = std::ffi::CString::new(pre)
            .map_err(|_| DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE))?;
        // SAFETY: the node's function handle, valid while the module is loaded.
        let Some(func) = (unsafe { sibling_kernel(p.func, &pre) })? else {
            return Ok(changed);
        };
        p.func = func;
        // SAFETY: a kernel node of `graph`; the same launch with a kernel of the same
        // signature (the parameters as captured; the driver copies them).
        unsafe { sys::cuGraphKernelNodeSetParams_v2(node, &p) }.result()?;
        changed += 1;
    }
    Ok(changed)
}

/// A one-token step's embedding for [`gate_rewrite`]: the table's rows (the tokens it takes).
#[derive(Clone, Copy, Debug)]
pub(crate) struct GateOf {
    pub vocab: usize,
}

/// Where the captured `graph` embeds one token (`embed_rows`, one block), makes it
/// `embed_rows_gated` (kernels.cu: the same rows dequantized the same way, its token from a
/// gate in mapped page-locked memory) so the graph can be launched before its token is known;
/// `None`: no such node (the graph unchanged).
///
/// # Safety
/// `graph` must be a valid graph not being used elsewhere.
unsafe fn gate_rewrite(
    graph: sys::CUgraph,
    of: GateOf,
    stream: &Arc<CudaStream>,
) -> Result<Option<Gate>, DriverError> {
    let Ok(vocab) = i32::try_from(of.vocab) else {
        return Ok(None);
    };
    // SAFETY: the caller's `graph` is valid.
    let nodes = unsafe { graph_nodes(graph) }?;
    let mut found = None;
    for node in nodes {
        // SAFETY: a node of `graph`, as the driver listed it.
        let Some(k) = unsafe { kernel_node(node) }? else {
            continue;
        };
        if k.name == "embed_rows" && k.blocks == 1 {
            if found.is_some() {
                // Two embeddings: not a step this knows.
                return Ok(None);
            }
            found = Some(node);
        }
    }
    let Some(node) = found else {
        return Ok(None);
    };
    // SAFETY: plain-data parameters, zero is a valid bit pattern; the driver fills them.
    let mut p: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
    unsafe { sys::cuGraphKernelNodeGetParams_v2(node, &mut p) }.result()?;
    if p.kernelParams.is_null() {
        return Ok(None);
    }
    // embed_rows' arguments: table, ids, out (pointers), cols, ty, bs, ts (ints).
    // SAFETY: the node was launched with kernelParams, one pointer per argument of the
    // kernel's signature (kernels.cu embed_rows), each to a value of its size.
    let arg = |i: usize| unsafe { *p.kernelParams.add(i) };
    let (mut ptrs, mut ints) = unsafe {
        (
            [0, 1, 2].map(|i| (arg(i) as *const u64).read_unaligned()),
            [3, 4, 5, 6].map(|i| (arg(i) as *const i32).read_unaligned()),
        )
    };
    // SAFETY: the node's function handle, valid while the module is loaded.
    let Some(gated) = (unsafe { sibling_kernel(p.func, c"embed_rows_gated") })? else {
        return Ok(None);
    };
    // Zeroed: ticket 0 is never a launch's (the first is 1), a closed gate and no answer yet.
    // The host writes `gate` and reads `ack` only through volatile accesses.
    let (mut gate, mut gate_dev) = mapped_host::<u64>(stream, 1)?;
    let (ack, mut ack_dev) = mapped_host::<u64>(stream, 1)?;
    let gate_ptr = gate.as_mut_ptr()?;
    let ack_ptr = ack.as_ptr()?;
    let count = stream.alloc_zeros::<u32>(1)?;
    let skip = stream.alloc_zeros::<u32>(1)?;
    let (mut count_dev, mut skip_dev) = (count.device_ptr(stream).0, skip.device_ptr(stream).0);
    let mut vocab = vocab;
    let [p0, p1, p2] = &mut ptrs;
    let [i0, i1, i2, i3] = &mut ints;
    let mut argv: [*mut std::ffi::c_void; 12] = [
        (p0 as *mut u64).cast(),
        (p1 as *mut u64).cast(),
        (p2 as *mut u64).cast(),
        (i0 as *mut i32).cast(),
        (i1 as *mut i32).cast(),
        (i2 as *mut i32).cast(),
        (i3 as *mut i32).cast(),
        (&mut gate_dev as *mut u64).cast(),
        (&mut count_dev as *mut u64).cast(),
        (&mut ack_dev as *mut u64).cast(),
        (&mut skip_dev as *mut u64).cast(),
        (&mut vocab as *mut i32).cast(),
    ];
    let mut q = p;
    q.func = gated;
    q.kernelParams = argv.as_mut_ptr();
    q.extra = std::ptr::null_mut();
    // SAFETY: a kernel node of `graph`; the new parameters are its launch with the twelve
    // arguments of embed_rows_gated, each pointing at a live value the driver copies during
    // the call; the words they point to live as long as the returned gate (the graph's).
    unsafe { sys::cuGraphKernelNodeSetParams_v2(node, &q) }.result()?;
    Ok(Some(Gate {
        _gate: gate,
        _ack: ack,
        gate_ptr,
        ack_ptr,
        _count: count,
        _skip: skip,
        tickets: Tickets::default(),
    }))
}

/// Replaces the layers of a captured one-row decode step by one launch of the cluster decode
/// step (`func`, kernels.cu `decode_layers_cluster`) when [`cluster::plan`] accepts the chain;
/// returns the layer table the new node reads (uploaded on `stream`, before any launch of the
/// graph) and the layer count, or `None` (the graph unchanged).
///
/// # Safety
/// `graph` must be a valid graph not being used elsewhere.
unsafe fn cluster_rewrite(
    graph: sys::CUgraph,
    func: sys::CUfunction,
    stream: &Arc<CudaStream>,
) -> Result<Option<(CudaSlice<u64>, usize)>, DriverError> {
    // SAFETY: the caller's `graph` is valid.
    let chain = unsafe { chain_nodes(graph) }?;
    // Every node in chain order, as a call (other nodes by a name no kernel has, so a plan
    // never spans one).
    let mut calls = Vec::with_capacity(chain.len());
    for &node in &chain {
        let mut ty = std::mem::MaybeUninit::<sys::CUgraphNodeType>::uninit();
        // SAFETY: a node of `graph`, as the driver listed it.
        unsafe { sys::cuGraphNodeGetType(node, ty.as_mut_ptr()) }.result()?;
        // SAFETY: initialized by the successful call above.
        let call = if unsafe { ty.assume_init() } == sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL
        {
            // SAFETY: a kernel node of `graph`.
            unsafe { kernel_call(node) }?
        } else {
            cluster::Call {
                name: "(not a kernel)".into(),
                args: Vec::new(),
                block: 0,
            }
        };
        calls.push(call);
    }
    let Ok(plan) = cluster::plan(&calls) else {
        return Ok(None);
    };
    let (Some(&before), Some(&after)) = (
        plan.first.checked_sub(1).and_then(|i| chain.get(i)),
        chain.get(plan.last + 1),
    ) else {
        return Ok(None);
    };
    let words: Vec<u64> = plan
        .layers
        .iter()
        .flat_map(|l| {
            [
                l.wq,
                l.wk,
                l.wv,
                l.wo,
                l.wg,
                l.wu,
                l.wd,
                l.attn_norm,
                l.ffn_norm,
                l.cs,
                l.base,
            ]
        })
        .chain({
            // the output norm's record, in a layer's room (kernels.cu ClusterOut)
            let o = plan.out;
            [o.norm, o.sum, o.f32, o.q, o.d, 0, 0, 0, 0, 0, 0]
        })
        .collect();
    let table = stream.clone_htod(&words)?;
    let mut args = plan.args;
    args.layers = table.device_ptr(stream).0;
    let mut argv: [*mut std::ffi::c_void; 1] = [(&mut args as *mut cluster::ClusterArgs).cast()];
    // SAFETY: zero is a valid bit pattern for the parameters; the fields that matter are set.
    let mut kp: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
    kp.func = func;
    kp.gridDimX = cluster::BLOCKS;
    kp.gridDimY = 1;
    kp.gridDimZ = 1;
    kp.blockDimX = cluster::THREADS;
    kp.blockDimY = 1;
    kp.blockDimZ = 1;
    kp.sharedMemBytes = cluster::SMEM_BYTES;
    kp.kernelParams = argv.as_mut_ptr();
    let mut node: sys::CUgraphNode = std::ptr::null_mut();
    // SAFETY: `graph` and `before` are valid; the driver copies the parameters (the one
    // argument, `args`, lives until the call returns).
    unsafe { sys::cuGraphAddKernelNode_v2(&mut node, graph, &before, 1, &kp) }.result()?;
    // SAFETY: plain data; the cluster dimension is the one field the attribute reads.
    let mut v: sys::CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
    v.clusterDim.x = cluster::BLOCKS;
    v.clusterDim.y = 1;
    v.clusterDim.z = 1;
    unsafe {
        sys::cuGraphKernelNodeSetAttribute(
            node,
            sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
            &v,
        )
    }
    .result()?;
    for &n in &chain[plan.first..=plan.last] {
        // SAFETY: nodes of `graph`, each destroyed once (with its edges).
        unsafe { sys::cuGraphDestroyNode(n) }.result()?;
    }
    // SAFETY: zero is the default edge.
    let plain: sys::CUgraphEdgeData = unsafe { std::mem::zeroed() };
    unsafe { sys::cuGraphAddDependencies_v2(graph, &node, &after, &plain, 1) }.result()?;
    Ok(Some((table, plan.layers.len())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::tests::declared;
    use crate::cluster::Kind::{I, P};

    #[test]
    fn the_rewritten_kernels_take_the_arguments_the_host_builds() {
        // gate_rewrite: embed_rows' seven, then gate, count, ack, skip and the vocabulary.
        let embed = declared("__global__ void embed_rows(");
        assert_eq!(embed, [P, P, P, I, I, I, I]);
        let gated = declared("__global__ void embed_rows_gated(");
        assert_eq!(gated[..7], embed[..]);
        assert_eq!(gated[7..], [P, P, P, P, I]);
        // head_rewrite / head_argv: mmv_fast2r's seven, then yh and skip.
        let mut head = declared("mmv_head2r_##TY(");
        assert_eq!(head.len(), 9);
        let (mut args, mut ints, mut yh, mut skip) = ([0u64; 4], [0i32; 3], 0u64, 0u64);
        assert_eq!(
            head_argv(&mut args, &mut ints, &mut yh, &mut skip).len(),
            head.len()
        );
        head.truncate(7);
        assert_eq!(head, declared("mmv_fast2r_##TY("));
        // preload_rewrite: the kernels it swaps in take the arguments of those they replace.
        let pre = declared("mmv_pre##NR##r_##TY(");
        assert_eq!(pre, declared("mmv_fast2r_##TY("));
        assert_eq!(pre, declared("mmv_##NAME##_##TY("));
    }

    #[test]
    fn tickets_follow_the_devices_count_and_one_launch_waits_at_a_time() {
        let t = Tickets::default();
        // Launch 1 with its token at the gate: ticket 1, as the device counts it.
        assert_eq!(t.next(), 1);
        t.launched(1, false);
        assert!(t.can_launch_ahead());
        // A failed launch takes no ticket.
        assert_eq!(t.next(), 2);
        // Launch 2 made ahead: it waits, and no other may be made ahead.
        t.launched(t.next(), true);
        assert!(!t.can_launch_ahead());
        assert_eq!(t.next(), 3);
        // Released once (opened or cancelled), then nothing waits.
        assert_eq!(t.release(), Some(2));
        assert_eq!(t.release(), None);
        assert!(t.can_launch_ahead());
        // The count wraps as the device's u32 does.
        t.launched(u32::MAX, false);
        assert_eq!(t.next(), 0);
    }

    #[test]
    fn the_gate_words_are_the_kernels() {
        assert_eq!(gate_word(3, 17), (3 << 32) | 17);
        // kernels.cu answers a launch that did not take a token with 0xffffffff: the host's
        // cancel word, and what a timed-out launch leaves.
        assert_eq!(ack_word(3, None), (3 << 32) | 0xffff_ffff);
        assert_eq!(ack_word(3, None), gate_word(3, GATE_CANCEL));
        assert_eq!(ack_word(3, Some(17)), gate_word(3, 17));
        let src = crate::KERNEL_SOURCE;
        let body = &src[src.find("void embed_rows_gated(").unwrap_or(0)..];
        assert!(body.contains("(used ? token : 0xffffffffu)"));
        assert!(body.contains("token < (unsigned)vocab"));
    }
}
