//! Per-collective configuration (ncclCollConfig_t, NCCL 2.32.3): what one call of the nccl*Config
//! collectives may use, as pure functions of the parsed config, the collective and the
//! communicator's settings. Every rank passes the same config, so every rank reaches the same
//! choice, as for the communicator-wide settings (algo::policy, algo::envlists).
//!
//! - **algSelection** names NCCL's algorithm/protocol pairs (NCCL 2.32.3's registry, `REGISTRY`),
//!   in NCCL's syntax (its ncclAlgParse, read off its library): whitespace is dropped, `,`
//!   separates alternatives (their union), `+` joins terms (their intersection), a term is a
//!   case-insensitive prefix of names (`RING` is every RING_*, `ring_ll` RING_LL and
//!   RING_LL128), `^` before a term takes its complement; an unknown term, an empty term or an
//!   empty intersection makes the whole text unparsable. The names valid for the collective
//!   (`valid_mask`) are kept; none left is NCCL's "cannot be honored" (`at_call`). The rest map
//!   onto oxccl's algorithms as NCCL_ALGO/NCCL_PROTO do (algo::envlists): RING, TREE and PAT admit
//!   oxccl's NVLink algorithms, with LL and LL128 meaning its packet algorithms (LL128 also its
//!   LL128-line forms) and SIMPLE its put-based ones; NVLS, NVLSTREE and COLLNET select nothing
//!   oxccl has; of the symmetric kernels, AllGather's SYMK_ST (direct stores into every rank's
//!   output) is oxccl's direct AllGather into a symmetric window (algo::symm), the others
//!   (multicast, TMA, LL and the reduction kernels) have no oxccl counterpart. What the call is
//!   left with is intersected with NCCL_PROTO/NCCL_ALGO's allowance; nothing left is "no
//!   algorithm in the selected set is available" (`plan`).
//! - **minCTAs / maxCTAs** bound the call's thread blocks (maxCTAs at most the communicator's;
//!   out-of-range values are ignored with NCCL's INFO lines; NCCL_MIN_CTAS / NCCL_MAX_CTAS, when
//!   set, win as in NCCL). maxCTAs caps every kernel of the call as the communicator's maxCTAs
//!   does (bootstrap::topo::block_budget); minCTAs raises the grid of the kernels whose grid
//!   grows with the message (the packet and LL128-line kernels, the symmetric AllGather).
//! - **CTAPolicy** is this call's CTA policy with algo::policy's meaning (EFFICIENCY caps the
//!   blocks; ZERO moves by copy engine where the communicator's copy-engine path exists, the
//!   rest within the same cap); unset, or NCCL_CTA_POLICY set, leaves the communicator's.
//! - **nvlsCTAs / cgaClusterSize** are checked (out of range: NCCL's INFO line); oxccl has no NVLS
//!   and launches no clusters.

use super::envlists::Func;
use super::policy::CtaPolicy;
use super::Tuning;
use crate::config::coll_config::{CollConfigArgs, EnvCtas};
use crate::config::abi::NCCL_CONFIG_UNDEF_INT as UNDEF;
use crate::error::{Error, Result};
use crate::log::Subsys;
use crate::types::Coll;

/// NCCL's algorithm families in its registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Tree,
    Ring,
    CollnetDirect,
    CollnetChain,
    Nvls,
    NvlsTree,
    Pat,
    /// A symmetric-memory kernel (NCCL's SYMK_*).
    Symk,
}

/// NCCL's protocols.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    Ll,
    Ll128,
    Simple,
    /// Symmetric kernels have none.
    None,
}

/// One entry of NCCL 2.32.3's registry: its name, the functions it serves, what it is.
struct Entry {
    name: &'static str,
    /// Bits of NCCL's ncclFunc_t it is valid for (Broadcast 0, Reduce 1, AllGather 2,
    /// ReduceScatter 3, AllReduce 4; AlltoAll, Scatter and Gather have none).
    funcs: u8,
    family: Family,
    proto: Proto,
}

const BC: u8 = 1;
const RD: u8 = 2;
const AG: u8 = 4;
const RS: u8 = 8;
const AR: u8 = 16;

const fn e(name: &'static str, funcs: u8, family: Family, proto: Proto) -> Entry {
    Entry { name, funcs, family, proto }
}

