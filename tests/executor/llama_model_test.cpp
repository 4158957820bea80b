#include "executor/model/llama_model.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "core/error.h"
#include "executor_test_support.h"
#include "spec/model_catalog.h"

namespace cpt::exec {
namespace {

using testing::causal_batch;

spec::ModelSpec catalog(const std::string& name) {
  return spec::find_catalog_model(name).value().spec;
}

std::int64_t count(torch::nn::Module& m) {
  std::int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

TEST(LlamaModel, ParameterCountEqualsModelSpecExactly) {
  for (const char* name : {"tiny", "cpt-25m"}) {
    const auto spec = catalog(name);
    LlamaModel model(spec);
    EXPECT_EQ(count(*model), spec.num_params()) << name;
  }
  auto tied = catalog("tiny");
  tied.tied_embeddings = true;
  LlamaModel model(tied);
  EXPECT_EQ(count(*model), tied.num_params());
}

TEST(LlamaModel, ParameterNamesAreHuggingFacesWithoutModelPrefix) {
  LlamaModel model(catalog("tiny"));
  std::vector<std::string> names;
  for (const auto& p : model->named_parameters()) names.push_back(p.key());
  ASSERT_EQ(names.size(), 1u + 2u * 9u + 2u);
  EXPECT_EQ(names.front(), "embed_tokens.weight");
  EXPECT_EQ(names[1], "layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(names[9], "layers.0.post_attention_layernorm.weight");
  EXPECT_EQ(names[names.size() - 2], "norm.weight");
  EXPECT_EQ(names.back(), "lm_head.weight");
}

TEST(LlamaModel, StagesHoldTheirLayersWithGlobalNamesAndTheSameInitialWeights) {
  const auto spec = catalog("tiny");
  LlamaModel whole(spec);
  whole->init_weights(7);
  LlamaModel second(spec, StageShape{false, 1, 2, true});
  second->init_weights(7);
  const auto whole_params = whole->named_parameters();
  for (const auto& p : second->named_parameters()) {
    ASSERT_NE(whole_params.find(p.key()), nullptr) << p.key();
    EXPECT_TRUE(torch::equal(p.value(), whole_params[p.key()])) << p.key();
  }
  EXPECT_EQ(second->named_parameters().find("embed_tokens.weight"), nullptr);
  EXPECT_EQ(second->named_parameters().find("layers.0.mlp.up_proj.weight"), nullptr);
}

TEST(LlamaModel, InitialLossIsNearLogVocab) {
  const auto spec = catalog("tiny");
  LlamaModel model(spec);
  model->init_weights(1);
  const auto batch = causal_batch(2, 32, spec.vocab, 3);
  const double loss = model->loss_sum(batch).item<double>() / static_cast<double>(batch.loss_tokens);
  EXPECT_NEAR(loss, std::log(static_cast<double>(spec.vocab)), 0.1);
}

TEST(LlamaModel, IsCausalAndADocumentMaskIsolatesDocuments) {
  const auto spec = catalog("tiny");
  LlamaModel model(spec);
  model->init_weights(2);
  torch::NoGradGuard no_grad;
  auto batch = causal_batch(1, 16, spec.vocab, 4);
  const auto logits = model->forward(batch);
  // Changing token 10 changes no logit before position 10.
  auto changed = batch;
  changed.tokens = batch.tokens.clone();
  changed.tokens.index_put_({0, 10}, (batch.tokens.index({0, 10}).item<std::int64_t>() + 1) % spec.vocab);
  const auto logits2 = model->forward(changed);
  EXPECT_TRUE(torch::allclose(logits.narrow(1, 0, 10), logits2.narrow(1, 0, 10)));
  EXPECT_FALSE(torch::allclose(logits.narrow(1, 10, 1), logits2.narrow(1, 10, 1)));

  // Two documents [0, 6) and [6, 16) packed in one row, with positions restarting at 6: the second
  // document's logits equal those of the same tokens run alone.
  auto packed = batch;
  auto doc = torch::tensor({0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, torch::kInt64);
  packed.positions = torch::cat({torch::arange(6, torch::kInt64), torch::arange(10, torch::kInt64)}).unsqueeze(0);
  packed.mask = (doc.unsqueeze(0) == doc.unsqueeze(1))
                    .logical_and(torch::ones({16, 16}, torch::kBool).tril())
                    .view({1, 1, 16, 16});
  Batch alone{batch.tokens.narrow(1, 6, 10),
              batch.targets.narrow(1, 6, 10),
              torch::arange(10, torch::kInt64).unsqueeze(0),
              {},
              9,
              {}};
  const auto packed_logits = model->forward(packed);
  const auto alone_logits = model->forward(alone);
  EXPECT_TRUE(torch::allclose(packed_logits.narrow(1, 6, 10), alone_logits, 1e-5, 1e-5));
}

TEST(LlamaModel, RejectsGptStyleSpecsWithAClearError) {
  try {
    LlamaModel model(catalog("gpt3-175b"));
    FAIL();
  } catch (const core::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("LLaMA-family"), std::string::npos);
  }
}

}  // namespace
}  // namespace cpt::exec

namespace cpt::exec {
namespace {

// Names of every node of the autograd graph behind `t`.
std::string graph_names(const torch::Tensor& t) {
  std::string names;
  std::vector<torch::autograd::Node*> stack{t.grad_fn().get()};
  std::set<torch::autograd::Node*> seen;
  while (!stack.empty()) {
    auto* n = stack.back();
    stack.pop_back();
    if (n == nullptr || !seen.insert(n).second) continue;
    names += n->name() + " ";
    for (const auto& e : n->next_edges()) stack.push_back(e.function.get());
  }
  return names;
}

// Recomputation changes memory, never results: full and selective give the gradients of the plain
// model (on a packed batch with a document mask, and causally), and the graph holds the
// checkpoint nodes instead of the recomputed work.
TEST(ActivationCheckpoint, FullAndSelectiveGiveThePlainGradients) {
  const auto spec = catalog("tiny");
  auto batch = causal_batch(2, 24, spec.vocab, 9);
  auto masked = batch;
  const auto doc = torch::cat({torch::zeros({10}, torch::kInt64), torch::ones({14}, torch::kInt64)});
  masked.mask = (doc.unsqueeze(0) == doc.unsqueeze(1))
                    .logical_and(torch::ones({24, 24}, torch::kBool).tril())
                    .view({1, 1, 24, 24})
                    .expand({2, 1, 24, 24});
  for (const auto* b : {&batch, &masked}) {
    std::map<std::string, torch::Tensor> reference;
    double reference_loss = 0;
    for (auto mode : {spec::Recompute::kNone, spec::Recompute::kSelective, spec::Recompute::kFull}) {
      LlamaModel model(spec);
      model->init_weights(4);
      model->train();
      model->set_recompute(mode);
      const auto loss = model->loss_sum(*b);
      const auto names = graph_names(loss);
      EXPECT_EQ(names.find("BlockCheckpoint") != std::string::npos, mode == spec::Recompute::kFull) << names;
      EXPECT_EQ(names.find("AttentionCoreCheckpoint") != std::string::npos, mode == spec::Recompute::kSelective);
      EXPECT_EQ(names.find("SwiGLU") == std::string::npos && names.find("Silu") != std::string::npos,
                mode != spec::Recompute::kFull);  // full recompute keeps no MLP node in the graph
      loss.backward();
      if (mode == spec::Recompute::kNone) {
        reference_loss = loss.item<double>();
        for (const auto& p : model->named_parameters()) reference[p.key()] = p.value().grad().clone();
        continue;
      }
      EXPECT_DOUBLE_EQ(loss.item<double>(), reference_loss);
      for (const auto& p : model->named_parameters()) {
        ASSERT_TRUE(p.value().grad().defined()) << p.key();
        EXPECT_TRUE(torch::allclose(p.value().grad(), reference[p.key()], 1e-5, 1e-7))
            << spec::to_string(mode) << " " << p.key();
      }
    }
  }
}

// Under mixed precision (autocast, bf16) full recomputation must still train every block weight
// (the executor's GPU regime, which no other test reaches: CPU runs are fp32). Autocast caches each
// weight's bf16 copy; where a LibTorch cached one made in the checkpointed forward (grad mode off),
// the recomputation reused it and the weights got no gradient (activation_checkpoint.cpp guards
// against it). CPU autocast has the same cache as CUDA's, so this runs anywhere.
// bf16 autocast on `device_type` while alive, restored after (an assertion that fails in between
// must not leave autocast on for the tests that follow).
class ScopedAutocast {
 public:
  explicit ScopedAutocast(at::DeviceType device_type)
      : type_(device_type),
        was_enabled_(at::autocast::is_autocast_enabled(type_)),
        was_dtype_(at::autocast::get_autocast_dtype(type_)) {
    at::autocast::set_autocast_dtype(type_, at::kBFloat16);
    at::autocast::set_autocast_enabled(type_, true);
    at::autocast::increment_nesting();
  }
  ~ScopedAutocast() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(type_, was_enabled_);
    at::autocast::set_autocast_dtype(type_, was_dtype_);
  }
  ScopedAutocast(const ScopedAutocast&) = delete;
  ScopedAutocast& operator=(const ScopedAutocast&) = delete;

