#include "spec/shard_layout.h"

#include <algorithm>

#include "core/check.h"

namespace cpt::spec {

ZeroSharding zero_sharding(int stage) {
  CPT_CHECK(stage >= 0 && stage <= 3, "ZeRO stage ", stage);
  return ZeroSharding{stage >= 1, stage >= 2, stage >= 3};
}

ShardLayout::ShardLayout(std::int64_t num_elements, int shard_group_size, std::int64_t align_elements)
    : num_elements_(num_elements), group_(shard_group_size) {
  CPT_CHECK(num_elements >= 0 && shard_group_size >= 1 && align_elements >= 1, "elements ", num_elements,
            " group ", shard_group_size, " align ", align_elements);
  const std::int64_t per = (num_elements + shard_group_size - 1) / shard_group_size;
  shard_size_ = (per + align_elements - 1) / align_elements * align_elements;
}

ShardSlice ShardLayout::slice(int index) const {
  CPT_CHECK(index >= 0 && index < group_, "shard index ", index, " of ", group_);
  return ShardSlice{index * shard_size_, shard_size_};
}

ShardSlice ShardLayout::unpadded_slice(int index) const {
  const ShardSlice s = slice(index);
  const std::int64_t end = std::min(s.offset + s.size, num_elements_);
  return ShardSlice{s.offset, std::max<std::int64_t>(0, end - s.offset)};
}

}  // namespace cpt::spec