/// NCCL 2.32.3's algRegistry, in its order (dumped from its libnccl.so.2). Bit i of a selection
/// mask is entry i. SYMK_LL appears twice: AllGather's and ReduceScatter's kernels.
const REGISTRY: [Entry; 29] = [
    e("TREE_LL", AR, Family::Tree, Proto::Ll),
    e("TREE_LL128", AR, Family::Tree, Proto::Ll128),
    e("TREE_SIMPLE", AR, Family::Tree, Proto::Simple),
    e("RING_LL", BC | RD | AG | RS | AR, Family::Ring, Proto::Ll),
    e("RING_LL128", BC | RD | AG | RS | AR, Family::Ring, Proto::Ll128),
    e("RING_SIMPLE", BC | RD | AG | RS | AR, Family::Ring, Proto::Simple),
    e("COLLNET_DIRECT_SIMPLE", AG | RS | AR, Family::CollnetDirect, Proto::Simple),
    e("COLLNET_CHAIN_SIMPLE", AR, Family::CollnetChain, Proto::Simple),
    e("NVLS_SIMPLE", AG | RS | AR, Family::Nvls, Proto::Simple),
    e("NVLSTREE_SIMPLE", AR, Family::NvlsTree, Proto::Simple),
    e("PAT_SIMPLE", AG | RS, Family::Pat, Proto::Simple),
    e("SYMK_AGxLL_R", AR, Family::Symk, Proto::None),
    e("SYMK_AGxLLMC_R", AR, Family::Symk, Proto::None),
    e("SYMK_RSxTmaLD_AGxTmaST", AR, Family::Symk, Proto::None),
    e("SYMK_RSxLD_AGxST", AR, Family::Symk, Proto::None),
    e("SYMK_RSxLDMC_AGxSTMC", AR, Family::Symk, Proto::None),
    e("SYMK_LL", AG, Family::Symk, Proto::None),
    e("SYMK_LLMC", AG, Family::Symk, Proto::None),
    e("SYMK_TmaST", AG, Family::Symk, Proto::None),
    e("SYMK_ST", AG, Family::Symk, Proto::None),
    e("SYMK_TmaSTMC", AG, Family::Symk, Proto::None),
    e("SYMK_STMC", AG, Family::Symk, Proto::None),
    e("SYMK_RailRing_LsaSTMC", AG, Family::Symk, Proto::None),
    e("SYMK_LL", RS, Family::Symk, Proto::None),
    e("SYMK_TmaLD", RS, Family::Symk, Proto::None),
    e("SYMK_LD", RS, Family::Symk, Proto::None),
    e("SYMK_LDMC", RS, Family::Symk, Proto::None),
    e("SYMK_RailA2A_LsaLD", RS, Family::Symk, Proto::None),
    e("SYMK_RailA2A_LsaLDMC", RS, Family::Symk, Proto::None),
];

/// Every registry bit.
const ALL: u32 = (1 << REGISTRY.len()) - 1;
/// AllGather's SYMK_ST: oxccl's direct AllGather into a symmetric window.
const SYMK_ST_ALLGATHER: usize = 19;

/// The registry entries a term names: those whose name starts with it, ignoring case (NCCL's
/// ncclAlgTagMask).
fn tag_mask(term: &str) -> u32 {
    REGISTRY
        .iter()
        .enumerate()
        .filter(|(_, x)| x.name.len() >= term.len() && x.name.as_bytes()[..term.len()].eq_ignore_ascii_case(term.as_bytes()))
        .fold(0, |m, (i, _)| m | 1 << i)
}

/// NCCL 2.32.3's ncclAlgParse: the registry entries `text` selects, or None where NCCL fails
/// (an unknown or empty term, or an alternative whose terms leave nothing). Empty text (after
/// dropping spaces, tabs, CRs and LFs) selects nothing and is no error.
pub fn parse_selection(text: &str) -> Option<u32> {
    let text: String = text.chars().filter(|c| !matches!(c, ' ' | '\t' | '\n' | '\r')).collect();
    let mut mask = 0;
    for alt in text.split(',').filter(|a| !a.is_empty()) {
        let mut terms = alt.split('+').filter(|t| !t.is_empty()).peekable();
        terms.peek()?;
        let mut m = ALL;
        for term in terms {
            let (negate, name) = match term.strip_prefix('^') {
                Some(rest) => (true, rest),
                None => (false, term),
            };
            if name.is_empty() {
                return None;
            }
            let t = tag_mask(name);
            if t == 0 {
                return None;
            }
            m &= if negate { ALL & !t } else { t };
        }
        if m == 0 {
            return None;
        }
        mask |= m;
    }
    Some(mask)
}

/// NCCL's ncclFunc_t bit of a collective; none for AlltoAll, Gather and Scatter, which no
/// registry entry serves.
fn func_bit(c: Coll) -> u8 {
    match c {
        Coll::Broadcast => BC,
        Coll::Reduce => RD,
        Coll::AllGather => AG,
        Coll::ReduceScatter => RS,
        Coll::AllReduce => AR,
        Coll::AlltoAll | Coll::Gather | Coll::Scatter => 0,
    }
}

/// NCCL's ncclAlgValidForFuncMask: the registry entries valid for `c`.
pub fn valid_mask(c: Coll) -> u32 {
    let bit = func_bit(c);
    REGISTRY.iter().enumerate().filter(|(_, x)| x.funcs & bit != 0).fold(0, |m, (i, _)| m | 1 << i)
}

/// The names of a mask's entries, for logs.
pub fn names(mask: u32) -> Vec<&'static str> {
    REGISTRY.iter().enumerate().filter(|(i, _)| mask & 1 << i != 0).map(|(_, x)| x.name).collect()
}

/// An algorithm selection that some entry valid for the collective survived.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlgSelection {
    /// Registry entries (non-zero, all valid for the collective).
    pub mask: u32,
    /// forceAlgSelection: a selection oxccl cannot honour is an error (else automatic).
    pub force: bool,
    /// The caller's text, for messages.
    pub text: String,
}

/// One call's configuration, judged at the call (`at_call`); None fields leave the
/// communicator's own settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallConfig {
    /// algSelection, where it names entries for this collective.
    pub selection: Option<AlgSelection>,
    /// minCTAs (1-64).
    pub min_ctas: Option<u32>,
    /// maxCTAs (1-64, at most the communicator's maxCTAs).
    pub max_ctas: Option<u32>,
    /// CTAPolicy, where it overrides the communicator's.
    pub policy: Option<CtaPolicy>,
    /// launchCompletionEvent (a CUevent), 0 for none.
    pub event: usize,
    /// userProfilerTag.
    pub tag: u64,
}

