"""Megatron-LM checkpoints made by Megatron-Core itself, for the import tests (issue 40).

Run by hand (CPU, gloo; nothing here is used by the build or the tests):

    python3 -m venv /tmp/mc-venv
    /tmp/mc-venv/bin/pip install torch megatron-core==0.16.1 psutil six regex pyyaml pydantic
    # Megatron-LM's training package (args, checkpoint layout) at the tag of that megatron-core:
    git clone https://github.com/NVIDIA/Megatron-LM /tmp/Megatron-LM
    git -C /tmp/Megatron-LM checkout core_v0.16.1
    for fmt in torch_dist torch; do for model in gpt llama; do
      PYTHONPATH=/tmp/Megatron-LM /tmp/mc-venv/bin/torchrun --nproc-per-node 4 \
        tools/gen_megatron_fixtures.py --model $model --format $fmt --tp 2 --pp 2 \
        --out tests/fixtures/megatron/${model}_tp2_pp2_${fmt}
    done
      PYTHONPATH=/tmp/Megatron-LM /tmp/mc-venv/bin/torchrun --nproc-per-node 4 \
        tools/gen_megatron_fixtures.py --model mixtral --format $fmt --tp 1 --pp 2 --ep 2 \
        --out tests/fixtures/megatron/mixtral_tp1_pp2_ep2_${fmt}
    done

Checking an export of this project (convert_checkpoint --to-megatron) in Megatron-LM itself:

    PYTHONPATH=/tmp/Megatron-LM /tmp/mc-venv/bin/torchrun --nproc-per-node 4 \
      tools/gen_megatron_fixtures.py --model llama --format torch --tp 2 --pp 2 \
      --check EXPORT_DIR --out tests/fixtures/megatron/llama_tp2_pp2_torch

builds the same model, loads EXPORT_DIR with Megatron-LM's load_checkpoint (--load EXPORT_DIR
--no-load-optim --no-load-rng; args checked against the checkpoint's as Megatron does) and
prints the largest difference of its logits from the fixture's (`--out`) logits.bin.

Each run builds a tiny GPT (LayerNorm, GeLU, biases, learned positions, tied embeddings),
LLaMA-style model (RMSNorm, SwiGLU, grouped-query attention, rope, untied, no biases) or
Mixtral-style one (the LLaMA one with 4 routed experts, top 2, each expert drawn from its own
seed so that a wrong expert numbering shows) with
Megatron-Core's GPTModel as Megatron-LM's pretrain_gpt.py builds it (the local layer spec:
Transformer Engine needs a GPU), with the arguments Megatron-LM's own parser makes, and saves it
with Megatron-LM's generate_state_dict / get_checkpoint_name and dist_checkpointing.save (format
torch_dist) or torch.save per rank (format torch, the legacy mp_rank_TT_PPP layout), as
save_checkpoint does. Beside the checkpoint: `logits.bin` (float32 [batch, seq, padded vocab],
the whole vocabulary gathered over tp) for the tokens in `expected.json`.

What differs from a GPU run, and why it does not touch what the tests read: CUDA calls that
Megatron-Core makes unconditionally while saving (synchronize, current_device) are pointed at
the CPU (the device's architecture, which validate_args asks for, is said to be Hopper's);
the saved RNG state holds the CPU generator's state where a GPU run has the CUDA
generator's (same type, a ByteTensor); no optimizer state is saved yet (--no-save-optim).
"""

import argparse
import contextlib
import json
import os
import sys

import torch
import torch.distributed as dist

# Megatron-Core's savers call these unconditionally; on the CPU they are no-ops.
torch.cuda.synchronize = lambda *a, **k: None
torch.cuda.current_device = lambda: "cpu"
torch.cuda.get_rng_state = torch.get_rng_state
torch.Tensor.cuda = lambda self, *a, **k: self  # the tied embedding's first all-reduce
_tensor = torch.tensor


def _tensor_on_cpu(*args, **kwargs):  # Megatron-LM's load makes small tensors on "cuda"
    if kwargs.get("device") == "cuda":
        kwargs["device"] = "cpu"
    return _tensor(*args, **kwargs)


torch.tensor = _tensor_on_cpu


def _no_fork(self, name=None):  # the CUDA RNG tracker's fork (dropout is off here)
    return contextlib.nullcontext()

os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")  # what Megatron-LM asks of a tp run

ITERATION = 10
SEQ = 16
BATCH = 2


