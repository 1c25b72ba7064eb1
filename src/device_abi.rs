//! Structs and constants shared by Rust and the CUDA kernels, defined once here.
//!
//! build.rs runs cbindgen over this file alone and writes `oxccl_device_abi.h` into OUT_DIR; the
//! kernels include it. Device addresses are `u64` (CUdeviceptr) on both sides so that no pointer
//! type has to agree across languages; kernels cast them to typed pointers at the point of use.
//! `tests/device_abi_layout.rs` compiles the generated header with the host C compiler and checks
//! every size and offset against these definitions.

/// Ranks of one communicator on one host that MemoryChannel connects (array bound in [`DevComm`]).
pub const OX_MAX_RANKS: usize = 32;
/// Blocks one launch may use; sizes the LL flag and semaphore slot arrays.
pub const OX_MAX_BLOCKS: usize = 128;
/// Where a rank's LL flag and pending tables sit, in bytes from its [`DevComm`]
/// (src/channel/memory.rs lays its private buffer out so; `DevComm::ll_flags` / `ll_pending`
/// hold the same addresses for the host). Kernels compute the tables' addresses from the
/// DevComm pointer instead of loading them from it: that dependent load sat on every packet
/// launch's critical path (scripts/lab/oneshot_lab.cu in git before 7bcb34d).
pub const OX_PRIV_FLAGS_OFF: u64 = 2048;
/// The pending table (`u32[OX_MAX_BLOCKS][OX_MAX_RANKS]`, see `DevComm::ll_pending`), right after
/// the flag table.
pub const OX_PRIV_PENDING_OFF: u64 = 18432;
/// The ring one-shot's chain (kernels/colls/allreduce.cu): the base table (u32 per block and peer, the
/// flags of the first early launch behind a chain's head) and the chain word (u32: the position
/// of the last launch of the chain that has passed its PDL wait).
pub const OX_PRIV_RING_BASE_OFF: u64 = 34816;
/// The chain word, on a 128-byte line of its own after the base table.
pub const OX_PRIV_RING_CHAIN_OFF: u64 = 51200;
/// A `u32` counter of finished blocks of the communicator's counted launches
/// (kernels/prims/done.cuh, src/comm/completion.rs), on a 128-byte line of its own inside the 256 bytes
/// src/channel/memory.rs keeps for the ring chain (whose chain word uses the first line). A
/// counted launch passes its address in `CollArgs::done` / `ExchangeArgs::done`.
pub const OX_PRIV_DONE_OFF: u64 = 51328;
const _: () = assert!(OX_PRIV_DONE_OFF == OX_PRIV_RING_CHAIN_OFF + 128);
/// The ring one-shot's output words (kernels/prims/ll_flags.cuh, ox_ring_out_ptr): a `u32` per block,
/// the flag of the last ring launch whose block has written its output, which a chained launch
/// (`OX_ONESHOT_CHAIN`) waits for before it reads its input.
pub const OX_PRIV_RING_OUT_OFF: u64 = 51456;
const _: () = assert!(OX_PRIV_RING_OUT_OFF == OX_PRIV_RING_CHAIN_OFF + 256);
const _: () = assert!(OX_PRIV_PENDING_OFF == OX_PRIV_FLAGS_OFF + (OX_MAX_BLOCKS * OX_MAX_RANKS * 4) as u64);
const _: () = assert!(OX_PRIV_RING_BASE_OFF == OX_PRIV_PENDING_OFF + (OX_MAX_BLOCKS * OX_MAX_RANKS * 4) as u64);
const _: () = assert!(OX_PRIV_RING_CHAIN_OFF == OX_PRIV_RING_BASE_OFF + (OX_MAX_BLOCKS * OX_MAX_RANKS * 4) as u64);
/// Bytes of LL16 packet: two 4-byte data words, each followed by its 4-byte flag.
pub const OX_LL16_BYTES: usize = 16;
/// Payload bytes carried by one LL16 packet.
pub const OX_LL16_PAYLOAD: usize = 8;

/// Transfers one exchange launch can carry in each direction (kernel parameters stay under 4 KiB).
pub const OX_MAX_XFERS: usize = 40;
/// Local (rank to itself) copies one exchange launch can carry.
pub const OX_MAX_COPIES: usize = 4;
/// How an exchange moves data with one peer (`ExchangeArgs::mode`). NONE: nothing moves between
/// the pair in this launch (its LL flag does not advance).
pub const OX_MODE_NONE: u8 = 0;
/// LL16 packets through the peer's LL scratch; one hop, no sync unless the pair is one-directional.
pub const OX_MODE_LL: u8 = 1;
/// LL16 packets, and the pair moves data one way only: the receiver acknowledges the launch
/// (kernels/prims/ll_flags.cuh) so the sender cannot run two launches ahead and overwrite unread packets.
pub const OX_MODE_LL_ACK: u8 = 2;
/// Puts through the put scratch in rounds, with semaphores.
pub const OX_MODE_PUT: u8 = 3;
/// Reduce on 3+ ranks (`CollArgs::mode` only): the ranks other than the root each reduce one
/// piece, which every rank (the root too) puts its share of, and put the result to the root one
/// round later (kernels/colls/reduce_colls.cu, reduce_relay).
pub const OX_MODE_RELAY: u8 = 4;
/// Reduce on 3+ ranks (`CollArgs::mode` only): a pipelined chain from the rank after the root
/// to the root, each rank adding its input to its predecessor's partial result
/// (kernels/colls/reduce_colls.cu, reduce_chain).
pub const OX_MODE_CHAIN: u8 = 5;
/// Reduce on 3+ ranks (`CollArgs::mode` only): the same chain as LL128 lines, in rounds through
/// double-buffered halves of the LL128 scratch (kernels/colls/reduce_colls.cu, reduce_ll128_chain), and
/// Broadcast's LL128 chain. (6 was the LL16 packet chain, retired: LL128 beat it at every size.)
pub const OX_MODE_LL128_CHAIN: u8 = 7;
/// The one-shot gather kernel (kernels/colls/gather_oneshot.cu; `CollArgs::mode`): AlltoAll, sending
/// input piece p to peer p (otherwise AllGather, sending the whole input to every peer).
pub const OX_GATHER_ALLTOALL: u8 = 8;

