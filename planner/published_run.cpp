#include "planner/published_run.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_reader.h"
#include "core/str_cat.h"
#include "spec/model_catalog.h"

namespace cpt::planner {

using core::str_cat;
using Json = core::Json;

namespace {

// The member `key` of `object`, or null.
const Json& member(const Json& object, const char* key) {
  static const Json kNone;
  if (!object.is_object()) return kNone;
  const auto it = object.find(key);
  return it == object.end() ? kNone : *it;
}

std::optional<double> number_at(const Json& object, const char* key) {
  if (!object.is_object()) return std::nullopt;
  const auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::string text_at(const Json& object, const char* key) {
  if (!object.is_object()) return "";
  const auto it = object.find(key);
  if (it == object.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  return it->is_null() ? "" : it->dump();
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool contains(const std::string& text, const char* part) {
  return lower(text).find(part) != std::string::npos;
}

bool starts_with(const std::string& text, const char* prefix) {
  return lower(text).rfind(prefix, 0) == 0;
}

// The source of a row by its id's prefix (README.md of the data set).
std::string source_of(const std::string& id) {
  const std::string prefix = id.substr(0, id.find('_'));
  if (prefix == "lf") return "llm-foundry";
  if (prefix == "nemo") return "NeMo long-sequence";
  if (prefix == "nemo2407") return "NeMo 24.07";
  if (prefix == "mbridge") return "Megatron-Bridge";
  return prefix;
}

std::optional<std::string> catalog_gpu(const std::string& gpu_class) {
  if (gpu_class == "A100-40GB") return "a100-40g";
  if (gpu_class == "A100-80GB") return "a100-80g";
  if (gpu_class == "H100-80GB") return "h100";
  return std::nullopt;
}

// A whole, positive count at `key`, or `fallback` (recorded as an assumption when `what` is set).
int count_at(const Json& object, const char* key, int fallback, PublishedRun& run, const char* what = nullptr) {
  // Checked before converting: a double outside int's range does not convert.
  if (const auto v = number_at(object, key); v && *v >= 1 && *v <= 1e9 && *v == std::trunc(*v)) {
    return static_cast<int>(*v);
  }
  if (what != nullptr) run.assumptions.push_back(str_cat(what, " not stated: ", fallback));
  return fallback;
}

// The model's dimensions from the row; its family (MPT, GPT-3, Llama, Nemotron) by name.
void read_model(const Json& m, int seq_len, PublishedRun& run) {
  spec::ModelSpec& model = run.model;
  // A row may name a catalog model (the mixtures of experts, whose experts the dimensions above do
  // not say), with its capacity factor where tokens were dropped.
  if (const std::string name = text_at(m, "catalog"); !name.empty()) {
    if (auto entry = spec::find_catalog_model(name)) {
      model = entry->spec;
      model.max_seq_len = std::max(model.max_seq_len, seq_len);
      if (const auto factor = number_at(m, "moe_capacity_factor"); factor && *factor >= 1 && *factor <= 1e3) {
        model.moe.capacity_factor = *factor;
      }
      return;
    }
    run.not_modelled = str_cat("catalog model \"", name, "\" is not in cpt's catalog");
  }
  model.name = text_at(m, "name");
  model.layers = count_at(m, "layers", 0, run);
  model.hidden = count_at(m, "hidden", 0, run);
  model.heads = count_at(m, "heads", 0, run);
  model.kv_heads = count_at(m, "kv_heads", model.heads, run);
  model.ffn_hidden = count_at(m, "ffn", 4 * model.hidden, run, "ffn");
  model.max_seq_len = seq_len;
  const std::string& name = model.name;
  if (starts_with(name, "llama")) {
    model.mlp = spec::MlpKind::kSwiGLU;
    model.norm = spec::NormKind::kRMSNorm;
    model.position = spec::PositionKind::kRoPE;
  } else {
    // MPT (llm-foundry: learned positions, LayerNorm, tied embeddings), GPT-3 as Megatron builds
    // it, Nemotron (a squared-ReLU MLP, priced as GELU's two matrices).
    model.mlp = spec::MlpKind::kGelu;
    model.norm = spec::NormKind::kLayerNorm;
    model.position = starts_with(name, "nemotron") ? spec::PositionKind::kRoPE : spec::PositionKind::kLearned;
    model.tied_embeddings = !starts_with(name, "nemotron");
    if (starts_with(name, "mpt")) {
      // llm-foundry's MPT configurations: no dropout (the data's README); the loss is
      // ComposerMPTCausalLM's default loss_fn, "fused_crossentropy" (FlashAttention's kernel).
      run.dropout = false;
      run.fused_cross_entropy = true;
      run.assumptions.emplace_back("llm-foundry's MPT recipe: no dropout, FlashAttention's fused cross-entropy");
    }
    if (starts_with(name, "nemotron")) run.assumptions.push_back("squared-ReLU MLP priced as GELU's");
  }
  if (const auto v = number_at(m, "vocab"); v && *v >= 1 && *v <= 1e12) {
    model.vocab = static_cast<std::int64_t>(*v);
  } else {
    model.vocab = starts_with(name, "nemotron") ? 256000 : 50257;  // the family's tokenizer
    run.assumptions.push_back(str_cat("vocab not stated: ", model.vocab));
  }
}

// ZeRO stage of the row's data parallelism: FSDP FULL_SHARD 3, SHARD_GRAD_OP 2, Megatron's
// distributed optimizer 1 (NeMo's and Megatron-Bridge's default where the row states nothing).
int zero_stage_of(const Json& parallel, PublishedRun& run) {
  const std::string fsdp = text_at(parallel, "fsdp");
  if (const auto z = number_at(parallel, "zero"); z && (*z == 0 || *z == 1 || *z == 2 || *z == 3)) {
    return static_cast<int>(*z);
  }
  if (contains(fsdp, "shard_grad_op")) return 2;
  if (contains(fsdp, "full_shard") || starts_with(fsdp, "fsdp")) return 3;
  if (!contains(fsdp, "distributed optimizer")) run.assumptions.push_back("data parallelism not stated: ZeRO-1");
  return 1;
}

// PyTorch FSDP where the row names one of its sharding strategies, unless the source is a
// Megatron-Core framework (Megatron-FSDP); Megatron-LM where it is one.
spec::Runtime runtime_of(const Json& row, PublishedRun& run) {
  const std::string source = text_at(member(row, "source"), "title");
  if (contains(source, "nemo") || contains(source, "megatron")) return spec::Runtime::kMegatron;
  const std::string fsdp = text_at(member(row, "parallel"), "fsdp");
  if (contains(fsdp, "full_shard") || contains(fsdp, "shard_grad_op") || contains(fsdp, "no_shard")) {
    return spec::Runtime::kFsdp;
  }
  run.assumptions.push_back("runtime not stated: megatron");
  return spec::Runtime::kMegatron;
}

spec::Recompute recompute_of(const std::string& text, PublishedRun& run) {
  if (starts_with(text, "full")) return spec::Recompute::kFull;
  if (starts_with(text, "selective")) return spec::Recompute::kSelective;
  if (!starts_with(text, "none")) run.assumptions.push_back("recomputation not stated: none");
  return spec::Recompute::kNone;
}

void read_parallel(const Json& row, PublishedRun& run) {
  const Json& parallel = member(row, "parallel");
  const Json& batch = member(row, "batch");
  spec::ParallelConfig& p = run.parallel;
  p.tp = count_at(parallel, "tp", 1, run);
  p.pp = count_at(parallel, "pp", 1, run);
  p.cp = count_at(parallel, "cp", 1, run);
  p.virtual_stages = count_at(parallel, "vp", 1, run);
  p.ep = count_at(parallel, "ep", 1, run);
  p.etp = count_at(parallel, "etp", 1, run);
  p.dp = count_at(parallel, "dp", std::max(1, run.gpus / (p.tp * p.pp * p.cp)), run);
  p.zero_stage = zero_stage_of(parallel, run);
  if (const std::string dispatcher = text_at(parallel, "moe_dispatcher"); !dispatcher.empty()) {
    if (const auto known = spec::token_dispatcher_from_string(dispatcher)) {
      run.moe_dispatcher = *known;
    } else {
      run.not_modelled = str_cat("token dispatcher \"", dispatcher, "\" is not one cpt prices");
    }
  }
  p.recompute = recompute_of(text_at(parallel, "recompute"), run);
  p.sequence_parallel = p.tp > 1;
  if (p.tp > 1 && !contains(text_at(parallel, "sp"), "true") && text_at(parallel, "sp") != "1") {
    run.assumptions.push_back("sequence parallelism not stated: on with tp");
  }
  p.schedule = p.virtual_stages > 1 ? spec::ScheduleKind::kInterleaved1F1B : spec::ScheduleKind::k1F1B;
  p.micro_batch = count_at(batch, "micro", 1, run, "micro-batch");
  const int global = count_at(batch, "global", p.micro_batch * p.dp, run, "global batch");
  const int per_step = p.micro_batch * p.dp;
  const int accumulation = count_at(batch, "grad_accum", std::max(1, global / per_step), run);
  p.global_batch = per_step * accumulation;
  if (p.global_batch != global) {
    run.assumptions.push_back(
        str_cat("global batch ", global, " taken as micro-batch x dp x grad_accum = ", p.global_batch));
  }
}

// Settings of a row's recipe that the row does not carry but its published configuration states.
void add_recipe_settings(PublishedRun& run) {
  if (starts_with(run.id, "nemo2407_") && starts_with(run.model.name, "nemotron-4-340b")) {
    // NeMo-Framework-Launcher's conf/training/nemotron/nemotron_340b.yaml, the recipe NeMo
    // benchmarks: optim.grad_sync_dtype bf16, so Megatron's gradient buffers are 16-bit.
    run.fp32_main_grads = false;
    run.assumptions.emplace_back("gradients reduced in bf16 (NeMo's nemotron_340b.yaml: grad_sync_dtype bf16)");
  }
}

PublishedRun read_row(const Json& row) {
  PublishedRun run;
  run.id = text_at(row, "id");
  const std::string gpu_class = text_at(member(row, "hardware"), "gpu_class");
  const std::string precision = text_at(row, "precision");
  run.precision = contains(precision, "fp8") ? spec::Precision::kFp8 : spec::Precision::kBf16;
  run.group = str_cat(source_of(run.id), " ", gpu_class.empty() ? "(GPU not stated)" : gpu_class, " ",
                      run.precision == spec::Precision::kFp8 ? "fp8" : "bf16");
  run.gpus = count_at(member(row, "hardware"), "n_gpus", 0, run);
  run.seq_len = count_at(member(row, "batch"), "seq_len", 0, run);
  read_model(member(row, "model"), run.seq_len, run);
  read_parallel(row, run);
  run.runtime = runtime_of(row, run);
  add_recipe_settings(run);
  run.tokens_per_s_per_gpu = number_at(member(row, "measured"), "tokens_per_s_per_gpu");
  run.model_tflops_per_gpu = number_at(member(row, "measured"), "tflops_per_gpu");
  const auto gpu = catalog_gpu(gpu_class);
  if (gpu) run.gpu = *gpu;
  if (!gpu) {
    run.not_modelled = str_cat("GPU class \"", gpu_class, "\" has no profile");
  } else if (run.not_modelled) {
    // set while reading the model
  } else if (run.gpus < 1 || run.seq_len < 1 || run.model.layers < 1 || run.model.hidden < 1 || run.model.heads < 1) {
    run.not_modelled = "the row lacks the GPU count, sequence length or model dimensions";
  } else if (!run.tokens_per_s_per_gpu && !run.model_tflops_per_gpu) {
    run.not_modelled = "nothing measured to compare with";
  }
  return run;
}

}  // namespace

std::vector<PublishedRun> read_published_runs(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in || std::filesystem::is_directory(path)) {
    throw core::ConfigError(str_cat(path.string(), ": cannot read the published runs (expected a .jsonl file)"));
  }
  auto runs = read_published_runs(in, path.string());
  if (runs.empty()) throw core::ConfigError(str_cat(path.string(), ": no runs (expected one JSON object per line)"));
  return runs;
}

std::vector<PublishedRun> read_published_runs(std::istream& lines, const std::string& origin) {
  std::vector<PublishedRun> runs;
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    // Depth-limited, with the line and column of a syntax error (core/json_reader.h).
    const core::JsonDocument document = core::parse_json_text(line, str_cat(origin, ":", number));
    const Json& row = document.root();
    if (!member(row, "id").is_string()) {
      throw core::ConfigError(str_cat(origin, ":", number, ": expected a JSON object with a string \"id\""));
    }
    runs.push_back(read_row(row));
  }
  return runs;
}

}  // namespace cpt::planner
