#include "core/units.h"

#include <cmath>
#include <cstdio>

namespace cpt::core {
namespace {

std::string format(const char* fmt, double v, const char* unit) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v, unit);
  return buf;
}

}  // namespace

std::string to_string(Bytes b) {
  const double v = static_cast<double>(b.value());
  const double a = std::fabs(v);
  if (a >= static_cast<double>(kGiB)) return format("%.2f %s", v / static_cast<double>(kGiB), "GiB");
  if (a >= static_cast<double>(kMiB)) return format("%.2f %s", v / static_cast<double>(kMiB), "MiB");
  if (a >= static_cast<double>(kKiB)) return format("%.2f %s", v / static_cast<double>(kKiB), "KiB");
  return format("%.0f %s", v, "B");
}

std::string to_string(Seconds t) {
  const double v = t.value();
  const double a = std::fabs(v);
  if (a >= 1.0 || a == 0.0) return format("%.3f %s", v, "s");
  if (a >= 1e-3) return format("%.3f %s", v * 1e3, "ms");
  return format("%.3f %s", v * 1e6, "us");
}

std::string to_string(Flops f) {
  const double v = f.value();
  if (std::fabs(v) >= 1e15) return format("%.3f %s", v / 1e15, "PFLOP");
  if (std::fabs(v) >= 1e12) return format("%.3f %s", v / 1e12, "TFLOP");
  if (std::fabs(v) >= 1e9) return format("%.3f %s", v / 1e9, "GFLOP");
  return format("%.0f %s", v, "FLOP");
}

std::string to_string(BytesPerSecond r) { return format("%.1f %s", r.value() / kGB, "GB/s"); }

std::string to_string(FlopsPerSecond r) { return format("%.1f %s", r.value() / kTera, "TFLOP/s"); }

}  // namespace cpt::core
