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
# `tandem api` and the dashboard: libmicrohttpd; their tests: nodejs + npm and the official OpenAI client (npm package
# openai), Debian's chromium driven by puppeteer-core (npm), both in tests/node_modules (ignored by git); predict's
# metrics are checked against python3-nltk's sentence_bleu, and python3-jieba measures how far tandem's word
# segmentation is from jieba's. The dashboard's charts: uPlot (npm package uplot) in deps/node_modules (ignored by
# git), which tandem serves from there.
# Images (vision-language data): libjpeg-turbo, libpng, libwebp (the decoders Debian's PIL uses); python3-pil, the
# reference the image tests compare against. Image classifiers: python3-torchvision (the ResNet reference of
# bench/bench_resnet.py and test_image_train), libdnnl-dev (oneDNN: the CPU backend's convolutions, a build and run-time
# dependency; bench/bench_conv.sh times it against tandem's own im2col + GEMM).
# qemu-user: test_isa_baseline runs what is carried to a GPU machine on an emulated Haswell (x86-64-v3).
set -e
PKGS="build-essential cmake pkg-config libopenblas-openmp-dev libopenblas0-openmp libomp-dev \
libyaml-dev libcjson-dev libpcre2-dev libutf8proc-dev clang libclang-rt-dev python3 python3-torch libjemalloc2 \
openmpi-bin libopenmpi-dev libhwloc-dev iproute2 iperf3 libcairo2-dev fonts-dejavu-core protobuf-compiler python3-protobuf \
python3-matplotlib libmicrohttpd-dev python3-nltk python3-jieba chromium libjpeg62-turbo-dev libpng-dev \
libwebp-dev python3-pil python3-torchvision libdnnl-dev qemu-user"
missing=""
# npm packages, outside git, each folder in one npm command (npm removes what a later --no-save install does not
# name): uPlot for the dashboard's charts into deps/; test-only tools into tests/: the official OpenAI client
# (test_api) and puppeteer-core (test_dashboard drives chromium with it).
npm_install() { # DIR PACKAGE@VERSION...
  dir=$1
  shift
  want=""
  for p in "$@"; do [ -f "$dir/node_modules/${p%@*}/package.json" ] || want=1; done
  [ -z "$want" ] && return 0
  command -v npm >/dev/null 2>&1 || return 0
  echo "install-deps: npm install $* into $dir/node_modules"
  mkdir -p "$dir"
  npm install --prefix "$dir" --no-save --no-package-lock --no-audit --no-fund "$@" >/dev/null 2>&1 ||
    echo "install-deps: npm could not install $* (what needs them says so)"
}
npm_packages() {
  root=$(cd "$(dirname "$0")/.." && pwd)
  npm_install "$root/deps" "uplot@$UPLOT_VERSION"
  npm_install "$root/tests" "openai@$OPENAI_VERSION" "puppeteer-core@$PUPPETEER_VERSION"
}
OPENAI_VERSION=4.95.0
UPLOT_VERSION=1.6.32
PUPPETEER_VERSION=24.43.1 # the newest that runs on Debian's Node.js 20 (25.x needs 22.12)
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
command -v npm >/dev/null 2>&1 || missing="$missing nodejs npm"
[ -z "$missing" ] && { npm_packages; exit 0; }
echo "install-deps: installing$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
npm_packages
