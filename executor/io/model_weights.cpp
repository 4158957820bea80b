#include "executor/io/model_weights.h"

#include <unistd.h>

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
#include "core/str_cat.h"
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

namespace {

// The transformers class a model exports as: LLaMA; Qwen2 for q/k/v biases (Llama's attention_bias
// would add one to o_proj too); Qwen3 for q/k norms; a mixture of experts as Mixtral, or as
// Qwen3-MoE with q/k norms; latent attention as DeepSeek-V2. ConfigError naming `origin` for a
// model none of them computes.
enum class HfFamily { kLlama, kQwen2, kQwen3, kMixtral, kQwen3Moe, kDeepseekV2 };

// DeepSeek-V2 in transformers: softmax routing whose top-k weights are not normalised (its
// DeepseekV2MoEGate ignores norm_topk_prob), shared experts in every MoE layer, dense layers only
// first, groups scored by their best expert (cpt's rule when experts_per_token equals
// groups_per_token).
std::optional<std::string> deepseek_v2_mismatch(const spec::ModelSpec& m) {
  if (!m.moe.present()) return std::nullopt;  // exported with every layer dense
  const spec::ExpertSpec& e = m.moe;
  if (e.router != spec::RouterScore::kSoftmax || e.normalize_top_k || e.expert_bias || e.capacity_factor > 0 ||
      e.layer_interval != 1) {
    return "DeepSeek-V2 routes by softmax without normalising the top k, no expert bias, dropless, every layer "
           "after the dense ones MoE";
  }
  if (e.shared_ffn_hidden == 0 || e.shared_ffn_hidden % e.expert_ffn_hidden != 0) {
    return "DeepSeek-V2 has shared experts, a whole number of experts wide";
  }
  if (e.expert_groups > 1 && e.experts_per_token != e.groups_per_token) {
    return "DeepSeek-V2 scores an expert group by its best expert: experts_per_token equal to groups_per_token";
  }
  return std::nullopt;
}

HfFamily hf_family_of(const spec::ModelSpec& m, const fs::path& origin) {
  auto refuse = [&](const std::string& why) {
    throw core::ConfigError(str_cat(origin.string(), ": model ", m.name, ": no transformers class computes it: ", why));
  };
  if (m.mla.present()) {
    if (const auto mismatch = deepseek_v2_mismatch(m)) refuse(*mismatch);
    return HfFamily::kDeepseekV2;
  }
  if (m.qkv_bias && m.qk_norm) refuse("q/k/v biases with q/k norms");
  if (!m.moe.present()) return m.qk_norm ? HfFamily::kQwen3 : (m.qkv_bias ? HfFamily::kQwen2 : HfFamily::kLlama);
  const spec::ExpertSpec& e = m.moe;
  if (e.shared_ffn_hidden > 0 || e.first_dense_layers > 0 || e.router != spec::RouterScore::kSoftmax ||
      e.capacity_factor > 0 || m.qkv_bias || e.top_k_scale != 1 || e.expert_groups > 1) {
    refuse(
        "an MoE exports as Mixtral or Qwen3-MoE: no shared experts or dense first layers, a softmax router "
        "(unscaled, no expert groups), dropless, no q/k/v biases");
  }
  if (m.qk_norm) return HfFamily::kQwen3Moe;
  if (e.layer_interval != 1 || !e.normalize_top_k) {
    refuse("without q/k norms an MoE exports as Mixtral: every layer MoE, normalised top-k weights");
  }
  return HfFamily::kMixtral;
}

// DeepseekV2Config's latent attention and experts (deepseek_v2_mismatch holds). A model without
// experts: every layer dense (first_k_dense_replace = layers; the expert keys unused).
void add_deepseek_v2_config(const spec::ModelSpec& m, nlohmann::ordered_json& config) {
  const spec::LatentAttention& l = m.mla;
  const spec::ExpertSpec& e = m.moe;
  config.erase("head_dim");                 // DeepseekV2Config derives it (qk_rope_head_dim)
  config["num_key_value_heads"] = m.heads;  // its keys and values are per query head
  config["q_lora_rank"] = l.q_lora_rank > 0 ? nlohmann::ordered_json(l.q_lora_rank) : nlohmann::ordered_json();
  config["kv_lora_rank"] = l.kv_lora_rank;
  config["qk_nope_head_dim"] = l.qk_nope_head_dim;
  config["qk_rope_head_dim"] = l.qk_rope_head_dim;
  config["v_head_dim"] = l.v_head_dim;
  config["attention_bias"] = false;
  config["mlp_bias"] = false;
  config["n_routed_experts"] = e.present() ? e.experts : 1;
  config["num_experts_per_tok"] = e.present() ? e.experts_per_token : 1;
  config["moe_intermediate_size"] = e.present() ? e.expert_ffn_hidden : m.ffn_hidden;
  config["n_shared_experts"] = e.present() ? e.shared_ffn_hidden / e.expert_ffn_hidden : 1;
  config["first_k_dense_replace"] = e.present() ? e.first_dense_layers : m.layers;
  config["moe_layer_freq"] = 1;
  config["scoring_func"] = "softmax";
  config["norm_topk_prob"] = false;
  config["routed_scaling_factor"] = e.present() ? e.top_k_scale : 1.0;
  config["topk_method"] = e.expert_groups > 1 ? "group_limited_greedy" : "greedy";
  config["n_group"] = e.expert_groups;
  config["topk_group"] = e.groups_per_token;
  config["aux_loss_alpha"] = 0.0;
}

// transformers' config.json of `m` as `family`.
nlohmann::ordered_json hf_config_of(const spec::ModelSpec& m, HfFamily family) {
  static constexpr std::array<std::pair<const char*, const char*>, 6> kNames{
      {{"llama", "LlamaForCausalLM"},
       {"qwen2", "Qwen2ForCausalLM"},
       {"qwen3", "Qwen3ForCausalLM"},
       {"mixtral", "MixtralForCausalLM"},
       {"qwen3_moe", "Qwen3MoeForCausalLM"},
       {"deepseek_v2", "DeepseekV2ForCausalLM"}}};
  const auto& [type, architecture] = kNames[static_cast<std::size_t>(family)];
  const bool mixtral = family == HfFamily::kMixtral;
  nlohmann::ordered_json config{{"architectures", {architecture}},
                                {"model_type", type},
                                {"hidden_size", m.hidden},
                                {"intermediate_size", mixtral ? m.moe.expert_ffn_hidden : m.ffn_hidden},
                                {"num_hidden_layers", m.layers},
                                {"num_attention_heads", m.heads},
                                {"num_key_value_heads", m.kv_heads},
                                {"head_dim", m.head_dim()},
                                {"vocab_size", m.vocab},
                                {"max_position_embeddings", m.max_seq_len},
                                {"rms_norm_eps", m.norm_eps},
                                {"rope_theta", m.rope_theta},
                                {"rope_scaling", nullptr},
                                {"tie_word_embeddings", m.tied_embeddings},
                                {"hidden_act", "silu"},
                                {"use_sliding_window", false},
                                {"sliding_window", nullptr},
                                {"torch_dtype", "float32"},
                                {"bos_token_id", 1},
                                {"eos_token_id", 2}};
  if (family == HfFamily::kQwen3 || family == HfFamily::kQwen3Moe) config["attention_bias"] = false;
  if (const auto& s = m.rope_scaling; s.yarn()) {
    config["rope_scaling"] = {{"rope_type", "yarn"},
                              {"factor", s.factor},
                              {"original_max_position_embeddings", s.original_max_positions},
                              {"beta_fast", s.beta_fast},
                              {"beta_slow", s.beta_slow},
                              {"truncate", s.truncate}};
    // transformers reads an absent (or null) one as not given; 0 means that in cpt.
    if (s.mscale > 0) config["rope_scaling"]["mscale"] = s.mscale;
    if (s.mscale_all_dim > 0) config["rope_scaling"]["mscale_all_dim"] = s.mscale_all_dim;
    if (s.attention_factor > 0) config["rope_scaling"]["attention_factor"] = s.attention_factor;
  } else if (s.present()) {
    config["rope_scaling"] = {{"rope_type", "llama3"},
                              {"factor", s.factor},
                              {"low_freq_factor", s.low_freq_factor},
                              {"high_freq_factor", s.high_freq_factor},
                              {"original_max_position_embeddings", s.original_max_positions}};
  }
  if (family == HfFamily::kDeepseekV2) add_deepseek_v2_config(m, config);
  if (mixtral) {
    config["num_local_experts"] = m.moe.experts;
    config["num_experts_per_tok"] = m.moe.experts_per_token;
    config["router_jitter_noise"] = 0.0;
  }
  if (family == HfFamily::kQwen3Moe) {
    config["num_experts"] = m.moe.experts;
    config["num_experts_per_tok"] = m.moe.experts_per_token;
    config["moe_intermediate_size"] = m.moe.expert_ffn_hidden;
    config["decoder_sparse_step"] = m.moe.layer_interval;
    config["mlp_only_layers"] = nlohmann::ordered_json::array();
    config["norm_topk_prob"] = m.moe.normalize_top_k;
  }
  return config;
}

}  // namespace

void export_hf(const fs::path& checkpoint_dir, const fs::path& out_dir) {
  if (fs::exists(out_dir)) throw core::ConfigError(str_cat(out_dir.string(), ": already exists"));
  const auto ckpt = Checkpoint::open(checkpoint_dir);
  const auto& m = ckpt.model();
  const auto st = ckpt.weights();
  const HfFamily family = hf_family_of(m, checkpoint_dir);
  NamedTensors tensors;
  for (const auto& name : st.names()) {
    tensors.emplace_back(to_hf_name(name, family == HfFamily::kMixtral), st.load(name, torch::kFloat32));
  }
  const auto config = hf_config_of(m, family);
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
  for (const auto& p : model->named_parameters()) c.weights.emplace_back(p.key(), p.value());
  c.trainer_state = {{"step", 0}, {"imported_from", fs::absolute(hf_dir).string()}};
  write_checkpoint_dir(out_dir, c);
}

}  // namespace cpt::exec
