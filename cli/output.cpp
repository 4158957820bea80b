#include "cli/output.h"

#include "core/str_cat.h"

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

namespace cpt::cli {

void print_json(const core::Json& j) {
  // Text from files (paths, decoded data) may hold bytes that are not UTF-8: replaced, not thrown.
  std::cout << j.dump(2, ' ', false, core::Json::error_handler_t::replace) << "\n";
}

std::string format_count(std::int64_t n) {
  const double v = static_cast<double>(n);
  if (n >= 1'000'000'000) return fixed(v / 1e9, 2) + " B";
  if (n >= 1'000'000) return fixed(v / 1e6, 1) + " M";
  if (n >= 1'000) return fixed(v / 1e3, 1) + " K";
  return std::to_string(n);
}

std::string config_summary(const spec::ParallelConfig& p) {
  using core::str_cat;
  return str_cat("tp", p.tp, " cp", p.cp, " pp", p.pp, p.virtual_stages > 1 ? str_cat("v", p.virtual_stages) : "",
                 p.ep > 1 || p.etp > 1 ? str_cat(" ep", p.ep, p.etp > 1 ? str_cat(" etp", p.etp) : "") : "", " dp",
                 p.dp, " mb", p.micro_batch, " ga", p.grad_accum(), " z", p.zero_stage, p.hybrid_shard ? "-hsdp" : "",
                 " ", spec::to_string(p.recompute), p.sequence_parallel ? " sp" : "",
                 p.offload != spec::Offload::kNone ? str_cat(" offload-", spec::to_string(p.offload)) : "",
                 p.axis_order[2] == spec::Axis::kPp ? " (pp before dp)" : "");
}

}  // namespace cpt::cli
