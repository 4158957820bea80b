#include "executor/parallel/pipeline_executor.h"

#include <map>
#include <memory>
#include <utility>

#include "core/check.h"
#include "executor/train/regularizers.h"

namespace cpt::exec {

namespace {
constexpr int kActivation = 0;
constexpr int kGradient = 1;
constexpr int kTeacherActivation = 2;
constexpr int kDirections = 3;

struct PendingSend {
  torch::Tensor tensor;  // kept alive until the send completes
  std::unique_ptr<CommHandle> handle;
};
}  // namespace

PipelineExecutor::PipelineExecutor(std::vector<LlamaModel> chunks, int num_stages, Communicator& pp)
    : chunks_(std::move(chunks)), num_stages_(num_stages), pp_(pp) {
  CPT_CHECK(static_cast<int>(chunks_.size()) * pp_.size() == num_stages_, chunks_.size(), " chunks on ", pp_.size(),
            " pipeline ranks for ", num_stages_, " stages");
}

LlamaModelImpl& PipelineExecutor::chunk_of_stage(int stage) {
  return *chunks_[local_chunk(stage)];
}

LlamaModelImpl& PipelineExecutor::teacher_of_stage(int stage) {
  return *teacher_[local_chunk(stage)];
}

std::size_t PipelineExecutor::local_chunk(int stage) const {
  CPT_CHECK(stage % pp_.size() == pp_.rank(), "stage ", stage, " is not on pipeline rank ", pp_.rank());
  return static_cast<std::size_t>(stage / pp_.size());
}

int PipelineExecutor::peer_of(int stage) const {
  return ((stage % pp_.size()) + pp_.size()) % pp_.size();
}

int PipelineExecutor::tag(int to_stage, int microbatch, int direction) const {
  return (microbatch * num_stages_ + to_stage) * kDirections + direction;
}

void PipelineExecutor::set_teacher(std::vector<LlamaModel> chunks, double kl_lambda) {
  CPT_CHECK(chunks.size() == chunks_.size(), chunks.size(), " teacher chunks for ", chunks_.size(), " student chunks");
  for (auto& t : chunks) {
    t->eval();
    for (auto& p : t->parameters()) p.set_requires_grad(false);
  }
  teacher_ = std::move(chunks);
  kl_lambda_ = kl_lambda;
}

torch::Tensor PipelineExecutor::hidden_like(const Batch& b) const {
  const auto& m = *chunks_.front();
  const auto s = m.tp().sp() ? b.tokens.size(1) / m.tp().size() : b.tokens.size(1);
  return torch::empty({b.tokens.size(0), s, std::int64_t{m.spec().hidden}},
                      torch::TensorOptions(torch::kFloat32).device(b.tokens.device()));
}

void PipelineExecutor::set_ewc(const Ewc* ewc, double lambda) {
  ewc_ = ewc;
  ewc_lambda_ = lambda;
}

// What one step's actions hand one another on this rank, per (stage, microbatch).
struct PipelineExecutor::StepState {
  int microbatches = 0;
  int last_stage = 0;
  bool distill = false;
  // The received input (stage > 0), the output or the scaled loss, the gradient received for the
  // output; the teacher's hidden states received (stage > 0) and produced.
  std::map<std::pair<int, int>, torch::Tensor> inputs, outputs, output_grads, teacher_inputs, teacher_outputs;
  std::vector<PendingSend> sends;
  double loss = 0, kl_total = 0;
  bool first_backward = true;
  // With EWC: the microbatch of each of this rank's stages whose backward comes last.
  std::map<int, int> last_backward;
};

void PipelineExecutor::receive_activation(StepState& step, const spec::Action& a, const Batch& batch) {
  const auto key = std::make_pair(a.stage, a.microbatch);
  auto t = hidden_like(batch);
  pp_.recv(t, peer_of(a.stage - 1), tag(a.stage, a.microbatch, kActivation))->wait();
  step.inputs[key] = t.requires_grad_(true);
  if (step.distill) {
    auto th = hidden_like(batch);
    pp_.recv(th, peer_of(a.stage - 1), tag(a.stage, a.microbatch, kTeacherActivation))->wait();
    step.teacher_inputs[key] = th;
  }
}

void PipelineExecutor::run_forward(StepState& step, const spec::Action& a, const Batch& batch, double scale) {
  const auto key = std::make_pair(a.stage, a.microbatch);
  auto& model = chunk_of_stage(a.stage);
  auto h = a.stage == 0 ? model.embed(batch.tokens) : step.inputs.at(key);
  h = model.blocks(h, batch);
  torch::Tensor teacher_h;
  if (step.distill) {
    torch::NoGradGuard no_grad;
    auto& teacher = teacher_of_stage(a.stage);
    teacher_h = a.stage == 0 ? teacher.embed(batch.tokens) : step.teacher_inputs.at(key);
    step.teacher_inputs.erase(key);
    teacher_h = teacher.blocks(teacher_h, batch);
  }
  if (a.stage != step.last_stage) {
    step.outputs[key] = h.to(torch::kFloat32);
    if (step.distill) step.teacher_outputs[key] = teacher_h.to(torch::kFloat32);
    return;
  }
  const auto logits = model.head(h);
  const auto ce = model.loss_sum_of_logits(logits, batch.targets);
  step.loss += ce.item<double>();
  auto total = ce;
  if (step.distill) {
    torch::Tensor teacher_logits;
    {
      torch::NoGradGuard no_grad;
      teacher_logits = teacher_of_stage(a.stage).head(teacher_h);
    }
    const auto kl = kl_sum(logits, teacher_logits, batch.targets, model.tp().group);
    step.kl_total += kl.item<double>();
    total = total + kl * kl_lambda_;
  }
  step.outputs[key] = total * scale;
}

void PipelineExecutor::send_activation(StepState& step, const spec::Action& a) {
  const auto key = std::make_pair(a.stage, a.microbatch);
  auto t = step.outputs.at(key).detach().contiguous();
  auto h = pp_.send(t, peer_of(a.stage + 1), tag(a.stage + 1, a.microbatch, kActivation));
  step.sends.push_back({t, std::move(h)});
  if (step.distill) {
    auto th = step.teacher_outputs.at(key).contiguous();
    step.teacher_outputs.erase(key);
    auto handle = pp_.send(th, peer_of(a.stage + 1), tag(a.stage + 1, a.microbatch, kTeacherActivation));
    step.sends.push_back({th, std::move(handle)});
  }
}

void PipelineExecutor::receive_gradient(StepState& step, const spec::Action& a, const Batch& batch) {
  auto t = hidden_like(batch);
  pp_.recv(t, peer_of(a.stage + 1), tag(a.stage, a.microbatch, kGradient))->wait();
  step.output_grads[std::make_pair(a.stage, a.microbatch)] = t;
}

void PipelineExecutor::run_backward(StepState& step, const spec::Action& a, StepOptimizer& optimizer) {
  const auto key = std::make_pair(a.stage, a.microbatch);
  if (step.first_backward) optimizer.before_backward(0, step.microbatches);
  step.first_backward = false;
  const auto out = step.outputs.at(key);
  std::vector<torch::Tensor> roots{out},
      grads{a.stage == step.last_stage ? torch::ones_like(out) : step.output_grads.at(key)};
  if (ewc_ != nullptr && step.last_backward.at(a.stage) == a.microbatch) {
    roots.push_back(ewc_->penalty(chunk_of_stage(a.stage), ewc_lambda_));
    grads.push_back(torch::ones_like(roots.back()));
  }
  torch::autograd::backward(roots, grads);
  step.output_grads.erase(key);
  step.outputs.erase(key);
}

void PipelineExecutor::send_gradient(StepState& step, const spec::Action& a) {
  const auto key = std::make_pair(a.stage, a.microbatch);
  auto t = step.inputs.at(key).grad().contiguous();
  step.inputs.erase(key);
  auto h = pp_.send(t, peer_of(a.stage - 1), tag(a.stage - 1, a.microbatch, kGradient));
  step.sends.push_back({t, std::move(h)});
}

PipelineExecutor::StepSums PipelineExecutor::train_step(const spec::PipelineSchedule& schedule,
                                                        const std::vector<Batch>& micro, double scale,
                                                        StepOptimizer& optimizer) {
  CPT_CHECK(schedule.num_stages() == num_stages_ && schedule.pp == pp_.size(), "schedule of ", schedule.num_stages(),
            " stages on ", schedule.pp, " ranks for a pipeline of ", num_stages_, " on ", pp_.size());
  CPT_CHECK(schedule.num_microbatches == static_cast<int>(micro.size()), "schedule of ", schedule.num_microbatches,
            " microbatches for ", micro.size());
  StepState step;
  step.microbatches = static_cast<int>(micro.size());
  step.last_stage = num_stages_ - 1;
  step.distill = !teacher_.empty();
  const auto& actions = schedule.per_rank[static_cast<std::size_t>(pp_.rank())];
  if (ewc_ != nullptr) {
    for (const auto& a : actions) {
      if (a.kind == spec::ActionKind::kBackward || a.kind == spec::ActionKind::kBackwardInput) {
        step.last_backward[a.stage] = a.microbatch;
      }
    }
  }
  for (const auto& a : actions) {
    const auto& batch = micro[static_cast<std::size_t>(a.microbatch)];
    switch (a.kind) {
      case spec::ActionKind::kRecvActivation:
        receive_activation(step, a, batch);
        break;
      case spec::ActionKind::kForward:
        run_forward(step, a, batch, scale);
        break;
      case spec::ActionKind::kSendActivation:
        send_activation(step, a);
        break;
      case spec::ActionKind::kRecvGrad:
        receive_gradient(step, a, batch);
        break;
      case spec::ActionKind::kBackward:
      case spec::ActionKind::kBackwardInput:
        run_backward(step, a, optimizer);
        break;
      case spec::ActionKind::kBackwardWeight:
        break;  // done whole at kBackwardInput
      case spec::ActionKind::kSendGrad:
        send_gradient(step, a);
        break;
    }
  }
  for (auto& s : step.sends) s.handle->wait();
  optimizer.after_backward(step.microbatches - 1, step.microbatches);
  // The loss lives on the last stage's rank; every rank reports it.
  auto t = torch::tensor({step.loss, step.kl_total}, torch::kFloat64);
  pp_.all_reduce_sum(t)->wait();
  return StepSums{t[0].item<double>(), t[1].item<double>()};
}

double PipelineExecutor::backward_one(const Batch& batch, double scale) {
  return run_one(batch, scale, true);
}

double PipelineExecutor::loss_sum(const Batch& batch) {
  torch::NoGradGuard no_grad;
  return run_one(batch, 1.0, false);
}

double PipelineExecutor::run_one(const Batch& batch, double scale, bool backward) {
  const int last = num_stages_ - 1;
  double loss = 0;
  std::vector<PendingSend> sends;
  std::map<int, torch::Tensor> inputs, outputs;  // by stage (with backward)
  // Forward: stages in order (each rank waits for its input, so the chain runs stage after stage).
  for (int stage = pp_.rank(); stage < num_stages_; stage += pp_.size()) {
    auto& model = chunk_of_stage(stage);
    torch::Tensor h;
    if (stage == 0) {
      h = model.embed(batch.tokens);
    } else {
      h = hidden_like(batch);
      pp_.recv(h, peer_of(stage - 1), tag(stage, 0, kActivation))->wait();
      if (backward) inputs[stage] = h.requires_grad_(true);
    }
    h = model.blocks(h, batch);
    if (stage == last) {
      const auto ce = model.loss_sum_of_logits(model.head(h), batch.targets);
      loss = ce.item<double>();
      if (backward) outputs[stage] = ce * scale;
    } else {
      const auto out = h.to(torch::kFloat32);
      if (backward) outputs[stage] = out;
      auto t = out.detach().contiguous();
      auto handle = pp_.send(t, peer_of(stage + 1), tag(stage + 1, 0, kActivation));
      sends.push_back({t, std::move(handle)});
    }
  }
  // Backward: stages in reverse order, each waiting for its output's gradient.
  const int first = pp_.rank();
  for (int stage = first + ((num_stages_ - 1 - first) / pp_.size()) * pp_.size(); backward && stage >= 0;
       stage -= pp_.size()) {
    if (stage == last) {
      torch::autograd::backward({outputs.at(stage)});
    } else {
      auto g = hidden_like(batch);
      pp_.recv(g, peer_of(stage + 1), tag(stage, 0, kGradient))->wait();
      torch::autograd::backward({outputs.at(stage)}, {g});
    }
    if (stage > 0) {
      auto t = inputs.at(stage).grad().contiguous();
      auto handle = pp_.send(t, peer_of(stage - 1), tag(stage - 1, 0, kGradient));
      sends.push_back({t, std::move(handle)});
    }
  }
  for (auto& s : sends) s.handle->wait();
  auto t = torch::tensor({loss}, torch::kFloat64);
  pp_.all_reduce_sum(t)->wait();
  return t.item<double>();
}

}  // namespace cpt::exec
