#!/bin/sh
# mutants.sh -- shows that the tests can fail: plants one known bug at a time in a copy of the source, rebuilds
# the test that should catch it there (the parity test unless a mutant names another; image mutants rebuild
# test_parity_vl_data, which reads ../shared/ref's vision-language fixtures: skipped without ../shared, a failure
# with CI=true; a mutant naming tests/cli/NAME.sh runs that script on the copy's tandem binary) and requires it to
# fail. The product code is never touched: each mutant is a literal text replacement in the copy (the script fails
# if the text is no longer found, so a refactor cannot silently turn a mutant into a no-op).
# Usage: [MUTANTS_ONLY="GLOB ..."] tests/mutants/mutants.sh [SOURCE_DIR]   (default: the checkout this script is in)
set -eu
SRC=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tandem-mutants.XXXXXX")
trap 'rm -rf "$WORK"' EXIT INT TERM
mkdir -p "$WORK/src"
# only what building the parity test needs
(cd "$SRC" && tar cf - --exclude=node_modules CMakeLists.txt cmake src tests examples) | (cd "$WORK/src" && tar xf -)
cmake -S "$WORK/src" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=OFF >"$WORK/cmake.log" 2>&1 ||
  { cat "$WORK/cmake.log"; echo "mutants: cmake failed"; exit 1; }

TEST=test_parity_fixtures # the test a mutant without its own must make fail
SHARED=$(cd "$SRC/.." && pwd)/shared
build_and_run() { # [TEST] -> exit status of the test (default $TEST); its output in $WORK/run.log
  t=${1:-$TEST}
  case $t in *.sh) run_cli "$t"; return ;; esac
  cmake --build "$WORK/build" -j "$(nproc)" --target "$t" >"$WORK/build.log" 2>&1 ||
    { tail -20 "$WORK/build.log"; echo "mutants: build failed"; exit 1; }
  set +e
  TANDEM_TESTS_DIR="$WORK/src/tests" TANDEM_SHARED_DIR="$SHARED" OMP_NUM_THREADS=2 "$WORK/build/tests/$t" >"$WORK/run.log" 2>&1
  rc=$?
  set -e
  return $rc
}

run_cli() { # a command-line test (tests/cli/NAME.sh) on this copy's tandem binary, as ctest runs it
  extra= # test_mpi_comm.sh runs the comm unit test under mpirun
  [ "$1" != test_mpi_comm.sh ] || extra="test_unit_comm test_unit_diloco"
  cmake --build "$WORK/build" -j "$(nproc)" --target tandem $extra >"$WORK/build.log" 2>&1 ||
    { tail -20 "$WORK/build.log"; echo "mutants: build failed"; exit 1; }
  set +e
  TANDEM_TESTS_DIR="$WORK/src/tests" TANDEM_SHARED_DIR="$SHARED" TANDEM_BIN="$WORK/build/tandem" TANDEM_DEVICE=cpu \
    OMP_NUM_THREADS=2 sh "$WORK/src/tests/cli/$1" >"$WORK/run.raw" 2>&1
  rc=$?
  set -e
  sed 's/^FAIL: /check failed: /' "$WORK/run.raw" >"$WORK/run.log" # the lines mutant() quotes
  return $rc
}

passed=0 failed=0
if build_and_run; then
  echo "ok   unmutated source passes the parity test"
else
  tail -5 "$WORK/run.log"; echo "mutants: the unmutated source fails the parity test"; exit 1
fi

# the generation and dashboard tests must pass unmutated too
for t in test_unit_kv_generate test_unit_decode_kernels test_unit_decode_attention test_unit_sampling test_unit_nlg_metrics test_unit_dashboard test_unit_plan test_unit_lora_embed \
  test_unit_sync_device test_unit_frozen_ranges test_unit_comm_shared_gpu test_unit_memory_check test_unit_ifname \
  test_unit_nonfinite test_unit_size_limits test_unit_backend_profile test_unit_shard_layout test_unit_huge_file; do
  build_and_run $t || { tail -5 "$WORK/run.log"; echo "mutants: the unmutated source fails $t"; exit 1; }
done

# mutant NAME FILE OLD NEW [TEST]: replace the literal OLD by NEW in FILE (relative to src/), expect TEST (default the
# parity test) to fail
mutant() {
  name=$1 file="$WORK/src/src/$2" old=$3 new=$4 test=${5:-}
  # MUTANTS_ONLY="GLOB ...": only the mutants whose name matches one (to check new ones without the whole list)
  if [ -n "${MUTANTS_ONLY:-}" ]; then
    keep=0
    for g in $MUTANTS_ONLY; do case $name in $g) keep=1 ;; esac; done
    [ $keep -eq 1 ] || return 0
  fi
  cp "$file" "$WORK/orig"
  OLD="$old" NEW="$new" perl -0pi -e 's/\Q$ENV{OLD}\E/$ENV{NEW}/g' "$file"
  if cmp -s "$file" "$WORK/orig"; then
    echo "FAIL $name: text not found in src/$2: $old"; failed=$((failed + 1)); return
  fi
  if build_and_run $test; then
    echo "FAIL $name: ${test:-$TEST} still passes"; failed=$((failed + 1))
  else
    first=$(grep -m1 'check failed' "$WORK/run.log" | sed 's/.*check failed: //' | cut -c1-150)
    n=$(grep -c "check failed" "$WORK/run.log" || true)
    echo "ok   $name: caught by $n checks, first: $first"; passed=$((passed + 1))
    [ -z "${MUTANTS_VERBOSE:-}" ] || grep "check failed" "$WORK/run.log" | sed "s/.*check failed: /       /" | cut -c1-160
  fi
  cp "$WORK/orig" "$file"
}

