#include "executor/train/regularizers.h"
#include <functional>

#include "core/check.h"
#include "core/error.h"
#include "core/str_cat.h"
#include "executor/io/safetensors.h"
#include "executor/parallel/context_parallel.h"
#include "executor/parallel/pipeline_executor.h"
#include "spec/parameter_order.h"

namespace cpt::exec {

using core::str_cat;

torch::Tensor kl_sum(const torch::Tensor& student_logits, const torch::Tensor& teacher_logits,
                     const torch::Tensor& targets, Communicator* tp) {
  if (tp != nullptr && tp->size() > 1) {
    const auto s = vocab_parallel_log_softmax(student_logits, *tp);
    const auto t = vocab_parallel_log_softmax(teacher_logits, *tp);
    const auto per_token = reduce_from_tp((s.exp() * (s - t)).sum(-1), *tp);  // [B, S]
    return (per_token * (targets != kIgnoreIndex).to(torch::kFloat32)).sum();
  }
  const auto s = torch::log_softmax(student_logits.to(torch::kFloat32), -1);
  const auto t = torch::log_softmax(teacher_logits.to(torch::kFloat32), -1);
  const auto per_token = (s.exp() * (s - t)).sum(-1);  // [B, S]
  return (per_token * (targets != kIgnoreIndex).to(torch::kFloat32)).sum();
}

Teacher::Teacher(LlamaModel model) : model_(std::move(model)) {
  model_->eval();
  for (auto& p : model_->parameters()) p.set_requires_grad(false);
}

torch::Tensor Teacher::logits(const Batch& batch) {
  torch::NoGradGuard no_grad;
  return model_->forward(batch);
}

namespace {

// Every parameter's .grad summed over `group`, in one flat all-reduce.
void sum_gradients(const torch::OrderedDict<std::string, torch::Tensor>& named, Communicator& group,
                   bool skip_routed_experts = false) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : named) {
    if (skip_routed_experts && spec::is_routed_expert(p.key())) continue;
    if (p.value().grad().defined()) grads.push_back(p.value().grad());
  }
  if (grads.empty()) return;
  std::vector<torch::Tensor> flat;
  for (const auto& g : grads) flat.push_back(g.reshape({-1}));
  auto buffer = torch::cat(flat);
  group.all_reduce_sum(buffer)->wait();
  std::int64_t offset = 0;
  for (auto& g : grads) {
    g.copy_(buffer.narrow(0, offset, g.numel()).view_as(g));
    offset += g.numel();
  }
}

}  // namespace

namespace {

// Adds every parameter's .grad squared into `fisher` (same order as `params`).
void add_squared_gradients(const std::vector<torch::Tensor>& params,
                           std::vector<std::pair<std::string, torch::Tensor>>& fisher) {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (params[i].grad().defined()) fisher[i].second.add_(params[i].grad().pow(2));
  }
}

// The routed experts' gradients summed over expert-dp and divided by the copies of each token the
// ranks estimating on the same sequence hold (EwcLayout): one sequence's gradient of each expert. Every expert takes
// part, a zero gradient where no token reached it, so the ranks' buffers agree.
void sum_expert_gradients(const torch::OrderedDict<std::string, torch::Tensor>& named, const EwcLayout& layout) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : named) {
    if (!spec::is_routed_expert(p.key())) continue;
    if (!p.value().grad().defined()) p.value().mutable_grad() = torch::zeros_like(p.value());
    grads.push_back(p.value().grad());
  }
  if (grads.empty()) return;
  std::vector<torch::Tensor> flat;
  for (const auto& g : grads) flat.push_back(g.reshape({-1}));
  auto buffer = torch::cat(flat);
  if (layout.expert_dp != nullptr && layout.expert_dp->size() > 1) layout.expert_dp->all_reduce_sum(buffer)->wait();
  buffer.div_(layout.sequence_copies);
  std::int64_t offset = 0;
  for (auto& g : grads) {
    g.copy_(buffer.narrow(0, offset, g.numel()).view_as(g));
    offset += g.numel();
  }
}

