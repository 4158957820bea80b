#include "executor/train/step_optimizer.h"

#include "executor/parallel/tensor_parallel.h"

namespace cpt::exec {

bool ModelParallelNorm::counts(const std::string& name) const {
  return tp == nullptr || tp->rank() == 0 || tp_split_of(name) != TpSplit::kReplicated;
}

double ModelParallelNorm::sum_over_groups(double squares) const {
  auto t = torch::tensor({squares}, torch::kFloat64);
  for (auto* g : {tp, ep, pp}) {
    if (g != nullptr && g->size() > 1) g->all_reduce_sum(t)->wait();
  }
  return t.item<double>();
}

}  // namespace cpt::exec
