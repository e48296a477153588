#pragma once
/// \file
/// `token_budget_sampler`: global batches filled to a token budget (DESIGN section 3, "Global
/// batches"), shuffled from a seed, identical on every rank, exactly once per epoch, resumable.
///
/// Epoch e visits the dataset in the order of a permutation drawn by Fisher-Yates from
/// `derive_seed(seed, e)` (dcp's own PRNG, so every standard library agrees). Batches are
/// consecutive runs of that permutation: a batch takes sequences while its token total stays
/// within the budget; it always holds at least one sequence, so a sequence over the budget forms
/// a batch of its own; the last, partial batch of an epoch is kept. No sequence is lost or
/// repeated within an epoch.
///
/// ```
/// dcp::analytic_cost cost{...};
/// dcp::token_budget_sampler s(dcp::workloads::make("opensora-zipf10"), dcp::default_global_batch_tokens(32),
///                             /*seed=*/0, [&](const dcp::sequence& q) { return cost.tokens_of(q); });
/// dcp::global_batch b = s.next();
/// s.save(checkpoint);  // ... later, in another process:  s.load(checkpoint);
/// ```

#include <algorithm>
#include <charconv>
#include <concepts>
#include <cstdint>
#include <istream>
#include <iterator>
#include <map>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <dcp/error.hpp>
#include <dcp/random.hpp>
#include <dcp/sample/sample_concepts.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

/// Tokens per GPU of the default global batch (`--global-batch-tokens` = 262144 * N).
inline constexpr std::int64_t default_tokens_per_gpu = 262144;
/// The default global batch budget for `gpus` GPUs: 262144 * N tokens.
constexpr std::int64_t default_global_batch_tokens(int gpus) noexcept { return default_tokens_per_gpu * gpus; }

/// The default token count of a sequence: its shape alone, T * S. The planner passes
/// `cost.tokens_of(seq)` instead, which adds a model's text tokens.
struct shape_token_count {
  constexpr std::int64_t operator()(const sequence& s) const noexcept { return s.shape_tokens(); }
  friend constexpr bool operator==(shape_token_count, shape_token_count) = default;
  friend std::ostream& operator<<(std::ostream& os, shape_token_count) { return os << "shape_token_count{}"; }
};

/// Turns a dataset into global batches of at most `budget` tokens each (a lone sequence may
/// exceed it). A copyable value that compares equal to another with the same dataset, token
/// counts, budget and state; copying forks the stream.
class token_budget_sampler {
 public:
  using policy_concept = sampler_tag;
  using state_type = sampler_state;

  /// Format tag of `save` / `load`.
  static constexpr std::string_view format = "dcp.sampler_state/v1";

  /// Samples `data` with batches of at most `budget` tokens, counted once per sequence by `count`
  /// (default: T * S), shuffled from `seed`. Throws `dcp::error(errc::invalid_argument)` for an
  /// empty dataset, a budget <= 0, an invalid sequence, a duplicate id, or a count <= 0.
  template <class CountTokens = shape_token_count>
    requires std::invocable<const CountTokens&, const sequence&> &&
             std::convertible_to<std::invoke_result_t<const CountTokens&, const sequence&>, std::int64_t>
  token_budget_sampler(dataset data, std::int64_t budget, std::uint64_t seed = 0, const CountTokens& count = {})
      : data_(std::move(data)), budget_(budget), state_{seed, 0, 0} {
    check(!data_.empty(), errc::invalid_argument,
          [] { return std::string("token_budget_sampler: the dataset is empty; give it at least one sequence"); });
    check(budget_ > 0, errc::invalid_argument, [&] {
      return "token_budget_sampler: budget = " + std::to_string(budget_) +
             " tokens must be positive (default: 262144 * GPUs)";
    });
    tokens_.reserve(data_.size());
    for (const auto& s : data_) {
      validate(s);
      const std::int64_t n = static_cast<std::int64_t>(count(s));
      check(n > 0, errc::invalid_argument, [&] {
        return "token_budget_sampler: sequence " + std::to_string(s.id) + " counts " + std::to_string(n) +
               " tokens; the token count must be positive";
      });
      tokens_.push_back(n);
    }
    check_unique_ids();
  }

