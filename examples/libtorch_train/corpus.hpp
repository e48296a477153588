#pragma once
/// \file
/// The LibTorch example's training data: a tokenised corpus of variable-length documents in a
/// text file, and the generator that writes one.
///
/// The generator writes English-like prose from a small phrase grammar (each document keeps to a
/// few topic nouns, so context helps a model), tokenised character by character over
/// `corpus::alphabet`. File format, one header block then one document per line:
///
///     dcp-libtorch-corpus 1
///     alphabet  .,abcdefghijklmnopqrstuvwxyz
///     documents <count>
///     <n> <token> <token> ... (n tokens)
///
/// Document i is sequence i of the dataset, of n - 1 tokens: inputs are tokens [0, n - 1),
/// targets [1, n).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <dcp/error.hpp>
#include <dcp/random.hpp>
#include <dcp/sequence.hpp>

namespace libtorch_train {

class corpus {
 public:
  static constexpr std::string_view alphabet = " .,abcdefghijklmnopqrstuvwxyz";
  static constexpr int vocab = int(alphabet.size());

  corpus() = default;
  explicit corpus(std::vector<std::vector<int>> docs) : docs_(std::move(docs)) {}

  std::size_t size() const noexcept { return docs_.size(); }
  const std::vector<int>& document(std::int64_t id) const {
    dcp::check(id >= 0 && id < std::int64_t(docs_.size()), dcp::errc::invalid_argument, [&] {
      return "corpus: no document " + std::to_string(id) + " among " + std::to_string(docs_.size()) +
             "; plan the corpus' own dataset()";
    });
    return docs_[std::size_t(id)];
  }
  /// The longest sequence (document length - 1).
  std::int64_t longest() const noexcept {
    std::int64_t m = 0;
    for (const auto& d : docs_) m = std::max<std::int64_t>(m, std::int64_t(d.size()) - 1);
    return m;
  }
  /// What dcp plans: sequence i has the length of document i's inputs.
  dcp::dataset dataset() const {
    dcp::dataset out;
    for (std::size_t i = 0; i < docs_.size(); ++i)
      out.push_back(dcp::make_sequence(std::int64_t(i), std::int64_t(docs_[i].size()) - 1));
    return out;
  }

  static std::string decode(const std::vector<int>& tokens) {
    std::string s;
    for (int t : tokens) s += alphabet[std::size_t(t)];
    return s;
  }

  /// `count` documents whose lengths (in tokens, targets included) are log-uniform in
  /// [min_len + 1, max_len + 1], from `seed`.
  static corpus generate(int count, int min_len, int max_len, std::uint64_t seed) {
    dcp::check(count > 0 && min_len >= 1 && max_len >= min_len, dcp::errc::invalid_argument, [&] {
      return "corpus::generate: need count > 0 and 1 <= min_len <= max_len; got count = " + std::to_string(count) +
             ", min_len = " + std::to_string(min_len) + ", max_len = " + std::to_string(max_len);
    });
    static constexpr std::string_view nouns[] = {"river", "garden", "engine", "sailor", "market", "lantern",
                                                  "valley", "teacher", "bridge", "orchard", "signal", "harbor",
                                                  "winter", "painter", "forest", "kettle"};
    static constexpr std::string_view verbs[] = {"watches", "carries", "follows", "builds", "paints",
                                                 "finds", "crosses", "remembers", "lifts", "greets"};
    static constexpr std::string_view adjectives[] = {"quiet", "old", "bright", "small", "heavy", "green", "slow",
                                                      "distant"};
    static constexpr std::string_view places[] = {"near the", "under the", "beyond the", "inside the", "across the"};
    dcp::xoshiro256ss rng(seed);
    auto below = [&rng](std::size_t n) { return std::size_t(dcp::uniform_below(rng, n)); };
    auto pick = [&below](auto& list) -> std::string_view { return list[below(std::size(list))]; };
    const double lo = std::log(double(min_len + 1)), hi = std::log(double(max_len + 2));
    std::vector<std::vector<int>> docs;
    for (int i = 0; i < count; ++i) {
      const double u = dcp::uniform01(rng);
      const auto n = std::size_t(std::clamp<double>(std::floor(std::exp(lo + u * (hi - lo))), min_len + 1, max_len + 1));
      // A document's topic: three nouns it keeps returning to.
      const std::string_view topic[] = {pick(nouns), pick(nouns), pick(nouns)};
      std::string text;
      while (text.size() < n) {
        text += "the ";
        if (below(2) == 0) text += std::string(pick(adjectives)) + " ";
        text += std::string(topic[below(3)]) + " " + std::string(pick(verbs)) + " the " +
                std::string(pick(nouns));
        if (below(3) == 0) text += std::string(" ") + std::string(pick(places)) + " " + std::string(topic[0]);
        text += below(4) == 0 ? ", " : ". ";
      }
      text.resize(n);
      docs.push_back(encode(text));
    }
    return corpus(std::move(docs));
  }

