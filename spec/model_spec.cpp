#include "spec/model_spec.h"

#include "core/str_cat.h"

namespace cpt::spec {

using core::str_cat;

std::string to_string(MlpKind k) { return k == MlpKind::kSwiGLU ? "swiglu" : "gelu"; }
std::string to_string(NormKind k) { return k == NormKind::kRMSNorm ? "rmsnorm" : "layernorm"; }
std::string to_string(PositionKind k) { return k == PositionKind::kRoPE ? "rope" : "learned"; }

std::int64_t ModelSpec::norm_params() const {
  return norm == NormKind::kRMSNorm ? std::int64_t{hidden} : 2 * std::int64_t{hidden};
}

// cpt's count (docs/costmodel-reference.md §2.1), per block:
//   attention  q and o: 2·h·(a·d)   k and v: 2·h·(g·d)          (+ biases (a+2g)·d + h for GPT)
//   MLP        SwiGLU: 3·h·f        GeLU: 2·h·f                  (+ biases f + h for GPT)
//   norms      2 per block, h each (RMSNorm) or 2h (LayerNorm)
// plus the token embedding V·h, learned positions s·h, the final norm and an untied LM head V·h.
// For GPT (f = 4h, a = g) this is Narayanan et al. 2021 eq. (2): 12·L·h² + 13·L·h + (V + s)·h (+ 2h).
ParamCounts ModelSpec::param_counts() const {
  const std::int64_t h = hidden;
  const std::int64_t d = head_dim();
  const std::int64_t q_width = std::int64_t{heads} * d;
  const std::int64_t kv_width = std::int64_t{kv_heads} * d;
  ParamCounts c;
  c.attention_per_layer = 2 * h * q_width + 2 * h * kv_width;
  c.mlp_per_layer = (mlp == MlpKind::kSwiGLU ? 3 : 2) * h * ffn_hidden;
  if (has_linear_biases()) {
    c.attention_per_layer += q_width + 2 * kv_width + h;
    c.mlp_per_layer += ffn_hidden + h;
  } else if (qkv_bias) {
    c.attention_per_layer += q_width + 2 * kv_width;
  }
  c.norms_per_layer = 2 * norm_params();
  c.per_layer = c.attention_per_layer + c.mlp_per_layer + c.norms_per_layer;
  c.embedding = vocab * h;
  c.position = position == PositionKind::kLearned ? std::int64_t{max_seq_len} * h : 0;
  c.final_norm = norm_params();
  c.lm_head = tied_embeddings ? 0 : vocab * h;
  c.total = layers * c.per_layer + c.embedding + c.position + c.final_norm + c.lm_head;
  return c;
}

std::int64_t tp_padded_vocab(std::int64_t vocab, int tp) {
  if (tp <= 1) return vocab;
  const std::int64_t multiple = 128LL * tp;
  return (vocab + multiple - 1) / multiple * multiple;
}

std::int64_t ModelSpec::tp_padded_vocab(int tp) const { return spec::tp_padded_vocab(vocab, tp); }

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
  if (m.heads >= 1 && m.hidden >= 1 && m.hidden % m.heads != 0) {
    errors.push_back(str_cat("hidden (", m.hidden, ") must be divisible by heads (", m.heads, ")"));
  }
  if (m.heads >= 1 && m.kv_heads >= 1 && m.heads % m.kv_heads != 0) {
    errors.push_back(str_cat("heads (", m.heads, ") must be divisible by kv_heads (", m.kv_heads, ")"));
  }
  return errors;
}

}  // namespace cpt::spec
