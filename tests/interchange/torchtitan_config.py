#!/usr/bin/env python3
"""cpt plan's torchtitan.toml read by torchtitan's own code (the 0.2.x version scripts/setup pins):
ConfigManager parses the file into its JobConfig (an unknown section or key is an error there),
ParallelDims accepts the degrees for the plan's GPU count, the model of [model] is in torchtitan's
registry and has the plan's dimensions (layers, width, heads, key/value heads, the MLP's width as
torchtitan computes it, RoPE base), the batch gives the plan's global batch and microbatches, and
torchtitan's DDP is used only where torchtitan allows it (as the one parallelism).

Usage: torchtitan_config.py CPT_BINARY WORK_DIR   (exit 77: torchtitan is not installed)
"""
import os
import sys

from export_matrix import plan as make_plan, run_matrix

try:
    from torchtitan.config import ConfigManager
    from torchtitan.distributed.parallel_dims import ParallelDims
    from torchtitan.protocols.train_spec import get_train_spec
except ImportError as error:
    print(f"torchtitan is not installed (scripts/setup installs it): {error}")
    sys.exit(77)

# (model, GPUs, --fix): FSDP, HSDP, ZeRO-0 beside tensor and pipeline parallelism (DDP alone in
# torchtitan), an interleaved pipeline with ZeRO-1, context parallelism, offload, Qwen3's MoE with
# expert parallelism, DeepSeek's (latent attention) and GPT-OSS's, pure data parallelism, and two
# models torchtitan has no flavour of (the file names a flavor torchtitan refuses at start instead
# of training its debug model).
LAYOUTS = [
    ("llama3-8b", 16, "tp=1,pp=1,cp=1,zero=3", "llama3 8B"),
    ("llama3.1-8b", 16, "tp=1,pp=1,cp=1,zero=3,hsdp=true", "llama3 8B"),
    ("llama3-70b", 64, "tp=4,pp=4,cp=1,zero=0,schedule=1f1b", "llama3 70B"),
    ("llama3-70b", 64, "tp=8,pp=4,cp=1,zero=1,vp=2,schedule=interleaved_1f1b", "llama3 70B"),
    ("llama3-70b", 64, "tp=8,pp=4,cp=1,zero=3,vp=5,schedule=interleaved_1f1b", "llama3 70B"),
    ("llama3.1-405b", 512, "tp=4,pp=16,cp=2,zero=1,schedule=1f1b", "llama3 405B"),
    ("llama3-8b", 16, "tp=1,pp=1,cp=1,zero=3,offload=params", "llama3 8B"),
    ("llama3.2-1b", 8, "tp=1,pp=1,cp=1,zero=0", None),
    ("qwen3-30b-a3b", 16, "tp=1,pp=1,cp=1,zero=3,ep=8", "qwen3 30B-A3B"),
    ("deepseek-v2-lite", 16, "tp=1,pp=1,cp=1,zero=3,ep=8", "deepseek_v3 16B"),
    ("gpt-oss-20b", 16, "tp=1,pp=1,cp=1,zero=3,ep=8", "gpt_oss 20b"),
    ("mistral-7b", 16, "tp=2,pp=1,cp=1,zero=3", None),
]


