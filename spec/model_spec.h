#pragma once
// ModelSpec: the architecture of a decoder-only transformer, as the cost model, the planner and the
// executor all see it. GPU-free; parameter counting lives here so that every layer of cpt counts
// the same parameters (tests/spec/model_spec_test.cpp pins it to published counts; the executor's
// built model must equal it exactly).
//
// Families covered:
//   LLaMA style  mlp=swiglu, norm=rmsnorm, position=rope, no linear biases, GQA via kv_heads
//   GPT style    mlp=gelu,   norm=layernorm, position=learned, linear biases (Megatron's
//                add_bias_linear default), ffn_hidden usually 4·hidden
// Linear biases are present exactly when mlp == gelu, except Qwen2's biases on the q, k and v
// projections only (qkv_bias).

#include <cstdint>
#include <string>
#include <vector>

namespace cpt::spec {

// Serialized as "swiglu" / "gelu". DO NOT CHANGE the strings.
enum class MlpKind { kSwiGLU, kGelu };
// Serialized as "rmsnorm" / "layernorm". DO NOT CHANGE the strings.
enum class NormKind { kRMSNorm, kLayerNorm };
// Serialized as "rope" / "learned". DO NOT CHANGE the strings.
enum class PositionKind { kRoPE, kLearned };

std::string to_string(MlpKind k);
std::string to_string(NormKind k);
std::string to_string(PositionKind k);

// Parameter counts by part, in elements.
struct ParamCounts {
  std::int64_t embedding = 0;         // vocab·hidden token embedding
  std::int64_t position = 0;          // max_seq_len·hidden for learned positions, else 0
  std::int64_t per_layer = 0;         // one transformer block
  std::int64_t attention_per_layer = 0;
  std::int64_t mlp_per_layer = 0;
  std::int64_t norms_per_layer = 0;
  std::int64_t final_norm = 0;
  std::int64_t lm_head = 0;           // 0 when tied to the embedding
  std::int64_t total = 0;
};

struct ModelSpec {
  std::string name;
  int layers = 0;           // transformer blocks
  int hidden = 0;           // model width h
  int heads = 0;            // query heads a; head_dim = hidden / heads
  int kv_heads = 0;         // key/value heads g (GQA); == heads for multi-head attention
  int ffn_hidden = 0;       // MLP inner width f (per branch for SwiGLU)
  std::int64_t vocab = 0;   // tokenizer vocabulary, unpadded
  MlpKind mlp = MlpKind::kSwiGLU;
  NormKind norm = NormKind::kRMSNorm;
  PositionKind position = PositionKind::kRoPE;
  bool tied_embeddings = false;  // LM head shares the embedding matrix
  int max_seq_len = 0;           // longest sequence the positions support
  bool qkv_bias = false;         // biases on the q, k and v projections only (Qwen2)
  // Numerics that leave the parameter layout (and so the cost model) unchanged but that the
  // executor needs to compute the same function as the released checkpoint.
  double rope_theta = 10000.0;   // RoPE base frequency (Llama 2: 1e4, Llama 3: 5e5)
  double norm_eps = 1e-5;        // epsilon inside RMSNorm / LayerNorm

  [[nodiscard]] int head_dim() const { return hidden / heads; }
  [[nodiscard]] bool has_linear_biases() const { return mlp == MlpKind::kGelu; }
  // Elements of one norm's parameters: weight (+ bias for LayerNorm).
  [[nodiscard]] std::int64_t norm_params() const;
  [[nodiscard]] ParamCounts param_counts() const;
  [[nodiscard]] std::int64_t num_params() const { return param_counts().total; }
  // The embedding / LM-head rows when split over `tp` ranks (spec::tp_padded_vocab below).
  [[nodiscard]] std::int64_t tp_padded_vocab(int tp) const;

  bool operator==(const ModelSpec&) const = default;
};

// The embedding / LM-head rows of a `vocab`-token vocabulary split over `tp` tensor-parallel ranks:
// the vocabulary itself at tp = 1 (Hugging Face shapes), else padded to a multiple of 128·tp
// (Megatron-LM's --make-vocab-size-divisible-by 128, times tp). The executor shards by it and the
// cost model counts it (Megatron also pads at tp = 1; cpt's executor keeps Hugging Face's shapes).
std::int64_t tp_padded_vocab(std::int64_t vocab, int tp);

// Every violated constraint of `m`, each a full sentence naming the fields and their values;
// empty when the spec is valid (positive sizes, hidden % heads == 0, heads % kv_heads == 0).
std::vector<std::string> find_model_spec_errors(const ModelSpec& m);

}  // namespace cpt::spec
