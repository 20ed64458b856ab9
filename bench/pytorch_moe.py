#!/usr/bin/env python3
"""llama_tiny / mixtral_tiny training throughput in PyTorch 2 on the CPU: the peer of
bench/run_moe_bench.sh's `pretrain` runs.

The same models, data shape, optimizer and metrics as recipes/llama_tiny.yaml and (--moe)
recipes/mixtral_tiny.yaml run through `pretrain`:
  LLaMA blocks: RMSNorm (eps 1e-5), one fused QKV projection with grouped-query attention
  (4 heads, 2 key/value groups, head_dim 64), rotary embeddings (theta 10000, "rotate half"),
  causal F.scaled_dot_product_attention, SwiGLU MLP (688; gate and up in one projection), no
  biases, final RMSNorm, untied output layer; vocab 8192 (the corpus tokenizer) padded to a
  multiple of 128. Initialisation as Megatron's: normal(0.02), output projections
  0.02 / sqrt(2 L).
  --moe: every MLP is 8 SwiGLU experts of width 344 with top-2 routing as our trainer's default
  (Megatron's softmax router without pre-softmax): fp32 router logits = x W^T, the top-2 logits
  picked, gates = softmax over the two picked logits (the same as a softmax over all experts
  renormalised over the top-2). Load-balancing loss as Megatron's switch loss,
  coeff * E / (k T^2) * sum_e c_e * sum_t P[t, e] (P = softmax over all experts, c_e the tokens
  routed to e, T the micro-batch's tokens), and z-loss coeff / T * sum_t logsumexp(logits_t)^2,
  each layer's added to the objective. Dropless (no capacity): the (token, slot) pairs are sorted
  by expert, the rows gathered with index_select, each expert runs on its contiguous run (a loop
  over the experts) and the gated outputs are summed back with index_add_.
  Training as the recipes: micro-batch 8, global batch 16 (2 micro-batches accumulated per
  step, the loss averaged over the global batch), sequence 128, AdamW (lr 1e-3, betas 0.9/0.95,
  eps 1e-8, weight decay 0.1 on 2-D weights only, fused), gradient clipping at norm 1.0, random
  tokens (the learning-rate schedule is left out: a constant lr costs the same).
  --precision bf16: torch.autocast("cpu", bfloat16) over forward and loss; --compile:
  torch.compile(model); the expert loop (data-dependent sizes) stays eager between graphs.
  FLOPs per step by the formula our trainer logs as "TFLOP per step" (megatron/planning/
  flops.cpp: Megatron's, with GQA, SwiGLU's 3/2 and, for MoE, the active experts); MFU against
  --peak-flops (the hardware peak `pretrain` measured, so both divide by the same number); the
  share of the best torch.mm rate is shown beside it.

Run in the virtual environment bench/bench_venv.sh makes (PyPI's torch):
  python bench/pytorch_moe.py [--moe] [--steps N] [--warmup W] [--threads T]
      [--precision fp32|bf16] [--compile] [--peak-flops F] [--label NAME] [--json PATH]
      [--layers L] [--hidden D] [--heads H] [--query-groups G] [--ffn F] [--seq S]
      [--micro-batch B] [--global-batch G] [--vocab V] [--experts E] [--expert-ffn F]
      [--topk K]
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


def rope_tables(seq, head_dim, theta):
    """cos and sin [S, head_dim] of the "rotate half" layout (frequencies repeated twice)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(seq, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):  # x [B, H, S, Dh]
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def linear(d_in, d_out, std):
    lin = nn.Linear(d_in, d_out, bias=False)
    nn.init.normal_(lin.weight, 0.0, std)
    return lin


class SwiGLU(nn.Module):
    """fc1 holds gate and up ([2F, D], Megatron's linear_fc1), fc2 [D, F]."""

    def __init__(self, d, ffn, std, out_std):
        super().__init__()
        self.fc1 = linear(d, 2 * ffn, std)
        self.fc2 = linear(ffn, d, out_std)

    def forward(self, x):
        gate, up = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(F.silu(gate) * up)


