"""Megatron-Core training on the CPU (gloo) with its DDP and distributed optimizer, saved with
the optimizer's and the scheduler's state: the source of the optimizer-state import fixtures of
issue 40 (not yet consumed by a test; docs/megatron_optimizer_state.md says what these
checkpoints hold and how Megatron lays the optimizer state out). Run by hand, set up as
tools/gen_megatron_fixtures.py says:

    PYTHONPATH=/tmp/Megatron-LM /tmp/mc-venv/bin/torchrun --nproc-per-node 2 \
        tools/gen_megatron_optimizer_fixtures.py --format torch_dist --tp 1 --out OUT
    # --format torch: the legacy format (distrib_optim.pt); --nproc-per-node 4 --tp 2: tp 2 x dp 2;
    # --fully-reshardable: Megatron's --dist-ckpt-optim-fully-reshardable; --resume: load step 10
    # and train 11..20 (losses_resumed.json must equal losses.json's).
"""

import argparse
import contextlib
import functools
import json
import os
import sys

import torch
import torch.distributed as dist

# ---------------------------------------------------------------- CPU patches
PATCHES = []
torch.cuda.synchronize = lambda *a, **k: None
torch.cuda.current_device = lambda: "cpu"
torch.cuda.get_rng_state = torch.get_rng_state
torch.Tensor.cuda = lambda self, *a, **k: self
PATCHES += ["torch.cuda.synchronize -> no-op", "torch.cuda.current_device -> 'cpu'",
            "torch.cuda.get_rng_state -> torch.get_rng_state", "Tensor.cuda -> identity"]


def _redirect(fn):
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        d = kwargs.get("device")
        if d == "cuda" or (isinstance(d, torch.device) and d.type == "cuda"):
            kwargs["device"] = "cpu"
        return fn(*args, **kwargs)
    return wrapped


for _n in ("tensor", "zeros", "ones", "empty", "full"):
    setattr(torch, _n, _redirect(getattr(torch, _n)))
PATCHES.append("torch.tensor/zeros/ones/empty/full(device='cuda') -> device='cpu'")

# Megatron's optimizers classify params with Tensor.type() == 'torch.cuda.FloatTensor' etc.
_type = torch.Tensor.type


def _cuda_type(self, *args, **kwargs):
    if args or kwargs:
        return _type(self, *args, **kwargs)
    t = _type(self)
    if t.startswith("torch.") and not t.startswith("torch.cuda."):
        return "torch.cuda." + t[len("torch."):]
    return t


torch.Tensor.type = _cuda_type
PATCHES.append("Tensor.type() (no args) -> 'torch.cuda.<X>Tensor' for CPU tensors")


def _no_fork(self, name=None):
    return contextlib.nullcontext()


os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")

SEQ = 16
STEPS = 20
SAVE_AT = 10


def megatron_argv(opts):
    a = [
        "--num-layers", "4", "--hidden-size", "32", "--num-attention-heads", "4",
        "--seq-length", str(SEQ), "--max-position-embeddings", "64",
        "--micro-batch-size", str(opts.mbs),
        "--global-batch-size", "8", "--train-iters", "100", "--lr", "3e-4", "--min-lr", "3e-5",
        "--lr-decay-style", "cosine", "--lr-warmup-iters", "5",
        "--weight-decay", "0.1", "--clip-grad", "1.0",
        "--tokenizer-type", "NullTokenizer", "--vocab-size", "120",
        "--make-vocab-size-divisible-by", "16",
        "--tensor-model-parallel-size", str(opts.tp),
        "--pipeline-model-parallel-size", "1",
        "--ckpt-format", opts.format, "--init-method-std", "0.05",
        "--save", opts.out, "--save-interval", str(SAVE_AT), "--seed", "1234",
        "--use-distributed-optimizer", "--optimizer", "adam",
        "--no-rope-fusion", "--no-bias-gelu-fusion", "--no-bias-swiglu-fusion",
        "--no-bias-dropout-fusion", "--no-masked-softmax-fusion",
        "--no-gradient-accumulation-fusion", "--no-persist-layer-norm",
        "--attention-dropout", "0", "--hidden-dropout", "0",
        "--ffn-hidden-size", "64", "--position-embedding-type", "rope", "--rotary-base", "10000",
        "--normalization", "RMSNorm", "--norm-epsilon", "1e-5", "--swiglu",
        "--disable-bias-linear", "--untie-embeddings-and-output-weights",
        "--group-query-attention", "--num-query-groups", "2",
    ]
    if opts.fully_reshardable:
        a.append("--dist-ckpt-optim-fully-reshardable")
    return a