mutant adamw-bias-correction-t-1 trainer/optimizer.c \
  'bc1 = 1.0 - pow(h->beta1, o->step), bc2 = 1.0 - pow(h->beta2, o->step)' \
  'bc1 = 1.0 - pow(h->beta1, o->step - 1), bc2 = 1.0 - pow(h->beta2, o->step - 1)'
mutant adamw-eps-inside-sqrt backend/cpu_backend.c \
  'float denom = sqrtf(vi) / bc2_sqrt + epsf;' \
  'float denom = sqrtf(vi / (bc2_sqrt * bc2_sqrt) + epsf);'
mutant weight-decay-on-norm-weights model/model.c \
  'p->decay = ndim >= 2;' \
  'p->decay = ndim >= 2 || strstr(p->name, "norm") != NULL;'
mutant profiled-matmul-drops-beta backend/backend_profile.c \
  'g_inner->matmul(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);' \
  'g_inner->matmul(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta * 0 + 1.0f, C, ldc);' test_unit_backend_profile
mutant profiled-call-counted-twice backend/backend_profile.c \
  'g_calls[op]++;' \
  'g_calls[op] += 2;' test_unit_backend_profile
mutant loss-total-not-cleared-after-read backend/cpu_backend.c \
  'g_ce_loss = 0.0, g_ce_count = 0;' \
  'g_ce_count = 0;'
mutant loss-total-count-not-cleared-after-read backend/cpu_backend.c \
  'g_ce_loss = 0.0, g_ce_count = 0;' \
  'g_ce_loss = 0.0;'
mutant rope-theta-1pct-off model/model_forward.c \
  'pow(m->cfg.rope_theta, ' \
  'pow(m->cfg.rope_theta * 1.01, '
mutant grad-clipping-skipped trainer/optimizer.c \
  'if (coef < 1.0) model->be->scale' \
  'if (coef < 0.0) model->be->scale'
mutant lora-scale-alpha-not-alpha-over-r model/model.c \
  '(float)(m->lora.alpha / m->lora.r)' \
  '(float)(m->lora.alpha)'
mutant qwen3-k-heads-normed-with-q-norm model/model_forward.c \
  's->qk_raw + HD, HD + KVD, w->kn, T,' \
  's->qk_raw + HD, HD + KVD, w->qn, T,'
# LoRA on embed_tokens (tests/unit/test_unit_lora_embed.c)
mutant lora-embedding-A-saved-as-held model/model_io.c \
  '        if (p->file_transposed) transpose(host, p->shape[0], p->shape[1]);
' '' test_unit_lora_embed
mutant lora-embedding-grad-unscaled model/model_forward.c \
  'be->matmul(0, 0, T, r, D, m->lora_scale, a->dres, D, m->lora_emb.B, r, 0.0f, a->dla, r);' \
  'be->matmul(0, 0, T, r, D, 1.0f, a->dres, D, m->lora_emb.B, r, 0.0f, a->dla, r);' test_unit_lora_embed
mutant lora-embedding-merge-untransposed model/merge.c \
  'be->matmul(0, 1, m->V, D, r, m->lora_scale, m->lora_emb.A, r, m->lora_emb.B, r, 1.0f, m->embed, D);' \
  'be->matmul(0, 1, m->V, D, r, m->lora_scale, m->lora_emb.A, r, m->lora_emb.B, r, 0.0f, m->embed, D);' test_unit_lora_embed
# generation (KV cache), sampling and predict's metrics
# (a rotary position shifted by a constant for q and k alike changes nothing: attention sees relative positions)
mutant kv-rope-every-row-at-the-first-position backend/cpu_decode.c \
  'const float *c = cos + (size_t)pos[t] * half, *s = sin + (size_t)pos[t] * half;' \
  'const float *c = cos + (size_t)pos[0] * half, *s = sin + (size_t)pos[0] * half;' test_unit_kv_generate
mutant kv-attention-sees-the-future backend/cpu_attention.c \
  'float *p = P + (size_t)ii * nc, m = tn_max(p, i + 1);
                float inv = 1.0f / causal_exp_row(p, i, nc, m);
                for (int j = 0; j <= i; j++) p[j] *= inv;' \
  'float *p = P + (size_t)ii * nc, m = tn_max(p, nc);
                float inv = 1.0f / causal_exp_row(p, nc - 1 + 0 * i, nc, m);
                for (int j = 0; j < nc; j++) p[j] *= inv;' test_unit_kv_generate
# the decode product (one weight stream per token): a chain reading the wrong weights or left out of the sum, the
# scalar tail cut short, the multi-row kernel's x rows at the wrong stride, the beta term dropped
mutant decode-gemv-fourth-chain-reads-the-third-vector backend/cpu_decode.c \
  'a3 += vload(w + j + 3 * VL) * vload(x + j + 3 * VL);' 'a3 += vload(w + j + 2 * VL) * vload(x + j + 3 * VL);' \
  test_unit_decode_kernels
mutant decode-gemv-fourth-chain-not-summed backend/cpu_decode.c \
  'float s = vsum((a0 + a1) + (a2 + a3));' 'float s = vsum((a0 + a1) + a2);' test_unit_decode_kernels
mutant decode-gemv-x-rows-at-stride-k backend/cpu_decode.c \
  'acc[m] += wv * vload(x + (size_t)m * ldx + j);' 'acc[m] += wv * vload(x + (size_t)m * K + j);' \
  test_unit_decode_kernels
mutant decode-gemv-paired-row-reads-the-first-rows-weights backend/cpu_decode.c \
  'v1 = vload(w1 + j);' 'v1 = vload(w0 + j);' test_unit_decode_kernels
mutant decode-gemv-beta-dropped backend/cpu_decode.c \
  '*out = beta == 0.0f ? alpha * s : alpha * s + beta * *out;' '*out = alpha * s + 0.0f * beta;' test_unit_decode_kernels
mutant decode-gemv-tail-dropped backend/cpu_decode.c \
  'for (; j < K; j++) s += w[j] * x[j];' 'for (; j < K - 1; j++) s += w[j] * x[j];' \
  test_unit_decode_kernels
