#pragma once
// One microbatch as the model consumes it. Built by the data loader on the CPU; moved to the
// training device with to().
#include <torch/torch.h>

#include <cstdint>

namespace cpt::exec {

// Target value that contributes no loss (padding, the position after a sequence's last token).
inline constexpr std::int64_t kIgnoreIndex = -100;

struct Batch {
  torch::Tensor tokens;          // [B, S] int64: input token ids
  torch::Tensor targets;         // [B, S] int64: the next token, or kIgnoreIndex
  torch::Tensor positions;       // [B, S] int64: position inside the token's own document (RoPE)
  torch::Tensor mask;            // undefined: plain causal attention; else bool [B, 1, S, S], true = may attend
  std::int64_t loss_tokens = 0;  // targets != kIgnoreIndex
  // Undefined: every position holds a token of the data. Else bool [B, S], false at the padding
  // that fills a row to the microbatch's width (padded packing): a mixture of experts leaves those
  // positions out of its routing statistics (model/moe_mlp.h).
  torch::Tensor real_tokens;

  [[nodiscard]] Batch to(const torch::Device& device) const {
    Batch b{tokens.to(device), targets.to(device), positions.to(device), {}, loss_tokens, {}};
    if (mask.defined()) b.mask = mask.to(device);
    if (real_tokens.defined()) b.real_tokens = real_tokens.to(device);
    return b;
  }
};

}  // namespace cpt::exec
