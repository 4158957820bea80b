#pragma once
// Forgetting mitigations of continual pre-training that change the objective (replay, the third,
// is data mixing: data_loader.h).
//   KL distillation  loss = CE + λ·KL(p_student ‖ p_teacher) per loss token, the teacher being the
//                    frozen base model run without gradients on the same batch (executor-reference.md
//                    §3.8); λ default 0.1. KL(student‖teacher): the student is
//                    penalised for mass where the base model puts little.
//   EWC              penalty λ/2·Σ_i F_i (θ_i − θ*_i)² with F the diagonal empirical Fisher
//                    information of the base weights θ* on original-domain data (Kirkpatrick et al.
//                    2017, executor-reference.md §3.7), estimated before training from per-sequence
//                    gradients and saved with θ*.
#include <torch/torch.h>

#include <filesystem>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "executor/data/batch.h"
#include "executor/data/data_loader.h"
#include "executor/model/llama_model.h"

namespace cpt::exec {

// Σ over loss tokens of KL(softmax(student) ‖ softmax(teacher)); logits [B, S, V], fp32 sum.
// `tp`: with tensor parallelism the logits are this rank's vocabulary columns and the softmax and
// the sum over the vocabulary are reduced over the group (the result is the same on every rank).
torch::Tensor kl_sum(const torch::Tensor& student_logits, const torch::Tensor& teacher_logits,
                     const torch::Tensor& targets, Communicator* tp = nullptr);

// The frozen teacher of KL distillation.
class Teacher {
 public:
  // `model` is moved in and frozen (eval mode, no gradients).
  explicit Teacher(LlamaModel model);
  // Teacher logits for `batch` (no graph).
  torch::Tensor logits(const Batch& batch);

 private:
  LlamaModel model_;
};

class PipelineExecutor;

// How the ranks hold the parameters EWC covers, beyond tensor and pipeline parallelism (a single
// process keeps the defaults).
struct EwcLayout {
  // The ranks over which a parameter's gradients are summed, so that each adds 1/replicas of the
  // penalty: the data-parallel replicas (dp × cp).
  double replicas = 1;
  // Routed experts apart from their layer (spec::routed_experts_apart): their gradients are summed
  // over expert-dp (`expert_replicas` ranks, `expert_dp`; null for one), each ep rank holds its own
  // experts (`ep`; null for ep 1), split over `etp` (null for etp 1), and the Fisher is estimated by every replica on
  // the same sequences, so an expert's gradients summed over expert-dp hold each sequence `sequence_copies` times: once
  // per data-parallel replica (dp; the cp ranks of a replica each hold part of it).
  bool experts_apart = false;
  double sequence_copies = 1;
  double expert_replicas = 1;
  Communicator* expert_dp = nullptr;
  Communicator* ep = nullptr;
  Communicator* etp = nullptr;
};

// The estimate and the penalty hold any set of parameters by name: a whole model, a tensor-parallel
// shard of it, or a pipeline rank's chunks (each chunk's penalty covers its own parameters).
class Ewc {
 public:
  // Estimates the diagonal Fisher of `model`'s current weights (the anchor θ*) from `sequences`
  // single-sequence gradients of the per-token mean loss on `loader`'s data; leaves .grad clear.
  // Under context parallelism each rank of the cp group back-propagates its tokens and the
  // gradients are summed over the group; with `layout.experts_apart` every rank estimates (on the
  // same sequences) and the routed experts' gradients are summed over expert-dp instead (their
  // ranks hold other experts across cp) and divided by the sequence's copies before they are squared. REQUIRES: the
  // .grad of the parameters are their own (no optimizer views yet).
  static Ewc estimate(LlamaModelImpl& model, DataLoader& loader, std::int64_t sequences, const torch::Device& device,
                      const EwcLayout& layout = {});
  // The same through a pipeline: every sequence goes forward and backward through the stages
  // (PipelineExecutor::backward_one); this rank's estimate covers its chunks. COLLECTIVE over pp.
  static Ewc estimate(PipelineExecutor& pipeline, DataLoader& loader, std::int64_t sequences,
                      const torch::Device& device, const EwcLayout& layout = {});
  // An estimate from tensors by parameter name (e.g. gathered whole).
  static Ewc from(std::vector<std::pair<std::string, torch::Tensor>> fisher,
                  std::vector<std::pair<std::string, torch::Tensor>> anchor);
  // Reads a saved estimate (whole tensors) and keeps this rank's shards of the parameters of
  // `chunks`; ConfigError when the file does not match them.
  static Ewc load(const std::filesystem::path& file, const std::vector<LlamaModelImpl*>& chunks,
                  const torch::Device& device);
  void save(const std::filesystem::path& file) const;
  [[nodiscard]] const std::vector<std::pair<std::string, torch::Tensor>>& fisher() const { return fisher_; }
  [[nodiscard]] const std::vector<std::pair<std::string, torch::Tensor>>& anchor() const { return anchor_; }

  // The ranks' layout (EwcLayout), for penalty() and penalty_value(); set before training.
  void set_layout(const EwcLayout& layout) { layout_ = layout; }

  // This rank's share of λ/2·Σ F (θ − θ*)² over `model`'s parameters, with the graph (its gradient
  // is λ·F·(θ − θ*) / replicas): each term divided by the ranks its gradient is summed over (the
  // layout's replicas; expert-dp for routed experts apart), so the reduced gradient has it once.
  // Under tensor parallelism this rank's shards (tensor-replicated parameters in full).
  torch::Tensor penalty(LlamaModelImpl& model, double lambda) const;
  // The whole model's penalty (no graph): every chunk's, shards summed over the tensor-parallel
  // group (replicated parameters counted once), routed experts apart over ep, and stages over `pp`
  // (when given). COLLECTIVE over tp, ep and pp.
  [[nodiscard]] double penalty_value(const std::vector<LlamaModelImpl*>& chunks, double lambda,
                                     Communicator* pp = nullptr) const;
  // The whole model's penalty from this rank's `share` (penalty()'s value) where one rank holds
  // every parameter once (no tensor parallelism, no experts apart): share · replicas, without
  // penalty_value's second pass over the parameters; otherwise penalty_value (COLLECTIVE).
  [[nodiscard]] double whole_penalty(LlamaModelImpl& model, const torch::Tensor& share, double lambda) const;
  [[nodiscard]] double mean_fisher() const;

 private:
  [[nodiscard]] std::size_t index_of(const std::string& name) const;
  void index_names();
  std::vector<std::pair<std::string, torch::Tensor>> fisher_, anchor_;
  std::unordered_map<std::string, std::size_t> index_;  // parameter name -> entry (the penalty runs every step)
  EwcLayout layout_;
};

}  // namespace cpt::exec
