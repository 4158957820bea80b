#include "planner/torchtitan_export.h"

#include <algorithm>
#include <sstream>

#include "core/str_cat.h"
#include "planner/export_text.h"
#include "spec/rank_layout.h"

namespace cpt::planner {

using core::str_cat;

namespace {

// Latent attention (deepseek_v3) has as many key/value heads as heads.
constexpr TorchtitanFlavour kFlavours[] = {
    {"llama3", "8B", 32, 4096, 32, 8, 14336, 128256, 0, true},
    {"llama3", "70B", 80, 8192, 64, 8, 28672, 128256, 0, true},
    {"llama3", "405B", 126, 16384, 128, 8, 53248, 128256, 0, true},
    {"qwen3", "30B-A3B", 48, 2048, 32, 4, 768, 151936, 128, false},
    {"qwen3", "235B-A22B", 94, 4096, 64, 4, 1536, 151936, 128, false},
    {"deepseek_v3", "16B", 27, 2048, 16, 16, 1408, 102400, 64, false},
    {"deepseek_v3", "671B", 61, 7168, 128, 128, 2048, 129280, 256, false},
    {"gpt_oss", "20b", 24, 2880, 64, 8, 2880, 201088, 32, false},
    {"gpt_oss", "120b", 36, 2880, 64, 8, 2880, 201088, 128, false},
};

}  // namespace

const TorchtitanFlavour* torchtitan_flavour(const spec::ModelSpec& m) {
  const int ffn = m.moe.present() ? m.moe.expert_ffn_hidden : m.ffn_hidden;
  for (const auto& f : kFlavours) {
    if (f.layers == m.layers && f.hidden == m.hidden && f.heads == m.heads && f.kv_heads == m.kv_heads &&
        f.ffn == ffn && f.vocab == m.vocab && f.experts == m.moe.experts) {
      return &f;
    }
  }
  return nullptr;
}

namespace {

void write_model(std::ostringstream& s, const spec::ModelSpec& m) {
  s << "[model]\n";
  const TorchtitanFlavour* f = torchtitan_flavour(m);
  if (f == nullptr) {
    s << "# torchtitan 0.2.x has no flavour of " << one_line(m.name) << "'s dimensions: register one (layers "
      << m.layers << ", dim " << m.hidden << ", heads " << m.heads << ", kv heads " << m.kv_heads << ", ffn "
      << (m.moe.present() ? m.moe.expert_ffn_hidden : m.ffn_hidden) << ", vocab " << m.vocab << ", rope_theta "
      << m.rope_theta << ") in torchtitan/models/<name>/__init__.py under this flavor name; until then\n"
      << "# torchtitan refuses the file rather than training its debug model.\n";
    s << "name = \"llama3\"\nflavor = " << string_literal(m.name) << "\n";
  } else {
    if (f->llama31_rope_scaling && (!m.rope_scaling.present() || m.rope_scaling.yarn())) {
      s << "# torchtitan's " << f->name << " " << f->flavor << " applies Llama 3.1's RoPE scaling (factor 8); "
        << one_line(m.name) << (m.rope_scaling.yarn() ? " uses YaRN" : " has none")
        << ", so its rotary frequencies differ from the checkpoint's.\n";
    }
    s << "name = \"" << f->name << "\"\nflavor = \"" << f->flavor << "\"\n";
  }
  s << "# The base model's Hugging Face directory (tokenizer and config), as for [checkpoint] below.\n";
  s << "hf_assets_path = \"BASE_MODEL_HF_DIR\"\n\n";
}

void write_parallelism(std::ostringstream& s, const spec::Plan& plan) {
  const auto& c = plan.parallel;
  const bool ddp_alone = torchtitan_runs_ddp_alone(c);
  const int gpus_per_node = std::min(plan.cluster.num_gpus, plan.cluster.node.gpus_per_node);
  const int shard = ddp_alone ? 1 : dp_shard_group_size(c, gpus_per_node);
  const int replicate = c.dp / shard;
  s << "[parallelism]\n";
  if (c.zero_stage == 0 && !ddp_alone && c.dp > 1) {
    s << "# ZeRO-0 with tensor, context or pipeline parallelism: torchtitan refuses DDP beside them;\n"
         "# FSDP without resharding instead (gradients and optimizer state sharded: less memory).\n";
  }
  s << "data_parallel_replicate_degree = " << replicate << "\n";
  s << "data_parallel_shard_degree = " << shard << "\n";
  s << "fsdp_reshard_after_forward = \"" << (c.zero_stage == 3 ? "always" : "never") << "\"\n";
  s << "tensor_parallel_degree = " << c.tp << "\n";
  s << "context_parallel_degree = " << c.cp << "\n";
  s << "pipeline_parallel_degree = " << c.pp << "\n";
  if (plan.model.moe.present()) {
    // torchtitan's MoE models fold ep over dp_shard x cp (x tp with etp 1).
    if (c.ep > 1 && c.etp != 1 && c.etp != c.tp) {
      s << "# torchtitan runs expert tensor parallelism 1 or tp only: the plan's " << c.etp << " is refused\n";
    }
    s << "expert_parallel_degree = " << c.ep << "\n";
    s << "expert_tensor_parallel_degree = " << c.etp << "\n";
  }
  if (c.schedule == spec::ScheduleKind::kZeroBubbleH1) {
    s << "# The plan's ZB-H1 (split backward, v = 1) has no torch.distributed.pipelining class;\n"
         "# its zero-bubble schedules need virtual stages (ZBVZeroBubble, InterleavedZeroBubble). 1F1B here.\n";
  }
  s << "pipeline_parallel_schedule = \"" << (c.virtual_stages > 1 ? "Interleaved1F1B" : "1F1B") << "\"\n";
  s << "pipeline_parallel_microbatch_size = " << c.micro_batch << "\n";
  if (c.pp > 1) {
    // The plan's split: the same layers on every (virtual) stage, embeddings and head not counted
    // as layers (torchtitan's default takes one layer off the first and last stage).
    s << "pipeline_parallel_first_stage_less_layers = 0\npipeline_parallel_last_stage_less_layers = 0\n";
    const int stages = c.pp * c.virtual_stages;
    if (plan.model.layers % stages == 0) {
      s << "pipeline_parallel_layers_per_stage = " << plan.model.layers / stages << "\n";
    } else {
      s << "# " << plan.model.layers << " layers do not split evenly over " << stages
        << " stages: torchtitan splits them its own way.\n";
    }
  }
  s << "enable_async_tensor_parallel = false\n\n";
}

}  // namespace

bool torchtitan_has_flavour(const spec::ModelSpec& model) {
  return torchtitan_flavour(model) != nullptr;
}

bool torchtitan_runs_ddp_alone(const spec::ParallelConfig& p) {
  return p.zero_stage == 0 && p.tp == 1 && p.cp == 1 && p.pp == 1;
}

int dp_shard_group_size(const spec::ParallelConfig& parallel, int gpus_per_node) {
  if (!parallel.hybrid_shard) return parallel.dp;
  return static_cast<int>(spec::RankLayout(parallel, gpus_per_node).dp_shard_group(0).size());
}

std::string torchtitan_toml(const spec::Plan& plan) {
  const auto& m = plan.model;
  const auto& c = plan.parallel;
  std::ostringstream s;
  s << "# torchtitan 0.2.x job config (torchtitan.train --job.config_file), from cpt plan ("
    << plan.provenance.tool_version << ").\n";
  s << "# FSDP: ZeRO-3 shards over dp (data_parallel_shard_degree); HSDP replicates across nodes;\n";
  s << "# ZeRO 0-2 map to replicate-only or to FSDP with reshard_after_forward = never (SHARD_GRAD_OP).\n\n";
  s << "[job]\ndescription = "
    << string_literal(str_cat(m.name, " on ", plan.cluster.num_gpus, " x ", plan.cluster.gpu().name)) << "\n\n";
  write_model(s, m);
  s << "[training]\n";
  // Per data-parallel rank: one microbatch, or with a pipeline the rank's whole batch, which
  // torchtitan cuts into pipeline_parallel_microbatch_size pieces.
  s << "local_batch_size = " << (c.pp > 1 ? c.global_batch / c.dp : c.micro_batch) << "\n";
  s << "global_batch_size = " << c.global_batch << "\n";
  s << "seq_len = " << plan.workload.seq_len << "\n";
  s << "mixed_precision_param = \"bfloat16\"\n";
  s << "dataset_path = \"CPT_DATA_DIR\"  # the continual pre-training data\n";
  if (c.offload == spec::Offload::kOptimizerAndParams) {
    s << "enable_cpu_offload = true\n";
  } else if (c.offload == spec::Offload::kOptimizer) {
    s << "# The plan offloads the optimizer state only; torchtitan's enable_cpu_offload moves parameters,\n"
         "# gradients and optimizer state together (FSDP2's CPUOffloadPolicy): not set.\n";
  }
  s << "\n";
  write_parallelism(s, plan);
  s << "[activation_checkpoint]\n";
  s << "mode = \""
    << (c.recompute == spec::Recompute::kFull        ? "full"
        : c.recompute == spec::Recompute::kSelective ? "selective"
                                                     : "none")
    << "\"\n";
  if (c.recompute == spec::Recompute::kSelective) s << "selective_ac_option = \"op\"\n";
  s << "\n[checkpoint]\nenable = true\n";
  s << "# Continual pre-training starts from the base model's Hugging Face weights (model only).\n";
  s << "initial_load_path = \"BASE_MODEL_HF_DIR\"\ninitial_load_in_hf = true\ninitial_load_model_only = true\n";
  return s.str();
}

}  // namespace cpt::planner
