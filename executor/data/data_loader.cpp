#include "executor/data/data_loader.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "core/check.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/str_cat.h"

namespace cpt::exec {

using core::str_cat;

namespace {

// Sampling units (windows or documents) of `dataset`.
std::int64_t units_of(const TokenDataset& dataset, int seq_len, Packing packing) {
  if (packing == Packing::kPadded) return dataset.documents();
  return (dataset.tokens() - 1) / seq_len;
}

}  // namespace

std::vector<spec::PaddedShare> padded_shares(const std::vector<DataSource>& sources, int seq_len) {
  std::vector<spec::PaddedShare> shares;
  for (const auto& source : sources) {
    const auto& dataset = *source.dataset;
    spec::PaddedShare share{dataset.documents(), 0.0, source.weight};
    for (std::int64_t doc = 0; doc < dataset.documents(); ++doc) {
      const auto length = std::min<std::int64_t>(dataset.document_length(doc), seq_len + 1);
      share.inputs += static_cast<double>(std::max<std::int64_t>(length - 1, 0));
    }
    shares.push_back(share);
  }
  return shares;
}

void require_a_sample_each(const std::vector<DataSource>& sources, int seq_len, Packing packing) {
  for (const auto& source : sources) {
    if (units_of(*source.dataset, seq_len, packing) >= 1) continue;
    const auto named = str_cat("data source ", source.name, " (", source.dataset->dir().string(), "): ");
    if (packing == Packing::kPadded) throw core::ConfigError(str_cat(named, "no document, none to sample"));
    throw core::ConfigError(
        str_cat(named, source.dataset->tokens(), " tokens, too few for one sequence of ", seq_len, " + 1 tokens"));
  }
}

DataLoader::DataLoader(std::vector<DataSource> sources, LoaderOptions options)
    : sources_(std::move(sources)), options_(options) {
  CPT_CHECK(!sources_.empty());
  CPT_CHECK(options_.seq_len > 0 && options_.micro_batch > 0);
  CPT_CHECK(options_.width_multiple > 0 && options_.seq_len % options_.width_multiple == 0, "seq_len ",
            options_.seq_len, " is no multiple of the width multiple ", options_.width_multiple);
  require_a_sample_each(sources_, options_.seq_len, options_.packing);
  double total = 0;
  for (const auto& s : sources_) total += s.weight;
  for (const auto& s : sources_) weights_.push_back(s.weight / total);
  consumed_.assign(sources_.size(), 0);
  perm_epoch_.assign(sources_.size(), -1);
  perm_.resize(sources_.size());
}

std::int64_t DataLoader::units(std::size_t source) const {
  return units_of(*sources_[source].dataset, options_.seq_len, options_.packing);
}

std::size_t DataLoader::pick_source() const {
  // Megatron's blending: the source whose consumed count lags weight·(n + 1) the most; ties to the
  // first source.
  const auto n = std::accumulate(consumed_.begin(), consumed_.end(), std::int64_t{0});
  std::size_t best = 0;
  double best_lag = -1e300;
  for (std::size_t i = 0; i < sources_.size(); ++i) {
    const double lag = weights_[i] * static_cast<double>(n + 1) - static_cast<double>(consumed_[i]);
    if (lag > best_lag) {
      best_lag = lag;
      best = i;
    }
  }
  return best;
}

std::int64_t DataLoader::unit_of(std::size_t source, std::int64_t k) {
  const auto n = units(source);
  const auto epoch = k / n;
  const auto j = k % n;
  if (!options_.shuffle) return j;
  if (perm_epoch_[source] != epoch) {
    auto& p = perm_[source];
    p.resize(static_cast<std::size_t>(n));
    std::iota(p.begin(), p.end(), std::int64_t{0});
    std::mt19937_64 rng(options_.seed ^ core::fnv1a64(sources_[source].name) ^
                        (static_cast<std::uint64_t>(epoch) * 0x9E3779B97F4A7C15ull));
    // Fisher-Yates with our own index draw (std::shuffle's algorithm is not specified).
    for (std::int64_t i = n - 1; i > 0; --i) {
      const auto r = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(i + 1));
      std::swap(p[static_cast<std::size_t>(i)], p[static_cast<std::size_t>(r)]);
    }
    perm_epoch_[source] = epoch;
  }
  return perm_[source][static_cast<std::size_t>(j)];
}

