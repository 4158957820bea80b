// cost::evaluate_search (what the planner runs on every candidate: O(1) in pp per pipeline shape)
// gives the numbers of cost::evaluate in search mode (exact_pipeline = false, per stage and per
// rank), on every candidate of real search spaces, including uneven layer splits and calibrated
// device overheads, and mixtures of experts whose inner pipeline ranks hold different numbers of
// MoE layers.
#include <gtest/gtest.h>

#include <cmath>

#include "costmodel/step_estimator.h"
#include "costmodel/topology.h"
#include "planner/search_space.h"
#include "spec/hardware_catalog.h"
#include "spec/model_catalog.h"

namespace cpt::planner {
namespace {

const spec::HardwareCatalog& cat() {
  return spec::HardwareCatalog::builtin();
}

struct Counts {
  int feasible = 0, out_of_memory = 0, invalid = 0;
};

// Fails at the first candidate that differs; counts what was compared into `n`.
void compare_over_space(const spec::ModelSpec& model, const spec::ClusterSpec& cluster, int global_batch, int seq_len,
                        std::uint64_t stride, const cost::CostModelOptions& base, Counts& n) {
  const SearchSpace space(model, cluster, global_batch, Fixed{});
  const cost::Topology topology(cluster);
  cost::CostModelOptions o = base;
  o.exact_pipeline = false;
  for (std::uint64_t i = 0; i < space.size(); i += stride) {
    const auto p = space.at(i);
    const auto full = cost::evaluate(model, cluster, p, seq_len, o, topology);
    const auto fast = cost::evaluate_search(model, cluster, p, seq_len, o, topology);
    if (const auto* inf = std::get_if<cost::Infeasible>(&full)) {
      ASSERT_TRUE(fast.infeasible.has_value()) << "candidate " << i;
      ASSERT_EQ(*fast.infeasible, inf->reason) << "candidate " << i;
      (inf->reason == cost::InfeasibleReason::kOutOfMemory ? n.out_of_memory : n.invalid)++;
      continue;
    }
    ASSERT_FALSE(fast.infeasible.has_value()) << "candidate " << i << ": " << cost::to_string(*fast.infeasible);
    const auto& e = std::get<cost::Estimate>(full);
    const double total = e.time.total().value();
    const auto near = [&](core::Seconds a, core::Seconds b) { return std::abs(a.value() - b.value()) <= 1e-9 * total; };
    const auto& a = e.time;
    const auto& b = fast.time;
    ASSERT_TRUE(near(a.compute, b.compute) && near(a.recompute, b.recompute) && near(a.tp_comm, b.tp_comm) &&
                near(a.cp_comm, b.cp_comm) && near(a.pp_comm, b.pp_comm) && near(a.pp_bubble, b.pp_bubble) &&
                near(a.dp_comm, b.dp_comm) && near(a.optimizer, b.optimizer) && near(a.other, b.other))
        << "candidate " << i << ": step " << total << " s vs " << b.total().value() << " s";
    ASSERT_EQ(fast.worst_pp_rank, e.worst_pp_rank) << "candidate " << i;
    ASSERT_EQ(fast.peak_memory.total(), e.peak_memory().total()) << "candidate " << i;
    ASSERT_EQ(fast.peak_memory.activations, e.peak_memory().activations) << "candidate " << i;
    ASSERT_NEAR(fast.tokens_per_s_per_gpu / e.tokens_per_s_per_gpu, 1.0, 1e-9);
    ASSERT_NEAR(fast.mfu / e.mfu, 1.0, 1e-9);
    ASSERT_NEAR(fast.hfu / e.hfu, 1.0, 1e-9);
    ++n.feasible;
  }
}

TEST(SearchEvaluation, EqualsTheClosedFormEvaluationOnEveryCandidate) {
  // 80 layers on up to 64 pipeline stages, GQA, H100 nodes of 8, ZB-H1 and interleaving.
  Counts n70, n405, n175;
  compare_over_space(spec::find_catalog_model("llama3-70b")->spec, cat().cluster_for_gpu("h100", 64, "--gpu"), 256,
                     8192, 3, {}, n70);
  // 126 layers: uneven splits everywhere (the extra layers on the inner stages), 2 of 3 ranks heavier.
  compare_over_space(spec::find_catalog_model("llama3.1-405b")->spec, cat().cluster_for_gpu("h100", 512, "--gpu"), 512,
                     8192, 7, {}, n405);
  // GPT (learned positions, tied embeddings, GeLU), materialised attention scores, A100.
  cost::CostModelOptions no_flash;
  no_flash.flash_attention = false;
  compare_over_space(spec::find_catalog_model("gpt3-175b")->spec, cat().cluster_for_gpu("a100", 128, "--gpu"), 256,
                     2048, 5, no_flash, n175);
  // Priced as cpt's executor runs it (all-gather context parallelism, eager dispatch counts).
  Counts n70g;
  compare_over_space(spec::find_catalog_model("llama3-70b")->spec, cat().cluster_for_gpu("h100", 64, "--gpu"), 256,
                     8192, 5, cost::as_run_by_cpt_executor({}), n70g);
  // A mixture of experts with dense first layers and latent attention, expert parallelism searched.
  Counts nv3;
  compare_over_space(spec::find_catalog_model("deepseek-v2-lite")->spec, cat().cluster_for_gpu("h100", 32, "--gpu"),
                     128, 4096, 11, {}, nv3);
  // 3 dense layers of 61: inner ranks with more MoE layers than rank 1 (pp up to 64, interleaving).
  Counts nv3big;
  compare_over_space(spec::find_catalog_model("deepseek-v3")->spec, cat().cluster_for_gpu("h100", 512, "--gpu"), 1024,
                     4096, 29, {}, nv3big);
  // Priced as cpt's executor runs it: eager dispatch, its gradient buckets, resuming after each transfer.
  Counts nv3g;
  compare_over_space(spec::find_catalog_model("deepseek-v3")->spec, cat().cluster_for_gpu("h100", 512, "--gpu"), 1024,
                     4096, 31, cost::as_run_by_cpt_executor({}), nv3g);
  for (const auto& n : {n70, n405, n175, n70g, nv3, nv3big, nv3g}) {
    EXPECT_GT(n.feasible, 500);       // the comparison covered real plans,
    EXPECT_GT(n.out_of_memory, 100);  // the memory verdicts
    EXPECT_GT(n.invalid, 100);        // and the validity checks
  }
}

TEST(SearchEvaluation, AppliesCalibratedDeviceOverheads) {
  auto cluster = cat().cluster_for_gpu("h100", 16, "--gpu");
  cluster.node.gpu.kernel_overhead = core::microseconds(3.0);
  cluster.node.gpu.collective_overhead = core::microseconds(250.0);
  // A host that loses compute resuming from each blocking call: every rank's pipeline transfers too.
  cluster.node.compute_lost_resuming_from_call = core::microseconds(40.0);
  Counts n;
  compare_over_space(spec::find_catalog_model("llama3-8b")->spec, cluster, 64, 4096, 1, {}, n);
  EXPECT_GT(n.feasible, 500);
}

}  // namespace
}  // namespace cpt::planner