def build_args(opts):
    from megatron.training import arguments, global_vars
    from megatron.training.arguments import parse_args, validate_args
    from megatron.training.tokenizer.tokenizer import _vocab_size_with_padding

    sys.argv = [sys.argv[0]] + megatron_argv(opts)
    args = parse_args()
    arguments.get_device_arch_version = lambda: 9
    validate_args(args)
    args.padded_vocab_size = _vocab_size_with_padding(args.vocab_size, args, logging_enabled=False)
    args.iteration = 0
    args.consumed_train_samples = 0
    global_vars._GLOBAL_ARGS = args
    return args


def build_model(args):
    from megatron.core import parallel_state as ps, tensor_parallel
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.training.arguments import core_transformer_config_from_args

    config = core_transformer_config_from_args(args)
    config.use_cpu_initialization = True
    spec = get_gpt_layer_local_spec(normalization=args.normalization)
    model = GPTModel(
        config=config, transformer_layer_spec=spec, vocab_size=args.padded_vocab_size,
        max_sequence_length=args.max_position_embeddings,
        pre_process=ps.is_pipeline_first_stage(), post_process=ps.is_pipeline_last_stage(),
        parallel_output=True,
        share_embeddings_and_output_weights=not args.untie_embeddings_and_output_weights,
        position_embedding_type=args.position_embedding_type,
        rotary_percent=args.rotary_percent, rotary_base=args.rotary_base)
    for p in model.parameters():  # as Megatron-LM's get_model
        tensor_parallel.set_defaults_if_not_set_tensor_model_parallel_attributes(p)
    return model, config


def wrap_ddp(args, config, model):
    """As Megatron-LM's get_model (training.py) without its CUDA side stream."""
    import dataclasses
    from megatron.core.distributed import DistributedDataParallel as DDP
    from megatron.core.distributed import DistributedDataParallelConfig

    kwargs = {}
    for f in dataclasses.fields(DistributedDataParallelConfig):
        if hasattr(args, f.name):
            kwargs[f.name] = getattr(args, f.name)
    kwargs['grad_reduce_in_fp32'] = args.accumulate_allreduce_grads_in_fp32
    kwargs['check_for_nan_in_grad'] = args.check_for_nan_in_loss_and_grad
    kwargs['check_for_large_grads'] = args.check_for_large_grads
    kwargs['bucket_size'] = args.ddp_bucket_size
    kwargs['pad_buckets_for_high_nccl_busbw'] = args.ddp_pad_buckets_for_high_nccl_busbw
    kwargs['reduce_scatter_with_fp32_accumulation'] = args.ddp_reduce_scatter_with_fp32_accumulation
    kwargs['average_in_collective'] = args.ddp_average_in_collective
    ddp_config = DistributedDataParallelConfig(**kwargs)
    if not ddp_config.overlap_grad_reduce:
        ddp_config.bucket_size = None
    return DDP(config=config, ddp_config=ddp_config, module=model), ddp_config


MASK64 = (1 << 64) - 1
MOCK_VOCAB = 128  # the padded vocabulary: what megatron-cpp's imported recipe draws mock tokens from


