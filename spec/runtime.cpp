#include "spec/runtime.h"

#include <array>
#include <utility>

namespace cpt::spec {

namespace {

constexpr std::array<std::pair<Runtime, std::string_view>, 5> kNames{{{Runtime::kMegatron, "megatron"},
                                                                      {Runtime::kDeepSpeed, "deepspeed"},
                                                                      {Runtime::kFsdp, "fsdp"},
                                                                      {Runtime::kTorchtitan, "torchtitan"},
                                                                      {Runtime::kCpt, "cpt"}}};

}  // namespace

std::string to_string(Runtime runtime) {
  for (const auto& [value, name] : kNames) {
    if (value == runtime) return std::string(name);
  }
  return "?";
}

std::vector<std::string> runtime_names() {
  std::vector<std::string> names;
  for (const auto& [value, name] : kNames) names.emplace_back(name);
  return names;
}

std::optional<Runtime> runtime_from_string(std::string_view name) {
  for (const auto& [value, known] : kNames) {
    if (known == name) return value;
  }
  return std::nullopt;
}

}  // namespace cpt::spec
