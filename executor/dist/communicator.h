#pragma once
// The executor's view of a process group: the collectives and point-to-point operations it uses,
// on tensors, behind an interface so that c10d (and its 1.x / 2.x differences) stays in
// c10d_communicator.cpp. Every operation is asynchronous and returns a handle to wait on.
// Groups are built from spec::RankLayout (process_groups.h) and passed explicitly, never global.
#include <torch/torch.h>

#include <memory>
#include <cstdint>
#include <string>
#include <vector>

namespace cpt::exec {

// A pending operation. wait() blocks (Gloo) or orders the current stream (NCCL); a collective that
// does not complete within the group's timeout throws RuntimeError naming the group, rank and op.
class CommHandle {
 public:
  virtual ~CommHandle() = default;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  [[nodiscard]] virtual int rank() const = 0;  // inside this group
  [[nodiscard]] virtual int size() const = 0;
  [[nodiscard]] virtual const std::string& name() const = 0;  // e.g. "dp/3"

  // COLLECTIVE: every rank of the group calls them in the same order.
  [[nodiscard]] virtual std::unique_ptr<CommHandle> all_reduce_sum(torch::Tensor& inout) = 0;
  // out = concatenation of every rank's `in` (out.numel() == size() · in.numel()).
  [[nodiscard]] virtual std::unique_ptr<CommHandle> all_gather(const torch::Tensor& in, torch::Tensor& out) = 0;
  // out = this rank's slice of the sum of every rank's `in` (in.numel() == size() · out.numel()).
  [[nodiscard]] virtual std::unique_ptr<CommHandle> reduce_scatter_sum(const torch::Tensor& in, torch::Tensor& out) = 0;
  [[nodiscard]] virtual std::unique_ptr<CommHandle> broadcast(torch::Tensor& t, int root) = 0;
  // Rows (dim 0) exchanged with every rank: `in`'s first in_rows[0] rows go to rank 0, the next
  // in_rows[1] to rank 1, ...; `out` receives out_rows[r] rows from rank r, in rank order (c10d's
  // alltoall_base). The rank's own rows are copied. REQUIRES: both contiguous, the same row shape,
  // size() entries in each list summing to their tensor's rows, and every rank's in_rows[r] equal
  // to rank r's out_rows[this rank].
  [[nodiscard]] virtual std::unique_ptr<CommHandle> all_to_all(const torch::Tensor& in, torch::Tensor& out,
                                                               const std::vector<std::int64_t>& in_rows,
                                                               const std::vector<std::int64_t>& out_rows) = 0;
  // POINT-TO-POINT: `peer` is a rank inside this group.
  [[nodiscard]] virtual std::unique_ptr<CommHandle> send(torch::Tensor& t, int peer, int tag) = 0;
  [[nodiscard]] virtual std::unique_ptr<CommHandle> recv(torch::Tensor& t, int peer, int tag) = 0;
  virtual void barrier() = 0;
};

// A group of one process: every collective is the identity (sum over one rank), so single-process
// code paths need no special case.
std::unique_ptr<Communicator> make_solo_communicator(std::string name);

}  // namespace cpt::exec
