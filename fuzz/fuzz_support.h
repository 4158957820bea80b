#pragma once
// What a harness treats as the reader's answer rather than a finding: a core::ConfigError or
// core::RuntimeError (bad input, said in one line). Anything else that escapes — an
// InternalError (a CPT_CHECK the input reached), a std::exception from a library, a crash, or a
// sanitizer report — is a finding, and libFuzzer stops on it.
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "core/error.h"

namespace cpt::fuzz {

template <class Body>
void expect_an_answer(Body&& body) {
  try {
    body();
  } catch (const core::ConfigError&) {
  } catch (const core::RuntimeError&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "finding: %s\n", e.what());
    std::abort();
  }
}

}  // namespace cpt::fuzz
