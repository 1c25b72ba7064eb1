//! NCCL_PROTO and NCCL_ALGO: which protocols and algorithms each collective may use.
//!
//! Syntax (NCCL 2.28's): entries separated by `;`, each `[function:]list`; only the first entry may
//! omit the function, and then applies to all; a list is comma-separated names, or `^` followed by
//! names to exclude; names are case-insensitive; an unknown function or name is ncclInvalidUsage.
//! A function a list names (is "forced") gets exactly that list; functions no entry names keep
//! their defaults (everything enabled), as NCCL's `forced` flags do.
//!
//! Mapping onto oxccl: protocols LL and LL128 mean oxccl's packet algorithms, Simple its put-based
//! ones; where an AllReduce algorithm has an LL128-line form, that form needs LL128. Algorithms Ring, Tree and PAT admit oxccl's NVLink algorithms (which are neither rings nor
//! trees: all-pairs packets and put-based reduce-scatter/all-gather); NVLS, NVLSTree, CollnetDirect
//! and CollnetChain select nothing oxccl has. A collective left with no protocol or no algorithm
//! is ncclInvalidUsage when it is called, as in NCCL.

use crate::error::{Error, Result};

/// NCCL's function names, in its order.
pub const FUNCS: [&str; 5] = ["Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"];
/// NCCL's protocol names, in its order (NCCL_PROTO's elements).
pub const PROTOS: [&str; 3] = ["LL", "LL128", "Simple"];
/// NCCL's algorithm names, in its order (NCCL_ALGO's elements).
pub const ALGOS: [&str; 7] = ["Tree", "Ring", "CollnetDirect", "CollnetChain", "NVLS", "NVLSTree", "PAT"];

/// A collective NCCL_PROTO/NCCL_ALGO can name (index into FUNCS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Func {
    /// ncclBroadcast.
    Broadcast = 0,
    /// ncclReduce.
    Reduce = 1,
    /// ncclAllGather.
    AllGather = 2,
    /// ncclReduceScatter.
    ReduceScatter = 3,
    /// ncclAllReduce.
    AllReduce = 4,
}

/// Enabled flags per function (`[func][elem]`), and which functions the value named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    /// `[func][elem]`: whether the element (a protocol or algorithm) is allowed for the function.
    pub enabled: Vec<Vec<bool>>,
    /// `[func]`: whether the value named the function (else it kept NCCL's default).
    pub forced: Vec<bool>,
}

/// Parses one NCCL_PROTO/NCCL_ALGO value over `elems`.
pub fn parse_list(value: &str, elems: &[&str]) -> Result<Table> {
    let mut t = Table { enabled: vec![vec![true; elems.len()]; FUNCS.len()], forced: vec![false; FUNCS.len()] };
    for (i, entry) in value.split(';').enumerate() {
        if entry.is_empty() && i > 0 {
            continue;
        }
        let (prefix, list) = match entry.split_once(':') {
            Some((p, l)) => (Some(p), l),
            None if i == 0 => (None, entry),
            None => return Err(Error::invalid_usage(format!("All entries except the first must have a prefix: \"{value}\""))),
        };
        let (negate, list) = match list.strip_prefix('^') {
            Some(rest) => (true, rest),
            None => (false, list),
        };
        let mut names = Vec::new();
        for name in list.split(',').filter(|s| !s.is_empty()) {
            let e = elems
                .iter()
                .position(|x| x.eq_ignore_ascii_case(name))
                .ok_or_else(|| Error::invalid_usage(format!("Unrecognized element token \"{name}\" when parsing \"{value}\"")))?;
            names.push(e);
        }
        let funcs: Vec<usize> = match prefix {
            None => (0..FUNCS.len()).collect(),
            Some(p) => vec![FUNCS
                .iter()
                .position(|f| f.eq_ignore_ascii_case(p))
                .ok_or_else(|| Error::invalid_usage(format!("Unrecognized prefix token \"{p}\" when parsing \"{value}\"")))?],
        };
        for f in funcs {
            for (e, slot) in t.enabled[f].iter_mut().enumerate() {
                *slot = negate != names.contains(&e);
            }
            t.forced[f] |= !names.is_empty();
        }
    }
    Ok(t)
}

/// What NCCL_PROTO and NCCL_ALGO allow each collective, in oxccl's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allowed {
    /// Per function: packet algorithms allowed (LL or LL128 enabled).
    pub packets: [bool; 5],
    /// Per function: put-based algorithms allowed (Simple enabled).
    pub puts: [bool; 5],
    /// Per function: LL128 lines allowed where an algorithm has both forms (LL128 enabled, or
    /// NCCL_PROTO not given).
    pub lines: [bool; 5],
    /// Per function: some enabled algorithm maps to oxccl's (Ring, Tree or PAT).
    pub any_algo: [bool; 5],
}

