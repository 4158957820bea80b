#include "planner/handoff.h"
#include "planner/export_gaps.h"
#include "planner/export_text.h"
#include "planner/torchtitan_export.h"
#include "planner/torchtitan_module.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "core/check.h"
#include "core/str_cat.h"
#include "costmodel/layer_costs.h"
#include "spec/executor_support.h"
#include "spec/rank_layout.h"

namespace cpt::planner {

using core::str_cat;

bool trains_in_bf16(const spec::Plan&) {
  return true;  // cpt plans in bf16 (CostModelOptions default)
}

namespace {

int nodes(const spec::Plan& p) {
  return p.cluster.num_nodes;
}
int gpus_per_node(const spec::Plan& p) {
  return std::min(p.cluster.num_gpus, p.cluster.node.gpus_per_node);
}

// Hybrid sharding: the data-parallel (dp × cp) ranks of one node, over which ZeRO-3 shards
// (spec::RankLayout::zero_shard_group); they divide dp × cp (the planner prunes uneven ones).
int megatron_hsdp_shard_ranks(const spec::Plan& p) {
  const spec::RankLayout layout(p.parallel, p.cluster.node.gpus_per_node);
  const int shard = layout.zero_shard_group_size();
  CPT_CHECK(shard > 0 && (p.parallel.dp * p.parallel.cp) % shard == 0, "hybrid shard group of ", shard, " over dp ",
            p.parallel.dp, " x cp ", p.parallel.cp);
  return shard;
}

// Megatron-LM splits layers evenly over pp · vp stages; a plan whose first and last stages hold
// fewer (the embedding and the head beside them) says so with its first and last counts, when
// every stage between holds the same number (--decoder-first/last-pipeline-num-layers, without
// virtual stages).
std::vector<std::string> pipeline_split_args(const spec::Plan& plan) {
  const auto& stages = plan.stages;
  const int n = stages.num_stages();
  if (n <= 2 || plan.parallel.virtual_stages > 1) return {};
  const int middle = stages.layers_in(1);
  for (int s = 1; s + 1 < n; ++s) {
    if (stages.layers_in(s) != middle) return {};
  }
  if (stages.layers_in(0) == middle && stages.layers_in(n - 1) == middle) return {};
  return {str_cat("--decoder-first-pipeline-num-layers ", stages.layers_in(0)),
          str_cat("--decoder-last-pipeline-num-layers ", stages.layers_in(n - 1))};
}

// Whether the plan's stages hold different numbers of layers.
bool uneven_split(const spec::StagePartition& stages) {
  for (int s = 1; s < stages.num_stages(); ++s) {
    if (stages.layers_in(s) != stages.layers_in(0)) return true;
  }
  return false;
}

// Megatron-LM's --pipeline-model-parallel-layout (core 0.13+) for a split the first/last-stage
// arguments cannot state: the stages in order (virtual stage v of pp rank r is stage v·pp + r,
// as spec::StagePartition numbers them), "|" between them, "E" the embedding on the first, "t"
// a decoder layer ("t*N": N of them), "L" the loss on the last. Empty when not needed.
std::string pipeline_layout(const spec::Plan& plan) {
  const auto& stages = plan.stages;
  if (!uneven_split(stages) || !pipeline_split_args(plan).empty()) return "";
  const int last = stages.num_stages() - 1;
  std::string layout;
  for (int s = 0; s <= last; ++s) {
    if (s > 0) layout += "|";
    if (s == 0) layout += "E";
    if (stages.layers_in(s) > 0) layout += str_cat("t*", stages.layers_in(s));
    if (s == last) layout += "L";
  }
  return layout;
}

}  // namespace

namespace {

// Megatron-Core's latent attention: its widths and its RoPE.
void add_latent_attention_args(const spec::ModelSpec& m, std::vector<std::string>& args) {
  args.emplace_back("--multi-latent-attention");
  if (m.mla.q_lora_rank > 0) args.push_back(str_cat("--q-lora-rank ", m.mla.q_lora_rank));
  args.push_back(str_cat("--kv-lora-rank ", m.mla.kv_lora_rank));
  args.push_back(str_cat("--qk-head-dim ", m.mla.qk_nope_head_dim));
  args.push_back(str_cat("--qk-pos-emb-head-dim ", m.mla.qk_rope_head_dim));
  args.push_back(str_cat("--v-head-dim ", m.mla.v_head_dim));
  // Megatron-Core's MLA takes YaRN by default: plain RoPE said so, YaRN with its factor and
  // magnitudes (original context 4096, betas 32 and 1: Megatron's defaults, DeepSeek's values).
  const spec::RopeScaling& s = m.rope_scaling;
  if (s.yarn()) {
    // Megatron puts mscale(f, M) / mscale(f, A) on cos and sin and mscale(f, A)² on the softmax:
    // A is the model's mscale_all_dim and M the one that gives the model's attention factor.
    const double ln_factor = std::log(s.factor);
    const double all_dim = spec::yarn_mscale(s.factor, s.mscale_all_dim);
    const double mscale = ln_factor > 0 ? (s.yarn_attention_factor() * all_dim - 1) / (0.1 * ln_factor) : 1.0;
    args.push_back(str_cat("--rope-type yarn --rotary-scaling-factor ", s.factor, " --mscale ",
                           core::significant(mscale, 6), " --mscale-all-dim ", s.mscale_all_dim));
  } else {
    args.emplace_back("--rope-type rope");
  }
}

// Megatron-LM's arguments for the attention variants (explicit head width, q/k norms, latent
// attention) and the mixture of experts (with its expert parallelism), as the model and plan have
// them; Megatron-Core's names (core_v0.12+).
std::vector<std::string> attention_and_expert_args(const spec::Plan& plan) {
  const auto& m = plan.model;
  const auto& c = plan.parallel;
  std::vector<std::string> args;
  if (m.explicit_head_dim > 0) args.push_back(str_cat("--kv-channels ", m.explicit_head_dim));
  if (m.qk_norm) args.emplace_back("--qk-layernorm");
  if (m.mla.present()) add_latent_attention_args(m, args);
  if (!m.moe.present()) return args;
  const auto& e = m.moe;
  args.push_back(str_cat("--num-experts ", e.experts));
  args.push_back(str_cat("--moe-router-topk ", e.experts_per_token));
  args.push_back(str_cat("--moe-ffn-hidden-size ", e.expert_ffn_hidden));
  if (e.shared_ffn_hidden > 0) args.push_back(str_cat("--moe-shared-expert-intermediate-size ", e.shared_ffn_hidden));
  if (e.first_dense_layers > 0 || e.layer_interval > 1) {
    std::string pattern = "\"[";  // one entry per layer: 1 MoE, 0 dense
    for (int layer = 0; layer < m.layers; ++layer)
      pattern += str_cat(layer > 0 ? "," : "", m.is_moe_layer(layer) ? 1 : 0);
    args.push_back(str_cat("--moe-layer-freq ", pattern, "]\""));
  }
  if (e.router == spec::RouterScore::kSigmoid) args.emplace_back("--moe-router-score-function sigmoid");
  // Megatron's softmax router normalises over the top k (softmax of the k logits); a model whose
  // top-k weights are not renormalised (Qwen2-MoE, DeepSeek-V2) takes the softmax over all experts
  // first.
  if (e.router == spec::RouterScore::kSoftmax && !e.normalize_top_k) args.emplace_back("--moe-router-pre-softmax");
  if (e.expert_groups > 1) {
    args.push_back(str_cat("--moe-router-num-groups ", e.expert_groups));
    args.push_back(str_cat("--moe-router-group-topk ", e.groups_per_token));
  }
  if (e.top_k_scale != 1) args.push_back(str_cat("--moe-router-topk-scaling-factor ", e.top_k_scale));
  if (e.expert_bias) {
    // DeepSeek-V3's balancing (arXiv:2412.19437, §2.1.2 and §4.2): the expert bias moved by
    // γ = 0.001 a step, and a sequence-wise loss of weight α = 0.0001. The bias is the checkpoint's
    // (Megatron-Core keeps it as the router's expert_bias buffer).
    args.emplace_back("--moe-router-enable-expert-bias");
    args.emplace_back("--moe-router-bias-update-rate 1e-3");
    args.emplace_back("--moe-router-load-balancing-type seq_aux_loss");
    args.emplace_back("--moe-aux-loss-coeff 1e-4");
  } else {
    // The load balancing is the recipe's, not the plan's: a common default here.
    args.emplace_back("--moe-router-load-balancing-type aux_loss");
    args.emplace_back("--moe-aux-loss-coeff 1e-3");
  }
  args.emplace_back("--moe-grouped-gemm");
  if (plan.predicted && plan.predicted->moe_dispatcher == spec::TokenDispatcher::kFlex &&
      spec::dispatcher_runs(spec::TokenDispatcher::kFlex, m, c)) {
    args.emplace_back("--moe-token-dispatcher-type flex");  // priced as DeepEP's (costmodel/token_dispatch.h)
    args.emplace_back("--moe-flex-dispatcher-backend deepep");
  } else {
    args.emplace_back("--moe-token-dispatcher-type alltoall");
  }
  if (e.capacity_factor > 0) {
    args.push_back(str_cat("--moe-expert-capacity-factor ", e.capacity_factor));
    args.emplace_back("--moe-pad-expert-input-to-capacity");
  }
  args.push_back(str_cat("--expert-model-parallel-size ", c.ep));
  args.push_back(str_cat("--expert-tensor-parallel-size ", c.etp));  // Megatron's default is tp
  return args;
}

// The lines before the arguments: what they cannot express of the plan, and the environment
// Megatron-LM needs.
std::string megatron_preamble(const spec::Plan& plan) {
  const auto& c = plan.parallel;
  std::ostringstream s;
  s << "# shellcheck shell=bash disable=SC2034\n";  // sourced: it defines MEGATRON_ARGS for its reader
  s << "# Megatron-LM arguments for pretrain_gpt.py, from cpt plan (" << plan.provenance.tool_version << ").\n";
  const bool fsdp = megatron_runs_as_fsdp(c);
  if (fsdp) {
    s << "# ZeRO-" << c.zero_stage << " as Megatron-FSDP (Megatron-LM's docs/discussions/megatron-fsdp-user-guide);\n"
      << "# its checkpoints are fsdp_dtensor: convert a torch_dist base checkpoint with the guide's tool.\n";
    if (c.hybrid_shard) {
      s << "# Hybrid sharding as its HSDP: sharded over the " << megatron_hsdp_shard_ranks(plan)
        << " data-parallel ranks of a node,\n# replicated over --num-distributed-optimizer-instances.\n";
    }
  } else if (c.zero_stage >= 2) {
    s << "# Megatron-FSDP is written without a pipeline or offload only: ZeRO-" << c.zero_stage
      << (c.hybrid_shard ? " with hybrid sharding" : "")
      << " is expressed as ZeRO-1 (--use-distributed-optimizer); use DeepSpeed or torchtitan for the exact plan.\n";
  }
  if (c.offload == spec::Offload::kOptimizerAndParams) {
    s << "# Megatron-LM offloads the optimizer state only (--optimizer-cpu-offload): the plan's parameter\n"
         "# offload is not expressed; the parameters stay in HBM.\n";
  }
  if (const spec::RopeScaling& r = plan.model.rope_scaling; r.yarn() && !plan.model.mla.present()) {
    s << "# The model's YaRN RoPE scaling (factor " << r.factor << ") is written for latent attention only:\n"
      << "# these arguments run grouped-query attention with plain RoPE.\n";
  } else if (r.yarn() && (r.original_max_positions != 4096 || r.beta_fast != 32 || r.beta_slow != 1)) {
    s << "# Megatron-Core's latent attention takes YaRN's original context 4096 and betas 32, 1; the model's ("
      << r.original_max_positions << ", " << r.beta_fast << ", " << r.beta_slow << ") are not expressed.\n";
  }
  if (c.schedule == spec::ScheduleKind::kZeroBubbleH1) {
    s << "# The plan's ZB-H1 schedule is not in upstream Megatron-LM (the fork\n"
         "# sail-sg/zero-bubble-pipeline-parallelism adds it); these arguments run 1F1B.\n";
  }
  if (!pipeline_layout(plan).empty()) {
    s << "# The plan's uneven stage split as Megatron-LM's --pipeline-model-parallel-layout (core 0.13+).\n";
  }
  if (fsdp) {
    // Megatron-LM's validate_args refuses Megatron-FSDP with CUDA_DEVICE_MAX_CONNECTIONS=1.
    s << "unset CUDA_DEVICE_MAX_CONNECTIONS\n";
  } else if (c.tp > 1 || c.cp > 1) {
    // Megatron-LM 0.12 requires it with tensor or context parallelism (overlapped communication).
    s << "export CUDA_DEVICE_MAX_CONNECTIONS=1\n";
  }
  return s.str();
}

// The model's architecture, as the plan describes it (Megatron's defaults differ: RoPE base,
// dropout, biases).
std::vector<std::string> model_architecture_args(const spec::Plan& plan) {
  const auto& m = plan.model;
  std::vector<std::string> args{str_cat("--num-layers ", m.layers), str_cat("--hidden-size ", m.hidden),
                                str_cat("--num-attention-heads ", m.heads)};
  if (m.kv_heads != m.heads) {
    args.emplace_back("--group-query-attention");
    args.push_back(str_cat("--num-query-groups ", m.kv_heads));
  }
  args.push_back(str_cat("--ffn-hidden-size ", m.ffn_hidden));
  args.push_back(str_cat("--seq-length ", plan.workload.seq_len));
  args.push_back(str_cat("--max-position-embeddings ", m.max_seq_len));
  if (m.mlp == spec::MlpKind::kSwiGLU) args.emplace_back("--swiglu");
  if (m.norm == spec::NormKind::kRMSNorm) args.emplace_back("--normalization RMSNorm");
  if (m.position == spec::PositionKind::kRoPE) {
    args.emplace_back("--position-embedding-type rope");
    args.push_back(str_cat("--rotary-base ", static_cast<std::int64_t>(m.rope_theta)));  // Megatron's default: 10000
    // Llama 3.1's frequency scaling; Megatron fixes its other terms at Llama 3.1's (1, 4, 8192).
    // (YaRN: only with latent attention, attention_and_expert_args.)
    if (m.rope_scaling.present() && !m.rope_scaling.yarn()) {
      args.push_back(str_cat("--use-rope-scaling --rope-scaling-factor ", m.rope_scaling.factor));
    }
  }
  args.push_back(str_cat("--norm-epsilon ", m.norm_eps));
  if (m.qkv_bias) args.emplace_back("--add-qkv-bias");
  for (auto& a : attention_and_expert_args(plan)) args.push_back(std::move(a));
  if (!cost::applies_dropout(m, cost::CostModelOptions{})) {
    // LLaMA-style models train without dropout; Megatron's defaults are 0.1 each.
    args.emplace_back("--attention-dropout 0.0");
    args.emplace_back("--hidden-dropout 0.0");
  }
  if (!m.tied_embeddings) args.emplace_back("--untie-embeddings-and-output-weights");
  if (m.mlp == spec::MlpKind::kSwiGLU) args.emplace_back("--disable-bias-linear");
  return args;
}

// The parallel layout, the batch, the optimizer's sharding and offload, recomputation, precision.
std::vector<std::string> layout_and_training_args(const spec::Plan& plan) {
  const auto& c = plan.parallel;
  std::vector<std::string> args{str_cat("--tensor-model-parallel-size ", c.tp),
                                str_cat("--pipeline-model-parallel-size ", c.pp)};
  // Megatron-LM takes the layout or the virtual stages, not both (the layout states them).
  if (const auto layout = pipeline_layout(plan); !layout.empty()) {
    args.push_back(str_cat("--pipeline-model-parallel-layout \"", layout, "\""));
  } else if (c.virtual_stages > 1) {
    args.push_back(str_cat("--num-virtual-stages-per-pipeline-rank ", c.virtual_stages));
  }
  if (c.cp > 1) args.push_back(str_cat("--context-parallel-size ", c.cp));
  if (c.sequence_parallel) args.emplace_back("--sequence-parallel");
  for (auto& a : pipeline_split_args(plan)) args.push_back(std::move(a));
  if (c.axis_order == std::array{spec::Axis::kTp, spec::Axis::kCp, spec::Axis::kPp, spec::Axis::kDp}) {
    args.emplace_back("--use-tp-pp-dp-mapping");  // Megatron's default order is tp-cp-dp-pp
  }
  args.push_back(str_cat("--micro-batch-size ", c.micro_batch));
  args.push_back(str_cat("--global-batch-size ", c.global_batch));
  if (c.zero_stage >= 1) args.emplace_back("--use-distributed-optimizer");
  if (megatron_runs_as_fsdp(c)) {
    // The guide's required flags; ZeRO-2 shards optimizer state and gradients, ZeRO-3 the
    // parameters too.
    for (const char* a : {"--use-megatron-fsdp", "--no-gradient-accumulation-fusion", "--ckpt-format fsdp_dtensor"}) {
      args.emplace_back(a);
    }
    args.push_back(
        str_cat("--data-parallel-sharding-strategy ", c.zero_stage == 3 ? "optim_grads_params" : "optim_grads"));
    if (c.hybrid_shard) {
      // Megatron-Core splits the dp × cp ranks into that many contiguous instances, each sharding
      // (parallel_state's intra-partial data-parallel groups), and replicates across them.
      args.push_back(str_cat("--num-distributed-optimizer-instances ", c.dp * c.cp / megatron_hsdp_shard_ranks(plan)));
    }
  }
  if (c.offload != spec::Offload::kNone) {
    // Megatron-Core's hybrid-device optimizer: the whole optimizer state and step on the host
    // (validate_args requires the precision-aware optimizer with it), the copies overlapped.
    for (const char* a : {"--optimizer-cpu-offload", "--optimizer-offload-fraction 1.0",
                          "--use-precision-aware-optimizer", "--overlap-cpu-optimizer-d2h-h2d"}) {
      args.emplace_back(a);
    }
  }
  if (c.recompute == spec::Recompute::kSelective) args.emplace_back("--recompute-granularity selective");
  if (c.recompute == spec::Recompute::kFull) {
    for (const char* a : {"--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"}) {
      args.emplace_back(a);
    }
  }
  if (trains_in_bf16(plan)) args.emplace_back("--bf16");
  args.emplace_back("--attention-backend flash");
  args.emplace_back("--overlap-grad-reduce");
  return args;
}

}  // namespace

std::string megatron_args(const spec::Plan& plan) {
  std::ostringstream s;
  s << megatron_preamble(plan) << "MEGATRON_ARGS=(\n";
  for (const auto& a : model_architecture_args(plan)) s << "  " << a << "\n";
  for (const auto& a : layout_and_training_args(plan)) s << "  " << a << "\n";
  s << ")\n";
  return s.str();
}

namespace {

// `text` as one bash word: single-quoted, with each ' written as '\''.
std::string shell_quoted(const std::string& text) {
  std::string out = "'";
  for (const char ch : text) {
    if (ch == '\'') {
      out += "'\\''";
    } else {
      out += ch;
    }
  }
  return out + "'";
}

// The scripts' first argument: the job's TRAIN.json (cpt train --config); the rest go to cpt train.
constexpr const char* kTakeConfig =
    "if [ $# -lt 1 ]; then\n"
    "  echo \"usage: $0 TRAIN.json [cpt train options]\" >&2\n"
    "  exit 2\n"
    "fi\n"
    "CONFIG=\"$1\"\n"
    "shift\n";

}  // namespace

namespace {

// A launcher's comment line when cpt's executor does not run the plan (`cpt train` says so too).
std::string executor_gap_note(const spec::Plan& plan) {
  const auto gap = spec::find_executor_gap(plan.parallel, plan.model, plan.workload.seq_len);
  if (!gap) return "";
  return str_cat("# cpt's executor does not run this plan yet (cpt train refuses it): ",
                 spec::describe(*gap, plan.parallel, plan.workload.seq_len), "\n");
}

}  // namespace

std::string torchrun_script(const spec::Plan& plan) {
  std::ostringstream s;
  s << "#!/usr/bin/env bash\n"
    << "# Launch cpt's executor for this plan with torchrun (one process per GPU):\n"
    << "#   ./torchrun.sh TRAIN.json [cpt train options]\n"
    << "# Multi-node: run on every node with NNODES, NODE_RANK and MASTER_ADDR set.\n"
    << executor_gap_note(plan) << "set -euo pipefail\n"
    << kTakeConfig << "PLAN_DIR=\"$(cd \"$(dirname \"$0\")\" && pwd)\"\n"
    << "NNODES=\"${NNODES:-" << nodes(plan) << "}\"\n"
    << "NODE_RANK=\"${NODE_RANK:-0}\"\n"
    << "MASTER_ADDR=\"${MASTER_ADDR:-127.0.0.1}\"\n"
    << "MASTER_PORT=\"${MASTER_PORT:-29500}\"\n"
    << "torchrun --nnodes \"$NNODES\" --node-rank \"$NODE_RANK\" --nproc-per-node " << gpus_per_node(plan)
    << " \\\n  --master-addr \"$MASTER_ADDR\" --master-port \"$MASTER_PORT\" \\\n"
    << "  --no-python cpt train --plan \"$PLAN_DIR/plan.json\" --config \"$CONFIG\" \"$@\"\n";
  return s.str();
}

std::string slurm_script(const spec::Plan& plan, const std::filesystem::path& plan_dir) {
  std::ostringstream s;
  s << "#!/usr/bin/env bash\n"
    << "#SBATCH --job-name=cpt-" << word(plan.model.name) << "\n"
    << "#SBATCH --nodes=" << nodes(plan) << "\n"
    << "#SBATCH --ntasks-per-node=" << gpus_per_node(plan) << "\n"
    << "#SBATCH --gpus-per-node=" << gpus_per_node(plan) << "\n"
    << "#SBATCH --exclusive\n"
    << "#   sbatch slurm.sbatch TRAIN.json [cpt train options]\n"
    << "# cpt train joins the job from SLURM_PROCID / SLURM_NTASKS (one task per GPU). Slurm runs a\n"
    << "# copy of this file, so the plan's directory is written here (CPT_PLAN_DIR overrides it).\n"
    << executor_gap_note(plan) << "set -euo pipefail\n"
    << kTakeConfig << "WRITTEN_PLAN_DIR=" << shell_quoted(std::filesystem::absolute(plan_dir).string()) << "\n"
    << "PLAN_DIR=\"${CPT_PLAN_DIR:-$WRITTEN_PLAN_DIR}\"\n"
    << "if [ ! -f \"$PLAN_DIR/plan.json\" ]; then\n"
    << "  echo \"$0: no plan.json in $PLAN_DIR (set CPT_PLAN_DIR to the directory of cpt plan --out)\" >&2\n"
    << "  exit 2\n"
    << "fi\n"
    // sed reads the whole list: `head -n 1` could close the pipe while scontrol still writes, and
    // under pipefail its SIGPIPE would end the job.
    << "MASTER_ADDR=\"$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | sed -n 1p)\"\n"
    << "export MASTER_ADDR\n"
    << "export MASTER_PORT=\"${MASTER_PORT:-29500}\"\n"
    << "srun cpt train --plan \"$PLAN_DIR/plan.json\" --config \"$CONFIG\" \"$@\"\n";
  return s.str();
}

std::vector<std::string> write_handoff(const spec::Plan& plan, const std::filesystem::path& dir) {
  core::write_file_atomic(dir / "megatron_args.sh", megatron_args(plan));
  core::write_file_atomic(dir / "ds_config.json", deepspeed_config(plan).dump(2) + "\n");
  core::write_file_atomic(dir / "torchtitan.toml", torchtitan_toml(plan));
  core::write_file_atomic(dir / "torchtitan_config.py", torchtitan_module(plan));
  core::write_file_atomic(dir / "torchrun.sh", torchrun_script(plan));
  core::write_file_atomic(dir / "slurm.sbatch", slurm_script(plan, dir));
  std::error_code ec;
  for (const char* f : {"torchrun.sh", "slurm.sbatch"}) {
    std::filesystem::permissions(dir / f, std::filesystem::perms::owner_exec | std::filesystem::perms::group_exec,
                                 std::filesystem::perm_options::add, ec);
  }
  return {"megatron_args.sh",     "ds_config.json", "torchtitan.toml",
          "torchtitan_config.py", "torchrun.sh",    "slurm.sbatch"};
}

std::optional<std::string> export_cannot_run(const spec::ModelSpec& model, const spec::ParallelConfig& parallel,
                                             int seq_len, spec::Runtime runtime) {
  const ExportGap gap = find_export_gap(model, parallel, seq_len, runtime);
  if (!is_refusal(gap)) return std::nullopt;
  return describe(gap, parallel, model, seq_len);
}

}  // namespace cpt::planner
