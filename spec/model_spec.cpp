#include "spec/model_spec.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::spec {

using core::str_cat;

std::string to_string(MlpKind k) {
  return k == MlpKind::kSwiGLU ? "swiglu" : "gelu";
}
std::string to_string(NormKind k) {
  return k == NormKind::kRMSNorm ? "rmsnorm" : "layernorm";
}
std::string to_string(PositionKind k) {
  return k == PositionKind::kRoPE ? "rope" : "learned";
}
std::string to_string(RouterScore k) {
  return k == RouterScore::kSoftmax ? "softmax" : "sigmoid";
}

std::string to_string(RopeScalingKind k) {
  return k == RopeScalingKind::kLlama3 ? "llama3" : "yarn";
}

double yarn_mscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

double RopeScaling::yarn_attention_factor() const {
  if (!yarn()) return 1.0;
  if (attention_factor > 0) return attention_factor;
  if (mscale > 0 && mscale_all_dim > 0) return yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim);
  return yarn_mscale(factor, 1.0);
}

double RopeScaling::latent_softmax_factor() const {
  if (!yarn() || !(mscale_all_dim > 0)) return 1.0;
  const double m = yarn_mscale(factor, mscale_all_dim);
  return m * m;
}

AttentionWidths ModelSpec::attention_widths() const {
  AttentionWidths w;
  if (mla.present()) {  // latent attention: keys and values per query head
    w.qk_head_dim = mla.qk_head_dim();
    w.v_head_dim = mla.v_head_dim;
    w.query = w.key = std::int64_t{heads} * w.qk_head_dim;
    w.value = w.output = std::int64_t{heads} * w.v_head_dim;
    return w;
  }
  w.qk_head_dim = w.v_head_dim = head_dim();
  w.query = w.output = std::int64_t{heads} * head_dim();
  w.key = w.value = std::int64_t{kv_heads} * head_dim();
  return w;
}

bool ModelSpec::is_moe_layer(int layer) const {
  return moe.present() && layer >= moe.first_dense_layers && (layer + 1) % moe.layer_interval == 0;
}

int ModelSpec::moe_layers_in(int first, int count) const {
  if (!moe.present() || count <= 0) return 0;
  const int interval = moe.layer_interval;
  // Layers i in [start, end) with (i + 1) % interval == 0: multiples of interval in [start + 1, end].
  const int start = std::max(first, moe.first_dense_layers), end = first + count;
  if (start >= end) return 0;
  return end / interval - start / interval;
}

std::int64_t ModelSpec::norm_params() const {
  return norm == NormKind::kRMSNorm ? std::int64_t{hidden} : 2 * std::int64_t{hidden};
}

// cpt's count (docs/costmodel-reference.md §2.1), per block:
//   attention  q and o: 2·h·(a·d)   k and v: 2·h·(g·d)          (+ biases (a+2g)·d + h for GPT)
//   MLP        SwiGLU: 3·h·f        GeLU: 2·h·f                  (+ biases f + h for GPT)
//   norms      2 per block, h each (RMSNorm) or 2h (LayerNorm)
// plus the token embedding V·h, learned positions s·h, the final norm and an untied LM head V·h.
// For GPT (f = 4h, a = g) this is Narayanan et al. 2021 eq. (2): 12·L·h² + 13·L·h + (V + s)·h (+ 2h).
// Latent attention (LatentAttention's shapes) replaces q, k and v; an MoE layer's MLP is its router
// h·E, its routed experts E·(3 or 2)·h·f_e and its shared experts (3 or 2)·h·f_shared.
namespace {

// Products and sums of dimensions, checked: dimensions each in range can still multiply past 64
// bits (find_model_spec_errors reports it; a validated model never throws here).
struct Count {
  std::int64_t value;
};
Count operator*(Count a, Count b) {
  std::int64_t out = 0;
  if (__builtin_mul_overflow(a.value, b.value, &out)) throw core::ConfigError("parameter count beyond 64 bits");
  return {out};
}
Count operator+(Count a, Count b) {
  std::int64_t out = 0;
  if (__builtin_add_overflow(a.value, b.value, &out)) throw core::ConfigError("parameter count beyond 64 bits");
  return {out};
}

}  // namespace

