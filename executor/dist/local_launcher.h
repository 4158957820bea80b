#pragma once
// `cpt train --nproc-per-node N [--nnodes K --node-rank I --master-addr A --master-port P]`:
// starts this node's N ranks as child processes of the same executable with the launch
// environment of launch_info.h (RANK = I·N + local rank, WORLD_SIZE = K·N, ...), forwards SIGINT and
// SIGTERM to them, and when one fails stops the others (SIGTERM, then SIGKILL after a grace period),
// so no rank is left waiting in a collective. LibTorch-free.
#include <string>
#include <vector>

namespace cpt::exec {

struct LocalLaunch {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: a free port of this host (single-node jobs only)
};

// Runs /proc/self/exe with `args` (argv without argv[0]) once per local rank. Returns 0 when every
// rank exits 0; otherwise the exit code of the first rank that failed (3 when it was killed by a
// signal), after stopping the others. ConfigError for an inconsistent launch (node_rank >= nnodes,
// master_port 0 with several nodes).
int run_local_ranks(const std::vector<std::string>& args, const LocalLaunch& launch);

}  // namespace cpt::exec
