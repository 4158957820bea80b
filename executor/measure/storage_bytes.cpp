#include "executor/measure/storage_bytes.h"

#include <unordered_set>

namespace cpt::exec {

std::int64_t storage_bytes(const std::vector<torch::Tensor>& tensors) {
  std::unordered_set<const void*> seen;
  std::int64_t total = 0;
  for (const auto& t : tensors) {
    if (!t.defined() || !t.has_storage()) continue;
    const auto* impl = t.storage().unsafeGetStorageImpl();
    if (seen.insert(impl).second) total += static_cast<std::int64_t>(t.storage().nbytes());
  }
  return total;
}

}  // namespace cpt::exec