# the decode row's attention, in chunks of cached positions merged per head (cpu_decode_attention.c)
mutant kv-decode-row-misses-its-own-key backend/cpu_attention.c \
  'j1 = j0 + DEC_CHUNK < pos[t0] + 1 ? j0 + DEC_CHUNK : pos[t0] + 1;' \
  'j1 = j0 + DEC_CHUNK < pos[t0] + 1 ? j0 + DEC_CHUNK : pos[t0] + (pos[t0] == 0);' test_unit_decode_attention
mutant kv-decode-gqa-group-of-head-wrong backend/cpu_decode_attention.c \
  'S[(size_t)h * n + j], vr + (size_t)(h / rep) * hd, hd);' 'S[(size_t)h * n + j], vr + (size_t)(h % rep) * hd, hd);' \
  test_unit_decode_attention
mutant kv-decode-last-chunk-not-merged backend/cpu_attention.c \
  'part0[run + 1] - part0[run], i % H, H, hd);' \
  'part0[run + 1] - part0[run] - (part0[run + 1] - part0[run] > 1), i % H, H, hd);' test_unit_decode_attention
mutant kv-decode-chunks-merged-without-their-max backend/cpu_decode_attention.c \
  'float w = tn_expf(p[hd] - M);' 'float w = tn_expf(0.0f * M);' test_unit_decode_attention
mutant kv-decode-merge-overwrites-prefill-rows backend/cpu_attention.c \
  'if (part0[run + 1] > part0[run])' 'if (part0[run + 1] >= part0[run])' test_unit_decode_attention
mutant kv-positions-restart-each-step model/kv_forward.c \
  'kv->host_pos[t] = kv->len[segs[i].slot] + j;' 'kv->host_pos[t] = j;' test_unit_kv_generate
mutant kv-gqa-group-of-head-wrong backend/cpu_attention.c \
  'const float *K = k + (size_t)g * hd, *V = v + (size_t)g * hd;' 'const float *K = k, *V = v;' test_unit_kv_generate
mutant kv-lora-unmerged-skipped model/kv_forward.c \
  '    if (!p->A) return;
    int r = m->lora.r;' '    if (p->A) return;
    int r = m->lora.r;' test_unit_kv_generate
mutant penalty-per-occurrence model/sampling.c \
  'if (id < 0 || id >= V || s->mark[id] == s->stamp) continue;' 'if (id < 0 || id >= V) continue;' test_unit_sampling
mutant top-p-before-temperature model/sampling.c \
  '    if (sp->temperature != 1.0) {
        float t = (float)sp->temperature;
        for (int v = 0; v < V; v++) s->x[v] /= t;
    }' '' test_unit_sampling
mutant bleu-method3-no-doubling infer/nlg_metrics.c '1.0 / (ldexp(1.0, ++zeros) * (double)den)' \
  '1.0 / (ldexp(1.0, ++zeros > 0) * (double)den)' test_unit_nlg_metrics
mutant rouge-n-counts-repeats infer/nlg_metrics.c 'if (i == 0 || ngram_cmp(&out[i], &out[u - 1])) out[u++] = out[i];' \
  'out[u++] = out[i];' test_unit_nlg_metrics

# NCCL_SOCKET_IFNAME's rules (tests/unit/test_unit_ifname.c)
mutant ifname-prefix-read-as-exact-name launch/ifname.c \
  'return exact ? strlen(name) == len && strncmp(item, name, len) == 0 : strncmp(item, name, len) == 0;' \
  'return exact + strlen(name) == len + exact && strncmp(item, name, len) == 0;' test_unit_ifname
mutant ifname-port-kept-in-the-name launch/ifname.c \
  'hit = item_match(p, name_len < len ? name_len : len, name, exact);' 'hit = item_match(p, name_len < len ? len : len, name, exact);' \
  test_unit_ifname
mutant ifname-exclusion-keeps-loopback launch/ifname.c \
  'if (pass == 0 && spec[0] == '"'^'"' && is_loopback(ifs[i])) continue;' 'if (pass == 0 && spec[0] == '"'^'"' && is_loopback(ifs[i]) && 0) continue;' test_unit_ifname

# the ResNet (test_parity_resnet against torchvision's float64 run): BN variance conventions, padding, downsample
# stride, running-statistics momentum
if [ ! -d "$SHARED/ref/fixtures/resnet18w8-f64" ]; then
  echo "skip ResNet mutants: $SHARED/ref/fixtures is absent"
  [ "${CI:-}" != true ] || { echo "mutants: ../shared is absent and CI=true"; exit 1; }
elif build_and_run test_parity_resnet; then
  echo "ok   unmutated source passes test_parity_resnet"
  mutant bn-normalises-with-unbiased-variance backend/cpu_image.c 'double var = ss / M;' 'double var = ss / (M - 1);' \
    test_parity_resnet
  mutant bn-running-var-takes-biased-variance backend/cpu_image.c '(float)(ss / (M - 1))' '(float)(ss / M)' \
    test_parity_resnet
  mutant resnet-stem-padding-off-by-one model/resnet.c 'w, 7, 2, 3);' 'w, 7, 2, 2);' test_parity_resnet
  mutant conv-onednn-activations-read-as-nchw backend/cpu_conv_dnnl.c \
    'st = {(dnnl_dim_t)H * W, (dnnl_dim_t)N * H * W, W, 1};' 'st = {(dnnl_dim_t)Ch * H * W, (dnnl_dim_t)H * W, W, 1};' \
    test_parity_resnet
  mutant resnet-downsample-stride-1 model/resnet.c 'in, out, 1, stride, 0);' 'in, out, 1, 1, 0);' test_parity_resnet
  mutant bn-momentum-keras-convention backend/cpu_image.c \
    'run_mean[c] = (1.0f - momentum) * run_mean[c] + momentum * m;
        run_var[c] = (1.0f - momentum) * run_var[c] + momentum * unbiased;' \
    'run_mean[c] = momentum * run_mean[c] + (1.0f - momentum) * m;
        run_var[c] = momentum * run_var[c] + (1.0f - momentum) * unbiased;' test_parity_resnet
