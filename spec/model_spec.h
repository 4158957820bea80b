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
//
// Mixtures of experts (ExpertSpec) replace the MLP of some layers by a router, `experts` routed
// expert MLPs of which each token uses `experts_per_token`, and optionally shared experts every
// token uses; DeepSeek's multi-head latent attention (LatentAttention) replaces the q, k and v
// projections by low-rank ones. Layers differ then (dense or MoE): ParamCounts gives both kinds and
// how many of each; the cost model prices each kind apart, per stage (docs/costmodel.md, "Mixture of
// experts").

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

// Serialized as "softmax" / "sigmoid". DO NOT CHANGE the strings.
enum class RouterScore { kSoftmax, kSigmoid };

std::string to_string(MlpKind k);
std::string to_string(NormKind k);
std::string to_string(PositionKind k);
std::string to_string(RouterScore k);

// Serialized as "llama3" / "yarn". DO NOT CHANGE the strings.
enum class RopeScalingKind { kLlama3, kYarn };
std::string to_string(RopeScalingKind k);

// RoPE scaling of a released model (Hugging Face's rope_scaling); factor 0: none.
// Llama 3.1's ("rope_type": "llama3", as transformers' _compute_llama3_parameters and Meta's
// reference code): a rotary frequency whose wavelength 2π/ω exceeds original_max_positions /
// low_freq_factor is divided by `factor`, one shorter than original_max_positions /
// high_freq_factor is kept, and those between are interpolated, smooth = (original_max_positions /
// wavelength − low) / (high − low).
// YaRN's ("yarn"; Peng et al. 2023, arXiv:2309.00071, as transformers' _compute_yarn_parameters
// and DeepSeek's code): channel pair i of D rotary channels keeps its frequency below the
// correction dimension of beta_fast rotations over original_max_positions, is divided by `factor`
// above that of beta_slow, and ramps linearly between (the bounds floored and ceiled with
// `truncate`); cos and sin are multiplied by attention_factor (0: derived, mscale(factor, mscale) /
// mscale(factor, mscale_all_dim) where both are given, else mscale(factor, 1), with
// mscale(s, m) = 0.1·m·ln(s) + 1 for s > 1); latent attention also multiplies its softmax scale by
// mscale(factor, mscale_all_dim)² where mscale_all_dim is given (DeepSeek-V2/V3).
struct RopeScaling {
  double factor = 0;
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  int original_max_positions = 8192;
  RopeScalingKind kind = RopeScalingKind::kLlama3;
  double beta_fast = 32;
  double beta_slow = 1;
  double mscale = 0;          // 0: not given
  double mscale_all_dim = 0;  // 0: not given
  double attention_factor = 0;
  bool truncate = true;

  [[nodiscard]] bool present() const { return factor > 0; }
  [[nodiscard]] bool yarn() const { return present() && kind == RopeScalingKind::kYarn; }
  // YaRN's factor on cos and sin (1 without YaRN).
  [[nodiscard]] double yarn_attention_factor() const;
  // What YaRN multiplies latent attention's softmax scale by (1 without YaRN or mscale_all_dim).
  [[nodiscard]] double latent_softmax_factor() const;
  bool operator==(const RopeScaling&) const = default;
};

// YaRN's magnitude correction mscale(s, m) = 0.1·m·ln(s) + 1 for s > 1, else 1.
double yarn_mscale(double scale, double mscale);

// The mixture of experts of a model; experts == 0: a dense model (every other field unused).
// Layer i (from 0) is an MoE layer when i >= first_dense_layers and (i + 1) % layer_interval == 0
// (Qwen2-MoE's decoder_sparse_step; DeepSeek's first_k_dense_replace); the others keep the dense
// MLP of ModelSpec::ffn_hidden. Expert MLPs have the model's MLP kind (SwiGLU: 3 matrices).
struct ExpertSpec {
  int experts = 0;            // routed experts E per MoE layer
  int experts_per_token = 0;  // top-k: routed experts each token is sent to
  int expert_ffn_hidden = 0;  // inner width f_e of one routed expert
  int shared_ffn_hidden = 0;  // inner width of the shared experts together (0: none)
  int first_dense_layers = 0;
  int layer_interval = 1;
  RouterScore router = RouterScore::kSoftmax;
  // Whether a token's top-k router scores are divided by their sum to give its expert weights
  // (Mixtral, GPT-OSS, Qwen3-MoE, DeepSeek-V3; Hugging Face's norm_topk_prob) or used as they are
  // (Qwen2-MoE, DeepSeek-V2).
  bool normalize_top_k = true;
  // The expert weights' scale after the top k (DeepSeek-V3's routed_scaling_factor 2.5).
  double top_k_scale = 1;
  // Group-limited routing (DeepSeek's n_group and topk_group): the experts in `expert_groups`
  // equal groups, a token's top k drawn from its best `groups_per_token` groups. 1 and 1: none.
  int expert_groups = 1;
  int groups_per_token = 1;
  // DeepSeek-V3's auxiliary-loss-free balancing (arXiv:2412.19437, §2.1.2): a per-expert bias
  // added to the scores for choosing the top k only, moved each step against the expert's load
  // (Hugging Face's e_score_correction_bias; Megatron-Core's moe_router_enable_expert_bias).
  bool expert_bias = false;
  // Tokens one expert takes per microbatch, as a multiple of the balanced T·k/E; the rest are
  // dropped. 0: dropless (every token computed; the busiest expert sets the pace).
  double capacity_factor = 0;

  [[nodiscard]] bool present() const { return experts > 0; }
  bool operator==(const ExpertSpec&) const = default;
};