impl CallConfig {
    /// Whether the call launches otherwise than the plain call: only such a call is kept out of
    /// a group's fused launches (NCCL isolates it too: ncclCollConfigNeedAggIsolate).
    pub fn shapes_launch(&self) -> bool {
        self.selection.is_some() || self.min_ctas.is_some() || self.max_ctas.is_some() || self.policy.is_some() || self.event != 0
    }
}

/// NCCL's channel maximum: the bound of minCTAs, maxCTAs and nvlsCTAs.
const MAX_CTAS: i32 = crate::config::MAX_CHANNELS;
/// NCCL_MAX_CGA_CLUSTER_SIZE.
const MAX_CGA: i32 = 8;

/// A call's config judged at the call, after the plain call's own checks and only for a
/// non-empty collective, as NCCL 2.32.3's ncclEnqueueCheck/collTaskAppend judge it:
/// - algSelection naming nothing valid for `coll` (or unparsable): with forceAlgSelection 1
///   ncclInvalidArgument, NCCL's message; with 0 an INFO (TUNING) line and automatic selection.
/// - minCTAs, maxCTAs, nvlsCTAs, cgaClusterSize out of range: ignored with NCCL's INFO (COLL)
///   lines; maxCTAs above the communicator's (`comm_max_ctas`) is the communicator's; minCTAs
///   above maxCTAs becomes 1; the environment's values (`env`), where in range, win.
/// - CTAPolicy 3 (both flags) is ZERO; unset, or NCCL_CTA_POLICY set, leaves the communicator's.
pub fn at_call(a: &CollConfigArgs, coll: Coll, comm_max_ctas: i32, env: &EnvCtas) -> Result<CallConfig> {
    let selection = match a.alg_selection.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(text) => {
            let mask = parse_selection(text).unwrap_or(0) & valid_mask(coll);
            if mask != 0 {
                Some(AlgSelection { mask, force: a.force, text: text.to_string() })
            } else if a.force {
                return Err(Error::invalid_argument(format!(
                    "config->algSelection \"{text}\" cannot be honored for {coll:?} (set forceAlgSelection=0 to if need to allow fall back to automatic selection)"
                )));
            } else {
                nccl_info!(Subsys::Tuning, "config->algSelection \"{text}\" cannot be honored for {coll:?}; falling back to automatic selection");
                None
            }
        }
    };
    let in_env = |v: Option<i64>, lo: i64, hi: i64, what: &str| -> bool {
        match v {
            Some(x) if (lo..=hi).contains(&x) => true,
            Some(x) => {
                nccl_info!(Subsys::Env, "Env var for {what}={x} is ignored because value out of bound min/max=[{lo}, {hi}]");
                false
            }
            None => false,
        }
    };
    let ignored = |what: &str, v: i32, lo: i32, hi: i32| nccl_info!(Subsys::Coll, "Config {what}={v} is ignored because value out of bound min/max=[{lo}, {hi}]");
    let mut min_ctas = None;
    if !in_env(env.min_ctas, 1, MAX_CTAS.into(), "minCTAs") && a.min_ctas != UNDEF {
        if (1..=MAX_CTAS).contains(&a.min_ctas) {
            min_ctas = Some(a.min_ctas as u32);
        } else {
            ignored("minCTAs", a.min_ctas, 1, MAX_CTAS);
        }
    }
    let mut max_ctas = None;
    let comm_max = comm_max_ctas.clamp(1, MAX_CTAS);
    if !in_env(env.max_ctas, 1, MAX_CTAS.into(), "maxCTAs") && a.max_ctas != UNDEF {
        let v = a.max_ctas.min(comm_max);
        if (1..=MAX_CTAS).contains(&v) {
            max_ctas = Some(v as u32);
        } else {
            ignored("maxCTAs", v, 1, MAX_CTAS);
        }
    }
    if let Some(min) = min_ctas {
        let max = max_ctas.unwrap_or(comm_max as u32);
        if min > max {
            nccl_info!(Subsys::Coll, "Task minCTAs({min}) is larger than maxCTAs({max}), reset task minCTAs to 1");
            min_ctas = Some(1);
        }
    }
    if !in_env(env.nvls_ctas, 1, MAX_CTAS.into(), "nvlsCTAs") && a.nvls_ctas != UNDEF && !(1..=MAX_CTAS).contains(&a.nvls_ctas) {
        ignored("nvlsCTAs", a.nvls_ctas, 1, MAX_CTAS);
    }
    if !in_env(env.cga_cluster_size, 0, MAX_CGA.into(), "cgaClusterSize") && a.cga_cluster_size != UNDEF && !(0..=MAX_CGA).contains(&a.cga_cluster_size) {
        ignored("cgaClusterSize", a.cga_cluster_size, 0, MAX_CGA);
    }
    // NCCL's ncclCollConfigResolveCTAPolicy: both flags mean ZERO (EFFICIENCY dropped).
    let policy = match a.cta_policy {
        _ if env.cta_policy.is_some() => None,
        UNDEF => None,
        3 => Some(CtaPolicy::Zero),
        p => Some(CtaPolicy::from_raw(p)),
    };
    Ok(CallConfig { selection, min_ctas, max_ctas, policy, event: a.event, tag: a.tag })
}

/// What a communicator settled at init that a call's CTA policy starts again from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyBase {
    /// The communicator's agreed CTA policy.
    pub policy: CtaPolicy,
    /// Thread blocks a kernel may use before the policy's cap (the smallest GPU's SMs, capped by
    /// maxCTAs and GPU sharing).
    pub free_blocks: u32,
    /// OXCCL_CE_DIRECT_MIN_BYTES as the environment gave it (the ZERO policy fills it in).
    pub env_ce_min: Option<u64>,
    /// Some rank of the communicator is in another process (copy engines can move data).
    pub other_processes: bool,
}