  /// The next global batch; after the last batch of an epoch comes the first of the next.
  global_batch next() {
    const auto& perm = permutation_cached(state_.epoch);
    const std::int64_t end = batch_end(perm, state_.position);
    global_batch b{state_.epoch, index_, {}};
    b.sequences.reserve(static_cast<std::size_t>(end - state_.position));
    for (std::int64_t p = state_.position; p < end; ++p) b.sequences.push_back(data_[at(perm, p)]);
    state_.position = end;
    ++index_;
    if (end == size()) {
      ++state_.epoch;
      state_.position = 0;
      index_ = 0;
    }
    return b;
  }

  /// Where the sampler stands; `restore(state())` is a no-op. The position is always the start of
  /// a batch, and the state after an epoch's last batch is {seed, epoch + 1, 0}.
  sampler_state state() const noexcept { return state_; }

  /// Resumes at `st`, which must come from `state()` of a sampler over the same dataset, token
  /// counts and budget. Throws `dcp::error(errc::invalid_argument)` for a negative epoch, a position
  /// outside [0, size()], or a position that is not the start of a batch of that epoch (the mark
  /// of a state saved with another dataset or budget). A position equal to size() means
  /// {epoch + 1, 0}. On error the sampler is unchanged.
  void restore(const sampler_state& st) {
    check(st.epoch >= 0, errc::invalid_argument,
          [&] { return "token_budget_sampler::restore: epoch " + std::to_string(st.epoch) + " is negative"; });
    check(st.position >= 0 && st.position <= size(), errc::invalid_argument, [&] {
      return "token_budget_sampler::restore: position " + std::to_string(st.position) + " is outside [0, " +
             std::to_string(size()) + "], the sequences of an epoch; was the state saved for another dataset?";
    });
    sampler_state target = st;
    if (target.position == size()) target = {st.seed, st.epoch + 1, 0};
    auto perm = permutation(target.seed, target.epoch);
    std::int64_t p = 0, index = 0;
    while (p < target.position) {
      p = batch_end(perm, p);
      ++index;
    }
    check(p == target.position, errc::invalid_argument, [&] {
      return "token_budget_sampler::restore: position " + std::to_string(target.position) + " of epoch " +
             std::to_string(target.epoch) +
             " is not the start of a batch; the state was saved with another dataset, token count or budget";
    });
    state_ = target;
    index_ = index;
    if (cached_epoch_ != target.epoch || cached_seed_ != target.seed) {
      perm_ = std::move(perm);
      cached_epoch_ = target.epoch;
      cached_seed_ = target.seed;
    }
  }

  /// Sequences per epoch.
  std::int64_t size() const noexcept { return static_cast<std::int64_t>(data_.size()); }
  /// The token budget of a batch.
  std::int64_t budget() const noexcept { return budget_; }
  /// The dataset, in its given order.
  const dataset& data() const noexcept { return data_; }
  /// Token count of `data()[i]`, as the counter gave it.
  std::int64_t tokens(std::size_t i) const { return tokens_.at(i); }
  /// Index of the batch `next()` returns, within its epoch.
  std::int64_t batch_index() const noexcept { return index_; }

  /// Epoch `epoch`'s visiting order under this sampler's seed, as indices into `data()`.
  std::vector<std::int64_t> permutation(std::int64_t epoch) const { return permutation(state_.seed, epoch); }

  /// Number of batches of epoch `epoch` (it depends on the epoch's order).
  std::int64_t batches_in_epoch(std::int64_t epoch) const {
    check(epoch >= 0, errc::invalid_argument,
          [&] { return "token_budget_sampler: epoch " + std::to_string(epoch) + " is negative"; });
    const auto perm = permutation(epoch);
    std::int64_t count = 0;
    for (std::int64_t p = 0; p < size(); p = batch_end(perm, p)) ++count;
    return count;
  }

