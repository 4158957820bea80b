#pragma once
// How the executor's process allocates host memory.
//
// glibc's malloc serves a request above its mmap threshold (128 KiB, growing up to 32 MiB) with a
// fresh mmap and unmaps it on free; it also trims the heap's free top back to the OS. A training
// step allocates and frees the same large tensors (logits, activations, gradients) every
// microbatch, so every step page-faults them in again: the kernel zeroes each 4 KiB page on first
// touch. On the tiny model that was a quarter of a CPU step (0.118 → 0.090 s single process,
// 0.074 → 0.055 s per DP2 rank; docs/benchmarks.md). This is the reason PyTorch's CPU
// performance guides recommend jemalloc or tcmalloc.
//
// keep_freed_host_memory() turns both off (mallopt: no mmapped chunks, trim only above 2 GiB
// free) and grows the heap 256 MiB at a time, so freed blocks are reused at the next step: the
// process's resident set stays near its peak, which is what the peak-memory figures count anyway.
// (A profiled step, whose records shift the heap, page-faulted its loss 3x slower without the
// padding.) CPT_HOST_MALLOC=system leaves glibc's defaults (to measure the difference). Call it
// first in main(), before any thread starts. Elsewhere than glibc it does nothing.
namespace cpt::exec {

// Returns false when the environment asked for the system defaults (or the C library has no
// mallopt), true when freed memory is now kept.
bool keep_freed_host_memory();

}  // namespace cpt::exec
