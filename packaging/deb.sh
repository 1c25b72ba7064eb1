#!/usr/bin/env bash
# Builds target/package/oxccl_VERSION_amd64.deb from an existing cargo build --release: an
# install tree with prefix /usr in Debian's layout (install-tree.sh), plus DEBIAN/ metadata.
#   /usr/lib/x86_64-linux-gnu/{liboxccl.so, libnccl.so.2 -> liboxccl.so, libnccl.so -> libnccl.so.2,
#                              liboxccl.a, pkgconfig/nccl.pc, pkgconfig/oxccl.pc}
#   /usr/include/oxccl/nccl.h      not /usr/include/nccl.h: see packaging/README.md
#   /usr/bin/{oxccl-bench, oxccl-run}   /usr/share/doc/oxccl/{README.md, BENCHMARKS.md, copyright}
#
# Usage: packaging/deb.sh [--target-dir DIR]
#   --target-dir  cargo's target directory (default $CARGO_TARGET_DIR, else REPO/target)
# Maintainer: "$DEBFULLNAME <$DEBEMAIL>" when both are set (Debian's convention), else a
# placeholder. Needs dpkg-deb (Debian/Ubuntu), binutils, coreutils.
set -euo pipefail
umask 022
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=packaging/lib.sh
. "$here/lib.sh"

usage() { awk '/^# Usage:/ { p = 1 } /^set -euo pipefail/ { exit } p { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; }

target_dir=${CARGO_TARGET_DIR:-$OXCCL_ROOT/target}
while [ $# -gt 0 ]; do
  case $1 in
    --target-dir) target_dir=${2:?--target-dir needs a directory}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done
command -v dpkg-deb >/dev/null || die "dpkg-deb is required"

version=$(cargo_version)
debver=$(deb_version "$version")
multiarch=x86_64-linux-gnu
out=$target_dir/package
deb=$out/oxccl_${debver}_amd64.deb

# A fresh staging root each run, removed afterwards: the package holds exactly what this run put
# there. mktemp makes it 0700, and its mode becomes that of ./ in the package: hence the chmod.
mkdir -p "$out"
stage=$(mktemp -d "$out/.deb-root.XXXXXX")
trap 'rm -rf "$stage"' EXIT
chmod 0755 "$stage"
bash "$here/install-tree.sh" --target-dir "$target_dir" --prefix "$stage/usr" \
  --libdir "lib/$multiarch" --includedir include/oxccl --pc-prefix /usr >/dev/null

lib=$stage/usr/lib/$multiarch/liboxccl.so
nccl_version=$(nccl_lib_version)
header_version=$(nccl_api_version "$stage/usr/include/oxccl/nccl.h")
# The libc6 floor is read from the library and oxccl-bench (the newest GLIBC_x.y symbol version
# either needs), not assumed: built on Debian 12 it is 2.34, and a lower bound would let dpkg
# install a library that the loader rejects ("GLIBC_2.34 not found").
floor=$(printf '%s\n' "$(glibc_floor "$lib")" "$(glibc_floor "$stage/usr/bin/oxccl-bench")" | sort -V | tail -n 1)
# Everything either ELF file needs must come from libc6 or libgcc-s1, the only Depends declared.
while read -r needed; do
  case $needed in
    libc.so.6|libm.so.6|libdl.so.2|librt.so.1|libpthread.so.0|libutil.so.1|ld-linux-x86-64.so.2|libgcc_s.so.1) ;;
    *) die "$needed is needed but not covered by Depends (libc6, libgcc-s1): update packaging/deb.sh" ;;
  esac
done < <(elf_needed "$lib"; elf_needed "$stage/usr/bin/oxccl-bench")

cat > "$stage/usr/share/doc/oxccl/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: oxccl
Comment: nccl.h reproduces the API (names, types, values) of NVIDIA NCCL $header_version for
 ABI compatibility.

Files: *
Copyright: oxccl contributors
License: Apache-2.0
 On Debian systems, the full text of the Apache License, Version 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
EOF
chmod 0644 "$stage/usr/share/doc/oxccl/copyright"

mkdir -p "$stage/DEBIAN"
maintainer="oxccl maintainers <oxccl-maintainers@invalid>"
if [ -n "${DEBFULLNAME:-}" ] && [ -n "${DEBEMAIL:-}" ]; then maintainer="$DEBFULLNAME <$DEBEMAIL>"; fi
installed_kb=$(du -sk --apparent-size --exclude=DEBIAN "$stage" | cut -f1)
# Conflicts/Replaces/Provides: NVIDIA's (and Debian's) libnccl2 ships
# /usr/lib/x86_64-linux-gnu/libnccl.so.2, and libnccl-dev ships .../libnccl.so; this package
# ships the same two paths, because being found as libnccl.so.2 on the default library path is
# its purpose. dpkg cannot let two packages own one path, and ldconfig, given two files with
# soname libnccl.so.2 in one directory, picks one by file name, so co-installation cannot be made
# to work: Conflicts + Replaces makes apt swap the packages cleanly instead of dpkg failing halfway
# on "trying to overwrite". Provides: libnccl2 (= NCCL API version) keeps packages that depend on
# libnccl2 (>= 2.x) installable. libnccl-dev is not provided: its nccl.h is not on the default
# include path here. To keep NVIDIA's NCCL installed, use the install tree or the wheel instead.
cat > "$stage/DEBIAN/control" <<EOF
Package: oxccl
Version: $debver
Architecture: amd64
Maintainer: $maintainer
Installed-Size: $installed_kb
Depends: libc6 (>= $floor), libgcc-s1
Provides: libnccl2 (= $nccl_version)
Conflicts: libnccl2, libnccl-dev
Replaces: libnccl2, libnccl-dev
Section: libs
Priority: optional
Description: drop-in replacement for NVIDIA NCCL $nccl_version, written in Rust
 oxccl implements the NCCL $nccl_version C API and ABI (libnccl.so.2):
 collectives and send/recv between the GPUs of a host over NVLink/PCIe peer
 memory, and between hosts over TCP. Unchanged NCCL programs, nccl-tests and
 PyTorch use it in place of NCCL. It loads the CUDA driver at run time (a
 driver for CUDA 13.0 or newer is needed to run collectives; nothing from CUDA
 is needed to install or link).
 .
 Installs libnccl.so.2 and libnccl.so in the default library path, the header
 as /usr/include/oxccl/nccl.h (pkg-config: nccl, oxccl), the static library
 liboxccl.a, oxccl-bench and the oxccl-run launcher.
EOF
# The library lands in a directory ldconfig manages: refresh the cache on install and removal
# so that libnccl.so.2 resolves to it (and stops resolving once it is gone).
cat > "$stage/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = "configure" ]; then
  ldconfig
fi
EOF
cat > "$stage/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = "remove" ]; then
  ldconfig
fi
EOF
chmod 0755 "$stage/DEBIAN/postinst" "$stage/DEBIAN/postrm"
# md5sums: what dh_md5sums would write; `dpkg --verify` and debsums use it.
(cd "$stage" && find usr -type f -print0 | LC_ALL=C sort -z | xargs -0 md5sum) > "$stage/DEBIAN/md5sums"
chmod 0644 "$stage/DEBIAN/control" "$stage/DEBIAN/md5sums"

rm -f "$deb"
# --root-owner-group: files owned by root:root whoever builds. -Zxz: Ubuntu's dpkg-deb defaults
# to zstd, which Debian's dpkg before 1.21.18 cannot unpack; xz every dpkg reads.
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "$deb"
