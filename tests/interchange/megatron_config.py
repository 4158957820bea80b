#!/usr/bin/env python3
"""cpt plan's megatron_args.sh built into megatron-core's own TransformerConfig (the version
scripts/setup pins), as Megatron-LM's core_transformer_config_from_args builds it: every argument
whose name is a config field is passed under that name, the renamed ones under Megatron-LM's names
(--num-experts, --norm-epsilon, --swiglu, --disable-bias-linear, --num-virtual-stages-per-pipeline-
rank, --decoder-first/last-pipeline-num-layers), and TransformerConfig's checks run. The model it
describes must be the plan's (layers, width, heads, query groups, MLP width, biases, epsilon, RoPE
base, experts), dropout 0, and the pipeline split one Megatron-LM's validate_args accepts (the
layers between the first and last stage's divide over the other stages and their virtual stages;
Megatron-LM's training package is not on the package index, so that rule is restated here). ZeRO-2/3
without a pipeline is Megatron-FSDP in megatron-core's DistributedDataParallelConfig, hybrid sharding
its HSDP: the instances megatron-core's RankGenerator cuts from each dp x cp group are one node each.

Usage: megatron_config.py CPT_BINARY WORK_DIR   (exit 77: megatron-core is not installed)
"""
import dataclasses
import json
import math
import os
import subprocess
import sys
import typing
import warnings

from export_matrix import plan as make_plan, run_matrix

warnings.filterwarnings("ignore")  # megatron-core's notes that Transformer Engine and Apex are absent

try:
    import torch
    from megatron.core.transformer.enums import AttnBackend
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.parallel_state import RankGenerator
except ImportError as error:
    print(f"megatron-core is not installed (scripts/setup installs it): {error}")
    sys.exit(77)

# (model, GPUs, --fix): tensor and sequence parallelism, an interleaved pipeline, 405B's uneven
# split [1, 62 x 2, 1], Qwen2.5's biases and RoPE base, context parallelism, mixtures of experts
# with expert parallelism (Mixtral; Qwen3-MoE's q/k norms and head width; the flex dispatcher;
# DeepSeek-V3's group-limited routing, weight scale and expert-bias balancing).
LAYOUTS = [
    ("llama3-8b", 16, "tp=2,pp=1,cp=1,zero=1,sequence_parallel=true"),
    ("llama3-70b", 64, "tp=8,pp=4,cp=1,zero=1,vp=5,schedule=interleaved_1f1b"),
    ("llama3.1-405b", 2048, "tp=8,pp=64,cp=1,zero=1,schedule=1f1b"),
    ("qwen2.5-7b", 16, "tp=2,pp=2,cp=2,zero=1,sequence_parallel=true,schedule=1f1b"),
    ("mixtral-8x7b", 64, "tp=1,pp=4,cp=1,zero=1,ep=8,schedule=1f1b"),
    ("qwen3-30b-a3b", 16, "tp=1,pp=2,cp=1,zero=1,ep=8,schedule=1f1b"),
    ("llama3-70b", 64, "tp=8,pp=4,cp=1,zero=1,vp=3,schedule=interleaved_1f1b"),
    ("llama3-8b", 16, "tp=2,pp=1,cp=1,zero=3,hsdp=false,sequence_parallel=true,offload=none"),
    ("qwen3-30b-a3b", 16, "tp=1,pp=1,cp=1,zero=2,ep=8,offload=none"),
    ("llama3-8b", 32, "tp=2,pp=1,cp=1,zero=3,hsdp=true,sequence_parallel=true,offload=none"),
    ("qwen3-30b-a3b", 16, "tp=1,pp=1,cp=1,zero=1,ep=16", ("--moe-dispatcher", "flex")),
    ("qwen2-57b-a14b", 32, "tp=2,pp=1,cp=1,zero=1,ep=8,sequence_parallel=true"),
    ("deepseek-v3", 1024, "tp=1,pp=16,cp=1,zero=1,ep=64,schedule=1f1b"),
]

# Megatron-FSDP's sharding strategy for each ZeRO stage (megatron-core's DistributedDataParallelConfig).
FSDP_STRATEGY = {2: "optim_grads", 3: "optim_grads_params"}

