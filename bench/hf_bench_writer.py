"""What the random Hugging Face directories of the import benchmarks (deepseek_fp8_checkpoint.py,
gpt_oss_mxfp4_checkpoint.py) share: safetensors files written here from torch tensors (a JSON
header and the raw bytes; no safetensors package needed) and a sharded directory with its
index."""
import json
import os
import struct

import torch

DTYPES = {torch.float8_e4m3fn: "F8_E4M3", torch.bfloat16: "BF16", torch.float32: "F32",
          torch.uint8: "U8"}


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        raw = t.contiguous().view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)


def write_sharded(out, shards):
    """One model-0000k-of-0000n.safetensors per dict of tensors, and the index naming them."""
    weight_map = {}
    for i, tensors in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(os.path.join(out, file), tensors)
        weight_map.update({name: file for name in tensors})
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
