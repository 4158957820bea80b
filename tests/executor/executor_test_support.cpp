#include "executor_test_support.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include <unistd.h>

#include <optional>

#include "core/str_cat.h"
#include "executor/dist/c10d_communicator.h"

namespace cpt::exec::testing {

namespace fs = std::filesystem;

ScratchDir::ScratchDir(const std::string& name)
    : path_(fs::temp_directory_path() / core::str_cat("cpt-test-", name, "-", ::getpid())) {
  fs::remove_all(path_);
  fs::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

fs::path python_json_package() {
  for (const char* v : {"3.13", "3.12", "3.11", "3.10", "3.9"}) {
    const fs::path p = core::str_cat("/usr/lib/python", v, "/json");
    if (fs::exists(p / "decoder.py")) return p;
  }
  throw std::runtime_error("no /usr/lib/python3.X/json: install python3 (scripts/setup does)");
}

const Tokenizer& small_tokenizer() {
  static const std::optional<Tokenizer> tok = [] {
    static const ScratchDir scratch("tokenizer");  // removed at exit; the tokenizer lives in memory
    const auto& dir = scratch.path();
    CorpusOptions corpus;
    corpus.extensions = {".py"};
    TokenizerTrainOptions o;
    o.vocab_size = 512;
    train_tokenizer(sample_documents({python_json_package()}, corpus, 1 << 20), o, dir / "tok");
    return std::optional<Tokenizer>(Tokenizer::load(dir / "tok.model"));
  }();
  return *tok;
}

void prepare_small_dataset(const fs::path& dir) {
  PrepareOptions o;
  o.corpus.extensions = {".py"};
  prepare_dataset({python_json_package()}, small_tokenizer(), dir, o);
}

Batch causal_batch(std::int64_t batch, std::int64_t seq, std::int64_t vocab, std::uint64_t seed) {
  torch::manual_seed(seed);
  auto tokens = torch::randint(vocab, {batch, seq}, torch::kInt64);
  auto targets = torch::roll(tokens, -1, 1);
  targets.index_put_({torch::indexing::Slice(), seq - 1}, kIgnoreIndex);
  auto positions = torch::arange(seq, torch::kInt64).unsqueeze(0).expand({batch, seq}).contiguous();
  return Batch{tokens, targets, positions, {}, batch * (seq - 1)};
}

double relative_max_difference(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = std::max(b.abs().max().item<double>(), 1e-30);
  return (a - b).abs().max().item<double>() / scale;
}

void on_two_gloo_ranks(int port, const std::string& group_name,
                       const std::function<void(int rank, Communicator& group)>& rank_main) {
  auto run = [&](int rank) {
    LaunchInfo launch;
    launch.rank = rank;
    launch.world_size = 2;
    launch.local_world_size = 2;
    launch.local_rank = rank;
    launch.master_port = port;
    const auto store = JobStore::connect(launch, std::chrono::seconds(30));
    auto group = make_gloo_group(*store, group_name, {0, 1}, rank, std::chrono::seconds(30), GlooTransport{"lo", ""});
    rank_main(rank, *group);
  };
  std::thread second(run, 1);
  run(0);
  second.join();
}

}  // namespace cpt::exec::testing
