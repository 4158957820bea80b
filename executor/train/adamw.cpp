#include "executor/train/adamw.h"

#include "core/error.h"
#include "core/str_cat.h"
#include "executor/model/llama_model.h"

namespace cpt::exec {

using core::str_cat;

AdamW::AdamW(std::vector<std::pair<std::string, torch::Tensor>> named_params, AdamWOptions options)
    : options_(options) {
  decay_.weight_decay = options.weight_decay;
  no_decay_.weight_decay = 0.0;
  for (auto& [name, p] : named_params) {
    auto& g = is_no_decay_parameter(name) ? no_decay_ : decay_;
    g.names.push_back(name);
    g.exp_avg.push_back(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
    g.exp_avg_sq.push_back(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
    g.steps.push_back(torch::zeros({}, torch::TensorOptions(torch::kFloat32).device(p.device())));
    g.params.push_back(p);
  }
}

void AdamW::step_group(Group& g, double lr) {
  if (g.params.empty()) return;
  std::vector<torch::Tensor> params, grads, m, v, steps;
  for (std::size_t i = 0; i < g.params.size(); ++i) {
    if (!g.params[i].grad().defined()) continue;
    params.push_back(g.params[i]);
    grads.push_back(g.params[i].grad());
    m.push_back(g.exp_avg[i]);
    v.push_back(g.exp_avg_sq[i]);
    steps.push_back(g.steps[i]);
  }
  if (params.empty()) return;
  torch::NoGradGuard no_grad;
  // The fused kernel reads the step count for bias correction but does not advance it (PyTorch's
  // optimizer does that just before the call, torch/optim/adam.py).
  for (auto& s : steps) s.add_(1);
  at::_fused_adamw_(params, grads, m, v, /*max_exp_avg_sqs=*/{}, steps, lr, options_.beta1, options_.beta2,
                    g.weight_decay, options_.eps, /*amsgrad=*/false, /*maximize=*/false);
}

void AdamW::step(double lr) {
  step_group(decay_, lr);
  step_group(no_decay_, lr);
}

void AdamW::zero_grad() {
  for (auto* g : {&decay_, &no_decay_}) {
    for (auto& p : g->params) {
      if (p.grad().defined()) p.mutable_grad() = torch::Tensor();
    }
  }
}

std::vector<torch::Tensor> AdamW::moments() const {
  std::vector<torch::Tensor> v;
  for (const auto* g : {&decay_, &no_decay_}) {
    v.insert(v.end(), g->exp_avg.begin(), g->exp_avg.end());
    v.insert(v.end(), g->exp_avg_sq.begin(), g->exp_avg_sq.end());
  }
  return v;
}

std::vector<torch::Tensor> AdamW::counters() const {
  std::vector<torch::Tensor> v;
  for (const auto* g : {&decay_, &no_decay_}) v.insert(v.end(), g->steps.begin(), g->steps.end());
  return v;
}

std::vector<std::pair<std::string, torch::Tensor>> AdamW::state() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto* g : {&decay_, &no_decay_}) {
    for (std::size_t i = 0; i < g->names.size(); ++i) {
      out.emplace_back(g->names[i] + "/exp_avg", g->exp_avg[i]);
      out.emplace_back(g->names[i] + "/exp_avg_sq", g->exp_avg_sq[i]);
      out.emplace_back(g->names[i] + "/step", g->steps[i]);
    }
  }
  return out;
}

void AdamW::load_state(const std::function<torch::Tensor(const std::string&)>& get, const std::string& origin) {
  torch::NoGradGuard no_grad;
  for (auto* g : {&decay_, &no_decay_}) {
    for (std::size_t i = 0; i < g->names.size(); ++i) {
      for (auto [suffix, target] : {std::pair{"/exp_avg", &g->exp_avg[i]}, std::pair{"/exp_avg_sq", &g->exp_avg_sq[i]},
                                    std::pair{"/step", &g->steps[i]}}) {
        const auto t = get(g->names[i] + suffix);
        if (!t.sizes().equals(target->sizes())) {
          throw core::ConfigError(str_cat(origin, ": optimizer state ", g->names[i], suffix, " has shape ", t.sizes(),
                                          ", the model needs ", target->sizes()));
        }
        target->copy_(t);
      }
    }
  }
}


}  // namespace cpt::exec
