#pragma once
// ShardLayout: which slice of a flat buffer each member of a ZeRO shard group owns (llm.c's
// multi_gpu_get_shard_offset as a type).
//
// The buffer of `num_elements` is padded to `padded_size()`, a multiple of
// shard_group_size·align_elements, and split into equal contiguous slices: member i owns
// [i·shard_size, (i+1)·shard_size). Equal slices are what reduce-scatter and all-gather need;
// alignment keeps every slice start aligned for vectorised optimizer kernels.
// Example: 10 elements, 4 members, align 1 -> padded 12, slices [0,3) [3,6) [6,9) [9,12); member 3
// owns one real element (9) and two padding elements.

#include <cstdint>

namespace cpt::spec {

struct ShardSlice {
  std::int64_t offset = 0;  // in elements of the flat (padded) buffer
  std::int64_t size = 0;
  bool operator==(const ShardSlice&) const = default;
};

// What a ZeRO stage shards over the shard group (Rajbhandari et al. 2020, §5: P_os, P_os+g,
// P_os+g+p). Everything not sharded is replicated on every member.
struct ZeroSharding {
  bool optimizer_state = false;
  bool gradients = false;
  bool parameters = false;
};
// REQUIRES: 0 <= stage <= 3.
ZeroSharding zero_sharding(int stage);

class ShardLayout {
 public:
  // REQUIRES: num_elements >= 0, shard_group_size >= 1, align_elements >= 1.
  ShardLayout(std::int64_t num_elements, int shard_group_size, std::int64_t align_elements = 1);

  [[nodiscard]] std::int64_t num_elements() const { return num_elements_; }
  [[nodiscard]] int shard_group_size() const { return group_; }
  [[nodiscard]] std::int64_t padded_size() const { return shard_size_ * group_; }
  [[nodiscard]] std::int64_t shard_size() const { return shard_size_; }
  // The slice member `index` owns, padding included. REQUIRES: 0 <= index < shard_group_size.
  [[nodiscard]] ShardSlice slice(int index) const;
  // The part of slice(index) that holds real elements (size 0 for an all-padding slice).
  [[nodiscard]] ShardSlice unpadded_slice(int index) const;

 private:
  std::int64_t num_elements_;
  int group_;
  std::int64_t shard_size_;
};

}  // namespace cpt::spec
