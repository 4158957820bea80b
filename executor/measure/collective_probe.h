#pragma once
// What `cpt calibrate` measures of the executor's own c10d backend (Gloo on CPU tensors, NCCL on
// CUDA tensors), for costmodel/calibration_fit.h: the collectives over message sizes, the per-step
// scalar all-reduce, and what ranks lose to one another on the host: waiting for the slowest rank,
// computing beside an in-flight collective, resuming from a blocking call.
#include <string>
#include <vector>

#include <torch/torch.h>

#include "executor/dist/communicator.h"

namespace cpt::exec {

struct CommMeasurement {
  std::string op;  // all_reduce, all_gather, reduce_scatter, send_recv
  int ranks = 0;
  double bytes = 0;    // the full buffer (all_gather: the gathered result)
  double seconds = 0;  // one call, the slowest rank's mean
};

// COLLECTIVE over `world`: every op at every size in [4 KiB, max_bytes], ×4 apart, each timed
// for about `seconds_per_point`, on buffers on `device` (CUDA: `world` must route CUDA tensors to
// NCCL); every rank returns the same list.
std::vector<CommMeasurement> measure_collectives(Communicator& world, double max_bytes, double seconds_per_point,
                                                 const torch::Device& device = torch::kCPU);

// COLLECTIVE over `world`: an all-reduce of two fp64 values on the CPU, as the executor runs its
// per-step scalars (the loss and its token count, the gradient norm: Gloo, also beside NCCL),
// back to back for about `seconds`: seconds per call, the slowest rank's mean. Gloo takes another
// path for them than for 4 KiB (on this project's VM 0.4 ms on 2 ranks against 1.8 ms).
double measure_scalar_all_reduce(Communicator& world, double seconds);

// Waiting for the slowest rank at a blocking call when every rank computes before it, as
// training's tensor- and context-parallel calls do (the ranks' compute varies, so each call waits
// for the slowest), at one length of compute.
struct SyncWait {
  double segment_s = 0;  // the ranks' mean compute before each call
  double extra_s = 0;    // their mean wait per call minus the back-to-back call's time
  // Per call, the slowest rank's compute beyond the ranks' mean, averaged over the calls: the part
  // of the wait that the compute's own variation explains. Reported, not fitted: on this project's
  // VM it is a small part of extra_s (0.1-0.5 ms per 16 ms of compute against 0.5-2 ms), the rest
  // being a call's slower latency after compute than back to back (docs/calibration.md).
  double spread_s = 0;
};
// COLLECTIVE over `world`: GEMMs for about 1, 4 and 16 ms, then a 4 KiB all-reduce, repeated,
// beside the same calls back to back, in three rounds over the three lengths, about `seconds` in
// total; per length the round of median extra wait (the ranks' mean); every rank returns the same
// list.
std::vector<SyncWait> measure_sync_waits(Communicator& world, double seconds);

// What computing costs while a collective is in flight (ZeRO-3's prefetched all-gathers, DP's
// bucket all-reduces during backward): the same GEMMs and the same all-gathers timed alone and
// overlapped (each call started before a chunk of GEMMs, waited for after it).
struct OverlapMeasurement {
  double bytes = 0;         // the gathered buffer of one call
  double gemm_s = 0;        // the GEMMs alone
  double comm_s = 0;        // the calls alone, back to back
  double overlapped_s = 0;  // both, each call overlapping a chunk of the GEMMs
  // Seconds lost per second of overlapped communication, (overlapped − gemm) / comm, ≥ 0: 0 when
  // the calls hide entirely behind the GEMMs, 1 when overlapping saves nothing (ranks that share
  // cores: the backend's threads take the GEMMs' cores); the cost model's overlap slowdown.
  double slowdown = 0;
  std::vector<double> round_slowdowns;  // every round's, ascending; the fields above: the median's
};
// COLLECTIVE over `world`: five rounds of the three timings, all-gathers sized to take about half
// a chunk of GEMMs, about `seconds` in total; the ranks' mean per round, the median round's
// slowdown; every rank returns the same.
OverlapMeasurement measure_overlap_slowdown(Communicator& world, double seconds);

// What computing costs right after a blocking call: a rank that resumes from a collective computes
// its next piece of training-like work (autograd, allocations, many small kernels) slower than the
// same work run back to back, while the backend's threads finish the call beside it and its caches
// refill. Tensor-, context- and pipeline-parallel training resumes from a blocking call every
// layer (GEMMs alone hardly notice: measured on this project's VM, 0.03 ms per call against
// 0.1-0.4 ms for training-like work).
struct ResumeMeasurement {
  double bytes = 0;                  // one all-reduce's buffer
  double segment_s = 0;              // the training-like work between two calls, run back to back
  double after_call_s = 0;           // the same work, each piece right after a blocking all-reduce
  double lost_per_call_s = 0;        // after_call − segment, ≥ 0: the cost model's resume cost
  std::vector<double> round_lost_s;  // every round's, ascending; the fields above: the median's
};
// COLLECTIVE over `world`: five rounds of the work alone and after 256 KiB all-reduces, pieces of
// about 1.5 ms, about `seconds` in total; the ranks' mean per round, the median round; every rank
// returns the same.
ResumeMeasurement measure_compute_after_calls(Communicator& world, double seconds);

}  // namespace cpt::exec