  void write(const std::string& path) const {
    std::ofstream out(path);
    dcp::check(bool(out), dcp::errc::io_error, [&] { return "corpus: cannot write " + path + "; check the folder"; });
    out << "dcp-libtorch-corpus 1\nalphabet " << alphabet << "\ndocuments " << docs_.size() << "\n";
    for (const auto& d : docs_) {
      out << d.size();
      for (int t : d) out << ' ' << t;
      out << '\n';
    }
    out.flush();
    dcp::check(bool(out), dcp::errc::io_error, [&] { return "corpus: writing " + path + " failed; disk full?"; });
  }

  /// Reads a corpus file; a malformed one is a `dcp::error` (parse_error) naming the line.
  static corpus read(const std::string& path) {
    std::ifstream in(path);
    dcp::check(bool(in), dcp::errc::io_error,
               [&] { return "corpus: cannot open " + path + "; give a corpus file, or a path where rank 0 generates one (--corpus FILE)"; });
    std::string line;
    int line_no = 0;
    auto fail = [&](const std::string& why) {
      throw dcp::error(dcp::errc::parse_error, "corpus " + path + ":" + std::to_string(line_no) + ": " + why);
    };
    auto next_line = [&] {
      ++line_no;
      if (!std::getline(in, line)) fail("unexpected end of file");
    };
    next_line();
    if (line != "dcp-libtorch-corpus 1") fail("expected the header 'dcp-libtorch-corpus 1', got '" + line + "'");
    next_line();
    if (line != "alphabet " + std::string(alphabet))
      fail("the alphabet must be '" + std::string(alphabet) + "' (this version's tokeniser)");
    next_line();
    long long count = -1;
    if (std::istringstream h(line); !(h >> line >> count) || line != "documents" || count <= 0)
      fail("expected 'documents <count>' with a positive count");
    std::vector<std::vector<int>> docs;
    for (long long i = 0; i < count; ++i) {
      next_line();
      std::istringstream s(line);
      long long n = 0;
      if (!(s >> n) || n < 2) fail("a document needs a token count >= 2 (one input, one target)");
      std::vector<int> d;
      for (int t = 0; s >> t;) {
        if (t < 0 || t >= vocab) fail("token " + std::to_string(t) + " outside [0, " + std::to_string(vocab) + ")");
        d.push_back(t);
      }
      if (!s.eof() || std::int64_t(d.size()) != n)
        fail("the line declares " + std::to_string(n) + " tokens but holds " + std::to_string(d.size()) +
             " valid ones");
      docs.push_back(std::move(d));
    }
    return corpus(std::move(docs));
  }

 private:
  static std::vector<int> encode(std::string_view text) {
    std::vector<int> out;
    for (char c : text) out.push_back(int(alphabet.find(c)));
    return out;
  }

  std::vector<std::vector<int>> docs_;
};

}  // namespace libtorch_train
