#!/usr/bin/env python3
"""torch_kv_decode.py -- the PyTorch side of bench/bench_generate.sh: ../shared/ref's llama_ref model (random weights,
HF initialisation) with a simple KV cache written here (preallocated [B, KV, ctx, hd] key and value tensors per
layer, new rows written at their positions, GQA by repeat_interleave, Qwen3 q/k norms, rotary at the right
positions), greedy decoding. One JSON line per measurement, as `tandem bench generate` prints them.
Usage (from bench_generate.sh, through ../shared/ref/run.sh): torch_kv_decode.py CONFIG.json THREADS PROMPT NEW[,NEW]"""
import json, math, sys, time

import torch

import llama_ref as R

cfg_path, threads, P, news = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), [int(x) for x in sys.argv[4].split(",")]
R.set_threads(threads)
torch.manual_seed(0)
c = R.Config.from_hf(json.load(open(cfg_path)))
model = R.LlamaForCausalLM(c).eval()
H, KV, hd, L = c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.num_hidden_layers
rep = H // KV
n_params = R.n_params(model) - (0 if not c.tie_word_embeddings else 0)


@torch.no_grad()
def forward(ids, pos0, cache, cos_all, sin_all):
    """ids [B, T] appended at positions pos0..pos0+T-1; returns the last position's logits [B, V]."""
    B, T = ids.shape
    x = model.model.embed_tokens(ids)
    cos, sin = cos_all[pos0:pos0 + T], sin_all[pos0:pos0 + T]
    for layer, (kc, vc) in zip(model.model.layers, cache):
        a, h = layer.self_attn, layer.input_layernorm(x)
        q = a.q_proj(h).view(B, T, H, hd)
        k = a.k_proj(h).view(B, T, KV, hd)
        if a.qk_norm:
            q, k = a.q_norm(q), a.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = a.v_proj(h).view(B, T, KV, hd).transpose(1, 2)
        q = q * cos + R.rotate_half(q) * sin
        k = k * cos + R.rotate_half(k) * sin
        kc[:, :, pos0:pos0 + T] = k
        vc[:, :, pos0:pos0 + T] = v
        K = kc[:, :, :pos0 + T].repeat_interleave(rep, dim=1)
        V = vc[:, :, :pos0 + T].repeat_interleave(rep, dim=1)
        att = (q @ K.transpose(-2, -1)) * hd ** -0.5
        if T > 1:
            future = torch.ones(T, pos0 + T, dtype=torch.bool).triu(pos0 + 1)
            att = att.masked_fill(future, float("-inf"))
        y = (att.softmax(dim=-1) @ V).transpose(1, 2).reshape(B, T, H * hd)
        x = x + a.o_proj(y)
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    return model.lm_head(model.model.norm(x[:, -1]))


for N in news:
    ctx = P + N + 1
    cos_all, sin_all = R.rope_cos_sin(ctx, hd, c.rope_theta, torch.float32)
    cache = [(torch.zeros(1, KV, ctx, hd), torch.zeros(1, KV, ctx, hd)) for _ in range(L)]
    g = torch.Generator().manual_seed(10)
    ids = torch.randint(0, c.vocab_size, (1, P), generator=g)
    t0 = time.perf_counter()
    nxt = forward(ids, 0, cache, cos_all, sin_all).argmax(-1, keepdim=True)
    t1 = time.perf_counter()
    pos = P
    for _ in range(N - 1):
        nxt = forward(nxt, pos, cache, cos_all, sin_all).argmax(-1, keepdim=True)
        pos += 1
    dt = time.perf_counter() - t1
    print(json.dumps({"impl": "pytorch", "what": "decode", "threads": threads, "batch": 1, "prompt": P, "new": N,
                      "decode_tok_s": round((N - 1) / dt, 2), "ms_per_step": round(1e3 * dt / (N - 1), 2),
                      "prefill_tok_s": round(P / (t1 - t0), 1)}), flush=True)
