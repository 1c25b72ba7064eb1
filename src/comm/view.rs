//! What one launch sees of its communicator: the communicator itself (`Deref` to `Ready`) with
//! the block budget, tuning and copy-engine routing the launch's planners read. A plain call's
//! view borrows the communicator's own (no allocation, no clone, no lock); only a configured call
//! (ncclCollConfig_t, algo::collcfg) gets its own copies. The fields shadow `Ready`'s of the
//! same names, so the planners read `r.topo`, `r.tuning` and `r.engine_moves` as before.

use std::borrow::Cow;
use std::ops::Deref;

use super::task::CollTask;
use super::Ready;
use crate::algo::collcfg::{self, CommSide};
use crate::algo::{Topology, Tuning};
use crate::error::Result;
use crate::log::Subsys;
use crate::types::Coll;

/// A launch's view of its communicator.
pub struct View<'a> {
    ready: &'a Ready,
    /// Ranks, and the thread blocks a kernel of this launch may use.
    pub topo: Topology,
    /// The tuning this launch's planners use.
    pub tuning: Cow<'a, Tuning>,
    /// Ready::engine_moves for this launch.
    pub engine_moves: bool,
}

impl Deref for View<'_> {
    type Target = Ready;
    fn deref(&self) -> &Ready {
        self.ready
    }
}

impl<'a> View<'a> {
    /// The communicator as it is: every plain call's view.
    #[inline]
    pub fn plain(r: &'a Ready) -> View<'a> {
        View { ready: r, topo: r.topo, tuning: Cow::Borrowed(&r.tuning), engine_moves: r.engine_moves }
    }

    /// A collective's view: its config's (algo::collcfg::plan), or the plain one. Errors:
    /// ncclInvalidArgument where the config's algSelection leaves oxccl nothing to run and
    /// forceAlgSelection is 1 (with 0, NCCL's INFO line and the automatic choice).
    pub fn of_task(r: &'a Ready, t: &CollTask) -> Result<View<'a>> {
        let Some(cfg) = t.config.as_deref() else { return Ok(View::plain(r)) };
        let side = CommSide { nranks: r.topo.nranks, blocks: r.topo.sm_count, tuning: &r.tuning, engine_moves: r.engine_moves, base: r.policy_base };
        let symm_output = t.coll == Coll::AllGather && cfg.selection.is_some() && {
            let piece = t.count * t.dtype.size() as u64;
            t.comm.windows.symmetric_span(t.recv, piece * r.topo.nranks as u64).is_some()
        };
        let launch = match collcfg::plan(cfg, t.coll, &side, symm_output)? {
            Some(l) => {
                if let Some(s) = &cfg.selection {
                    nccl_info!(Subsys::Tuning, "algSelection: \"{}\" for {:?}: {:?} within the selected set", s.text, t.coll, collcfg::names(s.mask));
                }
                l
            }
            None => {
                nccl_info!(Subsys::Tuning, "algSelection: selected set unavailable for {:?}; falling back to automatic selection", t.coll);
                collcfg::ctas(cfg, &side)
            }
        };
        Ok(View {
            ready: r,
            topo: Topology { nranks: r.topo.nranks, sm_count: launch.blocks },
            tuning: launch.tuning.map_or(Cow::Borrowed(&r.tuning), Cow::Owned),
            engine_moves: launch.engine_moves,
        })
    }
}
