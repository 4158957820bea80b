#include "costmodel/runtime_profile.h"

namespace cpt::cost {

namespace {

// The fitted constants of the PyTorch runtimes (runtime_profile.h; bench/published_fit.cpp).
constexpr double kFsdpAttentionKernelScale = 0.52;
constexpr double kTorchMemoryTrafficScale = 1.92;
constexpr double kTorchFp8GemmScale = 0.76;

// DeepSpeed's default reduce_bucket_size (deepspeed/runtime/zero/config.py), in elements.
constexpr std::int64_t kDeepSpeedBucketElements = 500'000'000;

CostModelOptions pytorch(CostModelOptions o, double attention_kernel_scale) {
  o.context_parallel = ContextParallelKind::kAllGather;
  o.fp32_main_grads = false;
  o.bucket_elements = spec::kDefaultGradientBucketBytes / 4;  // torch DDP's 25 MiB of fp32
  o.attention_kernel_scale = attention_kernel_scale;
  o.memory_traffic_scale = kTorchMemoryTrafficScale;
  o.fp8_gemm_scale = kTorchFp8GemmScale;
  return o;
}

}  // namespace

CostModelOptions for_runtime(CostModelOptions o, spec::Runtime runtime) {
  // Megatron-LM's values first: each runtime states only where it departs from them.
  const CostModelOptions reference;
  o.runtime = runtime;
  o.dispatch = reference.dispatch;
  o.context_parallel = reference.context_parallel;
  o.fp32_main_grads = reference.fp32_main_grads;
  o.bucket_elements = reference.bucket_elements;
  o.attention_kernel_scale = reference.attention_kernel_scale;
  o.memory_traffic_scale = reference.memory_traffic_scale;
  o.fp8_gemm_scale = reference.fp8_gemm_scale;
  if (runtime != spec::Runtime::kMegatron) o.moe_dispatcher = spec::TokenDispatcher::kAllToAll;  // flex is Megatron's
  switch (runtime) {
    case spec::Runtime::kMegatron:
      return o;
    case spec::Runtime::kDeepSpeed:
      o.fp32_main_grads = false;
      o.bucket_elements = kDeepSpeedBucketElements;
      return o;
    case spec::Runtime::kFsdp:
      return pytorch(o, kFsdpAttentionKernelScale);
    case spec::Runtime::kTorchtitan:
      return pytorch(o, 1.0);
    case spec::Runtime::kCpt:
      return as_run_by_cpt_executor(o);
  }
  return o;
}

std::string describe(spec::Runtime runtime) {
  switch (runtime) {
    case spec::Runtime::kMegatron:
      return "megatron (Megatron-LM, Transformer Engine kernels)";
    case spec::Runtime::kDeepSpeed:
      return "deepspeed (Megatron-DeepSpeed kernels, DeepSpeed ZeRO)";
    case spec::Runtime::kFsdp:
      return "fsdp (PyTorch FSDP, eager modules)";
    case spec::Runtime::kTorchtitan:
      return "torchtitan (FSDP2, eager modules, SDPA attention)";
    case spec::Runtime::kCpt:
      return "cpt (cpt's own LibTorch executor)";
  }
  return "?";
}

}  // namespace cpt::cost
