//! The kernels: fatbins built by build.rs from kernels/*.cu (one per translation unit, compiled
//! in parallel), embedded in the library and each loaded as a module into each device's context;
//! kernel handles are looked up once into tables indexed by (algorithm, datatype, op), so
//! launching needs no string work.

use std::ffi::CString;

use cudarc::driver::sys as cu;

use super::context::Device;
use super::driver::check;
use crate::algo::group::PutGroupKinds;
use crate::algo::AllReduceAlgo;
use crate::error::{Error, Result};
use crate::types::{DataType, RedOp};

#[repr(C, align(64))]
struct Aligned<const N: usize>([u8; N]);

// FATBINS: each unit's fatbin, 64-byte aligned (the driver reads a fatbin's headers with
// aligned loads).
include!(concat!(env!("OUT_DIR"), "/oxccl_fatbins.rs"));

/// A kernel handle. CUfunction handles are immutable and usable from any thread.
#[derive(Clone, Copy)]
pub struct Kernel(pub cu::CUfunction);
// SAFETY: see above.
unsafe impl Send for Kernel {}
unsafe impl Sync for Kernel {}

/// The embedded fatbins loaded into one device's context, with every kernel looked up once.
pub struct Module {
    _raw: Vec<cu::CUmodule>,
    allreduce: Vec<Kernel>,
    allreduce_chain: Vec<Kernel>,
    allreduce_group: Vec<Kernel>,
    put_group: Vec<Kernel>,
    reducescatter: Vec<Kernel>,
    reduce: Vec<Kernel>,
    exchange: Kernel,
    gather_oneshot: Kernel,
    allgather_symm: Kernel,
    broadcast_ll128: Kernel,
    broadcast_oneshot: Kernel,
    p2p_oneshot: Kernel,
    ce_wait: Kernel,
    ce_post: Kernel,
    ce_copy: Kernel,
    rma_wait: Kernel,
    proxy_selftest: Kernel,
    port_selftest: Kernel,
    net_step: Kernel,
}

// SAFETY: module handles are immutable after load and usable from any thread.
unsafe impl Send for Module {}
unsafe impl Sync for Module {}

/// Kernel variants of a typed family, in table order.
const LL_PUT: [&str; 2] = ["ll", "put"];

fn typed_table(raw: &[cu::CUmodule], prefix: &str, variants: &[&str]) -> Result<Vec<Kernel>> {
    let mut t = Vec::with_capacity(variants.len() * DataType::COUNT * RedOp::COUNT);
    for v in variants {
        for dt in DataType::ALL {
            for op in RedOp::ALL {
                t.push(function(raw, &format!("{prefix}_{v}_{}_{}", dt.name(), op.name()))?);
            }
        }
    }
    Ok(t)
}

fn typed_index(variant: usize, dt: DataType, op: RedOp) -> usize {
    (variant * DataType::COUNT + dt as usize) * RedOp::COUNT + op as usize
}

impl Module {
    /// Loads the fatbins into `dev`'s context (which the caller made current).
    pub(super) fn load(dev: &Device) -> Result<Module> {
        let mut modules = Vec::with_capacity(FATBINS.len());
        for (i, image) in FATBINS.iter().enumerate() {
            let mut m: cu::CUmodule = std::ptr::null_mut();
            // SAFETY: each FATBINS entry is a complete fatbin image that lives for the whole program.
            check(unsafe { cu::cuModuleLoadData(&mut m, image.as_ptr().cast()) }, "cuModuleLoadData").map_err(|e| {
                e.context(format!("loading oxccl kernels (unit {i}) on device {} (sm_{}{})", dev.ordinal, dev.cc_major, dev.cc_minor))
            })?;
            modules.push(m);
        }
        let raw = modules.as_slice();
        let algos: Vec<&str> = AllReduceAlgo::ALL.iter().map(|a| a.name()).collect();
        Ok(Module {
            allreduce: typed_table(raw, "ox_allreduce", &algos)?,
            allreduce_chain: typed_table(raw, "ox_allreduce", &["oneshot_chain"])?,
            allreduce_group: typed_table(raw, "ox_allreduce", &["group"])?,
            put_group: typed_table(raw, "ox_put_group", &PutGroupKinds::ALL.map(PutGroupKinds::name))?,
            reducescatter: typed_table(raw, "ox_reducescatter", &LL_PUT)?,
            reduce: typed_table(raw, "ox_reduce", &LL_PUT)?,
            exchange: function(raw, "ox_exchange")?,
            gather_oneshot: function(raw, "ox_gather_oneshot")?,
            allgather_symm: function(raw, "ox_allgather_symm")?,
            broadcast_ll128: function(raw, "ox_broadcast_ll128")?,
            broadcast_oneshot: function(raw, "ox_broadcast_oneshot")?,
            p2p_oneshot: function(raw, "ox_p2p_oneshot")?,
            ce_wait: function(raw, "ox_ce_wait")?,
            ce_post: function(raw, "ox_ce_post")?,
            ce_copy: function(raw, "ox_ce_copy")?,
            rma_wait: function(raw, "ox_rma_wait")?,
            proxy_selftest: function(raw, "ox_proxy_selftest")?,
            port_selftest: function(raw, "ox_port_selftest")?,
            net_step: function(raw, "ox_net_step")?,
            _raw: modules,
        })
    }

