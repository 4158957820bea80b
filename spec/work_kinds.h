#pragma once
// The kinds of work a training step is split into, named once. The cost model's step by kind
// (cost::StepTimeByKind, `cpt estimate --json`'s time_by_kind_s) and a profiled step of the
// executor (exec::StepProfile::seconds_by_kind, executor/measure/op_kind.h) are keyed by these
// names, and `cpt compare` pairs the two by them. "other" is the rest of the step: memory-bound
// kernels, kernel dispatch, overlap slowdown (and, measured, the profiler's own cost).
#include <array>
#include <string_view>

namespace cpt::spec {

inline constexpr std::string_view kKindGemm = "gemm";
inline constexpr std::string_view kKindAttention = "attention";
inline constexpr std::string_view kKindLoss = "loss";
inline constexpr std::string_view kKindOptimizer = "optimizer";
inline constexpr std::string_view kKindCommunication = "communication";
inline constexpr std::string_view kKindOther = "other";

// Every kind, "other" last.
inline constexpr std::array<std::string_view, 6> kWorkKinds = {kKindGemm,      kKindAttention,     kKindLoss,
                                                                kKindOptimizer, kKindCommunication, kKindOther};

}  // namespace cpt::spec