/// What a call may use beyond what the plain call would: its inputs from the communicator.
#[derive(Clone, Copy, Debug)]
pub struct CommSide<'a> {
    /// Ranks of the communicator.
    pub nranks: usize,
    /// The plain call's block budget (Topology::sm_count).
    pub blocks: u32,
    /// The plain call's tuning.
    pub tuning: &'a Tuning,
    /// The plain call's engine_moves (comm::Ready::engine_moves).
    pub engine_moves: bool,
    /// The communicator's policy inputs.
    pub base: PolicyBase,
}

/// The launch a configured call gets: its block budget, its tuning (None: the plain call's),
/// whether the ZERO policy's copy-engine routing applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallLaunch {
    /// Thread blocks any of its kernels may use (Topology::sm_count).
    pub blocks: u32,
    /// Its tuning, where it differs from the plain call's.
    pub tuning: Option<Tuning>,
    /// comm::Ready::engine_moves for this call.
    pub engine_moves: bool,
}

/// How a selection maps onto oxccl for one collective.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Admits {
    /// Some RING/TREE/PAT entry is selected.
    general: bool,
    /// LL or LL128 with them: oxccl's packet algorithms.
    packets: bool,
    /// LL128 with them: LL128-line forms.
    lines: bool,
    /// SIMPLE with them: oxccl's put-based algorithms.
    puts: bool,
    /// SYMK_ST of AllGather: the direct AllGather into a symmetric window.
    symm: bool,
}

fn admits(mask: u32) -> Admits {
    let mut a = Admits::default();
    for (i, x) in REGISTRY.iter().enumerate().filter(|(i, _)| mask & 1 << i != 0) {
        match x.family {
            Family::Ring | Family::Tree | Family::Pat => {
                a.general = true;
                match x.proto {
                    Proto::Ll => a.packets = true,
                    Proto::Ll128 => (a.packets, a.lines) = (true, true),
                    Proto::Simple => a.puts = true,
                    Proto::None => {}
                }
            }
            Family::Symk => a.symm |= i == SYMK_ST_ALLGATHER,
            Family::CollnetDirect | Family::CollnetChain | Family::Nvls | Family::NvlsTree => {}
        }
    }
    a
}

/// A configured call's launch (what its CTA settings and selection allow), or None where the
/// selection leaves it nothing and forceAlgSelection is 0 (the caller logs NCCL's INFO line and
/// launches as `plan` without the selection), or ncclInvalidArgument where the selection leaves
/// nothing and forceAlgSelection is 1 (NCCL's message). `symm_output`: the call is an AllGather
/// whose output lies in a symmetric window (where oxccl's SYMK_ST counterpart can run).
pub fn plan(cfg: &CallConfig, coll: Coll, c: &CommSide, symm_output: bool) -> Result<Option<CallLaunch>> {
    let mut launch = ctas(cfg, c);
    // One rank: the call is a local copy in oxccl and NCCL alike (ncclLaunchOneRank), which no
    // selection concerns.
    let Some(sel) = cfg.selection.as_ref().filter(|_| c.nranks > 1) else { return Ok(Some(launch)) };
    let f = func(coll).expect("a selection survives only for NCCL's five functions");
    let i = f as usize;
    let a = admits(sel.mask);
    let t = launch.tuning.get_or_insert_with(|| c.tuning.clone());
    let base = t.allowed.clone();
    let (packets, puts, lines) = (base.packets[i] && a.packets, base.puts[i] && a.puts, base.lines[i] && a.lines);
    let general = a.general && base.any_algo[i] && (packets || puts);
    // The direct AllGather counts as put-based under NCCL_PROTO (algo::symm).
    let symm = a.symm && base.puts[i] && symm_output;
    if !general && !symm {
        let only_symk = REGISTRY.iter().enumerate().all(|(i, x)| sel.mask & 1 << i == 0 || x.family == Family::Symk);
        let msg = if only_symk {
            format!("algSelection names only symmetric kernel(s) that are unavailable for {coll:?}")
        } else {
            format!("algSelection: no algorithm in the selected set is available for {coll:?}")
        };
        return if sel.force { Err(Error::invalid_argument(msg)) } else { Ok(None) };
    }
    if general {
        t.allowed.packets[i] = packets;
        t.allowed.puts[i] = puts || symm;
        t.allowed.lines[i] = lines;
        if !symm && coll == Coll::AllGather {
            t.symm_allgather_max_bytes = Some(0); // selected out
        }
        if symm && !puts {
            // Puts stay allowed for the direct kernel only: it must take every size.
            t.symm_allgather_min_bytes = Some(0);
            t.symm_allgather_max_bytes = Some(u64::MAX);
        }
    } else {
        // Only the direct kernel: at every size, and ahead of the copy-engine routing.
        t.allowed.packets[i] = false;
        t.allowed.puts[i] = true;
        t.symm_allgather_min_bytes = Some(0);
        t.symm_allgather_max_bytes = Some(u64::MAX);
        launch.engine_moves = false;
    }
    t.allowed.any_algo[i] = true;
    Ok(Some(launch))
}

