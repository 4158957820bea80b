#include "executor/measure/op_counter.h"

#include <ATen/record_function.h>

#include <atomic>
#include <cstring>
#include <thread>

namespace cpt::exec {

namespace {

std::atomic<std::int64_t> g_forward{0};
std::atomic<std::int64_t> g_backward{0};
std::atomic<std::int64_t> g_nested{0};
thread_local int t_depth = 0;
// The autograd engine records each node it runs under this name prefix (FUNCTION scope), with the
// node's own BACKWARD_FUNCTION record nested inside.
constexpr char kEngineNode[] = "autograd::engine::evaluate_function";
// A custom autograd function's node (torch::autograd::CppNode<T>): its backward is the model's own
// code (activation checkpointing recomputes a block there, tensor-parallel regions communicate),
// so the operators it calls are counted as top level, not as the node's implementation.
constexpr char kCustomNode[] = "CppNode<";

std::thread::id g_thread;

// Returned for a record that does not nest what it encloses (a custom node and its own record).
struct Transparent : at::ObserverContext {};

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  if (std::this_thread::get_id() != g_thread) return nullptr;
  const char* name = fn.name();
  const bool engine_node = std::strncmp(name, kEngineNode, sizeof(kEngineNode) - 1) == 0;
  const bool custom = std::strstr(name, kCustomNode) != nullptr;
  if (t_depth == 0 && custom) {
    if (engine_node) g_backward.fetch_add(1, std::memory_order_relaxed);
    return std::make_unique<Transparent>();
  }
  if (t_depth > 0) {
    g_nested.fetch_add(1, std::memory_order_relaxed);
  } else if (engine_node || fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    g_backward.fetch_add(1, std::memory_order_relaxed);
  } else {
    g_forward.fetch_add(1, std::memory_order_relaxed);
  }
  ++t_depth;
  return nullptr;
}

void on_exit(const at::RecordFunction&, at::ObserverContext* ctx) {
  if (std::this_thread::get_id() != g_thread || ctx != nullptr) return;
  if (t_depth > 0) --t_depth;
}

}  // namespace

OpCounter::OpCounter() {
  g_forward = 0;
  g_backward = 0;
  g_nested = 0;
  g_thread = std::this_thread::get_id();
  handle_ = at::addGlobalCallback(at::RecordFunctionCallback(on_enter, on_exit)
                                      .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION})
                                      .needsInputs(false)
                                      .needsOutputs(false));
}

OpCounter::~OpCounter() { at::removeCallback(handle_); }

OpCounts OpCounter::counts() const {
  return {g_forward.load(std::memory_order_relaxed), g_backward.load(std::memory_order_relaxed),
          g_nested.load(std::memory_order_relaxed)};
}

}  // namespace cpt::exec
