"""Hugging Face interchange, end to end, against the real `transformers` (a test dependency that
scripts/setup installs into cpt's venv):

  1. transformers writes a LlamaForCausalLM (random weights, sharded safetensors); `cpt checkpoint
     import` reads it; `cpt checkpoint forward` gives the same logits as transformers; exported
     again, transformers reads back the same model.
  2. `cpt checkpoint init` makes a cpt-native model; `cpt checkpoint export` writes it; transformers
     loads the export, and its logits equal cpt's.
For an untied GQA LLaMA, a tied one, a Qwen2 (q/k/v biases), a Mixtral (4 experts, top 2: the
router's choices and the experts' weights under Mixtral's names), a Qwen3 (q/k norms, heads wider
than hidden / heads), a Qwen3-MoE, a LLaMA with Llama 3.1's RoPE scaling and two DeepSeek-V2s (latent
attention with and without a query latent; shared experts, a dense first layer, scaled weights,
group-limited routing) and a DeepSeek-V3 (a sigmoid router with its expert bias). Tolerance: max |difference| <= 1e-4
in fp32.

usage: hf_roundtrip.py CPT_EXEC WORK_DIR
"""
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import (AutoModelForCausalLM, DeepseekV2Config, DeepseekV2ForCausalLM, DeepseekV3Config,
                          DeepseekV3ForCausalLM, LlamaConfig,
                          LlamaForCausalLM, MixtralConfig, MixtralForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

TOLERANCE = 1e-4


def run(cpt, *args):
    r = subprocess.run([cpt, *map(str, args)], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAILED: cpt-exec {' '.join(map(str, args))}\n{r.stdout}{r.stderr}")
    return r.stdout


def hf_logits(model, tokens):
    with torch.no_grad():
        return model(input_ids=tokens).logits.float()


def cpt_logits(cpt, ckpt, tokens, work):
    save_file({"tokens": tokens.contiguous()}, work / "tokens.safetensors")
    run(cpt, "checkpoint", "forward", ckpt, "--tokens", work / "tokens.safetensors", "--out", work / "logits.safetensors")
    return load_file(work / "logits.safetensors")["logits"]


def check(name, a, b):
    diff = (a - b).abs().max().item()
    print(f"{name}: max |logit difference| = {diff:.3e}")
    if not diff <= TOLERANCE:
        sys.exit(f"FAILED: {name}: {diff} > {TOLERANCE}")


def case(cpt, work, tied, qwen2=False):
    tag = "qwen2" if qwen2 else ("tied" if tied else "untied")
    work = work / tag
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    torch.manual_seed(0)
    tokens = torch.randint(0, 512, (2, 48), dtype=torch.int64)

    # 1. transformers -> cpt
    common = dict(vocab_size=512, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=10000.0,
                  tie_word_embeddings=tied, torch_dtype="float32")
    if qwen2:
        hf = Qwen2ForCausalLM(Qwen2Config(use_sliding_window=False, **common)).float().eval()
        with torch.no_grad():  # random biases, so that a dropped bias shows in the logits
            for layer in hf.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0.0, 0.5)
    else:
        hf = LlamaForCausalLM(LlamaConfig(attention_bias=False, mlp_bias=False, **common)).float().eval()
    hf.save_pretrained(work / "hf", safe_serialization=True, max_shard_size="100KB")
    assert (work / "hf" / "model.safetensors.index.json").exists(), "expected a sharded checkpoint"
    run(cpt, "checkpoint", "import", "--format", "hf", work / "hf", work / "imported")
    check(f"{tag}: transformers model -> cpt import", cpt_logits(cpt, work / "imported", tokens, work),
          hf_logits(hf, tokens))
    # ... and back out: every tensor (the random q/k/v biases of Qwen2 included) survives the trip.
    run(cpt, "checkpoint", "export", "--format", "hf", work / "imported", work / "reexported")
    back = AutoModelForCausalLM.from_pretrained(work / "reexported", torch_dtype=torch.float32).eval()
    check(f"{tag}: transformers -> cpt -> transformers", hf_logits(back, tokens), hf_logits(hf, tokens))

    # 2. cpt -> transformers
    model_json = {"name": f"interchange-{tag}", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2,
                  "ffn_hidden": 176, "vocab": 512, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope",
                  "tied_embeddings": tied, "max_seq_len": 128, "rope_theta": 10000.0, "norm_eps": 1e-5,
                  "qkv_bias": qwen2}
    (work / "model.json").write_text(json.dumps(model_json))
    run(cpt, "checkpoint", "init", "--model", work / "model.json", "--seed", "7", work / "native")
    run(cpt, "checkpoint", "export", "--format", "hf", work / "native", work / "exported")
    loaded = AutoModelForCausalLM.from_pretrained(work / "exported", torch_dtype=torch.float32).eval()
    assert type(loaded).__name__ == ("Qwen2ForCausalLM" if qwen2 else "LlamaForCausalLM"), type(loaded).__name__
    check(f"{tag}: cpt model -> export -> transformers", hf_logits(loaded, tokens),
          cpt_logits(cpt, work / "native", tokens, work))


def family_case(cpt, work, tag, hf, model_json, patch=lambda model: model):
    """A model of another transformers family, both ways: `hf` (random weights) imported, re-exported
    and read back; `model_json` initialised by cpt, exported and loaded as the same class. `patch`
    is applied to every model transformers loads (a fix of transformers' own not yet in 4.57)."""
    work = work / tag
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    torch.manual_seed(0)
    tokens = torch.randint(0, 512, (2, 48), dtype=torch.int64)
    hf = hf.float().eval()
    hf.save_pretrained(work / "hf", safe_serialization=True)
    run(cpt, "checkpoint", "import", "--format", "hf", work / "hf", work / "imported")
    check(f"{tag}: transformers model -> cpt import", cpt_logits(cpt, work / "imported", tokens, work),
          hf_logits(hf, tokens))
    run(cpt, "checkpoint", "export", "--format", "hf", work / "imported", work / "reexported")
    back = patch(AutoModelForCausalLM.from_pretrained(work / "reexported", torch_dtype=torch.float32).eval())
    assert type(back) is type(hf), type(back).__name__
    check(f"{tag}: transformers -> cpt -> transformers", hf_logits(back, tokens), hf_logits(hf, tokens))

    model_json = {"name": f"interchange-{tag}", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2,
                  "vocab": 512, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope", "tied_embeddings": False,
                  "max_seq_len": 128, "rope_theta": 10000.0, "norm_eps": 1e-5, **model_json}
    (work / "model.json").write_text(json.dumps(model_json))
    run(cpt, "checkpoint", "init", "--model", work / "model.json", "--seed", "7", work / "native")
    run(cpt, "checkpoint", "export", "--format", "hf", work / "native", work / "exported")
    loaded = patch(AutoModelForCausalLM.from_pretrained(work / "exported", torch_dtype=torch.float32).eval())
    assert type(loaded) is type(hf), type(loaded).__name__
    check(f"{tag}: cpt model -> export -> transformers", hf_logits(loaded, tokens),
          cpt_logits(cpt, work / "native", tokens, work))


def refused(cpt, args, expected):
    """cpt refuses `args` in one line (exit 2) that contains `expected`."""
    r = subprocess.run([cpt, *map(str, args)], capture_output=True, text=True)
    lines = r.stderr.strip().splitlines()
    if r.returncode != 2 or len(lines) != 1 or expected not in lines[0]:
        sys.exit(f"FAILED: cpt {' '.join(map(str, args))}: exit {r.returncode}, expected 2 and one line "
                 f"with {expected!r}:\n{r.stderr}")
    print(f"refused as expected: {lines[0]}")


def hostile_inputs(cpt, work):
    """Tokens the model has no embedding or position for, and a weight stored as integers (it used
    to be converted to nonsense and imported): one line each, naming the file and what it found."""
    work = work / "hostile"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    torch.manual_seed(0)
    hf = LlamaForCausalLM(LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=128)).float().eval()
    hf.save_pretrained(work / "hf", safe_serialization=True)
    for tokens, expected in ((torch.tensor([[1, 2, 600, 3]]), "expected ids in 0..511, got 600"),
                             (torch.tensor([[1, -1]]), "expected ids in 0..511, got -1"),
                             (torch.zeros(1, 500, dtype=torch.int64), "max_seq_len (128) positions, got 500")):
        save_file({"tokens": tokens}, work / "tokens.safetensors")
        refused(cpt, ["checkpoint", "forward", work / "hf", "--tokens", work / "tokens.safetensors", "--out",
                      work / "logits.safetensors"], expected)
    weights = load_file(work / "hf" / "model.safetensors")
    name = "model.layers.0.mlp.up_proj.weight"
    weights[name] = weights[name].to(torch.int32)
    save_file(weights, work / "hf" / "model.safetensors", metadata={"format": "pt"})
    refused(cpt, ["checkpoint", "import", "--format", "hf", work / "hf", work / "imported"],
            f"tensor {name}: expected F32, BF16 or F16 weights, got I32")


