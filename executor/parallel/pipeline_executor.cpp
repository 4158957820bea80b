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

LlamaModelImpl& PipelineExecutor::chunk_of_stage(int stage) { return *chunks_[local_chunk(stage)]; }

LlamaModelImpl& PipelineExecutor::teacher_of_stage(int stage) { return *teacher_[local_chunk(stage)]; }

std::size_t PipelineExecutor::local_chunk(int stage) const {
  CPT_CHECK(stage % pp_.size() == pp_.rank(), "stage ", stage, " is not on pipeline rank ", pp_.rank());
  return static_cast<std::size_t>(stage / pp_.size());
}

int PipelineExecutor::peer_of(int stage) const { return ((stage % pp_.size()) + pp_.size()) % pp_.size(); }

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

void PipelineExecutor::set_ewc(const Ewc* ewc, double lambda, double divisor) {
  ewc_ = ewc;
  ewc_lambda_ = lambda;
  ewc_divisor_ = divisor;
}

PipelineExecutor::StepSums PipelineExecutor::train_step(const spec::PipelineSchedule& schedule,
                                                         const std::vector<Batch>& micro, double scale,
                                                         StepOptimizer& optimizer) {
  CPT_CHECK(schedule.num_stages() == num_stages_ && schedule.pp == pp_.size(), "schedule of ", schedule.num_stages(),
            " stages on ", schedule.pp, " ranks for a pipeline of ", num_stages_, " on ", pp_.size());
  CPT_CHECK(schedule.num_microbatches == static_cast<int>(micro.size()), "schedule of ", schedule.num_microbatches,
            " microbatches for ", micro.size());
  const int n = static_cast<int>(micro.size());
  const int last = num_stages_ - 1;
  // Per (stage, microbatch): the received input (stage > 0), the output or the scaled loss, and
  // the gradient received for the output.
  std::map<std::pair<int, int>, torch::Tensor> inputs, outputs, output_grads;
  // The teacher's hidden states: received (stage > 0) and produced, per (stage, microbatch).
  std::map<std::pair<int, int>, torch::Tensor> teacher_inputs, teacher_outputs;
  const bool distill = !teacher_.empty();
  std::vector<PendingSend> sends;
  double loss = 0, kl_total = 0;
  bool first_backward = true;
  // With EWC: the microbatch of each of this rank's stages whose backward comes last.
  std::map<int, int> last_backward;
  if (ewc_ != nullptr) {
    for (const auto& a : schedule.per_rank[static_cast<std::size_t>(pp_.rank())]) {
      if (a.kind == spec::ActionKind::kBackward || a.kind == spec::ActionKind::kBackwardInput) {
        last_backward[a.stage] = a.microbatch;
      }
    }
  }
  for (const auto& a : schedule.per_rank[static_cast<std::size_t>(pp_.rank())]) {
    const auto key = std::make_pair(a.stage, a.microbatch);
    const auto& batch = micro[static_cast<std::size_t>(a.microbatch)];
    switch (a.kind) {
      case spec::ActionKind::kRecvActivation: {
        auto t = hidden_like(batch);
        pp_.recv(t, peer_of(a.stage - 1), tag(a.stage, a.microbatch, kActivation))->wait();
        inputs[key] = t.requires_grad_(true);
        if (distill) {
          auto th = hidden_like(batch);
          pp_.recv(th, peer_of(a.stage - 1), tag(a.stage, a.microbatch, kTeacherActivation))->wait();
          teacher_inputs[key] = th;
        }
        break;
      }
      case spec::ActionKind::kForward: {
        auto& model = chunk_of_stage(a.stage);
        auto h = a.stage == 0 ? model.embed(batch.tokens) : inputs.at(key);
        h = model.blocks(h, batch);
        torch::Tensor teacher_h;
        if (distill) {
          torch::NoGradGuard no_grad;
          auto& teacher = teacher_of_stage(a.stage);
          teacher_h = a.stage == 0 ? teacher.embed(batch.tokens) : teacher_inputs.at(key);
          teacher_inputs.erase(key);
          teacher_h = teacher.blocks(teacher_h, batch);
        }
        if (a.stage == last) {
          const auto logits = model.head(h);
          const auto ce = model.loss_sum_of_logits(logits, batch.targets);
          loss += ce.item<double>();
          auto total = ce;
          if (distill) {
            torch::Tensor teacher_logits;
            {
              torch::NoGradGuard no_grad;
              teacher_logits = teacher_of_stage(a.stage).head(teacher_h);
            }
            const auto kl = kl_sum(logits, teacher_logits, batch.targets, model.tp().group);
            kl_total += kl.item<double>();
            total = total + kl * kl_lambda_;
          }
          outputs[key] = total * scale;
        } else {
          outputs[key] = h.to(torch::kFloat32);
          if (distill) teacher_outputs[key] = teacher_h.to(torch::kFloat32);
        }
        break;
      }
      case spec::ActionKind::kSendActivation: {
        auto t = outputs.at(key).detach().contiguous();
        auto h = pp_.send(t, peer_of(a.stage + 1), tag(a.stage + 1, a.microbatch, kActivation));
        sends.push_back({t, std::move(h)});
        if (distill) {
          auto th = teacher_outputs.at(key).contiguous();
          teacher_outputs.erase(key);
          auto handle = pp_.send(th, peer_of(a.stage + 1), tag(a.stage + 1, a.microbatch, kTeacherActivation));
          sends.push_back({th, std::move(handle)});
        }
        break;
      }
      case spec::ActionKind::kRecvGrad: {
        auto t = hidden_like(batch);
        pp_.recv(t, peer_of(a.stage + 1), tag(a.stage, a.microbatch, kGradient))->wait();
        output_grads[key] = t;
        break;
      }
      case spec::ActionKind::kBackward:
      case spec::ActionKind::kBackwardInput: {
        if (first_backward) optimizer.before_backward(0, n);
        first_backward = false;
        const auto out = outputs.at(key);
        std::vector<torch::Tensor> roots{out}, grads{a.stage == last ? torch::ones_like(out) : output_grads.at(key)};
        if (ewc_ != nullptr && last_backward.at(a.stage) == a.microbatch) {
          roots.push_back(ewc_->penalty(chunk_of_stage(a.stage), ewc_lambda_) / ewc_divisor_);
          grads.push_back(torch::ones_like(roots.back()));
        }
        torch::autograd::backward(roots, grads);
        output_grads.erase(key);
        outputs.erase(key);
        break;
      }
      case spec::ActionKind::kBackwardWeight:
        break;  // done whole at kBackwardInput
      case spec::ActionKind::kSendGrad: {
        auto t = inputs.at(key).grad().contiguous();
        inputs.erase(key);
        auto h = pp_.send(t, peer_of(a.stage - 1), tag(a.stage - 1, a.microbatch, kGradient));
        sends.push_back({t, std::move(h)});
        break;
      }
    }
  }
  for (auto& s : sends) s.handle->wait();
  optimizer.after_backward(n - 1, n);
  // The loss lives on the last stage's rank; every rank reports it.
  auto t = torch::tensor({loss, kl_total}, torch::kFloat64);
  pp_.all_reduce_sum(t)->wait();
  return StepSums{t[0].item<double>(), t[1].item<double>()};
}

double PipelineExecutor::backward_one(const Batch& batch, double scale) { return run_one(batch, scale, true); }

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
