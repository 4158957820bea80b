#include "spec/token_dispatcher.h"

#include <array>
#include <utility>

namespace cpt::spec {

namespace {

constexpr std::array<std::pair<TokenDispatcher, std::string_view>, 2> kNames{
    {{TokenDispatcher::kAllToAll, "alltoall"}, {TokenDispatcher::kFlex, "flex"}}};

}  // namespace

std::string to_string(TokenDispatcher dispatcher) {
  for (const auto& [value, name] : kNames) {
    if (value == dispatcher) return std::string(name);
  }
  return "?";
}

std::vector<std::string> token_dispatcher_names() {
  std::vector<std::string> names;
  for (const auto& [value, name] : kNames) names.emplace_back(name);
  return names;
}

bool dispatcher_runs(TokenDispatcher dispatcher, const ModelSpec& model, const ParallelConfig& parallel) {
  if (dispatcher == TokenDispatcher::kAllToAll) return true;
  return model.moe.present() && parallel.ep > 1 && parallel.etp == 1 && model.moe.capacity_factor == 0;
}

std::optional<TokenDispatcher> token_dispatcher_from_string(std::string_view name) {
  for (const auto& [value, known] : kNames) {
    if (known == name) return value;
  }
  return std::nullopt;
}

}  // namespace cpt::spec
