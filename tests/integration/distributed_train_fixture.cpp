#include "tests/integration/distributed_train_fixture.h"

namespace cpt::dist_testing {

// fp32 tensors of a safetensors file (the checkpoints hold only fp32 weights).
std::map<std::string, std::vector<float>> read_f32(const fs::path& file) {
  const auto bytes = slurp(file);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const auto b = info["data_offsets"][0].get<std::size_t>(), e = info["data_offsets"][1].get<std::size_t>();
    std::vector<float> v((e - b) / 4);
    std::memcpy(v.data(), bytes.data() + 8 + n + b, e - b);
    out[name] = std::move(v);
  }
  return out;
}

// One field of every step of a metrics.jsonl.
std::vector<double> metric(const fs::path& metrics, const std::string& key) {
  std::vector<double> v;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) v.push_back(nlohmann::json::parse(line)[key].get<double>());
  return v;
}

std::vector<float> expert_bias_of(const fs::path& out) {
  const auto weights = read_f32(out / "checkpoints" / "step_00000020" / "model.safetensors");
  const auto it = weights.find("layers.1.mlp.gate.e_score_correction_bias");
  EXPECT_NE(it, weights.end()) << out << ": no expert bias in the checkpoint";
  return it == weights.end() ? std::vector<float>{} : it->second;
}

fs::path DistributedTrain::dir_;
std::map<std::string, double> DistributedTrain::round_off_floor_;
bool DistributedTrain::attempted_ = false;
bool DistributedTrain::ready_ = false;

// The weights of two runs at `step` (their checkpoints): per tensor, the norm of the difference
// over the norm of the first run's tensor; the largest over the model.
double largest_relative_difference(const fs::path& a_dir, const fs::path& b_dir, int step) {
  std::ostringstream file;
  file << "checkpoints/step_" << std::setw(8) << std::setfill('0') << step << "/model.safetensors";
  const auto wa = read_f32(a_dir / file.str());
  const auto wb = read_f32(b_dir / file.str());
  EXPECT_EQ(wa.size(), wb.size()) << a_dir << " against " << b_dir;
  double largest = 0;
  for (const auto& [name, x] : wa) {
    const auto it = wb.find(name);
    if (it == wb.end() || it->second.size() != x.size()) {
      ADD_FAILURE() << b_dir << ": " << name << " missing or of another size";
      return INFINITY;
    }
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      diff += std::pow(static_cast<double>(x[i]) - it->second[i], 2);
      norm += std::pow(static_cast<double>(x[i]), 2);
    }
    largest = std::max(largest, std::sqrt(diff / norm));
  }
  return largest;
}

// Two runs of one training in different layouts are the same run: the same loss every step, and
// final weights as close as round-off allows.
//
// How close round-off allows is measured, not assumed. A layout sums the same products in another
// order (a row-parallel GEMM as two halves and an all-reduce, gradients over dp), and so does one
// process on another CPU: LibTorch's reductions sum 1, 8 or 16 lanes at a time by instruction set,
// and MKL picks its GEMM kernels by CPU. AdamW divides each update by
// sqrt(v) + 1e-8, so a gradient component near zero turns its round-off into an update of up to
// the learning rate: after 20 steps one process on two kernel paths differs by up to 2.5e-4 of the
// largest weight in its worst element (one embedding row of a rare token, 30 times the next row),
// while every tensor agrees to 5e-6 in norm. So the weights are compared in norm per tensor, and
// `round_off_floor` is the reference's own difference across kernel paths (reference()). A layout
// may differ by at most 4 times that: it adds roundings of the same kind and size as a kernel path
// does (each split sum rounds no worse than the whole), and the floor's own spread over pairs of
// kernel paths is 2.6 times. A wrong shard, row or update, even of one element, is orders above
// it. The loss of a step is a mean over its tokens, which rounds to a few ulps (1e-7 relative):
// 1e-4 leaves three orders for that.
void expect_same_run(const fs::path& a_dir, const fs::path& b_dir, double round_off_floor, const std::string& what) {
  const auto a = losses(a_dir / "metrics.jsonl"), b = losses(b_dir / "metrics.jsonl");
  ASSERT_EQ(a.size(), 20u) << what;
  ASSERT_EQ(b.size(), 20u) << what;
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i] / a[i], 1.0, 1e-4) << what << ": step " << i;
  EXPECT_LE(largest_relative_difference(a_dir, b_dir), 4 * round_off_floor)
      << what << ": the final weights differ by more than round-off (the reference moves by " << round_off_floor
      << " across kernel paths)";
}

void DistributedTrain::expect_resume(const std::string& from, int from_procs, const std::string& to, int to_procs,
                                     const std::string& ref, const std::string& config) {
  const auto out = "moved-" + from + "-" + to;
  const auto first = train(from, out, from_procs, config, " --stop-at 10");
  ASSERT_EQ(first.exit_code, 0) << from << ": " << first.err;
  const auto second = train(to, out, to_procs, config, " --resume");
  ASSERT_EQ(second.exit_code, 0) << to << ": " << second.err;
  expect_same_as_reference(ref, dir_ / out, from + " then " + to);
}

}  // namespace cpt::dist_testing
