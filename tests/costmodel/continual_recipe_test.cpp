// The continual recipe priced (CostModelOptions::distill_teacher, ewc): the teacher's weights and
// forward, the KL, EWC's Fisher and anchor and its penalty.
#include <gtest/gtest.h>

#include <variant>

#include "costmodel/memory_model.h"
#include "costmodel/step_estimator.h"
#include "spec/hardware_catalog.h"
#include "spec/model_catalog.h"

namespace cpt::cost {
namespace {

const spec::ModelSpec& llama8b() {
  static const spec::ModelSpec m = spec::find_catalog_model("llama3-8b")->spec;
  return m;
}

Estimate estimate(const spec::ParallelConfig& p, int gpus, const CostModelOptions& o, bool exact = true) {
  const auto cluster = spec::HardwareCatalog::builtin().cluster_for_gpu("h100", gpus, "--gpu");
  CostModelOptions options = o;
  options.exact_pipeline = exact;
  const Evaluation e = evaluate(llama8b(), cluster, p, 4096, options);
  if (const auto* infeasible = std::get_if<Infeasible>(&e)) ADD_FAILURE() << infeasible->detail;
  return std::get<Estimate>(e);
}

CostModelOptions recipe(bool distill, bool ewc) {
  CostModelOptions o;
  o.distill_teacher = distill;
  o.ewc = ewc;
  return o;
}

// The teacher holds what the student holds in 16 bits, EWC two fp32 copies; ZeRO-3 shards both over
// its group (the teacher also gathers its running and prefetched blocks and its root unit).
TEST(ContinualRecipe, TeacherAndEwcStateAreTheStudentsParameters) {
  const spec::ParallelConfig replicated{.tp = 4, .dp = 2, .micro_batch = 1, .global_batch = 8, .zero_stage = 1};
  const Estimate plain = estimate(replicated, 8, recipe(false, false));
  const Estimate both = estimate(replicated, 8, recipe(true, true));
  const double held = static_cast<double>(llama8b().num_params()) / 4.0;  // tp 4: every matrix split (norms are few)
  EXPECT_EQ(plain.peak_memory().teacher.value(), 0);
  EXPECT_EQ(plain.peak_memory().ewc.value(), 0);
  EXPECT_NEAR(static_cast<double>(both.peak_memory().teacher.value()), 2 * held, 0.002 * 2 * held);
  EXPECT_NEAR(static_cast<double>(both.peak_memory().ewc.value()), 8 * held, 0.002 * 8 * held);
  // The student's own state is unchanged; the KL adds its fp32 tensors to the activations.
  EXPECT_EQ(both.peak_memory().weights, plain.peak_memory().weights);
  EXPECT_EQ(both.peak_memory().optimizer, plain.peak_memory().optimizer);
  EXPECT_GT(both.peak_memory().activations, plain.peak_memory().activations);

  const spec::ParallelConfig sharded{.dp = 8, .micro_batch = 1, .global_batch = 8, .zero_stage = 3};
  const Estimate z3 = estimate(sharded, 8, recipe(true, true));
  const Estimate z3_plain = estimate(sharded, 8, recipe(false, false));
  const double all = static_cast<double>(llama8b().num_params());
  EXPECT_NEAR(static_cast<double>(z3.peak_memory().ewc.value()), 8 * all / 8, 0.002 * all);
  // Sharded like the student's 16-bit weights under ZeRO-3: the same bytes.
  EXPECT_EQ(z3.peak_memory().teacher, z3_plain.peak_memory().weights);
}

// The teacher's forward runs on every microbatch: the step grows by at least the blocks' forward
// compute, shows it as `continual`, and the search's closed form agrees with the exact replay.
TEST(ContinualRecipe, TheTeachersForwardIsPricedOnEveryMicrobatch) {
  const spec::ParallelConfig p{.tp = 2, .dp = 2, .pp = 2, .micro_batch = 1, .global_batch = 8};
  const Estimate plain = estimate(p, 8, recipe(false, false));
  const Estimate distill = estimate(p, 8, recipe(true, false));
  EXPECT_EQ(plain.time.continual.value(), 0);
  EXPECT_GT(distill.time.continual.value(), 0);
  // One more forward per microbatch on top of forward + backward (2x forward): at least a quarter more.
  EXPECT_GT(distill.time.compute.value() + distill.time.continual.value(), 1.2 * plain.time.compute.value());
  EXPECT_GT(distill.time.total().value(), plain.time.total().value() + 0.9 * distill.time.continual.value());
  EXPECT_GT(distill.by_kind.gemm.value(), plain.by_kind.gemm.value());
  // Tensor parallelism: the teacher's collectives are counted and exposed like the forward's.
  EXPECT_GT(distill.calls_per_step.tp, plain.calls_per_step.tp);
  EXPECT_GT(distill.time.tp_comm.value(), plain.time.tp_comm.value());
  // Without a pipeline the search's closed form is the replay's arithmetic: equal to round-off.
  const spec::ParallelConfig flat{.tp = 4, .dp = 2, .micro_batch = 1, .global_batch = 8, .zero_stage = 1};
  const double exact = estimate(flat, 8, recipe(true, true)).time.total().value();
  EXPECT_NEAR(estimate(flat, 8, recipe(true, true), false).time.total().value(), exact, 1e-12 * exact);
}

// EWC's penalty is once per step: it adds the same time whatever the number of microbatches.
TEST(ContinualRecipe, EwcPenaltyIsOncePerStep) {
  const spec::ParallelConfig few{.dp = 8, .micro_batch = 1, .global_batch = 8, .zero_stage = 3};
  const spec::ParallelConfig many{.dp = 8, .micro_batch = 1, .global_batch = 64, .zero_stage = 3};
  const double few_penalty = estimate(few, 8, recipe(false, true)).time.continual.value();
  const double many_penalty = estimate(many, 8, recipe(false, true)).time.continual.value();
  EXPECT_GT(few_penalty, 0);
  EXPECT_DOUBLE_EQ(few_penalty, many_penalty);
}

}  // namespace
}  // namespace cpt::cost