/// The one-shot AllReduce (`CollArgs::mode` bits; kernels/colls/allreduce.cu). RING: its packets go
/// through the ring area, `OX_RING_SLOTS` slots picked by the pair's flag modulo the slot count,
/// instead of the LL halves; set for every message of at most `OX_RING_PAYLOAD_BYTES` on 2 to
/// `OX_RING_MAX_RANKS` ranks (all ranks agree: it depends on the size alone). EARLY (with RING,
/// and only where the host proved the previous kernel in the stream is this communicator's ring
/// one-shot and the input is not the output of any launch that may still run): the kernel reads
/// its input and sends its packets before waiting for the previous kernel (kernels/prims/pdl.cuh), at
/// position `mode >> OX_ONESHOT_POS_SHIFT` (1, 2, ...) of the chain of early launches behind the
/// last non-early ring launch. ENTRY (with EARLY): it lets the next launch begin as soon as the
/// launch before it has passed its wait, instead of after its own wait.
pub const OX_ONESHOT_RING: u32 = 1;
/// EARLY: see `OX_ONESHOT_RING`.
pub const OX_ONESHOT_EARLY: u32 = 2;
/// ENTRY: see `OX_ONESHOT_RING`.
pub const OX_ONESHOT_ENTRY: u32 = 4;
/// CHAIN (with EARLY): the input is exactly the output of the previous launch (the host's
/// anchor), with the same grid and block, so each block reads it as soon as its twin block of that
/// launch has published it (kernels/colls/allreduce.cu), instead of after the PDL wait.
pub const OX_ONESHOT_CHAIN: u32 = 8;
/// PUBLISH (ring): after its output, each block stores its flag into its output word for a
/// chained launch behind it. Set only on a launch that a chained launch follows, by rewriting its
/// captured node (enqueue): the store's fence cost every ring launch 0.16-0.25 us (BENCHMARKS.md of
/// 2026-11-27, 25a05ee).
pub const OX_ONESHOT_PUBLISH: u32 = 16;
/// PRESEND (ring, chained variant): as each output word is stored, it is also sent to every peer
/// as the next launch's packet (the pair's next flag): set, by the same node rewrite as PUBLISH
/// and instead of it, on a launch that a chained launch with an identity pre() follows, which
/// then runs PRESENT: it sends nothing and reads its input after its PDL wait.
pub const OX_ONESHOT_PRESEND: u32 = 32;
/// PRESENT (ring, chained): the launch behind a PRESEND one; its packets were sent by that
/// launch, so it sends none and reads its input after its PDL wait.
pub const OX_ONESHOT_PRESENT: u32 = 64;
/// Bit position of an early launch's place in its chain (`mode >> OX_ONESHOT_POS_SHIFT`: 1, 2, ...).
pub const OX_ONESHOT_POS_SHIFT: u32 = 8;
/// The longest chain: a launch that would be further back is not early (it starts a new chain).
pub const OX_ONESHOT_POS_MAX: u32 = (1 << 24) - 1;
/// Slots of the ring area: a launch with flag f writes the slot of flag f - 8, which the peer is
/// proven to have finished with (kernels/colls/allreduce.cu: 6 would do; scripts/model/ring_chain_model.py in git before 7bcb34d).
pub const OX_RING_SLOTS: u64 = 8;
/// Bytes of one source's region in one ring slot (LL16: twice the payload).
pub const OX_RING_REGION_BYTES: u64 = 128 << 10;
/// Largest AllReduce (bytes per rank) the ring one-shot carries: what one region holds as LL16 packets.
pub const OX_RING_PAYLOAD_BYTES: u64 = OX_RING_REGION_BYTES / 2;
/// Ranks up to which a communicator has a ring area (`OX_RING_SLOTS * n * OX_RING_REGION_BYTES`
/// bytes per rank, right after its LL halves).
pub const OX_RING_MAX_RANKS: usize = 8;

/// Registrations of one peer a rank's table has room for (src/reg: a registration's slot is its
/// generation modulo this).
pub const OX_REG_SLOTS: usize = 512;

/// One buffer a peer registered (ncclCommRegister), as this rank has mapped it. A rank's table
/// (`DevComm::reg_table`) holds `OX_REG_SLOTS` of these per peer, in device memory: the
/// registration thread (src/reg/table.rs) writes `gen` last, and a kernel that reads a `gen`
/// equal to the one a peer offers (acquire) sees the other fields of that registration.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegEntry {
    /// The registration's generation (never 0 for a live entry).
    pub gen: u64,
    /// The buffer's address in the peer's address space.
    pub base: u64,
    /// The buffer's size in bytes.
    pub size: u64,
    /// The same buffer as mapped into this rank's address space.
    pub local: u64,
}

/// A receiver's offer to a rank that sends it a put stream in this exchange launch: "from round 1
/// on, write the stream straight into my buffer". Kept in the sender's shared buffer, one per
/// receiving rank (`DevComm::reg_offer_off`); rewritten by the receiver in every launch in which
/// the pair moves data in two or more put rounds (`gen` 0: no offer).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegOffer {
    /// Generation of the receiver's registration covering `dst`.
    pub gen: u64,
    /// The receive's destination (receiver's address space).
    pub dst: u64,
    /// The receive's position in the pair's put stream, bytes.
    pub off: u64,
    /// The receive's length, bytes.
    pub bytes: u64,
}

/// PortChannel trigger: 128 bits a GPU thread pushes into the proxy FIFO.
/// `fst` = size (bits 0-31) | source offset (32-63);
/// `snd` = destination offset (0-31) | source memory id (32-40) | destination memory id (41-49) |
/// type (50-52) | semaphore id (53-62) | commit bit (63, the FIFO's lap parity; never payload).
/// 16 bytes; FIFO slots are 16-byte aligned (page-aligned array), as the device's single 128-bit
/// store needs.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Trigger {
    /// Size and source offset (bit layout above).
    pub fst: u64,
    /// Destination offset, memory ids, type, semaphore id and commit bit (bit layout above).
    pub snd: u64,
}

