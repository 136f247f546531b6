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

use cudarc::driver::{result, sys, CudaStream, DriverError};

/// An instantiated step graph that owns its graph and executable.
pub(crate) struct StepGraph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    stream: Arc<CudaStream>,
    /// Edges made programmatic (for `LOCKSTEP_CUDA_STATS`).
    pub(crate) programmatic_edges: usize,
}

// SAFETY: a graph must not be used from two threads at once; it is reachable only through the
// backend's `RefCell` (the backend is not `Sync`), so every use is from the one thread that
// owns the backend at the time, and `launch` binds the context to that thread.
unsafe impl Send for StepGraph {}

impl Drop for StepGraph {
    fn drop(&mut self) {
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
    /// Ends the capture on `stream` and instantiates it. With `ours` (the module our kernels
    /// live in), every kernel-to-kernel edge into one of our kernels becomes programmatic.
    /// `Ok(None)`: the capture recorded nothing.
    pub(crate) fn end_capture(
        stream: &Arc<CudaStream>,
        ours: Option<sys::CUmodule>,
    ) -> Result<Option<StepGraph>, DriverError> {
        stream.context().bind_to_thread()?;
        // SAFETY: the stream is valid and capturing (the caller began the capture).
        let graph = unsafe { result::stream::end_capture(stream.cu_stream()) }?;
        if graph.is_null() {
            return Ok(None);
        }
        let edges = match ours {
            // SAFETY: `graph` is the valid graph just captured, not yet instantiated.
            Some(m) => match unsafe { make_programmatic(graph, m) } {
                Ok(n) => n,
                Err(e) => {
                    // SAFETY: destroyed once, on this error path only.
                    let _ = unsafe { result::graph::destroy(graph) };
                    return Err(e);
                }
            },
            None => 0,
        };
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
        }))
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
        let nodes = unsafe { graph_nodes(self.graph) }?;
        // SAFETY: as above.
        let (from, to, _) = unsafe { graph_edges(self.graph) }?;
        let index: std::collections::HashMap<sys::CUgraphNode, usize> =
            nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
        let mut preds: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
        for (f, t) in from.iter().zip(&to) {
            if let (Some(&f), Some(&t)) = (index.get(f), index.get(t)) {
                preds[t].push(f);
            }
        }
        let order = crate::timeline::chain_order(nodes.len(), |i| preds[i].clone());
        let mut out = Vec::new();
        for i in order {
            // SAFETY: a node of `self.graph`, as the driver listed it.
            if let Some(k) = unsafe { kernel_node(nodes[i]) }? {
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
