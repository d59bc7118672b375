#!/usr/bin/env bash
# Builds the two peers graft's speed is judged against, each from its PyPI sdist, outside the repo:
#   llama.cpp     vendor/llama.cpp of llama-cpp-python
#   ik_llama.cpp  vendor/ik_llama.cpp of ik-llama-cpp-python; its sdist lacks
#                 common/cmake/build-info-gen-cpp.cmake, so one is written here that configure_file()s
#                 common/build-info.cpp.in (version "sdist", the compiler named)
# CMake Release, GGML_NATIVE=ON (each peer's own default build for the machine it runs on); targets
# llama-bench, llama-quantize, llama-perplexity, the one-shot CLI (llama.cpp's llama-completion, ik's
# llama-cli: bench/vs_peers.sh's time to first token), and ik's llama-sweep-bench.
#
#   bench/build_peers.sh [DIR]       (default /work/peers; prints the two bin/ directories)
#   PEER_ISA=avx2 bench/build_peers.sh    AVX2 builds beside them (build-avx2/: GGML_NATIVE=OFF, which
#       turns on AVX, AVX2, FMA, F16C and BMI2 and leaves AVX-512 off in both peers), to stand for an
#       AVX2-only machine on an AVX-512 one (bench/vs_peers.sh ISA=avx2).
#
# Several minutes per peer on 2 cores; ccache is used where installed. Re-running skips what is built.
set -euo pipefail
DIR=${1:-/work/peers}
PYTHON=${PYTHON:-python3}
mkdir -p "$DIR"
log() { echo "[build_peers] $*" >&2; }
launcher=$(command -v ccache >/dev/null && echo "-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache" || true)
# PEER_CFLAGS: extra compiler flags for both peers. A VM may advertise AMX (cpuinfo's amx_tile,
# amx_int8) whose tile instructions then fault: llama.cpp's native build uses them and dies with
# SIGILL in ggml_backend_amx_mul_mat; PEER_CFLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" keeps
# the rest of -march=native (an explicit -mno-* outranks what -march implies, in either order).
PEER_CFLAGS=${PEER_CFLAGS:-}
case ${PEER_ISA:-native} in
  native) BUILD=build NATIVE=ON ;;
  avx2) BUILD=build-avx2 NATIVE=OFF ;;
  *) echo "PEER_ISA: native or avx2" >&2; exit 2 ;;
esac

fetch() {  # fetch PYPI_NAME DIR_GLOB -> the unpacked sdist's directory
  local name=$1 glob=$2
  if ! ls -d "$DIR"/$glob >/dev/null 2>&1; then
    log "downloading the $name sdist"
    "$PYTHON" -m pip download --quiet --no-binary :all: --no-deps "$name" -d "$DIR"
    tar -xzf "$(ls "$DIR"/${glob}.tar.gz | head -1)" -C "$DIR"
  fi
  ls -d "$DIR"/$glob | grep -v '\.tar\.gz$' | head -1
}

build() {  # build SOURCE_DIR TARGET...
  local src=$1
  shift
  if ! (cd "$src/$BUILD/bin" 2>/dev/null && ls "$@" >/dev/null 2>&1); then
    log "building $src/$BUILD (several minutes on 2 cores)"
    cmake -S "$src" -B "$src/$BUILD" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=$NATIVE -DLLAMA_CURL=OFF \
          -DLLAMA_BUILD_TESTS=OFF -DCMAKE_C_FLAGS="$PEER_CFLAGS" -DCMAKE_CXX_FLAGS="$PEER_CFLAGS" $launcher >/dev/null
    cmake --build "$src/$BUILD" -j"$(nproc)" --target "$@" >/dev/null
  fi
  echo "$src/$BUILD/bin"
}

LLAMA=$(fetch llama-cpp-python 'llama_cpp_python-*')/vendor/llama.cpp
IK=$(fetch ik-llama-cpp-python 'ik_llama_cpp_python-*')/vendor/ik_llama.cpp
GEN="$IK/common/cmake/build-info-gen-cpp.cmake"
if [ ! -f "$GEN" ]; then
  mkdir -p "$(dirname "$GEN")"
  cat >"$GEN" <<'CMAKE'
# Written by graft's bench/build_peers.sh: the sdist has no git history to describe.
set(BUILD_NUMBER 0)
set(BUILD_COMMIT "sdist")
set(BUILD_COMPILER "${CMAKE_C_COMPILER_ID} ${CMAKE_C_COMPILER_VERSION}")
set(BUILD_TARGET "native")
configure_file(${CMAKE_CURRENT_LIST_DIR}/../build-info.cpp.in ${CMAKE_CURRENT_LIST_DIR}/../build-info.cpp)
CMAKE
fi
build "$LLAMA" llama-bench llama-quantize llama-perplexity llama-completion
build "$IK" llama-bench llama-quantize llama-perplexity llama-sweep-bench llama-cli