impl Default for Allowed {
    fn default() -> Self {
        Allowed { packets: [true; 5], puts: [true; 5], lines: [true; 5], any_algo: [true; 5] }
    }
}

impl Allowed {
    /// The rules of NCCL_PROTO and NCCL_ALGO's values (None or empty: everything allowed).
    pub fn from_values(proto: Option<&str>, algo: Option<&str>) -> Result<Allowed> {
        let mut a = Allowed::default();
        if let Some(p) = proto.filter(|v| !v.is_empty()) {
            let t = parse_list(p, &PROTOS)?;
            for f in (0..FUNCS.len()).filter(|&f| t.forced[f]) {
                a.packets[f] = t.enabled[f][0] || t.enabled[f][1];
                a.puts[f] = t.enabled[f][2];
                a.lines[f] = t.enabled[f][1];
            }
        }
        if let Some(v) = algo.filter(|v| !v.is_empty()) {
            let t = parse_list(v, &ALGOS)?;
            for f in (0..FUNCS.len()).filter(|&f| t.forced[f]) {
                let row = &t.enabled[f];
                a.any_algo[f] = row[0] || row[1] || row[6];
            }
        }
        Ok(a)
    }

    /// (packets allowed, puts allowed) for `f`, or ncclInvalidUsage if nothing is.
    pub fn for_func(&self, f: Func) -> Result<(bool, bool)> {
        let i = f as usize;
        if !self.any_algo[i] || !(self.packets[i] || self.puts[i]) {
            return Err(Error::invalid_usage(format!(
                "NCCL_ALGO/NCCL_PROTO leave no algorithm or protocol for {}",
                FUNCS[i]
            )));
        }
        Ok((self.packets[i], self.puts[i]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ResultCode;

    #[test]
    fn nccl_documented_examples() {
        // Enable LL and Simple for all functions, everything except LL for allreduce.
        let t = parse_list("LL,Simple;allreduce:^LL", &PROTOS).unwrap();
        assert_eq!(t.enabled[Func::Broadcast as usize], vec![true, false, true]);
        assert_eq!(t.enabled[Func::AllReduce as usize], vec![false, true, true]);
        // Everything but LL128, only LL128 for allreduce.
        let t = parse_list("^LL128;allreduce:LL128", &PROTOS).unwrap();
        assert_eq!(t.enabled[Func::Reduce as usize], vec![true, false, true]);
        assert_eq!(t.enabled[Func::AllReduce as usize], vec![false, true, false]);
        let t = parse_list("ring,collnetdirect;allreduce:tree,collnetdirect;broadcast:ring", &ALGOS).unwrap();
        assert!(t.enabled[Func::AllGather as usize][1] && t.enabled[Func::AllGather as usize][2]);
        assert!(t.enabled[Func::AllReduce as usize][0] && !t.enabled[Func::AllReduce as usize][1]);
        assert_eq!(t.enabled[Func::Broadcast as usize].iter().filter(|x| **x).count(), 1);
        assert!(t.forced.iter().all(|f| *f));
    }

    #[test]
    fn errors_are_invalid_usage() {
        for bad in ["LL;Simple", "allreduce:LL;bogus:LL", "LL,Fast", "^Fast"] {
            assert_eq!(parse_list(bad, &PROTOS).unwrap_err().code, ResultCode::InvalidUsage, "{bad}");
        }
    }

    #[test]
    fn pytorch_deterministic_mode_keeps_everything_but_nvls() {
        let a = Allowed::from_values(None, Some("^NVLS")).unwrap();
        assert_eq!(a.for_func(Func::AllReduce).unwrap(), (true, true));
    }

    #[test]
    fn nothing_left_is_invalid_usage_only_for_that_function() {
        let a = Allowed::from_values(None, Some("allreduce:NVLS;broadcast:Ring")).unwrap();
        assert_eq!(a.for_func(Func::AllReduce).unwrap_err().code, ResultCode::InvalidUsage);
        assert!(a.for_func(Func::Broadcast).is_ok());
        assert!(a.for_func(Func::AllGather).is_ok(), "functions no entry names keep their defaults");
        let p = Allowed::from_values(Some("Simple"), None).unwrap();
        assert_eq!(p.for_func(Func::Reduce).unwrap(), (false, true));
        let p = Allowed::from_values(Some("allgather:^LL,LL128,Simple"), None).unwrap();
        assert_eq!(p.for_func(Func::AllGather).unwrap_err().code, ResultCode::InvalidUsage);
    }
}
