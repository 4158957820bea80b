#pragma once
// CPT_CHECK(cond, message parts...): an always-on invariant check. On failure it throws
// core::InternalError("file:line: check failed: cond: message"); the CLI maps that to exit 1.
// Use it for bugs, never for user input (that is ConfigError, see core/error.h).
//
//   CPT_CHECK(stage < num_stages, "stage ", stage, " of ", num_stages);

#include "core/error.h"
#include "core/str_cat.h"

#define CPT_CHECK(cond, ...)                                                              \
  do {                                                                                    \
    if (!(cond)) [[unlikely]] {                                                           \
      throw ::cpt::core::InternalError(::cpt::core::str_cat(                              \
          __FILE__, ":", __LINE__, ": check failed: " #cond __VA_OPT__(": ", ) __VA_ARGS__)); \
    }                                                                                     \
  } while (false)

#define CPT_UNREACHABLE(...)                                                                 \
  throw ::cpt::core::InternalError(::cpt::core::str_cat(__FILE__, ":", __LINE__, ": unreachable" \
                                                        __VA_OPT__(": ", ) __VA_ARGS__))