def ffn_width(args):
    """The SwiGLU width torchtitan's llama3 FeedForward builds (dim, multiple_of, ffn_dim_multiplier)."""
    hidden = int(2 * (4 * args.dim) / 3)
    if args.ffn_dim_multiplier is not None:
        hidden = int(args.ffn_dim_multiplier * hidden)
    return args.multiple_of * ((hidden + args.multiple_of - 1) // args.multiple_of)


def pipeline_split_is_the_plans(p, stages, layers):
    """Every (virtual) stage holds layers / stages layers, embeddings and head not counted as layers; a
    split that is not even is torchtitan's own (the export says so in a comment; --target refuses it)."""
    if p.pipeline_parallel_first_stage_less_layers != 0 or p.pipeline_parallel_last_stage_less_layers != 0:
        return False
    if layers % stages != 0:
        return p.pipeline_parallel_layers_per_stage is None
    return p.pipeline_parallel_layers_per_stage * stages == layers


def check_model(job, model, failures, fix):
    try:
        args = get_train_spec(job.model.name).model_args[job.model.flavor]
    except (KeyError, ValueError) as error:
        return f"no flavour ({error!r})"
    # A mixture of experts (its routed experts' width): the plan's model says, as cpt matched it.
    moe = bool(model.get("moe"))
    width = args.moe_inter_dim if moe else (args.hidden_dim if hasattr(args, "hidden_dim") else ffn_width(args))
    expected_ffn = model["moe"]["expert_ffn_hidden"] if model.get("moe") else model["ffn_hidden"]
    for ours, theirs, what in ((model["layers"], args.n_layers, "layers"), (model["hidden"], args.dim, "dim"),
                               (model["heads"], args.n_heads, "heads"),
                               (model["kv_heads"], getattr(args, "n_kv_heads", None) or args.n_heads, "kv heads"),
                               (expected_ffn, width, "ffn"), (model["rope_theta"], args.rope_theta, "rope_theta")):
        if ours != theirs:
            failures.append(f"{fix}: {what}: plan {ours}, torchtitan's {job.model.name} {job.model.flavor} {theirs}")
    return f"{job.model.name} {job.model.flavor}"


def check_layout(cpt, work, index, layout, failures):
    model_name, gpus, fix, expected_flavour = layout
    out = os.path.join(work, f"plan{index}")
    plan = make_plan(cpt, out, model_name, gpus, fix, 512)
    parallel, model = plan["parallel"], plan["model"]
    job = ConfigManager().parse_args(["--job.config_file", os.path.join(out, "torchtitan.toml")])
    p = job.parallelism
    dims = ParallelDims(dp_replicate=p.data_parallel_replicate_degree, dp_shard=p.data_parallel_shard_degree,
                        cp=p.context_parallel_degree, tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree,
                        ep=p.expert_parallel_degree, etp=p.expert_tensor_parallel_degree, world_size=gpus)
    dp = dims.dp_replicate * dims.dp_shard
    t = job.training
    checks = [
        (dp == parallel["dp"], f"data parallel {dp}, plan {parallel['dp']}"),
        (t.global_batch_size == parallel["global_batch"], "global batch"),
        (t.global_batch_size % (t.local_batch_size * dp) == 0, "gradient accumulation is not whole"),
        (dims.pp == 1 or t.local_batch_size // p.pipeline_parallel_microbatch_size ==
         parallel["global_batch"] // (parallel["dp"] * parallel["micro_batch"]), "pipeline microbatches"),
        (dims.dp_replicate == 1 or dims.world_size == dims.dp_replicate or dims.dp_shard > 1,
         "DDP beside other parallelism (torchtitan refuses it)"),
        (dims.pp == 1 or pipeline_split_is_the_plans(p, dims.pp * parallel["virtual_stages"], model["layers"]),
         "the plan's pipeline split"),
    ]
    for ok, what in checks:
        if not ok:
            failures.append(f"{model_name} {fix}: {what}")
    flavour = check_model(job, model, failures, fix)
    if flavour != (expected_flavour or flavour) or (expected_flavour is None) != flavour.startswith("no flavour"):
        failures.append(f"{model_name} {fix}: [model] {job.model.name} {job.model.flavor}: {flavour}, "
                        f"expected {expected_flavour or 'none (torchtitan refuses the file)'}")
    print(f"{model_name} {fix}: torchtitan reads dp {dims.dp_replicate}x{dims.dp_shard}, local batch "
          f"{t.local_batch_size}, model {flavour}")


if __name__ == "__main__":
    run_matrix(LAYOUTS, check_layout)
