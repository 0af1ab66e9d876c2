#!/usr/bin/env bash
# Builds bench/peers/cpu/llamacpp_style.cpp (when the binary is missing or older than its
# source) with g++ -O3 -march=native and runs it on one thread; the arguments go to it:
#   bash bench/peers/cpu/llamacpp.sh [--vocab 151936] [--batch 1,8] [--groups 15]
#        [--repeats 5] [--configs greedy,temp,topk40-topp0.9,minp0.05] [--out FILE]
# Environment:
#   OUT_DIR  where the binary goes (default: .peers in this repository)
#   CXX      the compiler (default: g++)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
out_dir=${OUT_DIR:-$root/.peers}
src=$root/bench/peers/cpu/llamacpp_style.cpp
bin=$out_dir/llamacpp_style
cxx=${CXX:-g++}

if ! command -v "$cxx" >/dev/null; then
  echo "llamacpp.sh: $cxx not found: the peer needs a C++17 compiler (set CXX)" >&2
  exit 2
fi
if [[ ! -x $bin || $src -nt $bin ]]; then
  mkdir -p "$out_dir"
  echo "llamacpp.sh: building $bin" >&2
  "$cxx" -O3 -march=native -std=c++17 -o "$bin" "$src"
fi
exec "$bin" "$@"