  /// A 64-bit digest of the dataset (ids, shapes), the token counts and the budget: `load`
  /// refuses a state saved by a sampler with another fingerprint.
  std::uint64_t fingerprint() const noexcept {
    std::uint64_t h = 0xcbf29ce484222325ULL;
    const auto mix = [&h](std::uint64_t v) {
      std::uint64_t x = h ^ v;
      h = splitmix64(x);
    };
    mix(static_cast<std::uint64_t>(budget_));
    mix(static_cast<std::uint64_t>(size()));
    for (std::size_t i = 0; i < data_.size(); ++i) {
      mix(static_cast<std::uint64_t>(data_[i].id));
      mix(static_cast<std::uint64_t>(data_[i].frames));
      mix(static_cast<std::uint64_t>(data_[i].spatial));
      mix(static_cast<std::uint64_t>(tokens_[i]));
    }
    return h;
  }

  /// Writes the state as one JSON object tagged `"format": "dcp.sampler_state/v1"`, with the
  /// dataset size, budget and fingerprint so that `load` can refuse a mismatched sampler.
  void save(std::ostream& out) const {
    char fp[17];
    const auto r = std::to_chars(fp, fp + 16, fingerprint(), 16);
    const std::string hex(fp, r.ptr);
    out << "{\"format\": \"" << format << "\", \"seed\": " << state_.seed << ", \"epoch\": " << state_.epoch
        << ", \"position\": " << state_.position << ", \"sequences\": " << size() << ", \"budget\": " << budget_
        << ", \"fingerprint\": \"" << std::string(16 - hex.size(), '0') << hex << "\"}\n";
    out.flush();
    check(static_cast<bool>(out), errc::io_error, [] { return std::string("writing the sampler state failed"); });
  }

