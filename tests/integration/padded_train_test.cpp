// Padded packing through the real `cpt train` (distributed_train_fixture.h): one short document
// per row, each microbatch padded to its longest row and then to a multiple of what its layout
// splits (spec::sequence_length_multiple: 2 under sequence parallelism over 2, 4 under context
// parallelism over 2), so the layouts pad the same rows to different widths. The padding is masked
// out of attention (causal, at the end of a row) and of the loss, and a mixture of experts leaves
// it out of its auxiliary loss and of the load its expert bias moves against (model/moe_mlp.h):
// DeepSeek-V3 in small trains, balances and moves its biases under sequence and context
// parallelism, and with its experts over two ranks recomputing every block (whose recomputation
// masks the padding again), as one process does; the dense tiny under context × sequence
// parallelism too.
#include <cstdint>
#include <numeric>

#include "tests/integration/distributed_train_fixture.h"

namespace {

using namespace cpt::dist_testing;

// The document lengths of a prepared data set of one shard, read from its Megatron index
// (MMIDIDX: 9-byte magic, u64 version, u8 dtype code, u64 sequences, u64 documents + 1, then the
// sequences' int32 lengths).
std::vector<std::int64_t> document_lengths(const fs::path& dataset) {
  std::ifstream index(dataset / "shard_00000.idx", std::ios::binary);
  char header[34];
  index.read(header, sizeof header);
  std::uint64_t sequences = 0;
  std::memcpy(&sequences, header + 18, sizeof sequences);
  std::vector<std::int32_t> lengths(sequences);
  index.read(reinterpret_cast<char*>(lengths.data()), static_cast<std::streamsize>(sequences * sizeof(std::int32_t)));
  EXPECT_TRUE(index.good()) << dataset;
  return {lengths.begin(), lengths.end()};
}

class PaddedTrain : public DistributedTrain {
 protected:
  // Short documents (1 to 4 lines of the json package's sources, a few to 60 tokens, below the
  // plans' 64), prepared once into DIR/short, a TRAIN.json of them and the plans.
  static void prepare_once() {
    if (fs::exists(dir_ / "pad-tiny-cp2-tp2-sp" / "plan.json")) return;
    fs::create_directories(dir_ / "short-text");
    std::ifstream source(python_json_package() / "decoder.py");
    std::string line, document;
    int lines = 0, documents = 0;
    while (std::getline(source, line)) {
      if (line.find_first_not_of(' ') == std::string::npos) continue;
      document += line + "\n";
      if (++lines < 1 + documents % 4) continue;
      std::ofstream(dir_ / "short-text" / ("doc" + std::to_string(documents++) + ".txt")) << document;
      document.clear();
      lines = 0;
    }
    ASSERT_GT(documents, 40);
    const auto d = dir_.string();
    const auto r =
        sh(cpt_binary() + " data prepare " + d + "/short-text --tokenizer " + d + "/tok.model --out " + d + "/short",
           dir_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::ofstream(dir_ / "padded.json") << R"({"data": [{"name": "short", "path": "short"}], "steps": 20,
      "packing": "padded", "lr": {"schedule": "cosine", "peak": 0.003, "warmup_steps": 4}, "seed": 5,
      "threads": 1, "dp_bucket_mib": 0.1, "log_interval_steps": 0, "router_aux_loss_type": "seq_aux_loss",
      "expert_bias_update_rate": 0.01})";
    std::ofstream(dir_ / "tiny-v3.json") << kTinyV3;
    for (const auto& [model, name, fix, gpus] :
         {std::tuple{"tiny-v3.json", "v3-single", "ep=1,micro_batch=2", 1},
          std::tuple{"tiny-v3.json", "v3-tp2-sp", "tp=2,sequence_parallel=true,ep=1,micro_batch=2", 2},
          std::tuple{"tiny-v3.json", "v3-cp2", "cp=2,ep=1,micro_batch=2", 2},
          std::tuple{"tiny-v3.json", "v3-ep2-full-recompute", "dp=2,ep=2,zero=0,recompute=full,micro_batch=2", 2},
          std::tuple{"tiny", "tiny-single", "micro_batch=2", 1},
          std::tuple{"tiny", "tiny-cp2-tp2-sp", "cp=2,tp=2,sequence_parallel=true,micro_batch=2", 4}}) {
      plan_layout(model, fix, gpus, std::string("pad-") + name);
    }
  }
};

TEST_F(PaddedTrain, MixtureOfExpertsLayoutsMatchTheSingleProcessRun) {
  prepare_once();
  reference("pad-v3-single", "o-pad-v3-1", "padded.json");
  const auto bias = expert_bias_of(dir_ / "o-pad-v3-1");
  ASSERT_EQ(bias.size(), 8u);
  EXPECT_GT(*std::max_element(bias.begin(), bias.end()), 0.0f) << "no expert's bias moved in 20 steps";
  const auto load = metric(dir_ / "o-pad-v3-1" / "metrics.jsonl", "expert_load");
  const auto aux = metric(dir_ / "o-pad-v3-1" / "metrics.jsonl", "router_aux_loss");
  for (const auto& [layout, procs] :
       {std::pair{"tp2-sp", 2}, std::pair{"cp2", 2}, std::pair{"ep2-full-recompute", 2}}) {
    const auto out = std::string("o-pad-v3-") + layout;
    const auto r = train(std::string("pad-v3-") + layout, out, procs, "padded.json");
    ASSERT_EQ(r.exit_code, 0) << layout << ": " << r.err;
    expect_same_as_reference("o-pad-v3-1", dir_ / out, std::string("padded v3 ") + layout);
    // The biases bitwise (sums of ±0.01 against the same loads), the load of every step exactly:
    // with the padding counted, the wider rows of these layouts would route more pairs.
    EXPECT_EQ(expert_bias_of(dir_ / out), bias) << layout;
    EXPECT_EQ(metric(dir_ / out / "metrics.jsonl", "expert_load"), load) << layout;
    const auto layout_aux = metric(dir_ / out / "metrics.jsonl", "router_aux_loss");
    ASSERT_EQ(layout_aux.size(), aux.size()) << layout;
    for (std::size_t i = 0; i < aux.size(); ++i) EXPECT_NEAR(layout_aux[i], aux[i], 1e-5 * aux[i]) << layout;
  }
}

