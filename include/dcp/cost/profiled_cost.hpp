#pragma once
/// \file
/// `profiled_cost`: a `cost_model` that prices micro-steps from a measured `profile_table`.
///
/// A step of b sequences with N = sum n tokens and Q = sum n^2 is priced as its *equivalent
/// uniform batch*: length n_eff = Q / N (keeps the attention work N * n_eff = Q) and batch
/// b_eff = N / n_eff. For the step's (sp, k):
///   - time: per profiled length, log-log interpolation in the batch; between lengths, log-log
///     interpolation in tokens (power laws stay straight lines); outside the table, the end
///     segment extended;
///   - memory: linear interpolation in the step's total tokens N (activation memory is linear in
///     tokens per GPU), the end segments extended; static memory is part of every entry.
/// An (sp, k) with no entry is infeasible (infinite time and memory). k between profiled values is
/// interpolated linearly.
///
/// Construct with `make_profiled_cost(table, model, device_name, gpus)`, which rejects a table
/// for another model, device or world size, and hand it to the scheduler:
/// \code
/// auto cost = dcp::make_profiled_cost(table, model, "h200", world.size());
/// dcp::scheduler<dcp::transformer_spec, Comm, dcp::policies<dcp::profiled_cost>> sched(model, world, cost, options);
/// \endcode

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/cost/device.hpp>
#include <dcp/error.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/profile/profile_table.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

/// Additive summary of a step for `profiled_cost`.
struct profiled_load {
  double sequences = 0;
  double tokens = 0;     ///< N = sum n
  double tokens_sq = 0;  ///< Q = sum n^2
  friend constexpr profiled_load operator+(profiled_load a, const profiled_load& b) noexcept {
    return {a.sequences + b.sequences, a.tokens + b.tokens, a.tokens_sq + b.tokens_sq};
  }
  friend constexpr profiled_load operator-(profiled_load a, const profiled_load& b) noexcept {
    return {a.sequences - b.sequences, a.tokens - b.tokens, a.tokens_sq - b.tokens_sq};
  }
  friend constexpr bool operator==(const profiled_load&, const profiled_load&) = default;
};

namespace detail {

// Piecewise-linear y(x) through sorted points, end segments extended.
inline double piecewise_linear(const std::vector<std::pair<double, double>>& pts, double x) {
  if (pts.size() == 1) return pts.front().second;
  std::size_t i = 1;
  while (i + 1 < pts.size() && pts[i].first < x) ++i;
  const auto& [x0, y0] = pts[i - 1];
  const auto& [x1, y1] = pts[i];
  return y0 + (y1 - y0) * (x - x0) / (x1 - x0);
}

// The table indexed by (sp, k): per length, time over batch (log-log); memory over tokens.
struct profile_index {
  struct length_row {
    double tokens = 0;
    std::vector<std::pair<double, double>> log_time;  // (log batch, log time)
  };
  struct cell {
    std::vector<length_row> lengths;                    // ascending tokens
    std::vector<std::pair<double, double>> memory;      // (step tokens, bytes), ascending
    double best_gpu_seconds_per_token = std::numeric_limits<double>::infinity();
  };
  std::map<std::pair<int, int>, cell> cells;
  std::map<int, std::vector<int>> ks;  // sp -> profiled k, ascending

  explicit profile_index(const profile_table& t) {
    std::map<std::pair<int, int>, std::map<std::int64_t, std::map<int, double>>> times;
    std::map<std::pair<int, int>, std::map<double, double>> mems;
    for (const auto& e : t.entries) {
      const auto key = std::make_pair(e.sp, e.checkpointed_blocks);
      times[key][e.tokens][e.batch] = e.time_s;
      auto& m = mems[key][double(e.tokens) * e.batch];
      m = std::max(m, e.memory_bytes);
      auto& c = cells[key];
      c.best_gpu_seconds_per_token =
          std::min(c.best_gpu_seconds_per_token, e.sp * e.time_s / (double(e.tokens) * e.batch));
    }
    for (auto& [key, by_len] : times) {
      auto& c = cells[key];
      for (auto& [n, by_b] : by_len) {
        length_row row{double(n), {}};
        for (auto [b, tm] : by_b) row.log_time.emplace_back(std::log(double(b)), std::log(tm));
        c.lengths.push_back(std::move(row));
      }
      for (auto [x, m] : mems[key]) c.memory.emplace_back(x, m);
      ks[key.first].push_back(key.second);
    }
    for (auto& [sp, v] : ks) std::sort(v.begin(), v.end());
  }

  // log time of a row at batch b: log-log in b; a single point scales linearly with b.
  static double row_log_time(const length_row& r, double log_b) {
    if (r.log_time.size() == 1) return r.log_time.front().second + (log_b - r.log_time.front().first);
    return piecewise_linear(r.log_time, log_b);
  }

  double cell_time(const cell& c, double n_eff, double b_eff) const {
    const double log_b = std::log(std::max(b_eff, 1e-300));
    const auto& L = c.lengths;
    if (L.size() == 1) return std::exp(row_log_time(L.front(), log_b)) * n_eff / L.front().tokens;
    std::vector<std::pair<double, double>> by_len;
    by_len.reserve(L.size());
    for (const auto& r : L) by_len.emplace_back(std::log(r.tokens), row_log_time(r, log_b));
    return std::exp(piecewise_linear(by_len, std::log(n_eff)));
  }
  double cell_memory(const cell& c, double tokens) const { return piecewise_linear(c.memory, tokens); }