/// Width of `Trigger`'s size field (bytes, in `fst`).
pub const OX_TRIGGER_SIZE_BITS: u32 = 32;
/// Width of the source offset (in `fst`) and the destination offset (in `snd`), bytes.
pub const OX_TRIGGER_OFFSET_BITS: u32 = 32;
/// Width of each memory id (registered memory of the proxy's table) in `snd`.
pub const OX_TRIGGER_MEMID_BITS: u32 = 9;
/// Width of the type field (`OX_TRIGGER_DATA` | `_FLAG` | `_SYNC`) in `snd`.
pub const OX_TRIGGER_TYPE_BITS: u32 = 3;
/// Width of the semaphore id in `snd`.
pub const OX_TRIGGER_SEMID_BITS: u32 = 10;
/// Bit position of the source memory id in `snd`.
pub const OX_TRIGGER_SRC_MEM_SHIFT: u32 = 32;
/// Bit position of the destination memory id in `snd`.
pub const OX_TRIGGER_DST_MEM_SHIFT: u32 = 41;
/// Bit position of the type in `snd`.
pub const OX_TRIGGER_TYPE_SHIFT: u32 = 50;
/// Bit position of the semaphore id in `snd`.
pub const OX_TRIGGER_SEMID_SHIFT: u32 = 53;
/// Bit position of the commit bit in `snd`: the FIFO lap's parity, which tells the proxy a slot
/// holds this lap's trigger.
pub const OX_TRIGGER_COMMIT_SHIFT: u32 = 63;
/// Trigger types (bit flags, combinable: data then flag is one put-with-signal). DATA: copy `size`
/// bytes from the source memory to the destination memory.
pub const OX_TRIGGER_DATA: u64 = 1;
/// FLAG: signal the semaphore `semid` at the peer (after the data, where both are set).
pub const OX_TRIGGER_FLAG: u64 = 2;
/// SYNC: a flush; the proxy advances `FifoDevice::flush_done` once every earlier trigger completed.
pub const OX_TRIGGER_SYNC: u64 = 4;

/// The device's view of one proxy FIFO. Triggers, tail and flush position live in pinned host
/// memory (mapped into the device); the head, which only GPU threads touch, in device memory.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FifoDevice {
    /// `Trigger[size]`, device address of pinned host memory.
    pub triggers: u64,
    /// `u64`: next position the proxy will consume (it has consumed every earlier one).
    pub tail: u64,
    /// `u64` in device memory: next position a pusher takes (atomic add).
    pub head: u64,
    /// `u64`: every trigger before this position has completed (advanced by sync triggers).
    pub flush_done: u64,
    /// `u32`, host-mapped: non-zero once the proxy stopped or the communicator aborted; every
    /// device wait on the FIFO gives up then.
    pub stop: u64,
    /// Slots, a power of two.
    pub size: u32,
    /// Zero (keeps the struct's size a multiple of 8 in C as in Rust).
    pub _pad0: u32,
}

/// Arguments of `ox_proxy_selftest` (oxccl-gpu-check --proxy).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ProxyTestArgs {
    /// The FIFO under test.
    pub fifo: FifoDevice,
    /// `u32` in device memory: pushes or flushes that gave up.
    pub failures: u64,
    /// Data triggers each thread pushes, numbered (block, thread, k).
    pub per_thread: u32,
    /// Zero.
    pub _pad0: u32,
}

/// Arguments of `ox_port_selftest` (oxccl-gpu-check --proxy).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PortTestArgs {
    /// The FIFO to the proxy that moves the data.
    pub fifo: FifoDevice,
    /// Sender: the buffer it fills with the pattern (the FIFO's source memory); receiver: unused.
    pub src: u64,
    /// Receiver: the buffer it checks (the FIFO's destination memory); sender: unused.
    pub dst: u64,
    /// Bytes sent, split evenly over the sending blocks.
    pub bytes: u64,
    /// `u64` semaphore in the receiver's device memory.
    pub sem: u64,
    /// `u32` in device memory: pushes that failed (sender) and bytes found wrong (receiver).
    pub failures: u64,
    /// Host-mapped `u32`: non-zero stops every wait.
    pub abort_flag: u64,
    /// Sending blocks (the receiver waits for one signal from each).
    pub blocks: u32,
    /// 0: send, 1: receive and check.
    pub mode: u32,
}

/// Most copies a step kernel makes, both ways together (src/net/stage.rs).
pub const OX_NET_COPIES: usize = 32;
/// Bytes per progress flag of a pipelined staged step (src/transport/progress.rs).
pub const OX_NET_PIPE_CHUNK: u32 = 256 << 10;
// `NetStepArgs::arena_copies` has a bit per copy.
const _: () = assert!(OX_NET_COPIES <= 32);

/// `NetStepArgs::detach`: what a step kernel does. Wait: hand the step over, wait for the proxy,
/// copy the results out. Detach: hand it over and return (a step that only sends from its arena).
/// Issue: hand it over and return, leaving the wait and the copies out to a Complete launch of the
/// same arguments later on the stream (independent work runs in between). Complete: wait for the
/// step last issued, then copy out.
pub const OX_NET_STEP_WAIT: u32 = 0;
/// Detach: see `OX_NET_STEP_WAIT`.
pub const OX_NET_STEP_DETACH: u32 = 1;
/// Issue: see `OX_NET_STEP_WAIT`.
pub const OX_NET_STEP_ISSUE: u32 = 2;
/// Complete: see `OX_NET_STEP_WAIT`.
pub const OX_NET_STEP_COMPLETE: u32 = 3;
/// A step needing more copies than a kernel's `OX_NET_COPIES` slots makes them in extra launches
/// of the same kernel around a step kernel without copies. Pre: before it, wait as its kernel
/// would for the arena to be free, then copy `copies[..npre]` in (no hand-over). The copies out
/// after it are Complete launches with `npre` = 0 (their wait for the proxy returns at once).
pub const OX_NET_STEP_PRE: u32 = 4;

