#include "executor/parallel/full_state.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "spec/parameter_order.h"

namespace cpt::exec {

namespace {

// The parameter a name belongs to, and whether it is split like that parameter.
std::pair<std::string, bool> parameter_of(const std::string& name) {
  const auto slash = name.rfind('/');
  if (slash == std::string::npos) return {name, true};
  return {name.substr(0, slash), name.substr(slash + 1) != "step"};
}

constexpr int kHeaderTag = 1;
constexpr int kTensorTag = 2;

// A list of fp32 tensors to `peer`: a JSON header (names, shapes) as bytes, then each tensor.
void send_tensors(Communicator& c, int peer, const NamedParams& tensors) {
  nlohmann::json header = nlohmann::json::array();
  for (const auto& [name, t] : tensors) header.push_back({{"name", name}, {"shape", t.sizes().vec()}});
  const auto text = header.dump();
  auto size = torch::tensor({static_cast<std::int64_t>(text.size())}, torch::kInt64);
  c.send(size, peer, kHeaderTag)->wait();
  auto bytes = torch::empty({static_cast<std::int64_t>(text.size())}, torch::kUInt8);
  std::memcpy(bytes.data_ptr(), text.data(), text.size());
  c.send(bytes, peer, kHeaderTag)->wait();
  for (const auto& [name, t] : tensors) {
    auto x = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
    c.send(x, peer, kTensorTag)->wait();
  }
}

NamedParams recv_tensors(Communicator& c, int peer) {
  auto size = torch::empty({1}, torch::kInt64);
  c.recv(size, peer, kHeaderTag)->wait();
  auto bytes = torch::empty({size.item<std::int64_t>()}, torch::kUInt8);
  c.recv(bytes, peer, kHeaderTag)->wait();
  const auto header = nlohmann::json::parse(
      std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<std::size_t>(bytes.numel())));
  NamedParams out;
  for (const auto& entry : header) {
    auto t = torch::empty(entry.at("shape").get<std::vector<std::int64_t>>(), torch::kFloat32);
    c.recv(t, peer, kTensorTag)->wait();
    out.emplace_back(entry.at("name").get<std::string>(), t);
  }
  return out;
}

// `local` with every rank of the ep group's routed experts, on its rank 0 (the others send theirs
// there and get `local` back).
NamedParams with_every_expert(const NamedParams& local, Communicator& ep) {
  if (ep.rank() != 0) {
    NamedParams experts;
    for (const auto& entry : local) {
      if (spec::is_routed_expert(entry.first)) experts.push_back(entry);
    }
    send_tensors(ep, 0, experts);
    return local;
  }
  NamedParams all = local;
  for (int r = 1; r < ep.size(); ++r) {
    for (auto& entry : recv_tensors(ep, r)) all.push_back(std::move(entry));
  }
  return all;
}

// `local` with its routed experts' tensors whole, joined from the etp group's shards (the splits
// name etp alone, so every other tensor passes through as it is).
NamedParams with_whole_experts(const NamedParams& local, std::int64_t vocab, Communicator& etp) {
  const ParameterSplits splits{TensorParallel{}, TensorParallel{&etp}};
  NamedParams out;
  for (const auto& [name, t] : local) {
    const auto [param, split] = parameter_of(name);
    out.emplace_back(name, split ? tp_full_from_shards(param, t, vocab, splits) : t);
  }
  return out;
}

}  // namespace

torch::Tensor shard_of_full_tensor(const std::string& name, const torch::Tensor& full, std::int64_t vocab,
                                   const ParameterSplits& splits) {
  const auto [param, split] = parameter_of(name);
  return split ? tp_shard_of_full(param, full, vocab, splits) : full;
}

NamedParams gather_full_tensors(const NamedParams& local, std::int64_t vocab, const FullStateGroups& groups) {
  const bool experts_apart = groups.ep != nullptr && groups.ep->size() > 1;
  const bool experts_split = groups.etp != nullptr && groups.etp->size() > 1;
  NamedParams gathered = local;
  if (groups.holds_expert_replica_zero) {
    if (experts_split) gathered = with_whole_experts(local, vocab, *groups.etp);
    // The other members of an etp group hold the same experts as its rank 0.
    if (experts_apart && (!experts_split || groups.etp->rank() == 0)) {
      gathered = with_every_expert(gathered, *groups.ep);
    }
  }
  if (!groups.holds_replica_zero) return {};
  NamedParams full;
  for (const auto& [name, t] : gathered) {
    const auto [param, split] = parameter_of(name);
    // The experts are whole by now (groups.tp alone: tp does not split them).
    full.emplace_back(name, split ? tp_full_from_shards(param, t, vocab, groups.tp) : t);
  }
  if (groups.tp.rank() != 0) return {};
  if (groups.pp == nullptr || groups.pp->size() == 1) return full;
  auto& pp = *groups.pp;
  if (pp.rank() != 0) {
    send_tensors(pp, 0, full);
    return {};
  }
  for (int r = 1; r < pp.size(); ++r) {
    auto more = recv_tensors(pp, r);
    for (auto& x : more) full.push_back(std::move(x));
  }
  return full;
}

}  // namespace cpt::exec