else
  tail -5 "$WORK/run.log"; echo "mutants: the unmutated source fails test_parity_resnet"; exit 1
fi

# image data and SyncBatchNorm (no ../shared needed): test_unit_image_set, test_unit_image_kernels
for t in test_unit_image_set test_unit_image_kernels; do
  build_and_run $t || { tail -5 "$WORK/run.log"; echo "mutants: the unmutated source fails $t"; exit 1; }
done
mutant cifar-crop-offsets-0-to-7 data/image_augment.c '% (uint64_t)(2 * pad + 1)) : 0;
    *dx' '% (uint64_t)(2 * pad)) : 0;
    *dx' test_unit_image_set
mutant normalize-multiplies-by-std data/image_augment.c '(v - m) / sd;' '(v - m) * sd;' test_unit_image_set
mutant cifar-planes-read-as-hwc data/cifar_bin.c 'memcpy(s->px + (size_t)(s->n + r) * CIFAR_PIXELS, rec + 1, CIFAR_PIXELS);' \
  'for (int q = 0; q < CIFAR_PIXELS; q++) s->px[(size_t)(s->n + r) * CIFAR_PIXELS + q] = rec[1 + q % 3 * 1024 + q / 3];' \
  test_unit_image_set
mutant conv-im2col-padding-off-by-one backend/cpu_conv.c 'int h = oh * s->stride - s->pad + i;
                float *row' 'int h = oh * s->stride - s->pad + 1 + i;
                float *row' test_unit_image_kernels
mutant conv-onednn-weight-gradient-overwritten backend/cpu_conv_dnnl.c 'port_out(&e->w_dw, 1, s);' \
  'port_out(&e->w_dw, 0, s);' test_unit_image_kernels
mutant image-ckpt-prune-keeps-one-more trainer/image_ckpt.c 'if (complete && kept < limit) kept++;' \
  'if (complete && kept <= limit) kept++;' test_unit_image_ckpt
mutant image-ckpt-prune-removes-newer-incomplete trainer/image_ckpt.c 'else if (kept >= 1) rc = rm_ckpt(dir);' \
  'else rc = rm_ckpt(dir);' test_unit_image_ckpt
mutant resnet-grad-ready-before-block-backward model/resnet_forward.c \
  '        block_backward(m, i, &G, &DX, T1, T2, i ? m->acts[i - 1].out : m->p0);
        ready(m, m->blocks[i].c1.w);' '        ready(m, m->blocks[i].c1.w);
        block_backward(m, i, &G, &DX, T1, T2, i ? m->acts[i - 1].out : m->p0);' test_unit_resnet
mutant step-lr-ignores-warmup config/schedule.c 'pow(gamma, (double)((step - warmup_steps) /' 'pow(gamma, (double)(step /' \
  test_unit_schedule
mutant syncbn-running-var-local-count backend/cpu_image.c 'float unbiased = n > 1 ? (float)(var * n / (n - 1)) : (float)var;' \
  'float unbiased = M > 1 ? (float)(var * M / (M - 1)) : (float)var;' test_unit_image_kernels
mutant syncbn-dgamma-from-global-sums backend/cpu_image.c '        dgamma[c] += (float)sdyx;
        dbeta[c] += (float)sdy;
    }
    buf[2 * C] = M;
    sync->sum(sync->ctx, buf, 2 * C + 1);' '    }
    buf[2 * C] = M;
    sync->sum(sync->ctx, buf, 2 * C + 1);
    for (int c = 0; c < C; c++) dgamma[c] += (float)buf[C + c], dbeta[c] += (float)buf[c];' test_unit_image_kernels

# the dashboard (tests/unit/test_unit_dashboard.c)
mutant dashboard-straggler-by-step-not-per-sample serve/dash_view.c \
  'per[r] = s > 0 ? c / s : c;' 'per[r] = s > 0 ? c : c;' test_unit_dashboard
mutant dashboard-straggler-after-two-windows serve/dash_view.h \
  '#define STRAGGLER_WINDOWS 3' '#define STRAGGLER_WINDOWS 2' test_unit_dashboard
mutant dashboard-points-printed-by-cjson serve/dash_view.c \
  'if (isfinite(v)) tn_sb_py_float(b, v);' 'if (isfinite(v)) tn_sb_printf(b, "%.15g", v);' test_unit_dashboard
mutant dashboard-event-ring-without-byte-bound serve/dash_store.c \
  's->bytes + b.n > STORE_EVENT_BYTES' 's->bytes + b.n > 4 * STORE_EVENT_BYTES' test_unit_dashboard
mutant dashboard-cpu-in-clock-ticks serve/dashboard.c \
  'if (clock_gettime(clock, &ts) != 0) return -1;' 'if (clock_gettime(clock, &ts) != 0 || 1) return -1;' test_unit_dashboard
# ZeRO 2-3 zero the gradient shard in place before backward (zero.c): skipped, it accumulates over the steps
mutant zero-grad-shard-not-zeroed trainer/zero.c \
  'be->zero(g + z->own[i].lo, z->own[i].n);' '(void)0;' test_zero.sh
# the op trace's sizes (tests/cli/test_op_trace.sh): a range op reporting its end offset, not its length
mutant op-trace-range-size comm/comm_shard.c 'tn_comm_op_new(c, what, hi - lo)' 'tn_comm_op_new(c, what, hi)' \
  test_op_trace.sh