# Megatron-LM's names for TransformerConfig fields that are not spelt as the field.
RENAMED = {
    "num_experts": "num_moe_experts",
    "norm_epsilon": "layernorm_epsilon",
    "num_virtual_stages_per_pipeline_rank": "virtual_pipeline_model_parallel_size",
    "decoder_first_pipeline_num_layers": "num_layers_in_first_pipeline_stage",
    "decoder_last_pipeline_num_layers": "num_layers_in_last_pipeline_stage",
    "tensor_model_parallel_size": "tensor_model_parallel_size",
}


def megatron_arguments(path):
    """The MEGATRON_ARGS array of megatron_args.sh, as bash sees it, into {name: value or True}."""
    words = subprocess.run(["bash", "-c", 'source "$1"; printf "%s\\0" "${MEGATRON_ARGS[@]}"', "_", path],
                           check=True, capture_output=True).stdout.decode().split("\0")[:-1]
    args, i = {}, 0
    while i < len(words):
        name = words[i][2:].replace("-", "_")
        if i + 1 < len(words) and not words[i + 1].startswith("--"):
            args[name], i = words[i + 1], i + 2
        else:
            args[name], i = True, i + 1
    return args


def transformer_config(args):
    # Latent attention's arguments are fields of MLATransformerConfig, as Megatron-LM builds it then.
    config_class = MLATransformerConfig if "multi_latent_attention" in args else TransformerConfig
    fields = {f.name: f for f in dataclasses.fields(config_class)}
    kwargs = {"bf16": "bf16" in args, "params_dtype": torch.bfloat16, "pipeline_dtype": torch.bfloat16}
    for name, value in args.items():
        field = RENAMED.get(name, name)
        if field not in fields or field in kwargs:
            continue
        kind = fields[field].type
        kind = next((k for k in typing.get_args(kind) if k is not type(None)), kind) if typing.get_args(kind) else kind
        if field == "attention_backend":
            kwargs[field] = AttnBackend[value]
        elif field == "moe_layer_freq":  # Megatron-LM's moe_freq_type: an int, or a list of 0/1 per layer
            kwargs[field] = json.loads(value) if value.startswith("[") else int(value)
        elif kind is bool:
            kwargs[field] = True
        elif kind in (int, float):
            kwargs[field] = kind(value)
        elif isinstance(value, str):
            kwargs[field] = value
    if "swiglu" in args:
        kwargs.update(gated_linear_unit=True, activation_func=torch.nn.functional.silu)
    if "disable_bias_linear" in args:
        kwargs["add_bias_linear"] = False
    if "group_query_attention" not in args:
        kwargs.pop("num_query_groups", None)
    return config_class(**kwargs)