def megatron_argv(opts):
    common = [
        "--num-layers", "4", "--hidden-size", "32", "--num-attention-heads", "4",
        "--seq-length", str(SEQ), "--max-position-embeddings", "64", "--micro-batch-size", "1",
        "--global-batch-size", "8", "--train-iters", "100", "--lr", "3e-4", "--min-lr", "3e-5",
        "--lr-decay-style", "cosine", "--weight-decay", "0.1", "--clip-grad", "1.0",
        "--tokenizer-type", "NullTokenizer", "--vocab-size", "120",
        "--make-vocab-size-divisible-by", "16",
        "--tensor-model-parallel-size", str(opts.tp),
        "--pipeline-model-parallel-size", str(opts.pp),
        "--ckpt-format", opts.format, "--no-save-optim", "--init-method-std", "0.05",
        "--save", opts.out, "--save-interval", "10", "--seed", "1234",
        # the fused kernels need a GPU (Apex / Transformer Engine)
        "--no-rope-fusion", "--no-bias-gelu-fusion", "--no-bias-swiglu-fusion",
        "--no-bias-dropout-fusion", "--no-masked-softmax-fusion",
        "--no-gradient-accumulation-fusion", "--no-persist-layer-norm",
        "--attention-dropout", "0", "--hidden-dropout", "0",
    ]
    if opts.model == "mixtral":
        return common + [
            "--ffn-hidden-size", "48", "--position-embedding-type", "rope", "--rotary-base",
            "10000", "--normalization", "RMSNorm", "--norm-epsilon", "1e-5", "--swiglu",
            "--disable-bias-linear", "--untie-embeddings-and-output-weights",
            "--group-query-attention", "--num-query-groups", "2", "--num-experts", "4",
            "--moe-router-topk", "2", "--moe-token-dispatcher-type", "allgather",
            "--expert-model-parallel-size", str(opts.ep), "--moe-router-load-balancing-type",
            "aux_loss", "--moe-aux-loss-coeff", "0.01",
        ]
    if opts.model == "gpt":
        return common + ["--ffn-hidden-size", "128", "--position-embedding-type",
                         "learned_absolute", "--normalization", "LayerNorm"]
    return common + [
        "--ffn-hidden-size", "64", "--position-embedding-type", "rope", "--rotary-base", "10000",
        "--normalization", "RMSNorm", "--norm-epsilon", "1e-5", "--swiglu",
        "--disable-bias-linear", "--untie-embeddings-and-output-weights",
        "--group-query-attention", "--num-query-groups", "2",
    ]


def build_args(opts):
    from megatron.training import arguments, global_vars
    from megatron.training.arguments import parse_args, validate_args
    from megatron.training.tokenizer.tokenizer import _vocab_size_with_padding

    sys.argv = [sys.argv[0]] + megatron_argv(opts)
    args = parse_args()
    arguments.get_device_arch_version = lambda: 9  # as on a Hopper GPU
    validate_args(args)
    args.padded_vocab_size = _vocab_size_with_padding(args.vocab_size, args, logging_enabled=False)
    args.iteration = ITERATION
    args.consumed_train_samples = ITERATION * args.global_batch_size
    global_vars._GLOBAL_ARGS = args
    return args


def build_model(args):
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.training.arguments import core_transformer_config_from_args

    config = core_transformer_config_from_args(args)
    config.use_cpu_initialization = True
    spec = get_gpt_layer_local_spec(num_experts=args.num_experts, moe_grouped_gemm=False,
                                    normalization=args.normalization)
    return GPTModel(
        config=config, transformer_layer_spec=spec, vocab_size=args.padded_vocab_size,
        max_sequence_length=args.max_position_embeddings,
        pre_process=ps.is_pipeline_first_stage(), post_process=ps.is_pipeline_last_stage(),
        parallel_output=False,
        share_embeddings_and_output_weights=not args.untie_embeddings_and_output_weights,
        position_embedding_type=args.position_embedding_type,
        rotary_percent=args.rotary_percent, rotary_base=args.rotary_base)


def distinct_experts(model, args):
    """Each expert its own weights: CPU initialisation gives every expert rank the same ones,
    which would hide a wrong expert numbering. Drawn from (global layer, global expert)."""
    import re

    from megatron.core import parallel_state as ps

    per_stage = args.num_layers // args.pipeline_model_parallel_size
    per_rank = args.num_experts // args.expert_model_parallel_size
    pattern = re.compile(r"decoder\.layers\.(\d+)\.mlp\.experts\.local_experts\.(\d+)\.(.*)")
    for name, p in model.named_parameters():
        m = pattern.fullmatch(name)
        if not m:
            continue
        layer = ps.get_pipeline_model_parallel_rank() * per_stage + int(m.group(1))
        expert = ps.get_expert_model_parallel_rank() * per_rank + int(m.group(2))
        which = 1 if "linear_fc1" in m.group(3) else 2
        g = torch.Generator().manual_seed(10000 + 100 * layer + 10 * expert + which)
        with torch.no_grad():
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)


def pipeline_logits(model, tokens):
    """Forward through the stages (activations passed point to point); logits on the last."""
    from megatron.core import parallel_state as ps

    positions = torch.arange(SEQ).unsqueeze(0).expand(BATCH, SEQ)
    group = ps.get_pipeline_model_parallel_group()
    ranks = dist.get_process_group_ranks(group)
    stage = ps.get_pipeline_model_parallel_rank()
    model.eval()
    with torch.no_grad():
        if stage > 0:
            hidden = torch.empty(SEQ, BATCH, model.config.hidden_size)
            dist.recv(hidden, src=ranks[stage - 1])
            model.set_input_tensor(hidden)
        # Megatron's convention: True where a score is masked (made here: its default mask is
        # made on the GPU).
        causal = torch.triu(torch.ones(1, 1, SEQ, SEQ, dtype=torch.bool), diagonal=1)
        out = model(tokens, positions, attention_mask=causal)
        if stage + 1 < len(ranks):
            dist.send(out.contiguous(), dst=ranks[stage + 1])
            return None
        return out


