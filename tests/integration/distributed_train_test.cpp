// The distributed executor against the single-process one, through the real `cpt train` with its
// own launcher (two or four ranks, Gloo on the CPU): data, tensor (with and without sequence
// parallelism), context and pipeline parallelism (1F1B, interleaved 1F1B) and their products give the same
// losses every step and the same final weights, to within the round-off the training itself
// amplifies (expect_same_run says how that is measured); checkpoints move between layouts; model
// state and communication calls are the cost model's. What happens when a job fails:
// job_failures_test.cpp.
//
// ctest runs the layout-equivalence tests twice: on the machine's own kernels and again on the AVX2
// paths of LibTorch, MKL and oneDNN (tests/CMakeLists.txt), so a machine of either instruction set
// exercises what the other will run.
#include "tests/integration/distributed_train_fixture.h"

namespace {

using namespace cpt::dist_testing;

// DP2 with replicated (ZeRO-0), sharded-optimizer (ZeRO-1) and sharded-gradient (ZeRO-2) updates,
// with full or selective recomputation, and with the optimizer state offloaded to the host (ZeRO-2
// and ZeRO-3): each
// the single-process run, step by step and in the final weights.
TEST_F(DistributedTrain, DataParallelLayoutsMatchTheSingleProcessRun) {
  reference("single", "o1");
  for (const std::string layout : {"dp2", "zero1-dp2", "zero2-dp2", "dp2-full-recompute", "zero1-dp2-selective",
                                   "zero2-dp2-offload", "zero3-dp2-offload"}) {
    const auto r = train(layout, "o-" + layout, 2);
    ASSERT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    expect_same_as_reference("o1", dir_ / ("o-" + layout), layout);
    // One summary line (rank 0's).
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  }
}

// Tensor parallelism (plain and sequence-parallel), pipelines (1F1B and interleaved 1F1B), ZeRO-3
// and hybrid sharding, and their products with data parallelism and each other: each the
// single-process run, with the cost model's communication calls.
TEST_F(DistributedTrain, TensorAndPipelineLayoutsMatchTheSingleProcessRun) {
  reference("single", "o1");
  reference("single4", "o1-4");
  for (const auto& [layout, procs, ref] :
       {std::tuple{"tp2", 2, "o1"}, std::tuple{"tp2-sp", 2, "o1"}, std::tuple{"pp2", 2, "o1"},
        std::tuple{"pp2-interleaved", 2, "o1-4"}, std::tuple{"tp2-zero2-dp2", 4, "o1-4"},
        std::tuple{"pp2-zero1-dp2", 4, "o1-4"}, std::tuple{"pp2-tp2-sp", 4, "o1-4"}, std::tuple{"zero3-dp2", 2, "o1"},
        std::tuple{"hsdp-dp4", 4, "o1"}, std::tuple{"zero3-dp2-tp2-full", 4, "o1-4"}}) {
    const auto out = std::string("o-") + layout;
    const auto r = train(layout, out, procs);
    EXPECT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    if (r.exit_code == 0) expect_same_as_reference(ref, dir_ / out, layout);
    if (r.exit_code == 0) expect_calls_of_the_cost_model(out, layout);
  }
}

// Context parallelism (each rank holds 2 of 4 sequence chunks, keys and values all-gathered per
// layer): alone, with ZeRO-1 over dp × cp, with ZeRO-3 and full recomputation, hybrid-sharded over
// the cp pair of each node and replicated across nodes, with tensor and sequence parallelism, with a
// pipeline and selective recomputation: each the single-process run, with the cost model's
// communication calls.
TEST_F(DistributedTrain, ContextParallelLayoutsMatchTheSingleProcessRun) {
  reference("single", "o1");
  for (const auto& [layout, procs] :
       {std::pair{"cp2", 2}, std::pair{"cp2-zero1-dp2", 4}, std::pair{"zero3-cp2", 2}, std::pair{"hsdp-cp2-dp2", 4},
        std::pair{"cp2-tp2-sp", 4}, std::pair{"cp2-pp2", 4}}) {
    const auto out = std::string("o-") + layout;
    const auto r = train(layout, out, procs);
    EXPECT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    if (r.exit_code == 0) expect_same_as_reference("o1", dir_ / out, layout);
    if (r.exit_code == 0) expect_calls_of_the_cost_model(out, layout);
  }
}

// KL distillation with the teacher sharded like the student — tensor-parallel (vocabulary-parallel
// log-softmaxes), pipelined (the teacher's stages on the student's ranks, its hidden states riding
// with the student's), both, context-parallel, and ZeRO-3 (its blocks gathered for its forward):
// the same losses, KL and weights as one process; the teacher's storage on each rank is the cost
// model's teacher memory exactly, the communication calls and bytes the step inventory's, and the
// kernels within 6% of the cost model's.
TEST_F(DistributedTrain, KlDistillationMatchesTheSingleProcessRunInEveryLayout) {
  reference("single", "o1");
  // The teacher: the reference run's final weights; the student starts from them too.
  std::ofstream(dir_ / "kl.json") << R"({"data": [{"name": "py", "path": "data"}], "steps": 20,
    "lr": {"schedule": "cosine", "peak": 0.003, "warmup_steps": 4}, "seed": 5, "threads": 1,
    "dp_bucket_mib": 0.1, "log_interval_steps": 0, "init_from": ")" +
                                         (dir_ / "o1/checkpoints/step_00000020").string() + R"(",
    "distill": {"lambda": 0.5}})";
  reference("single", "k1", "kl.json");
  expect_recipe_bytes_of_the_cost_model("k1", "teacher", "kl single");
  const auto kl = [&](const std::string& out) { return metric(dir_ / out / "metrics.jsonl", "kl"); };
  const auto reference_kl = kl("k1");
  ASSERT_EQ(reference_kl.size(), 20u);
  EXPECT_EQ(reference_kl.front(), 0.0);  // the student starts as the teacher
  EXPECT_GT(reference_kl.back(), 0.0);
  for (const auto& [layout, procs] : {std::pair{"tp2", 2}, std::pair{"pp2", 2}, std::pair{"pp2-tp2-sp-tiny", 4},
                                      std::pair{"cp2", 2}, std::pair{"zero3-dp2", 2}}) {
    const auto out = std::string("k-") + layout;
    const auto r = train(layout, out, procs, "kl.json");
    EXPECT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    if (r.exit_code != 0) continue;
    if (std::string(layout).starts_with("zero3")) {
      EXPECT_NE(r.err.find("teacher sharded (ZeRO-3) over 2 ranks"), std::string::npos) << r.err;
    }
    expect_same_as_reference("k1", dir_ / out, std::string("kl ") + layout);
    expect_recipe_bytes_of_the_cost_model(out, "teacher", std::string("kl ") + layout);
    expect_calls_of_the_cost_model(out, std::string("kl ") + layout);
    expect_kernels_of_the_cost_model(out, std::string("kl ") + layout);
    const auto k = kl(out);
    ASSERT_EQ(k.size(), reference_kl.size()) << layout;
    for (std::size_t i = 1; i < k.size(); ++i)
      EXPECT_NEAR(k[i] / reference_kl[i], 1.0, 1e-4) << layout << ": step " << i;
  }
}

