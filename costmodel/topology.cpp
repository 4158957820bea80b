#include "costmodel/topology.h"

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/breadth_first_search.hpp>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
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
  std::vector<Vertex> gpu;      // by global GPU index
  std::vector<Vertex> hub;      // by node
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
  using PlaceKey = std::tuple<int, int, int, int, int, int, int, int, int>;  // degrees, order, axis
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
      const auto key = c.fabric.rail_optimized ? std::make_pair(i, n / down_ports)
                                               : std::make_pair(-1, n * nics / down_ports);
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

int Topology::num_vertices() const { return static_cast<int>(boost::num_vertices(graph_->g)); }

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

struct Router {
  const Topology::Graph& G;
  Loads loads;
  explicit Router(const Topology::Graph& graph) : G(graph) {
    const auto nv = G.parent.size();
    loads.up.assign(nv, 0);
    loads.down.assign(nv, 0);
    loads.hub_out.assign(G.gpu.size(), 0);
    loads.hub_in.assign(G.gpu.size(), 0);
  }
  int node_of(int gpu) const { return gpu / G.gpus_per_node; }
  void add(int a, int b, int sign) {
    if (a == b) return;
    if (node_of(a) == node_of(b)) {
      loads.hub_out[static_cast<std::size_t>(a)] += sign;
      loads.hub_in[static_cast<std::size_t>(b)] += sign;
      return;
    }
    walk(G, G.gpu[static_cast<std::size_t>(a)], G.gpu[static_cast<std::size_t>(b)],
         [&](Vertex v) { loads.up[v] += sign; }, [&](Vertex v) { loads.down[v] += sign; });
  }
  // Bandwidth and latency of the flow a -> b under the current loads.
  LinkCost cost(int a, int b) const {
    if (node_of(a) == node_of(b)) {
      const auto& ea = G.hub_edge[static_cast<std::size_t>(a)];
      const auto& eb = G.hub_edge[static_cast<std::size_t>(b)];
      const double bw = std::min(ea.bandwidth / std::max(1, loads.hub_out[static_cast<std::size_t>(a)]),
                                 eb.bandwidth / std::max(1, loads.hub_in[static_cast<std::size_t>(b)]));
      return {core::BytesPerSecond(bw), core::Seconds(ea.latency + eb.latency)};
    }
    double bw = std::numeric_limits<double>::infinity();
    double lat = 0;
    walk(G, G.gpu[static_cast<std::size_t>(a)], G.gpu[static_cast<std::size_t>(b)],
         [&](Vertex v) {
           bw = std::min(bw, G.up_edge[v].bandwidth / std::max(1, loads.up[v]));
           lat += G.up_edge[v].latency;
         },
         [&](Vertex v) {
           bw = std::min(bw, G.up_edge[v].bandwidth / std::max(1, loads.down[v]));
           lat += G.up_edge[v].latency;
         });
    return {core::BytesPerSecond(bw), core::Seconds(lat)};
  }
};

namespace {

// Rings of one level: each ring is a list of ranks; flows i -> i+1 (cyclic).
using Rings = std::vector<std::vector<int>>;

LinkCost route_rings(const Topology::Graph& G, const Rings& rings) {
  Router router(G);
  for (const auto& ring : rings) {
    for (std::size_t i = 0; i < ring.size() && ring.size() > 1; ++i) router.add(ring[i], ring[(i + 1) % ring.size()], 1);
  }
  LinkCost worst{core::BytesPerSecond(std::numeric_limits<double>::infinity()), core::Seconds(0)};
  for (const auto& ring : rings) {
    for (std::size_t i = 0; i < ring.size() && ring.size() > 1; ++i) {
      const auto c = router.cost(ring[i], ring[(i + 1) % ring.size()]);
      worst.bandwidth = std::min(worst.bandwidth, c.bandwidth);
      worst.latency = std::max(worst.latency, c.latency);
    }
  }
  return worst;
}

}  // namespace