/// One copy of a step kernel, between GPU memory and the step's host-mapped arena.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetCopy {
    /// Source: GPU memory before the hand-over, the arena after (`NetStepArgs::arena_copies`).
    pub src: u64,
    /// Destination: the arena before the hand-over, GPU memory after.
    pub dst: u64,
    /// Bytes copied (payload bytes where the arena side is packets).
    pub bytes: u64,
    /// 0: a plain copy. Else (a copy out of the arena only): GPU memory the copy combines with,
    /// `dst[i] = with[i] (op) src[i]` by `NetStepArgs::combine` (src/net/stage.rs, "combined on the
    /// GPU"); `with` is `dst` or disjoint from it, and shares its alignment modulo 16.
    pub with: u64,
}

/// `NetStepArgs::combine`: 0, or `1 + dtype + 16 * op` for the copies out that combine (`NetCopy::with`):
/// dtype is ncclDataType_t's value, op one of these.
pub const OX_NET_COMBINE_SUM: u32 = 0;
/// Product.
pub const OX_NET_COMBINE_PROD: u32 = 1;
/// Maximum.
pub const OX_NET_COMBINE_MAX: u32 = 2;
/// Minimum.
pub const OX_NET_COMBINE_MIN: u32 = 3;

/// Arguments of `ox_net_step` (kernels/colls/net_step.cu): one step of a communicator spanning hosts,
/// run by its proxy (src/net).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NetStepArgs {
    /// The FIFO to the communicator's proxy.
    pub fifo: FifoDevice,
    /// The proxy's plan number (carried in the trigger's size field).
    pub plan: u64,
    /// `u64`, host-mapped: steps the proxy has finished (it only grows).
    pub done: u64,
    /// Three `u64` in device memory: steps this communicator's kernels have issued; the blocks of
    /// the running step kernel that have made their part of its copies (block 0 waits for the
    /// others and resets it); the newest step a kernel saw finished (every earlier one is too), so
    /// a later kernel need not ask the host-mapped `done` again.
    pub issued: u64,
    /// Host-mapped `u32`, non-zero once the communicator is aborted: every wait gives up.
    pub abort_flag: u64,
    /// Copies before the step is handed over (`copies[..npre]`, GPU -> host) and after the proxy
    /// finished it (`copies[npre..npre + npost]`, host -> GPU).
    pub npre: u32,
    /// See `npre`.
    pub npost: u32,
    /// OX_NET_STEP_*: wait for the proxy in this kernel, not at all (detached), or in a later
    /// completion launch.
    pub detach: u32,
    /// Bit k: copy k's host side (destination before the hand-over, source after) is in the
    /// arena, and moves by `flip` in a step that uses the second one.
    pub arena_copies: u32,
    /// 1: the arena side of every arena copy is LL16 packets (8 payload bytes and their flag in
    /// each 16, src/net/packets.rs): the kernel writes packets and pushes the trigger without a
    /// system fence, and reads the results' packets instead of waiting for `done`. 0: plain bytes.
    pub packets: u32,
    /// Nonzero: a pipelined staged step (src/transport/progress.rs), and its chunk size in bytes (a
    /// power of two, at most OX_NET_PIPE_CHUNK): handed over before its copies, which flag each
    /// chunk of the arena copies at `pre_flags` / wait for the proxy's flags at `post_flags`.
    /// 0: copies before the hand-over and after `done`.
    pub pipe: u32,
    /// How copies out with `NetCopy::with` set combine (`OX_NET_COMBINE_*`); 0 when none does.
    pub combine: u32,
    /// Zero (keeps `flip` 8-byte aligned in C as in Rust).
    pub pad: u32,
    /// The second arena's device address minus the first's, modulo 2^64; 0: one arena. Steps of
    /// odd number (the device's count, so graph replays alternate too) use the second.
    pub flip: u64,
    /// Device addresses (in the first arena; they move by `flip` like the copies' arena side) of
    /// a pipelined step's `u32` flags per chunk of its arena pre- and post-copies.
    pub pre_flags: u64,
    /// See `pre_flags`.
    pub post_flags: u64,
    /// The copies: `copies[..npre]` in, `copies[npre..npre + npost]` out.
    pub copies: [NetCopy; OX_NET_COPIES],
}

/// One transfer of an exchange.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Xfer {
    /// Local source (sends, copies).
    pub src: u64,
    /// Local destination (receives, copies).
    pub dst: u64,
    /// Bytes moved; 0 moves nothing (and does not set the pair's direction, kernels/colls/exchange.cu).
    pub bytes: u64,
    /// Position in the stream between this rank and `peer`: packets for LL modes, bytes (a
    /// multiple of 16) for PUT. Both sides of a pair compute the same positions.
    pub off: u64,
    /// The other rank (sends and receives; unused for copies).
    pub peer: i32,
    /// 0 for a plain transfer. Otherwise (PUT mode only) the transfer runs one round behind: a
    /// send forwards, straight from this rank's put scratch, the stream peer `relay - 1` sends
    /// this rank in the same launch (same offsets, piece for piece); a receive takes such a
    /// forwarded stream.
    pub relay: i32,
}

/// Arguments of the byte-level exchange kernel: AllGather, Broadcast, AlltoAll, Gather, Scatter
/// and grouped Send/Recv. Launched with the same grid on every rank.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ExchangeArgs {
    /// `const DevComm*` in device memory.
    pub comm: u64,
    /// A counted launch: the done counter every block adds one to as it finishes
    /// (kernels/prims/done.cuh); 0 otherwise.
    pub done: u64,
    /// Entries of `sends` in use.
    pub nsend: u32,
    /// Entries of `recvs` in use.
    pub nrecv: u32,
    /// Entries of `copies` in use.
    pub ncopy: u32,
    /// Zero.
    pub _pad0: u32,
    /// Per peer: OX_MODE_*.
    pub mode: [u8; OX_MAX_RANKS],
    /// Per PUT peer: bytes per block per round (a multiple of 16) and number of rounds.
    pub chunk: [u32; OX_MAX_RANKS],
    /// See `chunk`.
    pub rounds: [u32; OX_MAX_RANKS],
    /// Sends to peers, in the group's order.
    pub sends: [Xfer; OX_MAX_XFERS],
    /// Receives from peers, in the group's order.
    pub recvs: [Xfer; OX_MAX_XFERS],
    /// Copies from this rank to itself.
    pub copies: [Xfer; OX_MAX_COPIES],
    /// Per peer: generation of this rank's registration covering its receive from that peer,
    /// offered to the peer for zero-copy writes (0: none; see `RegOffer`). Only pairs in PUT mode
    /// with two or more rounds, whose receive is the pair's only one and not relayed.
    pub offer: [u64; OX_MAX_RANKS],
}

