#!/usr/bin/env python3
"""Where a training step's GPU time goes: the kernels Nsight Compute timed, by kind.

  ncu --csv --metrics gpu__time_duration.sum --log-file K.csv \\
      pretrain ... --set training.train_iters=1
  python3 bench/ncu_split.py K.csv [--step-ms MS] [--label NAME]

Sums gpu__time_duration over the kernels of the run (one training step) by kind: GEMMs
(cuBLASLt), attention (our flash and unfused kernels), norms, elementwise, loss, optimizer,
communication, other; with --step-ms (the step time the same configuration took without the
profiler) the rest of the step is printed as host time and gaps (copies, synchronisations, launch
latency: the GPU idle or busy with something that is not a kernel). Plain Python, no packages.
"""
import argparse
import collections
import csv
import re
import sys

KINDS = [  # first match wins, on the function's own name (base_name)
    ("gemm", r"gemm|nvjet|xmma|cutlass|cublas|^Kernel2?$|splitKreduce|empty_product|bias_grad"),
    ("attention", r"flash|attention|qkv_layout|heads_layout|softmax|kv_append|rope"),
    ("norm", r"norm"),
    ("loss", r"^(forward|backward|row_max|sum_exp|loss|lse)_kernel"),
    ("optimizer", r"adamw|sum_squares|sum_final|count_outside"),
    ("communication", r"nccl"),
    ("elementwise", r"gelu|swiglu|tanh|add|scale|fill|cast|copy|dropout|embedding"),
]


def base_name(name):
    """The function's own name in a demangled kernel name: no namespace, template or arguments."""
    name = name.replace("(anonymous namespace)", "")
    name = name.split("(")[0]
    while "<" in name:  # drop template arguments, innermost first
        stripped = re.sub(r"<[^<>]*>", "", name)
        if stripped == name:
            break
        name = stripped
    return name.split("::")[-1].strip()


def kind_of(name):
    name = base_name(name)
    for kind, pattern in KINDS:
        if re.search(pattern, name, re.IGNORECASE):
            return kind
    return "other"


def read_kernels(path):
    """(kernel name, seconds) for every profiled launch in ncu's CSV report."""
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"ncu_split.py: {path} holds no ncu CSV report (no '\"ID\"' header line)")
    rows = []
    for r in csv.DictReader(lines[start:]):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        scale = {"ns": 1e-9, "nsecond": 1e-9, "us": 1e-6, "usecond": 1e-6, "ms": 1e-3,
                 "msecond": 1e-3, "s": 1.0, "second": 1.0}.get(r.get("Metric Unit", "ns"), 1e-9)
        rows.append((r["Kernel Name"], float(r["Metric Value"].replace(",", "")) * scale))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv")
    p.add_argument("--step-ms", type=float, default=0.0)
    p.add_argument("--label", default="step")
    a = p.parse_args()
    rows = read_kernels(a.csv)
    if not rows:
        sys.exit(f"ncu_split.py: {a.csv}: no kernel was timed")
    by_kind = collections.defaultdict(float)
    by_name = collections.defaultdict(lambda: [0, 0.0])
    for name, s in rows:
        by_kind[kind_of(name)] += s
        by_name[name][0] += 1
        by_name[name][1] += s
    total = sum(by_kind.values())
    base = max(a.step_ms / 1e3, total)
    parts = [f"{k} {1e3 * v:.1f} ms ({100 * v / base:.0f}%)"
             for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])]
    if a.step_ms > 0:
        gap = a.step_ms / 1e3 - total
        parts.append(f"host time and gaps {1e3 * gap:.1f} ms ({100 * gap / base:.0f}%)")
    print(f"split {a.label}: {len(rows)} kernels, {1e3 * total:.1f} ms of kernels"
          f"{f' in a {a.step_ms:.1f} ms step' if a.step_ms > 0 else ''}: " + ", ".join(parts))
    for name, (n, s) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:12]:
        print(f"  {1e3 * s:9.2f} ms {n:6d} x {kind_of(name):13s} {base_name(name)[:80]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
