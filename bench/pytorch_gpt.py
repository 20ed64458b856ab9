#!/usr/bin/env python3
"""GPT-2 124M training throughput in PyTorch 2 (CPU or GPU): the peer of bench_gpt_train.

The same model, data shape, optimizer and metrics as bench/bench_gpt_train.cpp:
  pre-LN GPT-2 (learned positions, fused QKV, GELU tanh, tied LM head), no dropout,
  vocab 50257 padded to a multiple of 128 (50304), AdamW(lr 6e-4, betas 0.9/0.95, eps 1e-8,
  weight decay 0.1 on 2-D weights only, fused), gradient clipping at norm 1.0, random tokens;
  attention through F.scaled_dot_product_attention (causal).
  --precision bf16: torch.autocast(device, bfloat16) over forward and loss (fp32 weights and
  optimizer, as PyTorch's mixed precision does); --compile: torch.compile(model).
  --device cuda: the same on the GPU (SDPA picks its flash kernel for bf16; the peer of
  pretrain with training.device: cuda in tools/gpu_check.sh --bench).
  FLOPs per step by Megatron's formula; MFU against --peak-flops (the hardware peak that
  bench_gpt_train measured for the same precision, so both divide by the same number); the
  share of the best torch.mm rate (fp32, or bf16 under autocast) is shown beside it.

Run in the virtual environment bench/run_train_bench.sh makes (PyPI's torch):
  python bench/pytorch_gpt.py [--steps N] [--warmup W] [--layers L] [--seq S]
      [--micro-batch B] [--hidden D] [--heads H] [--vocab V] [--threads T]
      [--precision fp32|bf16] [--compile] [--peak-flops F] [--device cpu|cuda] [--json PATH]
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from peer_common import (adamw, add_run_args, measure_mm_flops, megatron_flops_per_step,
                         padded_vocab, run_figures)


class Block(nn.Module):
    def __init__(self, d, heads, layers, std):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d, eps=1e-5)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d, eps=1e-5)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        out_std = std / math.sqrt(2.0 * layers)  # Megatron's scaled init of output projections
        for lin, s in ((self.qkv, std), (self.proj, out_std), (self.fc1, std), (self.fc2, out_std)):
            nn.init.normal_(lin.weight, 0.0, s)
            nn.init.zeros_(lin.bias)

    def attention(self, x):
        B, S, D = x.shape
        H = self.heads
        q, k, v = self.qkv(x).split(D, dim=2)
        q = q.view(B, S, H, D // H).transpose(1, 2)  # [B, H, S, Dh]
        k = k.view(B, S, H, D // H).transpose(1, 2)
        v = v.view(B, S, H, D // H).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, S, D)
        return self.proj(y)

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))
        return x


class GPT(nn.Module):
    def __init__(self, layers, hidden, heads, seq, vocab_padded, std=0.02):
        super().__init__()
        self.tok = nn.Embedding(vocab_padded, hidden)
        self.pos = nn.Embedding(seq, hidden)
        nn.init.normal_(self.tok.weight, 0.0, std)
        nn.init.normal_(self.pos.weight, 0.0, std)
        self.blocks = nn.ModuleList(Block(hidden, heads, layers, std) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, idx, targets):
        B, S = idx.shape
        x = self.tok(idx) + self.pos(torch.arange(S, device=idx.device))
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        logits = F.linear(x, self.tok.weight)  # tied LM head
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))


# A bf16 torch.mm this many times slower than fp32 marks a CPU without a usable bf16 kernel.
UNUSABLE_BF16_RATIO = 20


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--grad-accum", type=int, default=1,
                   help="micro-batches per optimizer step (as global_batch / micro_batch)")
    p.add_argument("--vocab", type=int, default=50257)
    add_run_args(p)
    p.add_argument("--label", default="pytorch", help="impl name in the summary and JSON")
    p.add_argument("--json", default="")
    a = p.parse_args()
    if a.steps < 1 or a.warmup < 0 or a.grad_accum < 1 or a.hidden % a.heads:
        p.error("need --steps >= 1, --warmup >= 0, --grad-accum >= 1 and --hidden divisible by "
                "--heads")

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    Vp = padded_vocab(a.vocab)
    B, S, M = a.micro_batch, a.seq, a.grad_accum
    mm_dtype = torch.bfloat16 if a.precision == "bf16" else torch.float32
    mm_start = measure_mm_flops(mm_dtype, a.device)
    if a.precision == "bf16" and a.device == "cpu":
        # Without bf16 instructions (AVX2-only CPUs) PyTorch's bf16 matmul falls to a reference
        # loop below 1 GFLOP/s: a GPT-2 step would take most of an hour. Say so, and skip the run.
        mm_fp32 = measure_mm_flops(torch.float32)
        if mm_start < mm_fp32 / UNUSABLE_BF16_RATIO:
            reason = (f"torch.mm bf16 {mm_start / 1e9:.2f} GFLOP/s against fp32 "
                      f"{mm_fp32 / 1e9:.1f} on this CPU: bf16 autocast not measured")
            print(f"{a.label}: {reason}", flush=True)
            if a.json:
                with open(a.json, "w") as f:
                    json.dump({"impl": a.label, "precision": a.precision, "compile": a.compile,
                               "torch_version": torch.__version__, "unmeasured": reason,
                               "mm_flops": mm_start, "mm_fp32_flops": mm_fp32}, f, indent=2)
                    f.write("\n")
            return 0
    # Standard multi-head attention and a GELU MLP of 4 h.
    flops = megatron_flops_per_step(a.layers, a.hidden, a.heads, a.heads, a.hidden // a.heads,
                                    4 * a.hidden, S, Vp, B * M, False)

    model = GPT(a.layers, a.hidden, a.heads, S, Vp).to(a.device)
    params = [q for q in model.parameters() if q.requires_grad]
    opt = adamw(params, 6e-4, 0.1)
    step_model = torch.compile(model) if a.compile else model
    n_params = sum(q.numel() for q in params)
    print(f"{a.label}: torch {torch.__version__} on {a.device}, {torch.get_num_threads()} threads; layers "
          f"{a.layers} hidden {a.hidden} heads {a.heads} seq {S} micro {B} x {M} vocab {a.vocab} padded "
          f"to {Vp}; {n_params} parameters; {flops / 1e12:.4f} TFLOP/step; {a.precision}"
          f"{' autocast' if a.precision == 'bf16' else ''}{', torch.compile' if a.compile else ''};"
          f" torch.mm {mm_start / 1e9:.1f} GFLOP/s", flush=True)

    gen = torch.Generator().manual_seed(a.seed)
    timed, first_loss, last_loss = [], 0.0, 0.0
    for it in range(1, a.warmup + a.steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for _ in range(M):
            data = torch.randint(0, a.vocab, (B, S + 1), generator=gen).to(a.device)
            idx, targets = data[:, :-1], data[:, 1:]
            with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
                loss = step_model(idx, targets) / M
            loss.backward()
            loss_sum = loss_sum + loss.detach()
        loss = loss_sum
        grad_norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        loss_value = loss.item()  # (waits for the GPU)
        s = time.perf_counter() - t0
        warm = it <= a.warmup
        if not warm:
            timed.append(s)
        if it == 1:
            first_loss = loss_value
        last_loss = loss_value
        print(f"{'warmup' if warm else 'timed '} step {it:3d} | loss {loss_value:.4f} | grad_norm "
              f"{float(grad_norm):.3f} | {s * 1e3:8.1f} ms | {B * S * M / s:7.1f} tok/s | "
              f"{flops / s / 1e12:.4f} TFLOP/s", flush=True)

    summary, figures = run_figures(timed, B * S * M, flops, mm_start, mm_dtype, a.peak_flops, a.device)
    print(f"SUMMARY impl={a.label} threads={torch.get_num_threads()} {summary} "
          f"loss {first_loss:.4f} -> {last_loss:.4f}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"impl": a.label, "threads": torch.get_num_threads(), "device": a.device,
                       "precision": a.precision, "compile": a.compile,
                       "torch_version": torch.__version__,
                       "ld_preload": os.environ.get("LD_PRELOAD", ""),
                       "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
                       "layers": a.layers, "hidden": a.hidden, "heads": a.heads, "seq": S,
                       "micro_batch": B, "global_batch": B * M, "vocab": a.vocab, "padded_vocab": Vp,
                       "parameters": n_params, "warmup": a.warmup, **figures,
                       "first_loss": first_loss, "last_loss": last_loss}, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
