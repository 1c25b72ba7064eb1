//! Choosing the network interface the bootstrap listens on, as NCCL does:
//! NCCL_SOCKET_IFNAME (comma-separated name prefixes; `^` excludes them, `=` matches exact names)
//! and NCCL_SOCKET_FAMILY (AF_INET / AF_INET6). Without NCCL_SOCKET_IFNAME the order is: `ib*`,
//! then an interface on the root's subnet, then anything but docker*/lo*/virbr*, then docker*,
//! then lo. Only interfaces that are up and have an address count.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};

use crate::error::{Error, Result};
use crate::log::Subsys;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Interface {
    pub name: String,
    pub ip: IpAddr,
    pub netmask: Option<IpAddr>,
    /// IPv6 scope id (the interface index); needed to use link-local addresses.
    pub scope_id: u32,
}

impl Interface {
    /// The address to listen on: this interface's IP, ephemeral port.
    pub(crate) fn listen_addr(&self) -> SocketAddr {
        match self.ip {
            IpAddr::V4(ip) => SocketAddr::new(IpAddr::V4(ip), 0),
            IpAddr::V6(ip) => SocketAddr::V6(SocketAddrV6::new(ip, 0, 0, self.scope_id)),
        }
    }

    fn same_subnet(&self, other: IpAddr) -> bool {
        let Some(mask) = self.netmask else { return false };
        let masked_eq = |a: &[u8], b: &[u8], m: &[u8]| a.iter().zip(b).zip(m).all(|((x, y), m)| x & m == y & m);
        match (self.ip, other, mask) {
            (IpAddr::V4(a), IpAddr::V4(b), IpAddr::V4(m)) => masked_eq(&a.octets(), &b.octets(), &m.octets()),
            (IpAddr::V6(a), IpAddr::V6(b), IpAddr::V6(m)) => masked_eq(&a.octets(), &b.octets(), &m.octets()),
            _ => false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    V4,
    V6,
}

impl Family {
    fn matches(self, ip: IpAddr) -> bool {
        matches!((self, ip), (Family::V4, IpAddr::V4(_)) | (Family::V6, IpAddr::V6(_)))
    }
}

/// An NCCL_SOCKET_IFNAME-style list.
struct IfFilter {
    exclude: bool,
    exact: bool,
    names: Vec<String>,
}

impl IfFilter {
    fn parse(spec: &str) -> IfFilter {
        let (exclude, rest) = match spec.strip_prefix('^') {
            Some(r) => (true, r),
            None => (false, spec),
        };
        let (exact, rest) = match rest.strip_prefix('=') {
            Some(r) => (true, r),
            None => (false, rest),
        };
        let names = rest.split(',').map(str::trim).filter(|n| !n.is_empty()).map(String::from).collect();
        IfFilter { exclude, exact, names }
    }

    fn accepts(&self, name: &str) -> bool {
        let listed = self.names.iter().any(|n| if self.exact { name == n } else { name.starts_with(n.as_str()) });
        listed != self.exclude
    }
}

/// The interface to use among `ifaces` (in getifaddrs order). Pure, for testing.
pub(crate) fn choose<'a>(
    ifaces: &'a [Interface],
    ifname: Option<&str>,
    family: Option<Family>,
    root_hint: Option<IpAddr>,
) -> Option<&'a Interface> {
    let usable = || ifaces.iter().filter(move |i| family.is_none_or(|f| f.matches(i.ip)));
    let first_matching = |spec: &str| {
        let filter = IfFilter::parse(spec);
        usable().find(|i| filter.accepts(&i.name))
    };
    if let Some(spec) = ifname {
        return first_matching(spec);
    }
    first_matching("ib")
        .or_else(|| root_hint.and_then(|hint| usable().find(|i| i.same_subnet(hint))))
        .or_else(|| first_matching("^docker,lo,virbr"))
        .or_else(|| first_matching("docker"))
        .or_else(|| first_matching("lo"))
}

fn family_from_env() -> Option<Family> {
    let v = crate::config::env("NCCL_SOCKET_FAMILY")?;
    match v.as_str() {
        "AF_INET" => Some(Family::V4),
        "AF_INET6" => Some(Family::V6),
        other => {
            nccl_warn!("NCCL_SOCKET_FAMILY set to unsupported value {other}, using any address family");
            None
        }
    }
}

/// The address (port 0) this process's bootstrap sockets should listen on.
/// `root_hint` is the root's address, used to prefer an interface on its subnet.
pub(crate) fn bootstrap_listen_addr(root_hint: Option<IpAddr>) -> Result<SocketAddr> {
    let ifaces = list_interfaces()?;
    let ifname = crate::config::env("NCCL_SOCKET_IFNAME");
    let family = family_from_env();
    let chosen = choose(&ifaces, ifname.as_deref(), family, root_hint).ok_or_else(|| {
        Error::system(format!(
            "bootstrap: no usable network interface (NCCL_SOCKET_IFNAME={}, NCCL_SOCKET_FAMILY={}; found: {})",
            ifname.as_deref().unwrap_or("unset"),
            family.map_or("any", |f| if f == Family::V4 { "AF_INET" } else { "AF_INET6" }),
            ifaces.iter().map(|i| format!("{}:{}", i.name, i.ip)).collect::<Vec<_>>().join(", ")
        ))
    })?;
    nccl_info!(Subsys::Bootstrap, "Bootstrap: using {}:{}", chosen.name, chosen.ip);
    Ok(chosen.listen_addr())
}

