#!/usr/bin/env bash
# Prints the CMAKE_ARGS that build llama-cpp-python (the peer of tests/tests/compile_gguf.rs
# and of `lql-bench --peer llama.cpp`) for this x86 machine's instruction sets, from
# /proc/cpuinfo, with AMX always off.
#
# Why not GGML_NATIVE=ON: on Xeons that report AMX, -march=native compiles ggml's AMX
# matmul, and in virtual machines that do not grant the AMX tile state its first
# `ldtilecfg` raises a general-protection fault (llama-cpp-python 0.3.36: every eval
# segfaults). Naming the vector extensions explicitly keeps AVX2/AVX-512/VNNI and drops AMX.
set -euo pipefail
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
has() { [[ " $flags " == *" $1 "* ]] && echo ON || echo OFF; }
args=(-DGGML_NATIVE=OFF -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_BLAS=OFF
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
  -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
if [ "$(uname -m)" = "x86_64" ]; then
  args+=(-DGGML_SSE42="$(has sse4_2)" -DGGML_AVX="$(has avx)" -DGGML_AVX2="$(has avx2)"
    -DGGML_FMA="$(has fma)" -DGGML_F16C="$(has f16c)" -DGGML_BMI2="$(has bmi2)"
    -DGGML_AVX_VNNI="$(has avx_vnni)"
    -DGGML_AVX512="$(has avx512f)" -DGGML_AVX512_VBMI="$(has avx512vbmi)"
    -DGGML_AVX512_VNNI="$(has avx512_vnni)" -DGGML_AVX512_BF16="$(has avx512_bf16)")
else
  args=(-DGGML_NATIVE=ON "${args[@]:1}")
fi
echo "${args[*]}"
