// libFuzzer harness: `cpt validate --vtrain`'s reader of vTrain's CSV files and the prediction of
// each row it accepts (planner/paper_runs.h). The first byte picks the file's form: even, the
// multi-node file (the model's size first); odd, the single-node one.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "fuzz/fuzz_support.h"
#include "planner/paper_runs.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const bool multi_node = data[0] % 2 == 0;
  std::istringstream lines(std::string(reinterpret_cast<const char*>(data + 1), size - 1));
  cpt::fuzz::expect_an_answer([&] {
    for (auto& row : cpt::planner::read_vtrain_csv(lines, "fuzz.csv", multi_node)) {
      cpt::planner::predict_vtrain(row, cpt::cost::CostModelOptions{});
    }
  });
  return 0;
}