def _mix(x):
    """SplitMix64's finaliser (megatron/training/mock_source.cpp)."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def mock_sample(seed, index, vocab):
    """megatron-cpp's MockTokenSource sample `index` (data.mock): a motif of 3..10 tokens
    repeated over seq + 1 tokens, so that a run here and the continued run there see the same
    data."""
    state = _mix(seed ^ _mix(index))

    def draw(n):
        nonlocal state
        v = _mix(state)
        state = (state + 1) & MASK64
        return v % n

    period = 3 + draw(8)
    motif = [draw(vocab) for _ in range(period)]
    return [motif[s % period] for s in range(SEQ + 1)]


def global_batch(step, gbs, seed):
    """Samples step * gbs .. step * gbs + gbs - 1 of the mock data, in sample order."""
    return torch.tensor([mock_sample(seed, step * gbs + i, MOCK_VOCAB) for i in range(gbs)])


def data_iterator_for(step, args):
    """Megatron's MegatronPretrainingSampler order: micro batch m of dp rank d holds samples
    [m*mbs*dp + d*mbs, +mbs) of the global batch."""
    from megatron.core import parallel_state as ps

    dp, d, mbs = ps.get_data_parallel_world_size(), ps.get_data_parallel_rank(), args.micro_batch_size
    seq = global_batch(step, args.global_batch_size, args.seed)
    n_micro = args.global_batch_size // (mbs * dp)
    for m in range(n_micro):
        s = m * mbs * dp + d * mbs
        chunk = seq[s:s + mbs]
        yield {"tokens": chunk[:, :-1].contiguous(), "labels": chunk[:, 1:].contiguous()}


def loss_func(loss_mask, output_tensor):
    """pretrain_gpt.py's loss_func (per-token sum, token count, reporting pair)."""
    losses = output_tensor.view(-1).float()
    loss_mask = loss_mask.view(-1).float()
    loss = torch.sum(losses * loss_mask)
    num_tokens = loss_mask.sum().clone().detach().to(torch.int)
    reporting_loss = torch.cat([loss.clone().detach().view(1), num_tokens.view(1)])
    return loss, num_tokens, {"lm loss": reporting_loss}


def forward_step(data_iterator, model):
    b = next(data_iterator)
    tokens, labels = b["tokens"], b["labels"]
    mbs = tokens.shape[0]
    positions = torch.arange(SEQ).unsqueeze(0).expand(mbs, SEQ)
    causal = torch.triu(torch.ones(1, 1, SEQ, SEQ, dtype=torch.bool), diagonal=1)
    loss_mask = torch.ones(mbs, SEQ)
    out = model(tokens, positions, causal, labels=labels)
    return out, functools.partial(loss_func, loss_mask)