// EWC under tensor, data, context and pipeline parallelism: the Fisher estimated by replica 0's
// ranks together (under cp each back-propagates its tokens and the gradients are summed over cp;
// under pp every sequence goes forward and backward through the stages; under ZeRO-3 and hybrid
// sharding the penalty works on the shards) and
// written whole, each rank's penalty on its shards (replicated norms on every rank); the same
// losses (penalty included) and weights as the single process; the Fisher and anchor storage on
// each rank is the cost model's EWC memory exactly (under ZeRO-3 only the shards' slices: the
// whole tensors used to stay beside them, 8 bytes a parameter more); the communication calls and
// bytes are the step inventory's (the penalty's sums included).
TEST_F(DistributedTrain, EwcInEveryLayoutMatchesTheSingleProcessRun) {
  const auto d = dir_.string();
  std::ofstream(dir_ / "ewc.json") << R"({"data": [{"name": "py", "path": "data"}], "steps": 20,
    "lr": {"schedule": "cosine", "peak": 0.003, "warmup_steps": 4}, "seed": 5, "threads": 1,
    "dp_bucket_mib": 0.1, "log_interval_steps": 0,
    "ewc": {"lambda": 5000, "data": {"name": "py", "path": "data"}, "sequences": 8}})";
  reference("single", "e1", "ewc.json");
  expect_recipe_bytes_of_the_cost_model("e1", "ewc", "ewc single");
  const auto penalties = [&](const std::string& out) { return metric(dir_ / out / "metrics.jsonl", "ewc_penalty"); };
  const auto single = penalties("e1");
  ASSERT_EQ(single.size(), 20u);
  EXPECT_GT(single.back(), 0.0);
  for (const auto& [layout, procs] :
       {std::pair{"tp2", 2}, std::pair{"dp2", 2}, std::pair{"cp2", 2}, std::pair{"cp2-zero1-dp2", 4},
        std::pair{"pp2", 2}, std::pair{"pp2-tp2-sp-tiny", 4}, std::pair{"zero3-dp2", 2}, std::pair{"hsdp-dp4", 4}}) {
    const auto out = std::string("e-") + layout;
    const auto r = train(layout, out, procs, "ewc.json");
    EXPECT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    if (r.exit_code != 0) continue;
    expect_same_as_reference("e1", dir_ / out, std::string("ewc ") + layout);
    expect_recipe_bytes_of_the_cost_model(out, "ewc", std::string("ewc ") + layout);
    expect_calls_of_the_cost_model(out, std::string("ewc ") + layout);
    const auto p = penalties(out);
    ASSERT_EQ(p.size(), single.size()) << layout;
    for (std::size_t i = 1; i < p.size(); ++i) EXPECT_NEAR(p[i] / single[i], 1.0, 1e-3) << layout << ": step " << i;
  }
}

