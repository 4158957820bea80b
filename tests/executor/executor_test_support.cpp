#include "executor_test_support.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <thread>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <optional>

#include "core/str_cat.h"
#include "executor/dist/c10d_communicator.h"
#include "executor/model/llama_model.h"
#include "spec/parameter_order.h"

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
  return Batch{tokens, targets, positions, {}, batch * (seq - 1), {}};
}

std::map<std::string, torch::Tensor> gradients_by_name(torch::nn::Module& module) {
  std::map<std::string, torch::Tensor> grads;
  for (const auto& p : module.named_parameters()) grads[p.key()] = p.value().grad().clone();
  return grads;
}

double relative_max_difference(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = std::max(b.abs().max().item<double>(), 1e-30);
  return (a - b).abs().max().item<double>() / scale;
}

double moe_layer_reordering_bound(const spec::ModelSpec& m, int partial_sums) {
  const double terms = m.hidden + m.moe.expert_ffn_hidden + m.moe.experts_per_token +
                       (m.moe.shared_ffn_hidden > 0 ? 1 : 0) + partial_sums;
  return 2 * terms * std::ldexp(1.0, -24);
}

namespace {

// A loopback port no socket holds now: bound to port 0, the system's pick, then released. (A fixed
// port per test collides with another test process's, or with a port a closed connection still
// holds, as often as tests run back to back.)
int free_loopback_port() {
  const int socket_fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (socket_fd < 0) throw std::runtime_error("socket: cannot open a TCP socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  const bool bound = ::bind(socket_fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                     ::getsockname(socket_fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  ::close(socket_fd);
  if (!bound) throw std::runtime_error("bind: no free loopback port");
  return ntohs(address.sin_port);
}

}  // namespace

void on_two_gloo_ranks(const std::string& group_name,
                       const std::function<void(int rank, Communicator& group)>& rank_main) {
  const int port = free_loopback_port();
  // LibTorch's c10d flight recorder is one per process, and two threads' Gloo groups recording into
  // it at once can corrupt its maps (seen as a crash in FlightRecorder::record under
  // ProcessGroupGloo::enqueue); a real run has one rank per process. Off before the first group
  // (the recorder reads it once), whatever the environment set.
  ::setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/1);
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
  // A rank that throws (a taken port, a failed check) must not leave the other thread joinable: the
  // first exception is rethrown once both are done, and the test fails instead of aborting.
  std::exception_ptr second_failure;
  std::thread second([&] {
    try {
      run(1);
    } catch (...) {
      second_failure = std::current_exception();
    }
  });
  std::exception_ptr first_failure;
  try {
    run(0);
  } catch (...) {
    first_failure = std::current_exception();
  }
  second.join();
  if (first_failure) std::rethrow_exception(first_failure);
  if (second_failure) std::rethrow_exception(second_failure);
}

std::vector<std::string> expect_spec_parameters_in_gradient_order(const spec::ModelSpec& m) {
  LlamaModel model(m);
  std::int64_t params = 0;
  std::vector<std::pair<std::pair<int, int>, std::int64_t>> keyed;
  std::vector<std::string> names;
  for (const auto& p : model->named_parameters()) {
    params += p.value().numel();
    const auto key = spec::gradient_order_key(p.key());
    EXPECT_LT(key.first, INT_MAX) << p.key() << " has no place in the gradient order";
    keyed.emplace_back(key, p.value().numel());
    names.push_back(p.key());
  }
  EXPECT_EQ(params, m.num_params()) << m.name;
  std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::int64_t> sorted, visited;
  for (const auto& [key, numel] : keyed) sorted.push_back(numel);
  spec::visit_gradient_order(m, 1, 0, m.layers, true, true, true, [&](std::int64_t n) { visited.push_back(n); });
  EXPECT_EQ(sorted, visited) << m.name;
  return names;
}

}  // namespace cpt::exec::testing
