#!/usr/bin/env bash
# shellcheck disable=SC2016  # single-quoted ${...}/$VAR are meant literally (.pc syntax, sh -c)
# Builds the three packaging artifacts from an existing `cargo build --release` and checks them
# (no GPU, no root, no network):
#   install tree  contents, symlinks, soname, stripping, exports; C programs built through
#                 pkg-config (nccl, oxccl, oxccl --static) that run against it; bin/oxccl-run
#   .deb          dpkg-deb --info/--contents, maintainer scripts, md5sums; its extracted copy
#                 links and runs the same C program through its own .pc files
#   wheel         RECORD, pip install --target, oxccl.library_path(), oxccl-run, and which
#                 platforms pip accepts it on
# The C program checks ncclGetVersion() == 23203 and which file it came from. The launchers are
# also checked to displace a stand-in libnccl.so.2 that a program was linked against (what they
# do to NVIDIA's NCCL under torchrun).
#
# Usage: packaging/check.sh     (exit status non-zero on the first failure)
# Environment: CUDA_INCLUDE  CUDA's include dir, for nccl.h's #include <cuda_runtime.h>
#                            (default REPO/.tools/cuda/nvidia/cu13/include, from scripts/setup-cuda.sh)
#              CARGO_TARGET_DIR  as for cargo (default REPO/target)
#              OXCCL_NO_PKG_CONFIG=1  use the built-in .pc reader even where pkg-config exists
# Without pkg-config (a bare Debian 12 has none) a built-in reader of the .pc files is used;
# with it, the reader's answer is also compared with pkg-config's, so both stay right.
set -euo pipefail
umask 022
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=packaging/lib.sh
. "$here/lib.sh"

target_dir=${CARGO_TARGET_DIR:-$OXCCL_ROOT/target}
cuda_inc=${CUDA_INCLUDE:-$OXCCL_ROOT/.tools/cuda/nvidia/cu13/include}
[ -f "$cuda_inc/cuda_runtime.h" ] || die "CUDA headers not found at $cuda_inc (run scripts/setup-cuda.sh or set CUDA_INCLUDE)"
[ -f "$target_dir/release/liboxccl.so" ] || die "$target_dir/release/liboxccl.so not found (run: cargo build --release --locked)"
for tool in gcc readelf nm strip python3 dpkg-deb md5sum; do
  command -v "$tool" >/dev/null || die "$tool is required"
done

version=$(cargo_version)
debver=$(deb_version "$version")
pyver=$(py_version "$version")
nccl_version=$(nccl_lib_version)
export PIP_ROOT_USER_ACTION=ignore   # CI runs as root; pip's warning about it is noise here
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Output is captured and then searched (grep <<< "$(...)"), never piped into grep -q: under
# pipefail, grep -q exiting at its first match can kill the writer with SIGPIPE and turn a pass
# into a failure, or, negated, a failure into a pass.
checks=0
step() { printf 'packaging-check: %s ... ' "$*"; }
ok() { echo "ok${1:+ ($1)}"; checks=$((checks + 1)); }
fail() { echo "FAILED"; echo "packaging-check: $*" >&2; exit 1; }
expect_eq() {   # expect_eq GOT WANT WHAT
  [ "$1" = "$2" ] || fail "$3: expected '$2', got '$1'"
}
same_file() { [ "$(readlink -f "$1")" = "$(readlink -f "$2")" ]; }

# --- .pc files, with or without pkg-config -------------------------------------------------------
use_pkg_config=1
if [ "${OXCCL_NO_PKG_CONFIG:-0}" = 1 ] || ! command -v pkg-config >/dev/null; then use_pkg_config=0; fi