namespace {

// The attention block's matrices (and biases): multi-head/grouped-query, or latent.
Count attention_params(const ModelSpec& m) {
  const Count h{m.hidden}, a{m.heads};
  if (m.mla.present()) {
    const LatentAttention& l = m.mla;
    const Count qk{l.qk_head_dim()}, kv_rank{l.kv_lora_rank};
    const Count q = l.q_lora_rank > 0 ? h * Count{l.q_lora_rank} + Count{l.q_lora_rank} + Count{l.q_lora_rank} * a * qk
                                      : h * a * qk;
    const Count kv = h * (kv_rank + Count{l.qk_rope_head_dim}) + kv_rank +
                     kv_rank * a * (Count{l.qk_nope_head_dim} + Count{l.v_head_dim});
    return q + kv + a * Count{l.v_head_dim} * h;
  }
  const Count d{m.head_dim()};
  const Count q_width = a * d;
  const Count kv_width = Count{m.kv_heads} * d;
  Count attention = Count{2} * h * q_width + Count{2} * h * kv_width;
  if (m.has_linear_biases()) {
    attention = attention + q_width + Count{2} * kv_width + h;
  } else if (m.qkv_bias) {
    attention = attention + q_width + Count{2} * kv_width;
  }
  return attention;
}

// One MLP of inner width `width`: SwiGLU's three matrices or GeLU's two (+ GPT's biases).
Count mlp_params(const ModelSpec& m, int width) {
  const Count h{m.hidden}, f{width};
  Count params = Count{m.mlp == MlpKind::kSwiGLU ? 3 : 2} * h * f;
  if (m.has_linear_biases()) params = params + f + h;
  return params;
}

}  // namespace

ParamCounts ModelSpec::param_counts() const {
  const Count h{hidden}, v{vocab};
  ParamCounts c;
  c.attention_per_layer = attention_params(*this).value;
  if (mla.present()) {
    const Count q_rank{mla.q_lora_rank}, kv_rank{mla.kv_lora_rank};
    c.attention_replicated_per_layer =
        (h * q_rank + q_rank + h * (kv_rank + Count{mla.qk_rope_head_dim}) + kv_rank).value;
  }
  c.mlp_per_layer = mlp_params(*this, ffn_hidden).value;
  c.norms_per_layer = 2 * norm_params() + (qk_norm ? 2 * std::int64_t{head_dim()} : 0);
  c.per_layer = (Count{c.attention_per_layer} + Count{c.mlp_per_layer} + Count{c.norms_per_layer}).value;
  c.moe_layers = moe_layers_in(0, layers);
  c.dense_layers = layers - c.moe_layers;
  Count inactive{0};
  if (moe.present()) {
    const Count expert = mlp_params(*this, moe.expert_ffn_hidden);
    c.router_per_layer = (h * Count{moe.experts}).value;
    c.routed_experts_per_layer = (Count{moe.experts} * expert).value;
    c.shared_experts_per_layer = moe.shared_ffn_hidden > 0 ? mlp_params(*this, moe.shared_ffn_hidden).value : 0;
    c.per_moe_layer = (Count{c.attention_per_layer} + Count{c.norms_per_layer} + Count{c.router_per_layer} +
                       Count{c.shared_experts_per_layer} + Count{c.routed_experts_per_layer})
                          .value;
    inactive = Count{c.moe_layers} * Count{moe.experts - moe.experts_per_token} * expert;
  }
  c.embedding = (v * h).value;
  c.position = position == PositionKind::kLearned ? (Count{max_seq_len} * h).value : 0;
  c.final_norm = norm_params();
  c.lm_head = tied_embeddings ? 0 : c.embedding;
  c.total = (Count{c.dense_layers} * Count{c.per_layer} + Count{c.moe_layers} * Count{c.per_moe_layer} +
             Count{c.embedding} + Count{c.position} + Count{c.final_norm} + Count{c.lm_head})
                .value;
  // The embedding lookup multiplies nothing; a tied head (counted once, as the embedding) does.
  c.active = c.total - inactive.value - (tied_embeddings ? 0 : c.embedding) - c.position;
  return c;
}

std::int64_t tp_padded_vocab(std::int64_t vocab, int tp) {
  if (tp <= 1) return vocab;
  const std::int64_t multiple = 128LL * tp;
  return (vocab + multiple - 1) / multiple * multiple;
}

