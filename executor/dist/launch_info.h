#pragma once
// Who this process is in a multi-process job, read once from the launcher's environment: cpt's own
// launcher (`cpt train --nproc-per-node N`) and torchrun set RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR, MASTER_PORT; under Slurm (srun) SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID stand in for the first four (MASTER_ADDR/PORT must
// still be exported, as for torchrun), GLOO_SOCKET_IFNAME, and Slurm's GPU binding
// (SLURM_GPUS_PER_TASK, CUDA_VISIBLE_DEVICES). This is the only place the executor reads the
// environment.
#include <string>

namespace cpt::exec {

struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  // GLOO_SOCKET_IFNAME (as in PyTorch): the network interface Gloo uses; empty: the address the
  // host name resolves to, or loopback.
  std::string gloo_socket_ifname;
  // Slurm bound one GPU to this task (srun --gpus-per-task=1: SLURM_GPUS_PER_TASK=1, and
  // CUDA_VISIBLE_DEVICES names one device): it is device 0 whatever the local rank. One visible
  // device without that binding may be one GPU every task of the node shares: not a binding.
  bool gpu_bound_per_task = false;
  // torchrun's agent serves the rendezvous store on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True):
  // every rank connects as a client, its keys under "/worker/attempt_<restart_count>/" as
  // torch.distributed's env:// rendezvous puts them (TORCHELASTIC_RESTART_COUNT).
  bool agent_hosts_store = false;
  int restart_count = 0;
  [[nodiscard]] bool distributed() const { return world_size > 1; }
};

// ConfigError naming the variable when a value is malformed, or when WORLD_SIZE > 1 comes without
// MASTER_ADDR / MASTER_PORT.
LaunchInfo launch_info_from_env();

}  // namespace cpt::exec
