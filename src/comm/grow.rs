//! ncclCommGetUniqueId and ncclCommGrow (NCCL 2.30+): a communicator of `nranks` made from an
//! existing one of fewer ranks plus new ranks that were in no communicator.
//!
//! As in NCCL (src/init.cc, src/bootstrap.cc): one existing rank, the coordinator, calls
//! ncclCommGetUniqueId, which starts a rendezvous root in its process and returns an id naming it;
//! the application hands the id to the new ranks. Then every existing rank calls ncclCommGrow with
//! the parent (keeping its rank in the new communicator) and every new rank with the id and the
//! rank it takes (from the parent's size up). The existing ranks other than the coordinator learn
//! the id over the parent's bootstrap. All ranks then initialise the new communicator through
//! that root, as ncclCommInitRank would. The parent is untouched and stays usable.
//!
//! Where oxccl differs in how, not what: NCCL sends the id to the parent's boundary ranks (0 and
//! n-1) during ncclCommGetUniqueId and threads the parent's bootstrap ring into the new one. Here
//! the existing ranks all-gather, during ncclCommGrow, which rank holds an outstanding id and which
//! id each was passed, so every one of them reaches the same verdict (use it, or the same error)
//! and none waits for a message that never comes; then every rank registers with the root. The
//! coordinator may pass the id to ncclCommGrow or NULL (NCCL's user guide shows both).
//!
//! The id is single-use (nccl.h 2.32): a second ncclCommGetUniqueId while one is outstanding, or
//! while a grow of the communicator has not yet exchanged it, is ncclInvalidUsage. NCCL 2.30.7
//! and 2.31's code do not check this; the 2.32.3 header states it.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::bootstrap::{self, Bootstrap, UNIQUE_ID_BYTES};
use crate::comm::Comm;
use crate::error::{Error, Result, ResultCode};
use crate::log::Subsys;

/// Bootstrap point-to-point tag of the existing ranks' exchange ("GROW"); every rank sends and
/// receives the same number of messages per grow, so successive grows never mix theirs.
const GROW_TAG: u32 = 0x4752_4f57;

/// Where a grow id's trailer starts: bootstrap ids use only their first 48 bytes (bootstrap/id.rs).
const TRAILER_AT: usize = 112;
const TRAILER_MAGIC: [u8; 4] = *b"OXGW";

/// What ncclCommGetUniqueId returns: a bootstrap unique id (its root runs in the coordinator's
/// process) with a trailer naming it a grow id and giving the parent's size, so that a new rank can
/// refuse a rank number of the parent, or a plain ncclGetUniqueId id, before it waits on anyone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrowId {
    /// The id the new communicator's ranks bootstrap with.
    pub bootstrap: [u8; UNIQUE_ID_BYTES],
    /// The size of the communicator being grown.
    pub parent_nranks: u32,
}

impl GrowId {
    /// A grow id from a bootstrap id (whose trailer bytes must be free).
    pub fn new(bootstrap: [u8; UNIQUE_ID_BYTES], parent_nranks: usize) -> Result<GrowId> {
        ensure!(bootstrap[TRAILER_AT..].iter().all(|&b| b == 0), InternalError, "bootstrap id uses the grow trailer's bytes");
        let parent_nranks = u32::try_from(parent_nranks)
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| Error::internal(format!("grow id: parent size {parent_nranks}")))?;
        Ok(GrowId { bootstrap, parent_nranks })
    }

    /// The 128 bytes of the ncclUniqueId.
    pub fn encode(&self) -> [u8; UNIQUE_ID_BYTES] {
        let mut b = self.bootstrap;
        b[TRAILER_AT..TRAILER_AT + 4].copy_from_slice(&TRAILER_MAGIC);
        b[TRAILER_AT + 4..TRAILER_AT + 8].copy_from_slice(&self.parent_nranks.to_le_bytes());
        b
    }

    /// Reads an ncclUniqueId given to ncclCommGrow: ncclInvalidArgument unless
    /// ncclCommGetUniqueId made it (a plain ncclGetUniqueId id, zeros or corrupt bytes).
    pub fn decode(b: &[u8; UNIQUE_ID_BYTES]) -> Result<GrowId> {
        let bad = |why: &str| Error::invalid_argument(format!("ncclCommGrow: uniqueId {why}"));
        if b[TRAILER_AT..TRAILER_AT + 4] != TRAILER_MAGIC {
            return Err(bad("was not made by ncclCommGetUniqueId (an ncclGetUniqueId id cannot grow a communicator)"));
        }
        let parent_nranks = u32::from_le_bytes([b[TRAILER_AT + 4], b[TRAILER_AT + 5], b[TRAILER_AT + 6], b[TRAILER_AT + 7]]);
        if parent_nranks == 0 || b[TRAILER_AT + 8..].iter().any(|&x| x != 0) {
            return Err(bad("is corrupt (bad trailer)"));
        }
        let mut bootstrap = *b;
        bootstrap[TRAILER_AT..].fill(0);
        bootstrap::check_unique_id(&bootstrap).map_err(|e| e.context("ncclCommGrow: uniqueId"))?;
        Ok(GrowId { bootstrap, parent_nranks })
    }
}

