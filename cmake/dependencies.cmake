# Every find_package of the project, and the two build switches:
#   CPT_HAVE_TORCH     LibTorch was found: the executor (cpt_executor) and its CPU tests are built.
#   CPT_EXECUTOR_CUDA  that LibTorch is a CUDA build and the CUDA toolkit is present: the CUDA and
#                      NCCL code paths of the executor are compiled and linked too.
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 2.1 REQUIRED)
find_package(Eigen3 3.3 REQUIRED NO_MODULE)
find_package(Boost 1.74 REQUIRED)   # header-only Boost.Graph
find_package(Threads REQUIRED)      # the planner's worker threads
if(CPT_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()

set(CPT_HAVE_TORCH OFF)
set(CPT_EXECUTOR_CUDA OFF)
set(CPT_TORCH_VERSION "")
if(CPT_WITH_TORCH)
  # LibTorch is found through CMAKE_PREFIX_PATH or Torch_DIR; scripts/configure passes the prefix
  # of the pinned `torch` wheel (torch.utils.cmake_prefix_path), and a user's own LibTorch works
  # the same way.
  # A CUDA build of LibTorch would otherwise try to detect the GPUs of this machine (a try_run
  # that fails without one). cpt compiles no CUDA kernels of its own, so the list only has to be
  # valid: Ampere (A100) and Hopper (H100/H200).
  if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST} AND NOT TORCH_CUDA_ARCH_LIST)
    set(TORCH_CUDA_ARCH_LIST "8.0;9.0" CACHE STRING "CUDA architectures for LibTorch's CMake config")
  endif()
  find_package(Torch QUIET)
  # SentencePiece (Debian's libsentencepiece-dev) is the executor's tokenizer.
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_check_modules(SentencePiece IMPORTED_TARGET sentencepiece)
  endif()
  if(Torch_FOUND AND NOT SentencePiece_FOUND)
    message(WARNING "LibTorch found but SentencePiece is not (install libsentencepiece-dev): the executor is not built")
  endif()
  if(Torch_FOUND AND SentencePiece_FOUND)
    set(CPT_HAVE_TORCH ON)
    # The C++ ABI of LibTorch must be the ABI of every cpt object that meets it, i.e. all of them.
    separate_arguments(_cpt_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
    add_compile_options(${_cpt_torch_flags})
    if(DEFINED Torch_VERSION)
      set(CPT_TORCH_VERSION "${Torch_VERSION}")
    endif()
    if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
      set(CPT_EXECUTOR_CUDA ON)
    endif()
  endif()
endif()
