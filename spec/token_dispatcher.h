#pragma once
// How a runtime moves a mixture of experts' tokens to their experts' ranks and back (Megatron-Core's
// moe_token_dispatcher_type). The all-to-all dispatcher permutes each (token, expert) pair and
// sends every pair to the expert's rank: a token routed to k experts crosses the network k times,
// twice to the same rank when two of its experts live there. The flex dispatcher (DeepEP,
// DeepSeek-AI 2025; HybridEP) sends a token once to each rank, and once over the network to each
// node, that holds one of its experts, forwarding it inside the node over NVLink. plan.json records
// which was priced ("priced_as").

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "spec/model_spec.h"
#include "spec/parallel_config.h"

namespace cpt::spec {

// Serialized as the strings of to_string. DO NOT CHANGE them.
enum class TokenDispatcher {
  kAllToAll,  // Megatron-Core's alltoall, torchtitan's default, cpt's executor
  kFlex,      // Megatron-Core's flex: DeepEP or HybridEP (expert-tp 1)
};

std::string to_string(TokenDispatcher dispatcher);  // "alltoall", "flex"
std::vector<std::string> token_dispatcher_names();  // in the order of the enum
// to_string's inverse; nullopt for any other string.
std::optional<TokenDispatcher> token_dispatcher_from_string(std::string_view name);

// Whether `dispatcher` runs as itself for `parallel` of `model`: flex where tokens leave the rank
// over ep (ep > 1), with expert-tp 1 (as priced: one group of ep ranks) and dropless (Megatron-Core's
// DeepEP refuses padding to a capacity); elsewhere a plan asking for flex is priced and exported
// with the all-to-all. The all-to-all always runs as itself.
[[nodiscard]] bool dispatcher_runs(TokenDispatcher dispatcher, const ModelSpec& model, const ParallelConfig& parallel);

}  // namespace cpt::spec
