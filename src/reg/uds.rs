//! Unix seqpacket sockets in the abstract namespace: one message per send, message boundaries
//! kept, and a file descriptor may travel with a message (SCM_RIGHTS). std has no seqpacket
//! sockets nor stable ancillary data, hence libc.
//!
//! An abstract name is reachable by every process in the network namespace, whatever its user,
//! and what crosses these sockets maps GPU memory (ours into the peer, the peer's into ours). So
//! both ends check the other's credentials (SO_PEERCRED): only a process of this process's
//! effective user is accepted or connected to. Processes of the same user can already read each
//! other's memory (ptrace), so the user is the boundary that matters.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn abstract_addr(name: &str) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = name.as_bytes();
    if bytes.len() + 1 > a.sun_path.len() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "socket name too long"));
    }
    // sun_path[0] = 0 puts the name in the abstract namespace: no file, gone with the socket.
    for (d, s) in a.sun_path[1..].iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + bytes.len();
    Ok((a, len as libc::socklen_t))
}

fn socket(nonblocking: bool) -> io::Result<OwnedFd> {
    let ty = libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | if nonblocking { libc::SOCK_NONBLOCK } else { 0 };
    // SAFETY: plain syscall; the result is a fresh descriptor we own.
    let fd = cvt(unsafe { libc::socket(libc::AF_UNIX, ty, 0) })?;
    // SAFETY: fd was just returned by socket() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A non-blocking listener bound to `name`.
pub fn listen(name: &str) -> io::Result<OwnedFd> {
    let s = socket(true)?;
    let (a, len) = abstract_addr(name)?;
    // SAFETY: a/len describe a valid sockaddr_un.
    cvt(unsafe { libc::bind(s.as_raw_fd(), (&a as *const libc::sockaddr_un).cast(), len) })?;
    // SAFETY: plain syscall on our socket.
    cvt(unsafe { libc::listen(s.as_raw_fd(), 64) })?;
    Ok(s)
}

/// The user id of the process at the other end of a connected socket (for a connection, its
/// creator's at connect(); for a listener's peer, the listener's at listen()).
pub fn peer_uid(sock: &OwnedFd) -> io::Result<u32> {
    // SAFETY: ucred is plain old data; all-zero is valid.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: cred/len describe a buffer of the size passed.
    cvt(unsafe { libc::getsockopt(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, (&mut cred as *mut libc::ucred).cast(), &mut len) })?;
    Ok(cred.uid)
}

fn my_uid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// A new non-blocking connection from `listener`, if one is waiting. A connection from a process
/// of another user is closed with a warning and skipped.
pub fn accept(listener: &OwnedFd) -> io::Result<Option<OwnedFd>> {
    loop {
        // SAFETY: plain syscall; null address pointers are allowed.
        let rc = unsafe {
            libc::accept4(listener.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut(), libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
        };
        let s = match cvt(rc) {
            // SAFETY: accept4 returned a fresh descriptor.
            Ok(fd) => unsafe { OwnedFd::from_raw_fd(fd) },
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) => return Err(e),
        };
        match peer_uid(&s) {
            Ok(uid) if uid == my_uid() => return Ok(Some(s)),
            Ok(uid) => nccl_warn!("local socket: refused a connection from user {uid} (not this process's user)"),
            Err(e) => nccl_warn!("local socket: refused a connection whose credentials could not be read: {e}"),
        }
    }
}

/// A blocking connection to `name`; sends give up after `timeout`.
pub fn connect(name: &str, timeout: Duration) -> io::Result<OwnedFd> {
    let s = socket(false)?;
    let (a, len) = abstract_addr(name)?;
    // SAFETY: a/len describe a valid sockaddr_un.
    cvt(unsafe { libc::connect(s.as_raw_fd(), (&a as *const libc::sockaddr_un).cast(), len) })?;
    if peer_uid(&s)? != my_uid() {
        return Err(io::Error::new(io::ErrorKind::PermissionDenied, format!("socket {name} belongs to another user")));
    }
    let tv = libc::timeval { tv_sec: timeout.as_secs() as libc::time_t, tv_usec: timeout.subsec_micros() as libc::suseconds_t };
    // SAFETY: tv is a valid timeval of the size passed.
    cvt(unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    })?;
    Ok(s)
}

