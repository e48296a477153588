#pragma once
/// \file
/// `group_law_violations`: the laws of `group_manager` (see `group_concepts.hpp`) checked on one
/// manager value, every size it offers at once; `check_group_laws` throws the first as a
/// `dcp::error`. O(N) per offered size: run once per job (the scheduler and `group_cache` do),
/// not per plan.

#include <sstream>
#include <string>
#include <vector>

#include <dcp/error.hpp>
#include <dcp/group/group_concepts.hpp>

namespace dcp {

/// Every way `g` breaks a `group_manager` law (at most 32); empty when it keeps them all.
/// Calls `g.validate()` first: a layout it refuses throws its own `dcp::error`.
template <group_manager G>
std::vector<std::string> group_law_violations(const G& g) {
  g.validate();
  std::vector<std::string> out;
  auto fail = [&out](const std::string& s) {
    if (out.size() < 32) out.push_back(s);
  };
  const int n = g.gpus(), node = g.gpus_per_node();
  std::vector<char> used;
  for (int sp = 1; sp > 0 && sp <= n; ++sp) {
    const int count = g.block_count(sp);
    if (count == 0) continue;
    if (count < 0 || static_cast<long long>(count) * sp > n) {
      fail("block_count(" + std::to_string(sp) + ") = " + std::to_string(count) + ": not in [0, " +
           std::to_string(n / sp) + "] (disjoint blocks of " + std::to_string(sp) + " in " + std::to_string(n) +
           " ranks)");
      continue;
    }
    used.assign(static_cast<std::size_t>(n), 0);
    for (int i = 0; i < count; ++i) {
      const rank_block b = g.block(sp, i);
      std::ostringstream where;
      where << "block(" << sp << ", " << i << ") = " << b;
      if (b.size != sp || b.first < 0 || b.end() > n) {
        fail(where.str() + ": not a block of " + std::to_string(sp) + " ranks inside [0, " + std::to_string(n) + ")");
        continue;
      }
      if (sp <= node && b.first / node != (b.end() - 1) / node)
        fail(where.str() + ": spans two nodes of " + std::to_string(node) + " though it is no wider than a node");
      if (sp > node && (b.first % node != 0 || sp % node != 0))
        fail(where.str() + ": wider than a node of " + std::to_string(node) + " but not made of whole nodes");
      bool overlaps = false;
      for (int r = b.first; r < b.end(); ++r) overlaps = used[static_cast<std::size_t>(r)]++ != 0 || overlaps;
      if (overlaps) fail(where.str() + ": overlaps another block of " + std::to_string(sp) + " (blocks of one size must be disjoint)");
      for (int r = b.first; r < b.end(); ++r)
        if (const rank_block o = g.block_of(r, sp); o != b) {
          std::ostringstream os;
          os << where.str() << " holds rank " << r << " but block_of(" << r << ", " << sp << ") = " << o;
          fail(os.str());
          break;
        }
    }
  }
  return out;
}

/// Throws `dcp::error(errc::invalid_argument)` naming the first law `g` breaks (and `who`, the
/// caller) unless `g` keeps them all.
template <group_manager G>
void check_group_laws(const G& g, const std::string& who = "group manager") {
  const auto v = group_law_violations(g);
  if (v.empty()) return;
  throw error(errc::invalid_argument, who + ": the group manager breaks a group_manager law: " + v.front() +
                                          (v.size() > 1 ? " (and " + std::to_string(v.size() - 1) + " more)" : "") +
                                          "; fix its block(sp, i), block_count(sp) or block_of(rank, sp)");
}

}  // namespace dcp