 private:
  at::DeviceType type_;
  bool was_enabled_;
  at::ScalarType was_dtype_;
};

void expect_every_block_weight_gets_a_gradient_under_full_recompute(const torch::Device& device) {
  const auto spec = catalog("tiny");
  const auto batch = causal_batch(2, 16, spec.vocab, 3).to(device);
  LlamaModel model(spec);
  model->init_weights(4);
  model->to(device);
  model->train();
  model->set_recompute(spec::Recompute::kFull);
  {
    ScopedAutocast autocast(device.type());
    ASSERT_TRUE(at::autocast::is_autocast_cache_enabled());
    model->loss_sum(batch).backward();
  }
  int checked = 0;
  for (const auto& p : model->named_parameters()) {
    if (p.key().find("layers.") == std::string::npos) continue;
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0) << p.key();
    ++checked;
  }
  EXPECT_EQ(checked, 2 * 9);  // two blocks of nine weights
}

TEST(ActivationCheckpoint, FullRecomputeUnderAutocastStillGivesEveryWeightItsGradient) {
  expect_every_block_weight_gets_a_gradient_under_full_recompute(torch::kCPU);
}

// The same on a GPU, where the executor trains under bf16 autocast (bench/gpu/session.sh runs the
// tests named Cuda*).
TEST(ActivationCheckpoint, CudaFullRecomputeUnderBf16AutocastStillGivesEveryWeightItsGradient) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  expect_every_block_weight_gets_a_gradient_under_full_recompute(torch::Device(torch::kCUDA, 0));
}

// On CUDA a document-masked GQA attention repeats K and V to the query heads (so SDPA takes a fused
// kernel, not the math one); on the CPU it does not. Both must give the same logits (fp32, no
// autocast).
TEST(LlamaModel, CudaDocumentMaskedGqaMatchesTheCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto spec = catalog("tiny");
  ASSERT_LT(spec.kv_heads, spec.heads);  // grouped-query attention
  LlamaModel model(spec);
  model->init_weights(2);
  torch::NoGradGuard no_grad;
  auto batch = causal_batch(1, 16, spec.vocab, 4);
  auto doc = torch::tensor({0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, torch::kInt64);
  batch.positions = torch::cat({torch::arange(6, torch::kInt64), torch::arange(10, torch::kInt64)}).unsqueeze(0);
  batch.mask = (doc.unsqueeze(0) == doc.unsqueeze(1))
                   .logical_and(torch::ones({16, 16}, torch::kBool).tril())
                   .view({1, 1, 16, 16});
  const auto on_cpu = model->forward(batch);
  const torch::Device cuda(torch::kCUDA, 0);
  model->to(cuda);
  const auto on_gpu = model->forward(batch.to(cuda)).cpu();
  EXPECT_TRUE(torch::allclose(on_gpu, on_cpu, 1e-3, 1e-3)) << (on_gpu - on_cpu).abs().max().item<double>();
}

}  // namespace
}  // namespace cpt::exec
