#include "cli/executor_process.h"

#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "core/error.h"
#include "core/str_cat.h"

#include <nlohmann/json.hpp>

namespace cpt::cli {

namespace {

// execv(exe, [exe, args...]); returns only when exec fails.
void exec_with(const std::filesystem::path& exe, const std::vector<std::string>& args) {
  std::vector<std::string> storage = {exe.string()};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  ::execv(exe.c_str(), argv.data());
}

}  // namespace

std::optional<std::filesystem::path> find_executor() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return std::nullopt;
  auto candidate = self.parent_path() / "cpt-exec";
  if (std::filesystem::is_regular_file(candidate, ec)) return candidate;
  return std::nullopt;
}

ProcessOutput run_executor(const std::vector<std::string>& args) {
  const auto exe = find_executor();
  CPT_CHECK(exe.has_value(), "cpt-exec not found");
  int pipe_fd[2];
  if (::pipe2(pipe_fd, O_CLOEXEC) != 0)
    throw core::RuntimeError(core::str_cat("cannot create a pipe: ", std::strerror(errno)));
  const pid_t pid = ::fork();
  if (pid < 0) throw core::RuntimeError(core::str_cat("cannot fork: ", std::strerror(errno)));
  if (pid == 0) {
    ::dup2(pipe_fd[1], STDOUT_FILENO);
    ::close(pipe_fd[0]);
    ::close(pipe_fd[1]);
    exec_with(*exe, args);
    ::_exit(127);
  }
  ::close(pipe_fd[1]);
  ProcessOutput result;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(pipe_fd[0], buf, sizeof buf);
    if (n > 0) {
      result.out.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(pipe_fd[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status))
    throw core::RuntimeError(core::str_cat(exe->string(), " was killed by signal ", WTERMSIG(status)));
  result.exit_code = WEXITSTATUS(status);
  return result;
}

namespace {

// Runs `exe args...` with this process's standard streams and waits: its exit code.
int run_passthrough(const std::filesystem::path& exe, const std::vector<std::string>& args) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw core::RuntimeError(core::str_cat("cannot fork: ", std::strerror(errno)));
  if (pid == 0) {
    ::setenv("CPT_EXEC_INVOKED_AS", "cpt", 1);
    exec_with(exe, args);
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status))
    throw core::RuntimeError(core::str_cat(exe.string(), " was killed by signal ", WTERMSIG(status)));
  return WEXITSTATUS(status);
}

}  // namespace

int run_executor_passthrough(const std::vector<std::string>& args) {
  const auto exe = find_executor();
  CPT_CHECK(exe.has_value(), "cpt-exec not found");
  return run_passthrough(*exe, args);
}

int run_self_passthrough(const std::vector<std::string>& args) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw core::RuntimeError(core::str_cat("cannot find this cpt binary: ", ec.message()));
  return run_passthrough(self, args);
}

void check_step_exit(int code, const std::vector<std::string>& args) {
  if (code == 0) return;
  if (code == core::kExitBadInput) throw StepRefusedInput{};
  throw core::RuntimeError(core::str_cat("`cpt ", args.empty() ? std::string() : args.front(),
                                         args.size() > 1 ? " " + args[1] : std::string(), "` failed (exit ", code,
                                         "); the lines above say why"));
}

core::Json run_executor_json(const std::vector<std::string>& args) {
  const auto r = run_executor(args);
  if (r.exit_code != 0) {
    throw core::RuntimeError(core::str_cat("`cpt-exec ", args.front(), "` failed (exit ", r.exit_code, ")"));
  }
  return core::Json::parse(r.out);
}

void exec_executor(const std::vector<std::string>& args) {
  const auto exe = find_executor();
  CPT_CHECK(exe.has_value(), "cpt-exec not found");
  std::fflush(nullptr);
  ::setenv("CPT_EXEC_INVOKED_AS", "cpt", 1);  // so that its help and errors speak as `cpt`
  exec_with(*exe, args);
  throw core::RuntimeError(core::str_cat("cannot start ", exe->string(), ": ", std::strerror(errno)));
}

}  // namespace cpt::cli