# pc_expand STRING: STRING with ${name} replaced from the array `var` of the calling pc_read.
pc_expand() {
  local s=$1 ref n=0
  while [[ $s =~ \$\{([A-Za-z0-9_.]+)\} ]]; do
    ref=${BASH_REMATCH[1]}
    [ -n "${var[$ref]+set}" ] || fail "$pc_file: undefined variable \${$ref}"
    s=${s//"\${$ref}"/"${var[$ref]}"}
    n=$((n + 1)); [ $n -lt 100 ] || fail "$pc_file: recursive variable \${$ref}"
  done
  printf '%s' "$s"
}
# pc_read FILE FIELD: the expanded value of FIELD (Version, Cflags, Libs, Libs.private) of one
# .pc file: `name=value` variables, ${name} references and ${pcfiledir}, as pkg-config reads them.
# Enough for the .pc files install-tree.sh writes (no Requires, no quoting).
pc_read() {
  local pc_file=$1 field=$2 line value=
  local -A var=([pcfiledir]="$(dirname "$1")")
  while IFS= read -r line || [ -n "$line" ]; do
    if [[ $line =~ ^([A-Za-z0-9_.]+)=(.*)$ ]]; then
      var[${BASH_REMATCH[1]}]=$(pc_expand "${BASH_REMATCH[2]}")
    elif [[ $line =~ ^([A-Za-z0-9_.]+):[[:space:]]*(.*)$ ]] && [ "${BASH_REMATCH[1]}" = "$field" ]; then
      value=$(pc_expand "${BASH_REMATCH[2]}")
    fi
  done < "$pc_file"
  printf '%s\n' "$value"
}
# pc_builtin DIR SYSROOT MODULE [--static]: cflags and libs, one word a line; SYSROOT is put
# before absolute -I/-L paths, as PKG_CONFIG_SYSROOT_DIR does.
pc_builtin() {
  local sysroot=$2 file=$1/$3.pc w words=()
  [ -f "$file" ] || fail "$file not found"
  read -ra words <<< "$(pc_read "$file" Cflags) $(pc_read "$file" Libs)"
  if [ "${4-}" = --static ]; then read -ra w <<< "$(pc_read "$file" Libs.private)"; words+=("${w[@]}"); fi
  for w in "${words[@]}"; do
    case $w in -I/*|-L/*) w=${w:0:2}$sysroot${w:2} ;; esac
    printf '%s\n' "$w"
  done
}
# Paths in -I/-L words made canonical, so that ../ spellings compare equal.
pc_normalize() {
  local w
  while IFS= read -r w; do
    case $w in -I*|-L*) printf '%s%s\n' "${w:0:2}" "$(realpath -m "${w:2}")" ;; *) printf '%s\n' "$w" ;; esac
  done
}
# pc_flags DIR SYSROOT MODULE [--static]: the words to compile and link with, one a line. Only
# DIR is searched (PKG_CONFIG_LIBDIR), so no .pc file installed on this machine can interfere.
pc_flags() {
  local builtin from_pc
  builtin=$(pc_builtin "$@" | pc_normalize)
  if [ $use_pkg_config = 1 ]; then
    from_pc=$(PKG_CONFIG_LIBDIR=$1 PKG_CONFIG_PATH='' PKG_CONFIG_SYSROOT_DIR=$2 \
      PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1 \
      pkg-config --cflags --libs ${4:+"$4"} "$3" | tr -s ' ' '\n' | sed '/^$/d' | pc_normalize) \
      || fail "pkg-config failed on $1/$3.pc"
    [ "$from_pc" = "$builtin" ] || fail "pkg-config and the built-in reader disagree on $1/$3.pc: '$from_pc' vs '$builtin'"
  fi
  printf '%s\n' "$builtin"
}
pc_version() {   # pc_version DIR MODULE
  if [ $use_pkg_config = 1 ]; then
    PKG_CONFIG_LIBDIR=$1 PKG_CONFIG_PATH='' pkg-config --modversion "$2"
  else
    pc_read "$1/$2.pc" Version
  fi
}

# build_prog OUT DIR SYSROOT MODULE [--static]: packaging/test/nccl_version.c compiled and linked
# with the module's flags (plus CUDA's include dir, which nccl.h needs and the .pc cannot know).
build_prog() {
  local out=$1 flags
  shift
  mapfile -t flags < <(pc_flags "$@")
  gcc -std=c11 -Wall -Werror -I"$cuda_inc" "$here/test/nccl_version.c" "${flags[@]}" -o "$out" \
    || fail "compiling against $1 with: ${flags[*]}"
}
# The stand-in NVIDIA libnccl.so.2 (version 0) and a program linked against it, for the launchers.
fake_dir=$work/fake-nccl
mkdir -p "$fake_dir"
gcc -std=c11 -Wall -Werror -shared -fPIC -Wl,-soname,libnccl.so.2 -I"$OXCCL_ROOT/include" -I"$cuda_inc" \
  "$here/test/fake_nccl.c" -o "$fake_dir/libnccl.so.2"
ln -s libnccl.so.2 "$fake_dir/libnccl.so"
gcc -std=c11 -Wall -Werror -I"$OXCCL_ROOT/include" -I"$cuda_inc" "$here/test/nccl_version.c" \
  -L"$fake_dir" -lnccl -o "$work/linked-to-fake"
# check_displaces LAUNCHER... : the fake-linked program, run through the launcher, gets oxccl.
check_displaces() {   # check_displaces EXPECTED_LIB LAUNCHER [ARGS]
  local want=$1 out
  shift
  out=$(LD_LIBRARY_PATH=$fake_dir "$@" "$work/linked-to-fake" "$want") || fail "through $*: $out"
  case $out in "ncclGetVersion 23203 "*) ;; *) fail "through $*: $out" ;; esac
}
step "stand-in libnccl.so.2 is what the program gets without a launcher"
out=$(LD_LIBRARY_PATH=$fake_dir "$work/linked-to-fake" 2>/dev/null) && fail "the stand-in reported 23203: $out"
case $out in "ncclGetVersion 0 from $fake_dir/libnccl.so.2") ;; *) fail "unexpected: $out" ;; esac
ok

# ================================== install tree ==================================================
tree=$target_dir/package/oxccl-$version
orig=$target_dir/release/liboxccl.so
orig_sum=$(sha256sum < "$orig")
step "install-tree.sh"
bash "$here/install-tree.sh" --target-dir "$target_dir" >/dev/null
ok "$tree"

step "install tree: contents"
expected_tree="bin/oxccl-bench
bin/oxccl-run
include/nccl.h
lib/libnccl.so
lib/libnccl.so.2
lib/liboxccl.a
lib/liboxccl.so
lib/pkgconfig/nccl.pc
lib/pkgconfig/oxccl.pc
share/doc/oxccl/BENCHMARKS.md
share/doc/oxccl/README.md"
got=$(cd "$tree" && find . -mindepth 1 ! -type d -printf '%P\n' | LC_ALL=C sort)
[ "$got" = "$expected_tree" ] || fail "tree holds:"$'\n'"$got"$'\n'"expected:"$'\n'"$expected_tree"
for f in bin/oxccl-bench bin/oxccl-run lib/liboxccl.so; do [ -x "$tree/$f" ] || fail "$f is not executable"; done
cmp -s "$OXCCL_ROOT/include/nccl.h" "$tree/include/nccl.h" || fail "include/nccl.h differs from the repository's"
ok

step "install tree: symlinks"
[ -f "$tree/lib/liboxccl.so" ] && [ ! -L "$tree/lib/liboxccl.so" ] || fail "lib/liboxccl.so is not a regular file"
expect_eq "$(readlink "$tree/lib/libnccl.so.2")" liboxccl.so "lib/libnccl.so.2 link"
expect_eq "$(readlink "$tree/lib/libnccl.so")" libnccl.so.2 "lib/libnccl.so link"
ok

step "install tree: soname, exports, debug info stripped, original untouched"
expect_eq "$(elf_soname "$tree/lib/libnccl.so.2")" libnccl.so.2 "soname (readelf -d)"
# (.debug_gdb_scripts is loaded data, Rust's pretty-printer hint, and stays: not debug info.)
for f in lib/liboxccl.so bin/oxccl-bench; do
  debug=$(grep '\.debug_' <<< "$(readelf -S -W "$tree/$f")" | grep -v '\.debug_gdb_scripts' || true)
  [ -z "$debug" ] || fail "$f still has debug sections: $debug"
done
diff <(nm -D --defined-only "$orig" | awk '{print $3}' | sort) \
     <(nm -D --defined-only "$tree/lib/liboxccl.so" | awk '{print $3}' | sort) >/dev/null \
  || fail "the stripped library's exported symbols differ from the built one's"
expect_eq "$(sha256sum < "$orig")" "$orig_sum" "checksum of $orig (it must not be modified)"
ok "$(du -h "$orig" | cut -f1) -> $(du -h "$tree/lib/liboxccl.so" | cut -f1)"

step "install tree: .pc versions"
expect_eq "$(pc_version "$tree/lib/pkgconfig" nccl)" "$nccl_version" "nccl.pc Version"
expect_eq "$(pc_version "$tree/lib/pkgconfig" oxccl)" "$version" "oxccl.pc Version"
ok "nccl $nccl_version, oxccl $version, $( [ $use_pkg_config = 1 ] && echo "pkg-config $(pkg-config --version), cross-checked with the built-in reader" || echo "built-in .pc reader")"

step "install tree: C program via pkg-config nccl links and runs"
build_prog "$work/tree-nccl" "$tree/lib/pkgconfig" "" nccl
grep -qx libnccl.so.2 <<< "$(elf_needed "$work/tree-nccl")" || fail "the program does not need libnccl.so.2"
LD_LIBRARY_PATH=$tree/lib "$work/tree-nccl" "$tree/lib/liboxccl.so" >/dev/null || fail "the program failed against the tree"
ok

step "install tree: C program via pkg-config oxccl links and runs"
build_prog "$work/tree-oxccl" "$tree/lib/pkgconfig" "" oxccl
LD_LIBRARY_PATH=$tree/lib "$work/tree-oxccl" "$tree/lib/liboxccl.so" >/dev/null || fail "the program failed against the tree"
ok

step "install tree: static link with liboxccl.a and pkg-config --static oxccl"
mapfile -t flags < <(pc_flags "$tree/lib/pkgconfig" "" oxccl --static)
# -loxccl would pick liboxccl.so: name the archive instead, keep the rest (Libs.private).
for i in "${!flags[@]}"; do [ "${flags[$i]}" != -loxccl ] || flags[i]=$tree/lib/liboxccl.a; done
gcc -std=c11 -Wall -Werror -I"$cuda_inc" "$here/test/nccl_version.c" "${flags[@]}" -o "$work/tree-static" \
  || fail "static link with: ${flags[*]}"
! grep -q nccl <<< "$(elf_needed "$work/tree-static")" || fail "the static program still needs a libnccl"
"$work/tree-static" >/dev/null || fail "the static program failed"
ok

step "install tree: bin/oxccl-run"
expect_eq "$("$tree/bin/oxccl-run" --print-path)" "$tree/lib/liboxccl.so" "oxccl-run --print-path"
expect_eq "$(LD_PRELOAD='' "$tree/bin/oxccl-run" sh -c 'printf %s "$LD_PRELOAD"')" "$tree/lib/liboxccl.so" "LD_PRELOAD under oxccl-run"
expect_eq "$(LD_PRELOAD=libm.so.6 "$tree/bin/oxccl-run" -- sh -c 'printf %s "$LD_PRELOAD"')" \
  "$tree/lib/liboxccl.so:libm.so.6" "LD_PRELOAD under oxccl-run, prepended"
ln -s "$tree/bin/oxccl-run" "$work/oxccl-run-link"
expect_eq "$("$work/oxccl-run-link" --print-path)" "$tree/lib/liboxccl.so" "oxccl-run --print-path through a symlink"
check_displaces "$tree/lib/liboxccl.so" "$tree/bin/oxccl-run"
rc=0; "$tree/bin/oxccl-run" >/dev/null 2>&1 || rc=$?
expect_eq "$rc" 2 "exit status of oxccl-run without a command"
ok

step "install tree: relocatable (copied elsewhere, .pc and oxccl-run follow)"
cp -a "$tree" "$work/moved"
build_prog "$work/moved-nccl" "$work/moved/lib/pkgconfig" "" nccl
LD_LIBRARY_PATH=$work/moved/lib "$work/moved-nccl" "$work/moved/lib/liboxccl.so" >/dev/null || fail "the program failed against the moved tree"
same_file "$("$work/moved/bin/oxccl-run" --print-path)" "$work/moved/lib/liboxccl.so" || fail "moved oxccl-run points elsewhere"
ok

# ================================== .deb ==========================================================
deb=$target_dir/package/oxccl_${debver}_amd64.deb
step "deb.sh"
bash "$here/deb.sh" --target-dir "$target_dir" >/dev/null
[ -f "$deb" ] || fail "$deb not built"
ok "$deb"

step "deb: dpkg-deb --info"
field() { dpkg-deb --field "$deb" "$1"; }
floor=$(glibc_floor "$tree/lib/liboxccl.so")
expect_eq "$(field Package)" oxccl Package
expect_eq "$(field Version)" "$debver" Version
expect_eq "$(field Architecture)" amd64 Architecture
case "$(field Depends)" in *"libc6 (>= $floor)"*libgcc-s1*) ;; *) fail "Depends: $(field Depends)" ;; esac
expect_eq "$(field Provides)" "libnccl2 (= $nccl_version)" Provides
case "$(field Conflicts)" in *libnccl2*) ;; *) fail "Conflicts: $(field Conflicts)" ;; esac
case "$(field Replaces)" in *libnccl2*) ;; *) fail "Replaces: $(field Replaces)" ;; esac
[ -n "$(field Maintainer)" ] && [ -n "$(field Description)" ] && [ -n "$(field Installed-Size)" ] || fail "Maintainer/Description/Installed-Size missing"
info=$(dpkg-deb --info "$deb")
for s in postinst postrm; do
  grep -Eq "^ +[0-9]+ bytes, +[0-9]+ lines +\\* +$s " <<< "$info" || fail "$s missing or not executable"
done
mkdir "$work/control"
dpkg-deb --control "$deb" "$work/control"
for s in postinst postrm; do
  sh -n "$work/control/$s" || fail "$s: syntax error"
  grep -q '^ *ldconfig$' "$work/control/$s" || fail "$s does not run ldconfig"
done
ok "Depends: $(field Depends); Provides: $(field Provides)"

step "deb: dpkg-deb --contents"
ma=usr/lib/x86_64-linux-gnu
expected_deb="./usr/bin/oxccl-bench
./usr/bin/oxccl-run
./usr/include/oxccl/nccl.h
./$ma/libnccl.so -> libnccl.so.2
./$ma/libnccl.so.2 -> liboxccl.so
./$ma/liboxccl.a
./$ma/liboxccl.so
./$ma/pkgconfig/nccl.pc
./$ma/pkgconfig/oxccl.pc
./usr/share/doc/oxccl/BENCHMARKS.md
./usr/share/doc/oxccl/README.md
./usr/share/doc/oxccl/copyright"
contents=$(dpkg-deb --contents "$deb")
got=$(awk '$1 !~ /^d/ { $1 = $2 = $3 = $4 = $5 = ""; sub(/^ +/, ""); print }' <<< "$contents" | LC_ALL=C sort)
[ "$got" = "$expected_deb" ] || fail "the .deb holds:"$'\n'"$got"$'\n'"expected:"$'\n'"$expected_deb"
awk '$2 != "root/root" { bad = 1 } END { exit bad }' <<< "$contents" || fail "entries not owned by root/root"
ok

step "deb: extracted copy (dpkg-deb -x): md5sums, soname, C program via its .pc, oxccl-run"
root=$work/deb-root
dpkg-deb -x "$deb" "$root"
(cd "$root" && md5sum --quiet -c "$work/control/md5sums") || fail "DEBIAN/md5sums does not match the files"
expect_eq "$(elf_soname "$root/$ma/libnccl.so.2")" libnccl.so.2 "soname of the extracted library"
grep -qx 'includedir=${prefix}/include/oxccl' "$root/$ma/pkgconfig/nccl.pc" || fail "nccl.pc does not point at /usr/include/oxccl"
grep -qx 'prefix=/usr' "$root/$ma/pkgconfig/nccl.pc" || fail "nccl.pc prefix is not /usr"
# The .pc files say /usr; PKG_CONFIG_SYSROOT_DIR (and the reader's equivalent) maps that to the
# extraction directory, so what is checked is the file as installed.
build_prog "$work/deb-nccl" "$root/$ma/pkgconfig" "$root" nccl
LD_LIBRARY_PATH=$root/$ma "$work/deb-nccl" "$root/$ma/liboxccl.so" >/dev/null || fail "the program failed against the extracted .deb"
expect_eq "$("$root/usr/bin/oxccl-run" --print-path)" "$root/$ma/liboxccl.so" "extracted oxccl-run --print-path"
check_displaces "$root/$ma/liboxccl.so" "$root/usr/bin/oxccl-run"
ok

# ================================== wheel =========================================================
step "wheel.sh"
wheel=$(bash "$here/wheel.sh" --tree "$tree" --target-dir "$target_dir")
[ -f "$wheel" ] || fail "no wheel at '$wheel'"
plat=manylinux_${floor%%.*}_$(cut -d. -f2 <<< "$floor")_x86_64
expect_eq "$(basename "$wheel")" "oxccl-$pyver-py3-none-$plat.whl" "wheel file name"
ok "$wheel"

step "wheel: RECORD, WHEEL tag, contents"
python3 - "$wheel" "$pyver" "py3-none-$plat" <<'EOF' || fail "wheel metadata check failed"
import base64, hashlib, sys, zipfile
path, version, tag = sys.argv[1:]
di = f"oxccl-{version}.dist-info"
z = zipfile.ZipFile(path)
names = set(z.namelist())
want = {"oxccl/__init__.py", "oxccl/_run.py", "oxccl/__main__.py", "oxccl/_version.py",
        "oxccl/lib/libnccl.so.2", "oxccl/include/nccl.h", f"{di}/METADATA", f"{di}/WHEEL",
        f"{di}/entry_points.txt", f"{di}/top_level.txt", f"{di}/RECORD"}
assert names == want, f"wheel holds {sorted(names)}"
record = {}
for line in z.read(f"{di}/RECORD").decode().splitlines():
    name, h, size = line.rsplit(",", 2)
    record[name] = (h, size)
assert set(record) == names, "RECORD does not list exactly the wheel's files"
for name in names - {f"{di}/RECORD"}:
    data = z.read(name)
    h = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    assert record[name] == (h, str(len(data))), f"RECORD entry of {name} is wrong"
wheel_meta = z.read(f"{di}/WHEEL").decode()
assert f"Tag: {tag}\n" in wheel_meta and "Root-Is-Purelib: false" in wheel_meta, wheel_meta
assert "oxccl-run = oxccl._run:main" in z.read(f"{di}/entry_points.txt").decode()
assert f"Version: {version}\n" in z.read(f"{di}/METADATA").decode()
EOF
ok

step "wheel: pip install --target, import oxccl, library_path()"
py=$work/py
python3 -m pip install --quiet --no-index --no-deps --disable-pip-version-check --no-warn-script-location \
  --target "$py" "$wheel" || fail "pip install --target failed"
libpath=$(PYTHONPATH=$py python3 -c 'import oxccl; print(oxccl.library_path())') || fail "import oxccl failed"
expect_eq "$libpath" "$py/oxccl/lib/libnccl.so.2" "oxccl.library_path()"
[ -f "$libpath" ] && [ ! -L "$libpath" ] || fail "$libpath is not a regular file"
expect_eq "$(elf_soname "$libpath")" libnccl.so.2 "soname of the wheel's library"
cmp -s "$libpath" "$tree/lib/liboxccl.so" || fail "the wheel's library differs from the install tree's"
expect_eq "$(PYTHONPATH=$py python3 -c 'import oxccl; print(oxccl.lib_dir(), oxccl.__version__, oxccl.NCCL_VERSION)')" \
  "$py/oxccl/lib $pyver ($(tr . , <<< "$nccl_version" | sed 's/,/, /g'))" "oxccl.lib_dir(), __version__, NCCL_VERSION"
[ -f "$(PYTHONPATH=$py python3 -c 'import oxccl; print(oxccl.include_dir())')/nccl.h" ] || fail "oxccl.include_dir() has no nccl.h"
ok "$libpath"

step "wheel: oxccl-run console script"
run=$py/bin/oxccl-run
[ -x "$run" ] || fail "pip did not install the oxccl-run script"
export PYTHONPATH=$py   # pip --target installs outside sys.path; the script needs to find oxccl
expect_eq "$("$run" --print-path)" "$libpath" "oxccl-run --print-path"
expect_eq "$(LD_PRELOAD='' "$run" sh -c 'echo $LD_PRELOAD')" "$libpath" "LD_PRELOAD under oxccl-run"
expect_eq "$(LD_PRELOAD=libm.so.6 "$run" sh -c 'echo $LD_PRELOAD')" "$libpath:libm.so.6" "LD_PRELOAD under oxccl-run, prepended"
expect_eq "$("$run" --version)" "oxccl-run $pyver" "oxccl-run --version"
expect_eq "$(python3 -m oxccl --print-path)" "$libpath" "python -m oxccl --print-path"
check_displaces "$libpath" "$run"
rc=0; "$run" /nonexistent/command 2>/dev/null || rc=$?
expect_eq "$rc" 127 "exit status of oxccl-run with a missing command"
unset PYTHONPATH
ok

step "wheel: platforms pip accepts it on"
if grep -q -- '--dry-run' <<< "$(python3 -m pip install --help 2>/dev/null)"; then
  # pip --platform accepts exactly the tags listed: list what pip itself supports on the system
  # in question (every manylinux_2_17..2_N up to its glibc, and linux_x86_64).
  plats() { local i; for i in $(seq 17 "$1"); do printf -- '--platform\nmanylinux_2_%s_x86_64\n' "$i"; done; printf -- '--platform\nlinux_x86_64\n'; }
  pip_would() {   # pip_would GLIBC_MINOR PYTHON_VERSION
    local args
    mapfile -t args < <(plats "$1")
    python3 -m pip install --dry-run --quiet --no-index --no-deps --disable-pip-version-check \
      --only-binary=:all: --python-version "$2" "${args[@]}" --target "$work/never" "$wheel" >/dev/null 2>&1
  }
  pip_would 39 3.12 || fail "pip would refuse the wheel on Ubuntu 24.04 (glibc 2.39, Python 3.12)"
  pip_would 35 3.10 || fail "pip would refuse the wheel on Ubuntu 22.04 (glibc 2.35, Python 3.10)"
  if pip_would 31 3.8; then fail "pip would install the wheel on glibc 2.31 (Ubuntu 20.04), where the library cannot load"; fi
  ok "installs where glibc >= $floor (Ubuntu 24.04/3.12, 22.04/3.10), refused on 20.04"
else
  echo "skipped (pip $(python3 -m pip --version | cut -d' ' -f2) has no --dry-run)"
fi

echo "packaging-check: all $checks checks passed"
echo "packaging-check: $tree"
echo "packaging-check: $deb"
echo "packaging-check: $wheel"
