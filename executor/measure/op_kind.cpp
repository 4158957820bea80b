#include "executor/measure/op_kind.h"

#include <array>

namespace cpt::exec {

using namespace spec;  // the kinds

namespace {

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// The autograd engine names each node it runs "autograd::engine::evaluate_function: NodeName".
std::string_view node_name(std::string_view name) {
  constexpr std::string_view kEngine = "autograd::engine::evaluate_function: ";
  return name.starts_with(kEngine) ? name.substr(kEngine.size()) : name;
}

}  // namespace

std::string_view op_kind(std::string_view name) {
  if (name.starts_with(kCommWaitScopePrefix)) return kKindCommunication;
  if (name == kOptimizerScope || contains(name, "adamw") || contains(name, "AdamW")) return kKindOptimizer;
  const std::string_view n = node_name(name);
  // Attention: SDPA and its kernels (flash, efficient, math), forward and the backward nodes.
  for (const std::string_view p : {"scaled_dot_product", "ScaledDotProduct", "flash_attention", "efficient_attention"}) {
    if (contains(n, p)) return kKindAttention;
  }
  // The loss: ATen's cross-entropy and what backward runs for it; the vocabulary-parallel one.
  for (const std::string_view p : {"cross_entropy", "CrossEntropy", "log_softmax", "LogSoftmax", "nll_loss", "NllLoss"}) {
    if (contains(n, p)) return kKindLoss;
  }
  // Matrix products, forward (the model's matmul/linear and what they call) and backward nodes.
  static constexpr std::array<std::string_view, 6> kGemmOps = {"aten::matmul", "aten::linear", "aten::mm",
                                                               "aten::addmm",  "aten::bmm",    "aten::baddbmm"};
  for (const auto op : kGemmOps) {
    if (n == op) return kKindGemm;
  }
  for (const std::string_view node : {"MmBackward", "AddmmBackward", "BmmBackward", "LinearBackward"}) {
    if (n.starts_with(node)) return kKindGemm;
  }
  return {};
}

}  // namespace cpt::exec