/// Interfaces that are up and have an IPv4 or IPv6 address, in getifaddrs order.
pub(crate) fn list_interfaces() -> Result<Vec<Interface>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(Error::io("bootstrap: getifaddrs", &std::io::Error::last_os_error()));
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, which stays valid until freed.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_flags & (libc::IFF_UP as libc::c_uint) == 0 || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: the address pointers are null or point at sockaddrs of the family they declare.
        let Some((ip, scope_id)) = (unsafe { sockaddr_ip(ifa.ifa_addr) }) else { continue };
        let netmask = unsafe { sockaddr_ip(ifa.ifa_netmask) }.map(|(m, _)| m);
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }.to_string_lossy().into_owned();
        out.push(Interface { name, ip, netmask, scope_id });
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// The IP (and IPv6 scope id) of a sockaddr, if it is IPv4 or IPv6.
///
/// # Safety
/// `sa` must be null or point at a valid sockaddr whose size matches its family.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<(IpAddr, u32)> {
    if sa.is_null() {
        return None;
    }
    match i32::from((*sa).sa_family) {
        libc::AF_INET => {
            let sin = &*(sa as *const libc::sockaddr_in);
            Some((IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))), 0))
        }
        libc::AF_INET6 => {
            let sin6 = &*(sa as *const libc::sockaddr_in6);
            Some((IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)), sin6.sin6_scope_id))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(name: &str, ip: &str, mask: &str) -> Interface {
        Interface { name: name.into(), ip: ip.parse().expect("ip"), netmask: mask.parse().ok(), scope_id: 0 }
    }

    fn pick(ifaces: &[Interface], ifname: Option<&str>, family: Option<Family>, hint: Option<&str>) -> Option<String> {
        choose(ifaces, ifname, family, hint.map(|h| h.parse().expect("hint"))).map(|i| format!("{}/{}", i.name, i.ip))
    }

    #[test]
    fn default_order_like_nccl() {
        let all = vec![
            iface("lo", "127.0.0.1", "255.0.0.0"),
            iface("docker0", "172.17.0.1", "255.255.0.0"),
            iface("virbr0", "192.168.122.1", "255.255.255.0"),
            iface("eth0", "10.0.0.2", "255.255.255.0"),
            iface("eth1", "10.1.0.2", "255.255.255.0"),
            iface("eth0", "fd00::2", "ffff:ffff:ffff:ffff::"),
            iface("ib0", "10.9.0.2", "255.255.255.0"),
        ];
        assert_eq!(pick(&all, None, None, None).as_deref(), Some("ib0/10.9.0.2"));
        let no_ib = &all[..6];
        assert_eq!(pick(no_ib, None, None, None).as_deref(), Some("eth0/10.0.0.2"));
        assert_eq!(pick(no_ib, None, None, Some("10.1.0.77")).as_deref(), Some("eth1/10.1.0.2"));
        assert_eq!(pick(no_ib, None, None, Some("127.0.0.1")).as_deref(), Some("lo/127.0.0.1"));
        assert_eq!(pick(no_ib, None, Some(Family::V6), None).as_deref(), Some("eth0/fd00::2"));
        assert_eq!(pick(&all[..3], None, None, None).as_deref(), Some("docker0/172.17.0.1"));
        assert_eq!(pick(&all[..1], None, None, None).as_deref(), Some("lo/127.0.0.1"));
        assert_eq!(pick(&all[..1], None, Some(Family::V6), None), None);
        assert_eq!(pick(&[], None, None, None), None);
    }

    #[test]
    fn ifname_filters() {
        let all = vec![
            iface("lo", "127.0.0.1", ""),
            iface("eth10", "10.0.0.10", ""),
            iface("eth1", "10.0.0.1", ""),
            iface("enp1", "10.0.0.3", ""),
        ];
        assert_eq!(pick(&all, Some("eth1"), None, None).as_deref(), Some("eth10/10.0.0.10"));
        assert_eq!(pick(&all, Some("=eth1"), None, None).as_deref(), Some("eth1/10.0.0.1"));
        assert_eq!(pick(&all, Some("^lo,eth"), None, None).as_deref(), Some("enp1/10.0.0.3"));
        assert_eq!(pick(&all, Some("^=lo,eth10"), None, None).as_deref(), Some("eth1/10.0.0.1"));
        assert_eq!(pick(&all, Some("enp,lo"), None, None).as_deref(), Some("lo/127.0.0.1"));
        assert_eq!(pick(&all, Some("ib"), None, None), None);
    }

    #[test]
    fn real_interfaces_include_loopback() {
        let ifaces = list_interfaces().expect("getifaddrs");
        assert!(ifaces.iter().any(|i| i.name == "lo" && i.ip.is_loopback()), "{ifaces:?}");
        let v6 = Interface { name: "x".into(), ip: "fe80::1".parse().expect("ip"), netmask: None, scope_id: 4 };
        assert!(matches!(v6.listen_addr(), SocketAddr::V6(a) if a.scope_id() == 4 && a.port() == 0));
    }
}