impl Default for ExchangeArgs {
    fn default() -> Self {
        ExchangeArgs {
            comm: 0,
            done: 0,
            nsend: 0,
            nrecv: 0,
            ncopy: 0,
            _pad0: 0,
            mode: [OX_MODE_NONE; OX_MAX_RANKS],
            chunk: [0; OX_MAX_RANKS],
            rounds: [0; OX_MAX_RANKS],
            sends: [Xfer::default(); OX_MAX_XFERS],
            recvs: [Xfer::default(); OX_MAX_XFERS],
            copies: [Xfer::default(); OX_MAX_COPIES],
            offer: [0; OX_MAX_RANKS],
        }
    }
}

/// One communicator as its kernels see it. Lives in device memory, written once at init.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DevComm {
    /// This rank's index in the communicator.
    pub rank: i32,
    /// Ranks of the communicator (at most `OX_MAX_RANKS`).
    pub nranks: i32,
    /// Bytes of one half of each rank's LL scratch (halves alternate with the flag's parity).
    pub ll_half_bytes: u64,
    /// Bytes of one (block, source rank) slot of the put-based reduce-scatter/all-gather scratch.
    pub rs_slot_bytes: u64,
    /// Blocks the put-based scratch was sized for; launches of that algorithm use at most this many.
    pub rs_max_blocks: u32,
    /// Zero.
    pub _pad0: u32,
    /// Bytes of one half of each rank's LL128 scratch (halves alternate with the flag's parity;
    /// kernels/prims/ll128.cuh), which only LL128 lines from the rank's predecessor (rank - 1) go to.
    pub ll128_half_bytes: u64,
    /// Offset of a rank's LL128 scratch from its LL scratch (`ll_scratch[r] + ll128_off`).
    pub ll128_off: u64,
    /// Bytes of one half of each rank's all-pairs LL128 area (halves alternate with the pair
    /// flag's parity, one region per source rank in each, as the LL halves): the LL128 one-shot
    /// and two-phase AllReduces (kernels/colls/allreduce.cu). Kept apart from the chain's LL128 scratch,
    /// which the predecessor alone writes whole.
    pub ap128_half_bytes: u64,
    /// Offset of a rank's all-pairs LL128 area from its LL scratch.
    pub ap128_off: u64,
    /// Each rank's LL scratch, as mapped into this rank's address space (own entry included).
    pub ll_scratch: [u64; OX_MAX_RANKS],
    /// Each rank's put-based scratch: RS area then AG area, each `rs_max_blocks * nranks` slots.
    pub rs_scratch: [u64; OX_MAX_RANKS],
    /// Each rank's inbound semaphore counters, `u64[OX_MAX_BLOCKS][OX_MAX_RANKS]` indexed
    /// `[block][sending rank]`, as mapped into this rank's address space.
    pub sem_inbound: [u64; OX_MAX_RANKS],
    /// Each rank's LL acknowledgements, `u32[OX_MAX_BLOCKS][OX_MAX_RANKS]` indexed
    /// `[block][reading rank]`: the flag of the latest one-way packet launch from that rank which
    /// the reader has entered. Written by the reader through its peer mapping.
    pub ll_ack: [u64; OX_MAX_RANKS],
    /// This rank's LL flags, `u32[OX_MAX_BLOCKS][OX_MAX_RANKS]` indexed `[block][peer]`; all
    /// blocks' flags for one peer are kept equal.
    pub ll_flags: u64,
    /// This rank's expected semaphore values, `u64[OX_MAX_BLOCKS][OX_MAX_RANKS]`.
    pub sem_expected: u64,
    /// This rank's LL flag of its latest one-way packet launch to each peer,
    /// `u32[OX_MAX_BLOCKS][OX_MAX_RANKS]` indexed `[block][peer]`, all blocks kept equal.
    pub ll_pending: u64,
    /// Host-mapped `u32`, non-zero once the communicator is aborted: every device spin loop reads it.
    pub abort_flag: u64,
    /// `RegEntry[nranks][OX_REG_SLOTS]`: the peers' registered buffers this rank has mapped
    /// (src/reg/table.rs; device memory, host-mapped with OXCCL_REG_TABLE=host).
    pub reg_table: u64,
    /// Offset from a rank's `ll_scratch` of its `RegOffer[OX_MAX_RANKS]`, indexed by the receiving
    /// rank that wrote it.
    pub reg_offer_off: u64,
    /// Offset from a rank's `ll_scratch` of its acceptances, `u32[OX_MAX_BLOCKS][OX_MAX_RANKS]`
    /// indexed `[block][sending rank]`: 1 if that block of the sender took this rank's offer in
    /// the current launch, 0 if it declined.
    pub reg_accept_off: u64,
}

/// Arguments of every collective kernel, passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CollArgs {
    /// `const DevComm*` in device memory.
    pub comm: u64,
    /// The send buffer (device address).
    pub send: u64,
    /// The receive buffer (device address).
    pub recv: u64,
    /// Elements (not bytes).
    pub count: u64,
    /// Algorithm-specific: elements per block per round for the put-based algorithms.
    pub chunk_elems: u64,
    /// PreMulSum: the scalar's bytes (sizeof(datatype) of them, little-endian, zero-extended),
    /// used when `scalar_ptr` is 0.
    pub scalar: u64,
    /// PreMulSum with ncclScalarDevice: device address of the scalar, read while the kernel runs.
    pub scalar_ptr: u64,
    /// Rooted collectives: the root rank (kernels/colls/p2p_oneshot.cu: the peer it sends to).
    pub root: i32,
    /// Reducing collectives: OX_MODE_LL or OX_MODE_PUT (ReduceScatter, Reduce); unused by AllReduce.
    pub mode: u32,
    /// A counted launch: the done counter every block adds one to as it finishes
    /// (kernels/prims/done.cuh); 0 otherwise. A field of its own rather than a tag bit in `comm`: masking
    /// the DevComm pointer cost the 4-rank 64 KB one-shot AllReduce 0.35 us a call (BENCHMARKS.md
    /// of 2026-11-27, f3727bf).
    pub done: u64,
}

