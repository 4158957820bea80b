#pragma once
// Counts the ATen operators a piece of work dispatches — the "kernels" of the cost model's fixed
// per-kernel cost (costmodel/layer_costs.h) — through LibTorch's RecordFunction observers.
//
// Contract: while an OpCounter is alive the operators of the thread that made it are observed (on
// the CPU the autograd engine runs backward on the calling thread; communication libraries'
// worker threads are not counted). One counter at a time; the trainer keeps one alive for its
// untimed first step only (observing costs ~1 µs per operator). An operator is counted when it is
// entered at nesting depth 0: the calls the model's own code makes (aten::linear counts once, not
// again for the aten::addmm inside it) and each node the autograd engine runs in backward (the
// operators inside a built-in node are its implementation, nested). The body of a custom autograd
// function's backward (torch::autograd::CppNode: recomputation under activation checkpointing,
// tensor-parallel regions) is model code: its operators and the nodes of its inner backward count
// at depth 0. Collectives are not operators here (the communicators count their calls).
#include <cstdint>
#include <memory>

namespace cpt::exec {

struct OpCounts {
  std::int64_t forward_ops = 0;     // depth-0 ATen operators: model, loss, optimizer, custom backward bodies
  std::int64_t backward_nodes = 0;  // autograd nodes run by backward()
  std::int64_t nested_ops = 0;      // operators called inside another operator or node
  std::int64_t top_level() const { return forward_ops + backward_nodes; }
};

class OpCounter {
 public:
  OpCounter();
  ~OpCounter();
  OpCounter(const OpCounter&) = delete;
  OpCounter& operator=(const OpCounter&) = delete;
  // The counts since construction.
  OpCounts counts() const;

 private:
  std::uint64_t handle_;
};

}  // namespace cpt::exec
