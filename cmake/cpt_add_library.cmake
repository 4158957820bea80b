# cpt_add_library(NAME SOURCES a.cpp ... DEPS lib ... [PRIVATE_DEPS lib ...])
#   A static library of cpt's own code with explicit sources (no GLOB) and cpt's warnings.
# cpt_add_test(NAME SOURCES a_test.cpp ... DEPS lib ... LABELS cpu|gpu|multigpu)
#   One GoogleTest binary; every TEST in it becomes a ctest test carrying LABELS.
function(cpt_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  cpt_set_warnings(${name})
endfunction()

function(cpt_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
    CPT_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data"
    CPT_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  cpt_set_warnings(${name})
  # Listing a LibTorch-linked test binary's tests can take seconds on a cold page cache (a fresh
  # clone, a relink): wait longer than gtest's default 5 s before calling it a failure.
  gtest_discover_tests(${name}
    DISCOVERY_MODE PRE_TEST
    DISCOVERY_TIMEOUT 120
    PROPERTIES LABELS "${ARG_LABELS}")
endfunction()