/// A new rank's checks on its arguments (ncclCommGrow with a NULL comm; `rank` is already within
/// 0..nranks): the id must be a grow id, and `rank` must not be one the parent's ranks keep (new
/// ranks take the parent's size and up: NCCL's user guide, api/comms.rst). Returns the id to
/// bootstrap with. ncclInvalidArgument otherwise.
pub fn joining_id(id: &[u8; UNIQUE_ID_BYTES], rank: usize, nranks: usize) -> Result<[u8; UNIQUE_ID_BYTES]> {
    let g = GrowId::decode(id)?;
    let p = g.parent_nranks as usize;
    ensure!(
        nranks > p,
        InvalidArgument,
        "ncclCommGrow: nRanks {nranks} does not exceed the size of the communicator being grown ({p})"
    );
    ensure!(
        rank >= p,
        InvalidArgument,
        "ncclCommGrow: new rank {rank} is one the {p} existing ranks keep; new ranks take {p}..{}",
        nranks - 1
    );
    Ok(g.bootstrap)
}

/// NCCL's ncclCommEnsureReady for a parent: ncclInvalidArgument while a nonblocking operation of
/// it runs, its asynchronous error if it has one.
pub fn ensure_ready(parent: &Comm) -> Result<()> {
    match parent.async_state() {
        ResultCode::Success => parent.ready().map(|_| ()),
        ResultCode::InProgress => Err(Error::invalid_argument(
            "communicator used before its previous nonblocking operation completed (poll ncclCommGetAsyncError)",
        )),
        code => Err(Error::new(code, "communicator failed earlier (see the WARN that said why)")),
    }
}

/// ncclCommGetUniqueId on `parent`: starts a rendezvous root in this process (it serves one
/// communicator's init, for at most the bootstrap timeout) and returns its grow id, which stays
/// outstanding until a grow of `parent` uses it. ncclInvalidUsage while an id is outstanding or
/// a grow of `parent` has not yet exchanged it, and with NCCL_COMM_ID set (as NCCL,
/// src/bootstrap.cc).
pub fn unique_id(parent: &Comm) -> Result<[u8; UNIQUE_ID_BYTES]> {
    ensure_ready(parent)?;
    if crate::config::env("NCCL_COMM_ID").is_some() {
        bail!(InvalidUsage, "ncclCommGetUniqueId should not be called when NCCL_COMM_ID is set");
    }
    parent.grow.issue(|| {
        let g = GrowId::new(bootstrap::child_unique_id()?, parent.nranks)?;
        nccl_info!(Subsys::Init, "comm rank {}/{}: made a grow id", parent.rank, parent.nranks);
        Ok(g.encode())
    })
}

/// A communicator's grow bookkeeping: whether an id it made is outstanding, or a grow of it has
/// begun on this rank and not yet exchanged the id.
#[derive(Default)]
pub struct GrowState(Mutex<Stage>);

#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    #[default]
    Idle,
    /// ncclCommGetUniqueId made this id; no grow has used it yet.
    Outstanding([u8; UNIQUE_ID_BYTES]),
    /// ncclCommGrow was called on this rank and its ranks have not yet exchanged the id.
    Growing,
}

