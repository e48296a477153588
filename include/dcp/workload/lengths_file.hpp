#pragma once
/// \file
/// Lengths files: a dataset as text, replacing the embedded workloads (DESIGN section 5).
///
/// One sequence per line, either `n` (a 1D sequence of n tokens) or `T S` (T frames of S tokens).
/// `#` starts a comment to the end of the line; blank lines are ignored; numbers are separated by
/// spaces or tabs. Sequence ids are the 0-based index of the sequence in the file. Every value
/// must be a positive integer of at most 2^40, and T * S at most 2^40 (`dcp::max_shape_tokens`).
/// Example:
/// ```
/// # 2 videos and a text
/// 30 920
/// 120 3600
/// 4096
/// ```

#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <istream>
#include <ostream>
#include <string>
#include <string_view>
#include <system_error>

#include <dcp/error.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

namespace detail {

inline bool is_blank(char c) noexcept { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

// The first line `write_lengths` writes, followed by the sequence count.
inline constexpr std::string_view lengths_header = "# dcp lengths file: ";

inline std::string quoted_token(std::string_view t) {
  constexpr std::size_t shown = 40;
  return "'" + std::string(t.substr(0, shown)) + (t.size() > shown ? "...'" : "'");
}

}  // namespace detail

/// Reads a lengths file from `in`; `source_name` (a file name, "<stdin>", ...) prefixes every
/// error message as `source:line: what`. Throws `dcp::error` with `errc::parse_error` for a
/// malformed line, an input without sequences, or a file whose `write_lengths` header count does
/// not match (truncated), and `errc::io_error` when reading fails.
inline dataset read_lengths(std::istream& in, std::string_view source_name) {
  const std::string source(source_name);
  dataset out;
  std::string line;
  std::int64_t line_no = 0;
  std::int64_t promised = -1;        // the count in a `write_lengths` header, if there is one
  bool last_unterminated = false;    // the last line read ended at end of file, not at '\n'
  while (std::getline(in, line)) {
    ++line_no;
    last_unterminated = in.eof();
    std::string_view rest(line);
    // Editors on some systems start a text file with a UTF-8 byte order mark: not data.
    if (line_no == 1 && rest.starts_with("\xEF\xBB\xBF")) rest.remove_prefix(3);
    if (line_no == 1 && rest.starts_with(detail::lengths_header)) {
      std::string_view n = rest.substr(detail::lengths_header.size());
      std::int64_t v = 0;
      if (const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), v); ec == std::errc{} && v >= 0)
        promised = v;
    }
    if (const auto hash = rest.find('#'); hash != std::string_view::npos) rest = rest.substr(0, hash);

    const auto fail = [&](const std::string& what) -> void {
      throw error(errc::parse_error, source + ":" + std::to_string(line_no) + ": " + what);
    };
    std::int64_t values[2] = {0, 0};
    int count = 0;
    while (true) {
      while (!rest.empty() && detail::is_blank(rest.front())) rest.remove_prefix(1);
      if (rest.empty()) break;
      std::size_t len = 0;
      while (len < rest.size() && !detail::is_blank(rest[len])) ++len;
      const std::string_view token = rest.substr(0, len);
      rest.remove_prefix(len);

      if (count == 2)
        fail("expected 'n' or 'T S' but found a third value " + detail::quoted_token(token) +
             "; write one sequence per line");
      // from_chars takes a leading '-' but not '+'; both signs are rejected below with a clear reason.
      std::int64_t v = 0;
      const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
      const bool whole = end == token.data() + token.size();
      if (ec == std::errc::result_out_of_range && whole)
        fail("value " + detail::quoted_token(token) + " is out of range; lengths must be positive and at most 2^40");
      if (ec != std::errc{} || !whole)
        fail("expected an integer token count but found " + detail::quoted_token(token));
      if (v <= 0)
        fail("value " + std::to_string(v) + " must be positive; drop empty or invalid samples from the file");
      if (v > max_shape_tokens)
        fail("value " + std::to_string(v) + " is over the limit of 2^40 tokens; split the sample");
      values[count++] = v;
    }
    if (count == 0) continue;  // blank or comment-only line

    sequence s = count == 1 ? make_sequence(static_cast<std::int64_t>(out.size()), values[0])
                            : make_sequence(static_cast<std::int64_t>(out.size()), values[0], values[1]);
    if (s.spatial > max_shape_tokens / s.frames)  // both <= 2^40, so the division is the exact test
      fail("shape " + std::to_string(s.frames) + " x " + std::to_string(s.spatial) +
           " has over 2^40 tokens; split the sample");
    out.push_back(s);
  }
  if (in.bad())
    throw error(errc::io_error, source + ":" + std::to_string(line_no + 1) + ": read failed after " +
                                    std::to_string(line_no) + " lines");
  // A file written by `write_lengths` says how many sequences it holds and ends with a newline:
  // a file cut short (even right after a digit) is caught instead of read as a shorter dataset.
  if (promised >= 0) {
    check(static_cast<std::int64_t>(out.size()) == promised && !last_unterminated, errc::parse_error, [&] {
      return source + ":" + std::to_string(line_no) + ": the header promises " + std::to_string(promised) +
             " sequences but the file holds " + std::to_string(out.size()) +
             (last_unterminated ? " and its last line is cut short" : "") +
             "; the file is truncated or was edited (fix or drop the header line)";
    });
  }
  check(!out.empty(), errc::parse_error, [&] {
    return source + ":" + std::to_string(line_no) +
           ": no sequences found; a lengths file has one sequence per line ('n' or 'T S')";
  });
  return out;
}

/// Reads the lengths file at `path`. Throws `dcp::error(errc::io_error)` when it cannot be opened,
/// and what `read_lengths` throws for its content.
inline dataset read_lengths_file(const std::filesystem::path& path) {
  std::error_code ec;
  const bool is_dir = std::filesystem::is_directory(path, ec);
  check(!is_dir, errc::io_error,
        [&] { return "cannot read lengths file '" + path.string() + "': it is a directory"; });
  std::ifstream in(path);
  check(in.is_open(), errc::io_error, [&] {
    return "cannot open lengths file '" + path.string() + "' (" +
           (std::filesystem::exists(path, ec) ? "permission denied?" : "no such file") + ")";
  });
  return read_lengths(in, path.string());
}

/// Writes `d` as a lengths file: a comment header, then `n` for 1D sequences (frames == 1) and
/// `T S` otherwise, in dataset order. `read_lengths` gives back the same shapes in the same order
/// (ids become 0..n-1, so `d` round-trips exactly when its ids are its indices).
/// Throws `dcp::error` for an invalid sequence (see `dcp::validate`) or a failed write.
inline void write_lengths(std::ostream& out, const dataset& d) {
  for (const auto& s : d) validate(s);
  out << detail::lengths_header << d.size() << " sequences, one per line as 'n' or 'T S'\n";
  for (const auto& s : d) {
    if (s.frames == 1) out << s.spatial << '\n';
    else out << s.frames << ' ' << s.spatial << '\n';
  }
  out.flush();
  check(static_cast<bool>(out), errc::io_error, [] { return std::string("writing the lengths file failed"); });
}

}  // namespace dcp