@torch.compiler.disable
def run_experts(experts, rows, counts):
    """Each expert on its contiguous run of rows (sorted by expert): [T k, D] -> [T k, D].
    The run lengths are data: torch.compile leaves this loop eager (a clean graph break), so the
    graphs around it keep static shapes and never recompile."""
    return torch.cat([expert(chunk) for expert, chunk in zip(experts, rows.split(counts.tolist()))])


class MoE(nn.Module):
    """Router + dropless top-k experts; forward returns (output, aux loss + z-loss)."""

    def __init__(self, d, experts, expert_ffn, topk, aux_coeff, z_coeff, std, out_std):
        super().__init__()
        self.E, self.k, self.aux_coeff, self.z_coeff = experts, topk, aux_coeff, z_coeff
        self.router = nn.Parameter(torch.empty(experts, d))
        nn.init.normal_(self.router, 0.0, std)
        self.experts = nn.ModuleList(SwiGLU(d, expert_ffn, std, out_std) for _ in range(experts))

    def forward(self, x):
        B, S, D = x.shape
        x = x.reshape(B * S, D)
        T, E, k = x.shape[0], self.E, self.k
        with torch.autocast("cpu", enabled=False):  # the router in fp32, as the trainer's
            logits = F.linear(x.float(), self.router)  # [T, E]
        top_logits, top_idx = logits.topk(k, dim=1)  # top-k of softmax(logits) = top-k of logits
        gates = F.softmax(top_logits, dim=1)  # softmax over the picked logits
        flat_expert = top_idx.reshape(-1)  # [T k], (token, slot) pairs
        # c_e: tokens routed to e (a scatter-add, not bincount: a static shape for torch.compile)
        counts = flat_expert.new_zeros(E).scatter_add_(0, flat_expert, torch.ones_like(flat_expert))
        probs = F.softmax(logits, dim=1)
        aux = (self.aux_coeff * E / (k * T * T)) * (counts.to(probs.dtype) * probs.sum(0)).sum()
        z = self.z_coeff * torch.logsumexp(logits, dim=1).square().mean()

        order = torch.argsort(flat_expert, stable=True)  # pairs grouped by expert
        token_of = torch.div(order, k, rounding_mode="floor")
        rows = x.index_select(0, token_of)  # [T k, D]
        y = run_experts(self.experts, rows, counts)
        y = y * gates.reshape(-1)[order].unsqueeze(1).to(y.dtype)
        out = torch.zeros_like(x, dtype=y.dtype).index_add_(0, token_of, y)
        return out.view(B, S, D), aux + z


