#pragma once
// Shared fixtures of the executor tests: a scratch directory and a small tokenizer and dataset
// built from text every machine with Python 3 has (the standard library's json package), never
// from text committed to this repository.
#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include <torch/torch.h>

#include "executor/dist/communicator.h"

#include "executor/data/batch.h"
#include "executor/data/prepare_dataset.h"
#include "executor/data/tokenizer.h"
#include "spec/model_spec.h"

namespace cpt::exec::testing {

// A fresh directory under the system temp dir, removed by the destructor.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// /usr/lib/python3.X/json: about 60 kB of Python source in a handful of files.
std::filesystem::path python_json_package();

// A 512-piece tokenizer trained once per test binary on python_json_package() (cached in the temp dir).
const Tokenizer& small_tokenizer();

// Prepares python_json_package() with small_tokenizer() into `dir`.
void prepare_small_dataset(const std::filesystem::path& dir);

// `batch` random sequences of `seq` tokens below `vocab` (seeded by `seed`), each its own document:
// targets the next token (the last position ignored), positions 0..seq-1, plain causal attention.
Batch causal_batch(std::int64_t batch, std::int64_t seq, std::int64_t vocab, std::uint64_t seed);

// The largest |a − b| over the tensors, against the largest |b| (1e-30 at least).
double relative_max_difference(const torch::Tensor& a, const torch::Tensor& b);

// How far two fp32 evaluations of an MoE layer's output may differ, against its largest value,
// when each rank computes its rows in GEMMs of other shapes (LibTorch's kernels may block and
// order a row's sums differently by shape and by CPU): per output h + f_e terms through the
// expert's projections, its top-k weights, the shared expert's term and `partial_sums` reduced
// over ranks, each of the two runs within n · 2⁻²⁴ of the terms' magnitude.
double moe_layer_reordering_bound(const spec::ModelSpec& m, int partial_sums);

// Checks that the model built from `m` in one process holds exactly the spec's parameter count, that
// every parameter has a place in spec::gradient_order_key, and that sorted by it their sizes are
// spec::visit_gradient_order's (the cost model's). Returns the parameters' names.
std::vector<std::string> expect_spec_parameters_in_gradient_order(const spec::ModelSpec& m);

// The gradient of each of `module`'s parameters, cloned, by its name.
std::map<std::string, torch::Tensor> gradients_by_name(torch::nn::Module& module);

// Runs rank_main(rank, group) on two ranks, this thread and another, joined by a Gloo group named
// `group_name` over loopback, its rendezvous on a port the system has free. An exception of either
// rank is rethrown here once both are done.
void on_two_gloo_ranks(const std::string& group_name,
                       const std::function<void(int rank, Communicator& group)>& rank_main);

}  // namespace cpt::exec::testing