/// `GroupArgs` operation kinds (`CollArgs::mode` of each): an AllReduce (`count` elements, sent
/// whole to every peer) ...
pub const OX_GROUP_ALLREDUCE: u32 = 0;
/// ... or a ReduceScatter (`count` = each rank's chunk; chunk p of `send` goes to rank p, `recv`
/// gets this rank's reduced chunk) ...
pub const OX_GROUP_REDUCESCATTER: u32 = 1;
/// ... or an AllGather (`count` = BYTES of each rank's piece, whatever the launch's datatype;
/// `send` goes whole to every peer, piece r of `recv` gets rank r's) ...
pub const OX_GROUP_ALLGATHER: u32 = 2;
/// ... or an AlltoAll (`count` = BYTES of each piece; piece p of `send` goes to rank p, piece r of
/// `recv` gets rank r's) ...
pub const OX_GROUP_ALLTOALL: u32 = 3;
/// ... or a Broadcast (`count` = BYTES; the root's `send` goes to every peer's `recv`) ...
pub const OX_GROUP_BROADCAST: u32 = 4;
/// ... or a Reduce (`count` elements; every rank's `send` goes to the root, whose `recv` gets the
/// reduction) ...
pub const OX_GROUP_REDUCE: u32 = 5;
/// ... or a Gather (`count` = BYTES of each rank's piece; every rank's `send` goes to the root,
/// piece r of the root's `recv` gets rank r's) ...
pub const OX_GROUP_GATHER: u32 = 6;
/// ... or a Scatter (`count` = BYTES of each piece; piece p of the root's `send` goes to rank p's
/// `recv`).
pub const OX_GROUP_SCATTER: u32 = 7;

/// Collectives one grouped launch carries (`GroupArgs::ops`; kernel parameters stay under 4 KiB).
pub const OX_GROUP_MAX_OPS: usize = 16;
/// Sends and receives one grouped launch carries beside its collectives (`GroupArgs::p2p`).
pub const OX_GROUP_MAX_P2P: usize = 16;

/// One send or receive of a grouped launch (`GroupArgs::p2p`): its packets follow the
/// collectives' in its pair's LL region, after the earlier transfers of the same pair and
/// direction, so the k-th send to a peer lands where that peer's k-th receive from this rank
/// reads (their sizes match, as NCCL requires).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct GroupP2p {
    /// Device address sent from or received into.
    pub buf: u64,
    /// Bytes moved (more than 0).
    pub bytes: u64,
    /// Its first packet in the pair's LL region (source this rank for a send, the peer for a
    /// receive).
    pub start: u64,
    /// Its first packet in this rank's walk over the launch's packets: the collectives' total
    /// plus the packets of the transfers listed before it (thread-to-packet mapping only).
    pub local: u64,
    /// The peer's rank.
    pub peer: u32,
    /// 1: a send; 0: a receive.
    pub is_send: u32,
}

/// Arguments of the grouped kernels. kernels/colls/allreduce_group.cu: up to `OX_GROUP_MAX_OPS`
/// AllReduces, ReduceScatters, Reduces, AllGathers, AlltoAlls, Broadcasts, Gathers and Scatters,
/// the reductions of one datatype and op, run as one packet launch over their packets laid end to
/// end. kernels/colls/reduce_colls.cu's put_group: 2 to `OX_GROUP_MAX_OPS` put-based AllReduces,
/// ReduceScatters and Reduces of one datatype and op, one after another; each `ops[j]` is then a
/// lone put-based call's `CollArgs` (`comm` set, `chunk_elems` its elements per block per round)
/// with `mode` saying which (`OX_GROUP_ALLREDUCE`, `OX_GROUP_REDUCESCATTER`, `OX_GROUP_REDUCE`;
/// read by the variant for several kinds, while a one-kind variant takes every operation as its
/// kind: algo::group::PutGroupKinds), and `p2p` is unused. Passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct GroupArgs {
    /// `const DevComm*` in device memory.
    pub comm: u64,
    /// A counted launch's done counter (as `CollArgs::done`); 0 otherwise.
    pub done: u64,
    /// Operations in `ops` (1 to `OX_GROUP_MAX_OPS`).
    pub nops: u32,
    /// Transfers in `p2p` (0 to `OX_GROUP_MAX_P2P`).
    pub np2p: u32,
    /// The operations, in group order. Per operation: `send`, `recv`, `count` (more than 0: as
    /// its `mode` says, `OX_GROUP_ALLREDUCE` ... `OX_GROUP_SCATTER`), `scalar`, `scalar_ptr` and
    /// `root` as for a lone call; `chunk_elems` holds its
    /// first packet in every source's LL region (the packets, 8 payload bytes each, that the
    /// operations before it send each peer); the other fields are unused.
    pub ops: [CollArgs; OX_GROUP_MAX_OPS],
    /// The group's sends and receives that travel in this launch, in the group's order.
    pub p2p: [GroupP2p; OX_GROUP_MAX_P2P],
}

/// Descriptors one one-sided wait launch carries (`RmaWaitArgs`; kernel parameters stay under
/// 4 KiB). A longer ncclWaitSignal list launches several times in a row.
pub const OX_RMA_WAIT_MAX: usize = 128;

/// Arguments of the one-sided wait kernel (kernels/colls/rma.cu, ox_rma_wait; src/comm/rma.rs):
/// thread i waits until counter `slots[i]` of this rank's signal area, less its consumed count,
/// reaches `counts[i]`, then adds `counts[i]` to the consumed count. Passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RmaWaitArgs {
    /// `const DevComm*` in device memory (its abort flag releases the wait).
    pub comm: u64,
    /// This rank's signal counters (`u64` each, raised by the peers' signals), device address.
    pub counters: u64,
    /// This rank's consumed counts (`u64` each, beside the counters, raised by its waits).
    pub consumed: u64,
    /// Descriptors in this launch (1 to `OX_RMA_WAIT_MAX`).
    pub n: u32,
    /// Padding (0).
    pub pad: u32,
    /// Each descriptor's counter, as an index into `counters` and `consumed`.
    pub slots: [u32; OX_RMA_WAIT_MAX],
    /// Each descriptor's signal count (more than 0).
    pub counts: [u32; OX_RMA_WAIT_MAX],
}