// The estimate's loop: `backward(one, 1 / tokens)` leaves one sequence's gradient (of its per-token
// mean loss) in the parameters' .grad.
Ewc estimate_with(const torch::OrderedDict<std::string, torch::Tensor>& named, DataLoader& loader,
                  std::int64_t sequences, const torch::Device& device, const ContextParallel& cp,
                  const EwcLayout& layout, const std::function<void(const Batch&, double)>& backward) {
  std::vector<std::pair<std::string, torch::Tensor>> fisher, anchor;
  std::vector<torch::Tensor> params;
  for (const auto& p : named) {
    fisher.emplace_back(p.key(), torch::zeros_like(p.value()));
    anchor.emplace_back(p.key(), p.value().detach().clone());
    params.push_back(p.value());
  }
  auto zero = [&] {
    for (auto& p : params) {
      if (p.grad().defined()) p.mutable_grad() = torch::Tensor();
    }
  };
  std::int64_t used = 0;
  while (used < sequences) {
    const auto batch = loader.next().to(device);
    const auto rows = batch.tokens.size(0);
    for (std::int64_t r = 0; r < rows && used < sequences; ++r, ++used) {
      Batch one{batch.tokens.narrow(0, r, 1),
                batch.targets.narrow(0, r, 1),
                batch.positions.narrow(0, r, 1),
                batch.mask.defined() ? batch.mask.narrow(0, r, 1) : torch::Tensor(),
                0,
                batch.real_tokens.defined() ? batch.real_tokens.narrow(0, r, 1) : torch::Tensor()};
      const auto tokens = (one.targets != kIgnoreIndex).sum().item<std::int64_t>();
      if (tokens == 0) continue;
      zero();
      // Under context parallelism each rank back-propagates its tokens' part of the loss; the
      // sequence's gradient is the sum over the cp group (the routed experts apart: over expert-dp).
      backward(context_parallel_slice(one, cp), 1.0 / static_cast<double>(tokens));
      if (cp.active()) sum_gradients(named, *cp.group, layout.experts_apart);
      if (layout.experts_apart) sum_expert_gradients(named, layout);
      add_squared_gradients(params, fisher);
    }
  }
  zero();
  torch::NoGradGuard no_grad;
  for (auto& [name, f] : fisher) f.div_(static_cast<double>(std::max<std::int64_t>(used, 1)));
  return Ewc::from(std::move(fisher), std::move(anchor));
}

}  // namespace

Ewc Ewc::estimate(LlamaModelImpl& model, DataLoader& loader, std::int64_t sequences, const torch::Device& device,
                  const EwcLayout& layout) {
  const RouterTermsOff plain_loss({&model});
  return estimate_with(model.named_parameters(), loader, sequences, device, model.cp(), layout,
                       [&](const Batch& b, double scale) { (model.loss_sum(b) * scale).backward(); });
}

Ewc Ewc::estimate(PipelineExecutor& pipeline, DataLoader& loader, std::int64_t sequences, const torch::Device& device,
                  const EwcLayout& layout) {
  torch::OrderedDict<std::string, torch::Tensor> named;
  std::vector<LlamaModelImpl*> chunks;
  for (auto& chunk : pipeline.chunks()) {
    for (const auto& p : chunk->named_parameters()) named.insert(p.key(), p.value());
    chunks.push_back(chunk.get());
  }
  const RouterTermsOff plain_loss(chunks);
  return estimate_with(named, loader, sequences, device, pipeline.chunks().front()->cp(), layout,
                       [&](const Batch& b, double scale) { pipeline.backward_one(b, scale); });
}

Ewc Ewc::from(std::vector<std::pair<std::string, torch::Tensor>> fisher,
              std::vector<std::pair<std::string, torch::Tensor>> anchor) {
  Ewc e;
  e.fisher_ = std::move(fisher);
  e.anchor_ = std::move(anchor);
  e.index_names();
  return e;
}

void Ewc::index_names() {
  index_.clear();
  for (std::size_t i = 0; i < fisher_.size(); ++i) index_.emplace(fisher_[i].first, i);
}

std::size_t Ewc::index_of(const std::string& name) const {
  const auto it = index_.find(name);
  CPT_CHECK(it != index_.end(), "EWC holds no estimate for parameter ", name);
  return it->second;
}

void Ewc::save(const std::filesystem::path& file) const {
  std::vector<std::pair<std::string, torch::Tensor>> all;
  for (const auto& [name, f] : fisher_) all.emplace_back("fisher/" + name, f);
  for (const auto& [name, a] : anchor_) all.emplace_back("anchor/" + name, a);
  write_safetensors(file, all, {{"format", "cpt-ewc-v1"}});
}

