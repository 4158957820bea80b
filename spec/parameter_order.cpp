#include "spec/parameter_order.h"

#include <array>
#include <charconv>
#include <climits>

namespace cpt::spec {

namespace {

// One block's tensors in the order the forward pass consumes them (see the header).
enum class BlockTensor {
  kInputNorm,
  kQLatent,
  kQLatentNorm,
  kQUp,
  kQ,
  kQBias,
  kQNorm,
  kK,
  kKBias,
  kKNorm,
  kV,
  kVBias,
  kKvLatent,
  kKvLatentNorm,
  kKvUp,
  kO,
  kPostNorm,
  kGate,
  kUp,
  kDown
};
constexpr std::array<std::pair<std::string_view, BlockTensor>, 20> kBlockTensors{{
    {"input_layernorm.weight", BlockTensor::kInputNorm},
    {"self_attn.q_a_proj.weight", BlockTensor::kQLatent},
    {"self_attn.q_a_layernorm.weight", BlockTensor::kQLatentNorm},
    {"self_attn.q_b_proj.weight", BlockTensor::kQUp},
    {"self_attn.q_proj.weight", BlockTensor::kQ},
    {"self_attn.q_proj.bias", BlockTensor::kQBias},
    {"self_attn.q_norm.weight", BlockTensor::kQNorm},
    {"self_attn.k_proj.weight", BlockTensor::kK},
    {"self_attn.k_proj.bias", BlockTensor::kKBias},
    {"self_attn.k_norm.weight", BlockTensor::kKNorm},
    {"self_attn.v_proj.weight", BlockTensor::kV},
    {"self_attn.v_proj.bias", BlockTensor::kVBias},
    {"self_attn.kv_a_proj_with_mqa.weight", BlockTensor::kKvLatent},
    {"self_attn.kv_a_layernorm.weight", BlockTensor::kKvLatentNorm},
    {"self_attn.kv_b_proj.weight", BlockTensor::kKvUp},
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

namespace {

// One rank's widths of a block's attention and dense MLP under tensor parallelism over `tp`.
struct BlockWidths {
  std::int64_t hidden, head_dim, heads, ffn;
  std::int64_t query, output;  // the query and output projections' widths
  std::int64_t kv;             // the keys' and values' (none with latent attention)
  bool query_latent;
};

BlockWidths block_widths(const ModelSpec& m, int tp) {
  const LatentAttention& mla = m.mla;
  BlockWidths w{};
  w.hidden = m.hidden;
  w.head_dim = m.head_dim();
  w.heads = std::int64_t{m.heads} / tp;
  w.ffn = m.ffn_hidden / tp;
  w.query = w.heads * (mla.present() ? mla.qk_head_dim() : w.head_dim);
  w.output = w.heads * (mla.present() ? mla.v_head_dim : w.head_dim);
  w.kv = mla.present() ? 0 : std::int64_t{m.kv_heads} / tp * w.head_dim;
  w.query_latent = mla.present() && mla.q_lora_rank > 0;
  return w;
}

// The elements of `tensor` on one rank of a block (an MoE layer: `moe`); 0 where the block has none.
std::int64_t block_tensor_numel(BlockTensor tensor, const ModelSpec& m, const BlockWidths& w, bool moe) {
  const LatentAttention& mla = m.mla;
  const std::int64_t h = w.hidden, q_rank = mla.q_lora_rank, kv_rank = mla.kv_lora_rank;
  switch (tensor) {
    case BlockTensor::kInputNorm:
    case BlockTensor::kPostNorm:
      return h;
    case BlockTensor::kQLatent:
      return w.query_latent ? h * q_rank : 0;
    case BlockTensor::kQLatentNorm:
      return w.query_latent ? q_rank : 0;
    case BlockTensor::kQUp:
      return w.query_latent ? q_rank * w.query : 0;
    case BlockTensor::kQ:
      return w.query_latent ? 0 : h * w.query;
    case BlockTensor::kK:
    case BlockTensor::kV:
      return h * w.kv;
    case BlockTensor::kKvLatent:
      return mla.present() ? h * (kv_rank + mla.qk_rope_head_dim) : 0;
    case BlockTensor::kKvLatentNorm:
      return mla.present() ? kv_rank : 0;
    case BlockTensor::kKvUp:
      return mla.present() ? kv_rank * w.heads * (mla.qk_nope_head_dim + mla.v_head_dim) : 0;
    case BlockTensor::kQBias:
      return m.qkv_bias ? w.query : 0;
    case BlockTensor::kKBias:
    case BlockTensor::kVBias:
      return m.qkv_bias ? w.kv : 0;
    case BlockTensor::kQNorm:
    case BlockTensor::kKNorm:
      return m.qk_norm ? w.head_dim : 0;
    case BlockTensor::kO:
      return w.output * h;
    case BlockTensor::kGate:
    case BlockTensor::kUp:
    case BlockTensor::kDown:
      return moe ? 0 : h * w.ffn;
  }
  return 0;
}

}  // namespace

void visit_gradient_order(const ModelSpec& m, int tp, std::span<const LayerRange> held, bool first, bool last,
                          bool single_stage, const std::function<void(std::int64_t numel)>& visit_any,
                          ParameterSubset subset, int ep, int etp) {
  const bool dense_part = subset != ParameterSubset::kRoutedExperts;
  const bool expert_part = subset != ParameterSubset::kAllButRoutedExperts;
  auto visit = [&](std::int64_t numel) {
    if (dense_part) visit_any(numel);
  };
  const BlockWidths widths = block_widths(m, tp);
  const std::int64_t h = m.hidden;
  const std::int64_t vocab_rows = m.tp_padded_vocab(tp) / tp;
  // One block: its attention and norms, then the dense MLP or the router, routed and shared experts.
  auto visit_block = [&](int layer) {
    const bool moe = m.is_moe_layer(layer);
    for (const auto& [name, tensor] : kBlockTensors) {
      if (const std::int64_t numel = block_tensor_numel(tensor, m, widths, moe); numel > 0) visit(numel);
    }
    if (!moe) return;
    visit(h * m.moe.experts);
    const std::int64_t expert = h * (m.moe.expert_ffn_hidden / etp);
    if (expert_part) {
      for (int e = 0; e < 3 * m.moe.experts / ep; ++e) visit_any(expert);
    }
    if (m.moe.shared_ffn_hidden > 0) {  // split over tp as the dense MLP
      for (int j = 0; j < 3; ++j) visit(h * (m.moe.shared_ffn_hidden / tp));
    }
  };
  if (first) visit(vocab_rows * h);
  for (const LayerRange& range : held) {
    for (int i = range.first; i < range.first + range.count; ++i) visit_block(i);
  }
  if (last) {
    visit(h);
    if (!m.tied_embeddings || !single_stage) visit(vocab_rows * h);
  }
}

void visit_gradient_order(const ModelSpec& m, int tp, int first_layer, int layers, bool first, bool last,
                          bool single_stage, const std::function<void(std::int64_t numel)>& visit,
                          ParameterSubset subset, int ep, int etp) {
  const LayerRange held{first_layer, layers};
  visit_gradient_order(m, tp, std::span<const LayerRange>(&held, 1), first, last, single_stage, visit, subset, ep, etp);
}

bool is_routed_expert(std::string_view name) {
  return name.find(".mlp.experts.") != std::string_view::npos;
}

bool routed_experts_apart(const ModelSpec& model, const ParallelConfig& parallel) {
  return model.moe.present() && !parallel.experts_with_their_layer();
}

}  // namespace cpt::spec
