"""The PyTorch 2 peer of bench_cp --attention: forward + backward of one causal fp32 attention
[B=1, H=8, S, Dh=64] through torch.nn.functional.scaled_dot_product_attention (eager and, with
--compile, torch.compile of the same function) on --threads threads. Prints one JSON line:
{"kernel": "sdpa" | "sdpa_compile", "seq": S, "threads": T, "seconds": median of --iters}.
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--compile", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 8, a.seq, 64, requires_grad=True) for _ in range(3))
    dout = torch.randn(1, 8, a.seq, 64)

    def step(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    fn = torch.compile(step) if a.compile else step
    times = []
    for it in range(a.iters + 1):  # the first (warm-up, compilation) is not timed
        t0 = time.perf_counter()
        out = fn(q, k, v)
        out.backward(dout)
        q.grad = k.grad = v.grad = None
        if it > 0:
            times.append(time.perf_counter() - t0)
    print(json.dumps({"kernel": "sdpa_compile" if a.compile else "sdpa", "seq": a.seq,
                      "threads": a.threads, "seconds": statistics.median(times),
                      "torch_version": torch.__version__}))


if __name__ == "__main__":
    main()
