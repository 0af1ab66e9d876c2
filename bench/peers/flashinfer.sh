#!/usr/bin/env bash
# Builds bench/peers/flashinfer_peers.cu against FlashInfer's headers (when the binary is
# missing or older than its sources) and runs it; the arguments go to the harness:
#   bash bench/peers/flashinfer.sh [--vocab 32768,65536,151936] [--batch 1,4,8,64] [--out FILE]
# Environment:
#   FLASHINFER_INCLUDE  the folder holding flashinfer/sampling.cuh
#                       (default: .peers/flashinfer/include in this repository)
#   OUT_DIR             where the binary goes (default: .peers in this repository)
#   CUDA_ARCH           nvcc's -arch (default: sm_90, Hopper)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
include=${FLASHINFER_INCLUDE:-$root/.peers/flashinfer/include}
out_dir=${OUT_DIR:-$root/.peers}
src=$root/bench/peers/flashinfer_peers.cu
bin=$out_dir/flashinfer_peers

if [[ ! -f $include/flashinfer/sampling.cuh ]]; then
  echo "flashinfer.sh: no flashinfer/sampling.cuh in $include: set FLASHINFER_INCLUDE to the folder" \
    "that holds FlashInfer's flashinfer/ headers (see bench/peers/README.md)" >&2
  exit 2
fi
PATH=$PATH:/usr/local/cuda/bin
if ! command -v nvcc >/dev/null; then
  echo "flashinfer.sh: nvcc not found: the harness needs the CUDA toolkit" >&2
  exit 2
fi
if [[ ! -x $bin || $src -nt $bin || $include/flashinfer/sampling.cuh -nt $bin ]]; then
  mkdir -p "$out_dir"
  echo "flashinfer.sh: building $bin (about a minute)" >&2
  nvcc -O3 -std=c++17 -arch="${CUDA_ARCH:-sm_90}" -I "$include" "$src" -o "$bin"
fi
exec "$bin" "$@"
