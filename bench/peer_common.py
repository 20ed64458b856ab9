"""What the PyTorch peers of our benchmarks (pytorch_gpt.py, pytorch_moe.py) share: the padded
vocabulary, Megatron's FLOPs per step as our trainer counts them, the torch.mm rate, AdamW
with weight decay on 2-D weights only, and the figures of a run's timed steps.
"""
import resource
import statistics
import time

import torch


def add_run_args(p):
    """The flags every peer takes: threads, seed, precision, torch.compile, the MFU peak."""
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--peak-flops", type=float, default=0.0,
                   help="hardware peak FLOP/s for MFU (0: MFU against the torch.mm rate)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")


def padded_vocab(vocab, divisible_by=128):
    return (vocab + divisible_by - 1) // divisible_by * divisible_by


def megatron_flops_per_step(layers, hidden, heads, query_groups, head_dim, ffn, seq, vocab_padded,
                            global_batch, swiglu, moe_layers=0, moe_ffn=0, moe_topk=0,
                            shared_ffn=0):
    """planning::megatron_flops_per_step (megatron/planning/flops.cpp), term for term."""
    h = float(hidden)
    q_ratio = heads * head_dim / h
    gated = 1.5 if swiglu else 1.0
    attention = (1.0 + query_groups / heads + seq / h) * q_ratio
    L = float(layers)
    active_ffn = (ffn * (L - moe_layers) + (moe_ffn * moe_topk + shared_ffn) * moe_layers) / L
    mlp = active_ffn / h * gated
    logits = vocab_padded / (2.0 * layers * h)
    return 12.0 * global_batch * seq * layers * h * h * (attention + mlp + logits)


def synchronize(device):
    if device == "cuda":
        torch.cuda.synchronize()


def measure_mm_flops(dtype, device="cpu"):
    """Best of 3 x (2 torch.mm of n x n) after one warm-up, like measure_cpu_gemm_flops: n 1024
    on the CPU; on a GPU n 8192 of random values (zeros run faster than real data there)."""
    n = 8192 if device == "cuda" else 1024
    if device == "cuda":
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
    else:
        a = torch.full((n, n), 0.5, dtype=dtype)
        b = torch.full((n, n), 0.25, dtype=dtype)
    c = torch.empty(n, n, dtype=dtype, device=device)
    torch.mm(a, b, out=c)
    synchronize(device)
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        torch.mm(a, b, out=c)
        torch.mm(a, b, out=c)
        synchronize(device)
        s = time.perf_counter() - t0
        best = max(best, 2.0 * 2.0 * n * n * n / s)
    return best


def adamw(params, lr, weight_decay):
    """Fused AdamW (betas 0.9/0.95, eps 1e-8), decaying 2-D weights only (as our trainer)."""
    decay = [q for q in params if q.dim() >= 2]
    no_decay = [q for q in params if q.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True)


def run_figures(timed, tokens_per_step, flops, mm_start, mm_dtype, peak_flops, device="cpu"):
    """The figures every peer prints and writes from its timed step seconds: the torch.mm rate
    measured again after the run (the better of the two, as bench_gpt_train does), the peak
    (peak_flops when > 0, else that rate), tokens/s, TFLOP/s, MFU and the share of the mm rate of
    the mean step, the median and fastest step, and the peak RSS. Returns (summary text, json
    fields)."""
    mm_flops = max(mm_start, measure_mm_flops(mm_dtype, device))
    peak = peak_flops if peak_flops > 0 else mm_flops
    mean_s = sum(timed) / len(timed)
    median_s = statistics.median(timed)
    tok_s = tokens_per_step / mean_s
    tflops = flops / mean_s / 1e12
    mfu = flops / mean_s / peak
    of_mm = flops / mean_s / mm_flops
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    text = (f"steps={len(timed)} tokens/s={tok_s:.1f} TFLOP/s={tflops:.4f} MFU={100 * mfu:.1f}% "
            f"of_mm={100 * of_mm:.1f}% ms/step={mean_s * 1e3:.1f} (median {median_s * 1e3:.1f}, "
            f"min {min(timed) * 1e3:.1f}) TFLOP/step={flops / 1e12:.4f} "
            f"peak_GFLOP/s={peak / 1e9:.1f} mm_GFLOP/s={mm_flops / 1e9:.1f} "
            f"peak_rss_MiB={rss_mib:.0f}")
    fields = {"steps": len(timed), "step_seconds": timed, "mean_step_seconds": mean_s,
              "median_step_seconds": median_s, "tokens_per_s": tok_s,
              "median_tokens_per_s": tokens_per_step / median_s, "flops_per_step": flops,
              "tflops": tflops, "median_tflops": flops / median_s / 1e12, "peak_flops": peak,
              "mm_flops": mm_flops, "mfu": mfu, "median_mfu": flops / median_s / peak,
              "of_mm": of_mm, "peak_rss_mib": rss_mib}
    return text, fields
