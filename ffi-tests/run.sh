#!/usr/bin/env bash
# C ABI tests, run without a GPU (CI) or with one:
#  1. ABI facts (struct layouts, enum values, macros, initializers) of include/nccl.h, as C and C++,
#     equal NVIDIA NCCL 2.32.3's (expected/abi_facts.txt);
#  2. every prototype has NCCL's exact type (prototypes.c, compile-time);
#  3. the library exports exactly NCCL 2.32.3's dynamic symbols (expected/exported_symbols.txt)
#     (the whole 2.32.3 host API), has soname libnccl.so.2 and needs no CUDA library at link time;
#  4. behaviour.c and param.c, compiled as C and as C++ and linked as a NCCL application would be
#     (-lnccl), pass;
#  5. gpu_comm.c, gpu_streams.c, gpu_pair.c, gpu_syncwait.c, gpu_window.c, gpu_grow.c, gpu_encryption.c,
#     gpu_rma.c, gpu_collcfg.c, gpu_suspend.c and gpu_a2a_inplace.c (run on GPUs by ffi-tests/gpu.sh)
#     compile.
# Usage: ffi-tests/run.sh [DIR containing liboxccl.so]   (default target/release)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
lib_dir=$(cd "${1:-$root/target/release}" && pwd)
lib=$lib_dir/liboxccl.so
cuda_inc=${CUDA_INCLUDE:-$root/.tools/cuda/nvidia/cu13/include}
[ -f "$lib" ] || { echo "ffi-tests: $lib not found (build first)"; exit 1; }
[ -f "$cuda_inc/cuda_runtime.h" ] || { echo "ffi-tests: CUDA headers not found at $cuda_inc (run scripts/setup-cuda.sh or set CUDA_INCLUDE)"; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$here"
inc=(-I"$root/include" -I"$cuda_inc")
step() { printf 'ffi-tests: %s ... ' "$1"; }

step "ABI facts (C)"
gcc -std=c11 -Wall -Werror "${inc[@]}" abi_facts.c -o "$out/facts_c"
"$out/facts_c" | diff -u expected/abi_facts.txt -
echo ok
step "ABI facts (C++)"
g++ -x c++ -std=c++17 -Wall -Werror "${inc[@]}" abi_facts.c -o "$out/facts_cpp"
"$out/facts_cpp" | diff -u expected/abi_facts.txt -
echo ok

step "prototypes"
gcc -std=gnu11 -Wall -Werror -Wno-deprecated-declarations "${inc[@]}" -c prototypes.c -o "$out/prototypes.o"
echo ok

step "exported symbols"
# Exactly NCCL 2.32.3's nccl*/pnccl* symbols, nothing more, nothing less.
nm -D --defined-only "$lib" | awk '{print $3}' | sort | diff -u expected/exported_symbols.txt -
echo "ok ($(wc -l < expected/exported_symbols.txt) symbols, NCCL 2.32.3's)"
step "soname and dependencies"
readelf -d "$lib" | grep -q 'SONAME.*\[libnccl\.so\.2\]' || { echo "soname is not libnccl.so.2"; exit 1; }
if readelf -d "$lib" | grep NEEDED | grep -Eq 'libcuda|libcudart|libnccl'; then
  echo "links a CUDA or NCCL library at load time:"; readelf -d "$lib" | grep NEEDED; exit 1
fi
echo ok

# Link the way applications link NCCL: -lnccl, resolved through libnccl.so -> libnccl.so.2 -> oxccl.
mkdir -p "$out/lib"
ln -s "$lib" "$out/lib/libnccl.so.2"
ln -s libnccl.so.2 "$out/lib/libnccl.so"
step "behaviour (C)"
gcc -std=c11 -Wall -Werror -Wno-deprecated-declarations "${inc[@]}" behaviour.c -L"$out/lib" -lnccl -o "$out/behaviour_c"
LD_LIBRARY_PATH="$out/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$out/behaviour_c"
step "behaviour (C++)"
g++ -x c++ -std=c++17 -Wall -Werror -Wno-deprecated-declarations "${inc[@]}" behaviour.c -x none -L"$out/lib" -lnccl -o "$out/behaviour_cpp"
LD_LIBRARY_PATH="$out/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$out/behaviour_cpp"
step "parameter API (C)"
gcc -std=c11 -Wall -Werror "${inc[@]}" param.c -L"$out/lib" -lnccl -lpthread -o "$out/param_c"
LD_LIBRARY_PATH="$out/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$out/param_c"
step "parameter API (C++)"
g++ -x c++ -std=c++17 -Wall -Werror "${inc[@]}" param.c -x none -L"$out/lib" -lnccl -lpthread -o "$out/param_cpp"
LD_LIBRARY_PATH="$out/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$out/param_cpp"
# gpu_comm.c runs on the GPU machine (ffi-tests/gpu.sh); here it must compile against the header.
step "gpu_comm compiles"
gcc -std=gnu11 -Wall -Werror -Wno-deprecated-declarations "${inc[@]}" -c gpu_comm.c -o "$out/gpu_comm.o"
echo ok
step "gpu_streams compiles"
gcc -std=gnu11 -Wall -Werror -Wno-deprecated-declarations "${inc[@]}" -c gpu_streams.c -o "$out/gpu_streams.o"
echo ok
step "gpu_pair compiles"
gcc -std=gnu11 -Wall -Werror -Wno-deprecated-declarations "${inc[@]}" -c gpu_pair.c -o "$out/gpu_pair.o"
echo ok
step "gpu_window compiles"
gcc -std=gnu11 -Wall -Werror -Wno-deprecated-declarations "${inc[@]}" -c gpu_window.c -o "$out/gpu_window.o"
echo ok
step "gpu_syncwait compiles"
gcc -std=gnu11 -Wall -Werror -Wno-deprecated-declarations "${inc[@]}" -c gpu_syncwait.c -o "$out/gpu_syncwait.o"
echo ok
step "gpu_encryption compiles"
gcc -std=gnu11 -Wall -Werror -Wno-deprecated-declarations "${inc[@]}" -c gpu_encryption.c -o "$out/gpu_encryption.o"
echo ok
step "gpu_grow compiles"
gcc -std=gnu11 -Wall -Werror -Wno-deprecated-declarations "${inc[@]}" -c gpu_grow.c -o "$out/gpu_grow.o"
echo ok
step "gpu_rma compiles"
gcc -std=gnu11 -Wall -Werror -Wno-deprecated-declarations "${inc[@]}" -c gpu_rma.c -o "$out/gpu_rma.o"
echo ok
step "gpu_collcfg compiles"
gcc -std=gnu11 -Wall -Werror -Wno-deprecated-declarations "${inc[@]}" -c gpu_collcfg.c -o "$out/gpu_collcfg.o"
echo ok
step "gpu_suspend compiles"
gcc -std=gnu11 -Wall -Werror -Wno-deprecated-declarations "${inc[@]}" -c gpu_suspend.c -o "$out/gpu_suspend.o"
echo ok
step "gpu_a2a_inplace compiles"
gcc -std=gnu11 -Wall -Werror -Wno-deprecated-declarations "${inc[@]}" -c gpu_a2a_inplace.c -o "$out/gpu_a2a_inplace.o"
echo ok
echo "ffi-tests: all passed"