// Model-state storage per rank, as measured.json reports it (each storage counted once), equals the
// cost model's weights, gradients and optimizer state for the same layout in its fp32 regime
// (4 + 4 + 8 bytes per parameter held), exactly: replicated data parallelism (gradients live in
// the all-reduce buckets), ZeRO-1, tensor and pipeline parallelism, and ZeRO-3 (the step's peaks of
// weights and gradients: shards, whole root, running and prefetched block, one reduction in
// flight). The kernels the cost model counts for the executor are within 6% of those the
// executor dispatched (`cpt compare`'s kernels_per_step), with sequence parallelism and
// recomputation too; its communication calls per group are the executor's exactly.
TEST_F(DistributedTrain, ModelStateBytesEqualTheCostModel) {
  const auto two_steps = short_config(2);
  for (const auto& [layout, procs, flags] :
       {std::tuple{"single", 1, "--gpus 1"}, std::tuple{"dp2", 2, "--gpus 2 --dp 2"},
        std::tuple{"zero1-dp2", 2, "--gpus 2 --dp 2 --zero 1"}, std::tuple{"tp2", 2, "--gpus 2 --tp 2"},
        std::tuple{"pp2", 2, "--gpus 2 --pp 2"}, std::tuple{"zero3-dp2", 2, "--gpus 2 --dp 2 --zero 3"},
        std::tuple{"zero3-dp4", 4, "--gpus 4 --dp 4 --zero 3"},
        std::tuple{"cp2-zero1-dp2", 4, "--gpus 4 --cp 2 --dp 2 --zero 1"},
        std::tuple{"tp2-sp", 2, "--gpus 2 --tp 2 --sequence-parallel"},
        std::tuple{"dp2-full-recompute", 2, "--gpus 2 --dp 2 --recompute full"},
        std::tuple{"zero1-dp2-selective", 2, "--gpus 2 --dp 2 --zero 1 --recompute selective"}}) {
    const auto r = train(layout, std::string("mem-") + layout, procs, two_steps);
    ASSERT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    expect_model_state_of_the_cost_model(std::string("mem-") + layout, procs, "tiny", flags, layout);
  }
}

// An extended vocabulary (`cpt checkpoint extend-vocab`, 512 -> 549 tokens: not a multiple of 128·tp)
// is priced as the executor holds it: `cpt plan --config` takes it from TRAIN.json's init_from,
// and a tp2 run from it holds the cost model's weight, gradient and optimizer bytes exactly (tp
// pads 549 rows to 768: rank 1 holds 165 real rows and 219 of padding).
TEST_F(DistributedTrain, AnExtendedVocabularyIsPricedAsTheExecutorHoldsIt) {
  const auto d = dir_.string();
  const auto base = train("single", "ext-base", 1, short_config(2));
  ASSERT_EQ(base.exit_code, 0) << base.err;
  const auto ext = sh(cpt_binary() + " checkpoint extend-vocab " + d +
                          "/ext-base/checkpoints/step_00000002 --vocab 549 " + d + "/ext-549",
                      dir_);
  ASSERT_EQ(ext.exit_code, 0) << ext.err;
  std::ofstream(dir_ / "ext.json") << R"({"data": [{"name": "py", "path": "data"}], "steps": 2, "seed": 5,
    "threads": 1, "log_interval_steps": 0, "init_from": ")"
                                   << d << R"(/ext-549"})";
  const auto planned = sh(cpt_binary() + " plan --model tiny --gpu h100 --gpus 2 --global-batch 8 --seq-len 64 " +
                              "--fix tp=2,micro_batch=2 --config " + d + "/ext.json --out " + d + "/ext-tp2",
                          dir_);
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  EXPECT_NE(planned.out.find("vocabulary: 549 tokens, as TRAIN.json's init_from holds it (tiny has 512)"),
            std::string::npos)
      << planned.out;
  EXPECT_EQ(nlohmann::json::parse(slurp(dir_ / "ext-tp2" / "plan.json"))["model"]["vocab"].get<int>(), 549);
  const auto r = train("ext-tp2", "mem-ext-tp2", 2, "ext.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_model_state_of_the_cost_model("mem-ext-tp2", 2, d + "/ext-549", "--gpus 2 --tp 2", "extended vocabulary");
}