TEST_F(PaddedTrain, DenseContextAndSequenceParallelLayoutMatchesTheSingleProcessRun) {
  prepare_once();
  reference("pad-tiny-single", "o-pad-tiny-1", "padded.json");
  const auto r = train("pad-tiny-cp2-tp2-sp", "o-pad-tiny-cp2-tp2-sp", 4, "padded.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_same_as_reference("o-pad-tiny-1", dir_ / "o-pad-tiny-cp2-tp2-sp", "padded tiny cp2 tp2-sp");
  // Each step's real tokens, summed over the context-parallel halves of its rows.
  EXPECT_EQ(metric(dir_ / "o-pad-tiny-cp2-tp2-sp" / "metrics.jsonl", "tokens"),
            metric(dir_ / "o-pad-tiny-1" / "metrics.jsonl", "tokens"));
}

// A padded step counts its real tokens: one epoch of the short documents (8 per step) holds each
// document's min(length, 65) − 1 input tokens once, and the samples of the next epoch that fill
// its last step. A token budget is turned into steps by the mean sample, an epoch by documents.
TEST_F(PaddedTrain, StepsCountRealTokensAndBudgetsDivideByTheMeanSample) {
  prepare_once();
  ASSERT_EQ(nlohmann::json::parse(slurp(dir_ / "short" / "manifest.json"))["shards"].size(), 1u);
  std::vector<std::int64_t> inputs;
  for (const auto length : document_lengths(dir_ / "short")) {
    inputs.push_back(std::max<std::int64_t>(std::min<std::int64_t>(length, 65) - 1, 0));
  }
  std::sort(inputs.begin(), inputs.end());
  const auto documents = static_cast<std::int64_t>(inputs.size());
  const std::int64_t all_inputs = std::accumulate(inputs.begin(), inputs.end(), std::int64_t{0});
  const std::int64_t epoch_steps = (documents + 7) / 8;
  auto config = nlohmann::json::parse(slurp(dir_ / "padded.json"));
  config.erase("steps");
  config["epochs"] = 1;
  std::ofstream(dir_ / "padded-epoch.json") << config.dump();
  const auto r = train("pad-tiny-single", "o-pad-epoch", 1, "padded-epoch.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto run = nlohmann::json::parse(slurp(dir_ / "o-pad-epoch" / "run.json"));
  EXPECT_EQ(run["total_steps"], epoch_steps);
  const auto tokens = metric(dir_ / "o-pad-epoch" / "metrics.jsonl", "tokens");
  ASSERT_EQ(static_cast<std::int64_t>(tokens.size()), epoch_steps);
  const auto extra = static_cast<std::ptrdiff_t>(8 * epoch_steps - documents);  // next epoch's samples
  const auto fewest = std::accumulate(inputs.begin(), inputs.begin() + extra, std::int64_t{0});
  const auto most = std::accumulate(inputs.end() - extra, inputs.end(), std::int64_t{0});
  EXPECT_GE(tokens.back(), static_cast<double>(all_inputs + fewest));
  EXPECT_LE(tokens.back(), static_cast<double>(all_inputs + most));
  const auto measured = nlohmann::json::parse(slurp(dir_ / "o-pad-epoch" / "measured.json"));
  EXPECT_EQ(measured["packing"], "padded");

  // Three packed steps' worth of tokens (3 · 8 · 64) at the mean sample's inputs.
  config.erase("epochs");
  config["tokens"] = 3 * 8 * 64;
  std::ofstream(dir_ / "padded-tokens.json") << config.dump();
  const auto budget = train("pad-tiny-single", "o-pad-tokens", 1, "padded-tokens.json", " --stop-at 1");
  ASSERT_EQ(budget.exit_code, 0) << budget.err;
  // ⌈3 · 8 · 64 / (8 · all_inputs / documents)⌉ in integers.
  const auto budget_run = nlohmann::json::parse(slurp(dir_ / "o-pad-tokens" / "run.json"));
  EXPECT_EQ(budget_run["total_steps"], (3 * 64 * documents + all_inputs - 1) / all_inputs);
  EXPECT_GT(budget_run["total_steps"].get<std::int64_t>(), 3);
}

// A capacity would count each microbatch's padding, so padded rows and a capacity factor are
// refused before any rank trains: one line naming TRAIN.json, exit 2.
TEST_F(PaddedTrain, ACapacityFactorIsRefused) {
  prepare_once();
  auto model = nlohmann::json::parse(kTinyV3);
  model["name"] = "tiny-v3-capacity";
  model["moe"]["capacity_factor"] = 1.0;
  std::ofstream(dir_ / "tiny-v3-capacity.json") << model.dump();
  plan_layout("tiny-v3-capacity.json", "ep=1,micro_batch=2", 1, "pad-v3-capacity");
  const auto r = train("pad-v3-capacity", "o-pad-capacity", 1, "padded.json");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("padded.json: packing: \"padded\" with tiny-v3-capacity's expert capacity factor 1"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "o-pad-capacity" / "metrics.jsonl"));
}

}  // namespace
