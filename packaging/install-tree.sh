#!/usr/bin/env bash
# shellcheck disable=SC2016  # single-quoted ${...} are .pc syntax, meant literally
# Lays out an install tree from an existing `cargo build --release` (this script builds nothing):
#   lib/liboxccl.so                  the library (soname libnccl.so.2), debug info stripped
#   lib/libnccl.so.2 -> liboxccl.so  what the dynamic loader looks for (DT_NEEDED of NCCL programs)
#   lib/libnccl.so -> libnccl.so.2   what `-lnccl` finds at link time
#   lib/liboxccl.a                   static library, debug info stripped
#   lib/pkgconfig/{nccl,oxccl}.pc    include/nccl.h              bin/oxccl-bench   bin/oxccl-run
#   share/doc/oxccl/{README.md,BENCHMARKS.md}
# The build outputs in the target directory are only read, never modified.
#
# Usage: packaging/install-tree.sh [--prefix DIR] [--target-dir DIR]
#            [--libdir REL] [--includedir REL] [--pc-prefix PATH]
#   --prefix      where to lay the tree out (default TARGET/package/oxccl-VERSION). The default
#                 location is wiped and rebuilt on every run; any other prefix is installed into
#                 file by file, like `make install`, and nothing else in it is touched.
#   --target-dir  cargo's target directory (default $CARGO_TARGET_DIR, else REPO/target)
#   --libdir, --includedir  relative to the prefix (default lib, include); deb.sh uses
#                 lib/x86_64-linux-gnu and include/oxccl
#   --pc-prefix   the prefix written into the .pc files (default: relative to the .pc file's own
#                 location through ${pcfiledir}, so the tree can be moved or copied anywhere;
#                 deb.sh writes /usr)
set -euo pipefail
umask 022
# shellcheck source=packaging/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() { awk '/^# Usage:/ { p = 1 } /^set -euo pipefail/ { exit } p { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; }

prefix='' target_dir=${CARGO_TARGET_DIR:-$OXCCL_ROOT/target} libdir=lib includedir=include pc_prefix=''
while [ $# -gt 0 ]; do
  case $1 in
    --prefix) prefix=${2:?--prefix needs a directory}; shift 2 ;;
    --target-dir) target_dir=${2:?--target-dir needs a directory}; shift 2 ;;
    --libdir) libdir=${2:?--libdir needs a path}; shift 2 ;;
    --includedir) includedir=${2:?--includedir needs a path}; shift 2 ;;
    --pc-prefix) pc_prefix=${2:?--pc-prefix needs a path}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done
for rel in "$libdir" "$includedir"; do
  case /$rel/ in
    //*|*/../*|*/./*|*//*) die "--libdir/--includedir must be plain relative paths: $rel" ;;
  esac
done

version=$(cargo_version)
target_dir=$(cd "$target_dir" 2>/dev/null && pwd) || die "target directory not found (run cargo build --release first)"
built=$target_dir/release
header=$OXCCL_ROOT/include/nccl.h
for f in "$built/liboxccl.so" "$built/liboxccl.a" "$built/oxccl-bench" "$header"; do
  [ -f "$f" ] || die "$f not found (run: cargo build --release --locked)"
done
# Refuse a library that could not stand in for libnccl.so.2 rather than package it.
[ "$(elf_soname "$built/liboxccl.so")" = libnccl.so.2 ] || die "$built/liboxccl.so: soname is not libnccl.so.2"

default_prefix=$target_dir/package/oxccl-$version
if [ -z "$prefix" ] || [ "$prefix" = "$default_prefix" ]; then
  prefix=$default_prefix
  rm -rf "$prefix"   # ours alone: rebuild from scratch so that nothing stale survives
fi
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
lib=$prefix/$libdir inc=$prefix/$includedir bin=$prefix/bin doc=$prefix/share/doc/oxccl
mkdir -p "$lib/pkgconfig" "$inc" "$bin" "$doc"

# Every file is written beside its destination and renamed over it: a destination that is a
# symlink (say, into target/release) is replaced, never written through, and a reader never sees
# a half-written library.
put() {   # put MODE SRC DEST [strip]
  local mode=$1 src=$2 dest=$3 tmp=$3.tmp.$$
  rm -f "$tmp"
  if [ "${4-}" = strip ]; then
    # Debug info only: symbols stay, so backtraces still name functions. A quarter of the size.
    strip --strip-debug -o "$tmp" "$src"
  else
    cp "$src" "$tmp"
  fi
  chmod "$mode" "$tmp"
  mv -f "$tmp" "$dest"
}
put 0755 "$built/liboxccl.so" "$lib/liboxccl.so" strip
put 0644 "$built/liboxccl.a" "$lib/liboxccl.a" strip
put 0755 "$built/oxccl-bench" "$bin/oxccl-bench" strip
put 0644 "$header" "$inc/nccl.h"
put 0644 "$OXCCL_ROOT/README.md" "$doc/README.md"
put 0644 "$OXCCL_ROOT/BENCHMARKS.md" "$doc/BENCHMARKS.md"
# -n: replace an existing symlink (or file) itself rather than creating a link inside a directory.
ln -sfn liboxccl.so "$lib/libnccl.so.2"
ln -sfn libnccl.so.2 "$lib/libnccl.so"

