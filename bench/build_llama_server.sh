#!/usr/bin/env bash
# Build llama.cpp's own `llama-server`, `llama-quantize` and `llama-perplexity` once, from the
# source the llama-cpp-python sdist on PyPI vendors, into a cache folder outside the
# repository; print the server binary's path (the other two lie beside it).
# Usage: bench/build_llama_server.sh [--cached] [VERSION]   (env: LLAMA_SERVER_CACHE, default ~/.cache/astrai/llama.cpp)
# About 15-20 minutes on 2 cores the first time; later calls print the cached path at once.
# --cached: never build; exit 1 naming the folder when the binaries are not there (the tests).
set -euo pipefail
cached_only=false
if [ "${1:-}" = "--cached" ]; then
  cached_only=true
  shift
fi
version="${1:-0.3.36}"
# llama.cpp's AMX kernels, compiled in wherever -march=native has AMX, die on their first
# matmul in this version: SIGILL at a `tilezero` in tinygemm_kernel_amx<block_q8_1,
# block_q4_1> (seen on a Sapphire Rapids VM whose AMX torch's oneDNN uses fine). On such a CPU
# the build leaves AMX out; AVX-512 and VNNI stay, as in every other native build.
flags=()
variant="$version"
if grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then
  no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  flags=(-DCMAKE_C_FLAGS="$no_amx" -DCMAKE_CXX_FLAGS="$no_amx")
  variant="$version-no-amx"
fi
cache="${LLAMA_SERVER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/astrai/llama.cpp}/$variant"
binary="$cache/build/bin/llama-server"
tools=(llama-server llama-quantize llama-perplexity)
built=true
for tool in "${tools[@]}"; do
  [ -x "$cache/build/bin/$tool" ] || built=false
done
if $built; then
  echo "$binary"
  exit 0
fi
if $cached_only; then
  echo "no ${tools[*]} built under $cache/build/bin" >&2
  exit 1
fi
python="${PYTHON:-python3}"
mkdir -p "$cache"
cd "$cache"
if [ ! -d src ]; then
  "$python" -m pip download --quiet --no-deps --no-binary :all: -d sdist "llama_cpp_python==$version" >&2
  mkdir -p src.tmp
  tar -xzf sdist/llama_cpp_python-"$version".tar.gz -C src.tmp --strip-components=1
  mv src.tmp src
fi
# GGML_NATIVE: the kernels of the CPU this runs on (llama.cpp's own default build).
cmake -S src/vendor/llama.cpp -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=ON "${flags[@]}" >&2
cmake --build build --target "${tools[@]}" -j"$(nproc)" >&2
echo "$binary"
