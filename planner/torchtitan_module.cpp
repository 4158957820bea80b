#include "planner/torchtitan_module.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <string_view>

#include "planner/export_text.h"
#include "planner/torchtitan_export.h"

namespace cpt::planner {

namespace {

// The family's config in torchtitan 0.3's registry that the module starts from.
const char* base_config_of(std::string_view family) {
  if (family == "qwen3") return "qwen3_30b_a3b";
  if (family == "deepseek_v3") return "deepseek_v3_16b";
  if (family == "gpt_oss") return "gpt_oss_20b";
  return "llama3_8b";
}

void write_header(std::ostringstream& s, const spec::Plan& plan, const TorchtitanFlavour* flavour) {
  const auto& m = plan.model;
  const auto& c = plan.parallel;
  s << "# torchtitan 0.3 config module, from cpt plan (" << plan.provenance.tool_version << ").\n"
    << "# Run: CPT_BASE_MODEL_HF_DIR=/abs/base-model CPT_DATA_DIR=/abs/data PYTHONPATH=<this directory> \\\n"
    << "#   torchrun ... -m torchtitan.train --module torchtitan_config --config cpt_plan\n"
    << "# FSDP: ZeRO-3 shards over dp (data_parallel_shard_degree); HSDP replicates across nodes;\n"
    << "# ZeRO 0-2 map to replicate-only or to FSDP with fsdp_reshard_after_forward = \"never\".\n";
  if (flavour != nullptr && flavour->llama31_rope_scaling && (!m.rope_scaling.present() || m.rope_scaling.yarn())) {
    s << "# torchtitan's " << flavour->name << " " << flavour->flavor
      << " applies Llama 3.1's RoPE scaling (factor 8); " << one_line(m.name)
      << (m.rope_scaling.yarn() ? " uses YaRN" : " has none") << ", so its rotary frequencies differ from the "
      << "checkpoint's.\n";
  }
  // torchtitan 0.3 shards the routed experts over tp without expert parallelism, and with it folds
  // ep over dp_shard x cp x tp, each expert whole (models/common/moe_sharding.py).
  const int titan_etp = c.ep == 1 ? c.tp : 1;
  if (m.moe.present() && c.etp != titan_etp) {
    s << "# torchtitan 0.3's expert tensor parallelism is tp without ep and 1 with it: the plan's etp " << c.etp
      << "\n# (ep " << c.ep << ", tp " << c.tp << ") runs as " << titan_etp << ".\n";
  }
  if (c.schedule == spec::ScheduleKind::kZeroBubbleH1) {
    s << "# The plan's ZB-H1 (split backward, v = 1) has no torch.distributed.pipelining class: 1F1B here.\n";
  }
  if (c.offload == spec::Offload::kOptimizer) {
    s << "# The plan offloads the optimizer state only; torchtitan's enable_cpu_offload moves parameters,\n"
         "# gradients and optimizer state together (FSDP2's CPUOffloadPolicy): not set.\n";
  }
}

void write_unknown_model(std::ostringstream& s, const spec::ModelSpec& m) {
  std::ostringstream why;
  why << "torchtitan 0.3 has no model of " << m.name << "'s dimensions (layers " << m.layers << ", dim " << m.hidden
      << ", heads " << m.heads << ", kv heads " << m.kv_heads << ", ffn "
      << (m.moe.present() ? m.moe.expert_ffn_hidden : m.ffn_hidden) << ", vocab " << m.vocab << ", rope_theta "
      << m.rope_theta << "): register one in torchtitan/models/<family>/__init__.py";
  s << "\n\ndef cpt_plan():\n    raise NotImplementedError(" << string_literal(why.str()) << ")\n";
}

void write_parallelism(std::ostringstream& s, const spec::Plan& plan) {
  const auto& c = plan.parallel;
  const bool ddp_alone = torchtitan_runs_ddp_alone(c);
  const int gpus_per_node = std::min(plan.cluster.num_gpus, plan.cluster.node.gpus_per_node);
  const int shard = ddp_alone ? 1 : dp_shard_group_size(c, gpus_per_node);
  s << "    parallelism = config.parallelism\n";
  s << "    parallelism.data_parallel_replicate_degree = " << c.dp / shard << "\n";
  s << "    parallelism.data_parallel_shard_degree = " << shard << "\n";
  s << "    parallelism.fsdp_reshard_after_forward = \"" << (c.zero_stage == 3 ? "always" : "never") << "\"\n";
  s << "    parallelism.tensor_parallel_degree = " << c.tp << "\n";
  s << "    parallelism.enable_sequence_parallel = " << (c.sequence_parallel ? "True" : "False") << "\n";
  s << "    parallelism.context_parallel_degree = " << c.cp << "\n";
  s << "    parallelism.pipeline_parallel_degree = " << c.pp << "\n";
  s << "    parallelism.pipeline_parallel_schedule = \"" << (c.virtual_stages > 1 ? "Interleaved1F1B" : "1F1B")
    << "\"\n";
  s << "    parallelism.pipeline_parallel_microbatch_size = " << c.micro_batch << "\n";
  const int stages = c.pp * c.virtual_stages;
  if (c.pp > 1) {
    // The plan's split: the same layers on every (virtual) stage, embedding and head not counted.
    s << "    parallelism.pipeline_parallel_first_stage_less_layers = 0\n"
      << "    parallelism.pipeline_parallel_last_stage_less_layers = 0\n";
    if (plan.model.layers % stages == 0) {
      s << "    parallelism.pipeline_parallel_layers_per_stage = " << plan.model.layers / stages << "\n";
    } else {
      s << "    # " << plan.model.layers << " layers do not split evenly over " << stages
        << " stages: torchtitan splits them its own way.\n";
    }
  }
  if (plan.model.moe.present()) s << "    parallelism.expert_parallel_degree = " << c.ep << "\n";
}

void write_plan_function(std::ostringstream& s, const spec::Plan& plan, const TorchtitanFlavour& flavour) {
  const auto& c = plan.parallel;
  s << "\nimport os\n\nfrom torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC\n"
    << "from torchtitan.models." << flavour.name << " import model_registry\n"
    << "from torchtitan.models." << flavour.name << ".config_registry import " << base_config_of(flavour.name)
    << " as family_config\n\n\n";
  s << "def cpt_plan():\n";
  s << "    config = family_config()\n";
  s << "    config.model_spec = model_registry(\"" << flavour.flavor << "\")\n";
  s << "    # The base model's Hugging Face directory (tokenizer, config, weights; torchtitan wants it\n"
    << "    # absolute) and the continual pre-training data, from the environment.\n";
  s << "    base_model = os.environ.get(\"CPT_BASE_MODEL_HF_DIR\", \"/path/to/base-model-hf\")\n";
  s << "    config.hf_assets_path = base_model\n";
  s << "    config.dataloader.dataset_path = os.environ.get(\"CPT_DATA_DIR\", \"/path/to/cpt-data\")\n";
  s << "    training = config.training\n";
  // Per data-parallel rank: one microbatch, or with a pipeline the rank's whole batch.
  s << "    training.local_batch_size = " << (c.pp > 1 ? c.global_batch / c.dp : c.micro_batch) << "\n";
  s << "    training.global_batch_size = " << c.global_batch << "\n";
  s << "    training.seq_len = " << plan.workload.seq_len << "\n";
  s << "    training.mixed_precision_param = \"bfloat16\"\n";
  if (c.pp > 1 || (plan.model.moe.present() && c.ep > 1)) {
    // torchtitan 0.3 refuses CUDA graphs with a pipeline, and with the all-to-all token dispatcher
    // (its host synchronisation).
    s << "    training.disable_cuda_graphs = True\n";
  }
  s << "    training.enable_cpu_offload = " << (c.offload == spec::Offload::kOptimizerAndParams ? "True" : "False")
    << "\n";
  write_parallelism(s, plan);
  s << "    config.activation_checkpoint = "
    << (c.recompute == spec::Recompute::kFull        ? "FullAC.Config()"
        : c.recompute == spec::Recompute::kSelective ? "SelectiveAC.Config()"
                                                     : "None")
    << "\n";
  s << "    # Continual pre-training starts from the base model's Hugging Face weights (model only).\n";
  s << "    checkpoint = config.checkpoint\n";
  s << "    checkpoint.enable = True\n";
  s << "    checkpoint.initial_load_path = base_model\n";
  s << "    checkpoint.initial_load_in_hf = True\n";
  s << "    checkpoint.initial_load_model_only = True\n";
  s << "    return config\n";
}

}  // namespace

std::string torchtitan_module(const spec::Plan& plan) {
  const TorchtitanFlavour* flavour = torchtitan_flavour(plan.model);
  std::ostringstream s;
  write_header(s, plan, flavour);
  if (flavour == nullptr) {
    write_unknown_model(s, plan.model);
  } else {
    write_plan_function(s, plan, *flavour);
  }
  return s.str();
}

}  // namespace cpt::planner