std::int64_t ModelSpec::tp_padded_vocab(int tp) const {
  return spec::tp_padded_vocab(vocab, tp);
}

namespace {

void find_rope_scaling_errors(const RopeScaling& r, std::vector<std::string>& errors) {
  if (!r.present()) return;
  if (!(r.factor >= 1)) errors.push_back(str_cat("rope_scaling.factor must be >= 1, got ", r.factor));
  if (r.yarn()) {
    if (!(r.beta_fast > 0) || !(r.beta_slow > 0)) {
      errors.push_back(
          str_cat("rope_scaling.beta_fast and beta_slow must be > 0, got ", r.beta_fast, " and ", r.beta_slow));
    }
    if (!(r.mscale >= 0) || !(r.mscale_all_dim >= 0) || !(r.attention_factor >= 0)) {
      errors.push_back(str_cat("rope_scaling.mscale, mscale_all_dim and attention_factor must be >= 0, got ", r.mscale,
                               ", ", r.mscale_all_dim, " and ", r.attention_factor));
    }
  } else if (!(r.low_freq_factor > 0) || !(r.high_freq_factor > r.low_freq_factor)) {
    errors.push_back(str_cat("rope_scaling needs 0 < low_freq_factor < high_freq_factor, got ", r.low_freq_factor,
                             " and ", r.high_freq_factor));
  }
  if (r.original_max_positions < 1) {
    errors.push_back(
        str_cat("rope_scaling.original_max_position_embeddings must be >= 1, got ", r.original_max_positions));
  }
}

void find_expert_errors(const ModelSpec& m, std::vector<std::string>& errors) {
  const ExpertSpec& e = m.moe;
  if (e.experts < 0) errors.push_back(str_cat("moe.experts must be >= 0, got ", e.experts));
  if (!e.present()) return;
  if (e.experts_per_token < 1 || e.experts_per_token > e.experts) {
    errors.push_back(
        str_cat("moe.experts_per_token (", e.experts_per_token, ") must be in 1..moe.experts (", e.experts, ")"));
  }
  if (e.expert_ffn_hidden < 1)
    errors.push_back(str_cat("moe.expert_ffn_hidden must be >= 1, got ", e.expert_ffn_hidden));
  if (e.shared_ffn_hidden < 0)
    errors.push_back(str_cat("moe.shared_ffn_hidden must be >= 0, got ", e.shared_ffn_hidden));
  if (e.layer_interval < 1) errors.push_back(str_cat("moe.layer_interval must be >= 1, got ", e.layer_interval));
  if (e.first_dense_layers < 0 || e.first_dense_layers >= m.layers) {
    errors.push_back(
        str_cat("moe.first_dense_layers (", e.first_dense_layers, ") must be in 0..layers - 1 (", m.layers - 1, ")"));
  }
  if (e.expert_groups < 1 || e.experts % e.expert_groups != 0 || e.groups_per_token < 1 ||
      e.groups_per_token > e.expert_groups) {
    errors.push_back(str_cat("moe.expert_groups (", e.expert_groups, ") must divide moe.experts (", e.experts,
                             ") and moe.groups_per_token (", e.groups_per_token, ") be in 1..moe.expert_groups"));
  }
  if (e.expert_groups >= 1 && e.experts % e.expert_groups == 0 && e.groups_per_token >= 1 &&
      static_cast<std::int64_t>(e.groups_per_token) * (e.experts / e.expert_groups) < e.experts_per_token) {
    errors.push_back(str_cat("moe.groups_per_token (", e.groups_per_token, ") groups of ", e.experts / e.expert_groups,
                             " experts cannot hold moe.experts_per_token (", e.experts_per_token, ")"));
  }
  if (e.groups_per_token > e.experts_per_token && e.experts_per_token >= 1) {
    errors.push_back(str_cat("moe.groups_per_token (", e.groups_per_token, ") must be at most moe.experts_per_token (",
                             e.experts_per_token, "): a chosen group is scored by its top k / groups_per_token"));
  }
  // DeepSeek-V3's balancing moves sigmoid scores; Megatron-Core refuses it with softmax.
  if (e.expert_bias && e.router != RouterScore::kSigmoid) {
    errors.push_back("moe.expert_bias needs moe.router \"sigmoid\" (DeepSeek-V3's balancing), got \"softmax\"");
  }
  if (!(e.top_k_scale > 0)) errors.push_back(str_cat("moe.top_k_scale must be > 0, got ", e.top_k_scale));
  if (e.capacity_factor != 0 && !(e.capacity_factor >= 1)) {
    errors.push_back(str_cat("moe.capacity_factor must be 0 (dropless) or >= 1, got ", e.capacity_factor));
  }
}

void find_latent_attention_errors(const ModelSpec& m, std::vector<std::string>& errors) {
  const LatentAttention& l = m.mla;
  if (l.kv_lora_rank < 0 || l.q_lora_rank < 0) {
    errors.push_back(
        str_cat("mla.kv_lora_rank and mla.q_lora_rank must be >= 0, got ", l.kv_lora_rank, " and ", l.q_lora_rank));
  }
  if (!l.present()) return;
  if (l.qk_nope_head_dim < 1 || l.qk_rope_head_dim < 1 || l.v_head_dim < 1) {
    errors.push_back(str_cat("mla.qk_nope_head_dim, qk_rope_head_dim and v_head_dim must be >= 1, got ",
                             l.qk_nope_head_dim, ", ", l.qk_rope_head_dim, " and ", l.v_head_dim));
  }
  if (m.kv_heads != m.heads) {  // its keys and values are per query head (Hugging Face's configs say so too)
    errors.push_back(str_cat("kv_heads (", m.kv_heads, ") must equal heads (", m.heads, ") with latent attention"));
  }
}

}  // namespace

