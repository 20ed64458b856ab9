#!/usr/bin/env python3
"""Pickle fixtures for the restricted unpickler (megatron/checkpoint/pickle.h), made by Python's
own pickle, torch.save and torch.distributed.checkpoint. Run by hand (needs torch):

    python3 -m venv /tmp/hf-venv && /tmp/hf-venv/bin/pip install torch
    /tmp/hf-venv/bin/python tools/gen_pickle_fixtures.py tests/fixtures/pickle

Writes:
  plain_p{0,2,4,5}.pkl   the same plain data (numbers, text, bytes, containers, OrderedDict,
                         argparse.Namespace) in pickle protocols 0, 2, 4 and 5
  torch_state.pt         torch.save of a small state dict (fp32, bf16, views), a Namespace of
                         args and an iteration; torch_state.data.pkl: its data.pkl as torch wrote it
  malicious.pt           torch.save of an object whose pickle calls os.system on load;
                         malicious.data.pkl: its data.pkl
  dcp/.metadata          torch.distributed.checkpoint's metadata of a small state dict (and its
                         __0_0.distcp data file)
  deflated.zip           a zip archive with a compressed entry (torch.save never writes one)
"""
import argparse
import collections
import os
import pickle
import shutil
import sys
import zipfile

import torch
import torch.distributed.checkpoint as dcp


def plain():
    return {
        "ints": [0, 1, -1, 255, 256, 65535, 65536, -2**31, 2**31, 2**40, -2**40, 2**63 - 1],
        "floats": [0.0, 1.5, -2.25, 1e-30, 3.4e38],
        "text": "Grüße, 世界",
        "bytes": b"\x00\x01\xff",
        "tuple": (1, "two", None),
        "flags": (True, False),
        "nested": {"a": [1, [2, [3]]], "b": {"c": None}},
        "set": {3, 4},
        "ordered": collections.OrderedDict([("z", 1), ("y", 2)]),
        "args": argparse.Namespace(num_layers=2, hidden_size=64, lr=3e-4, name="gpt"),
    }


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned > /tmp/megatron_pickle_pwned",))


def data_pkl(pt_path, out_path):
    with zipfile.ZipFile(pt_path) as z:
        name = next(n for n in z.namelist() if n.endswith("/data.pkl"))
        open(out_path, "wb").write(z.read(name))


def main(out):
    os.makedirs(out, exist_ok=True)
    for proto in (0, 2, 4, 5):
        with open(os.path.join(out, f"plain_p{proto}.pkl"), "wb") as f:
            pickle.dump(plain(), f, protocol=proto)
    sd = collections.OrderedDict()
    sd["w"] = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    sd["b"] = torch.tensor([1.5, -2.5], dtype=torch.bfloat16)
    sd["v"] = sd["w"][1]  # shares w's storage at offset 3
    sd["t"] = sd["w"].t()  # a transposed view: strides (1, 3)
    obj = {"model": sd, "args": argparse.Namespace(num_layers=2, hidden_size=8), "iteration": 7}
    torch.save(obj, os.path.join(out, "torch_state.pt"))
    data_pkl(os.path.join(out, "torch_state.pt"), os.path.join(out, "torch_state.data.pkl"))
    torch.save({"model": Evil()}, os.path.join(out, "malicious.pt"))
    data_pkl(os.path.join(out, "malicious.pt"), os.path.join(out, "malicious.data.pkl"))
    with zipfile.ZipFile(os.path.join(out, "deflated.zip"), "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data.pkl", pickle.dumps({"a": 1}, protocol=2))
    d = os.path.join(out, "dcp")
    shutil.rmtree(d, ignore_errors=True)
    dcp.save({"w": torch.arange(4, dtype=torch.float32), "step": 3}, checkpoint_id=d)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/pickle")
