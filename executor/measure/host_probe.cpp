#include "executor/measure/host_probe.h"

#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>

#include "executor/measure/timing.h"

namespace cpt::exec {

double HostProbe::peak_flops_per_s() const {
  double best = 0;
  for (const auto& g : gemm) best = std::max(best, g.flops_per_s);
  return best;
}

HostProbe probe_host(double seconds) {
  torch::NoGradGuard no_grad;
  HostProbe p;
  p.cores = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  p.threads = at::get_num_threads();
  p.memory_bytes = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  const std::vector<std::int64_t> sizes = {128, 256, 512, 1024};
  const double per_size = seconds * 0.8 / static_cast<double>(sizes.size());
  for (const auto n : sizes) {
    const auto a = torch::randn({n, n});
    const auto b = torch::randn({n, n});
    auto c = torch::empty({n, n});
    const double s = time_per_call([&] { torch::mm_out(c, a, b); }, per_size);
    const double flop = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
    p.gemm.push_back({flop / 1e9, flop / s});
  }
  const std::int64_t elements = 32ll << 20;  // 128 MiB of fp32
  const auto src = torch::ones({elements});
  auto dst = torch::empty({elements});
  const double s = time_per_call([&] { dst.copy_(src); }, seconds * 0.2);
  p.copy_bytes_per_s = 2.0 * static_cast<double>(elements) * 4.0 / s;
  return p;
}

}  // namespace cpt::exec
