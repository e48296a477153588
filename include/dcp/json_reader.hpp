#pragma once
/// \file
/// `dcp::json_reader`: what every reader of a JSON document does before its own fields (dcp's
/// formats and a model's config.json): parse, check the format tag, read integers and numbers
/// strictly, and turn every failure into one `dcp::error(errc::parse_error)` that starts with the
/// reader's prefix (the format and the source, e.g. "dcp.profile/v1 'p.json': ").

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <istream>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include <dcp/error.hpp>

namespace dcp {

class json_reader {
 public:
  explicit json_reader(std::string prefix) : prefix_(std::move(prefix)) {}

  /// A reader that learns its format from the document changes its prefix once it knows it.
  void set_prefix(std::string prefix) { prefix_ = std::move(prefix); }

  [[noreturn]] void fail(const std::string& what) const { throw error(errc::parse_error, prefix_ + what); }

  /// The whole document: malformed JSON is "not valid JSON (...)".
  nlohmann::json parse(std::istream& in) const {
    try {
      return nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      fail(std::string("not valid JSON (") + e.what() + ")");
    }
  }

  /// The document's "format" when it is one of `formats` (the current one first); otherwise
  /// "unknown format 'X'; expected \"A\" (or \"B\", ...)".
  std::string expect_format(const nlohmann::json& j, std::initializer_list<std::string_view> formats) const {
    const bool tagged = j.is_object() && j.contains("format") && j["format"].is_string();
    const std::string f = tagged ? j["format"].get<std::string>() : "";
    for (std::string_view known : formats)
      if (f == known) return f;
    auto it = formats.begin();
    std::string list = "\"" + std::string(*it++) + "\"";
    if (it != formats.end()) {
      list += " (or ";
      for (bool first = true; it != formats.end(); ++it, first = false)
        list += (first ? "\"" : ", \"") + std::string(*it) + "\"";
      list += ")";
    }
    fail("unknown format '" + f + "'; expected " + list);
  }

  /// A JSON integer in [lo, hi] (nlohmann's get<int>() on 1e54 is undefined behaviour).
  std::int64_t integer(const nlohmann::json& v, const std::string& field, std::int64_t lo = 0,
                       std::int64_t hi = std::numeric_limits<std::int64_t>::max()) const {
    bool ok = false;
    std::int64_t x = 0;
    if (v.is_number_unsigned()) {
      const auto u = v.get<std::uint64_t>();
      ok = u <= static_cast<std::uint64_t>(hi);
      x = ok ? static_cast<std::int64_t>(u) : 0;
      ok = ok && x >= lo;
    } else if (v.is_number_integer()) {
      x = v.get<std::int64_t>();
      ok = x >= lo && x <= hi;
    }
    if (!ok)
      fail("field '" + field + "' = " + v.dump() + " is not an integer in [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "]");
    return x;
  }

  /// `integer` within [lo, the largest Int].
  template <class Int>
  Int integer_as(const nlohmann::json& v, const std::string& field, Int lo = 0) const {
    return static_cast<Int>(integer(v, field, lo, std::numeric_limits<Int>::max()));
  }

  /// A finite JSON number.
  double number(const nlohmann::json& v, const std::string& field) const {
    if (!v.is_number() || !std::isfinite(v.get<double>()))
      fail("field '" + field + "' = " + v.dump() + " is not a finite number");
    return v.get<double>();
  }

  /// The member `key` of the object `o`, which `where` names ("the document", "\"layout\"").
  const nlohmann::json& at(const nlohmann::json& o, const char* key, const std::string& where) const {
    if (!o.is_object() || !o.contains(key)) fail(where + " has no \"" + key + "\"");
    return o.at(key);
  }

  /// Runs `read`; nlohmann's own exceptions (a field missing or of the wrong type, read with
  /// `at` or `get`) become "missing or mistyped field (...)".
  template <class F>
  decltype(auto) fields(F&& read) const {
    try {
      return std::forward<F>(read)();
    } catch (const nlohmann::json::exception& e) {
      fail(std::string("missing or mistyped field (") + e.what() + ")");
    }
  }

 private:
  std::string prefix_;
};

}  // namespace dcp