namespace {

// A layout is determined by its degrees and axis order (strides grow along the order).
std::tuple<int, int, int, int, int, int, int, int, int> layout_key(const spec::RankLayout& layout, int extra) {
  using spec::Axis;
  return {layout.degree(Axis::kTp), layout.degree(Axis::kCp), layout.degree(Axis::kDp), layout.degree(Axis::kPp),
          layout.stride(Axis::kTp), layout.stride(Axis::kCp), layout.stride(Axis::kDp), layout.stride(Axis::kPp),
          extra};
}

}  // namespace

std::optional<std::string> Topology::hybrid_shard_error(const spec::RankLayout& layout) const {
  const auto key = layout_key(layout, -1);
  {
    std::lock_guard lock(cache_->mutex);
    if (auto it = cache_->hybrid_errors.find(key); it != cache_->hybrid_errors.end()) return it->second;
  }
  auto error = layout.find_hybrid_shard_error();
  std::lock_guard lock(cache_->mutex);
  cache_->hybrid_errors.emplace(key, error);
  return error;
}

GroupPlacement Topology::place(const spec::RankLayout& layout, spec::Axis axis) const {
  const Cache::PlaceKey key = layout_key(layout, static_cast<int>(axis));
  {
    std::lock_guard lock(cache_->mutex);
    if (auto it = cache_->placements.find(key); it != cache_->placements.end()) return it->second;
  }
  const auto& G = *graph_;
  CPT_CHECK(layout.gpus_per_node() == G.gpus_per_node, "layout with ", layout.gpus_per_node(),
            " GPUs per node on a cluster with ", G.gpus_per_node);
  CPT_CHECK(layout.world_size() <= static_cast<int>(G.gpu.size()), "layout of ", layout.world_size(),
            " ranks on ", G.gpu.size(), " GPUs");
  const auto groups = layout.groups(axis);
  GroupPlacement p;
  p.size = static_cast<int>(groups.front().size());
  Rings intra_rings;
  Rings inter_rings;
  for (const auto& group : groups) {
    std::map<int, std::vector<int>> by_node;
    for (int r : group) by_node[r / G.gpus_per_node].push_back(r);
    p.nodes = std::max(p.nodes, static_cast<int>(by_node.size()));
    int k = 0;
    for (const auto& [node, members] : by_node) {
      k = std::max(k, static_cast<int>(members.size()));
      if (members.size() > 1) intra_rings.push_back(members);
    }
    p.ranks_per_node = std::max(p.ranks_per_node, k);
    if (by_node.size() > 1) {
      // k parallel rings across nodes: the i-th member of the group on every node.
      for (int i = 0; i < k; ++i) {
        std::vector<int> ring;
        for (const auto& [node, members] : by_node) {
          if (i < static_cast<int>(members.size())) ring.push_back(members[static_cast<std::size_t>(i)]);
        }
        inter_rings.push_back(std::move(ring));
      }
    }
  }
  if (!intra_rings.empty()) p.intra = route_rings(G, intra_rings);
  if (!inter_rings.empty()) p.inter = route_rings(G, inter_rings);
  std::lock_guard lock(cache_->mutex);
  cache_->placements.emplace(key, p);
  return p;
}

LinkCost Topology::p2p(int a, int b, int gpus_per_node) const {
  CPT_CHECK(gpus_per_node == graph_->gpus_per_node, "gpus_per_node ", gpus_per_node);
  {
    std::lock_guard lock(cache_->mutex);
    if (auto it = cache_->links.find({a, b}); it != cache_->links.end()) return it->second;
  }
  Router router(*graph_);
  router.add(a, b, 1);
  const LinkCost link = router.cost(a, b);
  std::lock_guard lock(cache_->mutex);
  cache_->links.emplace(std::make_pair(a, b), link);
  return link;
}

}  // namespace cpt::cost