  /// Reads what `save` wrote (the rest of `in`: one JSON object, whitespace around it allowed) and
  /// resumes there. `source_name` prefixes error messages. Throws `dcp::error` with `errc::parse_error` for
  /// malformed input or another format tag, `errc::mismatch` when the state belongs to a sampler
  /// with another dataset size, budget or fingerprint, and what `restore` throws. On error the
  /// sampler is unchanged.
  void load(std::istream& in, std::string_view source_name = "sampler state") {
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    check(!in.bad(), errc::io_error, [&] { return std::string(source_name) + ": read failed"; });
    // Strict, so that a corrupt checkpoint is reported instead of half-read: one object, no
    // duplicate keys (nlohmann keeps the last one silently), integers that are JSON integers in range.
    const auto fail = [&](const std::string& what) { throw error(errc::parse_error, std::string(source_name) + ": " + what); };
    std::map<std::string, int> keys;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text, [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        if (event == nlohmann::json::parse_event_t::key && depth == 1 && ++keys[parsed.get<std::string>()] > 1)
          fail("duplicate key " + parsed.dump() + " in the sampler state");
        return true;
      });
    } catch (const nlohmann::json::exception& e) {  // parse errors, and numbers out of range (2e8889)
      fail(e.what());
    }
    if (!j.is_object()) fail("expected one JSON object, found " + std::string(j.type_name()));
    const auto f = j.find("format");
    check(f != j.end() && f->is_string() && f->get<std::string>() == format, errc::parse_error, [&] {
      return std::string(source_name) + ": expected \"format\": \"" + std::string(format) + "\" but found " +
             (f == j.end() ? std::string("no format tag") : f->dump());
    });
    auto integer = [&]<class Int>(const char* key, Int) -> Int {
      const auto it = j.find(key);
      if (it == j.end()) fail(std::string("missing key \"") + key + "\" in the sampler state");
      bool ok = false;
      Int v{};
      if (it->is_number_unsigned()) {
        const auto u = it->template get<std::uint64_t>();
        ok = std::in_range<Int>(u), v = static_cast<Int>(u);
      } else if (it->is_number_integer()) {
        const auto i = it->template get<std::int64_t>();
        ok = std::in_range<Int>(i), v = static_cast<Int>(i);
      }
      if (!ok) fail(std::string("key \"") + key + "\" must be an integer in range but is " + it->dump());
      return v;
    };
    const sampler_state st{integer("seed", std::uint64_t{}), integer("epoch", std::int64_t{}),
                           integer("position", std::int64_t{})};
    const auto n = integer("sequences", std::int64_t{});
    const auto budget = integer("budget", std::int64_t{});
    check(n == size() && budget == budget_, errc::mismatch, [&] {
      return std::string(source_name) + ": the state was saved for " + std::to_string(n) + " sequences and budget " +
             std::to_string(budget) + ", but this sampler has " + std::to_string(size()) + " sequences and budget " +
             std::to_string(budget_) + "; resume with the same dataset and --global-batch-tokens";
    });
    const auto fp = j.find("fingerprint");
    if (fp == j.end() || !fp->is_string()) fail("missing string key \"fingerprint\" in the sampler state");
    std::uint64_t saved = 0;
    const std::string hex = fp->get<std::string>();
    const auto r = std::from_chars(hex.data(), hex.data() + hex.size(), saved, 16);
    check(r.ec == std::errc{} && r.ptr == hex.data() + hex.size(), errc::parse_error,
          [&] { return std::string(source_name) + ": fingerprint \"" + hex + "\" is not a 64-bit hex number"; });
    check(saved == fingerprint(), errc::mismatch, [&] {
      return std::string(source_name) +
             ": the state was saved for another dataset or token count (fingerprint differs); resume with the "
             "same workload, seed of the workload and model";
    });
    restore(st);
  }

  friend bool operator==(const token_budget_sampler& a, const token_budget_sampler& b) {
    return a.budget_ == b.budget_ && a.state_ == b.state_ && a.data_ == b.data_ && a.tokens_ == b.tokens_;
  }
  friend std::ostream& operator<<(std::ostream& os, const token_budget_sampler& s) {
    return os << "token_budget_sampler{sequences=" << s.size() << ", budget=" << s.budget_ << ", " << s.state_
              << ", batch=" << s.index_ << "}";
  }

 private:
  static std::size_t at(const std::vector<std::int64_t>& perm, std::int64_t p) {
    return static_cast<std::size_t>(perm[static_cast<std::size_t>(p)]);
  }

  std::vector<std::int64_t> permutation(std::uint64_t seed, std::int64_t epoch) const {
    return random_permutation(size(), derive_seed(seed, static_cast<std::uint64_t>(epoch)));
  }

  const std::vector<std::int64_t>& permutation_cached(std::int64_t epoch) {
    if (cached_epoch_ != epoch || cached_seed_ != state_.seed) {
      perm_ = permutation(state_.seed, epoch);
      cached_epoch_ = epoch;
      cached_seed_ = state_.seed;
    }
    return perm_;
  }

  // End (exclusive) of the batch starting at permutation index `p` (< size()).
  std::int64_t batch_end(const std::vector<std::int64_t>& perm, std::int64_t p) const {
    std::int64_t total = tokens_[at(perm, p)];
    ++p;
    // `total <= budget_` here except for a lone oversized sequence; compare by subtraction so a
    // budget near INT64_MAX cannot overflow the sum.
    while (p < size() && total <= budget_ && tokens_[at(perm, p)] <= budget_ - total) {
      total += tokens_[at(perm, p)];
      ++p;
    }
    return p;
  }

  void check_unique_ids() const {
    std::vector<std::pair<std::int64_t, std::size_t>> ids;
    ids.reserve(data_.size());
    for (std::size_t i = 0; i < data_.size(); ++i) ids.emplace_back(data_[i].id, i);
    std::sort(ids.begin(), ids.end());
    for (std::size_t i = 1; i < ids.size(); ++i)
      check(ids[i].first != ids[i - 1].first, errc::invalid_argument, [&] {
        return "token_budget_sampler: id " + std::to_string(ids[i].first) + " appears at positions " +
               std::to_string(ids[i - 1].second) + " and " + std::to_string(ids[i].second) +
               " of the dataset; sequence ids must be unique";
      });
  }

  dataset data_;
  std::vector<std::int64_t> tokens_;  // tokens_[i]: count of data_[i]
  std::int64_t budget_ = 0;
  sampler_state state_;
  std::int64_t index_ = 0;  // batch index of state_.position within its epoch
  // Cache of the current epoch's permutation (not part of the value).
  std::int64_t cached_epoch_ = -1;
  std::uint64_t cached_seed_ = 0;
  std::vector<std::int64_t> perm_;
};

static_assert(sampler<token_budget_sampler>);

}  // namespace dcp