Ewc Ewc::load(const std::filesystem::path& file, const std::vector<LlamaModelImpl*>& chunks,
              const torch::Device& device) {
  const auto st = SafetensorsFile::open(file);
  Ewc e;
  for (auto* model : chunks) {
    for (const auto& p : model->named_parameters()) {
      for (auto [prefix, out] : {std::pair{"fisher/", &e.fisher_}, std::pair{"anchor/", &e.anchor_}}) {
        const auto name = prefix + p.key();
        if (!st.contains(name))
          throw core::ConfigError(str_cat(file.string(), ": no tensor ", name, " for this model"));
        const auto whole = st.load(name, torch::kFloat32);
        const auto expected = tp_full_shape(p.key(), p.value().sizes(), model->spec().vocab, model->splits());
        if (!whole.sizes().equals(expected)) {
          throw core::ConfigError(str_cat(file.string(), ": ", name, " has shape ", whole.sizes(), ", the model needs ",
                                          c10::IntArrayRef(expected)));
        }
        // A copy of the shard alone: a view (a row-parallel shard is a narrow of the whole tensor)
        // would keep the whole tensor's storage alive on every rank.
        const auto t = model->shard_of_full(p.key(), whole).clone(torch::MemoryFormat::Contiguous);
        if (!t.sizes().equals(p.value().sizes())) {
          throw core::ConfigError(
              str_cat(file.string(), ": ", name, " has shape ", t.sizes(), ", the model needs ", p.value().sizes()));
        }
        out->emplace_back(p.key(), t.to(device));
      }
    }
  }
  e.index_names();
  return e;
}

torch::Tensor Ewc::penalty(LlamaModelImpl& model, double lambda) const {
  const auto options = torch::TensorOptions(torch::kFloat32).device(fisher_.front().second.device());
  torch::Tensor sum = torch::zeros({}, options), experts = torch::zeros({}, options);
  for (const auto& p : model.named_parameters()) {
    const auto i = index_of(p.key());
    const auto term = (fisher_[i].second * (p.value() - anchor_[i].second).pow(2)).sum();
    if (layout_.experts_apart && spec::is_routed_expert(p.key())) {
      experts = experts + term;
    } else {
      sum = sum + term;
    }
  }
  auto share = sum * (lambda / 2) / layout_.replicas;
  if (layout_.experts_apart) share = share + experts * (lambda / 2) / layout_.expert_replicas;
  return share;
}

double Ewc::penalty_value(const std::vector<LlamaModelImpl*>& chunks, double lambda, Communicator* pp) const {
  torch::NoGradGuard no_grad;
  const auto& tp = chunks.front()->tp();
  // Summed on the device, read once per part (not once per tensor): the routed experts apart from
  // their layer are each ep rank's own (whole on every rank of a tp group, or split over etp), the
  // rest tp's shards.
  const auto options = torch::TensorOptions(torch::kFloat64).device(fisher_.front().second.device());
  torch::Tensor total = torch::zeros({}, options), experts = torch::zeros({}, options);
  for (auto* model : chunks) {
    for (const auto& p : model->named_parameters()) {
      const auto& name = p.key();
      const bool expert = layout_.experts_apart && spec::is_routed_expert(name);
      if (!expert && tp.active() && tp.rank() != 0 && tp_split_of(name) == TpSplit::kReplicated) continue;
      const auto i = index_of(name);
      (expert ? experts : total) +=
          (fisher_[i].second * (p.value() - anchor_[i].second).pow(2)).sum().to(torch::kFloat64);
    }
  }
  auto summed = [](double value, Communicator* group) {
    if (group == nullptr || group->size() == 1) return value;
    auto t = torch::tensor({value}, torch::kFloat64);
    group->all_reduce_sum(t)->wait();
    return t.item<double>();
  };
  double sum = summed(total.item<double>(), tp.active() ? tp.group : nullptr);
  if (layout_.experts_apart) sum += summed(summed(experts.item<double>(), layout_.etp), layout_.ep);
  return summed(sum, pp) * lambda / 2;
}

double Ewc::whole_penalty(LlamaModelImpl& model, const torch::Tensor& share, double lambda) const {
  if (model.tp().active() || layout_.experts_apart) return penalty_value({&model}, lambda);
  return share.item<double>() * layout_.replicas;
}

double Ewc::mean_fisher() const {
  double s = 0, n = 0;
  for (const auto& [name, f] : fisher_) {
    s += f.sum().item<double>();
    n += static_cast<double>(f.numel());
  }
  return n > 0 ? s / n : 0;
}

}  // namespace cpt::exec