impl Default for RmaWaitArgs {
    fn default() -> Self {
        RmaWaitArgs { comm: 0, counters: 0, consumed: 0, n: 0, pad: 0, slots: [0; OX_RMA_WAIT_MAX], counts: [0; OX_RMA_WAIT_MAX] }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};
    use std::process::Command;

    /// Compiles the generated header with the host C compiler and checks that C sees the same
    /// size and offsets as Rust for every field the kernels use.
    #[test]
    fn generated_header_matches_rust_layout() {
        let header = concat!(env!("OUT_DIR"), "/oxccl_device_abi.h");
        let dir = std::env::temp_dir().join(format!("oxccl-abi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let fields: &[(&str, &str, usize)] = &[
            ("DevComm", "rank", offset_of!(DevComm, rank)),
            ("DevComm", "nranks", offset_of!(DevComm, nranks)),
            ("DevComm", "ll_half_bytes", offset_of!(DevComm, ll_half_bytes)),
            ("DevComm", "rs_slot_bytes", offset_of!(DevComm, rs_slot_bytes)),
            ("DevComm", "rs_max_blocks", offset_of!(DevComm, rs_max_blocks)),
            ("DevComm", "ll128_half_bytes", offset_of!(DevComm, ll128_half_bytes)),
            ("DevComm", "ll128_off", offset_of!(DevComm, ll128_off)),
            ("DevComm", "ap128_half_bytes", offset_of!(DevComm, ap128_half_bytes)),
            ("DevComm", "ap128_off", offset_of!(DevComm, ap128_off)),
            ("DevComm", "ll_scratch", offset_of!(DevComm, ll_scratch)),
            ("DevComm", "rs_scratch", offset_of!(DevComm, rs_scratch)),
            ("DevComm", "sem_inbound", offset_of!(DevComm, sem_inbound)),
            ("DevComm", "ll_ack", offset_of!(DevComm, ll_ack)),
            ("DevComm", "ll_pending", offset_of!(DevComm, ll_pending)),
            ("DevComm", "ll_flags", offset_of!(DevComm, ll_flags)),
            ("DevComm", "sem_expected", offset_of!(DevComm, sem_expected)),
            ("DevComm", "abort_flag", offset_of!(DevComm, abort_flag)),
            ("DevComm", "reg_table", offset_of!(DevComm, reg_table)),
            ("DevComm", "reg_offer_off", offset_of!(DevComm, reg_offer_off)),
            ("DevComm", "reg_accept_off", offset_of!(DevComm, reg_accept_off)),
            ("RegEntry", "local", offset_of!(RegEntry, local)),
            ("RegOffer", "bytes", offset_of!(RegOffer, bytes)),
            ("ExchangeArgs", "offer", offset_of!(ExchangeArgs, offer)),
            ("CollArgs", "comm", offset_of!(CollArgs, comm)),
            ("CollArgs", "send", offset_of!(CollArgs, send)),
            ("CollArgs", "recv", offset_of!(CollArgs, recv)),
            ("CollArgs", "count", offset_of!(CollArgs, count)),
            ("CollArgs", "chunk_elems", offset_of!(CollArgs, chunk_elems)),
            ("CollArgs", "scalar", offset_of!(CollArgs, scalar)),
            ("CollArgs", "scalar_ptr", offset_of!(CollArgs, scalar_ptr)),
            ("CollArgs", "root", offset_of!(CollArgs, root)),
            ("CollArgs", "mode", offset_of!(CollArgs, mode)),
            ("CollArgs", "done", offset_of!(CollArgs, done)),
            ("Xfer", "off", offset_of!(Xfer, off)),
            ("Trigger", "snd", offset_of!(Trigger, snd)),
            ("FifoDevice", "triggers", offset_of!(FifoDevice, triggers)),
            ("FifoDevice", "tail", offset_of!(FifoDevice, tail)),
            ("FifoDevice", "head", offset_of!(FifoDevice, head)),
            ("FifoDevice", "flush_done", offset_of!(FifoDevice, flush_done)),
            ("FifoDevice", "stop", offset_of!(FifoDevice, stop)),
            ("FifoDevice", "size", offset_of!(FifoDevice, size)),
            ("Xfer", "peer", offset_of!(Xfer, peer)),
            ("ExchangeArgs", "done", offset_of!(ExchangeArgs, done)),
            ("ExchangeArgs", "ncopy", offset_of!(ExchangeArgs, ncopy)),
            ("ExchangeArgs", "mode", offset_of!(ExchangeArgs, mode)),
            ("ExchangeArgs", "chunk", offset_of!(ExchangeArgs, chunk)),
            ("ExchangeArgs", "rounds", offset_of!(ExchangeArgs, rounds)),
            ("ExchangeArgs", "sends", offset_of!(ExchangeArgs, sends)),
            ("ExchangeArgs", "recvs", offset_of!(ExchangeArgs, recvs)),
            ("ExchangeArgs", "copies", offset_of!(ExchangeArgs, copies)),
            ("NetStepArgs", "plan", offset_of!(NetStepArgs, plan)),
            ("NetStepArgs", "done", offset_of!(NetStepArgs, done)),
            ("NetStepArgs", "issued", offset_of!(NetStepArgs, issued)),
            ("NetStepArgs", "abort_flag", offset_of!(NetStepArgs, abort_flag)),
            ("NetStepArgs", "npre", offset_of!(NetStepArgs, npre)),
            ("NetStepArgs", "npost", offset_of!(NetStepArgs, npost)),
            ("NetStepArgs", "detach", offset_of!(NetStepArgs, detach)),
            ("NetStepArgs", "arena_copies", offset_of!(NetStepArgs, arena_copies)),
            ("NetStepArgs", "packets", offset_of!(NetStepArgs, packets)),
            ("NetStepArgs", "pipe", offset_of!(NetStepArgs, pipe)),
            ("NetStepArgs", "combine", offset_of!(NetStepArgs, combine)),
            ("NetStepArgs", "flip", offset_of!(NetStepArgs, flip)),
            ("NetStepArgs", "pre_flags", offset_of!(NetStepArgs, pre_flags)),
            ("NetStepArgs", "post_flags", offset_of!(NetStepArgs, post_flags)),
            ("NetStepArgs", "copies", offset_of!(NetStepArgs, copies)),
            ("GroupArgs", "done", offset_of!(GroupArgs, done)),
            ("GroupArgs", "nops", offset_of!(GroupArgs, nops)),
            ("GroupArgs", "ops", offset_of!(GroupArgs, ops)),
            ("GroupArgs", "np2p", offset_of!(GroupArgs, np2p)),
            ("GroupArgs", "p2p", offset_of!(GroupArgs, p2p)),
            ("GroupP2p", "local", offset_of!(GroupP2p, local)),
            ("GroupP2p", "is_send", offset_of!(GroupP2p, is_send)),
            ("NetCopy", "bytes", offset_of!(NetCopy, bytes)),
            ("NetCopy", "with", offset_of!(NetCopy, with)),
            ("RmaWaitArgs", "counters", offset_of!(RmaWaitArgs, counters)),
            ("RmaWaitArgs", "consumed", offset_of!(RmaWaitArgs, consumed)),
            ("RmaWaitArgs", "n", offset_of!(RmaWaitArgs, n)),
            ("RmaWaitArgs", "slots", offset_of!(RmaWaitArgs, slots)),
            ("RmaWaitArgs", "counts", offset_of!(RmaWaitArgs, counts)),
        ];
        let mut c = format!("#include <stddef.h>\n#include <stdio.h>\n#include \"{header}\"\nint main(void) {{\n");
        c.push_str("printf(\"DevComm %zu\\n\", sizeof(DevComm));\n");
        c.push_str("printf(\"CollArgs %zu\\n\", sizeof(CollArgs));\n");
        c.push_str("printf(\"ExchangeArgs %zu\\n\", sizeof(ExchangeArgs));\n");
        c.push_str("printf(\"GroupArgs %zu\\n\", sizeof(GroupArgs));\n");
        c.push_str("printf(\"RmaWaitArgs %zu\\n\", sizeof(RmaWaitArgs));\n");
        c.push_str("printf(\"Trigger %zu %zu\\n\", sizeof(Trigger), _Alignof(Trigger));\n");
        c.push_str("printf(\"FifoDevice %zu\\n\", sizeof(FifoDevice));\n");
        c.push_str("printf(\"OX_MAX_RANKS %d\\nOX_MAX_BLOCKS %d\\n\", OX_MAX_RANKS, OX_MAX_BLOCKS);\n");
        c.push_str("printf(\"OX_PRIV %llu %llu %llu %llu %llu %llu\\n\", (unsigned long long)OX_PRIV_FLAGS_OFF, (unsigned long long)OX_PRIV_PENDING_OFF, (unsigned long long)OX_PRIV_RING_BASE_OFF, (unsigned long long)OX_PRIV_RING_CHAIN_OFF, (unsigned long long)OX_PRIV_DONE_OFF, (unsigned long long)OX_PRIV_RING_OUT_OFF);\n");
        for (s, f, _) in fields {
            c.push_str(&format!("printf(\"{s}.{f} %zu\\n\", offsetof({s}, {f}));\n"));
        }
        c.push_str("return 0;\n}\n");
        let src = dir.join("layout.c");
        let exe = dir.join("layout");
        std::fs::write(&src, c).expect("write layout.c");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let st = Command::new(&cc).arg(&src).arg("-o").arg(&exe).status().expect("run the C compiler");
        assert!(st.success(), "{cc} failed on the generated header");
        let out = Command::new(&exe).output().expect("run layout");
        let text = String::from_utf8(out.stdout).expect("utf8");
        let mut expect = format!(
            "DevComm {}\nCollArgs {}\nExchangeArgs {}\nGroupArgs {}\nRmaWaitArgs {}\nTrigger {} {}\nFifoDevice {}\nOX_MAX_RANKS {OX_MAX_RANKS}\nOX_MAX_BLOCKS {OX_MAX_BLOCKS}\nOX_PRIV {OX_PRIV_FLAGS_OFF} {OX_PRIV_PENDING_OFF} {OX_PRIV_RING_BASE_OFF} {OX_PRIV_RING_CHAIN_OFF} {OX_PRIV_DONE_OFF} {OX_PRIV_RING_OUT_OFF}\n",
            size_of::<DevComm>(),
            size_of::<CollArgs>(),
            size_of::<ExchangeArgs>(),
            size_of::<GroupArgs>(),
            size_of::<RmaWaitArgs>(),
            size_of::<Trigger>(),
            align_of::<Trigger>(),
            size_of::<FifoDevice>()
        );
        for (s, f, off) in fields {
            expect.push_str(&format!("{s}.{f} {off}\n"));
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(text, expect);
    }

    #[test]
    fn sizes_are_multiples_of_eight() {
        // Kernels read both structs with 8-byte loads; keep them padded explicitly.
        assert_eq!(size_of::<DevComm>() % 8, 0);
        assert_eq!(size_of::<CollArgs>() % 8, 0);
        assert_eq!(align_of::<CollArgs>(), 8);
        assert!(size_of::<CollArgs>() <= 4096, "kernel parameters are limited to 4 KiB");
        assert!(size_of::<ExchangeArgs>() <= 4096, "kernel parameters are limited to 4 KiB");
        assert!(size_of::<NetStepArgs>() <= 4096, "kernel parameters are limited to 4 KiB");
        assert_eq!(size_of::<ExchangeArgs>() % 8, 0);
        assert!(size_of::<GroupArgs>() <= 4096, "kernel parameters are limited to 4 KiB");
        assert_eq!(size_of::<GroupArgs>() % 8, 0);
        assert!(size_of::<RmaWaitArgs>() <= 4096, "kernel parameters are limited to 4 KiB");
        assert_eq!(size_of::<RmaWaitArgs>() % 8, 0);
    }
}