# DiLoCo's pseudo-gradients weighted by each machine's samples (balance_ranks; tests/unit/test_unit_diloco.c via
# test_mpi_comm.sh): not weighted, weighted before the machine's own progress is taken (and twice), one round's
# samples carried into the next
mutant diloco-unweighted trainer/diloco.c '    if (f == 1.0) return;' '    if (1) return;' test_mpi_comm.sh
mutant diloco-weight-before-own-progress trainer/diloco.c \
  'd->pend_first = d->round_first, d->pend_n = d->round_n, d->round_n = 0;' \
  'd->pend_first = d->round_first, d->pend_n = d->round_n, d->round_n = 0; weigh(d);' test_mpi_comm.sh
mutant diloco-round-samples-kept trainer/diloco.c \
  '    d->round_samples[0] = d->round_samples[1] = 0;
    if (f == 1.0) return;' '    if (f == 1.0) return;' test_mpi_comm.sh
# ZeRO-3 on one machine maps one copy (comm_share.c): private copies of it never see the other ranks' updates
mutant zero3-machine-copy-private comm/comm_share.c \
  'PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0' 'PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0' test_zero_layout.sh
# its file on a huge-page tmpfs of its own (tests/unit/test_unit_huge_file.c): 4 KB pages, a size limit rounded
# down (SIGBUS on the last bytes), no user namespace for an unprivileged user
mutant huge-file-small-pages core/huge_file.c '"huge", "always"' '"huge", "never"' test_unit_huge_file
mutant huge-file-size-short core/huge_file.c '(pages ? pages : 1) * (HUGE_PAGE >> 10)' \
  '(pages > 1 ? pages - 1 : 1) * (HUGE_PAGE >> 10)' test_unit_huge_file
mutant zero3-machine-copy-memfd comm/comm_share.c 'int fd = tn_huge_file(bytes, huge_why, HUGE_WHY);' \
  'int fd = (tn_huge_file(bytes, huge_why, HUGE_WHY), -1);' test_zero_layout.sh
mutant huge-file-no-userns core/huge_file.c 'unshare(CLONE_NEWUSER | CLONE_NEWNS)' 'unshare(CLONE_NEWNS)' test_unit_huge_file
# the plan's cost model (tests/unit/test_unit_plan.c)
mutant plan-allreduce-bytes-halved trainer/plan.c \
  'r->link_bytes = M > 1 ? 2 * (M - 1) / M * G : 0;' 'r->link_bytes = M > 1 ? (M - 1) / M * G : 0;' test_unit_plan
mutant plan-no-overlap-with-backward trainer/plan.c \
  'end = fmax(end, ready[k] * busy) + each;' 'end = fmax(end, ready[k] * 0 + busy) + each;' test_unit_plan
mutant plan-buckets-ready-evenly trainer/plan.c \
  'if (j->n_groups <= 0 || total <= 0) continue;' 'continue;' test_unit_plan
mutant plan-link-cpu-after-backward-counted trainer/plan.c \
  'double next = comm > 0 ? cpu * fmin(1, before / comm) : cpu;' 'double next = cpu;' test_unit_plan
mutant plan-ranks-per-core-ignored trainer/plan.c \
  'return c->ranks_per_core > 1 ? c->ranks_per_core : 1;' 'return (void)c, 1;' test_unit_plan
mutant plan-zero3-gathers-wait-for-gradients trainer/plan.c \
  'fmax(queue_end(ready, nb, bwd, unit, &before), back + bwd / fmax(nb, 1))' 'queue_end(ready, nb, bwd, back, &before)' \
  test_unit_plan
mutant plan-zero3-refaulted-once-a-step trainer/plan.c \
  'return (1 + regathered_share(j)) * G * (N - 1) / N;' 'return (0 * regathered_share(j) + 1) * G * (N - 1) / N;' \
  test_unit_plan
mutant plan-refaults-not-shared-on-a-core trainer/plan.c \
  'job->refault_s_per_byte * refault_bytes(job, c, stage) * sharing(c)' 'job->refault_s_per_byte * refault_bytes(job, c, stage)' \
  test_unit_plan
mutant plan-refaults-charged-to-stage-2 trainer/plan.c \
  'if (stage < 3 || shared_params(j, c, stage)) return 0;' 'if (stage < 2 || shared_params(j, c, stage)) return 0;' \
  test_unit_plan
mutant plan-zero-link-cpu-taken-whole trainer/plan.c \
  'double next = r->comm_s > 0 ? cpu * fmin(1, under / r->comm_s) : cpu;' 'double next = cpu + 0 * under;' test_unit_plan
mutant plan-zero-first-gather-under-compute trainer/plan.c \
  'double gathers = fmin(fwd, gather) * (1 - 1 / fmax(nb, 1));' 'double gathers = fmin(fwd, gather);' test_unit_plan
mutant plan-zero-reduce-scatters-after-backward-charged trainer/plan.c \
  'if (stage < 3) return gathers + before;' 'if (stage < 3) return gathers + unit;' test_unit_plan
mutant plan-local-sum-cpu-free trainer/plan.c \
  'return local_passes(j, c, s) * 1.5 * 4' 'return 0 * local_passes(j, c, s) * 1.5 * 4' test_unit_plan
mutant plan-local-sum-cpu-not-shared-on-a-core trainer/plan.c \
  '1.5 * 4 * j->trainable * j->copy_s_per_byte * sharing(c);' '1.5 * 4 * j->trainable * j->copy_s_per_byte;' test_unit_plan
mutant plan-local-sum-zero3-second-gather-free trainer/plan.c \
  'return shared_params(j, c, 3) ? 1 : 2 + regathered_share(j);' 'return shared_params(j, c, 3) ? 1 : 2 + 0 * regathered_share(j);' \
  test_unit_plan
mutant plan-shared-params-still-refault trainer/plan.c \
  'if (stage < 3 || shared_params(j, c, stage)) return 0;' 'if (stage < 3) return 0;' test_unit_plan
