#pragma once
// Pipeline parallelism: this rank's model chunks (stages c·pp + pp_rank of the plan's
// spec::StagePartition, chunk c) run one step by interpreting spec::PipelineSchedule, the same
// action lists the simulator replays and the cost model counts (design.md: one source of truth).
//
// Per action (pipeline_schedule.h's conventions): RecvActivation / RecvGrad post a receive from the
// neighbouring stage's rank and wait for it (the schedule is proven deadlock-free under "sends do
// not block, receives do"); Forward runs the chunk (stage 0 from the tokens, the last stage to the
// summed cross-entropy); Send* post an asynchronous send whose tensor is kept until the step ends;
// Backward back-propagates the stage's output with the received gradient (the last stage: its
// loss). Zero-bubble schedules' split backward runs whole at BackwardInput (BackwardWeight is then
// empty): the same gradients, without ZB-H1's smaller bubble.
//
// Hidden states between stages are fp32 [B, S, H] (with sequence parallelism [B, S/tp, H], each
// tensor-parallel rank exchanging its shard with the same tensor-parallel rank of the next stage).
// Every rank reads the step's microbatches (the embedding needs the tokens, every block the
// positions and mask, the last stage the targets).
//
// KL distillation (regularizers.h) through the pipeline: the frozen teacher is split into the same
// stages as the student and held by the same ranks (sharded like it); each Forward also runs the
// teacher's chunk without a graph, and its hidden state travels with the student's to the next
// stage, so the last stage has both logits for the same microbatch. The loss there is
// (CE + λ·KL)·scale; nothing of the teacher goes backward.
#include <vector>

#include "executor/data/batch.h"
#include "executor/dist/communicator.h"
#include "executor/model/llama_model.h"
#include "executor/train/step_optimizer.h"
#include "spec/pipeline_schedule.h"

namespace cpt::exec {

class Ewc;

class PipelineExecutor {
 public:
  // `chunks[c]` is stage c·pp + pp.rank(); `pp` the pipeline group (rank = pipeline rank).
  PipelineExecutor(std::vector<LlamaModel> chunks, int num_stages, Communicator& pp);

  // The teacher of KL distillation: `chunks[c]` the frozen teacher's stage c·pp + pp.rank() (the
  // student's shapes), weight λ of the KL term.
  void set_teacher(std::vector<LlamaModel> chunks, double kl_lambda);

  // EWC (regularizers.h): each chunk's share of the penalty λ/2·Σ F (θ − θ*)² (Ewc::penalty:
  // divided by the replicas that each add it) joins the chunk's last backward of the step, so its
  // gradient arrives with the last microbatch's as in the single-process step.
  void set_ewc(const Ewc* ewc, double lambda);

  struct StepSums {
    double cross_entropy = 0;  // Σ over the step's loss tokens
    double kl = 0;             // Σ of KL(student ‖ teacher) over them (0 without a teacher)
  };
  // Forward and backward of every microbatch of the step (already on the device) in `schedule`'s
  // order, each loss multiplied by `scale`; gradients accumulate in the chunks' parameters, with
  // `optimizer`'s hooks called as for one accumulation of micro.size() microbatches. Returns the
  // sums over the step's loss tokens, the same on every pipeline rank. COLLECTIVE.
  StepSums train_step(const spec::PipelineSchedule& schedule, const std::vector<Batch>& micro, double scale,
                      StepOptimizer& optimizer);

  // Σ of the cross-entropy of `batch` (forward only, no graph), the same on every pipeline rank.
  // COLLECTIVE.
  double loss_sum(const Batch& batch);

  // Forward and backward of one microbatch through the stages in order, its loss multiplied by
  // `scale`, gradients left in the chunks' .grad, no optimizer hooks (EWC's Fisher estimate, before
  // the optimizer exists). Returns the loss sum, the same on every pipeline rank. COLLECTIVE.
  double backward_one(const Batch& batch, double scale);

  [[nodiscard]] std::vector<LlamaModel>& chunks() { return chunks_; }
  [[nodiscard]] Communicator& group() { return pp_; }

 private:
  LlamaModelImpl& chunk_of_stage(int stage);
  LlamaModelImpl& teacher_of_stage(int stage);  // REQUIRES: a teacher
  // The index of `stage`'s chunk on this rank. REQUIRES: the stage is on this pipeline rank.
  [[nodiscard]] std::size_t local_chunk(int stage) const;
  // One microbatch through the stages in order, then (with `backward`) back in reverse order;
  // returns its loss sum on every pipeline rank. loss_sum and backward_one.
  double run_one(const Batch& batch, double scale, bool backward);
  [[nodiscard]] int peer_of(int stage) const;
  torch::Tensor hidden_like(const Batch& b) const;
  // Tags: unique per (receiving stage, microbatch, direction) within a step.
  [[nodiscard]] int tag(int to_stage, int microbatch, int direction) const;
  // train_step's actions on this rank, one function per kind; StepState (pipeline_executor.cpp)
  // holds what they hand one another within the step.
  struct StepState;
  void receive_activation(StepState& step, const spec::Action& a, const Batch& batch);
  void run_forward(StepState& step, const spec::Action& a, const Batch& batch, double scale);
  void send_activation(StepState& step, const spec::Action& a);
  void receive_gradient(StepState& step, const spec::Action& a, const Batch& batch);
  void run_backward(StepState& step, const spec::Action& a, StepOptimizer& optimizer);
  void send_gradient(StepState& step, const spec::Action& a);

  std::vector<LlamaModel> chunks_;
  std::vector<LlamaModel> teacher_;  // empty: no distillation
  double kl_lambda_ = 0;
  const Ewc* ewc_ = nullptr;
  double ewc_lambda_ = 0;
  int num_stages_;
  Communicator& pp_;
};

}  // namespace cpt::exec
