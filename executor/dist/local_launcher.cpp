#include "executor/dist/local_launcher.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/str_cat.h"
#include "executor/dist/failure_report.h"
#include "executor/dist/rank_board.h"

namespace cpt::exec {

using core::str_cat;

namespace {

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) {
  g_signal = sig;
}

// The first port of the kernel's ephemeral range (the local ports of outgoing connections), or 0
// when it cannot be read.
int ephemeral_ports_start() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int first = 0;
  return range >> first ? first : 0;
}

// Whether loopback port `port` binds now (0: any; `port` then receives the one bound).
bool binds(int& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw core::RuntimeError(str_cat("cannot open a socket: ", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  socklen_t len = sizeof addr;
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                     ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  if (bound) port = ntohs(addr.sin_port);
  return bound;
}

// A port for rank 0's rendezvous that is free now. Rank 0 listens on it a moment later; a port
// below the kernel's ephemeral range cannot meanwhile become the local port of some process's
// outgoing connection (Gloo opens many), so it is drawn from [10000, that range's start) where
// there is one, else the kernel picks.
int free_port() {
  const int ephemeral = ephemeral_ports_start();
  constexpr int kLowest = 10000;
  if (ephemeral > kLowest + 100) {
    std::random_device entropy;
    for (int attempt = 0; attempt < 64; ++attempt) {
      int port = kLowest + static_cast<int>(entropy() % static_cast<unsigned>(ephemeral - kLowest));
      if (binds(port)) return port;
    }
  }
  int port = 0;
  if (!binds(port)) throw core::RuntimeError(str_cat("cannot find a free port: ", std::strerror(errno)));
  return port;
}

int exit_code_of(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : core::kExitRuntime;
}

}  // namespace

namespace {

// Starts local rank `local` (global `rank`) as a child running /proc/self/exe `args`.
pid_t start_rank(const std::vector<std::string>& args, const LocalLaunch& l, int local, int port,
                 const RankBoard& board) {
  const int rank = l.node_rank * l.nproc_per_node + local;
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw core::RuntimeError(str_cat("cannot fork rank ", rank, ": ", std::strerror(errno)));
  if (pid != 0) return pid;
  // The rank dies with its launcher (kill -9 of the launcher would leave it training).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) std::_Exit(core::kExitRuntime);  // the launcher died before prctl
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(l.nnodes * l.nproc_per_node).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(l.nproc_per_node).c_str(), 1);
  ::setenv("NODE_RANK", std::to_string(l.node_rank).c_str(), 1);
  ::setenv("MASTER_ADDR", l.master_addr.c_str(), 1);
  ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  ::setenv(kRankBoardEnv, board.env_value().c_str(), 1);
  ::unsetenv("TORCHELASTIC_USE_AGENT_STORE");  // this launcher's rank 0 serves the store, not torchrun's agent
  std::vector<std::string> storage{"/proc/self/exe"};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  ::execv("/proc/self/exe", argv.data());
  std::_Exit(127);
}

// Prints the report of failure_report.h: the root cause first, as the program's error line.
void print_report(const FailureReport& report) {
  const char* invoked_as = std::getenv("CPT_EXEC_INVOKED_AS");
  const std::string name = invoked_as != nullptr ? invoked_as : "cpt-exec";
  std::cerr << name << ": error: " << report.root << "\n";
  for (const auto& other : report.others) std::cerr << name << ": because of it, " << other << "\n";
}

}  // namespace