def dump_layout(opts, ddp_model, optimizer, model):
    """The grad buffer layout (param -> [start, end) in the flat bucket space) and each dp
    rank's shard of it, as Megatron-Core computed them here."""
    from megatron.core import parallel_state as ps

    names = {p: n for n, p in model.named_parameters()}
    bufs = []
    for bi, buf in enumerate(ddp_model.buffers):
        params = sorted(buf.param_index_map.items(), key=lambda kv: kv[1][0])
        bufs.append({
            "buffer": bi, "param_dtype": str(buf.param_dtype), "grad_dtype": str(buf.grad_dtype),
            "numel": buf.numel, "numel_unpadded": buf.numel_unpadded,
            "buckets": [{"offset": b.offset, "numel": b.grad_data.numel(),
                         "numel_unpadded": b.numel_unpadded} for b in buf.buckets],
            "params": [{"name": names[p], "shape": list(p.shape), "start": s, "end": e,
                        "bucket": bk,
                        "tensor_model_parallel": bool(getattr(p, "tensor_model_parallel", False)),
                        "partition_dim": getattr(p, "partition_dim", -1)}
                       for p, (s, e, bk) in params]})
    dopt = optimizer.chained_optimizers[0]
    shards = []
    for gi, gmaps in enumerate(dopt.gbuf_ranges):
        for dtype, per_bucket in gmaps.items():
            for bk, r in enumerate(per_bucket):
                b = ddp_model.buffers[gi].buckets[bk]
                dp, d = ps.get_data_parallel_world_size(), ps.get_data_parallel_rank()
                n = b.grad_data.numel() // dp
                shards.append({"buffer": gi, "bucket": bk, "dp_rank": d,
                               "shard_in_buffer": [b.offset + d * n, b.offset + (d + 1) * n],
                               "params": {names[p]: {k: [v.start, v.end] for k, v in m.items()}
                                          for p, m in r["param_map"].items()}})
    out = {"tp_rank": ps.get_tensor_model_parallel_rank(), "buffers": bufs, "dp_shards": shards}
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, out)
    if dist.get_rank() == 0:
        with open(os.path.join(opts.out, "layout.json"), "w") as f:
            json.dump(gathered, f, indent=1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--format", choices=["torch_dist", "torch"], required=True)
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--mbs", type=int, default=1)
    p.add_argument("--fully-reshardable", action="store_true")
    p.add_argument("--out", required=True)
    p.add_argument("--keep-step-bug", action="store_true",
                   help="do not repair the Adam step tensors after a resume (shows the bug)")
    p.add_argument("--resume", action="store_true",
                   help="load --out's iteration-10 checkpoint (with optimizer) and run 11..20")
    opts = p.parse_args()
    dist.init_process_group("gloo")
    from megatron.core.tensor_parallel import random as tp_random

    tp_random.CudaRNGStatesTracker.fork = _no_fork
    from megatron.core import parallel_state as ps

    ps.initialize_model_parallel(tensor_model_parallel_size=opts.tp,
                                 pipeline_model_parallel_size=1)
    args = build_args(opts)
    torch.manual_seed(args.seed)
    # As Megatron-LM's initialize (_set_random_seed): fills the CUDA RNG tracker, so that the
    # checkpoint's rng_state.rng_tracker_states is not empty (load_checkpoint exits on an empty
    # one). On the CPU torch.cuda.manual_seed / set_rng_state are queued lazy calls that never
    # run, and torch.cuda.get_rng_state is the CPU's: the tracker holds copies of the CPU state.
    tp_random.model_parallel_cuda_manual_seed(args.seed)
    from megatron.core.num_microbatches_calculator import (get_num_microbatches,
                                                           init_num_microbatches_calculator)

    init_num_microbatches_calculator(dist.get_rank(), None, args.global_batch_size,
                                     args.micro_batch_size, args.data_parallel_size)
    model, config = build_model(args)
    ddp_model, ddp_config = wrap_ddp(args, config, model)
    model_chunks = [ddp_model]

    from megatron.core.optimizer import get_megatron_optimizer
    from megatron.training.training import (get_megatron_optimizer_config,
                                            get_optimizer_param_scheduler)

    opt_config, overrides = get_megatron_optimizer_config(args)
    optimizer = get_megatron_optimizer(opt_config, model_chunks, config_overrides=overrides,
                                       use_gloo_process_groups=True)
    sched = get_optimizer_param_scheduler(optimizer)

    from megatron.core.distributed import finalize_model_grads
    from megatron.core.pipeline_parallel import get_forward_backward_func

    config.grad_scale_func = optimizer.scale_loss
    config.finalize_model_grads_func = finalize_model_grads
    fwd_bwd = get_forward_backward_func()
    rank0 = dist.get_rank() == 0
    if rank0:
        print("optimizer:", type(optimizer).__name__,
              [type(o).__name__ for o in getattr(optimizer, "chained_optimizers", [optimizer])],
              "inner:", type(getattr(optimizer, "chained_optimizers", [optimizer])[0].optimizer),
              "ddp_config:", ddp_config, flush=True)
    losses = []
    first = 0
    if opts.resume:
        from megatron.training import checkpointing as ck

        args.load = opts.out
        args.exit_on_missing_checkpoint = True
        args.auto_detect_ckpt_format = True
        # Without Apex / Transformer Engine the inner optimizer is torch.optim.AdamW, whose
        # state (and 'step') is empty before the first step; DistributedOptimizer.state_dict()
        # then fails (assert len(steps) == 1, distrib_optimizer.py:642). Megatron's own helper
        # takes one zero-gradient step to allocate it; the load overwrites all of it.
        for o in optimizer.chained_optimizers:
            o._init_optimizer_states_with_dummy_values()
        # The fully_reshardable and legacy (distrib_optim.pt) param states hold only
        # param/exp_avg/exp_avg_sq, but _set_main_param_and_optimizer_states
        # (distrib_optimizer.py:940) copies every key of optimizer.state[p], and torch AdamW
        # has a 'step' there: KeyError 'step'. Copy only the keys the checkpoint has.
        from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

        _set = DistributedOptimizer._set_main_param_and_optimizer_states

        def _set_present(self, model_param, tensors):
            group_index, group_order = self.model_param_group_index_map[model_param]
            main_param = self.optimizer.param_groups[group_index]["params"][group_order]
            state = self.optimizer.state[main_param]
            for k in [k for k in state if k not in tensors]:
                tensors = {**tensors, k: state[k]}
            return _set(self, model_param, tensors)

        DistributedOptimizer._set_main_param_and_optimizer_states = _set_present
        # fp32 params: the optimizer's main params are views of the model params (leaves that
        # require grad), and load_parameter_state_from_dp_reshardable (unlike its siblings) has
        # no @torch.no_grad(): its copy_ (distrib_optimizer.py:940) raises "a view of a leaf
        # Variable that requires grad is being used in an in-place operation" without this.
        with torch.no_grad():
            first, _ = ck.load_checkpoint(model_chunks, optimizer, sched, strict=True)
        inner = optimizer.chained_optimizers[0].optimizer
        steps = [st["step"] for st in inner.state.values()]
        if rank0:
            print("after load: adam step tensors", len(steps), "distinct objects",
                  len({id(t) for t in steps}), "values", sorted({t.item() for t in steps}),
                  flush=True)
        if not opts.keep_step_bug:
            # Two faults of the torch.optim.AdamW path (no Apex/TE) of DistributedOptimizer's
            # load: load_state_dict gives every param the SAME 'step' tensor (AdamW then adds 1
            # to it once per param per step), and load_parameter_state_from_dp_reshardable
            # copies 'step' back from the pre-load state (the dummy step's 1) since
            # get_parameter_state_dp_reshardable lists every key of optimizer.state[p].
            # The checkpoint itself holds the right value (param_groups[i]['step'] == 10.0).
            for st in inner.state.values():
                st["step"] = torch.tensor(float(first))
        if rank0:
            print("RESUMED from iteration", first, "lr", optimizer.param_groups[0]["lr"],
                  "sched num_steps", sched.num_steps, flush=True)
    for step in range(first, STEPS):
        ddp_model.train()
        ddp_model.zero_grad_buffer()
        optimizer.zero_grad()
        reduced = fwd_bwd(forward_step_func=forward_step,
                          data_iterator=data_iterator_for(step, args), model=model_chunks,
                          num_microbatches=get_num_microbatches(), seq_length=SEQ,
                          micro_batch_size=args.micro_batch_size, forward_only=False)
        ok, grad_norm, _ = optimizer.step()
        assert ok
        sched.step(increment=get_num_microbatches() * args.micro_batch_size *
                   args.data_parallel_size)
        val = torch.vstack([x["lm loss"].view(-1) for x in reduced]).sum(dim=0)
        dist.all_reduce(val, group=ps.get_data_parallel_group(with_context_parallel=True))
        loss = (val[0] / val[1]).item()
        losses.append(loss)
        lr = optimizer.param_groups[0]["lr"]
        if rank0:
            print(f"STEP {step + 1:3d} loss {loss:.6f} grad_norm {grad_norm:.6f} lr {lr:.6e}",
                  flush=True)
        if step + 1 == SAVE_AT and not opts.resume:
            args.iteration = step + 1
            args.consumed_train_samples = (step + 1) * args.global_batch_size
            from megatron.training import checkpointing as ck

            ck.save_checkpoint(step + 1, model_chunks, optimizer, sched, 0)
            if rank0:
                print("SAVED at", step + 1, flush=True)
    if not opts.resume:
        dump_layout(opts, ddp_model, optimizer, model)
    # the dp replicas must hold the same parameters
    flat = torch.cat([p.detach().view(-1) for p in model.parameters()])
    hi, lo = flat.clone(), flat.clone()
    dist.all_reduce(hi, op=dist.ReduceOp.MAX, group=ps.get_data_parallel_group())
    dist.all_reduce(lo, op=dist.ReduceOp.MIN, group=ps.get_data_parallel_group())
    if rank0:
        print("max param spread over dp:", (hi - lo).abs().max().item(), flush=True)
    if rank0:
        name = "losses_resumed.json" if opts.resume else "losses.json"
        with open(os.path.join(opts.out, name), "w") as f:
            json.dump({"losses": losses, "saved_at": SAVE_AT, "tp": opts.tp,
                       "dp": args.data_parallel_size, "patches": PATCHES}, f, indent=1)
        print("PATCHES:", *PATCHES, sep="\n  ")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