impl GrowState {
    /// Makes an id with `make` and holds it as outstanding, unless one is outstanding or a grow
    /// runs (ncclInvalidUsage: nccl.h's "cannot generate a new UID while a previous UID is
    /// unconsumed", "must wait for grow operation to complete before calling again").
    pub fn issue(&self, make: impl FnOnce() -> Result<[u8; UNIQUE_ID_BYTES]>) -> Result<[u8; UNIQUE_ID_BYTES]> {
        let mut s = self.0.lock();
        match *s {
            Stage::Idle => {
                let id = make()?;
                *s = Stage::Outstanding(id);
                Ok(id)
            }
            Stage::Outstanding(_) => Err(Error::invalid_usage(
                "ncclCommGetUniqueId: this communicator's previous grow id has not been used by ncclCommGrow yet (one id per grow)",
            )),
            Stage::Growing => Err(Error::invalid_usage(
                "ncclCommGetUniqueId: a grow of this communicator has not completed yet (its id is not yet exchanged)",
            )),
        }
    }

    /// A grow begins on this rank: takes the outstanding id, if any. ncclInvalidUsage while another
    /// grow of this communicator runs on this rank.
    fn begin(&self) -> Result<Option<[u8; UNIQUE_ID_BYTES]>> {
        let mut s = self.0.lock();
        let id = match *s {
            Stage::Idle => None,
            Stage::Outstanding(id) => Some(id),
            Stage::Growing => {
                return Err(Error::invalid_usage("ncclCommGrow: a grow of this communicator has not completed yet"))
            }
        };
        *s = Stage::Growing;
        Ok(id)
    }

    /// The grow's exchange ended (or never ran); `unused` is an id it took but never sent (it is
    /// outstanding again).
    fn end(&self, unused: Option<[u8; UNIQUE_ID_BYTES]>) {
        *self.0.lock() = unused.map_or(Stage::Idle, Stage::Outstanding);
    }
}

/// One existing rank's part in a grow, from its ncclCommGrow call until the existing ranks have
/// exchanged the id: then the parent's bookkeeping is released (before the new communicator's
/// init, so a program that saw the grow complete never finds a new ncclCommGetUniqueId refused).
/// Dropped before that (a group that failed before its End ran it), it releases it too, and an
/// id it took but never sent is outstanding again.
pub struct GrowJob {
    /// This rank's new communicator (the rank it has in the parent, `nranks` ranks).
    pub comm: Arc<Comm>,
    parent: Arc<Comm>,
    /// The id the caller passed (the coordinator may; the others pass NULL).
    passed: Option<[u8; UNIQUE_ID_BYTES]>,
    /// The id this rank's ncclCommGetUniqueId made, if it is the coordinator.
    own: Option<[u8; UNIQUE_ID_BYTES]>,
    /// Whether `own` went out to the other ranks (it is then used up, whatever the outcome).
    used: bool,
    /// Whether the parent's bookkeeping was released.
    released: bool,
}

impl GrowJob {
    /// Starts the grow of `parent` on this rank: ncclInvalidUsage if one runs already.
    pub fn begin(parent: Arc<Comm>, comm: Arc<Comm>, passed: Option<[u8; UNIQUE_ID_BYTES]>) -> Result<GrowJob> {
        let own = parent.grow.begin()?;
        Ok(GrowJob { comm, parent, passed, own, used: false, released: false })
    }

    /// Learns the id over the parent's bootstrap (collective over the parent's ranks), then
    /// initialises the new communicator (collective over all its ranks). An error is also the new
    /// communicator's asynchronous error.
    pub fn run(mut self, connect: &super::cross_host::ConnectNet) -> Result<()> {
        let exchanged = self.exchange();
        self.release();
        let id = match exchanged {
            Ok(id) => id,
            Err(e) => {
                self.comm.fail_operation(e.code);
                return Err(e);
            }
        };
        nccl_info!(
            Subsys::Init,
            "comm rank {}/{}: growing to {} ranks (rank {} kept)",
            self.parent.rank,
            self.parent.nranks,
            self.comm.nranks,
            self.comm.rank
        );
        self.comm.init(&id, connect)
    }