def save(args, model, opts):
    from megatron.core import dist_checkpointing
    from megatron.core import parallel_state as ps
    from megatron.training import checkpointing as ck

    rng_state = ck.get_rng_state(args.ckpt_format, ps.get_tensor_model_parallel_group(),
                                 ps.get_pipeline_model_parallel_group())
    if args.ckpt_format == "torch_dist":
        metadata = ck._build_sharded_state_dict_metadata(args)
        sd = ck.generate_state_dict(args, [model], None, None, rng_state, iteration=ITERATION,
                                    optim_sd_kwargs=dict(metadata=metadata),
                                    model_sd_kwargs=dict(metadata=metadata))
        sd["num_floating_point_operations_so_far"] = 0
        name = ck.get_checkpoint_name(args.save, ITERATION, return_base_dir=True)
        if dist.get_rank() == 0:
            os.makedirs(name, exist_ok=True)
        dist.barrier()
        dist_checkpointing.save(sd, name, ck.get_default_save_sharded_strategy(args.ckpt_format),
                                content_metadata=ck._clean_metadata_for_serialization(metadata))
    else:
        sd = ck.generate_state_dict(args, [model], None, None, rng_state, iteration=ITERATION)
        sd["num_floating_point_operations_so_far"] = 0
        name = ck.get_checkpoint_name(args.save, ITERATION)
        ck.ensure_directory_exists(name)
        torch.save(sd, name)
    dist.barrier()
    if dist.get_rank() == 0:
        with open(ck.get_checkpoint_tracker_filename(args.save), "w") as f:
            f.write(str(ITERATION))


def check(args, model, opts):
    """Megatron-LM's own load of an exported checkpoint, then the fixture's logits."""
    from megatron.core import parallel_state as ps
    from megatron.training import checkpointing as ck

    for p in model.parameters():  # what the load must overwrite
        p.data.fill_(float("nan"))
    args.load, args.no_load_optim, args.no_load_rng = opts.check, True, True
    args.exit_on_missing_checkpoint = True
    args.auto_detect_ckpt_format = True
    from megatron.core.num_microbatches_calculator import init_num_microbatches_calculator

    init_num_microbatches_calculator(dist.get_rank(), None, args.global_batch_size,
                                     args.micro_batch_size, args.data_parallel_size)
    iteration, _ = ck.load_checkpoint([model], None, None, strict=True)
    with open(os.path.join(opts.out, "expected.json")) as f:
        expected = json.load(f)
    tokens = torch.tensor(expected["tokens"])
    logits = pipeline_logits(model, tokens)
    if logits is not None and ps.get_tensor_model_parallel_rank() == 0:
        import numpy as np

        ref = torch.from_numpy(np.fromfile(os.path.join(opts.out, "logits.bin"), dtype=np.float32))
        ref = ref.reshape(logits.shape)
        err = ((logits - ref).abs().max() / ref.abs().max()).item()
        print(f"CHECK {opts.check}: Megatron-LM loaded iteration {iteration}; logits rel error "
              f"{err:.3g} vs {opts.out}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["gpt", "llama", "mixtral"], required=True)
    p.add_argument("--format", choices=["torch_dist", "torch"], required=True)
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--pp", type=int, default=2)
    p.add_argument("--ep", type=int, default=1)
    p.add_argument("--out", required=True)
    p.add_argument("--check", help="a checkpoint to load and compare with --out's logits")
    opts = p.parse_args()
    dist.init_process_group("gloo")
    from megatron.core.tensor_parallel import random as tp_random

    tp_random.CudaRNGStatesTracker.fork = _no_fork
    from megatron.core.transformer.moe import moe_utils

    moe_utils.te_general_gemm = None  # left undefined when Transformer Engine is absent
    from megatron.core import parallel_state as ps

    ps.initialize_model_parallel(tensor_model_parallel_size=opts.tp,
                                 pipeline_model_parallel_size=opts.pp,
                                 expert_model_parallel_size=opts.ep)
    args = build_args(opts)
    torch.manual_seed(args.seed)
    model = build_model(args)
    if args.num_experts:
        distinct_experts(model, args)
    if opts.check:
        return check(args, model, opts)
    generator = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, args.vocab_size, (BATCH, SEQ), generator=generator)
    logits = pipeline_logits(model, tokens)
    save(args, model, opts)
    if logits is not None and ps.get_tensor_model_parallel_rank() == 0:
        logits.float().contiguous().numpy().tofile(os.path.join(opts.out, "logits.bin"))
        with open(os.path.join(opts.out, "expected.json"), "w") as f:
            json.dump({"tokens": tokens.tolist(), "logits_shape": list(logits.shape),
                       "padded_vocab_size": args.padded_vocab_size, "iteration": ITERATION,
                       "megatron_core": __import__("megatron.core").core.__version__,
                       "torch": torch.__version__}, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