def spread_routers(hf, block):
    """Routers far from uniform, so that each token's top 2 are clear choices."""
    with torch.no_grad():
        for layer in hf.model.layers:
            getattr(layer, block).gate.weight.normal_(0.0, 0.5)
    return hf


def other_families(cpt, work):
    common = dict(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                  torch_dtype="float32")
    experts = {"experts": 4, "experts_per_token": 2, "expert_ffn_hidden": 64}
    # Llama 3.1's RoPE scaling, its bands placed inside 48 tokens (original context 64, heads of 16:
    # wavelengths 6 to 20,000 positions), so that a wrong scaling shows in the logits.
    scaling = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    llama31 = LlamaForCausalLM(LlamaConfig(intermediate_size=176, rope_scaling={"rope_type": "llama3", **scaling},
                                           attention_bias=False, mlp_bias=False, **common))
    family_case(cpt, work, "llama3.1-rope", llama31, {"ffn_hidden": 176, "rope_scaling": scaling})
    # YaRN, its ramp inside heads of 16 (original context 16: pair 0 kept, the others divided by 4)
    # and its attention factor 1 + 0.1·ln 4 on cos and sin.
    yarn = {"factor": 4.0, "original_max_position_embeddings": 16, "beta_fast": 32.0, "beta_slow": 1.0}
    llama_yarn = LlamaForCausalLM(LlamaConfig(intermediate_size=176, rope_scaling={"rope_type": "yarn", **yarn},
                                              attention_bias=False, mlp_bias=False,
                                              **{**common, "max_position_embeddings": 64}))
    family_case(cpt, work, "llama-yarn", llama_yarn,
                {"ffn_hidden": 176, "max_seq_len": 64, "rope_scaling": {"type": "yarn", **yarn}})
    torch.manual_seed(1)
    mixtral = MixtralForCausalLM(MixtralConfig(intermediate_size=64, num_local_experts=4, num_experts_per_tok=2,
                                               sliding_window=None, router_jitter_noise=0.0, **common))
    family_case(cpt, work, "mixtral", spread_routers(mixtral, "block_sparse_moe"),
                {"ffn_hidden": 64, "moe": experts})
    # Qwen3: q/k norms (random, so that a dropped norm shows) and heads of 32, not hidden / heads.
    qwen3 = Qwen3ForCausalLM(Qwen3Config(intermediate_size=176, head_dim=32, use_sliding_window=False, **common))
    with torch.no_grad():
        for layer in qwen3.model.layers:
            layer.self_attn.q_norm.weight.normal_(1.0, 0.3)
            layer.self_attn.k_norm.weight.normal_(1.0, 0.3)
    family_case(cpt, work, "qwen3", qwen3, {"ffn_hidden": 176, "head_dim": 32, "qk_norm": True})
    qwen3_moe = Qwen3MoeForCausalLM(Qwen3MoeConfig(intermediate_size=176, moe_intermediate_size=64, num_experts=4,
                                                   num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
                                                   mlp_only_layers=[], head_dim=32, use_sliding_window=False,
                                                   **common))
    family_case(cpt, work, "qwen3-moe", spread_routers(qwen3_moe, "mlp"),
                {"ffn_hidden": 64, "head_dim": 32, "qk_norm": True, "moe": experts})
    deepseek_v2_cases(cpt, work, common)
    deepseek_v3_case(cpt, work, common)


