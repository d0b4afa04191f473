#!/bin/sh
# Installs every Debian package tandem's build, tests and benchmarks need (idempotent, quiet when done).
# Build: compiler, CMake, OpenBLAS (OpenMP build), OpenMP, libyaml (configs), cJSON (config.json,
# safetensors headers), PCRE2 + utf8proc (tokenizer pre-split regexes, NFC). Tests: clang + compiler-rt
# (ASan/UBSan build). Benchmarks: python3-torch with jemalloc (the PyTorch reference in ../shared/ref),
# python3-matplotlib (the loss curves of bench/bench_lowcomm.py).
# Comm layer: Open MPI (openmpi-bin, libopenmpi-dev; hwloc, which it brings, also serves `tandem topo`); its netns test kit and allreduce bench: iproute2
# (ip netns, tc tbf) and iperf3 (the single-TCP-stream reference).
# Outputs: cairo + the DejaVu fonts (training_loss.png, drawn as LLaMA-Factory's matplotlib plot). Tests:
# protobuf-compiler + python3-protobuf (the independent reader of TensorBoard event files, tests/tools/tb_read.py).
# `tandem api`: libmicrohttpd; its tests: nodejs + npm and the official OpenAI client (npm package openai) in
# tests/node_modules (ignored by git); predict's metrics are checked against python3-nltk's sentence_bleu, and
# python3-jieba measures how far tandem's word segmentation is from jieba's.
# Images (vision-language data): libjpeg-turbo, libpng, libwebp (the decoders Debian's PIL uses); python3-pil, the
# reference the image tests compare against.
set -e
PKGS="build-essential cmake pkg-config libopenblas-openmp-dev libopenblas0-openmp libomp-dev \
libyaml-dev libcjson-dev libpcre2-dev libutf8proc-dev clang libclang-rt-dev python3 python3-torch libjemalloc2 \
openmpi-bin libopenmpi-dev libhwloc-dev iproute2 iperf3 libcairo2-dev fonts-dejavu-core protobuf-compiler python3-protobuf \
python3-matplotlib libjpeg62-turbo-dev libpng-dev libwebp-dev python3-pil libmicrohttpd-dev python3-nltk python3-jieba"
missing=""
# The official OpenAI client for tests/cli/test_api.sh, into tests/node_modules (outside git), once.
openai_client() {
  dir=$(cd "$(dirname "$0")/../tests" && pwd)
  [ -f "$dir/node_modules/openai/package.json" ] && return 0
  command -v npm >/dev/null 2>&1 || return 0
  echo "install-deps: npm install openai@$OPENAI_VERSION into $dir/node_modules"
  npm install --prefix "$dir" --no-save --no-package-lock --no-audit --no-fund "openai@$OPENAI_VERSION" >/dev/null 2>&1 ||
    echo "install-deps: npm could not install openai (test_api will say so)"
}
OPENAI_VERSION=4.95.0
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
command -v npm >/dev/null 2>&1 || missing="$missing nodejs npm"
[ -z "$missing" ] && { openai_client; exit 0; }
echo "install-deps: installing$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
openai_client