    /// AllReduce by `algo` for `dt` and `op` (kernels/colls/allreduce.cu).
    pub fn allreduce(&self, algo: AllReduceAlgo, dt: DataType, op: RedOp) -> Kernel {
        self.allreduce[typed_index(algo as usize, dt, op)]
    }

    /// The ring one-shot's chained variant (kernels/colls/allreduce.cu, `Chain`): for a chained launch
    /// and the launch it follows, which publishes its output.
    pub fn allreduce_chain(&self, dt: DataType, op: RedOp) -> Kernel {
        self.allreduce_chain[typed_index(0, dt, op)]
    }

    /// A group's collectives as one launch, of the reductions'
    /// datatype and op (kernels/colls/allreduce_group.cu, `GroupArgs`).
    pub fn allreduce_group(&self, dt: DataType, op: RedOp) -> Kernel {
        self.allreduce_group[typed_index(0, dt, op)]
    }

    /// A group's put-based AllReduces, ReduceScatters and Reduces as one launch, one after another
    /// in every block (kernels/colls/reduce_colls.cu, put_group, `GroupArgs`), by the kinds the
    /// group holds.
    pub fn put_group(&self, kinds: PutGroupKinds, dt: DataType, op: RedOp) -> Kernel {
        self.put_group[typed_index(kinds as usize, dt, op)]
    }

    /// `put`: the put-round variant, else the packet one.
    pub fn reducescatter(&self, put: bool, dt: DataType, op: RedOp) -> Kernel {
        self.reducescatter[typed_index(put as usize, dt, op)]
    }

    /// Reduce: `put`: the put-round variant, else the packet one.
    pub fn reduce(&self, put: bool, dt: DataType, op: RedOp) -> Kernel {
        self.reduce[typed_index(put as usize, dt, op)]
    }

    /// The exchange kernel: sends, receives and local copies of any non-reducing launch
    /// (kernels/colls/exchange.cu).
    pub fn exchange(&self) -> Kernel {
        self.exchange
    }

    /// One-shot AllGather / AlltoAll (kernels/colls/gather_oneshot.cu; CollArgs, count in bytes).
    pub fn gather_oneshot(&self) -> Kernel {
        self.gather_oneshot
    }

    /// AllGather through symmetric memory (kernels/colls/symm_allgather.cu; CollArgs as described there).
    pub fn allgather_symm(&self) -> Kernel {
        self.allgather_symm
    }

    /// Broadcast along the LL128 chain (kernels/colls/broadcast.cu; CollArgs with count in bytes).
    pub fn broadcast_ll128(&self) -> Kernel {
        self.broadcast_ll128
    }

    /// Small Broadcast as one-way packets (kernels/colls/broadcast.cu; CollArgs with count in bytes).
    pub fn broadcast_oneshot(&self) -> Kernel {
        self.broadcast_oneshot
    }

    /// One send and one receive as packets (kernels/colls/p2p_oneshot.cu; CollArgs as described there).
    pub fn p2p_oneshot(&self) -> Kernel {
        self.p2p_oneshot
    }

    /// The copy-engine direct path's stream wait (kernels/colls/ce_direct.cu; CollArgs as described there).
    pub fn ce_wait(&self) -> Kernel {
        self.ce_wait
    }

    /// The copy-engine path's counter post inside CUDA graphs (kernels/colls/ce_direct.cu).
    pub fn ce_post(&self) -> Kernel {
        self.ce_post
    }