/// Makes a connected socket non-blocking (as `accept` makes those it returns).
pub fn set_nonblocking(sock: &OwnedFd) -> io::Result<()> {
    // SAFETY: plain fcntl calls on a descriptor the caller owns.
    let fl = cvt(unsafe { libc::fcntl(sock.as_raw_fd(), libc::F_GETFL) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(sock.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) })?;
    Ok(())
}

/// Sends one message, with `fd` attached if given.
pub fn send(sock: &OwnedFd, msg: &[u8], fd: Option<RawFd>) -> io::Result<()> {
    let mut iov = libc::iovec { iov_base: msg.as_ptr() as *mut libc::c_void, iov_len: msg.len() };
    // Room for one descriptor's control message, u64-aligned.
    let mut cbuf = [0u64; 4];
    // SAFETY: msghdr is plain old data; all-zero is valid.
    let mut mh: libc::msghdr = unsafe { std::mem::zeroed() };
    mh.msg_iov = &mut iov;
    mh.msg_iovlen = 1;
    if let Some(fd) = fd {
        // SAFETY: CMSG_SPACE is a pure computation.
        let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
        assert!(space <= std::mem::size_of_val(&cbuf));
        mh.msg_control = cbuf.as_mut_ptr().cast();
        mh.msg_controllen = space as _;
        // SAFETY: msg_control points at `space` bytes we own; CMSG_FIRSTHDR returns a header inside it.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&mh);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
        }
    }
    // SAFETY: mh describes buffers that outlive the call.
    let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &mh, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != msg.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short seqpacket send"));
    }
    Ok(())
}

/// What one receive got.
pub enum Received {
    /// A message, with the file descriptor it carried, if any.
    Msg(Vec<u8>, Option<OwnedFd>),
    /// Nothing waiting (non-blocking socket).
    Empty,
    /// The peer closed the connection.
    Closed,
}

/// Receives one message of at most `max` bytes and the descriptor sent with it, if any.
pub fn recv(sock: &OwnedFd, max: usize) -> io::Result<Received> {
    let mut buf = vec![0u8; max];
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut cbuf = [0u64; 4];
    // SAFETY: msghdr is plain old data; all-zero is valid.
    let mut mh: libc::msghdr = unsafe { std::mem::zeroed() };
    mh.msg_iov = &mut iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cbuf.as_mut_ptr().cast();
    mh.msg_controllen = std::mem::size_of_val(&cbuf) as _;
    // SAFETY: mh describes buffers that outlive the call; CLOEXEC for any received descriptor.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut mh, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::WouldBlock { Ok(Received::Empty) } else { Err(e) };
    }
    if n == 0 {
        return Ok(Received::Closed);
    }
    let mut fd = None;
    // SAFETY: walking the control messages the kernel wrote into cbuf.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&mh);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let raw = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<RawFd>());
                fd = Some(OwnedFd::from_raw_fd(raw));
            }
            c = libc::CMSG_NXTHDR(&mh, c);
        }
    }
    if mh.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "truncated registration message"));
    }
    buf.truncate(n as usize);
    Ok(Received::Msg(buf, fd))
}

