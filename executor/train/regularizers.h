#pragma once
// Forgetting mitigations of continual pre-training that change the objective (replay, the third,
// is data mixing: data_loader.h).
//   KL distillation  loss = CE + λ·KL(p_student ‖ p_teacher) per loss token, the teacher being the
//                    frozen base model run without gradients on the same batch (executor-reference.md
//                    §3.8); λ default 0.1. KL(student‖teacher) as issue #8 specifies: the student is
//                    penalised for mass where the base model puts little.
//   EWC              penalty λ/2·Σ_i F_i (θ_i − θ*_i)² with F the diagonal empirical Fisher
//                    information of the base weights θ* on original-domain data (Kirkpatrick et al.
//                    2017, executor-reference.md §3.7), estimated before training from per-sequence
//                    gradients and saved with θ*.
#include <torch/torch.h>

#include <filesystem>
#include <optional>
#include <string>
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

class Ewc {
 public:
  // Estimates the diagonal Fisher of `model`'s current weights (the anchor θ*) from `sequences`
  // single-sequence gradients of the per-token mean loss on `loader`'s data; leaves .grad clear.
  static Ewc estimate(LlamaModelImpl& model, DataLoader& loader, std::int64_t sequences, const torch::Device& device);
  // Reads a saved estimate (whole tensors) and keeps this rank's shards of them; ConfigError when
  // the file does not match the model's parameters.
  static Ewc load(const std::filesystem::path& file, LlamaModelImpl& model, const torch::Device& device);
  void save(const std::filesystem::path& file) const;
  // The estimate with whole tensors, from every tensor-parallel rank's shards. COLLECTIVE over tp.
  [[nodiscard]] Ewc whole(std::int64_t vocab, const TensorParallel& tp) const;

  // λ/2·Σ F (θ − θ*)² over `model`'s parameters, with the graph (its gradient is λ·F·(θ − θ*)).
  // Under tensor parallelism this rank's shards (tensor-replicated parameters in full).
  torch::Tensor penalty(LlamaModelImpl& model, double lambda) const;
  // The whole model's penalty (no graph): shards summed over the tensor-parallel group, replicated
  // parameters counted once. COLLECTIVE over tp.
  [[nodiscard]] double penalty_value(LlamaModelImpl& model, double lambda) const;
  [[nodiscard]] double mean_fisher() const;

 private:
  std::vector<std::pair<std::string, torch::Tensor>> fisher_, anchor_;
};

}  // namespace cpt::exec
