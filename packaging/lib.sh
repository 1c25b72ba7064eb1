# Shared helpers for the packaging scripts; sourced, never run. Needs bash, coreutils, binutils.
# Everything is derived from the repository (Cargo.toml, include/nccl.h) or from the built ELF
# files, so that a version bump or a new glibc requirement needs no edit here.

# The repository root, from this file's own location (packaging/..).
OXCCL_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

die() { echo "${0##*/}: $*" >&2; exit 1; }

# The [package] version of Cargo.toml (the first `version = "..."` inside that table). A tiny
# parser rather than `cargo metadata`, so that packaging needs no cargo and no network.
cargo_version() {
  local v
  v=$(awk '
    /^\[/ { in_pkg = ($0 ~ /^\[package\][[:space:]]*$/) ; next }
    in_pkg && /^[[:space:]]*version[[:space:]]*=/ {
      sub(/^[^=]*=[[:space:]]*"/, ""); sub(/".*/, ""); print; exit
    }' "$OXCCL_ROOT/Cargo.toml")
  [ -n "$v" ] || die "no [package] version in $OXCCL_ROOT/Cargo.toml"
  printf '%s\n' "$v"
}

# Cargo's SemVer as a Debian version: a pre-release must sort before the release, which in
# Debian is spelled with '~' (0.2.0~rc.1 < 0.2.0). Build metadata has no equivalent: refused.
deb_version() {
  local v=$1
  case $v in
    *+*) die "version $v has SemVer build metadata; no Debian/Python equivalent" ;;
    *-*) printf '%s~%s\n' "${v%%-*}" "${v#*-}" ;;
    *) printf '%s\n' "$v" ;;
  esac
}

# Cargo's SemVer as a PEP 440 version: 1.2.3-alpha.1 -> 1.2.3a1, -beta.2 -> b2, -rc.3 -> rc3.
# Other pre-release names have no PEP 440 spelling: refused rather than guessed.
py_version() {
  local v=$1 base pre kind num
  case $v in
    *+*) die "version $v has SemVer build metadata; no Debian/Python equivalent" ;;
    *-*) ;;
    *) printf '%s\n' "$v"; return ;;
  esac
  base=${v%%-*} pre=${v#*-}
  kind=${pre%%.*} num=${pre#"$kind"}; num=${num#.}
  [ -n "$num" ] || num=0
  [[ $num =~ ^[0-9]+$ ]] || die "pre-release $pre of $v has no PEP 440 spelling"
  case $kind in
    alpha|a) printf '%sa%s\n' "$base" "$num" ;;
    beta|b) printf '%sb%s\n' "$base" "$num" ;;
    rc) printf '%src%s\n' "$base" "$num" ;;
    *) die "pre-release $pre of $v has no PEP 440 spelling" ;;
  esac
}

# The NCCL version the header implements (2.32.3), from include/nccl.h's NCCL_MAJOR/MINOR/PATCH.
# The NCCL version oxccl stands in for (NCCL_VERSION_CODE in src/lib.rs, what ncclGetVersion
# reports: the newest NCCL whose whole host API it has), as x.y.z. nccl.h's own NCCL_MAJOR/MINOR/
# PATCH (nccl_api_version below) equal it today; the two stay apart while a newer header's
# functions are not all implemented.
nccl_lib_version() {
  local code
  code=$(sed -n 's/^pub const NCCL_VERSION_CODE: i32 = \([0-9]*\);.*/\1/p' "$OXCCL_ROOT/src/lib.rs")
  [ -n "$code" ] || die "no NCCL_VERSION_CODE in $OXCCL_ROOT/src/lib.rs"
  if [ "$code" -lt 10000 ]; then
    printf '%s.%s.%s\n' $((code / 1000)) $((code % 1000 / 100)) $((code % 100))
  else
    printf '%s.%s.%s\n' $((code / 10000)) $((code % 10000 / 100)) $((code % 100))
  fi
}

nccl_api_version() {
  local h=${1:-$OXCCL_ROOT/include/nccl.h} maj min pat
  maj=$(awk '$1 == "#define" && $2 == "NCCL_MAJOR" { print $3 }' "$h")
  min=$(awk '$1 == "#define" && $2 == "NCCL_MINOR" { print $3 }' "$h")
  pat=$(awk '$1 == "#define" && $2 == "NCCL_PATCH" { print $3 }' "$h")
  [ -n "$maj" ] && [ -n "$min" ] && [ -n "$pat" ] || die "no NCCL_MAJOR/MINOR/PATCH in $h"
  printf '%s.%s.%s\n' "$maj" "$min" "$pat"
}

# The newest glibc symbol version an ELF file needs (e.g. 2.34): the real floor of the glibc it
# loads on, used for the .deb's libc6 dependency and the wheel's manylinux tag. Read from the
# version-needs section, so it tracks the build machine (glibc 2.34 moved pthread_* and dl* into
# libc.so.6 with new versions; anything linked on a newer glibc needs at least 2.34).
glibc_floor() {
  local v
  v=$(readelf -V -W "$1" | grep -o 'Name: GLIBC_[0-9][0-9.]*' | sed 's/^Name: GLIBC_//' | sort -V | tail -n 1)
  [ -n "$v" ] || v=2.17   # no versioned glibc symbol at all: the manylinux2014 baseline
  printf '%s\n' "$v"
}

# The DT_NEEDED libraries of an ELF file, one a line.
elf_needed() {
  readelf -d -W "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'
}

# The DT_SONAME of an ELF file (empty if none).
elf_soname() {
  readelf -d -W "$1" | sed -n 's/.*(SONAME).*\[\(.*\)\]$/\1/p'
}
