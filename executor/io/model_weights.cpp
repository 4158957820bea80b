#include "executor/io/model_weights.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <string_view>
#include <nlohmann/json.hpp>
#include <set>

#include "core/atomic_file.h"
#include "core/confined_path.h"
#include "core/error.h"
#include "core/json_reader.h"
#include "core/log.h"
#include "core/output_directory.h"
#include "core/str_cat.h"
#include "executor/io/hf_export_config.h"
#include "executor/io/safetensors.h"
#include "spec/model_io.h"

namespace cpt::exec {

using core::str_cat;
namespace fs = std::filesystem;

namespace {

// Mixtral's names for a mixture of experts' tensors (transformers' MixtralSparseMoeBlock) and
// cpt's (Qwen-MoE's and DeepSeek's; model/moe_mlp.h), as name fragments.
constexpr std::array<std::pair<std::string_view, std::string_view>, 4> kMixtralFragments{{
    {".block_sparse_moe.", ".mlp."},
    {".w1.", ".gate_proj."},
    {".w2.", ".down_proj."},
    {".w3.", ".up_proj."},
}};

// Replaces each fragment `from` of `name` by its `to` (column 0 to 1, or 1 to 0 when `reverse`).
// Only names of a mixture of experts are touched: the w1/w2/w3 fragments only under experts.
std::string map_expert_names(std::string name, bool reverse) {
  const bool mixtral = name.find(reverse ? ".mlp.experts." : ".block_sparse_moe.experts.") != std::string::npos ||
                       name.find(reverse ? ".mlp.gate." : ".block_sparse_moe.gate.") != std::string::npos;
  if (!mixtral) return name;
  for (const auto& [hf, cpt] : kMixtralFragments) {
    const auto from = reverse ? cpt : hf;
    const auto to = reverse ? hf : cpt;
    if (const auto at = name.find(from); at != std::string::npos) name.replace(at, from.size(), to);
  }
  return name;
}

std::string to_cpt_name(const std::string& hf) {
  return map_expert_names(hf.starts_with("model.") ? hf.substr(6) : hf, false);
}
// `mixtral`: the model exports as Mixtral (expert tensors under Mixtral's names).
std::string to_hf_name(const std::string& cpt, bool mixtral) {
  const std::string name = cpt.starts_with("lm_head.") ? cpt : "model." + cpt;
  return mixtral ? map_expert_names(name, true) : name;
}

// Safetensors files of a Hugging Face directory, in a stable order.
std::vector<fs::path> hf_weight_files(const fs::path& dir) {
  const auto index = dir / "model.safetensors.index.json";
  if (fs::exists(index)) {
    const auto doc = core::parse_json_file(index);
    if (!doc.root().is_object() || !doc.root().contains("weight_map") || !doc.root()["weight_map"].is_object()) {
      throw core::ConfigError(str_cat(index.string(), ": $.weight_map: expected an object of tensor -> file"));
    }
    const auto& map = doc.root()["weight_map"];
    std::set<std::string> files;
    for (const auto& [name, file] : map.items()) {
      if (!file.is_string()) {
        throw core::ConfigError(str_cat(index.string(), ": $.weight_map.", name, ": expected a file name, got ",
                                        core::describe_json(file)));
      }
      files.insert(file.get<std::string>());
    }
    std::vector<fs::path> out;
    for (const auto& f : files) out.push_back(core::path_inside(dir, f, index.string(), "$.weight_map file"));
    return out;
  }
  if (fs::exists(dir / "model.safetensors")) return {dir / "model.safetensors"};
  throw core::ConfigError(str_cat(dir.string(), ": no model.safetensors or model.safetensors.index.json ",
                                  "(PyTorch .bin checkpoints are not read; save with safe_serialization=True)"));
}

}  // namespace

bool is_hf_directory(const fs::path& dir) {
  return fs::exists(dir / "config.json") && !fs::exists(dir / "manifest.json");
}

spec::ModelSpec read_hf_model_spec(const fs::path& dir) {
  const auto config = dir / "config.json";
  const auto doc = core::parse_json_file(config);
  const auto& j = doc.root();
  if (j.value("use_sliding_window", false)) {
    throw core::ConfigError(str_cat(config.string(), ": $.use_sliding_window: expected false (the executor uses full ",
                                    "causal attention), got true"));
  }
  if (j.contains("sliding_window") && j["sliding_window"].is_number_integer()) {
    core::warn(config.string(), ": sliding_window ", j["sliding_window"].get<long long>(),
               " is not implemented (full causal attention): identical only for sequences up to that length");
  }
  auto m = spec::load_model_file(config);  // checks model_type and every key it reads
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null() && !m.rope_scaling.present()) {
    throw core::ConfigError(str_cat(config.string(),
                                    ": $.rope_scaling: expected null, a \"llama3\" or a \"yarn\" scaling (the ",
                                    "executor implements those), got ", core::describe_json(j["rope_scaling"])));
  }
  if (j["model_type"] == "deepseek_v2" && m.moe.expert_groups > 1 &&
      m.moe.experts_per_token != m.moe.groups_per_token) {
    throw core::ConfigError(str_cat(
        config.string(), ": $.topk_method: \"group_limited_greedy\" with num_experts_per_tok ", m.moe.experts_per_token,
        " over topk_group ", m.moe.groups_per_token,
        ": transformers scores a group by its best expert, cpt's executor (as Megatron-Core) by the sum of its top ",
        "num_experts_per_tok / topk_group; expected them equal, or \"greedy\""));
  }
  if (j["model_type"] == "deepseek_v3" && m.moe.expert_groups > 1 &&
      m.moe.experts_per_token / m.moe.groups_per_token != 2) {
    throw core::ConfigError(str_cat(
        config.string(), ": $.topk_group: ", m.moe.groups_per_token, " with num_experts_per_tok ",
        m.moe.experts_per_token, ": transformers scores a group by the sum of its best two experts, cpt's executor ",
        "(as Megatron-Core) by the sum of its best num_experts_per_tok / topk_group; ", "expected that quotient 2"));
  }
  if (m.moe.shared_ffn_hidden > 0 && j["model_type"] == "qwen2_moe") {
    throw core::ConfigError(str_cat(config.string(), ": $.model_type: qwen2_moe's shared expert has a sigmoid gate ",
                                    "the executor does not run (cpt plans and prices it)"));
  }
  m.name = dir.filename().string();
  if (m.name.empty()) m.name = dir.parent_path().filename().string();
  return m;
}