mutant plan-shared-params-still-gather trainer/plan.c \
  'double gather = shared ? 0 : unit;' 'double gather = unit;' test_unit_plan
mutant plan-shared-params-across-machines trainer/plan.c \
  'j->zero_shared && c->machines == 1 && c->ranks_per_machine > 1' 'j->zero_shared && c->ranks_per_machine > 1' test_unit_plan
mutant plan-shared-params-sum-passes-as-gathered trainer/plan.c \
  'return shared_params(j, c, 3) ? 1 : 2' 'return shared_params(j, c, 3) ? 2 : 2' test_unit_plan
mutant plan-zero3-regathers-the-head trainer/plan.c \
  'skipped = j->group_floats[j->n_groups - 1];' 'skipped = 0 * j->group_floats[j->n_groups - 1];' test_unit_plan
mutant plan-zero3-regathers-the-embedding trainer/plan.c \
  'if (tower <= 0) skipped += j->group_floats[0];' 'if (tower < 0) skipped += j->group_floats[0];' test_unit_plan
mutant plan-tied-head-floats-left-in-the-head trainer/plan.c \
  'D + (mc->tie_word_embeddings ? 0 : V * D)' 'D + V * D' test_unit_plan
mutant plan-diloco-round-not-hidden trainer/plan.c \
  'fmax(0, round_link - H * step)' 'round_link' test_unit_plan
mutant plan-ring-ops-one-at-a-time trainer/plan.c \
  'segs <= RING_WINDOW ? RING_LANES * segs : RING_WINDOW' 'segs <= RING_WINDOW ? segs : RING_WINDOW' test_unit_plan
mutant plan-ring-latency-added-to-bytes trainer/plan.c \
  'return fmax(bytes / c->link_Bps + steps * c->link_latency_s, rounds' \
  'return (bytes / c->link_Bps + steps * c->link_latency_s) + (rounds' test_unit_plan
mutant plan-balanced-shards-sent-to-one-owner trainer/plan.c \
  '(M > 1 ? ring_time(c, (M - 1) * G / M, nb, rail, M - 1) : 0);' '(M > 1 ? ring_time(c, (M - 1) * G, nb, rail, M - 1) : 0);' \
  test_unit_plan
mutant plan-zero2-formula trainer/plan.c \
  'case TN_PLAN_ZERO2: state = 4 * P + 12 * P / N; break;' 'case TN_PLAN_ZERO2: state = 8 * P + 8 * P / N; break;' test_unit_plan
mutant plan-link-cpu-not-shared-by-ranks trainer/plan.c \
  'c->link_cpu_s_per_byte * r->link_bytes / c->ranks_per_machine * sharing(c)' \
  'c->link_cpu_s_per_byte * r->link_bytes * sharing(c)' test_unit_plan
mutant plan-link-cost-grows-the-forward trainer/plan.c \
  'step = j->compute_s - bwd0 + queue_end(ready, buckets, bwd, comm, &before);' \
  'step = j->compute_s + extra * j->forward_share / j->backward_share - bwd0 + queue_end(ready, buckets, bwd, comm, &before);' \
  test_unit_plan
mutant plan-link-stretch-ignored trainer/plan.c \
  'return fmax(cpu, c->link_stretch_s_per_byte * bytes);' 'return fmax(cpu, 0 * c->link_stretch_s_per_byte * bytes);' \
  test_unit_plan
mutant plan-link-stretch-charged-to-every-strategy trainer/plan.c \
  'if (s > TN_PLAN_DDP_INT4) return cpu;' 'if (s > TN_PLAN_N) return cpu;' test_unit_plan
mutant plan-link-stretch-shared-on-a-core trainer/plan.c \
  'c->link_stretch_s_per_byte * bytes);' 'c->link_stretch_s_per_byte * bytes * sharing(c));' test_unit_plan
# ZeRO's balanced shards (tests/unit/test_unit_shard_layout.c): the owner of a chunk, the optimizer's packed moments,
# a checkpoint shard's packed moments
mutant shard-chunk-owner-off-by-one trainer/shard_layout.c \
  'tn_comm_slice(l->bound[u + 1] - l->bound[u], l->size, s, &off, n);' \
  'tn_comm_slice(l->bound[u + 1] - l->bound[u], l->size, (s + 1) % l->size, &off, n);' test_unit_shard_layout
mutant adamw-span-moments-not-packed trainer/optimizer.c \
  'size_t k = at + (a - sp.lo);' 'size_t k = at * 0 + (a - sp.lo);' test_unit_shard_layout
mutant checkpoint-span-moments-not-packed trainer/checkpoint.c \
  'size_t src = (from + a - have[i].lo) * sizeof(float)' 'size_t src = (a - have[i].lo) * sizeof(float)' \
  test_unit_shard_layout
# units of whole huge pages: not started on a page boundary; the leftover pages not cut into N-page units; the CPU's
# large buffers not on a 2 MB boundary
mutant shard-pages-not-aligned trainer/shard_layout.c \
  'size_t a = whole ? (lo + page - 1) / page * page : hi' 'size_t a = whole ? lo : hi' test_unit_shard_layout
mutant shard-pages-leftover-ragged trainer/shard_layout.c \
  'step = step > span ? span : 0)' 'step = 0)' test_unit_shard_layout
mutant cpu-alloc-not-huge-aligned backend/cpu_backend.c \
  'if (extra) a = (a + HUGE_BYTES - 1) & ~(uintptr_t)(HUGE_BYTES - 1);' 'if (extra) a += 4096;' test_unit_shard_layout
# diloco_sync_steps (tests/cli/test_diloco_sync.sh): rounds aligned to step N, the phase's global sums, the consensus at N
mutant diloco-rounds-not-offset-by-sync-steps trainer/diloco.c \
  'if ((st->step - d->first) % d->H == 0' 'if (st->step % d->H == 0' test_diloco_sync.sh