    fn exchange(&mut self) -> Result<[u8; UNIQUE_ID_BYTES]> {
        let bs = &self.parent.ready()?.bootstrap;
        self.used = true;
        let id = exchange_id(bs, self.own, self.passed).map_err(|e| e.context("ncclCommGrow"))?;
        let g = GrowId::decode(&id)?;
        ensure!(
            g.parent_nranks as usize == self.parent.nranks,
            InternalError,
            "ncclCommGrow: the grow id is for a communicator of {} ranks, this one has {}",
            g.parent_nranks,
            self.parent.nranks
        );
        Ok(g.bootstrap)
    }

    fn release(&mut self) {
        if !self.released {
            self.released = true;
            self.parent.grow.end(if self.used { None } else { self.own });
        }
    }
}

impl Drop for GrowJob {
    fn drop(&mut self) {
        self.release();
    }
}

/// What one existing rank brings to the exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    /// The id its ncclCommGetUniqueId made (the coordinator's).
    own: Option<[u8; UNIQUE_ID_BYTES]>,
    /// The id passed to its ncclCommGrow.
    passed: Option<[u8; UNIQUE_ID_BYTES]>,
}

const ENTRY_BYTES: usize = 1 + 2 * UNIQUE_ID_BYTES;

impl Entry {
    fn encode(&self) -> [u8; ENTRY_BYTES] {
        let mut b = [0u8; ENTRY_BYTES];
        if let Some(id) = self.own {
            b[0] |= 1;
            b[1..1 + UNIQUE_ID_BYTES].copy_from_slice(&id);
        }
        if let Some(id) = self.passed {
            b[0] |= 2;
            b[1 + UNIQUE_ID_BYTES..].copy_from_slice(&id);
        }
        b
    }

    fn decode(b: &[u8]) -> Result<Entry> {
        ensure!(b.len() == ENTRY_BYTES && b[0] < 4, SystemError, "ncclCommGrow: malformed exchange entry ({} bytes)", b.len());
        let id = |at: usize| {
            let mut id = [0u8; UNIQUE_ID_BYTES];
            id.copy_from_slice(&b[at..at + UNIQUE_ID_BYTES]);
            id
        };
        Ok(Entry {
            own: (b[0] & 1 != 0).then(|| id(1)),
            passed: (b[0] & 2 != 0).then(|| id(1 + UNIQUE_ID_BYTES)),
        })
    }
}

/// The verdict every existing rank reaches from the same entries (by parent rank): the
/// coordinator's id. ncclInvalidUsage when no rank or several hold an id (ncclCommGetUniqueId was
/// not called, or called on several ranks); ncclInvalidArgument when a rank passed an id other
/// than the coordinator's.
fn agree(entries: &[Entry]) -> Result<[u8; UNIQUE_ID_BYTES]> {
    let holders: Vec<(usize, [u8; UNIQUE_ID_BYTES])> =
        entries.iter().enumerate().filter_map(|(r, e)| e.own.map(|id| (r, id))).collect();
    let (coordinator, id) = match holders.as_slice() {
        [one] => *one,
        [] => bail!(
            InvalidUsage,
            "no rank of the communicator holds an unused id from ncclCommGetUniqueId (one rank calls it before every grow)"
        ),
        many => {
            let ranks: Vec<usize> = many.iter().map(|&(r, _)| r).collect();
            bail!(InvalidUsage, "ranks {ranks:?} each hold an id from ncclCommGetUniqueId; one grow takes one id, made on one rank")
        }
    };
    if let Some(r) = (0..entries.len()).find(|&r| entries[r].passed.is_some_and(|p| p != id)) {
        bail!(
            InvalidArgument,
            "rank {r} passed a uniqueId other than the one ncclCommGetUniqueId made on rank {coordinator} for this grow"
        );
    }
    Ok(id)
}