/// The call's launch from its CTA settings alone (no selection).
pub fn ctas(cfg: &CallConfig, c: &CommSide) -> CallLaunch {
    let b = &c.base;
    let policy = cfg.policy.unwrap_or(b.policy);
    let repolicied = policy != b.policy;
    let blocks = if repolicied || cfg.max_ctas.is_some() {
        // maxCTAs caps as the communicator's does (bootstrap::topo::block_budget: 64 is no cap).
        let capped = match cfg.max_ctas {
            Some(m) if (m as i32) < MAX_CTAS => b.free_blocks.min(m),
            _ => b.free_blocks,
        };
        policy.block_budget(capped).min(if repolicied { u32::MAX } else { c.blocks })
    } else {
        c.blocks
    };
    let mut tuning = None;
    let mut engine_moves = c.engine_moves;
    if repolicied {
        let mut t = c.tuning.clone();
        t.ce_direct_min_bytes = b.env_ce_min;
        let t = policy.tune(&t);
        // As at init (comm::Comm::init_inner).
        engine_moves = policy == CtaPolicy::Zero && c.nranks >= 2 && super::ce_direct::min_bytes(&t) > 0 && b.other_processes;
        tuning = Some(t);
    }
    if let Some(m) = cfg.min_ctas {
        let t = tuning.get_or_insert_with(|| c.tuning.clone());
        t.min_blocks = Some(m);
    }
    CallLaunch { blocks, tuning, engine_moves }
}