mutant diloco-sync-phase-sums-machine-local trainer/sync_diloco.c \
  '    s->sync = ds->global, s->local = 0;' '    s->sync = ds->global;' test_diloco_sync.sh
mutant diloco-rounds-start-from-step-0 trainer/sync_diloco.c \
  '    tn_diloco_start(ds->d, ds->sync_steps);
}' '    if (ds->base.start_step >= ds->sync_steps) tn_diloco_start(ds->d, ds->sync_steps);
}' test_diloco_sync.sh
# a background exchange waiting for late peers (issue 27, tests/unit/test_unit_comm.c via test_mpi_comm.sh): the
# progress thread polls it every 20 ms at most, not every millisecond, while nobody waits for it
mutant background-exchange-polled-every-millisecond comm/comm_progress.c \
  '    int bg_idle = !c->cur && c->bg' '    int bg_idle = 0 && !c->cur && c->bg' test_mpi_comm.sh
mutant background-exchange-one-piece-ignored comm/comm_exchange.c \
  '    op->one_piece = o->P <= c->tune.piece' '    op->one_piece = 0 && o->P <= c->tune.piece' test_mpi_comm.sh
# comm_compression: int4 (tests/unit/test_unit_compress.c): nibbles sign-extended, the scale max|y| / 7
mutant int4-nibble-not-sign-extended comm/compress.c \
  'return (float)(v >= 8 ? (int)v - 16 : (int)v);' 'return (float)v;' test_unit_compress
mutant int4-scale-of-eight-levels comm/compress.c \
  'float scale = amax / L, inv' 'float scale = amax / (L == 7.0f ? 8.0f : L), inv' test_unit_compress
# The GPU path's host side, on the fake device and hand-made records (issue 32)
mutant diloco-memcpy-from-device-slab trainer/diloco.c \
  'd->m->be->download(d->g, d->m->slab, d->n);' 'memcpy(d->g, d->m->slab, d->n * sizeof *d->g);' test_unit_sync_device
mutant frozen-range-checked-at-first-address backend/frozen_ranges.h \
  'if (r[i].lo > p && r[i].lo < end &&' 'if (r[i].lo > end && r[i].lo < end &&' test_unit_frozen_ranges
mutant memory-check-gpu-frozen-in-fp32 trainer/memory_check.c \
  'tn_memory_estimate_frozen(cfg, &mc, seq_len, gpu ? t->frozen_bytes : 4, &n);' \
  'tn_memory_estimate_frozen(cfg, &mc, seq_len, 4, &n);' test_unit_memory_check
mutant memory-check-gpu-times-machine-ranks trainer/memory_check.c \
  'ranks = t->gpu_ranks > 1 ? t->gpu_ranks : 1;' 'ranks = local_ranks > 1 ? local_ranks : 1;' test_unit_memory_check
mutant shared-gpu-by-ordinal comm/comm_device.c \
  'if (a->bus[0] && b->bus[0]) return strcasecmp(a->bus, b->bus) == 0;' 'if (0) return 0;' test_unit_comm_shared_gpu
# Non-finite kernel inputs and absurd sizes (issue 24): the property tests must notice each guard missing.
mutant exp-nan-comes-out-finite backend/vmath.h 'return x == x ? e : x;' 'return e;' test_unit_nonfinite
mutant dropout-swallows-nan backend/cpu_backend.c \
  'y[i] = x[i] * (tn_hash_uniform(seed, i) >= p ? keep_scale : 0.0f);' \
  'y[i] = tn_hash_uniform(seed, i) >= p ? x[i] * keep_scale : 0.0f;' test_unit_nonfinite
mutant int-widths-unchecked model/model_config.c \
  'if (check_widths(c, path, hd_given) != 0) return -1;' 'if (check_widths(c, path, hd_given) != 0 && 0) return -1;' test_unit_size_limits
mutant model-bytes-unchecked trainer/memory_check.c \
  'if (total * bytes_per_param <= avail) return 0;' 'return 0;' test_unit_size_limits

# Image side (decode, PIL's resize, smart_resize, patchify) against the vision-language fixtures.
TEST=test_parity_vl_data
if [ ! -d "$SHARED/ref/fixtures/qwen2vl-f32" ]; then
  echo "skip image mutants: $SHARED/ref/fixtures is absent"
  [ "${CI:-}" != true ] || { echo "mutants: ../shared is absent and CI=true"; exit 1; }
elif build_and_run; then
  echo "ok   unmutated source passes $TEST"
  mutant smart-resize-round-half-up data/vl_processor.c \
    'nearbyint(' \
    'round('
  mutant patch-order-transposed-in-merge-window data/vl_processor.c \
    'int y0 = (bh * m + ih) * P, x0 = (bw * m + iw) * P;' \
    'int y0 = (bh * m + iw) * P, x0 = (bw * m + ih) * P;'
  mutant patch-values-x-y-swapped data/vl_processor.c \
    'rgb[((size_t)(y0 + y) * w + x0 + x) * 3 + c]' \
    'rgb[((size_t)(y0 + x) * w + x0 + y) * 3 + c]'
  mutant png-decoded-as-bgr data/image_decode.c \
    'im->px[o * in_ch + c] = (uint8_t)(s[c * step] * scale);' \
    'im->px[o * in_ch + c] = (uint8_t)(s[(in_ch - 1 - c) * step] * scale);'
  mutant bicubic-a-minus-0.75 data/image_resize.c \
    'const double a = -0.5;' \
    'const double a = -0.75;'
  mutant resize-taps-not-rounded-to-fixed-point data/image_resize.c \
    'q[i] = (int32_t)(t->k[i] < 0 ? -0.5 + v : 0.5 + v);' \
    'q[i] = (int32_t)v;'
else
  tail -5 "$WORK/run.log"; echo "mutants: the unmutated source fails $TEST"; exit 1
fi

