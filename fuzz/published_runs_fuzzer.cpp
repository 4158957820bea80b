// libFuzzer harness: `cpt validate`'s reader of published runs and the check of each run, so
// that hostile dimensions, counts and batch sizes reach the cost model (planner/validation.h).
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "fuzz/fuzz_support.h"
#include "planner/validation.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream lines(std::string(reinterpret_cast<const char*>(data), size));
  cpt::fuzz::expect_an_answer([&] {
    for (const auto& run : cpt::planner::read_published_runs(lines, "fuzz.jsonl")) {
      (void)cpt::planner::check_published_run(run, cpt::cost::CostModelOptions{});
    }
  });
  return 0;
}
