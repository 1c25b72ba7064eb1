#!/usr/bin/env bash
# Builds target/package/oxccl-VERSION-py3-none-PLATFORM.whl from an install tree (the package
# `oxccl`: the stripped library as oxccl/lib/libnccl.so.2, nccl.h, library_path()/lib_dir(), and
# the oxccl-run console script). Needs python3 only: the wheel is written by
# packaging/python/build_wheel.py with the standard library, without setuptools or network.
#
# Usage: packaging/wheel.sh [--tree DIR] [--target-dir DIR]
#   --tree        an install tree made by install-tree.sh with the default layout (default: make
#                 the default tree now, from an existing cargo build --release)
#   --target-dir  cargo's target directory (default $CARGO_TARGET_DIR, else REPO/target)
# Platform tag: manylinux_2_M_x86_64, with 2.M the newest glibc symbol version the library needs
# (2.34 when built on Debian 12), as long as it needs no library outside the manylinux set;
# otherwise linux_x86_64. OXCCL_WHEEL_PLAT=TAG overrides. packaging/README.md says why.
set -euo pipefail
umask 022
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=packaging/lib.sh
. "$here/lib.sh"

usage() { awk '/^# Usage:/ { p = 1 } /^set -euo pipefail/ { exit } p { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; }

tree='' target_dir=${CARGO_TARGET_DIR:-$OXCCL_ROOT/target}
while [ $# -gt 0 ]; do
  case $1 in
    --tree) tree=${2:?--tree needs a directory}; shift 2 ;;
    --target-dir) target_dir=${2:?--target-dir needs a directory}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done
command -v python3 >/dev/null || die "python3 is required"

version=$(cargo_version)
pyver=$(py_version "$version")
if [ -z "$tree" ]; then
  bash "$here/install-tree.sh" --target-dir "$target_dir" >/dev/null
  tree=$target_dir/package/oxccl-$version
fi
lib=$tree/lib/liboxccl.so header=$tree/include/nccl.h
[ -f "$lib" ] && [ -f "$header" ] || die "$tree is not an install tree (no lib/liboxccl.so or include/nccl.h)"

# The libraries a manylinux wheel may need from the system (PEP 600 / auditwheel's policy set,
# restricted to what a Rust cdylib can plausibly need). The dynamic loader itself is always there.
manylinux_ok=" libc.so.6 libm.so.6 libdl.so.2 librt.so.1 libpthread.so.0 libutil.so.1 libgcc_s.so.1 libstdc++.so.6 ld-linux-x86-64.so.2 "
plat=${OXCCL_WHEEL_PLAT:-}
if [ -z "$plat" ]; then
  floor=$(glibc_floor "$lib")
  IFS=. read -r glibc_major glibc_minor _ <<< "$floor"
  plat=manylinux_${glibc_major}_${glibc_minor}_x86_64
  while read -r needed; do
    case $manylinux_ok in
      *" $needed "*) ;;
      *) echo "wheel: $needed is not in the manylinux set: tagging linux_x86_64" >&2; plat=linux_x86_64 ;;
    esac
  done < <(elf_needed "$lib")
fi

out=$target_dir/package
mkdir -p "$out"
# One wheel per version: drop those of earlier builds with another platform tag.
rm -f "$out/oxccl-$pyver-"*.whl "$out/oxccl-$pyver-"*.whl.tmp
python3 "$here/python/build_wheel.py" --library "$lib" --header "$header" --version "$pyver" \
  --nccl-version "$(nccl_lib_version)" --plat "$plat" --out "$out"