# the vision-language models (tests/parity/test_parity_vl.c, the same ../shared/ref fixtures)
TEST=test_parity_vl
if [ ! -d "$SHARED/ref/fixtures/qwen2vl-f64" ]; then
  echo "skip vision-language model mutants: $SHARED/ref/fixtures is absent"
  [ "${CI:-}" != true ] || { echo "mutants: ../shared is absent and CI=true"; exit 1; }
elif build_and_run; then
  echo "ok   unmutated source passes $TEST"
  mutant mrope-sections-h-w-swapped model/vl_rope.c \
    'return i < v->mrope[0] ? 0 : i < v->mrope[0] + v->mrope[1] ? 1 : 2;' \
    'return i < v->mrope[0] ? 0 : i < v->mrope[0] + v->mrope[1] ? 2 : 1;'
  mutant mrope-interleaved-h-w-swapped model/vl_rope.c \
    'i % 3 == 1 && i < 3 * v->mrope[1] ? 1 : i % 3 == 2 && i < 3 * v->mrope[2] ? 2 : 0;' \
    'i % 3 == 1 && i < 3 * v->mrope[1] ? 2 : i % 3 == 2 && i < 3 * v->mrope[2] ? 1 : 0;'
  mutant vision-rope-row-col-swapped model/vision_merge.c \
    'patch_coords(v, mm, block_row(va, mm2, n), &row, &col, &img);' \
    'patch_coords(v, mm, block_row(va, mm2, n), &col, &row, &img);'
  mutant merger-output-left-in-window-order model/vision_merge.c \
    'memcpy(dst + (size_t)va->perm[j] * m->D, src + (size_t)j * m->D, m->D * sizeof *dst);' \
    'memcpy(dst + (size_t)j * m->D, src + (size_t)j * m->D, m->D * sizeof *dst);'
  mutant image-features-scattered-in-reverse model/model_forward.c \
    'memcpy(a->x + (size_t)a->img_pos[j] * m->D, img + (size_t)j * m->D, m->D * sizeof *img);' \
    'memcpy(a->x + (size_t)a->img_pos[j] * m->D, img + (size_t)(M - 1 - j) * m->D, m->D * sizeof *img);'
  mutant deepstack-after-the-next-text-layer model/model_forward.c \
    'if (a->deep && l < m->cfg.vis.n_deep) rows_add(a->x + (l + 1) * TD, a->deep[l],' \
    'if (a->deep && l >= 1 && l - 1 < m->cfg.vis.n_deep) rows_add(a->x + (l + 1) * TD, a->deep[l - 1],'
  mutant vision-attention-blocks-all-write-the-first-rows model/vision.c \
    'm->be->matmul(0, 0, nr, hv, n, 1.0f, P, n, vv, ld, 0.0f, att + (size_t)(a + r0) * E + h * hv, E);' \
    'm->be->matmul(0, 0, nr, hv, n, 1.0f, P, n, vv, ld, 0.0f, att + (size_t)a * E + h * hv, E);' \
    test_unit_vision_attention
  mutant vision-attention-dk-overwritten-by-each-block model/vision.c \
    'be->matmul(1, 0, n, hv, nr, scale, dP, n, qb, ld, 1.0f, dk, ld);' \
    'be->matmul(1, 0, n, hv, nr, scale, dP, n, qb, ld, 0.0f, dk, ld);' test_unit_vision_attention
  mutant deepstack-from-the-next-vision-block model/vision.c \
    'if (v->deep_idx[k] == b) return k;' \
    'if (v->deep_idx[k] + 1 == b) return k;'
  mutant kv-positions-after-an-image-by-token-count model/kv_forward.c \
    'kv->new_delta[segs[i].slot] = base + mx + 1 - (kv->len[segs[i].slot] + segs[i].n);' \
    'kv->new_delta[segs[i].slot] = 0 * mx;' test_unit_vl_tiny
  mutant qwen3-pos-embed-interpolation-axes-swapped model/vision_merge.c \
    'wt[0] = (1 - dh) * (1 - dw), wt[1] = (1 - dh) * dw, wt[2] = dh * (1 - dw), wt[3] = dh * dw;' \
    'wt[0] = (1 - dh) * (1 - dw), wt[1] = dh * (1 - dw), wt[2] = (1 - dh) * dw, wt[3] = dh * dw;'
else
  tail -5 "$WORK/run.log"; echo "mutants: the unmutated source fails $TEST"; exit 1
fi

# predict with images (tests/cli/test_vl_predict.sh: LLaMA-Factory's mllm_demo and the tokenizers in ../shared/data)
TEST=test_vl_predict.sh
if [ ! -f "$SHARED/data/llamafactory/mllm_demo.json" ]; then
  echo "skip predict-with-images mutants: $SHARED/data/llamafactory is absent"
  [ "${CI:-}" != true ] || { echo "mutants: ../shared is absent and CI=true"; exit 1; }
elif build_and_run; then
  echo "ok   unmutated source passes $TEST"
  mutant predict-images-of-example-i-given-to-i-plus-1 infer/predict.c \
    'example_images(&ps->images, i, si)' 'example_images(&ps->images, i > 0 ? i - 1 : 0, si)'
  mutant predict-image-tags-not-expanded data/lf_encode.c \
    'if (expand_images(t, e, img_tokens, msg, n, expanded) != 0) rc = -1; /* LF' 'if (0) rc = -1; /* LF'
  mutant predict-slots-share-one-image-buffer infer/predict.c \
    'start_example(s, cfg, ps, next, g, k, &si[k], stop, n_stop)' 'start_example(s, cfg, ps, next, g, k, &si[0], stop, n_stop)'
  mutant generate-cut-before-a-cached-image-keeps-its-shift model/generate.c \
    '            same = 0;
            break;' '            break;'
else
  tail -5 "$WORK/run.log"; echo "mutants: the unmutated source fails $TEST"; exit 1
fi

echo "mutants: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