class Block(nn.Module):
    def __init__(self, a, std, out_std):
        super().__init__()
        self.heads, self.groups, self.head_dim = a.heads, a.query_groups, a.hidden // a.heads
        self.norm1 = nn.RMSNorm(a.hidden, eps=a.norm_eps)
        self.qkv = linear(a.hidden, (a.heads + 2 * a.query_groups) * self.head_dim, std)
        self.proj = linear(a.heads * self.head_dim, a.hidden, out_std)
        self.norm2 = nn.RMSNorm(a.hidden, eps=a.norm_eps)
        if a.moe:
            self.mlp = MoE(a.hidden, a.experts, a.expert_ffn, a.topk, a.aux_loss_coeff,
                           a.z_loss_coeff, std, out_std)
        else:
            self.mlp = SwiGLU(a.hidden, a.ffn, std, out_std)
        self.moe = a.moe

    def attention(self, x, cos, sin):
        B, S, _ = x.shape
        H, G, Dh = self.heads, self.groups, self.head_dim
        q, k, v = self.qkv(x).split((H * Dh, G * Dh, G * Dh), dim=2)
        q = apply_rope(q.view(B, S, H, Dh).transpose(1, 2), cos, sin)  # [B, H, S, Dh]
        k = apply_rope(k.view(B, S, G, Dh).transpose(1, 2), cos, sin)  # [B, G, S, Dh]
        v = v.view(B, S, G, Dh).transpose(1, 2)
        # Consecutive query heads share a key/value group (Megatron's GQA layout).
        k = k.repeat_interleave(H // G, dim=1)
        v = v.repeat_interleave(H // G, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, S, H * Dh))

    def forward(self, x, cos, sin):
        x = x + self.attention(self.norm1(x), cos, sin)
        if self.moe:
            y, router_loss = self.mlp(self.norm2(x))
            return x + y, router_loss
        return x + self.mlp(self.norm2(x)), x.new_zeros(())


class Llama(nn.Module):
    def __init__(self, a, vocab_padded):
        super().__init__()
        std = a.init_std
        out_std = std / math.sqrt(2.0 * a.layers)  # Megatron's scaled init of output projections
        self.embedding = nn.Embedding(vocab_padded, a.hidden)
        nn.init.normal_(self.embedding.weight, 0.0, std)
        self.blocks = nn.ModuleList(Block(a, std, out_std) for _ in range(a.layers))
        self.final_norm = nn.RMSNorm(a.hidden, eps=a.norm_eps)
        self.output = linear(a.hidden, vocab_padded, std)  # untied
        cos, sin = rope_tables(a.seq, a.hidden // a.heads, a.rope_theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, idx, targets):
        """(LM loss: mean over the micro-batch's tokens, router losses summed over layers)."""
        S = idx.shape[1]
        x = self.embedding(idx)
        cos, sin = self.cos[:S], self.sin[:S]
        router_loss = x.new_zeros((), dtype=torch.float32)
        for block in self.blocks:
            x, r = block(x, cos, sin)
            router_loss = router_loss + r.float()
        logits = self.output(self.final_norm(x))
        lm = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))
        return lm, router_loss


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--moe", action="store_true", help="mixtral_tiny (else llama_tiny)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--query-groups", type=int, default=2)
    p.add_argument("--ffn", type=int, default=688)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--global-batch", type=int, default=16)
    p.add_argument("--vocab", type=int, default=8192, help="tokenizer vocabulary (padded to 128)")
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--expert-ffn", type=int, default=344)
    p.add_argument("--topk", type=int, default=2)
    p.add_argument("--aux-loss-coeff", type=float, default=1e-2)
    p.add_argument("--z-loss-coeff", type=float, default=1e-3)
    p.add_argument("--norm-eps", type=float, default=1e-5)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--init-std", type=float, default=0.02)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip-grad", type=float, default=1.0)
    add_run_args(p)
    p.add_argument("--label", default="", help="impl name in the summary and JSON")
    p.add_argument("--json", default="")
    a = p.parse_args()
    if (a.steps < 1 or a.warmup < 0 or a.hidden % a.heads or a.heads % a.query_groups
            or (a.hidden // a.heads) % 2 or a.global_batch % a.micro_batch
            or (a.moe and not 1 <= a.topk <= a.experts)):
        p.error("need --steps >= 1, --warmup >= 0, --hidden divisible by --heads (even head_dim),"
                " --heads by --query-groups, --global-batch by --micro-batch and"
                " 1 <= --topk <= --experts")
    model_name = "mixtral_tiny" if a.moe else "llama_tiny"
    label = a.label or f"pytorch-{'compile' if a.compile else 'eager'}-{model_name}"

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    Vp = padded_vocab(a.vocab)
    B, S, G = a.micro_batch, a.seq, a.global_batch
    num_micro = G // B
    head_dim = a.hidden // a.heads
    mm_dtype = torch.bfloat16 if a.precision == "bf16" else torch.float32
    mm_start = measure_mm_flops(mm_dtype)
    flops = megatron_flops_per_step(a.layers, a.hidden, a.heads, a.query_groups, head_dim, a.ffn,
                                    S, Vp, G, True, moe_layers=a.layers if a.moe else 0,
                                    moe_ffn=a.expert_ffn, moe_topk=a.topk)

    model = Llama(a, Vp)
    params = [q for q in model.parameters() if q.requires_grad]
    opt = adamw(params, a.lr, a.weight_decay)
    step_model = torch.compile(model) if a.compile else model
    n_params = sum(q.numel() for q in params)
    shape = (f"{a.experts} experts of {a.expert_ffn}, top-{a.topk}" if a.moe
             else f"SwiGLU {a.ffn}")
    print(f"{label}: torch {torch.__version__}, {torch.get_num_threads()} threads; {model_name}: "
          f"layers {a.layers} hidden {a.hidden} heads {a.heads} groups {a.query_groups} {shape}; "
          f"seq {S} micro {B} global {G} ({num_micro} micro-batches) vocab {a.vocab} padded to "
          f"{Vp}; {n_params} parameters; {flops / 1e12:.4f} TFLOP per step; {a.precision}"
          f"{' autocast' if a.precision == 'bf16' else ''}{', torch.compile' if a.compile else ''};"
          f" torch.mm {mm_start / 1e9:.1f} GFLOP/s", flush=True)

    gen = torch.Generator().manual_seed(a.seed)
    timed, first_loss, last_loss = [], 0.0, 0.0
    for it in range(1, a.warmup + a.steps + 1):
        t0 = time.perf_counter()
        data = torch.randint(0, a.vocab, (G, S + 1), generator=gen)
        opt.zero_grad(set_to_none=True)
        lm_sum, router_sum = 0.0, 0.0
        for m in range(num_micro):
            mb = data[m * B:(m + 1) * B]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
                lm, router_loss = step_model(mb[:, :-1], mb[:, 1:])
            # Mean over the global batch's tokens; router losses averaged over the micro-batches.
            ((lm + router_loss) / num_micro).backward()
            lm_sum += lm.item()
            router_sum += router_loss.item()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, a.clip_grad)
        opt.step()
        s = time.perf_counter() - t0
        lm_value, router_value = lm_sum / num_micro, router_sum / num_micro
        warm = it <= a.warmup
        if not warm:
            timed.append(s)
        if it == 1:
            first_loss = lm_value
        last_loss = lm_value
        router_text = f" | router aux+z {router_value:.4f}" if a.moe else ""
        print(f"{'warmup' if warm else 'timed '} step {it:3d} | lm loss {lm_value:.4f}"
              f"{router_text} | grad_norm {float(grad_norm):.3f} | {s * 1e3:8.1f} ms | "
              f"{G * S / s:7.1f} tok/s | {flops / s / 1e12:.4f} TFLOP/s", flush=True)

    summary, figures = run_figures(timed, G * S, flops, mm_start, mm_dtype, a.peak_flops)
    print(f"SUMMARY impl={label} model={model_name} threads={torch.get_num_threads()} {summary} "
          f"lm loss {first_loss:.4f} -> {last_loss:.4f}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"impl": label, "model": model_name, "moe": a.moe,
                       "threads": torch.get_num_threads(), "precision": a.precision,
                       "compile": a.compile, "torch_version": torch.__version__,
                       "ld_preload": os.environ.get("LD_PRELOAD", ""),
                       "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
                       "layers": a.layers, "hidden": a.hidden, "heads": a.heads,
                       "query_groups": a.query_groups, "ffn": a.ffn,
                       "experts": a.experts if a.moe else 0,
                       "expert_ffn": a.expert_ffn if a.moe else 0,
                       "topk": a.topk if a.moe else 0, "seq": S, "micro_batch": B,
                       "global_batch": G, "vocab": a.vocab, "padded_vocab": Vp,
                       "parameters": n_params, "warmup": a.warmup, **figures,
                       "first_loss": first_loss, "last_loss": last_loss}, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