# .pc files. The default prefix is ${pcfiledir} plus one '..' per component of LIBDIR/pkgconfig,
# which pkg-config and pkgconf both expand: the tree stays usable wherever it is moved.
if [ -z "$pc_prefix" ]; then
  pc_prefix='${pcfiledir}'
  IFS=/ read -ra parts <<< "$libdir/pkgconfig"
  for _ in "${parts[@]}"; do pc_prefix+=/..; done
fi
nccl_version=$(nccl_lib_version)
write_pc() {   # write_pc FILE NAME VERSION DESCRIPTION LIBS [LIBS_PRIVATE]
  local tmp=$1.tmp.$$
  {
    echo "# Generated by packaging/install-tree.sh (oxccl $version)."
    echo "# nccl.h includes <cuda_runtime.h>, <cuda_fp16.h>, <cuda_bf16.h> and <cuda_fp8.h>: put the"
    echo "# CUDA toolkit's include directory on the include path yourself (e.g. -I/usr/local/cuda/include)."
    echo "# Nothing from CUDA is needed to link: oxccl loads the driver (libcuda.so.1) at run time."
    echo "prefix=$pc_prefix"
    echo 'exec_prefix=${prefix}'
    echo "libdir=\${prefix}/$libdir"
    echo "includedir=\${prefix}/$includedir"
    echo
    echo "Name: $2"
    echo "Description: $4"
    echo "Version: $3"
    echo "Libs: -L\${libdir} $5"
    [ -z "${6-}" ] || echo "Libs.private: $6"
    echo 'Cflags: -I${includedir}'
  } > "$tmp"
  chmod 0644 "$tmp"
  mv -f "$tmp" "$1"
}
# nccl.pc carries the NCCL API version, not oxccl's: build systems ask for `nccl >= 2.x`.
write_pc "$lib/pkgconfig/nccl.pc" nccl "$nccl_version" \
  "NCCL $nccl_version API, implemented by oxccl $version (add the CUDA include directory to the include path)" \
  "-lnccl"
# Libs.private: what the Rust staticlib needs when linking liboxccl.a (rustc's native-static-libs
# for x86_64-unknown-linux-gnu), used by `pkg-config --static`.
write_pc "$lib/pkgconfig/oxccl.pc" oxccl "$version" \
  "oxccl $version, a drop-in replacement for NVIDIA NCCL $nccl_version (add the CUDA include directory to the include path)" \
  "-loxccl" "-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"

# bin/oxccl-run: the launcher, finding the library relative to its own real location (so a
# symlink to it from a directory on PATH works, and the tree can move).
tmp=$bin/oxccl-run.tmp.$$
cat > "$tmp" <<EOF
#!/bin/sh
# oxccl-run $version: runs a command with oxccl preloaded in place of NCCL.
# Usage: oxccl-run [--print-path | --version | --help] [--] COMMAND [ARG...]
# e.g.   oxccl-run torchrun --nproc-per-node 4 train.py
# The library (soname libnccl.so.2) is put first in LD_PRELOAD, ahead of any existing entries:
# the dynamic loader then satisfies every program's and library's need for libnccl.so.2 with it,
# and NVIDIA's libnccl.so.2 is never loaded. Child processes (torchrun's workers) inherit the
# variable; with mpirun, pass it to the ranks: -x LD_PRELOAD=\$(oxccl-run --print-path).
set -eu
lib=\$(readlink -f "\$(dirname "\$(readlink -f "\$0")")/../$libdir/liboxccl.so")
usage() { sed -n 's/^# \\{0,1\\}//; 3,4p' "\$0"; }
case \${1-} in
  --print-path) [ -f "\$lib" ] || { echo "oxccl-run: \$lib not found" >&2; exit 1; }; echo "\$lib"; exit 0 ;;
  --version) echo "oxccl-run $version"; exit 0 ;;
  -h|--help) usage; exit 0 ;;
  --) shift ;;
  -*) echo "oxccl-run: unknown option \$1" >&2; usage >&2; exit 2 ;;
esac
[ \$# -gt 0 ] || { usage >&2; exit 2; }
[ -f "\$lib" ] || { echo "oxccl-run: \$lib not found" >&2; exit 1; }
# The loader splits LD_PRELOAD at ':' and ' ' and has no quoting: such a path cannot be preloaded.
case \$lib in *[:\\ ]*) echo "oxccl-run: cannot preload a path containing ':' or ' ': \$lib" >&2; exit 1 ;; esac
LD_PRELOAD="\$lib\${LD_PRELOAD:+:\$LD_PRELOAD}"
export LD_PRELOAD
exec "\$@"
EOF
chmod 0755 "$tmp"
mv -f "$tmp" "$bin/oxccl-run"

echo "install-tree: $prefix"