namespace {

// Signals a process raises itself when it crashes: never the launcher's, whatever it sent.
bool is_crash(int sig) {
  return sig == SIGSEGV || sig == SIGABRT || sig == SIGBUS || sig == SIGFPE || sig == SIGILL;
}

// How local rank `local` ended (`status` from waitpid), with its board slot; `sent`: the signals
// the launcher had sent its ranks by then.
void record_end(RankEnd& end, int status, const std::set<int>& sent, const RankBoard& board, int local) {
  end.exit_code = exit_code_of(status);
  end.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  end.signalled_by_launcher = end.signal != 0 && sent.count(end.signal) != 0 && !is_crash(end.signal);
  end.ended_ns = monotonic_ns();
  end.at_end = board.read(local);
}

// The exit code of the job so far: the first failure's, but a stop's 4 gives way to any failure.
int worse_code(int so_far, int code) {
  if (code == 0) return so_far;
  return so_far == 0 || (so_far == core::kExitStopped && code != core::kExitStopped) ? code : so_far;
}

}  // namespace

int run_local_ranks(const std::vector<std::string>& args, const LocalLaunch& l) {
  if (l.nproc_per_node < 1 || l.nnodes < 1 || l.node_rank < 0 || l.node_rank >= l.nnodes) {
    throw core::ConfigError(str_cat("--node-rank ", l.node_rank, " must be below --nnodes ", l.nnodes));
  }
  if (l.nnodes > 1 && l.master_port == 0) {
    throw core::ConfigError(
        "--master-port: expected the rendezvous port of node 0 (every node must name the same), got none");
  }
  const int port = l.master_port != 0 ? l.master_port : free_port();
  const RankBoard board(l.nproc_per_node);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  std::vector<pid_t> children;
  std::vector<RankEnd> ends(static_cast<std::size_t>(l.nproc_per_node));
  for (int local = 0; local < l.nproc_per_node; ++local) {
    children.push_back(start_rank(args, l, local, port, board));
    ends[static_cast<std::size_t>(local)].rank = l.node_rank * l.nproc_per_node + local;
  }
  int result = 0;
  std::size_t running = children.size();
  bool stopping = false, failed = false;
  std::int64_t first_failure_ns = 0;
  std::set<int> sent;
  auto stop_all = [&](int sig) {
    sent.insert(sig);
    for (const pid_t c : children) {
      if (c > 0) ::kill(c, sig);
      if (c > 0) ::kill(c, SIGCONT);  // a stopped rank takes the signal now
    }
  };
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  while (running > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      const auto it = std::find(children.begin(), children.end(), pid);
      if (it == children.end()) continue;
      const auto local = static_cast<std::size_t>(it - children.begin());
      *it = -1;
      --running;
      record_end(ends[local], status, sent, board, static_cast<int>(local));
      result = worse_code(result, ends[local].exit_code);
      if (ends[local].exit_code == 0 || stopping) continue;  // asked to stop: kExitStopped after a checkpoint
      // The board as it was when the job failed: who was waiting for whom (failure_report.h).
      failed = true;
      first_failure_ns = monotonic_ns();
      for (std::size_t r = 0; r < ends.size(); ++r) {
        ends[r].at_first_failure = board.read(static_cast<int>(r));
        ends[r].alive_at_first_failure = children[r] > 0;
      }
      stopping = true;
      stop_all(SIGTERM);
      stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      continue;
    }
    if (g_signal != 0 && !stopping) {
      // Passed on: the ranks finish their step and write a final checkpoint (stop_request.h), which
      // they are given two minutes for.
      stopping = true;
      stop_all(g_signal);
      stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    }
    if (stopping && std::chrono::steady_clock::now() > stop_deadline) stop_all(SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // A rank that failed while the job was asked to stop (its final checkpoint on a full disk) left
  // its error on the board too: said, as after any failure.
  const bool any_error = std::any_of(ends.begin(), ends.end(), [](const RankEnd& e) { return failed_with_error(e); });
  if (!failed && !any_error) return result;
  if (!failed) {
    first_failure_ns = monotonic_ns();
    for (auto& e : ends) e.at_first_failure = e.at_end;
  }
  const FailureReport report = explain_failure(ends, first_failure_ns);
  print_report(report);
  return report.exit_code;
}

}  // namespace cpt::exec
