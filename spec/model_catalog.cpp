#include "spec/model_catalog.h"

#include <algorithm>
#include <cctype>

namespace cpt::spec {
namespace {

constexpr auto kSwiGLU = MlpKind::kSwiGLU;
constexpr auto kGelu = MlpKind::kGelu;
constexpr auto kRMS = NormKind::kRMSNorm;
constexpr auto kLN = NormKind::kLayerNorm;
constexpr auto kRoPE = PositionKind::kRoPE;
constexpr auto kLearned = PositionKind::kLearned;

ModelSpec decoder(const char* name, int layers, int hidden, int heads, int kv_heads, int ffn, std::int64_t vocab,
                  int seq, bool tied, MlpKind mlp, NormKind norm, PositionKind position) {
  ModelSpec s;
  s.name = name;
  s.layers = layers;
  s.hidden = hidden;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.ffn_hidden = ffn;
  s.vocab = vocab;
  s.mlp = mlp;
  s.norm = norm;
  s.position = position;
  s.tied_embeddings = tied;
  s.max_seq_len = seq;
  return s;
}

// LLaMA-style: untied unless stated.
ModelSpec llama(const char* name, int layers, int hidden, int heads, int kv_heads, int ffn, std::int64_t vocab, int seq,
                bool tied = false) {
  return decoder(name, layers, hidden, heads, kv_heads, ffn, vocab, seq, tied, kSwiGLU, kRMS, kRoPE);
}

// RoPE base and norm epsilon of the released config.json (they do not change the parameter count).
ModelSpec numerics(ModelSpec s, double rope_theta, double norm_eps) {
  s.rope_theta = rope_theta;
  s.norm_eps = norm_eps;
  return s;
}

// Llama 3.1's RoPE scaling (its config.json: factor 8, frequency factors 1 and 4, 8192 positions);
// Llama 3.2's text models use factor 32.
ModelSpec llama31_rope(ModelSpec s, double factor = 8.0) {
  s.rope_scaling = RopeScaling{factor, 1.0, 4.0, 8192};
  return s;
}

// DeepSeek-V2's and V3's YaRN (their config.json: factor 40 over an original 4096 positions,
// betas 32 and 1, mscale and mscale_all_dim equal: V2-Lite 0.707, V3 1.0).
ModelSpec deepseek_yarn(ModelSpec s, double mscale) {
  s.rope_scaling = RopeScaling{40.0, 1.0, 4.0, 4096, RopeScalingKind::kYarn, 32.0, 1.0, mscale, mscale, 0.0, true};
  return s;
}

// GPT-OSS's YaRN (its config.json: factor 32 over an original 4096 positions, betas 32 and 1, no
// mscale, truncate false: the correction range's bounds kept fractional).
ModelSpec gpt_oss_yarn(ModelSpec s) {
  s.rope_scaling = RopeScaling{32.0, 1.0, 4.0, 4096, RopeScalingKind::kYarn, 32.0, 1.0, 0.0, 0.0, 0.0, false};
  return s;
}

ModelSpec with_qkv_bias(ModelSpec s) {
  s.qkv_bias = true;
  return s;
}

// GPT-style as in Megatron-LM: f = 4h, MHA, learned positions, tied embeddings.
ModelSpec gpt(const char* name, int layers, int hidden, int heads, std::int64_t vocab, int seq) {
  return decoder(name, layers, hidden, heads, heads, 4 * hidden, vocab, seq, true, kGelu, kLN, kLearned);
}

// A mixture of experts on a LLaMA-style decoder: `experts` routed experts of width `expert_ffn`,
// `top_k` per token, every layer MoE unless `moe.first_dense_layers` says otherwise.
ModelSpec moe(ModelSpec s, int experts, int top_k, int expert_ffn, int shared_ffn = 0, int first_dense = 0) {
  s.moe.experts = experts;
  s.moe.experts_per_token = top_k;
  s.moe.expert_ffn_hidden = expert_ffn;
  s.moe.shared_ffn_hidden = shared_ffn;
  s.moe.first_dense_layers = first_dense;
  return s;
}

// Qwen3's attention: explicit head width and RMSNorm over each head's queries and keys.
ModelSpec qwen3_attention(ModelSpec s, int head_dim) {
  s.explicit_head_dim = head_dim;
  s.qk_norm = true;
  return s;
}

ModelSpec latent_attention(ModelSpec s, int q_lora_rank, int kv_lora_rank) {
  s.mla = LatentAttention{q_lora_rank, kv_lora_rank, 128, 64, 128};  // DeepSeek-V2/V3's head widths
  return s;
}

// DeepSeek-V3's router: sigmoid scores, the top 8 from the best 4 of 8 groups, weights x 2.5.
ModelSpec deepseek_v3_router(ModelSpec s) {
  s.moe.router = RouterScore::kSigmoid;
  s.moe.expert_groups = 8;
  s.moe.groups_per_token = 4;
  s.moe.expert_bias = true;
  s.moe.top_k_scale = 2.5;
  return s;
}

// Top-k router scores used as weights without renormalising them (norm_topk_prob false).
ModelSpec raw_top_k(ModelSpec s) {
  s.moe.normalize_top_k = false;
  return s;
}

ModelSpec with_head_dim(ModelSpec s, int head_dim) {
  s.explicit_head_dim = head_dim;
  return s;
}

constexpr const char* kHf = "config.json of the released checkpoint on the Hugging Face Hub";
constexpr const char* kNarayanan =
    "Narayanan et al. 2021, Efficient Large-Scale Language Model Training on GPU Clusters Using "
    "Megatron-LM (SC21), Table 1; vocabulary 51,200, sequence 2,048";
constexpr const char* kKorthikanti =
    "Korthikanti et al. 2022, Reducing Activation Recomputation in Large Transformer Models, Table 3; "
    "vocabulary 51,200, sequence 2,048";

// The mixtures of experts, through `add` (build's).
template <class Add>
void add_mixtures_of_experts(const Add& add) {
  // Mixtures of experts. Published counts are the model cards' (rounded: precision 0.1 B or 1 B);
  // "active" counts are in tests/spec/model_catalog_test.cpp.
  // Mixtral (Jiang et al. 2024, Mixtral of Experts): 8 experts, top 2, every layer.
  add(moe(numerics(llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 32768), 1e6, 1e-5), 8, 2, 14336),
      {"mixtral-8x7b-v0.1"}, std::string("mistralai/Mixtral-8x7B-v0.1 ") + kHf, 46'702'792'704, 1);
  add(moe(numerics(llama("mixtral-8x22b", 56, 6144, 48, 8, 16384, 32000, 65536), 1e6, 1e-5), 8, 2, 16384),
      {"mixtral-8x22b-v0.1"}, std::string("mistralai/Mixtral-8x22B-v0.1 ") + kHf, 140.6e9, 1e8);
  // Qwen2-MoE (Qwen team 2024): 64 experts, top 8, shared experts of width 20480, q/k/v biases.
  add(raw_top_k(moe(with_qkv_bias(numerics(llama("qwen2-57b-a14b", 28, 3584, 28, 4, 18944, 151936, 131072), 1e6, 1e-6)),
                    64, 8, 2560, 20480)),
      {"qwen2-moe-57b"}, std::string("Qwen/Qwen2-57B-A14B ") + kHf, 57.4e9, 1e8);
  // Qwen3-MoE (Qwen team 2025): 128 experts, top 8, head width 128, q/k norms.
  add(moe(qwen3_attention(numerics(llama("qwen3-30b-a3b", 48, 2048, 32, 4, 768, 151936, 40960), 1e6, 1e-6), 128), 128,
          8, 768),
      {"qwen3-30b"}, std::string("Qwen/Qwen3-30B-A3B ") + kHf, 30.5e9, 1e8);
  add(moe(qwen3_attention(numerics(llama("qwen3-235b-a22b", 94, 4096, 64, 4, 1536, 151936, 40960), 1e6, 1e-6), 128),
          128, 8, 1536),
      {"qwen3-235b"}, std::string("Qwen/Qwen3-235B-A22B ") + kHf, 235e9, 1e9);
  // DeepSeek-V2-Lite and V3 (DeepSeek-AI 2024): latent attention, shared experts, dense first layers.
  add(raw_top_k(moe(
          latent_attention(
              deepseek_yarn(numerics(llama("deepseek-v2-lite", 27, 2048, 16, 16, 10944, 102400, 163840), 10000.0, 1e-6),
                            0.707),
              0, 512),
          64, 6, 1408, 2 * 1408, 1)),
      {}, std::string("deepseek-ai/DeepSeek-V2-Lite ") + kHf, 15.7e9, 1e8);
  add(deepseek_v3_router(
          moe(latent_attention(
                  deepseek_yarn(
                      numerics(llama("deepseek-v3", 61, 7168, 128, 128, 18432, 129280, 163840), 10000.0, 1e-6), 1.0),
                  1536, 512),
              256, 8, 2048, 2048, 3)),
      {"deepseek-v3-base"},
      std::string("deepseek-ai/DeepSeek-V3 ") + kHf + " (without the multi-token prediction module)", 671e9, 1e9);
  // GPT-OSS (OpenAI 2025): head width 64, attention biases (q, k, v counted; the output's, the
  // experts' and the attention sinks are not: 0.03%), YaRN.
  add(moe(gpt_oss_yarn(with_qkv_bias(with_head_dim(
              numerics(llama("gpt-oss-20b", 24, 2880, 64, 8, 2880, 201088, 131072), 150000.0, 1e-5), 64))),
          32, 4, 2880),
      {}, std::string("openai/gpt-oss-20b ") + kHf, 20.91e9, 1e7 * 5);
  add(moe(gpt_oss_yarn(with_qkv_bias(with_head_dim(
              numerics(llama("gpt-oss-120b", 36, 2880, 64, 8, 2880, 201088, 131072), 150000.0, 1e-5), 64))),
          128, 4, 2880),
      {}, std::string("openai/gpt-oss-120b ") + kHf, 116.83e9, 1e8);
}

std::vector<CatalogModel> build() {
  std::vector<CatalogModel> c;
  auto add = [&](ModelSpec s, std::vector<std::string> aliases, std::string source, double params, double precision) {
    c.push_back(CatalogModel{std::move(s), std::move(aliases), std::move(source), params, precision});
  };
  // Test models (no published count; their counts are pinned by hand computations in the tests).
  add(llama("tiny", 2, 64, 4, 2, 176, 512, 128), {"cpt-tiny"}, "cpt test model", 0, 1);
  add(moe(llama("tiny-moe", 2, 64, 4, 2, 176, 512, 128), 4, 2, 64, 64, 0), {"cpt-tiny-moe"}, "cpt test model", 0, 1);
  add(llama("cpt-25m", 8, 384, 6, 2, 1024, 16000, 512), {},
      "cpt demonstration model for CPU runs (about 25M parameters)", 0, 1);
  // Meta LLaMA 2 (Touvron et al. 2023), meta-llama/Llama-2-*-hf. Exact counts: safetensors totals.
  add(llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096), {"llama-2-7b"},
      std::string("meta-llama/Llama-2-7b-hf ") + kHf, 6'738'415'616, 1);
  add(llama("llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096), {"llama-2-13b"},
      std::string("meta-llama/Llama-2-13b-hf ") + kHf, 13'015'864'320, 1);
  add(llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096), {"llama-2-70b"},
      std::string("meta-llama/Llama-2-70b-hf ") + kHf, 68'976'648'192, 1);
  // Meta Llama 3 / 3.1 (Grattafiori et al. 2024, The Llama 3 Herd of Models, Table 3).
  add(numerics(llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192), 500000.0, 1e-5), {"llama-3-8b"},
      std::string("meta-llama/Meta-Llama-3-8B ") + kHf, 8'030'261'248, 1);
  add(numerics(llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192), 500000.0, 1e-5), {"llama-3-70b"},
      std::string("meta-llama/Meta-Llama-3-70B ") + kHf, 70'553'706'496, 1);
  add(llama31_rope(numerics(llama("llama3.1-8b", 32, 4096, 32, 8, 14336, 128256, 131072), 500000.0, 1e-5)),
      {"llama-3.1-8b", "llama31-8b"}, std::string("meta-llama/Llama-3.1-8B ") + kHf, 8'030'261'248, 1);
  add(llama31_rope(numerics(llama("llama3.1-70b", 80, 8192, 64, 8, 28672, 128256, 131072), 500000.0, 1e-5)),
      {"llama-3.1-70b", "llama31-70b"}, std::string("meta-llama/Llama-3.1-70B ") + kHf, 70'553'706'496, 1);
  add(llama31_rope(numerics(llama("llama3.1-405b", 126, 16384, 128, 8, 53248, 128256, 131072), 500000.0, 1e-5)),
      {"llama3-405b", "llama-3.1-405b", "llama31-405b"}, std::string("meta-llama/Llama-3.1-405B ") + kHf,
      405'853'388'800, 1);
  // Meta Llama 3.2 text models (tied embeddings): small continual pre-training targets.
  add(llama31_rope(numerics(llama("llama3.2-1b", 16, 2048, 32, 8, 8192, 128256, 131072, true), 500000.0, 1e-5), 32.0),
      {"llama-3.2-1b", "llama32-1b"}, std::string("meta-llama/Llama-3.2-1B ") + kHf, 1'235'814'400, 1);
  add(llama31_rope(numerics(llama("llama3.2-3b", 28, 3072, 24, 8, 8192, 128256, 131072, true), 500000.0, 1e-5), 32.0),
      {"llama-3.2-3b", "llama32-3b"}, std::string("meta-llama/Llama-3.2-3B ") + kHf, 3'212'749'824, 1);
  // Mistral 7B v0.1 (Jiang et al. 2023, Table 1).
  add(llama("mistral-7b", 32, 4096, 32, 8, 14336, 32000, 32768), {"mistral-7b-v0.1"},
      std::string("mistralai/Mistral-7B-v0.1 ") + kHf, 7'241'732'096, 1);
  // Qwen2.5 (Qwen team 2024), with its q/k/v biases.
  add(with_qkv_bias(numerics(llama("qwen2.5-7b", 28, 3584, 28, 4, 18944, 152064, 131072), 1000000.0, 1e-6)),
      {"qwen25-7b"}, std::string("Qwen/Qwen2.5-7B ") + kHf, 7'615'616'512, 1);
  add(with_qkv_bias(numerics(llama("qwen2.5-72b", 80, 8192, 64, 8, 29568, 152064, 131072), 1000000.0, 1e-6)),
      {"qwen25-72b"}, std::string("Qwen/Qwen2.5-72B ") + kHf, 72'706'203'648, 1);
  add_mixtures_of_experts(add);
  // GPT-3 175B (Brown et al. 2020, Table 2.1): 96 layers, d_model 12288, 96 heads, context 2048,
  // GPT-2 BPE vocabulary of 50,257.
  add(gpt("gpt3-175b", 96, 12288, 96, 50257, 2048), {"gpt-3-175b"},
      "Brown et al. 2020, Language Models are Few-Shot Learners, Table 2.1", 175.0e9, 1e9);
  // The Megatron GPT family of Narayanan et al. 2021, Table 1 (counts given to 0.1 B).
  add(gpt("megatron-1.7b", 24, 2304, 24, 51200, 2048), {}, kNarayanan, 1.7e9, 1e8);
  add(gpt("megatron-3.6b", 30, 3072, 32, 51200, 2048), {}, kNarayanan, 3.6e9, 1e8);
  add(gpt("megatron-7.5b", 36, 4096, 32, 51200, 2048), {}, kNarayanan, 7.5e9, 1e8);
  add(gpt("megatron-18.4b", 40, 6144, 48, 51200, 2048), {}, kNarayanan, 18.4e9, 1e8);
  add(gpt("megatron-39.1b", 48, 8192, 64, 51200, 2048), {}, kNarayanan, 39.1e9, 1e8);
  add(gpt("megatron-76.1b", 60, 10240, 80, 51200, 2048), {}, kNarayanan, 76.1e9, 1e8);
  add(gpt("megatron-145.6b", 80, 12288, 96, 51200, 2048), {}, kNarayanan, 145.6e9, 1e8);
  add(gpt("megatron-310.1b", 96, 16384, 128, 51200, 2048), {}, kNarayanan, 310.1e9, 1e8);
  add(gpt("megatron-529.6b", 105, 20480, 128, 51200, 2048), {"megatron-530b"}, kNarayanan, 529.6e9, 1e8);
  add(gpt("megatron-1t", 128, 25600, 160, 51200, 2048), {"megatron-1008b"}, kNarayanan, 1008.0e9, 1e8);
  // Korthikanti et al. 2022, Table 3 (the 530B and 1T rows are the Narayanan models above).
  add(gpt("megatron-22b", 48, 6144, 64, 51200, 2048), {}, kKorthikanti, 22e9, 1e9);
  add(gpt("megatron-175b", 96, 12288, 96, 51200, 2048), {}, kKorthikanti, 175e9, 1e9);
  return c;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return s;
}

}  // namespace

const std::vector<CatalogModel>& model_catalog() {
  static const std::vector<CatalogModel> catalog = build();
  return catalog;
}

std::optional<CatalogModel> find_catalog_model(const std::string& name) {
  const auto key = lower(name);
  for (const auto& m : model_catalog()) {
    if (m.spec.name == key) return m;
    for (const auto& a : m.aliases) {
      if (a == key) return m;
    }
  }
  return std::nullopt;
}

}  // namespace cpt::spec
