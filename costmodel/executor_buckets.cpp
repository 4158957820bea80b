#include "costmodel/executor_buckets.h"

#include <algorithm>
#include <vector>

#include "spec/gradient_buckets.h"
#include "spec/parameter_order.h"
#include "spec/shard_layout.h"

namespace cpt::cost {

BucketStats executor_gradient_buckets(const spec::ModelSpec& m, int tp, std::span<const spec::LayerRange> held,
                                      bool first, bool last, bool single_stage, std::int64_t cap_elements,
                                      int shard_group, spec::ParameterSubset subset, int ep, int etp) {
  int layers = 0;
  for (const spec::LayerRange& range : held) layers += range.count;
  std::vector<std::int64_t> numels;
  numels.reserve(static_cast<std::size_t>(layers) * 12 + 3);
  spec::visit_gradient_order(
      m, tp, held, first, last, single_stage, [&](std::int64_t numel) { numels.push_back(numel); }, subset, ep, etp);
  BucketStats s;
  if (numels.empty()) return s;
  const auto buckets = spec::reverse_order_buckets(numels, cap_elements);
  s.count = static_cast<int>(buckets.size());
  // Segments per member: a parameter adds one to every member whose slice of its bucket it
  // touches, a contiguous range of members (a difference array over the group).
  const int n = std::max(1, shard_group);
  std::vector<int> starts(static_cast<std::size_t>(n) + 1, 0);
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    const auto& b = buckets[k];
    const auto pair = b.size() + (k + 1 < buckets.size() ? buckets[k + 1].size() : 0);
    s.largest_pair = std::max(s.largest_pair, static_cast<double>(pair));
    const std::int64_t slice = spec::ShardLayout(b.size(), n).shard_size();
    std::int64_t at = 0;  // the parameter's first element inside the bucket
    for (std::size_t j = b.first_param; j < b.end_param; ++j) {
      const std::int64_t size = numels[j];
      if (size > 0) {
        ++starts[static_cast<std::size_t>(at / slice)];
        --starts[static_cast<std::size_t>((at + size - 1) / slice) + 1];
      }
      at += size;
    }
  }
  int running = 0;
  for (int r = 0; r < n; ++r) {
    running += starts[static_cast<std::size_t>(r)];
    s.busiest_segments = std::max(s.busiest_segments, running);
  }
  return s;
}

}  // namespace cpt::cost
