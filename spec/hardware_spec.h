#pragma once
// Hardware as the cost model sees it: a GPU, the node that holds several of them, the fabric that
// connects nodes, and a cluster = node type × node count × fabric. Every quantity carries its unit
// in its type; profiles (hardware_profiles/*.json) spell the unit in the key and are converted once
// in spec/hardware_io.cpp. Bandwidths are unidirectional and per GPU (or per NIC) unless named
// otherwise: datasheets quote bidirectional NVLink totals, which the profiles halve.

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/units.h"

namespace cpt::spec {

// Serialized as "bf16", "fp16", "fp8", "tf32", "fp32". DO NOT CHANGE the strings.
enum class Precision { kBf16, kFp16, kFp8, kTf32, kFp32 };
inline constexpr std::array<Precision, 5> kAllPrecisions = {Precision::kBf16, Precision::kFp16, Precision::kFp8,
                                                            Precision::kTf32, Precision::kFp32};
std::string to_string(Precision p);

// One point of a matrix-engine efficiency curve: at `gflops` (10^9 FLOPs per GEMM) the engine
// reaches `efficiency` of its dense peak. Curves are log-linear between points (costmodel/).
struct EfficiencyPoint {
  double gflops = 0;
  double efficiency = 0;
  bool operator==(const EfficiencyPoint&) const = default;
};

// A GEMM efficiency curve for GEMMs whose smallest dimension (of m, n, k) is `min_dim`.
struct GemmShapeCurve {
  double min_dim = 0;
  std::vector<EfficiencyPoint> points;  // increasing gflops
  bool operator==(const GemmShapeCurve&) const = default;
};

// The cross-entropy's rates at one size: `logits` fp32 elements per call.
struct CrossEntropyPoint {
  double logits = 0;
  double forward_logits_per_s = 0;
  double backward_logits_per_s = 0;
  bool operator==(const CrossEntropyPoint&) const = default;
};

struct GpuSpec {
  std::string name;                  // profile id, e.g. "h100_sxm5_80gb"
  std::string display_name;          // e.g. "NVIDIA H100 SXM5 80GB"
  std::vector<std::string> aliases;  // command-line names, e.g. "h100"
  core::Bytes hbm_capacity;          // physical HBM
  core::BytesPerSecond hbm_bandwidth;
  // Dense (not 2:4 sparse) peak matrix throughput per precision; absent where the part has no
  // such engine (A100: fp8).
  std::array<std::optional<core::FlopsPerSecond>, 5> dense_peak{};
  core::BytesPerSecond nvlink_bandwidth;  // per GPU, per direction; zero for none
  std::string default_node;               // node profile implied by the GPU name alone
  // Measured GEMM efficiency per precision (index = Precision); empty = the cost model's default
  // curve. Written by `cpt calibrate`, or by hand from benchmarks.
  std::array<std::vector<EfficiencyPoint>, 5> gemm_efficiency{};
  // Measured GEMM efficiency by the GEMM's smallest dimension as well as its size, per precision:
  // curves at increasing min_dim. On a CPU a skinny GEMM (a 64-wide hidden, a tensor-parallel
  // slice of K and V) runs well below a square one of the same FLOPs (`cpt calibrate`).
  // Interpolated in log(min_dim), held beyond the ends; where present it takes the place of
  // gemm_efficiency for that precision.
  std::array<std::vector<GemmShapeCurve>, 5> gemm_efficiency_by_min_dim{};
  // Measured efficiency of the fused attention kernel (FLOPs as the cost model counts them:
  // causal forward 2·T·s·d per head, backward 2.5× that), per precision; empty = the default.
  std::array<std::vector<EfficiencyPoint>, 5> attention_efficiency{};
  // Measured rates of the cross-entropy over fp32 logits (log-softmax and its gradient), in logit
  // elements per second, forward and backward apart, by logits per call (ascending); empty =
  // priced as memory traffic. On a CPU the exponentials and the caches bound it, not the bytes: a
  // small vocabulary's loss runs several times faster per logit than a large one's (`cpt
  // calibrate`). Interpolated in log(logits), held beyond the ends; one point holds everywhere
  // (the older profile keys cross_entropy_{forward,backward}_logits_per_s read as that).
  std::vector<CrossEntropyPoint> cross_entropy_rates;
  // Fixed costs per kernel launch and per collective call, when calibrated for this device
  // (`cpt calibrate --from-runs`); absent: the cost model's defaults (CostModelOptions).
  std::optional<core::Seconds> kernel_overhead;
  std::optional<core::Seconds> collective_overhead;
  // How much a rank's compute time varies: its standard deviation over a stretch of compute of
  // T seconds is compute_jitter · √T (unit √s; `cpt calibrate` on a CPU). Every blocking call
  // then also waits for the group's slowest rank (costmodel/straggler.h). Absent: no wait.
  std::optional<double> compute_jitter_sqrt_s;

