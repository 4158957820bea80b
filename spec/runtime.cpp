#include "spec/runtime.h"

#include "core/enum_names.h"

namespace cpt::spec {

namespace {

constexpr core::EnumNames<Runtime, 5> kNames{{{{Runtime::kMegatron, "megatron"},
                                               {Runtime::kDeepSpeed, "deepspeed"},
                                               {Runtime::kFsdp, "fsdp"},
                                               {Runtime::kTorchtitan, "torchtitan"},
                                               {Runtime::kCpt, "cpt"}}}};

}  // namespace

std::string to_string(Runtime runtime) {
  return kNames.name_of(runtime);
}

std::vector<std::string> runtime_names() {
  return kNames.names();
}

std::optional<Runtime> runtime_from_string(std::string_view name) {
  return kNames.value_of(name);
}

}  // namespace cpt::spec
