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

// Rows per local expert: [block][local expert].
using RowsPerExpert = std::vector<std::vector<std::int64_t>>;

// In local-expert order, the rows of blocks whose rows per local expert are `per_block[b]` (each
// block itself in local-expert order, the blocks one after another).
std::vector<std::int64_t> rows_by_expert(const RowsPerExpert& per_block) {
  std::vector<std::int64_t> block_start;
  std::int64_t rows = 0;
  for (const auto& block : per_block) {
    block_start.push_back(rows);
    rows += total(block);
  }
  std::vector<std::int64_t> order;
  order.reserve(static_cast<std::size_t>(rows));
  const std::size_t local = per_block.empty() ? 0 : per_block.front().size();
  for (std::size_t j = 0; j < local; ++j) {
    for (std::size_t b = 0; b < per_block.size(); ++b) {
      const auto& block = per_block[b];
      const std::int64_t at =
          block_start[b] +
          std::accumulate(block.begin(), block.begin() + static_cast<std::ptrdiff_t>(j), std::int64_t{0});
      for (std::int64_t i = 0; i < block[j]; ++i) order.push_back(at + i);
    }
  }
  return order;
}

}  // namespace

ExpertDispatch plan_expert_dispatch(const torch::Tensor& pairs_per_expert, const ExpertParallel& ep) {
  const auto ranks = static_cast<std::size_t>(ep.size()), peers = static_cast<std::size_t>(ep.etp_size());
  const auto self = static_cast<std::size_t>(ep.rank()), peer_self = static_cast<std::size_t>(ep.etp_rank());
  const std::int64_t experts = pairs_per_expert.size(0);
  CPT_CHECK(experts % ep.size() == 0, experts, " experts over an ep group of ", ranks);
  Communicator* gather_group = ep.ep_etp != nullptr ? ep.ep_etp : ep.active() ? ep.group : ep.etp;
  CPT_CHECK(gather_group != nullptr && static_cast<std::size_t>(gather_group->size()) == ranks * peers,
            "the dispatch needs a group of ", ranks * peers, " ranks");
  const auto local = static_cast<std::size_t>(experts) / ranks, first = self * local;
  // [ep · etp, E]: every rank's pairs per expert, rank (ep coord r, etp coord t) at r · etp + t.
  auto counts = torch::empty({static_cast<std::int64_t>(ranks * peers), experts}, pairs_per_expert.options());
  gather_group->all_gather(pairs_per_expert.contiguous(), counts)->wait();
  const auto host = counts.to(torch::kCPU).contiguous();
  const auto* c = host.data_ptr<std::int64_t>();
  auto count = [&](std::size_t rank, std::size_t peer, std::size_t expert) {
    return c[(rank * peers + peer) * static_cast<std::size_t>(experts) + expert];
  };

  ExpertDispatch d;
  d.send_rows.assign(ranks, 0);
  d.recv_rows.assign(ranks, 0);
  for (std::size_t r = 0; r < ranks; ++r) {
    for (std::size_t j = 0; j < local; ++j) d.send_rows[r] += count(self, peer_self, r * local + j);
  }
  // [etp member][source rank][local expert]: the rows each member receives; then each member's
  // received rows per local expert, summed over the sources.
  std::vector<RowsPerExpert> received(peers, RowsPerExpert(ranks, std::vector<std::int64_t>(local, 0)));
  RowsPerExpert member_rows(peers, std::vector<std::int64_t>(local, 0));
  d.rows_per_local_expert.assign(local, 0);
  for (std::size_t t = 0; t < peers; ++t) {
    for (std::size_t r = 0; r < ranks; ++r) {
      for (std::size_t j = 0; j < local; ++j) {
        received[t][r][j] = count(r, t, first + j);
        member_rows[t][j] += received[t][r][j];
        d.rows_per_local_expert[j] += received[t][r][j];
      }
    }
  }
  for (std::size_t r = 0; r < ranks; ++r) d.recv_rows[r] = total(received[peer_self][r]);
  d.by_expert = torch::tensor(rows_by_expert(received[peer_self]), torch::kInt64).to(pairs_per_expert.device());
  if (peers > 1) {
    for (const auto& rows : member_rows) d.etp_rows.push_back(total(rows));
    d.etp_by_expert = torch::tensor(rows_by_expert(member_rows), torch::kInt64).to(pairs_per_expert.device());
  }
  return d;
}

torch::Tensor exchange_rows(const torch::Tensor& rows, const std::vector<std::int64_t>& send_rows,
                            const std::vector<std::int64_t>& recv_rows, Communicator& group) {
  return ExchangeRows::apply(rows, send_rows, recv_rows, reinterpret_cast<std::int64_t>(&group));
}

torch::Tensor gather_blocks(const torch::Tensor& rows, const std::vector<std::int64_t>& etp_rows, Communicator& etp) {
  const auto members = static_cast<std::int64_t>(etp_rows.size());
  const std::vector<std::int64_t> own(etp_rows.size(), rows.size(0));
  // A copy of the rows for each member (their gradients come back from each and are summed).
  auto shape = rows.sizes().vec();
  shape.insert(shape.begin(), members);
  return exchange_rows(rows.unsqueeze(0).expand(shape).flatten(0, 1), own, etp_rows, etp);
}

torch::Tensor reduce_scatter_blocks(const torch::Tensor& partial, const std::vector<std::int64_t>& etp_rows,
                                    Communicator& etp) {
  const auto members = static_cast<std::int64_t>(etp_rows.size());
  const std::int64_t own_rows = etp_rows[static_cast<std::size_t>(etp.rank())];
  const std::vector<std::int64_t> own(etp_rows.size(), own_rows);
  auto shape = partial.sizes().vec();
  shape[0] = own_rows;
  shape.insert(shape.begin(), members);
  return exchange_rows(partial, etp_rows, own, etp).view(shape).sum(0);
}

}  // namespace cpt::exec