// DeepSeek's multi-head latent attention (DeepSeek-V2, arXiv:2405.04434, §2.1); kv_lora_rank == 0:
// absent. Queries: h → q_lora_rank → heads·(qk_nope + qk_rope) (or h → heads·(qk_nope + qk_rope)
// directly when q_lora_rank == 0); keys and values: h → kv_lora_rank + qk_rope, then kv_lora_rank →
// heads·(qk_nope + v); output heads·v → h. Each low-rank latent has an RMSNorm.
struct LatentAttention {
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;

  [[nodiscard]] bool present() const { return kv_lora_rank > 0; }
  [[nodiscard]] int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  bool operator==(const LatentAttention&) const = default;
};

// Parameter counts by part, in elements.
struct ParamCounts {
  std::int64_t embedding = 0;  // vocab·hidden token embedding
  std::int64_t position = 0;   // max_seq_len·hidden for learned positions, else 0
  std::int64_t per_layer = 0;  // one dense transformer block
  std::int64_t attention_per_layer = 0;
  std::int64_t mlp_per_layer = 0;    // the dense MLP
  std::int64_t norms_per_layer = 0;  // the block's norms (and Qwen3's q/k norms)
  // Of attention_per_layer, what tensor parallelism replicates: latent attention's down
  // projections to the latents and the latents' norms (Megatron-Core runs them on every rank).
  std::int64_t attention_replicated_per_layer = 0;
  std::int64_t final_norm = 0;
  std::int64_t lm_head = 0;  // 0 when tied to the embedding
  // Mixture of experts (0 for dense models): one MoE layer's router [E, h], shared experts and
  // routed experts; its whole block; the layers of each kind.
  std::int64_t router_per_layer = 0;
  std::int64_t shared_experts_per_layer = 0;
  std::int64_t routed_experts_per_layer = 0;
  std::int64_t per_moe_layer = 0;
  int dense_layers = 0;
  int moe_layers = 0;
  std::int64_t total = 0;
  // Parameters one token multiplies by: total less the routed experts it is not sent to and the
  // embedding lookups (OpenAI's and DeepSeek's convention for "active"; Qwen's cards include the
  // embedding).
  std::int64_t active = 0;
};

// The attention's projection widths, summed over heads (before tensor parallelism): queries and
// keys at the query-key head width, values and the output projection's input at the value width.
struct AttentionWidths {
  std::int64_t query = 0;
  std::int64_t key = 0;
  std::int64_t value = 0;
  std::int64_t output = 0;
  int qk_head_dim = 0;
  int v_head_dim = 0;
};

struct ModelSpec {
  std::string name;
  int layers = 0;          // transformer blocks
  int hidden = 0;          // model width h
  int heads = 0;           // query heads a; head_dim = hidden / heads
  int kv_heads = 0;        // key/value heads g (GQA); == heads for multi-head attention
  int ffn_hidden = 0;      // MLP inner width f (per branch for SwiGLU)
  std::int64_t vocab = 0;  // tokenizer vocabulary, unpadded
  MlpKind mlp = MlpKind::kSwiGLU;
  NormKind norm = NormKind::kRMSNorm;
  PositionKind position = PositionKind::kRoPE;
  bool tied_embeddings = false;  // LM head shares the embedding matrix
  int max_seq_len = 0;           // longest sequence the positions support
  bool qkv_bias = false;         // biases on the q, k and v projections only (Qwen2)
  // Numerics that leave the parameter layout (and so the cost model) unchanged but that the
  // executor needs to compute the same function as the released checkpoint.
  double rope_theta = 10000.0;  // RoPE base frequency (Llama 2: 1e4, Llama 3: 5e5)
  double norm_eps = 1e-5;       // epsilon inside RMSNorm / LayerNorm
  RopeScaling rope_scaling;     // Llama 3.1's long-context frequencies (none by default)
  // Width of one attention head when it is not hidden / heads (Qwen3, GPT-OSS); 0: hidden / heads.
  int explicit_head_dim = 0;
  bool qk_norm = false;  // RMSNorm over each head's queries and keys (Qwen3)
  ExpertSpec moe;
  LatentAttention mla;

  [[nodiscard]] int head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : hidden / heads; }
  // The channels RoPE rotates per head: the head width, or latent attention's qk_rope_head_dim.
  [[nodiscard]] int rotary_dim() const { return mla.present() ? mla.qk_rope_head_dim : head_dim(); }
  // Whether layer `layer` (from 0) is an MoE layer (ExpertSpec's rule).
  [[nodiscard]] bool is_moe_layer(int layer) const;
  [[nodiscard]] AttentionWidths attention_widths() const;
  // The share of the layers that are MoE layers (0 for a dense model): what the cost model's mean
  // layer weighs the MoE layer's terms by. O(1), no parameter counting.
  [[nodiscard]] double moe_layer_share() const { return static_cast<double>(moe_layers_in(0, layers)) / layers; }
  // MoE layers among layers [first, first + count).
  [[nodiscard]] int moe_layers_in(int first, int count) const;
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

// The most parameters a model may have: a thousand times the largest trained today, and few
// enough that its bytes, gradients and optimizer state (tens of bytes a parameter) stay far
// within the cost model's 64-bit byte counts.
inline constexpr double kMaxModelParameters = 1e15;

// Every violated constraint of `m`, each a full sentence naming the fields and their values;
// empty when the spec is valid (positive sizes, hidden % heads == 0 unless the head width is
// explicit, heads % kv_heads == 0, top-k within the experts, at least one MoE layer, latent
// dimensions all set, at most kMaxModelParameters parameters).
std::vector<std::string> find_model_spec_errors(const ModelSpec& m);

}  // namespace cpt::spec