    /// The copy-engine direct path's local copy by SMs (kernels/colls/ce_direct.cu).
    pub fn ce_copy(&self) -> Kernel {
        self.ce_copy
    }

    /// The one-sided operations' stream wait (kernels/colls/rma.cu; RmaWaitArgs).
    pub fn rma_wait(&self) -> Kernel {
        self.rma_wait
    }

    /// The proxy FIFO's self-test kernel (oxccl-gpu-check --proxy).
    pub fn proxy_selftest(&self) -> Kernel {
        self.proxy_selftest
    }

    /// The PortChannel self-test kernel (oxccl-gpu-check --proxy).
    pub fn port_selftest(&self) -> Kernel {
        self.port_selftest
    }

    /// One cross-host step handed to the proxy (kernels/colls/net_step.cu; NetStepArgs).
    pub fn net_step(&self) -> Kernel {
        self.net_step
    }
}

/// CUDA's default stack per thread (CU_LIMIT_STACK_SIZE), bytes. A kernel that needs more local
/// memory makes its first launch grow the context's local memory, and that growth waits for the
/// kernels running there: a kernel waiting for a peer's kernel that the same thread has yet to
/// launch then never finishes. The grouped kernel once needed 1.8 KB (its arguments copied into
/// local memory) and hung one process driving several ranks; NCCL names the same hazard
/// (NCCL_SET_STACK_SIZE).
const DEFAULT_STACK_BYTES: i32 = 1024;

/// WARNs where a kernel needs more local memory a thread than the default stack: a regression in
/// the kernels, which are kept within it (`__grid_constant__` arguments, kernels/prims/instantiate.cuh).
fn warn_local_memory(f: cu::CUfunction, name: &str) {
    let mut local = 0;
    // SAFETY: out-pointer to a local; `f` is a loaded function.
    let rc = unsafe { cu::cuFuncGetAttribute(&mut local, cu::CUfunction_attribute::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f) };
    if rc == cu::CUresult::CUDA_SUCCESS && local > DEFAULT_STACK_BYTES {
        crate::nccl_warn!(
            "kernel {name} needs {local} bytes of local memory a thread, above CUDA's default stack of {DEFAULT_STACK_BYTES}: its first launch grows the context's local memory, which waits for running kernels (a hang where one thread drives several ranks)"
        );
    }
}

/// Kernel `name` from whichever module holds it (each is in exactly one unit: build.rs).
fn function(modules: &[cu::CUmodule], name: &str) -> Result<Kernel> {
    let cname = CString::new(name).map_err(|_| Error::internal("kernel name with NUL"))?;
    let mut last = cu::CUresult::CUDA_ERROR_NOT_FOUND;
    for &module in modules {
        let mut f: cu::CUfunction = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; module is loaded.
        match unsafe { cu::cuModuleGetFunction(&mut f, module, cname.as_ptr()) } {
            cu::CUresult::CUDA_SUCCESS => {
                // Loaded now, not at its first launch: under CUDA's lazy loading (the default
                // since CUDA 12.2) a first launch loads the function, and CUDA documents that
                // loading may wait for kernels already running, which deadlocks kernels that
                // rely on running together: one thread driving several ranks would wait in rank
                // 0's launch for rank 0's previous kernel, which waits for rank 1's, not yet
                // issued. NCCL loads its kernels at init for the same reason
                // (cudaFuncGetAttributes in ncclInitKernelsForDevice, src/enqueue.cc). Costs
                // 15-30 ms at a process's first communicator on each GPU (H200, 2026-11-30).
                // SAFETY: `f` was just returned by the driver for a loaded module.
                check(unsafe { cu::cuFuncLoad(f) }, "cuFuncLoad").map_err(|e| e.context(format!("kernel {name}")))?;
                warn_local_memory(f, name);
                return Ok(Kernel(f));
            }
            cu::CUresult::CUDA_ERROR_NOT_FOUND => {}
            rc => last = rc,
        }
    }
    check(last, "cuModuleGetFunction").map_err(|e| e.context(format!("kernel {name}")))?;
    Err(Error::internal(format!("kernel {name}: in no module")))
}

/// Launches `k` with one by-value argument struct.
pub fn launch<A>(k: Kernel, grid: u32, block: u32, stream: cu::CUstream, args: &A) -> Result<()> {
    launch_pdl(k, grid, block, stream, args, false)
}

