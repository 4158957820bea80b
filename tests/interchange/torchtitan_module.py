#!/usr/bin/env python3
"""cpt plan's torchtitan_config.py read by torchtitan 0.3's own code (the version scripts/setup
installs in a second environment, torchtitan 0.3 needing a newer torch than the project's): its
ConfigManager imports the module (`--module torchtitan_config --config cpt_plan`, the plan directory
on the Python path) and parses the Trainer.Config it returns with tyro; ParallelDims accepts the
degrees for the plan's GPU count; the model is the registry's of the plan's dimensions (layers,
width, heads, key/value heads, vocabulary, routed experts), the batch gives the plan's global batch
and microbatches, the activation checkpointing and the base model's initial checkpoint are the
plan's; a model torchtitan has no flavour of is refused by cpt_plan() itself, naming it.

Usage: torchtitan_module.py CPT_BINARY WORK_DIR   (exit 77: torchtitan 0.3 is not installed)
"""
import os
import sys

from export_matrix import plan as make_plan, run_matrix

try:
    from torchtitan.config import ConfigManager
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
except ImportError as error:
    print(f"torchtitan 0.3 is not installed (scripts/setup installs it): {error}")
    sys.exit(77)

# (model, GPUs, --fix, torchtitan family or None): FSDP, HSDP, ZeRO-0 beside tensor and pipeline
# parallelism, an interleaved pipeline with ZeRO-1 and full recomputation, context parallelism,
# parameter offload, Qwen3's MoE with ep folded over dp_shard x tp, DeepSeek's (latent attention,
# dense first layer) and GPT-OSS's, and a model torchtitan has no flavour of.
LAYOUTS = [
    ("llama3-8b", 16, "tp=1,pp=1,cp=1,zero=3", "llama3"),
    ("llama3.1-8b", 16, "tp=1,pp=1,cp=1,zero=3,hsdp=true", "llama3"),
    ("llama3-70b", 64, "tp=4,pp=4,cp=1,zero=0,schedule=1f1b", "llama3"),
    ("llama3-70b", 64, "tp=8,pp=4,cp=1,zero=1,vp=2,schedule=interleaved_1f1b,recompute=full", "llama3"),
    ("llama3.1-405b", 512, "tp=4,pp=16,cp=2,zero=1,schedule=1f1b", "llama3"),
    ("llama3-8b", 16, "tp=1,pp=1,cp=1,zero=3,offload=params", "llama3"),
    ("qwen3-30b-a3b", 16, "tp=2,pp=1,cp=1,zero=3,ep=8,sequence_parallel=true", "qwen3"),
    ("deepseek-v2-lite", 16, "tp=1,pp=1,cp=1,zero=3,ep=8", "deepseek_v3"),
    ("gpt-oss-20b", 16, "tp=1,pp=1,cp=1,zero=3,ep=8", "gpt_oss"),
    ("mistral-7b", 16, "tp=2,pp=1,cp=1,zero=3", None),
]


# The base model's Hugging Face directory, as a user gives it to the module.
BASE_MODEL = "/models/base-hf"


def load(out):
    """torchtitan 0.3's ConfigManager on the exported module, as torchtitan.train runs it."""
    sys.path.insert(0, out)
    os.environ["CPT_BASE_MODEL_HF_DIR"] = BASE_MODEL
    try:
        sys.modules.pop("torchtitan_config", None)
        return ConfigManager().parse_args(["--module", "torchtitan_config", "--config", "cpt_plan"])
    finally:
        sys.path.remove(out)


def check_model(config, model, name, failures):
    spec = config.model_spec.model
    block = spec.layers[-1]  # a mixture's last layer has experts (DeepSeek's first are dense)
    # Latent attention has no key/value heads of its own: as many as heads.
    kv_heads = getattr(block.attention, "n_kv_heads", None) or block.attention.n_heads
    expected = [("dim", spec.dim, model["hidden"]), ("vocab", spec.vocab_size, model["vocab"]),
                ("layers", len(spec.layers), model["layers"]), ("heads", block.attention.n_heads, model["heads"]),
                ("kv heads", kv_heads, model["kv_heads"])]
    if model.get("moe"):
        expected.append(("experts", block.moe.num_experts, model["moe"]["experts"]))
    for what, built, planned in expected:
        if built != planned:
            failures.append(f"{name}: torchtitan builds {what} {built}, plan {planned}")


