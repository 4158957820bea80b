#include "executor/host_memory.h"

#include <climits>
#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace cpt::exec {

bool keep_freed_host_memory() {
  if (const char* v = std::getenv("CPT_HOST_MALLOC"); v != nullptr && std::strcmp(v, "system") == 0) return false;
#if defined(__GLIBC__)
  // Large blocks come from the heap (brk) instead of mmap, so freeing one keeps it for reuse;
  // glibc still falls back to mmap where the heap cannot grow. The threshold stays fixed.
  const bool no_mmap = mallopt(M_MMAP_MAX, 0) == 1;
  const bool no_trim = mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
  // The heap grows 256 MiB at a time (address space; pages are faulted in only when used), so a
  // step whose allocations shift (a profiled step's records) does not grow it, and fault, piecemeal.
  const bool pad = mallopt(M_TOP_PAD, 256 << 20) == 1;
  return no_mmap && no_trim && pad;
#else
  return false;
#endif
}

}  // namespace cpt::exec
