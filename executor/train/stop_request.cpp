#include "executor/train/stop_request.h"

#include <torch/torch.h>

namespace cpt::exec {

namespace {

volatile std::sig_atomic_t g_stop_requested = 0;

void request_stop(int) { g_stop_requested = 1; }

}  // namespace

StopRequest::StopRequest() {
  g_stop_requested = 0;
  struct sigaction on_stop {};
  on_stop.sa_handler = request_stop;
  sigemptyset(&on_stop.sa_mask);
  ::sigaction(SIGTERM, &on_stop, &previous_term_);
  ::sigaction(SIGINT, &on_stop, &previous_int_);
}

StopRequest::~StopRequest() {
  ::sigaction(SIGTERM, &previous_term_, nullptr);
  ::sigaction(SIGINT, &previous_int_, nullptr);
}

bool StopRequest::agreed(Communicator& world) const {
  const float mine = g_stop_requested != 0 ? 1.0f : 0.0f;
  if (world.size() == 1) return mine > 0;
  auto flag = torch::tensor({mine}, torch::kFloat32);
  world.all_reduce_sum(flag)->wait();
  return flag.item<float>() > 0;
}

}  // namespace cpt::exec