  [[nodiscard]] std::optional<core::FlopsPerSecond> peak(Precision p) const {
    return dense_peak[static_cast<std::size_t>(p)];
  }
  bool operator==(const GpuSpec&) const = default;
};

// Serialized as "nvswitch", "pcie". DO NOT CHANGE the strings.
enum class IntraNodeKind { kNvSwitch, kPcie };

// The calls whose intra-node cost a node profile may give apart (NodeSpec::intra_measured).
// DO NOT REORDER: the index of NodeSpec::intra_measured.
enum class LinkCall { kAllReduce, kAllGather, kReduceScatter, kSendRecv };
inline constexpr std::array<LinkCall, 4> kAllLinkCalls{LinkCall::kAllReduce, LinkCall::kAllGather,
                                                       LinkCall::kReduceScatter, LinkCall::kSendRecv};
std::string to_string(LinkCall c);  // "all_reduce", "all_gather", "reduce_scatter", "send_recv"
std::optional<LinkCall> link_call_from_string(std::string_view name);  // to_string's inverse

// One call's α–β as measured inside a node: α per ring step (the whole call for send/recv) and B
// per rank and direction, in the cost model's forms (costmodel/collective_model.h).
struct MeasuredLink {
  core::Seconds latency;
  core::BytesPerSecond bandwidth;
  bool operator==(const MeasuredLink&) const = default;
};

// A CPU node whose devices (executor ranks) share the machine's cores: `cores` cores for
// gpus_per_node ranks of `threads_per_device` intra-op threads each. The device's rates in such a
// profile were measured with all gpus_per_node ranks computing at once (`cpt calibrate --ranks`);
// when fewer compute, the operating system gives each a larger share of the cores, up to one core
// per thread (costmodel/compute_sharing.h).
struct SharedCores {
  int cores = 0;
  int threads_per_device = 0;
  bool operator==(const SharedCores&) const = default;
};

struct NodeSpec {
  std::string name;
  std::string display_name;
  GpuSpec gpu;
  int gpus_per_node = 0;
  IntraNodeKind intra_kind = IntraNodeKind::kNvSwitch;
  core::BytesPerSecond intra_bandwidth;  // GPU-to-GPU inside the node, per GPU, per direction
  core::Seconds intra_latency;           // small-message latency of one intra-node transfer
  // Per call, where measured (`cpt calibrate`): a backend need not follow one ring model for all
  // its calls — Gloo's reduce-scatter on a CPU costs about an all-reduce, its send/recv a tenth of
  // a ring step. The cost model scales the intra-node link by each call's ratio to
  // intra_bandwidth / intra_latency (costmodel/topology.h); absent: the link as it is.
  std::array<std::optional<MeasuredLink>, kAllLinkCalls.size()> intra_measured{};
  // Where measured (`cpt calibrate`): an all-reduce of a few bytes inside the node costs this per
  // ring step, 2(n − 1) steps for n ranks. A backend may take another path for scalars than for
  // the 4 KiB and larger messages the link is fitted to (Gloo on this project's CPU VM: 0.2 ms per
  // step for 16 bytes against the fit's 0.75 ms). The cost model prices the step's scalar
  // all-reduces with it; absent: as any all-reduce.
  std::optional<core::Seconds> scalar_all_reduce_step_latency;
  // Where measured (`cpt calibrate` on a CPU): seconds of compute lost per second of intra-node
  // communication that overlaps it (ZeRO-3's prefetched gathers, DP's bucket reductions during
  // backward). Ranks sharing a CPU's cores lose all of it or more — the backend's threads compute
  // the copies and sums on the same cores (0.67-1.24 for two ranks on this project's VM,
  // 0.59-1.10 for four); measured with the profile's rank count and applied to plans of fewer
  // ranks as it is; absent: the cost model's GPU default (CostModelOptions::overlap_slowdown_nvlink,
  // 0.15).
  std::optional<double> overlap_compute_slowdown;
  // Where measured (`cpt calibrate` on a CPU whose ranks have a core each): the compute a rank
  // loses resuming from a blocking call, per call — training-like work right after a collective
  // runs slower than back to back while the backend's threads finish the call beside it (0.13-0.34
  // ms per call for two ranks on this project's VM). The cost model charges it to the compute of
  // every tensor-, context- and pipeline-parallel call that compute follows; absent: 0 (a GPU's
  // host thread only queues kernels).
  std::optional<core::Seconds> compute_lost_resuming_from_call;
  int nics_per_node = 0;               // NICs for the compute fabric
  core::BytesPerSecond nic_bandwidth;  // per NIC, per direction
  std::string default_fabric;          // fabric profile implied by this node
  // Set for a CPU node whose ranks share its cores (SharedCores); absent: each device computes on
  // its own, as a GPU does.
  std::optional<SharedCores> shared_cores;
  bool operator==(const NodeSpec&) const = default;
};

// Serialized as "fat_tree". DO NOT CHANGE the strings.
enum class FabricTopology { kFatTree };

struct FabricSpec {
  std::string name;
  std::string display_name;
  FabricTopology topology = FabricTopology::kFatTree;
  core::BytesPerSecond link_bandwidth;  // per port, per direction
  core::Seconds latency;                // small-message end-to-end latency between two nodes
  bool rail_optimized = true;           // NIC i of every node on the same leaf switches
  double oversubscription = 1.0;        // leaf down:up bandwidth ratio, >= 1 (1 = non-blocking)
  int switch_radix = 0;                 // ports per switch
  bool operator==(const FabricSpec&) const = default;
};

struct ClusterSpec {
  std::string name;
  NodeSpec node;
  FabricSpec fabric;
  int num_nodes = 0;
  int num_gpus = 0;  // GPUs used: num_nodes·gpus_per_node, or fewer on a single node

  [[nodiscard]] const GpuSpec& gpu() const { return node.gpu; }
  // Bandwidth one GPU gets off the node: its share of the NICs, capped by the fabric link.
  [[nodiscard]] core::BytesPerSecond inter_node_bandwidth_per_gpu() const;
  bool operator==(const ClusterSpec&) const = default;
};

// Every violated constraint, each a full sentence; empty when consistent.
std::vector<std::string> find_cluster_errors(const ClusterSpec& c);

// `c` with every link `factor` times slower: latencies multiplied and bandwidths divided by it —
// inside the node (and each call measured there, and the scalar all-reduce's step), the NICs and
// the fabric. The GPUs and their fixed costs per kernel and per call are unchanged.
// REQUIRES: factor > 0.
ClusterSpec with_slower_links(const ClusterSpec& c, double factor);
// The same for the network between nodes only (NICs and fabric); NVLink as it is.
ClusterSpec with_slower_network(const ClusterSpec& c, double factor);

}  // namespace cpt::spec