/// NCCL_PROTO/NCCL_ALGO's function for a collective.
fn func(c: Coll) -> Option<Func> {
    match c {
        Coll::AllReduce => Some(Func::AllReduce),
        Coll::ReduceScatter => Some(Func::ReduceScatter),
        Coll::Reduce => Some(Func::Reduce),
        Coll::AllGather => Some(Func::AllGather),
        Coll::Broadcast => Some(Func::Broadcast),
        Coll::AlltoAll | Coll::Gather | Coll::Scatter => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::envlists::Allowed;
    use crate::error::ResultCode;

    fn bits(names_: &[&str]) -> u32 {
        names_.iter().map(|n| REGISTRY.iter().position(|x| x.name == *n).map(|i| 1u32 << i).unwrap()).fold(0, |a, b| a | b)
    }

    #[test]
    fn parsing_matches_ncclalgparse_on_nccls_own_library() {
        // Each case was run through NCCL 2.32.3's ncclAlgParse (libnccl.so.2, no GPU needed).
        let ring = bits(&["RING_LL", "RING_LL128", "RING_SIMPLE"]);
        let tree = bits(&["TREE_LL", "TREE_LL128", "TREE_SIMPLE"]);
        assert_eq!(parse_selection("RING_LL"), Some(bits(&["RING_LL", "RING_LL128"])), "a prefix: RING_LL128 too");
        assert_eq!(parse_selection("ring_ll"), parse_selection("RING_LL"));
        assert_eq!(parse_selection("RING"), Some(ring));
        assert_eq!(parse_selection("R"), Some(ring));
        assert_eq!(parse_selection("RING_LL128"), Some(bits(&["RING_LL128"])));
        assert_eq!(parse_selection("^RING_LL"), Some(ALL & !bits(&["RING_LL", "RING_LL128"])));
        assert_eq!(parse_selection("RING,TREE"), Some(ring | tree));
        assert_eq!(parse_selection(" RING_LL , TREE_LL "), Some(bits(&["RING_LL", "RING_LL128", "TREE_LL", "TREE_LL128"])));
        assert_eq!(parse_selection("RING+^RING_LL"), Some(bits(&["RING_SIMPLE"])));
        assert_eq!(parse_selection("RING_LL+RING_LL128"), Some(bits(&["RING_LL128"])));
        assert_eq!(parse_selection("RING,,TREE"), Some(ring | tree));
        assert_eq!(parse_selection("TREE_LL1"), Some(bits(&["TREE_LL128"])));
        assert_eq!(parse_selection("NVLS"), Some(bits(&["NVLS_SIMPLE", "NVLSTREE_SIMPLE"])));
        assert_eq!(parse_selection("SYMK_LL"), Some(1 << 16 | 1 << 17 | 1 << 23), "both SYMK_LLs and SYMK_LLMC");
        assert_eq!(parse_selection("SYMK_RS"), Some(bits(&["SYMK_RSxTmaLD_AGxTmaST", "SYMK_RSxLD_AGxST", "SYMK_RSxLDMC_AGxSTMC"])));
        assert_eq!(parse_selection("SYMK_").map(u32::count_ones), Some(18));
        assert_eq!(parse_selection(""), Some(0));
        assert_eq!(parse_selection(","), Some(0));
        assert_eq!(parse_selection(" \t"), Some(0));
        for bad in ["BOGUS", "^", "RING+^LL", "LL+SIMPLE", "RING+LL", "ring_simple+^ring", "RING_LL_", "RING_LLX", "RING,+", "^^RING"] {
            assert_eq!(parse_selection(bad), None, "{bad}");
        }
    }

    #[test]
    fn valid_masks_are_nccls() {
        // NCCL 2.32.3's ncclAlgValidForFuncMask, by function (probed).
        let ring = bits(&["RING_LL", "RING_LL128", "RING_SIMPLE"]);
        assert_eq!(valid_mask(Coll::Broadcast), ring);
        assert_eq!(valid_mask(Coll::Reduce), ring);
        assert_eq!(valid_mask(Coll::AllGather).count_ones(), 3 + 3 + 7);
        assert_eq!(valid_mask(Coll::ReduceScatter).count_ones(), 3 + 3 + 6);
        assert_eq!(valid_mask(Coll::AllReduce).count_ones(), 3 + 3 + 2 + 2 + 5);
        for c in [Coll::AlltoAll, Coll::Gather, Coll::Scatter] {
            assert_eq!(valid_mask(c), 0, "{c:?}: no entry serves it");
        }
        assert_eq!(names(bits(&["PAT_SIMPLE"]) & valid_mask(Coll::AllReduce)), Vec::<&str>::new());
    }

    fn args() -> CollConfigArgs {
        CollConfigArgs { min_ctas: UNDEF, max_ctas: UNDEF, nvls_ctas: UNDEF, cga_cluster_size: UNDEF, alg_selection: None, force: true, cta_policy: UNDEF, tag: 0, event: 0 }
    }

    #[test]
    fn selections_nothing_valid_can_honour_fail_only_when_forced() {
        let env = EnvCtas::default();
        let mut a = args();
        for text in ["TREE_LL", "PAT", "BOGUS", " ", ","] {
            a.alg_selection = Some(text.into());
            a.force = true;
            let e = at_call(&a, Coll::Broadcast, 64, &env).unwrap_err();
            assert_eq!(e.code, ResultCode::InvalidArgument);
            assert_eq!(e.msg, format!("config->algSelection \"{text}\" cannot be honored for Broadcast (set forceAlgSelection=0 to if need to allow fall back to automatic selection)"));
            a.force = false;
            assert_eq!(at_call(&a, Coll::Broadcast, 64, &env).unwrap().selection, None, "{text}: automatic");
        }
        a.force = true;
        for c in [Coll::AlltoAll, Coll::Gather, Coll::Scatter] {
            a.alg_selection = Some("RING".into());
            assert!(at_call(&a, c, 64, &env).is_err(), "{c:?}");
        }
        a.alg_selection = Some(String::new());
        assert_eq!(at_call(&a, Coll::AllReduce, 64, &env).unwrap(), CallConfig::default(), "empty: automatic");
        a.alg_selection = Some("ring_ll,NVLS".into());
        let s = at_call(&a, Coll::AllReduce, 64, &env).unwrap().selection.unwrap();
        assert_eq!(names(s.mask), ["RING_LL", "RING_LL128", "NVLS_SIMPLE", "NVLSTREE_SIMPLE"]);
        let s = at_call(&a, Coll::AllGather, 64, &env).unwrap().selection.unwrap();
        assert_eq!(names(s.mask), ["RING_LL", "RING_LL128", "NVLS_SIMPLE"], "kept: the entries valid for AllGather");
    }

    #[test]
    fn cta_counts_follow_nccls_bounds_and_the_environment() {
        let env = EnvCtas::default();
        let mut a = args();
        let got = |a: &CollConfigArgs, comm: i32, env: &EnvCtas| {
            let c = at_call(a, Coll::AllReduce, comm, env).unwrap();
            (c.min_ctas, c.max_ctas)
        };
        assert_eq!(got(&a, 64, &env), (None, None));
        a.max_ctas = 8;
        a.min_ctas = 2;
        assert_eq!(got(&a, 64, &env), (Some(2), Some(8)));
        assert_eq!(got(&a, 4, &env), (Some(2), Some(4)), "at most the communicator's maxCTAs");
        a.max_ctas = 0;
        assert_eq!(got(&a, 64, &env), (Some(2), None), "out of range: ignored");
        a.max_ctas = 100;
        assert_eq!(got(&a, 64, &env), (Some(2), Some(64)), "above: the communicator's");
        a.max_ctas = 4;
        a.min_ctas = 8;
        assert_eq!(got(&a, 64, &env), (Some(1), Some(4)), "min above max: 1");
        a.min_ctas = 65;
        assert_eq!(got(&a, 64, &env), (None, Some(4)));
        a.min_ctas = 0;
        assert_eq!(got(&a, 64, &env), (None, Some(4)));
        a.min_ctas = 2;
        let set = EnvCtas { min_ctas: Some(3), max_ctas: Some(16), ..EnvCtas::default() };
        assert_eq!(got(&a, 16, &set), (None, None), "NCCL_MIN_CTAS / NCCL_MAX_CTAS win: the communicator's stand");
        let bad = EnvCtas { min_ctas: Some(0), max_ctas: Some(1000), ..EnvCtas::default() };
        assert_eq!(got(&a, 64, &bad), (Some(2), Some(4)), "out-of-range environment values are ignored");
        a.nvls_ctas = -3;
        a.cga_cluster_size = 99;
        assert!(at_call(&a, Coll::AllReduce, 64, &env).is_ok(), "nvlsCTAs, cgaClusterSize: INFO only");
    }

    #[test]
    fn cta_policy_resolves_as_nccl_does() {
        let mut a = args();
        let pol = |a: &CollConfigArgs, env: &EnvCtas| at_call(a, Coll::AllReduce, 64, env).unwrap().policy;
        let none = EnvCtas::default();
        assert_eq!(pol(&a, &none), None);
        for (raw, p) in [(0, CtaPolicy::Default), (1, CtaPolicy::Efficiency), (2, CtaPolicy::Zero), (3, CtaPolicy::Zero)] {
            a.cta_policy = raw;
            assert_eq!(pol(&a, &none), Some(p), "{raw}");
        }
        assert_eq!(pol(&a, &EnvCtas { cta_policy: Some(0), ..none }), None, "NCCL_CTA_POLICY set: the communicator's");
    }

    fn side(t: &Tuning) -> CommSide<'_> {
        CommSide { nranks: 2, blocks: 132, tuning: t, engine_moves: false, base: PolicyBase { policy: CtaPolicy::Default, free_blocks: 132, env_ce_min: None, other_processes: true } }
    }

    fn cfg_sel(text: &str, coll: Coll, force: bool) -> CallConfig {
        let mut a = args();
        a.alg_selection = Some(text.into());
        a.force = force;
        at_call(&a, coll, 64, &EnvCtas::default()).unwrap()
    }

    #[test]
    fn a_plain_config_launches_as_the_plain_call() {
        let t = Tuning::default();
        let c = side(&t);
        let l = plan(&CallConfig { event: 7, tag: 9, ..CallConfig::default() }, Coll::AllReduce, &c, false).unwrap().unwrap();
        assert_eq!(l, CallLaunch { blocks: 132, tuning: None, engine_moves: false });
        // The communicator's own policy again: nothing changes either.
        let l = plan(&CallConfig { policy: Some(CtaPolicy::Default), ..CallConfig::default() }, Coll::AllReduce, &c, false).unwrap().unwrap();
        assert_eq!(l, CallLaunch { blocks: 132, tuning: None, engine_moves: false });
    }

    #[test]
    fn cta_settings_shape_the_budget() {
        let t = Tuning::default();
        let c = side(&t);
        let blocks = |cfg: CallConfig, c: &CommSide| plan(&cfg, Coll::AllReduce, c, false).unwrap().unwrap().blocks;
        assert_eq!(blocks(CallConfig { max_ctas: Some(1), ..Default::default() }, &c), 1);
        assert_eq!(blocks(CallConfig { max_ctas: Some(64), ..Default::default() }, &c), 132, "64 is no cap, as for the communicator");
        assert_eq!(blocks(CallConfig { policy: Some(CtaPolicy::Efficiency), ..Default::default() }, &c), crate::algo::policy::EFFICIENT_BLOCKS);
        assert_eq!(blocks(CallConfig { policy: Some(CtaPolicy::Efficiency), max_ctas: Some(8), ..Default::default() }, &c), 8);
        // A communicator under EFFICIENCY: a DEFAULT call gets the whole budget back.
        let mut eff = side(&t);
        eff.base.policy = CtaPolicy::Efficiency;
        eff.blocks = 48;
        assert_eq!(blocks(CallConfig { policy: Some(CtaPolicy::Default), ..Default::default() }, &eff), 132);
        assert_eq!(blocks(CallConfig { max_ctas: Some(16), ..Default::default() }, &eff), 16);
        assert_eq!(blocks(CallConfig::default(), &eff), 48);
        let l = plan(&CallConfig { min_ctas: Some(12), ..Default::default() }, Coll::AllReduce, &c, false).unwrap().unwrap();
        assert_eq!(l.tuning.unwrap().min_blocks, Some(12));
    }

    #[test]
    fn min_ctas_raises_the_grids_that_grow_with_the_message() {
        let t = Tuning::default();
        let c = side(&t);
        let l = plan(&CallConfig { min_ctas: Some(12), max_ctas: Some(20), ..Default::default() }, Coll::AllReduce, &c, false).unwrap().unwrap();
        let (topo, lt) = (crate::algo::Topology { nranks: 2, sm_count: l.blocks }, l.tuning.unwrap());
        let scratch = crate::algo::Scratch::for_ranks(2, &lt);
        let plain = crate::algo::select_allreduce(2, crate::types::DataType::Float32, &crate::algo::Topology { nranks: 2, sm_count: 132 }, &scratch, &t);
        assert!(plain.grid < 12, "a tiny AllReduce takes few blocks by default: {}", plain.grid);
        let p = crate::algo::select_allreduce(2, crate::types::DataType::Float32, &topo, &scratch, &lt);
        assert_eq!(p.grid, 12);
        let big = crate::algo::select_allreduce(64 << 20, crate::types::DataType::Float32, &topo, &scratch, &lt);
        assert!(big.grid <= 20, "maxCTAs caps every kernel: {}", big.grid);
        let ag = Tuning { symm_allgather_min_bytes: Some(0), ..lt };
        assert_eq!(crate::algo::symm::allgather(8, &topo, &ag).map(|g| g.0), Some(12));
    }

    #[test]
    fn zero_policy_per_call_routes_by_copy_engine_where_the_communicator_can() {
        let t = Tuning::default();
        let c = side(&t);
        let l = plan(&CallConfig { policy: Some(CtaPolicy::Zero), ..Default::default() }, Coll::AllGather, &c, false).unwrap().unwrap();
        assert!(l.engine_moves);
        assert_eq!(l.tuning.as_ref().unwrap().ce_direct_min_bytes, Some(crate::algo::policy::ZERO_CE_MIN_BYTES));
        assert_eq!(l.blocks, crate::algo::policy::EFFICIENT_BLOCKS);
        let mut one = side(&t);
        one.base.other_processes = false;
        assert!(!plan(&CallConfig { policy: Some(CtaPolicy::Zero), ..Default::default() }, Coll::AllGather, &one, false).unwrap().unwrap().engine_moves, "one process: no copy-engine path");
        // A ZERO communicator, a DEFAULT call: the environment's threshold again, no routing.
        let zt = CtaPolicy::Zero.tune(&t);
        let mut z = side(&zt);
        z.base.policy = CtaPolicy::Zero;
        z.engine_moves = true;
        z.blocks = 48;
        let l = plan(&CallConfig { policy: Some(CtaPolicy::Default), ..Default::default() }, Coll::AllGather, &z, false).unwrap().unwrap();
        assert!(!l.engine_moves);
        assert_eq!(l.tuning.unwrap().ce_direct_min_bytes, None);
        assert_eq!(l.blocks, 132);
    }

    #[test]
    fn selections_map_onto_oxccls_families() {
        let t = Tuning::default();
        let c = side(&t);
        let f = Func::AllReduce as usize;
        let allowed = |text: &str, coll: Coll| plan(&cfg_sel(text, coll, true), coll, &c, false).unwrap().unwrap().tuning.unwrap().allowed;
        let a = allowed("RING_LL", Coll::AllReduce);
        assert_eq!((a.packets[f], a.lines[f], a.puts[f]), (true, true, false), "RING_LL is a prefix of RING_LL128 too");
        let a = allowed("RING_LL+^RING_LL128", Coll::AllReduce);
        assert_eq!((a.packets[f], a.lines[f], a.puts[f]), (true, false, false));
        let a = allowed("RING_SIMPLE", Coll::AllReduce);
        assert_eq!((a.packets[f], a.puts[f]), (false, true));
        let a = allowed("TREE", Coll::AllReduce);
        assert_eq!((a.packets[f], a.lines[f], a.puts[f]), (true, true, true));
        assert!(a.packets[Func::Broadcast as usize], "other functions untouched");
        let g = Func::AllGather as usize;
        let a = allowed("PAT_SIMPLE", Coll::AllGather);
        assert_eq!((a.packets[g], a.puts[g]), (false, true));
        let l = plan(&cfg_sel("RING_SIMPLE", Coll::AllGather, true), Coll::AllGather, &c, true).unwrap().unwrap();
        assert_eq!(l.tuning.unwrap().symm_allgather_max_bytes, Some(0), "SYMK_ST not selected: no direct kernel");
    }

    #[test]
    fn selections_oxccl_cannot_run_fail_only_when_forced() {
        let t = Tuning::default();
        let c = side(&t);
        for (text, coll) in [("NVLS_SIMPLE", Coll::AllReduce), ("COLLNET", Coll::AllReduce), ("SYMK_AGxLL_R", Coll::AllReduce), ("NVLS", Coll::ReduceScatter), ("SYMK_LD", Coll::ReduceScatter)] {
            let e = plan(&cfg_sel(text, coll, true), coll, &c, false).unwrap_err();
            assert_eq!(e.code, ResultCode::InvalidArgument, "{text}");
            assert!(e.msg.contains(&format!("for {coll:?}")), "{}", e.msg);
            assert_eq!(plan(&cfg_sel(text, coll, false), coll, &c, false).unwrap(), None, "{text}: automatic");
        }
        assert_eq!(
            plan(&cfg_sel("SYMK_LD", Coll::ReduceScatter, true), Coll::ReduceScatter, &c, false).unwrap_err().msg,
            "algSelection names only symmetric kernel(s) that are unavailable for ReduceScatter"
        );
        assert_eq!(
            plan(&cfg_sel("NVLS_SIMPLE", Coll::AllReduce, true), Coll::AllReduce, &c, false).unwrap_err().msg,
            "algSelection: no algorithm in the selected set is available for AllReduce"
        );
        // NCCL_PROTO=LL and a SIMPLE-only selection: nothing left.
        let ll = Tuning { allowed: Allowed::from_values(Some("LL"), None).unwrap(), ..Tuning::default() };
        let c2 = side(&ll);
        assert!(plan(&cfg_sel("RING_SIMPLE", Coll::AllReduce, true), Coll::AllReduce, &c2, false).is_err());
        assert!(plan(&cfg_sel("RING", Coll::AllReduce, true), Coll::AllReduce, &c2, false).is_ok());
        // NCCL_ALGO=NVLS for AllReduce: RING is not available either.
        let nv = Tuning { allowed: Allowed::from_values(None, Some("allreduce:NVLS")).unwrap(), ..Tuning::default() };
        assert!(plan(&cfg_sel("RING", Coll::AllReduce, true), Coll::AllReduce, &side(&nv), false).is_err());
    }

    #[test]
    fn symk_st_is_the_direct_allgather_into_a_symmetric_window() {
        let t = Tuning::default();
        let c = side(&t);
        let sel = cfg_sel("SYMK_ST", Coll::AllGather, true);
        assert!(plan(&sel, Coll::AllGather, &c, false).is_err(), "output not in a symmetric window");
        let l = plan(&sel, Coll::AllGather, &c, true).unwrap().unwrap();
        let lt = l.tuning.unwrap();
        assert!(!l.engine_moves);
        let g = Func::AllGather as usize;
        assert_eq!((lt.allowed.packets[g], lt.allowed.puts[g]), (false, true));
        let topo = crate::algo::Topology { nranks: 2, sm_count: 132 };
        for piece in [8, 1 << 20, 1 << 30] {
            assert!(crate::algo::symm::allgather(piece, &topo, &lt).is_some(), "every size: {piece}");
        }
        // Together with RING_LL: both, the direct kernel at every size.
        let l = plan(&cfg_sel("SYMK_ST,RING_LL", Coll::AllGather, true), Coll::AllGather, &c, true).unwrap().unwrap().tuning.unwrap();
        assert_eq!((l.allowed.packets[g], l.allowed.puts[g]), (true, true));
        assert!(crate::algo::symm::allgather(8, &topo, &l).is_some());
        // One rank: a local copy, which no selection concerns (NCCL's ncclLaunchOneRank).
        let mut one = side(&t);
        one.nranks = 1;
        assert_eq!(plan(&sel, Coll::AllGather, &one, false).unwrap().unwrap().tuning, None);
        assert!(plan(&cfg_sel("NVLS_SIMPLE", Coll::AllReduce, true), Coll::AllReduce, &one, false).is_ok());
    }
}