std::vector<std::string> find_model_spec_errors(const ModelSpec& m) {
  std::vector<std::string> errors;
  auto positive = [&](const char* field, std::int64_t v) {
    if (v < 1) errors.push_back(str_cat(field, " must be >= 1, got ", v));
  };
  positive("layers", m.layers);
  positive("hidden", m.hidden);
  positive("heads", m.heads);
  positive("kv_heads", m.kv_heads);
  positive("ffn_hidden", m.ffn_hidden);
  positive("vocab", m.vocab);
  positive("max_seq_len", m.max_seq_len);
  if (m.explicit_head_dim == 0 && m.heads >= 1 && m.hidden >= 1 && m.hidden % m.heads != 0) {
    errors.push_back(str_cat("hidden (", m.hidden, ") must be divisible by heads (", m.heads, ")"));
  }
  if (m.heads >= 1 && m.kv_heads >= 1 && m.heads % m.kv_heads != 0) {
    errors.push_back(str_cat("heads (", m.heads, ") must be divisible by kv_heads (", m.kv_heads, ")"));
  }
  if (m.explicit_head_dim < 0) errors.push_back(str_cat("head_dim must be >= 1, got ", m.explicit_head_dim));
  find_expert_errors(m, errors);
  find_rope_scaling_errors(m.rope_scaling, errors);
  find_latent_attention_errors(m, errors);
  if (!errors.empty()) return errors;
  if (m.moe.present() && m.moe_layers_in(0, m.layers) == 0) {
    errors.push_back(str_cat("moe.layer_interval (", m.moe.layer_interval, ") and moe.first_dense_layers (",
                             m.moe.first_dense_layers, ") leave no MoE layer among ", m.layers, " layers"));
  }
  const auto sizes = m.moe.present() ? str_cat("), moe.experts (", m.moe.experts) : std::string();
  try {
    const std::int64_t total = m.param_counts().total;
    if (static_cast<double>(total) > kMaxModelParameters) {
      errors.push_back(str_cat("layers (", m.layers, "), hidden (", m.hidden, "), ffn_hidden (", m.ffn_hidden, sizes,
                               ") and vocab (", m.vocab, ") give ", static_cast<double>(total),
                               " parameters; cpt plans models of up to ", kMaxModelParameters));
    }
  } catch (const core::ConfigError&) {
    errors.push_back(str_cat("layers (", m.layers, "), hidden (", m.hidden, "), ffn_hidden (", m.ffn_hidden, sizes,
                             ") and vocab (", m.vocab, ") give more parameters than 64 bits count"));
  }
  return errors;
}

}  // namespace cpt::spec
