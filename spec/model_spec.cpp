#include "spec/model_spec.h"

#include "core/error.h"
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

ParamCounts ModelSpec::param_counts() const {
  const Count h{hidden}, d{head_dim()}, f{ffn_hidden}, v{vocab};
  const Count q_width = Count{heads} * d;
  const Count kv_width = Count{kv_heads} * d;
  Count attention = Count{2} * h * q_width + Count{2} * h * kv_width;
  Count mlp_params = Count{mlp == MlpKind::kSwiGLU ? 3 : 2} * h * f;
  if (has_linear_biases()) {
    attention = attention + q_width + Count{2} * kv_width + h;
    mlp_params = mlp_params + f + h;
  } else if (qkv_bias) {
    attention = attention + q_width + Count{2} * kv_width;
  }
  ParamCounts c;
  c.attention_per_layer = attention.value;
  c.mlp_per_layer = mlp_params.value;
  c.norms_per_layer = 2 * norm_params();
  c.per_layer = (attention + mlp_params + Count{c.norms_per_layer}).value;
  c.embedding = (v * h).value;
  c.position = position == PositionKind::kLearned ? (Count{max_seq_len} * h).value : 0;
  c.final_norm = norm_params();
  c.lm_head = tied_embeddings ? 0 : c.embedding;
  c.total = (Count{layers} * Count{c.per_layer} + Count{c.embedding} + Count{c.position} + Count{c.final_norm} +
             Count{c.lm_head})
                .value;
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
  if (errors.empty()) {
    try {
      (void)m.param_counts();
    } catch (const core::ConfigError&) {
      errors.push_back(str_cat("layers (", m.layers, "), hidden (", m.hidden, "), ffn_hidden (", m.ffn_hidden,
                               ") and vocab (", m.vocab, ") give more parameters than 64 bits count"));
    }
  }
  return errors;
}

}  // namespace cpt::spec