namespace {

// Weight `name` of `st` in fp32; a weight stored in another than a floating-point dtype (an
// integer would be converted to nonsense) is refused naming the file, the tensor and its dtype.
torch::Tensor load_weight(const SafetensorsFile& st, const std::string& name) {
  const auto stored = st.stored_type(name);
  if (!torch::isFloatingType(stored)) {
    throw core::ConfigError(str_cat(st.path().string(), ": tensor ", name, ": expected F32, BF16 or F16 weights, got ",
                                    st.info(name).dtype));
  }
  return st.load(name, torch::kFloat32);
}

}  // namespace

NamedTensors read_hf_weights(const fs::path& dir) {
  NamedTensors out;
  for (const auto& file : hf_weight_files(dir)) {
    const auto st = SafetensorsFile::open(file);
    for (const auto& name : st.names()) {
      if (name.ends_with("rotary_emb.inv_freq")) continue;  // a buffer older exports include
      out.emplace_back(to_cpt_name(name), load_weight(st, name));
    }
  }
  return out;
}

namespace {

// Whether `name` is one of the model's routed experts that another rank of its ep group holds
// (layers.<i>.mlp.experts.<e>.*, e < E, outside this rank's share; model/moe_mlp.h).
bool held_by_another_expert_rank(LlamaModelImpl& model, const std::string& name) {
  if (!model.ep().active()) return false;
  constexpr std::string_view kExperts = ".mlp.experts.";
  const auto at = name.find(kExperts);
  if (at == std::string::npos) return false;
  const auto digits = name.substr(at + kExperts.size());
  const auto dot = digits.find('.');
  if (dot == 0 || dot == std::string::npos || digits.find_first_not_of("0123456789") != dot || dot > 9) return false;
  const std::int64_t expert = std::stoll(digits.substr(0, dot));
  const std::int64_t local = model.spec().moe.experts / model.ep().size();
  const std::int64_t first = model.ep().rank() * local;
  return expert < model.spec().moe.experts && (expert < first || expert >= first + local);
}

}  // namespace