// ZeRO-2 keeps its gradient shard and the buckets being reduced, not a full gradient buffer: with
// 0.1 MiB buckets on tiny (six buckets, the embedding and the head alone in theirs) its gradients
// are the cost model's for the executor's buckets (`cpt compare` reads the run's bucket size)
// within 5%, and below what ZeRO-1 holds (every gradient, 4Ψ); weights and optimizer state exact.
TEST_F(DistributedTrain, ZeroTwoHoldsItsShardAndTheBucketsInFlight) {
  const auto d = dir_.string();
  const auto r = train("zero2-dp2", "buckets-zero2-dp2", 2, short_config(2));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto cmp =
      sh(cpt_binary() + " compare " + d + "/buckets-zero2-dp2 --json --log " + d + "/fidelity.jsonl", dir_);
  ASSERT_EQ(cmp.exit_code, 0) << cmp.err;
  const auto f = nlohmann::json::parse(cmp.out)["fields"];
  EXPECT_LE(std::abs(f["grads_bytes"]["rel_err"].get<double>()), 0.05) << f["grads_bytes"];
  EXPECT_EQ(f["weights_bytes"]["rel_err"].get<double>(), 0.0);
  EXPECT_EQ(f["optimizer_bytes"]["rel_err"].get<double>(), 0.0);
  // ZeRO-1 holds every gradient: 4 bytes per parameter, the weights' bytes.
  EXPECT_LT(f["grads_bytes"]["measured"].get<double>(), f["weights_bytes"]["measured"].get<double>());
}