def deepseek_v3_case(cpt, work, common):
    """DeepSeek-V3: latent attention, a dense first layer, 8 experts in 4 groups of which a token takes
    its best one (a group scored by the sum of its best two, transformers' rule and cpt's for k/g = 2)
    and two experts there, chosen by sigmoid score plus the expert bias (random, so that a bias lost
    or misplaced changes the choice; non-negative, where transformers' 0-filled groups and cpt's
    -inf agree), weighted by the normalised scores times 2.5; and with groups of another rule,
    refused naming the key."""
    torch.manual_seed(5)
    config = DeepseekV3Config(**{**common, "num_hidden_layers": 3, "num_key_value_heads": 4},
                              intermediate_size=176, q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=12,
                              qk_rope_head_dim=8, v_head_dim=10, n_routed_experts=8, num_experts_per_tok=2,
                              moe_intermediate_size=32, n_shared_experts=1, first_k_dense_replace=1,
                              routed_scaling_factor=2.5, norm_topk_prob=True, n_group=4, topk_group=1,
                              rope_scaling=None, rope_interleave=True, attention_bias=False)
    hf = DeepseekV3ForCausalLM(config)
    with torch.no_grad():
        for layer in hf.model.layers:
            layer.self_attn.kv_a_layernorm.weight.normal_(1.0, 0.3)
            layer.self_attn.q_a_layernorm.weight.normal_(1.0, 0.3)
        for layer in hf.model.layers[1:]:
            layer.mlp.gate.weight.normal_(0.0, 0.5)
            layer.mlp.gate.e_score_correction_bias.uniform_(0.0, 0.3)
    mla = {"q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 12, "qk_rope_head_dim": 8, "v_head_dim": 10}
    moe = {"experts": 8, "experts_per_token": 2, "expert_ffn_hidden": 32, "shared_ffn_hidden": 32,
           "first_dense_layers": 1, "router": "sigmoid", "expert_bias": True, "top_k_scale": 2.5,
           "expert_groups": 4, "groups_per_token": 1}
    family_case(cpt, work, "deepseek-v3", hf, {"layers": 3, "kv_heads": 4, "ffn_hidden": 176, "mla": mla, "moe": moe})
    # The bias travels: the imported checkpoint holds transformers' values.
    imported = load_file(work / "deepseek-v3" / "imported" / "model.safetensors")
    assert torch.equal(imported["layers.1.mlp.gate.e_score_correction_bias"],
                       hf.model.layers[1].mlp.gate.e_score_correction_bias), "expert bias not imported"
    config_path = work / "deepseek-v3" / "hf" / "config.json"
    config = json.loads(config_path.read_text())
    config["topk_group"] = 2  # 2 experts from 2 groups: cpt would score a group by its best one
    config_path.write_text(json.dumps(config))
    refused(cpt, ["checkpoint", "import", "--format", "hf", config_path.parent, work / "refused-v3"], "$.topk_group")


def deepseek_v2_cases(cpt, work, common):
    """Latent attention (widths unlike each other, so that a swapped split shows), its latents'
    norms random, RoPE on 8 channels of pairs; a dense first layer, then 4 experts with shared ones,
    weights scaled by 1.5 and, in the second, 8 experts in 4 groups of which a token takes its best 2
    (DeepSeek-V2's group_limited_greedy with one expert per group, which transformers and cpt
    agree on: it chooses as the plain top k, so this checks that the keys round-trip)."""
    for tag, q_lora_rank, experts, groups in (("deepseek-v2", 24, 4, 1), ("deepseek-v2-lite", None, 8, 4)):
        torch.manual_seed(2)
        config = DeepseekV2Config(**{**common, "num_hidden_layers": 3, "num_key_value_heads": 4},
                                  intermediate_size=176, q_lora_rank=q_lora_rank, kv_lora_rank=16,
                                  qk_nope_head_dim=12, qk_rope_head_dim=8, v_head_dim=10, n_routed_experts=experts,
                                  num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=2,
                                  first_k_dense_replace=1, routed_scaling_factor=1.5, norm_topk_prob=False,
                                  topk_method="group_limited_greedy" if groups > 1 else "greedy", n_group=groups,
                                  topk_group=2 if groups > 1 else 1, rope_scaling=None, attention_bias=False)
        hf = DeepseekV2ForCausalLM(config)
        with torch.no_grad():
            for layer in hf.model.layers:
                attention = layer.self_attn
                attention.kv_a_layernorm.weight.normal_(1.0, 0.3)
                if q_lora_rank:
                    attention.q_a_layernorm.weight.normal_(1.0, 0.3)
            for layer in hf.model.layers[1:]:
                layer.mlp.gate.weight.normal_(0.0, 0.5)
        mla = {"q_lora_rank": q_lora_rank or 0, "kv_lora_rank": 16, "qk_nope_head_dim": 12, "qk_rope_head_dim": 8,
               "v_head_dim": 10}
        moe = {"experts": experts, "experts_per_token": 2, "expert_ffn_hidden": 32, "shared_ffn_hidden": 64,
               "first_dense_layers": 1, "normalize_top_k": False, "top_k_scale": 1.5, "expert_groups": groups,
               "groups_per_token": 2 if groups > 1 else 1}
        family_case(cpt, work, tag, hf, {"layers": 3, "kv_heads": 4, "ffn_hidden": 176, "mla": mla, "moe": moe})
    # Latent attention without experts: first_k_dense_replace covers every layer (transformers builds
    # it all dense), as cpt exports a dense model.
    torch.manual_seed(4)
    dense = DeepseekV2ForCausalLM(DeepseekV2Config(**{**common, "num_key_value_heads": 4}, intermediate_size=176,
                                                   q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=12,
                                                   qk_rope_head_dim=8, v_head_dim=10, first_k_dense_replace=2,
                                                   rope_scaling=None, attention_bias=False))
    family_case(cpt, work, "deepseek-v2-dense", dense,
                {"kv_heads": 4, "ffn_hidden": 176, "mla": {"q_lora_rank": 24, "kv_lora_rank": 16,
                                                           "qk_nope_head_dim": 12, "qk_rope_head_dim": 8,
                                                           "v_head_dim": 10}})
    deepseek_v2_yarn(cpt, work, common)
    # Groups that give a token two experts each: transformers scores a group by its best expert,
    # cpt's executor by the sum of its top two, so the import is refused (naming the key).
    config_path = work / "deepseek-v2-lite" / "hf" / "config.json"
    config = json.loads(config_path.read_text())
    config["topk_group"] = 1
    config_path.write_text(json.dumps(config))
    refused(cpt, ["checkpoint", "import", "--format", "hf", config_path.parent, work / "refused"], "$.topk_method")


def deepseek_v2_yarn(cpt, work, common):
    """DeepSeek-V2 with YaRN (original context 16, mscale 0.9 against mscale_all_dim 0.7: an attention
    factor on cos and sin and an mscale² on the softmax scale). transformers 4.57's DeepseekV2 omits
    the latter, which DeepSeek's code and transformers' DeepseekV3 apply; PR #47435 adds it, and so
    does `patch` here."""
    yarn = {"factor": 4.0, "original_max_position_embeddings": 16, "beta_fast": 32.0, "beta_slow": 1.0,
            "mscale": 0.9, "mscale_all_dim": 0.7}
    softmax_factor = (0.1 * 0.7 * math.log(4.0) + 1.0) ** 2

    def patch(model):
        for layer in model.model.layers:
            layer.self_attn.scaling = layer.self_attn.qk_head_dim ** -0.5 * softmax_factor
        return model

    torch.manual_seed(3)
    config = DeepseekV2Config(**{**common, "num_key_value_heads": 4, "max_position_embeddings": 64},
                              intermediate_size=176, q_lora_rank=None,
                              kv_lora_rank=16, qk_nope_head_dim=12, qk_rope_head_dim=8, v_head_dim=10,
                              n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1,
                              first_k_dense_replace=1, norm_topk_prob=False, topk_method="greedy",
                              rope_scaling={"type": "yarn", **yarn}, attention_bias=False)
    hf = patch(DeepseekV2ForCausalLM(config))
    with torch.no_grad():
        hf.model.layers[1].mlp.gate.weight.normal_(0.0, 0.5)
    mla = {"q_lora_rank": 0, "kv_lora_rank": 16, "qk_nope_head_dim": 12, "qk_rope_head_dim": 8, "v_head_dim": 10}
    moe = {"experts": 4, "experts_per_token": 2, "expert_ffn_hidden": 32, "shared_ffn_hidden": 32,
           "first_dense_layers": 1, "normalize_top_k": False}
    family_case(cpt, work, "deepseek-v2-yarn", hf,
                {"kv_heads": 4, "ffn_hidden": 176, "max_seq_len": 64, "mla": mla, "moe": moe,
                 "rope_scaling": {"type": "yarn", **yarn}},
                patch)


def main():
    cpt, work = sys.argv[1], Path(sys.argv[2])
    for tied in (False, True):
        case(cpt, work, tied)
    case(cpt, work, False, qwen2=True)
    other_families(cpt, work)
    hostile_inputs(cpt, work)
    shutil.rmtree(work, ignore_errors=True)
    print("OK")


if __name__ == "__main__":
    main()
