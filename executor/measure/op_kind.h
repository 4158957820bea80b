#pragma once
// The kind of work a profiled event is (spec/work_kinds.h, the cost model's StepTimeByKind's
// names), so that a profiled step can be put beside the prediction kind by kind (`cpt compare`).
//
// Rule (step_profiler.cpp applies it to the stepping thread's events): an event's own time (its
// duration less its children's) goes to the kind of its outermost classified enclosing event, or
// its own kind, or "other"; except that a communication wait is always "communication", wherever it
// is. So everything inside aten::scaled_dot_product_attention is attention (the math fallback's
// matmuls too), everything inside the optimizer's scope is optimizer (its all-gather waits apart).
#include <string_view>

#include "spec/work_kinds.h"

namespace cpt::exec {

// The record names the executor itself opens (RECORD_USER_SCOPE), each of a known kind.
inline constexpr char kOptimizerScope[] = "cpt optimizer step";        // train_step.cpp
inline constexpr char kCrossEntropyScope[] = "cpt cross_entropy forward";  // tensor_parallel.cpp
inline constexpr char kCommWaitScopePrefix[] = "comm wait ";          // timed_communicator.cpp

// The kind of an event by its name (an ATen operator, an autograd node
// "autograd::engine::evaluate_function: XBackward0", a scope above): one of spec::kWorkKinds but
// "other", or empty where the name says nothing (element-wise operators, views, custom nodes).
std::string_view op_kind(std::string_view name);

}  // namespace cpt::exec
