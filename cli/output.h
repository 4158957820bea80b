#pragma once
// Small helpers shared by the subcommands for what they print on stdout.

#include <cstdint>
#include <string>

#include "core/json_reader.h"
#include "core/str_cat.h"
#include "spec/parallel_config.h"

namespace cpt::cli {

// Pretty JSON (2-space indent) and a newline on stdout.
void print_json(const core::Json& j);
// A parameter count for people: "8.03 B", "24.9 M", "52.9 K".
std::string format_count(std::int64_t n);
// A number with a fixed number of decimals (core/str_cat.h).
using core::fixed;
// One line describing a parallel configuration: "tp2 cp1 pp4v2 dp8 mb1 ga16 z1 selective sp offload".
std::string config_summary(const spec::ParallelConfig& p);

}  // namespace cpt::cli