/// The existing ranks' exchange over the parent's bootstrap (a ring all-gather on its own tag);
/// returns the coordinator's id, or the error every existing rank gets alike.
fn exchange_id(
    bs: &Bootstrap,
    own: Option<[u8; UNIQUE_ID_BYTES]>,
    passed: Option<[u8; UNIQUE_ID_BYTES]>,
) -> Result<[u8; UNIQUE_ID_BYTES]> {
    let mine = Entry { own, passed }.encode();
    let (n, r) = (bs.nranks(), bs.rank());
    let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
    let mut blobs = vec![Vec::new(); n];
    blobs[r] = mine.to_vec();
    for step in 0..n - 1 {
        // Sending first cannot deadlock: the receiver's listener queues what arrives.
        let (send_idx, recv_idx) = ((r + n - step) % n, (r + n - step - 1) % n);
        bs.send(next, GROW_TAG, &blobs[send_idx])
            .map_err(|e| e.context(format!("sending the grow exchange to parent rank {next}")))?;
        blobs[recv_idx] =
            bs.recv(prev, GROW_TAG).map_err(|e| e.context(format!("waiting for parent rank {prev}'s grow exchange")))?;
    }
    let entries = blobs.iter().map(|b| Entry::decode(b)).collect::<Result<Vec<_>>>()?;
    agree(&entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn grow_id(parent_nranks: usize) -> [u8; UNIQUE_ID_BYTES] {
        GrowId::new(bootstrap::child_unique_id().expect("bootstrap id"), parent_nranks).expect("grow id").encode()
    }

    #[test]
    fn grow_id_round_trip_and_refusals() {
        let boot = bootstrap::child_unique_id().expect("bootstrap id");
        let g = GrowId::new(boot, 3).expect("grow id");
        let b = g.encode();
        assert_ne!(b, boot, "the trailer marks it");
        assert_eq!(GrowId::decode(&b).expect("decode"), g);
        assert_eq!(GrowId::decode(&b).unwrap().bootstrap, boot, "the bootstrap part is the id as made");
        // A plain ncclGetUniqueId id, zeros, a bad trailer, a corrupt bootstrap part.
        assert_eq!(GrowId::decode(&boot).unwrap_err().code, ResultCode::InvalidArgument);
        assert_eq!(GrowId::decode(&[0; UNIQUE_ID_BYTES]).unwrap_err().code, ResultCode::InvalidArgument);
        // Trailer magic, parent size 0 (3 ^ 3), reserved trailer bytes; the bootstrap part's
        // magic, format and padding.
        for (at, flip) in [(TRAILER_AT, 0xff), (TRAILER_AT + 4, 3), (TRAILER_AT + 8, 1), (UNIQUE_ID_BYTES - 1, 0x80), (0, 0xff), (4, 0xff), (60, 1)] {
            let mut c = b;
            c[at] ^= flip;
            assert_eq!(GrowId::decode(&c).unwrap_err().code, ResultCode::InvalidArgument, "byte {at}");
        }
        let mut used = boot;
        used[TRAILER_AT] = 1;
        assert_eq!(GrowId::new(used, 2).unwrap_err().code, ResultCode::InternalError);
        assert_eq!(GrowId::new(boot, 0).unwrap_err().code, ResultCode::InternalError);
    }

    #[test]
    fn new_ranks_take_ranks_from_the_parent_size_up() {
        let id = grow_id(2);
        let boot = GrowId::decode(&id).unwrap().bootstrap;
        assert_eq!(joining_id(&id, 2, 4).expect("rank 2 of 4"), boot);
        assert_eq!(joining_id(&id, 3, 4).expect("rank 3 of 4"), boot);
        assert_eq!(joining_id(&id, 1, 4).unwrap_err().code, ResultCode::InvalidArgument, "a kept rank");
        assert_eq!(joining_id(&id, 0, 4).unwrap_err().code, ResultCode::InvalidArgument, "a kept rank");
        assert_eq!(joining_id(&id, 2, 2).unwrap_err().code, ResultCode::InvalidArgument, "no growth");
        assert_eq!(joining_id(&boot, 2, 4).unwrap_err().code, ResultCode::InvalidArgument, "not a grow id");
    }

    #[test]
    fn one_outstanding_id_and_none_during_a_grow() {
        let s = GrowState::default();
        let a = [7u8; UNIQUE_ID_BYTES];
        assert_eq!(s.issue(|| Ok(a)).expect("first id"), a);
        let mut made = false;
        let e = s.issue(|| {
            made = true;
            Ok([8; UNIQUE_ID_BYTES])
        });
        assert_eq!(e.unwrap_err().code, ResultCode::InvalidUsage, "second id while the first is outstanding");
        assert!(!made, "no root is started for a refused id");
        // A grow takes it; meanwhile neither a new id nor a second grow.
        assert_eq!(s.begin().expect("grow"), Some(a));
        assert_eq!(s.issue(|| Ok(a)).unwrap_err().code, ResultCode::InvalidUsage);
        assert_eq!(s.begin().unwrap_err().code, ResultCode::InvalidUsage);
        // Used: gone. A new id may be made.
        s.end(None);
        assert_eq!(*s.0.lock(), Stage::Idle);
        assert_eq!(s.issue(|| Ok(a)).expect("next id"), a);
        // A grow that ended without sending it out leaves it outstanding.
        let taken = s.begin().expect("grow");
        s.end(taken);
        assert_eq!(*s.0.lock(), Stage::Outstanding(a));
        // A failed make leaves nothing outstanding.
        let t = GrowState::default();
        assert_eq!(t.issue(|| Err(Error::system("no interface"))).unwrap_err().code, ResultCode::SystemError);
        assert_eq!(*t.0.lock(), Stage::Idle);
        // A non-coordinator's grow takes no id but still blocks a new one until it ends.
        assert_eq!(t.begin().expect("grow"), None);
        assert_eq!(t.issue(|| Ok(a)).unwrap_err().code, ResultCode::InvalidUsage);
        t.end(None);
        assert!(t.issue(|| Ok(a)).is_ok());
    }

    /// A grow that never ran, or failed before the id went out, leaves the id outstanding; the
    /// new communicator shows the failure.
    #[test]
    fn a_grow_that_sent_nothing_gives_the_id_back() {
        let cfg = crate::config::CommConfig::default();
        let parent = Arc::new(Comm::new(0, 1, 0, cfg.clone()));
        let a = [5u8; UNIQUE_ID_BYTES];
        parent.grow.issue(|| Ok(a)).expect("id");
        let job = GrowJob::begin(parent.clone(), Arc::new(Comm::new(0, 2, 0, cfg.clone())), None).expect("begin");
        let second = GrowJob::begin(parent.clone(), Arc::new(Comm::new(0, 2, 0, cfg.clone())), None);
        assert_eq!(second.err().map(|e| e.code), Some(ResultCode::InvalidUsage), "a second grow while one runs");
        drop(job); // a group dropped before its End
        assert_eq!(*parent.grow.0.lock(), Stage::Outstanding(a));
        // The parent never initialised: the exchange cannot start; the id stays outstanding.
        let child = Arc::new(Comm::new(0, 2, 0, cfg));
        let job = GrowJob::begin(parent.clone(), child.clone(), Some(a)).expect("begin");
        let no_net: &crate::comm::cross_host::ConnectNet = &|_| Err(Error::internal("no network in this test"));
        let e = job.run(no_net).unwrap_err();
        assert_eq!(e.code, ResultCode::InvalidArgument, "{e}");
        assert_eq!(child.async_state(), ResultCode::InvalidArgument, "the new communicator shows it");
        assert_eq!(*parent.grow.0.lock(), Stage::Outstanding(a));
    }

    #[test]
    fn every_rank_agrees_on_the_coordinators_id_or_the_same_error() {
        let (a, b) = ([1u8; UNIQUE_ID_BYTES], [2u8; UNIQUE_ID_BYTES]);
        let e = |own, passed| Entry { own, passed };
        // Coordinator rank 1, passing its id or not; others pass nothing or the same id.
        assert_eq!(agree(&[e(None, None), e(Some(a), Some(a)), e(None, None)]).expect("ok"), a);
        assert_eq!(agree(&[e(None, None), e(Some(a), None), e(None, Some(a))]).expect("ok"), a);
        assert_eq!(agree(&[e(Some(a), None)]).expect("one-rank parent"), a);
        assert_eq!(agree(&[e(None, None), e(None, Some(a))]).unwrap_err().code, ResultCode::InvalidUsage, "no id made");
        assert_eq!(agree(&[e(Some(a), None), e(Some(b), None)]).unwrap_err().code, ResultCode::InvalidUsage, "two coordinators");
        let wrong = agree(&[e(Some(a), None), e(None, None), e(None, Some(b))]).unwrap_err();
        assert_eq!(wrong.code, ResultCode::InvalidArgument, "a foreign id passed");
        assert!(wrong.msg.contains("rank 2") && wrong.msg.contains("rank 0"), "{}", wrong.msg);
        assert_eq!(agree(&[e(Some(a), Some(b))]).unwrap_err().code, ResultCode::InvalidArgument, "coordinator passes another id");
        for x in [e(None, None), e(Some(a), None), e(None, Some(b)), e(Some(a), Some(b))] {
            assert_eq!(Entry::decode(&x.encode()).expect("decode"), x);
        }
        assert!(Entry::decode(&[0u8; ENTRY_BYTES - 1]).is_err());
        let mut bad = e(None, None).encode();
        bad[0] = 4;
        assert!(Entry::decode(&bad).is_err());
    }

    /// The rendezvous of a grow on threads with real bootstraps (no GPU): a 3-rank parent whose
    /// rank 1 made the id, two new ranks; the existing ranks exchange it over the parent's
    /// bootstrap (rank 1 passing it, the others NULL), then all 5 bootstrap the new communicator.
    /// An all-gather in it shows each existing rank kept its rank and the new ones took 3 and 4.
    /// Twice over the same parent: its exchange carries no leftovers into the next grow.
    #[test]
    fn grow_rendezvous_keeps_existing_ranks_and_adds_new_ones() {
        let timeout = Duration::from_secs(20);
        let parents = bootstrap::local_ranks(3);
        for round in 0..2u8 {
            let id = grow_id(3);
            let boot = GrowId::decode(&id).unwrap().bootstrap;
            let seen: Vec<(usize, Vec<u8>)> = std::thread::scope(|s| {
                let mut hs = Vec::new();
                for (r, bs) in parents.iter().enumerate() {
                    hs.push(s.spawn(move || {
                        let own = (r == 1).then_some(id);
                        let got = exchange_id(bs, own, own).expect("exchange");
                        assert_eq!(got, id, "rank {r} learns the coordinator's id");
                        let g = GrowId::decode(&got).expect("grow id");
                        let nbs = Bootstrap::init(&g.bootstrap, r, 5, timeout).expect("new bootstrap");
                        (nbs.rank(), nbs.all_gather(&[10 * round + r as u8]).expect("all-gather").concat())
                    }));
                }
                for new_rank in [3usize, 4] {
                    hs.push(s.spawn(move || {
                        let b = joining_id(&id, new_rank, 5).expect("new rank");
                        assert_eq!(b, boot);
                        let nbs = Bootstrap::init(&b, new_rank, 5, timeout).expect("new bootstrap");
                        (nbs.rank(), nbs.all_gather(&[10 * round + new_rank as u8]).expect("all-gather").concat())
                    }));
                }
                hs.into_iter().map(|h| h.join().expect("rank thread")).collect()
            });
            let want: Vec<u8> = (0..5).map(|r| 10 * round + r).collect();
            for (i, (rank, all)) in seen.iter().enumerate() {
                assert_eq!(*rank, i, "rank kept / taken");
                assert_eq!(all, &want, "round {round}: rank {i} sees every rank in order");
            }
        }
    }

    /// Without an id from ncclCommGetUniqueId, every existing rank fails alike and at once
    /// (none waits for a message that never comes).
    #[test]
    fn exchange_without_a_coordinator_fails_on_every_rank() {
        let parents = bootstrap::local_ranks(2);
        let codes: Vec<ResultCode> = std::thread::scope(|s| {
            let hs: Vec<_> = parents.iter().map(|bs| s.spawn(move || exchange_id(bs, None, None).unwrap_err().code)).collect();
            hs.into_iter().map(|h| h.join().expect("thread")).collect()
        });
        assert_eq!(codes, vec![ResultCode::InvalidUsage; 2]);
    }
}