def check_parallelism(config, plan, gpus, name, failures):
    par, p, t = plan["parallel"], config.parallelism, config.training
    dims = ParallelDims(dp_replicate=p.data_parallel_replicate_degree, dp_shard=p.data_parallel_shard_degree,
                        cp=p.context_parallel_degree, tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree,
                        ep=p.expert_parallel_degree, world_size=gpus)
    if (dims.dp_shard * dims.cp * dims.tp) % dims.ep != 0:
        failures.append(f"{name}: ep {dims.ep} does not fold over dp_shard x cp x tp")
    if (dims.tp, dims.cp, dims.pp, dims.dp_replicate * dims.dp_shard) != (par["tp"], par["cp"], par["pp"], par["dp"]):
        failures.append(f"{name}: torchtitan's degrees {dims} differ from the plan's")
    if p.enable_sequence_parallel != par["sequence_parallel"] and par["tp"] > 1:
        failures.append(f"{name}: sequence parallelism {p.enable_sequence_parallel}, plan {par['sequence_parallel']}")
    if p.fsdp_reshard_after_forward != ("always" if par["zero_stage"] == 3 else "never"):
        failures.append(f"{name}: fsdp_reshard_after_forward {p.fsdp_reshard_after_forward!r}, ZeRO-{par['zero_stage']}")
    if t.enable_cpu_offload != (par["offload"] == "optimizer+params"):
        failures.append(f"{name}: enable_cpu_offload {t.enable_cpu_offload}, plan offload {par['offload']!r}")
    if t.global_batch_size != par["global_batch"] or t.seq_len != plan["workload"]["seq_len"]:
        failures.append(f"{name}: batch {t.global_batch_size} x {t.seq_len}, plan {par['global_batch']}")
    microbatches = t.local_batch_size // p.pipeline_parallel_microbatch_size if par["pp"] > 1 else 1
    if par["pp"] > 1 and microbatches * par["dp"] * par["micro_batch"] != par["global_batch"]:
        failures.append(f"{name}: {microbatches} pipeline microbatches per step, plan {par['grad_accum']}")
    recompute = {"full": FullAC.Config, "selective": SelectiveAC.Config, "none": type(None)}[par["recompute"]]
    if not isinstance(config.activation_checkpoint, recompute):
        failures.append(f"{name}: activation checkpoint {config.activation_checkpoint}, plan {par['recompute']}")
    if config.checkpoint.initial_load_path != BASE_MODEL or not config.checkpoint.initial_load_in_hf:
        failures.append(f"{name}: the base model's Hugging Face weights are not the initial checkpoint")


def check_layout(cpt, work, index, layout, failures):
    model_name, gpus, fix, family = layout
    out = os.path.join(work, f"plan{index}")
    plan = make_plan(cpt, out, model_name, gpus, fix, 256)
    name = f"{model_name} {fix}"
    try:
        config = load(out)
    except NotImplementedError as refused:
        if family is not None or model_name.split("-")[0] not in str(refused):
            failures.append(f"{name}: refused: {refused}")
        print(f"{name}: refused as expected: {refused}")
        return
    if family is None:
        failures.append(f"{name}: torchtitan 0.3 has no flavour of it, but the module built a config")
        return
    check_model(config, plan["model"], name, failures)
    check_parallelism(config, plan, gpus, name, failures)
    print(f"{name}: torchtitan 0.3 builds {config.model_spec.name} {config.model_spec.flavor}, "
          f"dp {config.parallelism.data_parallel_replicate_degree} x {config.parallelism.data_parallel_shard_degree}")


if __name__ == "__main__":
    run_matrix(LAYOUTS, check_layout)
