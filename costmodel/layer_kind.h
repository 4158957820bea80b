#pragma once
// The two kinds of decoder layer the cost model prices apart (spec::ModelSpec::is_moe_layer): a
// dense MLP, or a router with routed (and any shared) experts in its place; and the layers a
// pipeline rank holds, by kind.

#include <cstdint>

namespace cpt::cost {

enum class LayerKind : std::uint8_t { kDense, kMoe };

// Layers a rank holds: `layers` blocks, `moe_layers` of them MoE, starting at `first_layer` (its
// first stage's first layer; the executor's gradient order visits them from there,
// costmodel/executor_buckets.h).
struct HeldLayers {
  double layers = 0;
  double moe_layers = 0;
  int first_layer = 0;  // its first chunk's first layer
  int pp_rank = 0;      // the pipeline rank (a stage: the rank it lives on)
  [[nodiscard]] double dense_layers() const { return layers - moe_layers; }
};

}  // namespace cpt::cost