// `--profile-step S` profiles step S on every rank (measure/step_profiler.h): each writes a Chrome
// trace and its time by operator, where the model's matrix products, backward's nodes and the
// data-parallel waits appear with their calls, inside the step's own time; the profiled run
// trains exactly as an unprofiled one.
TEST_F(DistributedTrain, ProfilingAStepWritesEachRanksTraceAndOperatorTimes) {
  const auto d = dir_.string();
  const auto three_steps = short_config(3);
  const auto plain = train("dp2", "unprofiled-dp2", 2, three_steps);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const auto r = train("dp2", "profiled-dp2", 2, three_steps, " --profile-step 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("ERROR"), std::string::npos) << r.err;
  EXPECT_EQ(losses(dir_ / "profiled-dp2/metrics.jsonl"), losses(dir_ / "unprofiled-dp2/metrics.jsonl"));
  const auto step_s = metric(dir_ / "profiled-dp2/metrics.jsonl", "step_time_s").at(1);
  for (int rank = 0; rank < 2; ++rank) {
    const auto stem = dir_ / "profiled-dp2/profile" / ("step_1.rank_" + std::to_string(rank));
    const auto trace = nlohmann::json::parse(slurp(stem.string() + ".trace.json"));
    EXPECT_GT(trace.at("traceEvents").size(), 100u) << rank;
    const auto ops = nlohmann::json::parse(slurp(stem.string() + ".ops.json"));
    EXPECT_EQ(ops["step"], 1);
    EXPECT_EQ(ops["rank"], rank);
    std::map<std::string, std::int64_t> calls;
    for (const auto& o : ops["by_name"]) {
      EXPECT_GT(o["seconds"].get<double>(), 0) << o;
      calls[o["name"].get<std::string>()] = o["calls"].get<std::int64_t>();
    }
    // tiny: 2 layers of 7 projections, and the head; two microbatches of 2 per rank.
    EXPECT_EQ(calls["aten::matmul"], 30) << ops["by_name"];
    EXPECT_EQ(calls["autograd::engine::evaluate_function: MmBackward0"], 30) << ops["by_name"];
    // The replicated gradients' buckets (0.1 MiB: six) and the loss's all-reduce are waited for.
    EXPECT_GE(calls["comm wait dp/0"], 6) << ops["by_name"];
    const double top = ops["top_level_s"].get<double>(), span = ops["span_s"].get<double>();
    EXPECT_GT(top, 0.3 * span);
    EXPECT_LE(top, span * (1 + 1e-9));
    // Each rank times its own step; rank 0's is the one in metrics.jsonl.
    const double own_step_s = ops["step_time_s"].get<double>();
    if (rank == 0) {
      EXPECT_DOUBLE_EQ(own_step_s, step_s);
    }
    EXPECT_LE(span, own_step_s * 1.01);
    // Its time by kind of work (measure/op_kind.h) adds up to the stepping thread's.
    double kinds = 0;
    for (const auto& [kind, seconds] : ops["seconds_by_kind"].items()) kinds += seconds.get<double>();
    EXPECT_NEAR(kinds, top, 1e-6 * top) << ops["seconds_by_kind"];
    EXPECT_GT(ops["seconds_by_kind"]["gemm"].get<double>(), 0);
    EXPECT_GT(ops["seconds_by_kind"]["loss"].get<double>(), 0);
    EXPECT_GT(ops["seconds_by_kind"]["optimizer"].get<double>(), 0);
    EXPECT_GT(ops["seconds_by_kind"]["communication"].get<double>(), 0);
  }
  // `cpt compare` puts the profiled kinds beside the cost model's, whose kinds add up to its step.
  const auto cmp = sh(cpt_binary() + " compare " + d + "/profiled-dp2 --json --log " + d + "/fidelity.jsonl", dir_);
  ASSERT_EQ(cmp.exit_code, 0) << cmp.err;
  const auto f = nlohmann::json::parse(cmp.out)["fields"];
  double predicted = 0;
  for (const char* kind : {"gemm", "attention", "loss", "optimizer", "communication", "other"}) {
    const auto key = std::string("kind_") + kind + "_s";
    ASSERT_TRUE(f.contains(key)) << key << ": " << f;
    predicted += f[key]["predicted"].get<double>();
  }
  EXPECT_NEAR(predicted, f["step_time_s"]["predicted"].get<double>(), 1e-9);
  EXPECT_GT(f["kind_gemm_s"]["measured"].get<double>(), 0);
  EXPECT_GT(f["kind_communication_s"]["predicted"].get<double>(), 0);
  // A pipeline posts its sends asynchronously (records that do not nest): every kind stays
  // non-negative and the kinds still add up, on both stages.
  const auto pp = train("pp2", "profiled-pp2", 2, three_steps, " --profile-step 1");
  ASSERT_EQ(pp.exit_code, 0) << pp.err;
  for (int rank = 0; rank < 2; ++rank) {
    const auto ops = nlohmann::json::parse(
        slurp(dir_ / "profiled-pp2/profile" / ("step_1.rank_" + std::to_string(rank) + ".ops.json")));
    double kinds = 0;
    for (const auto& [kind, seconds] : ops["seconds_by_kind"].items()) {
      EXPECT_GE(seconds.get<double>(), 0) << rank << ": " << kind;
      kinds += seconds.get<double>();
    }
    EXPECT_NEAR(kinds, ops["top_level_s"].get<double>(), 1e-6) << rank;
    EXPECT_GT(ops["seconds_by_kind"]["communication"].get<double>(), 0) << rank;
    EXPECT_LE(ops["top_level_s"].get<double>(), ops["span_s"].get<double>() * (1 + 1e-9)) << rank;
  }
}

// Checkpoints hold whole tensors, so a run moves between layouts: pp2 x tp2 with sequence
// parallelism into tp2 x ZeRO-2 dp2; ZeRO-2 dp2 into a single process (the sharded state is
// gathered); a single process into ZeRO-3 (the state is cut into shards) and into ZeRO-2 with the
// optimizer state offloaded (the host master follows the loaded weights). Each ends where the
// uninterrupted single-process run ends.
TEST_F(DistributedTrain, CheckpointsResumeInAnotherLayout) {
  reference("single", "o1");
  reference("single4", "o1-4");
  expect_resume("pp2-tp2-sp", 4, "tp2-zero2-dp2", 4, "o1-4");
  expect_resume("zero2-dp2", 2, "single", 1, "o1");
  expect_resume("single", 1, "zero3-dp2", 2, "o1");
  expect_resume("single", 1, "zero2-dp2-offload", 2, "o1");
  expect_resume("zero3-dp2-offload", 2, "single", 1, "o1");
}

}  // namespace