/// Launches `k` with one by-value argument struct; `pdl`: with programmatic stream serialization,
/// so that it may begin while the previous kernel in `stream` still runs (algo::pdl says when;
/// every oxccl kernel waits for that kernel before it touches memory, kernels/prims/pdl.cuh).
/// Replaces the arguments (and launch shape) of `node`, a kernel node of `k` in a graph, with
/// `args`: how a launch captured later changes one captured before it (enqueue: a chained
/// launch asks its anchor to publish its output). The node keeps its edges, programmatic ones
/// included.
pub fn set_kernel_node_args<A>(node: cu::CUgraphNode, k: Kernel, grid: u32, block: u32, args: &A) -> Result<()> {
    let mut params = [args as *const A as *mut std::ffi::c_void];
    let p = cu::CUDA_KERNEL_NODE_PARAMS_v2 {
        func: k.0,
        gridDimX: grid,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: block,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: 0,
        kernelParams: params.as_mut_ptr(),
        extra: std::ptr::null_mut(),
        kern: std::ptr::null_mut(),
        ctx: std::ptr::null_mut(),
    };
    // SAFETY: `node` is a kernel node the caller captured (it names the kernel it launched there,
    // which takes exactly one parameter of type A); the driver copies the parameters.
    check(unsafe { cu::cuGraphKernelNodeSetParams_v2(node, &p) }, "cuGraphKernelNodeSetParams")
}

/// Launches `k` with one argument struct `args` on `stream`, `grid` blocks of `block` threads;
/// with `pdl`, as a programmatic dependent launch (it may start before the previous kernel on the
/// stream ends; kernels/prims/pdl.cuh). Every kernel launch of oxccl goes through here
/// or, for a configured call with a launch-completion event, `launch_with_event`.
pub fn launch_pdl<A>(k: Kernel, grid: u32, block: u32, stream: cu::CUstream, args: &A, pdl: bool) -> Result<()> {
    launch_ex(k, grid, block, stream, args, pdl, None)
}

/// As [`launch_pdl`], recording `event` once every block of the kernel has begun (the launch
/// attribute CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT, driver 12.3 and later; the event must
/// have been created with CU_EVENT_DISABLE_TIMING and be neither interprocess nor interop, as the
/// driver requires). For a configured call's launchCompletionEvent (ncclCollConfig_t).
pub fn launch_with_event<A>(k: Kernel, grid: u32, block: u32, stream: cu::CUstream, args: &A, pdl: bool, event: cu::CUevent) -> Result<()> {
    launch_ex(k, grid, block, stream, args, pdl, Some(event))
}

/// The one launch with attributes: programmatic stream serialization where `pdl`, the launch
/// completion event where given; a plain cuLaunchKernel where neither.
fn launch_ex<A>(k: Kernel, grid: u32, block: u32, stream: cu::CUstream, args: &A, pdl: bool, event: Option<cu::CUevent>) -> Result<()> {
    let mut params = [args as *const A as *mut std::ffi::c_void];
    if !pdl && event.is_none() {
        // SAFETY: `args` outlives the call (the driver copies parameters at launch); the kernel
        // takes exactly one parameter of type A.
        return check(
            unsafe { cu::cuLaunchKernel(k.0, grid, 1, 1, block, 1, 1, 0, stream, params.as_mut_ptr(), std::ptr::null_mut()) },
            "cuLaunchKernel",
        );
    }
    // SAFETY: all-zero attributes are valid plain-old-data values; ids and values are set below.
    let mut attrs: [cu::CUlaunchAttribute; 2] = unsafe { std::mem::zeroed() };
    let mut n = 0;
    if let Some(e) = event {
        attrs[n].id = cu::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT;
        attrs[n].value.launchCompletionEvent.event = e;
        attrs[n].value.launchCompletionEvent.flags = 0;
        n += 1;
    }
    if pdl {
        attrs[n].id = cu::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attrs[n].value.programmaticStreamSerializationAllowed = 1;
        n += 1;
    }
    let config = cu::CUlaunchConfig {
        gridDimX: grid,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: block,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: 0,
        hStream: stream,
        attrs: attrs.as_mut_ptr(),
        numAttrs: n as u32,
    };
    // SAFETY: `args` outlives the call (the driver copies parameters at launch); the kernel takes
    // exactly one parameter of type A; `config` and `attrs` outlive the call.
    check(unsafe { cu::cuLaunchKernelEx(&config, k.0, params.as_mut_ptr(), std::ptr::null_mut()) }, "cuLaunchKernelEx")
}