def check_hybrid_shards(ddp, args, plan, name, failures):
    """Hybrid sharding as Megatron-FSDP's HSDP: megatron-core splits each dp x cp group (its
    RankGenerator's, in the exported rank order) into num_distributed_optimizer_instances contiguous
    instances that shard, replicated across; each must be the data-parallel ranks of one node."""
    parallel, per_node = plan["parallel"], plan["cluster"]["node"]["gpus_per_node"]
    instances = int(ddp.num_distributed_optimizer_instances)
    if not parallel.get("hybrid_shard"):
        if instances != 1:
            failures.append(f"{name}: {instances} distributed optimizer instances without hybrid sharding")
        return
    order = "tp-cp-ep-pp-dp" if "use_tp_pp_dp_mapping" in args else "tp-cp-ep-dp-pp"
    ranks = RankGenerator(tp=parallel["tp"], ep=1, dp=parallel["dp"], pp=parallel["pp"], cp=parallel["cp"],
                          order=order, rank_offset=0)
    replicas = parallel["dp"] * parallel["cp"]
    if instances <= 1 or replicas % instances != 0:
        failures.append(f"{name}: hybrid sharding as {instances} instances over dp x cp {replicas}")
        return
    size = replicas // instances
    for group in ranks.get_ranks("dp-cp"):
        for i in range(instances):
            shard = group[i * size:(i + 1) * size]
            if len({rank // per_node for rank in shard}) != 1 or size != per_node // parallel["tp"] // parallel["pp"]:
                failures.append(f"{name}: megatron-core's instance {shard} is not one node's data-parallel ranks")
                return


def data_parallel_config(args):
    """megatron-core's DistributedDataParallelConfig as Megatron-LM's training.py builds it: every
    argument named as a field."""
    fields = {f.name for f in dataclasses.fields(DistributedDataParallelConfig)}
    return DistributedDataParallelConfig(**{name: value for name, value in args.items() if name in fields})


def check_data_parallel(ddp, args, parallel, script, name, failures):
    """ZeRO-2/3 without a pipeline is Megatron-FSDP, built into megatron-core's own
    DistributedDataParallelConfig (data_parallel_config); its validate_args requires the
    fsdp_dtensor checkpoints and refuses CUDA_DEVICE_MAX_CONNECTIONS=1."""
    zero = parallel["zero_stage"]
    if zero >= 2 and parallel["pp"] == 1:
        expected = FSDP_STRATEGY[zero]
        if not ddp.use_megatron_fsdp or ddp.data_parallel_sharding_strategy != expected:
            failures.append(f"{name}: megatron-core's DDP config has use_megatron_fsdp {ddp.use_megatron_fsdp}, "
                            f"strategy {ddp.data_parallel_sharding_strategy!r}; expected {expected!r}")
        if args.get("ckpt_format") != "fsdp_dtensor" or not ddp.use_distributed_optimizer:
            failures.append(f"{name}: Megatron-FSDP needs --ckpt-format fsdp_dtensor and the distributed optimizer")
        with open(script) as text:
            if "CUDA_DEVICE_MAX_CONNECTIONS=1" in text.read():
                failures.append(f"{name}: Megatron-FSDP is refused with CUDA_DEVICE_MAX_CONNECTIONS=1")
    elif ddp.use_megatron_fsdp:
        failures.append(f"{name}: ZeRO-{zero} with pp {parallel['pp']} written as Megatron-FSDP")


def check_stage_layout(config, plan, name, failures):
    """An uneven split the first/last-stage arguments cannot state is a layout, which megatron-core's
    TransformerConfig parses and validates against the layer count; its decoder layers per stage
    (stage v*pp + r is virtual stage v of pp rank r) must be plan.json's."""
    layout = config.pipeline_model_parallel_layout
    if layout is None:
        return
    from megatron.core.transformer.enums import LayerType
    per_stage = [stage.count(LayerType.decoder) for virtual in range(layout.virtual_pipeline_model_parallel_size)
                 for stage in (layout.layout[rank][virtual] for rank in range(layout.pipeline_model_parallel_size))]
    if per_stage != plan["pipeline"]["layers_per_stage"]:
        failures.append(f"{name}: megatron-core's layout has {per_stage} layers per stage, plan "
                        f"{plan['pipeline']['layers_per_stage']}")


def check_layout(cpt, work, index, layout, failures):
    model_name, gpus, fix, *flags = layout
    flags = flags[0] if flags else ()
    out = os.path.join(work, f"plan{index}")
    plan = make_plan(cpt, out, model_name, gpus, fix, 1024, flags=flags)
    model, parallel = plan["model"], plan["parallel"]
    args = megatron_arguments(os.path.join(out, "megatron_args.sh"))
    config = transformer_config(args)
    moe = model.get("moe")
    expected = [
        ("num_layers", model["layers"]), ("hidden_size", model["hidden"]),
        ("num_attention_heads", model["heads"]), ("num_query_groups", model["kv_heads"]),
        ("ffn_hidden_size", model["ffn_hidden"]), ("layernorm_epsilon", model["norm_eps"]),
        ("add_qkv_bias", bool(model.get("qkv_bias", False))),
        ("qk_layernorm", bool(model.get("qk_norm", False))),
        ("kv_channels", model.get("head_dim", model["hidden"] // model["heads"])),
        ("hidden_dropout", 0.0), ("attention_dropout", 0.0),
        ("tensor_model_parallel_size", parallel["tp"]), ("pipeline_model_parallel_size", parallel["pp"]),
        ("context_parallel_size", parallel["cp"]), ("sequence_parallel", parallel["sequence_parallel"]),
        ("virtual_pipeline_model_parallel_size", parallel["virtual_stages"] if parallel["virtual_stages"] > 1 else None),
    ]
    if moe:
        expected += [("num_moe_experts", moe["experts"]), ("moe_router_topk", moe["experts_per_token"]),
                     ("moe_ffn_hidden_size", moe["expert_ffn_hidden"]),
                     ("expert_model_parallel_size", parallel.get("ep", 1)),
                     ("expert_tensor_parallel_size", parallel.get("etp", 1))]
        # The router's scores: sigmoid, or a softmax over all experts first where the top k are
        # not renormalised (Megatron's default: the softmax of the k chosen logits).
        sigmoid = moe.get("router", "softmax") == "sigmoid"
        expected += [("moe_router_score_function", "sigmoid" if sigmoid else "softmax"),
                     ("moe_router_pre_softmax", not sigmoid and not moe.get("normalize_top_k", True))]
        # DeepSeek's routing: its groups, the weights' scale, and its balancing (the expert bias with
        # a sequence-wise loss; the others the common auxiliary loss).
        grouped, bias = moe.get("expert_groups", 1) > 1, moe.get("expert_bias", False)
        expected += [("moe_router_num_groups", moe["expert_groups"] if grouped else None),
                     ("moe_router_group_topk", moe["groups_per_token"] if grouped else None),
                     ("moe_router_topk_scaling_factor", moe["top_k_scale"] if "top_k_scale" in moe else None),
                     ("moe_router_enable_expert_bias", bias),
                     ("moe_router_load_balancing_type", "seq_aux_loss" if bias else "aux_loss")]
        flex = plan["predicted"]["priced_as"]["moe_dispatcher"] == "flex"
        expected += [("moe_token_dispatcher_type", "flex" if flex else "alltoall")]
        if flex:
            expected += [("moe_flex_dispatcher_backend", "deepep")]
    mla = model.get("mla")
    if mla:  # latent attention's widths, and its RoPE: plain, or YaRN with the model's factor and magnitudes
        scaling = model.get("rope_scaling", {})
        yarn = scaling.get("type") == "yarn"
        expected += [("q_lora_rank", mla["q_lora_rank"] or None), ("kv_lora_rank", mla["kv_lora_rank"]),
                     ("qk_head_dim", mla["qk_nope_head_dim"]), ("qk_pos_emb_head_dim", mla["qk_rope_head_dim"]),
                     ("v_head_dim", mla["v_head_dim"]), ("rope_type", "yarn" if yarn else "rope")]
        if yarn:  # Megatron's cos/sin factor mscale(f, M) / mscale(f, A) is the model's (transformers' rule)
            factor, all_dim = scaling["factor"], scaling["mscale_all_dim"]

            def mscale(value):
                return 0.1 * value * math.log(factor) + 1.0

            given = scaling["attention_factor"] or (
                mscale(scaling["mscale"]) / mscale(all_dim) if scaling["mscale"] and all_dim else mscale(1.0))
            expected += [("rotary_scaling_factor", factor), ("mscale_all_dim", all_dim)]
            if abs(mscale(config.mscale) / mscale(all_dim) - given) > 1e-5:
                failures.append(f"{model_name} {fix}: megatron-core's YaRN factor on cos and sin is "
                                f"{mscale(config.mscale) / mscale(all_dim)}, the model's {given}")
    # The RoPE base is GPTModel's argument, not the config's (Megatron's default is 10000).
    if float(args.get("rotary_base", 10000)) != model["rope_theta"]:
        failures.append(f"{model_name} {fix}: --rotary-base {args.get('rotary_base')}, plan {model['rope_theta']}")
    for field, value in expected:
        if getattr(config, field) != value:
            failures.append(f"{model_name} {fix}: {field}: megatron-core builds {getattr(config, field)!r}, plan {value!r}")
    ddp = data_parallel_config(args)
    check_data_parallel(ddp, args, parallel, os.path.join(out, "megatron_args.sh"), f"{model_name} {fix}", failures)
    check_hybrid_shards(ddp, args, plan, f"{model_name} {fix}", failures)
    check_stage_layout(config, plan, f"{model_name} {fix}", failures)
    # Megatron-LM's validate_args: the layers between an uneven first and last stage divide evenly.
    first = config.num_layers_in_first_pipeline_stage or 0
    last = config.num_layers_in_last_pipeline_stage or 0
    middle_stages = config.pipeline_model_parallel_size - (1 if first else 0) - (1 if last else 0)
    per_chunk = middle_stages * (config.virtual_pipeline_model_parallel_size or 1)
    no_layout = config.pipeline_model_parallel_layout is None  # a layout is validated by megatron-core itself
    if no_layout and middle_stages > 0 and (config.num_layers - first - last) % per_chunk != 0:
        failures.append(f"{model_name} {fix}: {config.num_layers} layers do not split over the pipeline")
    print(f"{model_name} {fix}: megatron-core builds {config.num_layers} layers, hidden {config.hidden_size}, "
          f"tp {config.tensor_model_parallel_size} pp {config.pipeline_model_parallel_size} "
          f"(first {first}, last {last}), experts {config.num_moe_experts}")


if __name__ == "__main__":
    run_matrix(LAYOUTS, check_layout)
