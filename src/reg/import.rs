//! The registration thread: maps what peers register and enters it in this rank's table.
//!
//! It runs on its own so that no call of the application ever waits for a mapping: a kernel that
//! finds a peer's offer not yet in the table declines it (kernels/colls/direct.cuh).

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::export::{kind_error, VmmImport};
use super::uds::{self, Received};
use super::wire::{Kind, Msg};
use crate::device_abi::{RegEntry, OX_REG_SLOTS};
use crate::error::{Error, Result};
use crate::gpu::ipc::ImportedBuffer;
use crate::gpu::{CtxGuard, Device};
use crate::log::Subsys;

/// Where the thread enters what it mapped: the kernels' table (`super::table::Table`), or a
/// plain array in the CPU tests.
pub trait Sink: Send + Sync + 'static {
    /// Enters `e` at byte offset `off`, generation last.
    fn publish(&self, off: usize, e: RegEntry) -> Result<()>;
    /// Clears the slot at `off` if it holds generation `gen`.
    fn retire(&self, off: usize, gen: u64) -> Result<()>;
}

/// A peer buffer as mapped here; unmapped on drop.
enum Mapping {
    Ipc { _buf: ImportedBuffer },
    Vmm { _map: VmmImport },
    Ptr,
}

pub struct Importer {
    wake: OwnedFd,
    thread: JoinHandle<()>,
}

impl Importer {
    /// `dev` None (CPU tests): only same-process pointers can be entered.
    pub fn start(dev: Option<&'static Device>, me: usize, nranks: usize, name: &str, table: Arc<dyn Sink>) -> Result<Importer> {
        let listener = uds::listen(name).map_err(|e| Error::system(format!("registration socket {name}: {e}")))?;
        // SAFETY: plain syscall; the result is a fresh descriptor we own.
        let wake = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if wake < 0 {
            return Err(Error::system(format!("eventfd: {}", std::io::Error::last_os_error())));
        }
        // SAFETY: eventfd returned a fresh descriptor.
        let wake = unsafe { OwnedFd::from_raw_fd(wake) };
        let wake_r = wake.try_clone().map_err(|e| Error::system(format!("dup: {e}")))?;
        let thread = std::thread::Builder::new()
            .name(format!("oxccl-reg-{me}"))
            .spawn(move || {
                if let Some(d) = dev {
                    crate::log::set_thread_device(d.ordinal);
                }
                // Mapping and unmapping peers' buffers must neither fail nor invalidate a graph
                // the application captures meanwhile in global mode on another thread.
                let _relaxed = dev.and_then(|_| crate::gpu::stream::RelaxedCapture::new().ok());
                let mut t = Thread { dev, me, nranks, table, listener, wake: wake_r, conns: Vec::new(), maps: HashMap::new() };
                t.run();
            })
            .map_err(|e| Error::system(format!("registration thread: {e}")))?;
        Ok(Importer { wake, thread })
    }

    /// Wakes the thread, which unmaps everything (or, with `unmap` false, because kernels may still
    /// use the mappings, leaves them mapped) and exits; waits for it.
    pub fn stop(self, unmap: bool) {
        let one: u64 = if unmap { 1 } else { 2 };
        // SAFETY: writes 8 bytes from a local to our eventfd.
        unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
        let _ = self.thread.join();
    }
}

struct Thread {
    dev: Option<&'static Device>,
    me: usize,
    nranks: usize,
    table: Arc<dyn Sink>,
    listener: OwnedFd,
    wake: OwnedFd,
    conns: Vec<OwnedFd>,
    maps: HashMap<(u32, u64), Mapping>,
}