DataLoader::Row DataLoader::read_row(std::size_t source, std::int64_t unit) const {
  const auto& d = *sources_[source].dataset;
  const std::int64_t s = options_.seq_len;
  Row row;
  std::int64_t first = 0, len = 0;
  if (options_.packing == Packing::kPacked) {
    first = unit * s;
    len = s + 1;
  } else {
    first = d.document_start(unit);
    len = std::min(d.document_length(unit), s + 1);
  }
  std::vector<std::int64_t> t(static_cast<std::size_t>(len));
  d.read(first, t);
  const auto n = static_cast<std::size_t>(std::max<std::int64_t>(len - 1, 0));
  row.tokens.assign(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(n));
  row.targets.assign(t.begin() + 1, t.end());
  row.positions.resize(n);
  row.docs.resize(n);
  auto doc = d.document_at(first);
  auto next_start = doc + 1 < d.documents() ? d.document_start(doc + 1) : d.tokens();
  for (std::size_t i = 0; i <= n; ++i) {
    const auto pos = first + static_cast<std::int64_t>(i);
    while (pos >= next_start) {
      ++doc;
      next_start = doc + 1 < d.documents() ? d.document_start(doc + 1) : d.tokens();
    }
    if (i < n) {
      row.docs[i] = doc;
      // Positions count from the document's start, or from the window's start for a document
      // that began in an earlier window (so they stay below seq_len).
      row.positions[i] = pos - std::max(d.document_start(doc), first);
    } else if (n > 0 && doc != row.docs[n - 1]) {
      row.targets[n - 1] = kIgnoreIndex;  // the last target starts the next document
    }
    if (i > 0 && i < n && doc != row.docs[i - 1]) row.targets[i - 1] = kIgnoreIndex;
  }
  return row;
}

Batch DataLoader::next() {
  std::vector<Row> rows;
  rows.reserve(static_cast<std::size_t>(options_.micro_batch));
  for (int b = 0; b < options_.micro_batch; ++b) {
    const auto src = pick_source();
    const auto unit = unit_of(src, consumed_[src]);
    ++consumed_[src];
    rows.push_back(read_row(src, unit));
  }
  std::size_t width = 1;  // at least one column, even for rows of a one-token document
  bool multi_doc = false;
  for (const auto& r : rows) {
    width = std::max(width, r.tokens.size());
    multi_doc = multi_doc || (!r.docs.empty() && r.docs.front() != r.docs.back());
  }
  const auto multiple = static_cast<std::size_t>(options_.width_multiple);
  width = (width + multiple - 1) / multiple * multiple;
  const bool padding = std::any_of(rows.begin(), rows.end(), [&](const Row& r) { return r.tokens.size() < width; });
  const auto b = static_cast<std::int64_t>(rows.size());
  const auto w = static_cast<std::int64_t>(width);
  auto tokens = torch::zeros({b, w}, torch::kInt64);
  auto targets = torch::full({b, w}, kIgnoreIndex, torch::kInt64);
  auto positions = torch::zeros({b, w}, torch::kInt64);
  auto docs = torch::full({b, w}, -1, torch::kInt64);
  auto* tp = tokens.data_ptr<std::int64_t>();
  auto* gp = targets.data_ptr<std::int64_t>();
  auto* pp = positions.data_ptr<std::int64_t>();
  auto* dp = docs.data_ptr<std::int64_t>();
  std::int64_t loss_tokens = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const auto off = static_cast<std::ptrdiff_t>(i * width);
    std::copy(r.tokens.begin(), r.tokens.end(), tp + off);
    std::copy(r.targets.begin(), r.targets.end(), gp + off);
    std::copy(r.positions.begin(), r.positions.end(), pp + off);
    std::copy(r.docs.begin(), r.docs.end(), dp + off);
    loss_tokens += std::count_if(r.targets.begin(), r.targets.end(), [](std::int64_t t) { return t != kIgnoreIndex; });
  }
  Batch batch{tokens, targets, positions, {}, loss_tokens, {}};
  if (padding) batch.real_tokens = docs.ge(0);
  if (multi_doc) {
    const auto same_doc = docs.unsqueeze(2) == docs.unsqueeze(1);  // [B, S, S]
    batch.mask = same_doc.logical_and(torch::ones({w, w}, torch::kBool).tril()).unsqueeze(1);
  }
  return batch;
}

void DataLoader::skip(std::int64_t samples) {
  for (std::int64_t i = 0; i < samples; ++i) ++consumed_[pick_source()];
}

core::Json DataLoader::state() const {
  core::Json s = core::Json::object();
  for (std::size_t i = 0; i < sources_.size(); ++i) s["sources"][sources_[i].name] = consumed_[i];
  return s;
}

void DataLoader::restore(const core::Json& state, const std::string& origin) {
  const auto& src = state.at("sources");
  std::vector<std::string> names;
  for (const auto& s : sources_) names.push_back(s.name);
  std::vector<std::string> saved;
  for (const auto& [k, v] : src.items()) saved.push_back(k);
  if (saved != names) {
    throw core::ConfigError(str_cat(origin, ": the checkpoint's data sources [", core::join(saved, ", "),
                                    "] differ from the config's [", core::join(names, ", "), "]"));
  }
  for (std::size_t i = 0; i < sources_.size(); ++i) consumed_[i] = src.at(sources_[i].name).get<std::int64_t>();
}

}  // namespace cpt::exec