  // f(cell) at (sp, k), interpolating linearly in k between profiled k; infinity when sp is absent.
  template <class F>
  double at(int sp, int k, F&& f) const {
    const auto it = ks.find(sp);
    if (it == ks.end()) return std::numeric_limits<double>::infinity();
    const auto& v = it->second;
    const auto hi = std::lower_bound(v.begin(), v.end(), k);
    if (hi != v.end() && *hi == k) return f(cells.at({sp, k}));
    if (hi == v.begin()) return f(cells.at({sp, v.front()}));
    if (hi == v.end()) return f(cells.at({sp, v.back()}));
    const int k0 = *(hi - 1), k1 = *hi;
    const double w = double(k - k0) / double(k1 - k0);
    return (1 - w) * f(cells.at({sp, k0})) + w * f(cells.at({sp, k1}));
  }
};

}  // namespace detail

/// A cost model backed by a profile (see the file comment).
class profiled_cost {
 public:
  using policy_concept = cost_model_tag;
  using load_type = profiled_load;

  /// An empty model (every step infeasible); use `make_profiled_cost`.
  profiled_cost() = default;
  explicit profiled_cost(profile_table table)
      : table_(std::make_shared<const profile_table>(std::move(table))),
        index_(std::make_shared<const detail::profile_index>(*table_)) {}

  const profile_table& table() const noexcept { return *table_; }

  int blocks() const noexcept { return table_ ? table_->model.blocks : 1; }
  /// The job the table was measured on: data x sequence parallel (tp = 1), its GPUs and node size.
  parallel_layout layout() const noexcept { return {.gpus = gpus(), .gpus_per_node = gpus_per_node()}; }
  int gpus() const noexcept { return table_ ? table_->gpus : 1; }
  int gpus_per_node() const noexcept { return table_ ? table_->gpus_per_node : 1; }
  int heads() const noexcept { return table_ ? table_->model.heads : 1; }
  double capacity() const noexcept { return table_ ? table_->memory_capacity_bytes : 0.0; }

  std::int64_t tokens_of(const sequence& s) const noexcept {
    return table_ ? table_->model.tokens_of(s.frames, s.spatial) : s.shape_tokens();
  }
  load_type load_of(const sequence& s) const noexcept {
    const double n = double(tokens_of(s));
    return {1, n, n * n};
  }

  double time(const load_type& l, int sp, int k) const {
    if (l.tokens <= 0) return 0;
    if (!index_) return std::numeric_limits<double>::infinity();
    const double n_eff = l.tokens_sq / l.tokens, b_eff = l.tokens / n_eff;
    return index_->at(sp, k, [&](const auto& c) { return index_->cell_time(c, n_eff, b_eff); });
  }
  double memory(const load_type& l, int sp, int k) const {
    if (!index_) return std::numeric_limits<double>::infinity();
    if (l.tokens <= 0) return table_->static_memory_bytes;
    return std::max(table_->static_memory_bytes,
                    index_->at(sp, k, [&](const auto& c) { return index_->cell_memory(c, l.tokens); }));
  }
  /// GPU-seconds floor: the step's tokens at the best measured GPU-seconds per token of (sp, k),
  /// never above sp * time.
  double work_floor(const load_type& l, int sp, int k) const {
    if (!index_ || l.tokens <= 0) return 0;
    const double best = index_->at(sp, k, [](const auto& c) { return c.best_gpu_seconds_per_token; });
    return std::min(sp * time(l, sp, k), l.tokens * best);
  }

  friend bool operator==(const profiled_cost& a, const profiled_cost& b) {
    if (a.table_ == b.table_) return true;
    return a.table_ && b.table_ && *a.table_ == *b.table_;
  }
  friend std::ostream& operator<<(std::ostream& os, const profiled_cost& c) {
    if (!c.table_) return os << "profiled_cost{empty}";
    return os << "profiled_cost{" << *c.table_ << "}";
  }

 private:
  std::shared_ptr<const profile_table> table_;
  std::shared_ptr<const detail::profile_index> index_;
};

static_assert(cost_model<profiled_cost>);

/// Throws `dcp::error` (mismatch) unless `t` was profiled for this model, device and world size.
inline void check_profile_matches(const profile_table& t, const transformer_spec& model, const std::string& device,
                                  int gpus, int gpus_per_node = 0) {
  auto mismatch = [&](const std::string& what) {
    throw error(errc::mismatch, "profile does not match this job: " + what +
                                    "; profile this model on this device and world size (the profiler), or load "
                                    "the profile made for it");
  };
  if (!(t.model == model)) {
    std::ostringstream os;
    os << "it was made for " << t.model << ", the job runs " << model;
    mismatch(os.str());
  }
  if (t.device != device) mismatch("it was made on device '" + t.device + "', the job runs on '" + device + "'");
  if (t.gpus != gpus)
    mismatch("it was made for " + std::to_string(t.gpus) + " GPUs, the job has " + std::to_string(gpus) +
             " (static memory shards over N)");
  if (gpus_per_node > 0 && t.gpus_per_node != gpus_per_node)
    mismatch("it was made for " + std::to_string(t.gpus_per_node) + " GPUs per node, the job has " +
             std::to_string(gpus_per_node) + " (groups wider than a node cross its network)");
}

/// A validated `profiled_cost` for `model` on `device` with `gpus` GPUs (and, when positive,
/// `gpus_per_node` GPUs per node).
inline profiled_cost make_profiled_cost(profile_table t, const transformer_spec& model, const std::string& device,
                                        int gpus, int gpus_per_node = 0) {
  validate(t);
  check_profile_matches(t, model, device, gpus, gpus_per_node);
  return profiled_cost(std::move(t));
}

}  // namespace dcp
