#include "executor/parallel/expert_parallel.h"

#include <numeric>

#include "core/check.h"

namespace cpt::exec {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::int64_t total(const std::vector<std::int64_t>& rows) {
  return std::accumulate(rows.begin(), rows.end(), std::int64_t{0});
}

torch::Tensor all_to_all_rows(const torch::Tensor& rows, const std::vector<std::int64_t>& send_rows,
                              const std::vector<std::int64_t>& recv_rows, Communicator& group) {
  const auto in = rows.contiguous();
  auto shape = in.sizes().vec();
  shape[0] = total(recv_rows);
  auto out = torch::empty(shape, in.options());
  group.all_to_all(in, out, send_rows, recv_rows)->wait();
  return out;
}

// The communicator and the row counts travel through the autograd context: groups outlive every
// step.
struct ExchangeRows : public torch::autograd::Function<ExchangeRows> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& rows, std::vector<std::int64_t> send_rows,
                               std::vector<std::int64_t> recv_rows, std::int64_t comm) {
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["send"] = send_rows;
    ctx->saved_data["recv"] = recv_rows;
    return all_to_all_rows(rows, send_rows, recv_rows, *reinterpret_cast<Communicator*>(comm));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    auto& group = *reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
    const auto send_rows = ctx->saved_data["send"].toIntVector();
    const auto recv_rows = ctx->saved_data["recv"].toIntVector();
    return {all_to_all_rows(grad[0], recv_rows, send_rows, group), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

ExpertDispatch plan_expert_dispatch(const torch::Tensor& pairs_per_expert, const ExpertParallel& ep) {
  const int ranks = ep.size(), self = ep.rank();
  const std::int64_t experts = pairs_per_expert.size(0);
  CPT_CHECK(experts % ranks == 0, experts, " experts over an ep group of ", ranks);
  const std::int64_t local = experts / ranks, first = self * local;
  // [ep, E]: every rank's pairs per expert.
  auto counts = torch::empty({ranks, experts}, pairs_per_expert.options());
  ep.group->all_gather(pairs_per_expert.contiguous(), counts)->wait();
  const auto host = counts.to(torch::kCPU);
  const auto c = host.accessor<std::int64_t, 2>();

  ExpertDispatch d;
  d.send_rows.assign(static_cast<std::size_t>(ranks), 0);
  d.recv_rows.assign(static_cast<std::size_t>(ranks), 0);
  d.rows_per_local_expert.assign(static_cast<std::size_t>(local), 0);
  for (int r = 0; r < ranks; ++r) {
    for (std::int64_t j = 0; j < local; ++j) {
      d.send_rows[static_cast<std::size_t>(r)] += c[self][r * local + j];
      d.recv_rows[static_cast<std::size_t>(r)] += c[r][first + j];
      d.rows_per_local_expert[static_cast<std::size_t>(j)] += c[r][first + j];
    }
  }
  // Where expert j's rows from source s start among the received rows.
  std::vector<std::int64_t> order;
  order.reserve(static_cast<std::size_t>(total(d.recv_rows)));
  for (std::int64_t j = 0; j < local; ++j) {
    std::int64_t source_start = 0;
    for (int s = 0; s < ranks; ++s) {
      std::int64_t at = source_start;
      for (std::int64_t before = 0; before < j; ++before) at += c[s][first + before];
      for (std::int64_t i = 0; i < c[s][first + j]; ++i) order.push_back(at + i);
      source_start += d.recv_rows[static_cast<std::size_t>(s)];
    }
  }
  d.by_expert = torch::tensor(order, torch::kInt64).to(pairs_per_expert.device());
  return d;
}

torch::Tensor exchange_rows(const torch::Tensor& rows, const std::vector<std::int64_t>& send_rows,
                            const std::vector<std::int64_t>& recv_rows, Communicator& group) {
  return ExchangeRows::apply(rows, send_rows, recv_rows, reinterpret_cast<std::int64_t>(&group));
}

}  // namespace cpt::exec
