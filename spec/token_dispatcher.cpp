#include "spec/token_dispatcher.h"

#include "core/enum_names.h"

namespace cpt::spec {

namespace {

constexpr core::EnumNames<TokenDispatcher, 2> kNames{
    {{{TokenDispatcher::kAllToAll, "alltoall"}, {TokenDispatcher::kFlex, "flex"}}}};

}  // namespace

std::string to_string(TokenDispatcher dispatcher) {
  return kNames.name_of(dispatcher);
}

std::vector<std::string> token_dispatcher_names() {
  return kNames.names();
}

bool dispatcher_runs(TokenDispatcher dispatcher, const ModelSpec& model, const ParallelConfig& parallel) {
  if (dispatcher == TokenDispatcher::kAllToAll) return true;
  return model.moe.present() && parallel.ep > 1 && parallel.etp == 1 && model.moe.capacity_factor == 0;
}

std::optional<TokenDispatcher> token_dispatcher_from_string(std::string_view name) {
  return kNames.value_of(name);
}

}  // namespace cpt::spec