NamedTensors checkpoint_tensors(LlamaModelImpl& model) {
  NamedTensors tensors;
  for (const auto& p : model.named_parameters()) tensors.emplace_back(p.key(), p.value());
  for (const auto& b : model.named_buffers()) tensors.emplace_back(b.key(), b.value());
  return tensors;
}

std::string load_model_weights(LlamaModelImpl& model, const fs::path& source) {
  NamedTensors tensors;
  std::string what;
  if (is_hf_directory(source)) {
    tensors = read_hf_weights(source);
    what = "Hugging Face";
  } else {
    const auto ckpt = Checkpoint::open(source);
    const auto st = ckpt.weights();
    for (const auto& name : st.names()) tensors.emplace_back(name, load_weight(st, name));
    what = str_cat("cpt checkpoint, step ", ckpt.step());
  }
  auto params = model.named_parameters();
  for (const auto& buffer : model.named_buffers()) params.insert(buffer.key(), buffer.value());  // expert biases
  std::set<std::string> filled;
  torch::NoGradGuard no_grad;
  for (const auto& [name, t] : tensors) {
    // Some tied checkpoints store the shared matrix twice.
    if (model.spec().tied_embeddings && name == "lm_head.weight") continue;
    auto* p = params.find(name);
    if (p == nullptr) {
      if (model.is_stage()) continue;                          // another pipeline stage's tensor
      if (held_by_another_expert_rank(model, name)) continue;  // another ep rank's expert
      throw core::ConfigError(str_cat(source.string(), ": tensor ", name, " has no place in model ", model.spec().name,
                                      " (a checkpoint of another architecture?)"));
    }
    const auto expected = tp_full_shape(name, p->sizes(), model.spec().vocab, model.splits());
    if (!t.sizes().equals(expected)) {
      throw core::ConfigError(str_cat(source.string(), ": tensor ", name, " has shape ", t.sizes(), ", model ",
                                      model.spec().name, " needs ", c10::IntArrayRef(expected)));
    }
    p->copy_(model.shard_of_full(name, t));
    filled.insert(name);
  }
  for (const auto& p : params) {
    if (!filled.count(p.key())) {
      throw core::ConfigError(
          str_cat(source.string(), ": no tensor ", p.key(), " (model ", model.spec().name, " needs it)"));
    }
  }
  return str_cat(what, ", ", filled.size(), " tensors");
}

void export_hf(const fs::path& checkpoint_dir, const fs::path& out_dir) {
  if (fs::exists(out_dir)) throw core::ConfigError(str_cat(out_dir.string(), ": already exists"));
  const auto ckpt = Checkpoint::open(checkpoint_dir);
  const auto& m = ckpt.model();
  const auto st = ckpt.weights();
  const HfFamily family = hf_family_of(m, checkpoint_dir);
  NamedTensors tensors;
  double lowest_bias = 0;
  for (const auto& name : st.names()) {
    tensors.emplace_back(to_hf_name(name, family == HfFamily::kMixtral), st.load(name, torch::kFloat32));
    if (name.ends_with(".e_score_correction_bias")) {
      lowest_bias = std::min(lowest_bias, tensors.back().second.min().item<double>());
    }
  }
  if (lowest_bias < 0) {
    core::warn(out_dir.string(), ": expert biases down to ", lowest_bias,
               ": transformers' DeepseekV3 fills the expert groups a token does not take with 0, not -inf, so a "
               "token whose biased scores fall below 0 may take experts of other groups there than in cpt");
  }
  const auto config = hf_config_of(m, family);
  core::create_parent_directory(out_dir);
  const auto tmp = fs::path(str_cat(out_dir.string(), ".tmp-", ::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    write_safetensors(tmp / "model.safetensors", tensors, {{"format", "pt"}});
    core::write_file_atomic(tmp / "config.json", config.dump(2) + "\n");
    fs::rename(tmp, out_dir);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
}

void import_hf(const fs::path& hf_dir, const fs::path& out_dir) {
  CheckpointContents c;
  c.model = read_hf_model_spec(hf_dir);
  // Build the model to check names and shapes exactly as training will.
  LlamaModel model(c.model);
  load_model_weights(*model, hf_dir);
  c.weights = checkpoint_tensors(*model);
  c.trainer_state = {{"step", 0}, {"imported_from", fs::absolute(hf_dir).string()}};
  write_checkpoint_dir(out_dir, c);
}

}  // namespace cpt::exec