/// One all-to-some exchange of descriptors: sends `mine` (with `me`, this rank's number) to the
/// listener `name_of(r)` of every rank r of `to`, and receives one descriptor from every rank of
/// `from` on `listener`, within `timeout`. `listener` must be bound before the ranks of `from`
/// can try to connect (the callers put a bootstrap exchange in between); a seqpacket connection
/// takes one message before it is accepted, so no send waits for the peer's accept, and ranks
/// exchanging with each other never wait in a cycle. `what` names the caller in errors
/// (ncclSystemError: a peer that connects too late, sends twice or sends something else).
/// The descriptors in the order they came, with their senders.
#[allow(clippy::too_many_arguments)]
pub fn exchange_fds(
    listener: &OwnedFd,
    name_of: impl Fn(usize) -> String,
    me: usize,
    mine: Option<RawFd>,
    to: &[usize],
    from: &[usize],
    timeout: Duration,
    what: &str,
) -> crate::error::Result<Vec<(usize, OwnedFd)>> {
    use crate::error::Error;
    let mut sent = Vec::new();
    if let Some(fd) = mine {
        for &r in to {
            let s = connect(&name_of(r), Duration::from_secs(5)).map_err(|e| Error::system(format!("{what}: connecting to rank {r}: {e}")))?;
            send(&s, &(me as u32).to_le_bytes(), Some(fd)).map_err(|e| Error::system(format!("{what}: sending to rank {r}: {e}")))?;
            sent.push(s);
        }
    }
    let mut got: Vec<(usize, OwnedFd)> = Vec::new();
    let mut pending: Vec<OwnedFd> = Vec::new();
    let deadline = std::time::Instant::now() + timeout;
    while got.len() < from.len() {
        if std::time::Instant::now() > deadline {
            let missing: Vec<String> = from.iter().filter(|r| !got.iter().any(|(g, _)| g == *r)).map(|r| r.to_string()).collect();
            return Err(Error::system(format!("{what}: no descriptor from rank(s) {} within {timeout:?}", missing.join(", "))));
        }
        let mut progress = false;
        if let Some(s) = accept(listener).map_err(|e| Error::io(&format!("{what}: accept"), &e))? {
            pending.push(s);
            progress = true;
        }
        let mut i = 0;
        while i < pending.len() {
            match recv(&pending[i], 16).map_err(|e| Error::io(&format!("{what}: receive"), &e))? {
                Received::Msg(m, Some(fd)) if m.len() == 4 => {
                    let r = u32::from_le_bytes([m[0], m[1], m[2], m[3]]) as usize;
                    if !from.contains(&r) || got.iter().any(|(g, _)| *g == r) {
                        return Err(Error::system(format!("{what}: unexpected descriptor from rank {r}")));
                    }
                    got.push((r, fd));
                    pending.swap_remove(i);
                    progress = true;
                }
                Received::Empty => i += 1,
                _ => return Err(Error::system(format!("{what}: a peer's socket sent something other than one descriptor"))),
            }
        }
        if !progress {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    drop(sent);
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};

    #[test]
    fn messages_and_descriptors_cross_a_socket() {
        let name = format!("oxccl-test-uds-{}", std::process::id());
        let l = listen(&name).expect("listen");
        assert!(accept(&l).unwrap().is_none(), "nobody connected yet");
        let c = connect(&name, Duration::from_secs(2)).expect("connect");
        let s = accept(&l).unwrap().expect("a connection waits");
        assert!(matches!(recv(&s, 64).unwrap(), Received::Empty));

        // A descriptor sent with a message opens the same file on the other side.
        let mut f = tempfile_in_tmp();
        f.write_all(b"zero-copy").unwrap();
        send(&c, b"first", Some(f.as_raw_fd())).unwrap();
        send(&c, b"second", None).unwrap();
        match recv(&s, 64).unwrap() {
            Received::Msg(m, Some(fd)) => {
                assert_eq!(m, b"first");
                let mut g = std::fs::File::from(fd);
                g.rewind().unwrap();
                let mut text = String::new();
                g.read_to_string(&mut text).unwrap();
                assert_eq!(text, "zero-copy");
            }
            _ => panic!("expected a message with a descriptor"),
        }
        match recv(&s, 64).unwrap() {
            Received::Msg(m, None) => assert_eq!(m, b"second", "boundaries kept"),
            _ => panic!("expected a plain message"),
        }
        drop(c);
        assert!(matches!(recv(&s, 64).unwrap(), Received::Closed));
        assert!(connect(&format!("{name}-nobody"), Duration::from_secs(1)).is_err());
    }

    #[test]
    fn peers_are_of_this_user() {
        let name = format!("oxccl-test-uds-cred-{}", std::process::id());
        let l = listen(&name).expect("listen");
        let c = connect(&name, Duration::from_secs(2)).expect("connect");
        let s = accept(&l).unwrap().expect("a connection waits");
        assert_eq!(peer_uid(&s).unwrap(), my_uid());
        assert_eq!(peer_uid(&c).unwrap(), my_uid());
    }

    /// A process of another user can reach the abstract name but is refused. Needs root (to
    /// become another user in a child); elsewhere the refusal path has no other user to test with.
    #[test]
    fn another_users_connection_is_refused() {
        if my_uid() != 0 {
            eprintln!("another_users_connection_is_refused: not root, nothing to test");
            return;
        }
        let name = format!("oxccl-test-uds-other-{}", std::process::id());
        let l = listen(&name).expect("listen");
        let (a, len) = abstract_addr(&name).unwrap();
        // The child only makes async-signal-safe calls: it becomes `nobody`, connects, and exits
        // with 0 if the connection was made.
        // SAFETY: fork in a test; the child runs only syscalls before _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            // SAFETY: plain syscalls in the child.
            unsafe {
                if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                    libc::_exit(2);
                }
                let fd = libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0);
                let ok = fd >= 0 && libc::connect(fd, (&a as *const libc::sockaddr_un).cast(), len) == 0;
                libc::_exit(if ok { 0 } else { 1 });
            }
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the other user's connect went through: {status}");
        assert!(accept(&l).unwrap().is_none(), "another user's connection must be refused");
        // A connection of our own user behind it is still accepted.
        let _c = connect(&name, Duration::from_secs(2)).expect("connect");
        assert!(accept(&l).unwrap().is_some());
    }

    /// Three ranks in threads, each sending its own file to the others and hearing from both
    /// in whatever order they come; then a rank nobody sends to times out naming who is missing,
    /// and a descriptor from a rank outside `from` is refused.
    #[test]
    fn ranks_exchange_descriptors_all_to_all() {
        let name = |r: usize| format!("oxccl-test-xfd-{}-{r}", std::process::id());
        let listeners: Vec<OwnedFd> = (0..3).map(|r| listen(&name(r)).expect("listen")).collect();
        let got: Vec<Vec<(usize, String)>> = std::thread::scope(|s| {
            let ts: Vec<_> = (0..3usize)
                .map(|me| {
                    let l = &listeners[me];
                    s.spawn(move || {
                        let mut f = tempfile_named(&format!("x{me}"));
                        f.write_all(format!("rank {me}").as_bytes()).unwrap();
                        let others: Vec<usize> = (0..3).filter(|&r| r != me).collect();
                        let fds = exchange_fds(l, name, me, Some(f.as_raw_fd()), &others, &others, Duration::from_secs(10), "test").expect("exchange");
                        fds.into_iter()
                            .map(|(r, fd)| {
                                let mut g = std::fs::File::from(fd);
                                g.seek(std::io::SeekFrom::Start(0)).unwrap();
                                let mut t = String::new();
                                g.read_to_string(&mut t).unwrap();
                                (r, t)
                            })
                            .collect()
                    })
                })
                .collect();
            ts.into_iter().map(|t| t.join().unwrap()).collect()
        });
        for (me, mut v) in got.into_iter().enumerate() {
            v.sort();
            let want: Vec<(usize, String)> = (0..3).filter(|&r| r != me).map(|r| (r, format!("rank {r}"))).collect();
            assert_eq!(v, want, "rank {me}");
        }
        let e = exchange_fds(&listeners[0], name, 0, None, &[], &[2], Duration::from_millis(50), "test").unwrap_err();
        assert!(e.msg.contains("no descriptor from rank(s) 2"), "{}", e.msg);
        let f = tempfile_named("stray");
        exchange_fds(&listeners[2], name, 1, Some(f.as_raw_fd()), &[0], &[], Duration::from_secs(1), "test").expect("a send alone");
        let e = exchange_fds(&listeners[0], name, 0, None, &[], &[2], Duration::from_secs(5), "test").unwrap_err();
        assert!(e.msg.contains("unexpected descriptor from rank 1"), "{}", e.msg);
    }

    fn tempfile_named(tag: &str) -> std::fs::File {
        let p = std::env::temp_dir().join(format!("oxccl-uds-{}-{tag}", std::process::id()));
        let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&p).unwrap();
        let _ = std::fs::remove_file(&p);
        f
    }

    fn tempfile_in_tmp() -> std::fs::File {
        let p = std::env::temp_dir().join(format!("oxccl-uds-{}", std::process::id()));
        let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&p).unwrap();
        let _ = std::fs::remove_file(&p);
        f
    }
}
