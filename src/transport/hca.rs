//! NCCL_IB_HCA: which RDMA devices (and ports) the InfiniBand transport may use.
//!
//! Grammar (NCCL's): a comma-separated list of `device[:port]` entries. Entries match device
//! names by prefix (`mlx5` matches `mlx5_0` and `mlx5_1`); a leading `=` asks for exact names; a
//! leading `^` inverts the list (every device except those listed); both may be combined as
//! `^=mlx5_0`. An entry without a port matches every port of its devices. Examples:
//! `mlx5_0:1,mlx5_1:1`, `^mlx5_2`, `=mlx5_0`.
//!
//! Always compiled (pure, no verbs), so the default build tests it; `ib` applies it.

use crate::error::{Error, Result};

/// One `device[:port]` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HcaEntry {
    /// The RDMA device name, or its prefix unless the filter is exact (`mlx5`, `mlx5_0`).
    pub name: String,
    /// None: every port.
    pub port: Option<u8>,
}

/// A parsed NCCL_IB_HCA.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HcaFilter {
    /// `^`: keep the devices that match no entry.
    pub exclude: bool,
    /// `=`: names must equal an entry's name, not merely start with it.
    pub exact: bool,
    /// The listed entries, in order (empty ones dropped).
    pub entries: Vec<HcaEntry>,
}

impl HcaFilter {
    /// Parses the variable's value. Surrounding whitespace (of the value and of each entry) is
    /// ignored, as are empty entries; a malformed port is an error (NCCL would silently read it
    /// as port 0 and match nothing).
    pub fn parse(spec: &str) -> Result<HcaFilter> {
        let mut rest = spec.trim();
        let mut f = HcaFilter::default();
        if let Some(r) = rest.strip_prefix('^') {
            f.exclude = true;
            rest = r.trim_start();
        }
        if let Some(r) = rest.strip_prefix('=') {
            f.exact = true;
            rest = r.trim_start();
        }
        for item in rest.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, port) = match item.split_once(':') {
                None => (item, None),
                Some((n, p)) => {
                    let port = p.trim().parse::<u8>().ok().filter(|&p| p > 0).ok_or_else(|| {
                        Error::invalid_usage(format!("NCCL_IB_HCA={spec}: `{item}` has no valid port number (1..=255)"))
                    })?;
                    (n.trim(), Some(port))
                }
            };
            if name.is_empty() {
                return Err(Error::invalid_usage(format!("NCCL_IB_HCA={spec}: `{item}` names no device")));
            }
            f.entries.push(HcaEntry { name: name.to_string(), port });
        }
        Ok(f)
    }

    fn entry_matches(&self, e: &HcaEntry, name: &str, port: u8) -> bool {
        let name_ok = if self.exact { name == e.name } else { name.starts_with(e.name.as_str()) };
        name_ok && e.port.is_none_or(|p| p == port)
    }

    /// Whether port `port` of device `name` may be used. An empty list keeps everything (also
    /// after `^` or `=` alone).
    pub fn allows(&self, name: &str, port: u8) -> bool {
        if self.entries.is_empty() {
            return true;
        }
        let listed = self.entries.iter().any(|e| self.entry_matches(e, name, port));
        listed != self.exclude
    }

    /// The candidates (device name, port) that may be used, in their original order.
    pub fn keep<T: AsRef<str>>(&self, candidates: &[(T, u8)]) -> Vec<(String, u8)> {
        candidates.iter().filter(|(n, p)| self.allows(n.as_ref(), *p)).map(|(n, p)| (n.as_ref().to_string(), *p)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CANDS: [(&str, u8); 6] = [("mlx5_0", 1), ("mlx5_1", 1), ("mlx5_1", 2), ("mlx5_10", 1), ("mlx5_2", 1), ("bnxt_re0", 1)];

    fn keep(spec: &str) -> Vec<String> {
        HcaFilter::parse(spec).unwrap().keep(&CANDS).into_iter().map(|(n, p)| format!("{n}:{p}")).collect()
    }

    #[test]
    fn empty_keeps_everything() {
        for spec in ["", "   ", ",", "^", "=", "^=", " , ,"] {
            assert_eq!(keep(spec).len(), CANDS.len(), "{spec:?}");
        }
    }

    #[test]
    fn prefix_match() {
        assert_eq!(keep("mlx5_1"), ["mlx5_1:1", "mlx5_1:2", "mlx5_10:1"]);
        assert_eq!(keep("mlx5"), ["mlx5_0:1", "mlx5_1:1", "mlx5_1:2", "mlx5_10:1", "mlx5_2:1"]);
        assert_eq!(keep("bnxt"), ["bnxt_re0:1"]);
        assert!(keep("mlx4").is_empty());
    }

    #[test]
    fn exact_match() {
        assert_eq!(keep("=mlx5_1"), ["mlx5_1:1", "mlx5_1:2"]);
        assert!(keep("=mlx5").is_empty());
        assert_eq!(keep("=mlx5_0,mlx5_10"), ["mlx5_0:1", "mlx5_10:1"]);
    }

    #[test]
    fn exclusion() {
        assert_eq!(keep("^mlx5_2"), ["mlx5_0:1", "mlx5_1:1", "mlx5_1:2", "mlx5_10:1", "bnxt_re0:1"]);
        // A prefix excludes every device it starts.
        assert_eq!(keep("^mlx5_1"), ["mlx5_0:1", "mlx5_2:1", "bnxt_re0:1"]);
        // Exact exclusion spares mlx5_10.
        assert_eq!(keep("^=mlx5_1"), ["mlx5_0:1", "mlx5_10:1", "mlx5_2:1", "bnxt_re0:1"]);
        assert_eq!(keep("^mlx5_1:2"), ["mlx5_0:1", "mlx5_1:1", "mlx5_10:1", "mlx5_2:1", "bnxt_re0:1"]);
    }

    #[test]
    fn ports() {
        assert_eq!(keep("mlx5_0:1,mlx5_1:1"), ["mlx5_0:1", "mlx5_1:1", "mlx5_10:1"]);
        assert_eq!(keep("=mlx5_1:2"), ["mlx5_1:2"]);
        assert!(keep("mlx5_0:2").is_empty());
        let f = HcaFilter::parse("=mlx5_0:1,mlx5_1").unwrap();
        assert_eq!(f.entries, vec![HcaEntry { name: "mlx5_0".into(), port: Some(1) }, HcaEntry { name: "mlx5_1".into(), port: None }]);
        assert!(f.exact && !f.exclude);
    }

    #[test]
    fn whitespace_is_ignored() {
        assert_eq!(keep("  mlx5_0 : 1 ,  mlx5_2 "), ["mlx5_0:1", "mlx5_2:1"]);
        assert_eq!(keep(" ^ = mlx5_0 , mlx5_1 , mlx5_10, mlx5_2"), ["bnxt_re0:1"]);
    }

    #[test]
    fn malformed_entries_are_errors() {
        for spec in ["mlx5_0:x", "mlx5_0:", "mlx5_0:0", "mlx5_0:256", ":1", "mlx5_0:-1"] {
            let e = HcaFilter::parse(spec).unwrap_err();
            assert_eq!(e.code, crate::error::ResultCode::InvalidUsage, "{spec}");
            assert!(e.msg.contains("NCCL_IB_HCA"), "{}", e.msg);
        }
    }
}
