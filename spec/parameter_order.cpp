#include "spec/parameter_order.h"

#include <array>
#include <charconv>
#include <climits>

namespace cpt::spec {

namespace {

// One block's tensors in the order the forward pass consumes them (see the header).
enum class BlockTensor {
  kInputNorm,
  kQ,
  kQBias,
  kQNorm,
  kK,
  kKBias,
  kKNorm,
  kV,
  kVBias,
  kO,
  kPostNorm,
  kGate,
  kUp,
  kDown
};
constexpr std::array<std::pair<std::string_view, BlockTensor>, 14> kBlockTensors{{
    {"input_layernorm.weight", BlockTensor::kInputNorm},
    {"self_attn.q_proj.weight", BlockTensor::kQ},
    {"self_attn.q_proj.bias", BlockTensor::kQBias},
    {"self_attn.q_norm.weight", BlockTensor::kQNorm},
    {"self_attn.k_proj.weight", BlockTensor::kK},
    {"self_attn.k_proj.bias", BlockTensor::kKBias},
    {"self_attn.k_norm.weight", BlockTensor::kKNorm},
    {"self_attn.v_proj.weight", BlockTensor::kV},
    {"self_attn.v_proj.bias", BlockTensor::kVBias},
    {"self_attn.o_proj.weight", BlockTensor::kO},
    {"post_attention_layernorm.weight", BlockTensor::kPostNorm},
    {"mlp.up_proj.weight", BlockTensor::kUp},  // up before gate: backward gives gate's gradient first
    {"mlp.gate_proj.weight", BlockTensor::kGate},
    {"mlp.down_proj.weight", BlockTensor::kDown},
}};

}  // namespace

namespace {

// The index of "up_proj.weight", "gate_proj.weight", "down_proj.weight" in that order (the order
// of the dense MLP's keys), or -1.
int mlp_matrix(std::string_view tensor) {
  if (tensor == "up_proj.weight") return 0;
  if (tensor == "gate_proj.weight") return 1;
  if (tensor == "down_proj.weight") return 2;
  return -1;
}

// A mixture of experts' tensors (moe_mlp.h), after the block's dense ones: the router, each routed
// expert in turn, then the shared experts (the forward's order). -1 for other names.
int expert_tensor_key(std::string_view tensor) {
  constexpr int kRouter = static_cast<int>(kBlockTensors.size());
  constexpr int kShared = INT_MAX - 3;
  if (tensor == "mlp.gate.weight") return kRouter;
  constexpr std::string_view shared = "mlp.shared_experts.";
  if (tensor.starts_with(shared)) {
    const int matrix = mlp_matrix(tensor.substr(shared.size()));
    return matrix < 0 ? -1 : kShared + matrix;
  }
  constexpr std::string_view routed = "mlp.experts.";
  if (!tensor.starts_with(routed)) return -1;
  const auto rest = tensor.substr(routed.size());
  int expert = 0;
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), expert);
  if (ec != std::errc() || end == rest.data() + rest.size() || *end != '.' || expert > (kShared - kRouter) / 3 - 2) {
    return -1;
  }
  const int matrix = mlp_matrix(rest.substr(static_cast<std::size_t>(end - rest.data()) + 1));
  return matrix < 0 ? -1 : kRouter + 1 + 3 * expert + matrix;
}

}  // namespace

std::pair<int, int> gradient_order_key(std::string_view name) {
  constexpr int kAfterLayers = INT_MAX - 1;
  if (name == "embed_tokens.weight") return {-1, 0};
  if (name == "norm.weight") return {kAfterLayers, 0};
  if (name == "lm_head.weight") return {kAfterLayers, 1};
  constexpr std::string_view prefix = "layers.";
  if (name.starts_with(prefix)) {
    const auto rest = name.substr(prefix.size());
    int layer = 0;
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), layer);
    if (ec == std::errc() && end < rest.data() + rest.size() && *end == '.') {
      const auto tensor = rest.substr(static_cast<std::size_t>(end - rest.data()) + 1);
      for (std::size_t i = 0; i < kBlockTensors.size(); ++i) {
        if (kBlockTensors[i].first == tensor) return {layer, static_cast<int>(i)};
      }
      if (const int key = expert_tensor_key(tensor); key >= 0) return {layer, key};
    }
  }
  return {INT_MAX, 0};
}

void visit_gradient_order(const ModelSpec& m, int tp, int first_layer, int layers, bool first, bool last,
                          bool single_stage, const std::function<void(std::int64_t numel)>& visit_any,
                          ParameterSubset subset, int ep, int etp) {
  const bool dense_part = subset != ParameterSubset::kRoutedExperts;
  const bool expert_part = subset != ParameterSubset::kAllButRoutedExperts;
  auto visit = [&](std::int64_t numel) {
    if (dense_part) visit_any(numel);
  };
  const std::int64_t h = m.hidden, d = m.head_dim(), f = m.ffn_hidden / tp;
  const std::int64_t q = std::int64_t{m.heads} / tp * d, kv = std::int64_t{m.kv_heads} / tp * d;
  const std::int64_t vocab_rows = m.tp_padded_vocab(tp) / tp;
  if (first) visit(vocab_rows * h);
  for (int i = first_layer; i < first_layer + layers; ++i) {
    const bool moe = m.is_moe_layer(i);
    for (const auto& [name, tensor] : kBlockTensors) {
      switch (tensor) {
        case BlockTensor::kInputNorm:
        case BlockTensor::kPostNorm:
          visit(h);
          break;
        case BlockTensor::kQ:
          visit(h * q);
          break;
        case BlockTensor::kK:
        case BlockTensor::kV:
          visit(h * kv);
          break;
        case BlockTensor::kQBias:
          if (m.qkv_bias) visit(q);
          break;
        case BlockTensor::kKBias:
        case BlockTensor::kVBias:
          if (m.qkv_bias) visit(kv);
          break;
        case BlockTensor::kQNorm:
        case BlockTensor::kKNorm:
          if (m.qk_norm) visit(d);
          break;
        case BlockTensor::kO:
          visit(q * h);
          break;
        case BlockTensor::kGate:
        case BlockTensor::kUp:
        case BlockTensor::kDown:
          if (!moe) visit(h * f);
          break;
      }
    }
    if (moe) {
      visit(h * m.moe.experts);
      const std::int64_t expert = h * (m.moe.expert_ffn_hidden / etp);
      if (expert_part) {
        for (int e = 0; e < 3 * m.moe.experts / ep; ++e) visit_any(expert);
      }
      if (m.moe.shared_ffn_hidden > 0) {  // split over tp as the dense MLP
        for (int j = 0; j < 3; ++j) visit(h * (m.moe.shared_ffn_hidden / tp));
      }
    }
  }
  if (last) {
    visit(h);
    if (!m.tied_embeddings || !single_stage) visit(vocab_rows * h);
  }
}

bool is_routed_expert(std::string_view name) {
  return name.find(".mlp.experts.") != std::string_view::npos;
}

bool routed_experts_apart(const ModelSpec& model, const ParallelConfig& parallel) {
  return model.moe.present() && !parallel.experts_with_their_layer();
}

}  // namespace cpt::spec
