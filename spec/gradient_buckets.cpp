#include "spec/gradient_buckets.h"

#include "core/check.h"

namespace cpt::spec {

std::vector<GradientBucket> reverse_order_buckets(std::span<const std::int64_t> numels, std::int64_t cap_elements) {
  CPT_CHECK(cap_elements >= 1, "bucket cap ", cap_elements);
  std::int64_t total = 0;
  for (const auto n : numels) {
    CPT_CHECK(n >= 0, "parameter of ", n, " elements");
    total += n;
  }
  std::vector<GradientBucket> out;
  std::int64_t end = total;
  std::size_t end_param = numels.size();
  std::int64_t filled = 0;
  for (std::size_t k = numels.size(); k-- > 0;) {
    const std::int64_t n = numels[k];
    if (filled > 0 && filled + n > cap_elements) {  // close the bucket [k + 1, end_param)
      out.push_back({end - filled, end, k + 1, end_param});
      end -= filled;
      end_param = k + 1;
      filled = 0;
    }
    filled += n;
  }
  if (end_param > 0) out.push_back({end - filled, end, 0, end_param});
  return out;
}

}  // namespace cpt::spec
