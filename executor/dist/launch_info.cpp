#include "executor/dist/launch_info.h"

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/str_cat.h"

namespace cpt::exec {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

int int_env(const char* primary, const char* slurm, int fallback) {
  const char* name = primary;
  const char* v = env(primary);
  if (v == nullptr && slurm != nullptr) {
    name = slurm;
    v = env(slurm);
  }
  if (v == nullptr) return fallback;
  try {
    std::size_t used = 0;
    const int x = std::stoi(v, &used);
    if (used != std::string(v).size() || x < 0) throw std::invalid_argument("");
    return x;
  } catch (const std::exception&) {
    throw core::ConfigError(core::str_cat("environment ", name, ": expected a non-negative integer, got \"", v, "\""));
  }
}

}  // namespace

LaunchInfo launch_info_from_env() {
  LaunchInfo l;
  l.rank = int_env("RANK", "SLURM_PROCID", 0);
  l.world_size = int_env("WORLD_SIZE", "SLURM_NTASKS", 1);
  l.local_rank = int_env("LOCAL_RANK", "SLURM_LOCALID", 0);
  l.local_world_size = int_env("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE", l.world_size);
  l.node_rank = int_env("NODE_RANK", "SLURM_NODEID", 0);
  if (l.world_size < 1 || l.rank >= l.world_size) {
    throw core::ConfigError(
        core::str_cat("environment RANK (", l.rank, ") must be below WORLD_SIZE (", l.world_size, ")"));
  }
  if (const char* a = env("MASTER_ADDR")) l.master_addr = a;
  if (const char* i = env("GLOO_SOCKET_IFNAME")) l.gloo_socket_ifname = i;
  l.master_port = int_env("MASTER_PORT", nullptr, 0);
  const char* agent_store = env("TORCHELASTIC_USE_AGENT_STORE");
  l.agent_hosts_store = agent_store != nullptr && std::string(agent_store) == "True";
  l.restart_count = int_env("TORCHELASTIC_RESTART_COUNT", nullptr, 0);
  const char* visible = env("CUDA_VISIBLE_DEVICES");
  const char* per_task = env("SLURM_GPUS_PER_TASK");
  l.gpu_bound_per_task = env("SLURM_LOCALID") != nullptr && per_task != nullptr && std::string(per_task) == "1" &&
                         visible != nullptr && std::string(visible).find(',') == std::string::npos;
  if (l.distributed() && (env("MASTER_ADDR") == nullptr || l.master_port == 0)) {
    throw core::ConfigError(core::str_cat("environment: WORLD_SIZE ", l.world_size,
                                          " needs MASTER_ADDR and MASTER_PORT (the rendezvous of rank 0)"));
  }
  return l;
}

}  // namespace cpt::exec
