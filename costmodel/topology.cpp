#include "costmodel/topology.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/breadth_first_search.hpp>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/check.h"

namespace cpt::cost {

namespace {

struct EdgeProps {
  double bandwidth = 0;  // bytes/s per direction
  double latency = 0;    // seconds
};
using BoostGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS, boost::no_property, EdgeProps>;
using Vertex = boost::graph_traits<BoostGraph>::vertex_descriptor;

}  // namespace

struct Topology::Graph {
  BoostGraph g;
  int gpus_per_node = 0;
  std::vector<Vertex> gpu;  // by global GPU index
  std::vector<Vertex> hub;  // by node
  std::vector<Vertex> nic_of_gpu;
  Vertex spine{};
  // The breadth-first tree from the spine over GPU–NIC–leaf–spine (hub edges excluded): parent of
  // each vertex, and the bandwidth/latency of the edge to its parent.
  std::vector<Vertex> parent;
  std::vector<int> depth;
  std::vector<EdgeProps> up_edge;
  std::vector<EdgeProps> hub_edge;  // GPU – hub, by global GPU index
};

namespace {

// Directed load counters on tree edges (child -> parent "up", parent -> child "down") and on hub
// edges (GPU -> hub "out", hub -> GPU "in").
struct Loads {
  std::vector<int> up, down, hub_out, hub_in;
};

}  // namespace

struct Topology::Cache {
  // The groups of an axis are {base + i·stride : i < degree} over the ranks of the world (of two
  // axes, the dp × cp replicas: {base + a·stride_a + b·stride_b}): their placement depends on
  // (degree_a, stride_a, degree_b, stride_b, world size) alone, whatever the other axes are
  // (degree_b = 1, stride_b = 0 for one axis). Also the key of the dp half of the hybrid-shard
  // errors.
  using PlaceKey = std::tuple<int, int, int, int, int>;
  // Layout costs: (degrees, strides, hybrid) -> costs; node-based, so references stay valid.
  using LayoutKey = std::array<int, 12>;
  struct LayoutKeyHash {
    std::size_t operator()(const LayoutKey& k) const noexcept {
      std::uint64_t h = 1469598103934665603ULL;  // FNV-1a over the values
      for (int v : k) h = (h ^ static_cast<std::uint64_t>(static_cast<std::uint32_t>(v))) * 1099511628211ULL;
      return static_cast<std::size_t>(h);
    }
  };
  std::shared_mutex layouts_mutex;
  std::unordered_map<LayoutKey, std::unique_ptr<LayoutCosts>, LayoutKeyHash> layouts;
  std::mutex mutex;
  std::map<PlaceKey, GroupPlacement> placements;
  std::map<std::pair<int, int>, LinkCost> links;
  std::map<PlaceKey, std::optional<std::string>> hybrid_errors;
};

Topology::Topology(const spec::ClusterSpec& c) : graph_(std::make_unique<Graph>()), cache_(std::make_unique<Cache>()) {
  auto& G = *graph_;
  G.gpus_per_node = c.node.gpus_per_node;
  const int nics = std::max(1, c.node.nics_per_node);
  const double intra_bw = c.node.intra_bandwidth.value();
  const double nic_bw = c.node.nics_per_node > 0 ? c.node.nic_bandwidth.value() : 0.0;
  const double link_bw = std::min(nic_bw, c.fabric.link_bandwidth.value());
  const double half_net = c.fabric.latency.value() / 2;
  const double half_intra = c.node.intra_latency.value() / 2;

  for (const auto call : spec::kAllLinkCalls) {
    const auto i = static_cast<std::size_t>(call);
    if (const auto& m = c.node.intra_measured[i]) {
      // A node latency of 0 (allowed) leaves α unscaled: no ratio to take.
      if (half_intra > 0) intra_scale_[i].latency = m->latency.value() / (2 * half_intra);
      if (intra_bw > 0) intra_scale_[i].bandwidth = m->bandwidth.value() / intra_bw;
    }
  }
  G.spine = boost::add_vertex(G.g);
  // Leaves: radix/2 ports down, radix/2 up.
  const int down_ports = std::max(1, c.fabric.switch_radix / 2);
  std::map<std::pair<int, int>, Vertex> leaves;  // (rail or -1, block) -> leaf
  std::map<Vertex, int> leaf_ports;
  for (int n = 0; n < c.num_nodes; ++n) {
    const Vertex hub = boost::add_vertex(G.g);
    G.hub.push_back(hub);
    std::vector<Vertex> node_nics;
    for (int i = 0; i < nics; ++i) {
      const Vertex nic = boost::add_vertex(G.g);
      node_nics.push_back(nic);
      const auto key =
          c.fabric.rail_optimized ? std::make_pair(i, n / down_ports) : std::make_pair(-1, n * nics / down_ports);
      auto it = leaves.find(key);
      if (it == leaves.end()) {
        const Vertex leaf = boost::add_vertex(G.g);
        it = leaves.emplace(key, leaf).first;
      }
      boost::add_edge(nic, it->second, EdgeProps{link_bw, half_net}, G.g);
      ++leaf_ports[it->second];
    }
    for (int l = 0; l < c.node.gpus_per_node; ++l) {
      const Vertex gv = boost::add_vertex(G.g);
      G.gpu.push_back(gv);
      boost::add_edge(gv, hub, EdgeProps{intra_bw, half_intra}, G.g);
      G.hub_edge.push_back(EdgeProps{intra_bw, half_intra});
      const Vertex nic = node_nics[static_cast<std::size_t>(l * nics / c.node.gpus_per_node)];
      boost::add_edge(gv, nic, EdgeProps{nic_bw, 0.0}, G.g);
      G.nic_of_gpu.push_back(nic);
    }
  }
  for (const auto& [leaf, ports] : leaf_ports) {
    const double up = ports * link_bw / c.fabric.oversubscription;
    boost::add_edge(leaf, G.spine, EdgeProps{up, 0.0}, G.g);
  }

  // Breadth-first tree from the spine, ignoring hub edges (intra-node traffic is routed apart).
  const auto nv = boost::num_vertices(G.g);
  G.parent.assign(nv, G.spine);
  G.depth.assign(nv, -1);
  G.up_edge.assign(nv, EdgeProps{});
  std::set<Vertex> hubs(G.hub.begin(), G.hub.end());
  std::vector<Vertex> queue = {G.spine};
  G.depth[G.spine] = 0;
  for (std::size_t qi = 0; qi < queue.size(); ++qi) {
    const Vertex u = queue[qi];
    for (auto [e, end] = boost::out_edges(u, G.g); e != end; ++e) {
      const Vertex w = boost::target(*e, G.g);
      if (G.depth[w] >= 0 || hubs.count(w) || hubs.count(u)) continue;
      G.depth[w] = G.depth[u] + 1;
      G.parent[w] = u;
      G.up_edge[w] = G.g[*e];
      queue.push_back(w);
    }
  }
}

Topology::~Topology() = default;
Topology::Topology(Topology&&) noexcept = default;
Topology& Topology::operator=(Topology&&) noexcept = default;

int Topology::num_vertices() const {
  return static_cast<int>(boost::num_vertices(graph_->g));
}

namespace {

// Calls up(v) for each edge climbed from a, down(v) for each edge descended to b, on the tree.
template <class Up, class Down>
void walk(const Topology::Graph& G, Vertex a, Vertex b, Up up, Down down) {
  while (a != b) {
    if (G.depth[a] >= G.depth[b]) {
      up(a);
      a = G.parent[a];
    } else {
      down(b);
      b = G.parent[b];
    }
  }
}

}  // namespace

// Counts the flows routed over each edge (multi-flow routing of the rings of one level).
struct Router {
  const Topology::Graph& G;
  Loads& loads;
  // `scratch` holds the counters (reused between routings on one thread: large clusters have tens
  // of thousands of vertices, and fresh pages for each placement cost more than the routing).
  // Every flow stays inside its node (only the hub counters are needed), or none does (only the
  // tree's); counters not needed are left empty.
  enum class Flows { kWithinNodes, kAcrossNodes };
  Router(const Topology::Graph& graph, Loads& scratch, Flows flows) : G(graph), loads(scratch) {
    const auto nv = G.parent.size();
    loads.up.assign(flows == Flows::kWithinNodes ? 0 : nv, 0);
    loads.down.assign(flows == Flows::kWithinNodes ? 0 : nv, 0);
    loads.hub_out.assign(flows == Flows::kAcrossNodes ? 0 : G.gpu.size(), 0);
    loads.hub_in.assign(flows == Flows::kAcrossNodes ? 0 : G.gpu.size(), 0);
  }
  int node_of(int gpu) const { return gpu / G.gpus_per_node; }
  // Adds the flow a -> b to the loads of its route; returns the route's latency (seconds).
  double add(int a, int b) {
    if (a == b) return 0.0;
    if (node_of(a) == node_of(b)) {
      ++loads.hub_out[static_cast<std::size_t>(a)];
      ++loads.hub_in[static_cast<std::size_t>(b)];
      return G.hub_edge[static_cast<std::size_t>(a)].latency + G.hub_edge[static_cast<std::size_t>(b)].latency;
    }
    double lat = 0;
    walk(
        G, G.gpu[static_cast<std::size_t>(a)], G.gpu[static_cast<std::size_t>(b)],
        [&](Vertex v) {
          ++loads.up[v];
          lat += G.up_edge[v].latency;
        },
        [&](Vertex v) {
          ++loads.down[v];
          lat += G.up_edge[v].latency;
        });
    return lat;
  }
};

namespace {

// Bandwidth and latency of the flow a -> b alone: each edge of its route carries it once.
LinkCost single_flow_cost(const Topology::Graph& G, int a, int b) {
  if (a / G.gpus_per_node == b / G.gpus_per_node) {
    const auto& ea = G.hub_edge[static_cast<std::size_t>(a)];
    const auto& eb = G.hub_edge[static_cast<std::size_t>(b)];
    return {core::BytesPerSecond(std::min(ea.bandwidth, eb.bandwidth)), core::Seconds(ea.latency + eb.latency)};
  }
  double bw = std::numeric_limits<double>::infinity();
  double lat = 0;
  auto edge = [&](Vertex v) {
    bw = std::min(bw, G.up_edge[v].bandwidth);
    lat += G.up_edge[v].latency;
  };
  walk(G, G.gpu[static_cast<std::size_t>(a)], G.gpu[static_cast<std::size_t>(b)], edge, edge);
  return {core::BytesPerSecond(bw), core::Seconds(lat)};
}

// Rings of one level, flat: ring j is ranks[starts[j] .. starts[j + 1]); flows i -> i+1 (cyclic).
struct Rings {
  std::vector<int> ranks;
  std::vector<std::size_t> starts{0};
  void close_ring() { starts.push_back(ranks.size()); }
  [[nodiscard]] std::size_t count() const { return starts.size() - 1; }
  [[nodiscard]] bool empty() const { return count() == 0; }
  // Calls f(from, to) for every flow of every ring of two or more ranks.
  template <class F>
  void for_each_flow(F f) const {
    for (std::size_t j = 0; j + 1 < starts.size(); ++j) {
      const std::size_t b = starts[j], n = starts[j + 1] - b;
      if (n < 2) continue;
      for (std::size_t i = 0; i < n; ++i) f(ranks[b + i], ranks[b + (i + 1) % n]);
    }
  }
};

// REQUIRES: the flows of `rings` all stay inside nodes or all cross nodes, as `flows` says.
LinkCost route_rings(const Topology::Graph& G, const Rings& rings, Router::Flows flows) {
  thread_local Loads scratch;
  Router router(G, scratch, flows);
  // Every flow's bandwidth is the least of bandwidth / load over the edges of its route, and every
  // loaded edge is on some flow's route: the worst flow's bandwidth is the least over the loaded
  // edges, found in one pass over the counters instead of a second walk of every route. The
  // latency of a route is summed while it is loaded.
  double worst_latency = 0;
  rings.for_each_flow([&](int a, int b) { worst_latency = std::max(worst_latency, router.add(a, b)); });
  double worst_bandwidth = std::numeric_limits<double>::infinity();
  const auto& L = router.loads;
  for (std::size_t v = 0; v < L.up.size(); ++v) {
    if (L.up[v] > 0) worst_bandwidth = std::min(worst_bandwidth, G.up_edge[v].bandwidth / L.up[v]);
    if (L.down[v] > 0) worst_bandwidth = std::min(worst_bandwidth, G.up_edge[v].bandwidth / L.down[v]);
  }
  for (std::size_t g = 0; g < L.hub_out.size(); ++g) {
    if (L.hub_out[g] > 0) worst_bandwidth = std::min(worst_bandwidth, G.hub_edge[g].bandwidth / L.hub_out[g]);
    if (L.hub_in[g] > 0) worst_bandwidth = std::min(worst_bandwidth, G.hub_edge[g].bandwidth / L.hub_in[g]);
  }
  return LinkCost{core::BytesPerSecond(worst_bandwidth), core::Seconds(worst_latency)};
}

}  // namespace

std::optional<std::string> Topology::hybrid_shard_error(const spec::RankLayout& layout) const {
  // The cp half costs a pass over the cp groups' ends; the dp half, a pass over every rank,
  // depends on the dp degree and stride alone: memoised by them.
  if (auto cp_error = layout.find_hybrid_cp_error()) return cp_error;
  using spec::Axis;
  const Cache::PlaceKey key{layout.degree(Axis::kDp), layout.stride(Axis::kDp), 1, 0, layout.world_size()};
  {
    std::lock_guard lock(cache_->mutex);
    if (auto it = cache_->hybrid_errors.find(key); it != cache_->hybrid_errors.end()) return it->second;
  }
  auto error = layout.find_hybrid_dp_error();
  std::lock_guard lock(cache_->mutex);
  cache_->hybrid_errors.emplace(key, error);
  return error;
}

GroupPlacement Topology::place(const spec::RankLayout& layout, spec::Axis axis) const {
  CPT_CHECK(layout.gpus_per_node() == graph_->gpus_per_node, "layout with ", layout.gpus_per_node(),
            " GPUs per node on a cluster with ", graph_->gpus_per_node);
  return place_groups(layout.degree(axis), layout.stride(axis), 1, 0, layout.world_size());
}

GroupPlacement Topology::place_replicas(const spec::RankLayout& layout) const {
  using spec::Axis;
  CPT_CHECK(layout.gpus_per_node() == graph_->gpus_per_node, "layout with ", layout.gpus_per_node(),
            " GPUs per node on a cluster with ", graph_->gpus_per_node);
  int da = layout.degree(Axis::kCp), sa = layout.stride(Axis::kCp);
  int db = layout.degree(Axis::kDp), sb = layout.stride(Axis::kDp);
  if (sb < sa) {
    std::swap(da, db);
    std::swap(sa, sb);
  }
  // Adjacent in the axis order (the default tp, cp, dp, pp): one strided axis of cp · dp ranks.
  if (da == 1 || db == 1 || sb == sa * da) {
    return place_groups(da * db, da == 1 ? sb : sa, 1, 0, layout.world_size());
  }
  return place_groups(da, sa, db, sb, layout.world_size());
}

GroupPlacement Topology::place_groups(int degree_a, int stride_a, int degree_b, int stride_b, int world) const {
  const Cache::PlaceKey key{degree_a, stride_a, degree_b, stride_b, world};
  {
    std::lock_guard lock(cache_->mutex);
    if (auto it = cache_->placements.find(key); it != cache_->placements.end()) return it->second;
  }
  const auto& G = *graph_;
  CPT_CHECK(world <= static_cast<int>(G.gpu.size()), "layout of ", world, " ranks on ", G.gpu.size(), " GPUs");
  // The groups are {r0 + offset[i]} for every r0 whose coordinates on the group's axes are 0
  // (RankLayout's groups, members in the same ascending order). Members' nodes never decrease
  // with i, so each group is a sequence of runs of members on one node.
  const int degree = degree_a * degree_b;
  std::vector<int> offset;
  offset.reserve(static_cast<std::size_t>(degree));
  for (int b = 0; b < degree_b; ++b) {
    for (int a = 0; a < degree_a; ++a) offset.push_back(a * stride_a + b * stride_b);
  }
  std::sort(offset.begin(), offset.end());
  auto member = [&](int r0, int i) { return r0 + offset[static_cast<std::size_t>(i)]; };
  GroupPlacement p;
  p.size = degree;
  Rings intra_rings;
  Rings inter_rings;
  if (degree > 1) {
    std::vector<std::pair<int, int>> runs;  // (first member index i, members) per node of one group
    for (int r0 = 0; r0 < world; ++r0) {
      if ((r0 / stride_a) % degree_a != 0 || (degree_b > 1 && (r0 / stride_b) % degree_b != 0)) continue;
      runs.clear();
      for (int i = 0; i < degree; ++i) {
        const int node = member(r0, i) / G.gpus_per_node;
        if (runs.empty() || member(r0, runs.back().first) / G.gpus_per_node != node) {
          runs.emplace_back(i, 1);
        } else {
          ++runs.back().second;
        }
      }
      p.nodes = std::max(p.nodes, static_cast<int>(runs.size()));
      int k = 0;
      for (const auto& [first, members] : runs) {
        k = std::max(k, members);
        if (members < 2) continue;
        for (int i = 0; i < members; ++i) intra_rings.ranks.push_back(member(r0, first + i));
        intra_rings.close_ring();
      }
      p.ranks_per_node = std::max(p.ranks_per_node, k);
      if (runs.size() > 1) {
        // k parallel rings across nodes: the i-th member of the group on every node.
        for (int i = 0; i < k; ++i) {
          for (const auto& [first, members] : runs) {
            if (i < members) inter_rings.ranks.push_back(member(r0, first + i));
          }
          inter_rings.close_ring();
        }
      }
    }
  }
  // Intra rings are the members of a group on one node; inter rings take one member per node.
  if (!intra_rings.empty()) {
    p.intra = route_rings(G, intra_rings, Router::Flows::kWithinNodes);
    p.intra_scale = intra_scale_;
  }
  if (!inter_rings.empty()) p.inter = route_rings(G, inter_rings, Router::Flows::kAcrossNodes);
  std::lock_guard lock(cache_->mutex);
  cache_->placements.emplace(key, p);
  return p;
}

const LayoutCosts& Topology::layout_costs(const spec::RankLayout& layout, bool experts) const {
  using spec::Axis;
  const Cache::LayoutKey key{layout.degree(Axis::kTp),
                             layout.degree(Axis::kCp),
                             layout.degree(Axis::kDp),
                             layout.degree(Axis::kPp),
                             layout.stride(Axis::kTp),
                             layout.stride(Axis::kCp),
                             layout.stride(Axis::kDp),
                             layout.stride(Axis::kPp),
                             layout.hybrid_shard() ? 1 : 0,
                             layout.expert_degree(spec::ExpertAxis::kEp),
                             layout.expert_degree(spec::ExpertAxis::kEtp),
                             experts ? 1 : 0};
  {
    std::shared_lock lock(cache_->layouts_mutex);
    if (auto it = cache_->layouts.find(key); it != cache_->layouts.end()) return *it->second;
  }
  auto costs = std::make_unique<LayoutCosts>();
  costs->tp = place(layout, Axis::kTp);
  costs->cp = place(layout, Axis::kCp);
  costs->replicas = place_replicas(layout);
  const int pp = layout.degree(Axis::kPp);
  if (pp > 1) {
    if (layout.world_size() <= layout.gpus_per_node()) costs->pp_in_node = place(layout, Axis::kPp);
    for (int r = 0; r < pp; ++r) {
      spec::RankCoord a{}, b{};
      a.pp = r;
      b.pp = (r + 1) % pp;
      costs->pp_next.push_back(p2p(layout.rank_of(a), layout.rank_of(b), layout.gpus_per_node()));
      costs->pp_ring.add(costs->pp_next.back());
    }
  }
  costs->shard_group = layout.zero_shard_group_size();
  if (experts) {
    using spec::ExpertAxis;
    auto place_expert_axis = [&](ExpertAxis axis) {
      return place_groups(layout.expert_degree(axis), layout.expert_stride(axis), 1, 0, layout.world_size());
    };
    costs->ep = place_expert_axis(ExpertAxis::kEp);
    costs->etp = place_expert_axis(ExpertAxis::kEtp);
    costs->expert_replicas = place_expert_axis(ExpertAxis::kExpertDp);
  }
  if (layout.hybrid_shard()) costs->hybrid_shard_error = hybrid_shard_error(layout);
  std::unique_lock lock(cache_->layouts_mutex);
  // Another thread may have built it meanwhile: keep the first (the values are equal).
  return *cache_->layouts.try_emplace(key, std::move(costs)).first->second;
}

LinkCost Topology::p2p(int a, int b, int gpus_per_node) const {
  CPT_CHECK(gpus_per_node == graph_->gpus_per_node, "gpus_per_node ", gpus_per_node);
  {
    std::lock_guard lock(cache_->mutex);
    if (auto it = cache_->links.find({a, b}); it != cache_->links.end()) return it->second;
  }
  LinkCost link = single_flow_cost(*graph_, a, b);
  if (a / gpus_per_node == b / gpus_per_node) {
    const CallScale& scale = intra_scale_[static_cast<std::size_t>(spec::LinkCall::kSendRecv)];
    link = {core::BytesPerSecond(link.bandwidth.value() * scale.bandwidth), link.latency * scale.latency};
  }
  std::lock_guard lock(cache_->mutex);
  cache_->links.emplace(std::make_pair(a, b), link);
  return link;
}

}  // namespace cpt::cost