impl Thread {
    fn run(&mut self) {
        loop {
            let mut fds = vec![
                libc::pollfd { fd: self.wake.as_raw_fd(), events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: self.listener.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            ];
            fds.extend(self.conns.iter().map(|c| libc::pollfd { fd: c.as_raw_fd(), events: libc::POLLIN, revents: 0 }));
            // SAFETY: fds is a valid array of its length; wait until something happens.
            let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
            if rc < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                break;
            }
            if fds[0].revents != 0 {
                let mut v: u64 = 0;
                // SAFETY: reads the eventfd's 8-byte counter into a local.
                unsafe { libc::read(self.wake.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
                if v >= 2 {
                    std::mem::forget(std::mem::take(&mut self.maps));
                }
                break;
            }
            if fds[1].revents != 0 {
                while let Ok(Some(c)) = uds::accept(&self.listener) {
                    self.conns.push(c);
                }
            }
            let mut closed = Vec::new();
            for i in 0..self.conns.len() {
                if fds.get(i + 2).is_none_or(|f| f.revents == 0) {
                    continue;
                }
                loop {
                    match uds::recv(&self.conns[i], Msg::BYTES + 1) {
                        Ok(Received::Msg(b, fd)) => self.handle(&b, fd),
                        Ok(Received::Empty) => break,
                        Ok(Received::Closed) | Err(_) => {
                            closed.push(i);
                            break;
                        }
                    }
                }
            }
            for i in closed.into_iter().rev() {
                self.conns.swap_remove(i);
            }
        }
        // Kernels no longer run on this communicator (the caller waited): unmap all.
        self.maps.clear();
    }

    fn handle(&mut self, b: &[u8], fd: Option<OwnedFd>) {
        let m = match Msg::decode(b) {
            Ok(m) if (m.rank as usize) < self.nranks && m.rank as usize != self.me => m,
            Ok(m) => {
                nccl_warn!("rank {}: registration message from unknown rank {}", self.me, m.rank);
                return;
            }
            Err(e) => {
                nccl_warn!("rank {}: {}", self.me, e.msg);
                return;
            }
        };
        let slot_off = ((m.rank as usize) * OX_REG_SLOTS + (m.gen % OX_REG_SLOTS as u64) as usize) * std::mem::size_of::<RegEntry>();
        if m.kind == Kind::Dead {
            if let Err(e) = self.table.retire(slot_off, m.gen) {
                nccl_warn!("rank {}: registration table: {}", self.me, e.msg);
            }
            self.maps.remove(&(m.rank, m.gen));
            nccl_info!(Subsys::Reg, "rank {}: rank {}'s registration {} retired", self.me, m.rank, m.gen);
            return;
        }
        match self.map(&m, fd) {
            Ok((local, mapping)) => {
                // The slot's previous registration is retired (its Dead message came first on
                // this connection).
                if let Err(e) = self.table.publish(slot_off, RegEntry { gen: m.gen, base: m.base, size: m.size, local }) {
                    nccl_warn!("rank {}: registration table: {}", self.me, e.msg);
                    return;
                }
                self.maps.insert((m.rank, m.gen), mapping);
                nccl_info!(Subsys::Reg, "rank {}: mapped rank {}'s registration {} ({:#x}, {} bytes) at {local:#x}", self.me, m.rank, m.gen, m.base, m.size);
            }
            Err(e) => nccl_info!(Subsys::Reg, "rank {}: cannot map rank {}'s registration {}: {}; its streams go through scratch", self.me, m.rank, m.gen, e.msg),
        }
    }

    fn map(&self, m: &Msg, fd: Option<OwnedFd>) -> Result<(u64, Mapping)> {
        if m.kind == Kind::Ptr {
            return Ok((m.base, Mapping::Ptr));
        }
        let dev = self.dev.ok_or_else(|| Error::internal("registration thread without a GPU"))?;
        let _g = CtxGuard::new(dev)?;
        match m.kind {
            Kind::Ipc => {
                let b = ImportedBuffer::open(dev, &m.handle)?;
                Ok((b.ptr, Mapping::Ipc { _buf: b }))
            }
            Kind::Fd => {
                let fd = fd.ok_or_else(|| kind_error(m.kind))?;
                let v = VmmImport::map(dev, &fd, m.size)?;
                Ok((v.ptr, Mapping::Vmm { _map: v }))
            }
            Kind::Ptr | Kind::Dead => Err(kind_error(m.kind)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A table of u64 words, as the kernels' table is laid out.
    struct Words(parking_lot::Mutex<Vec<u64>>);

    impl Sink for Words {
        fn publish(&self, off: usize, e: RegEntry) -> Result<()> {
            let mut w = self.0.lock();
            let i = off / 8;
            w[i + 1] = e.base;
            w[i + 2] = e.size;
            w[i + 3] = e.local;
            w[i] = e.gen;
            Ok(())
        }
        fn retire(&self, off: usize, gen: u64) -> Result<()> {
            let mut w = self.0.lock();
            if w[off / 8] == gen {
                w[off / 8] = 0;
            }
            Ok(())
        }
    }

    fn entry(t: &Words, rank: usize, gen: u64) -> [u64; 4] {
        let i = (rank * OX_REG_SLOTS + (gen % OX_REG_SLOTS as u64) as usize) * 4;
        let w = t.0.lock();
        [w[i], w[i + 1], w[i + 2], w[i + 3]]
    }

    fn wait_for(t: &Words, rank: usize, gen: u64, want: [u64; 4]) {
        let t0 = Instant::now();
        while entry(t, rank, gen) != want {
            assert!(t0.elapsed() < Duration::from_secs(10), "table entry never became {want:?}: {:?}", entry(t, rank, gen));
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn announcements_enter_and_leave_the_table_and_garbage_is_ignored() {
        let n = 3;
        let words = Arc::new(Words(parking_lot::Mutex::new(vec![0; n * OX_REG_SLOTS * 4])));
        let name = format!("oxccl-test-import-{}", std::process::id());
        let imp = Importer::start(None, 0, n, &name, words.clone()).expect("start");
        let c1 = uds::connect(&name, Duration::from_secs(2)).expect("rank 1 connects");
        let c2 = uds::connect(&name, Duration::from_secs(2)).expect("rank 2 connects");
        let ptr = |rank: u32, gen: u64, base: u64| Msg { kind: Kind::Ptr, rank, gen, base, size: 4096, handle: [0; 64] };
        uds::send(&c1, &ptr(1, 7, 0x7000).encode(), None).unwrap();
        uds::send(&c2, &ptr(2, 7, 0x9000).encode(), None).unwrap();
        wait_for(&words, 1, 7, [7, 0x7000, 4096, 0x7000]);
        wait_for(&words, 2, 7, [7, 0x9000, 4096, 0x9000]);
        // Not entered: from this rank itself, from a rank outside the communicator, garbage,
        // and a descriptor-less cuMem announcement (no GPU here: it fails, as a bad one would).
        uds::send(&c1, &ptr(0, 8, 0x1000).encode(), None).unwrap();
        uds::send(&c1, &ptr(5, 8, 0x1000).encode(), None).unwrap();
        uds::send(&c1, b"not a registration message", None).unwrap();
        uds::send(&c1, &Msg { kind: Kind::Fd, ..ptr(1, 9, 0x2000) }.encode(), None).unwrap();
        // A retirement of rank 1's generation 7 clears it, and only it.
        uds::send(&c1, &Msg::dead(1, 7).encode(), None).unwrap();
        wait_for(&words, 1, 7, [0, 0x7000, 4096, 0x7000]);
        assert_eq!(entry(&words, 2, 7)[0], 7, "rank 2's registration stays");
        assert_eq!(entry(&words, 0, 8)[0], 0);
        assert_eq!(entry(&words, 1, 9)[0], 0);
        // A retirement of a generation the slot no longer holds changes nothing.
        uds::send(&c2, &Msg::dead(2, 7 + OX_REG_SLOTS as u64).encode(), None).unwrap();
        // A peer that goes away does not stop the thread: the other connection still works.
        drop(c1);
        uds::send(&c2, &ptr(2, 11, 0xb000).encode(), None).unwrap();
        wait_for(&words, 2, 11, [11, 0xb000, 4096, 0xb000]);
        assert_eq!(entry(&words, 2, 7)[0], 7);
        imp.stop(true);
        assert!(uds::connect(&name, Duration::from_secs(1)).is_err(), "the socket goes with the thread");
    }
}
