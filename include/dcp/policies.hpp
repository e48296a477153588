#pragma once
/// \file
/// `dcp::policies<...>`: the compile-time policy bundle of `dcp::scheduler`.
///
/// Five slots, each with a default: `slot::cost` (`analytic_cost`), `slot::bucketing`
/// (`geometric_bucketing`), `slot::groups` (`buddy_groups`), `slot::recompute`
/// (`selective_recompute`), `slot::planner` (`dcp_planner`). Override any of them, in any order,
/// either by naming the policy (its `policy_concept` tag says which slot it fills):
///
///     dcp::policies<dcp::no_recompute>
///
/// or by naming the slot explicitly:
///
///     dcp::policies<dcp::use<dcp::slot::recompute, dcp::no_recompute>>
///
/// The bundle is a Boost.Hana map from slot tag to policy type; its value holds one value of each
/// policy, so knobs are data: `bundle.get<dcp::slot::planner>().intra = false;`.
/// A policy in the wrong slot, or a type that is no policy at all, fails with one `static_assert`
/// naming the slot, the concept it must model and the fix.

#include <ostream>
#include <type_traits>

#include <boost/hana/at_key.hpp>
#include <boost/hana/contains.hpp>
#include <boost/hana/erase_key.hpp>
#include <boost/hana/fold_left.hpp>
#include <boost/hana/insert.hpp>
#include <boost/hana/map.hpp>
#include <boost/hana/pair.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>

#include <dcp/bucketing/bucketing_concepts.hpp>
#include <dcp/bucketing/geometric_bucketing.hpp>
#include <dcp/cost/analytic.hpp>
#include <dcp/cost/cost_concepts.hpp>
#include <dcp/group/buddy_groups.hpp>
#include <dcp/group/group_concepts.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/plan/plan_concepts.hpp>
#include <dcp/policy_concepts.hpp>
#include <dcp/recompute/recompute_concepts.hpp>
#include <dcp/recompute/selective_recompute.hpp>

namespace dcp {

/// Slot tags of the policy bundle.
namespace slot {
struct cost {
  static constexpr const char* name = "cost";
};
struct bucketing {
  static constexpr const char* name = "bucketing";
};
struct groups {
  static constexpr const char* name = "groups";
};
struct recompute {
  static constexpr const char* name = "recompute";
};
struct planner {
  static constexpr const char* name = "planner";
};
}  // namespace slot

/// Puts `Policy` in `Slot` explicitly.
template <class Slot, class Policy>
struct use {
  using slot_type = Slot;
  using policy_type = Policy;
};

namespace detail {

// The slot a policy's opt-in tag belongs to (void: none).
template <class Tag> struct slot_of_tag { using type = void; };
template <> struct slot_of_tag<cost_model_tag> { using type = slot::cost; };
template <> struct slot_of_tag<bucketing_tag> { using type = slot::bucketing; };
template <> struct slot_of_tag<group_manager_tag> { using type = slot::groups; };
template <> struct slot_of_tag<recompute_policy_tag> { using type = slot::recompute; };
template <> struct slot_of_tag<planner_tag> { using type = slot::planner; };

template <class P> struct policy_tag { using type = void; };
template <has_policy_concept P> struct policy_tag<P> { using type = typename policy_concept_of<P>::type; };

// An override: `use<Slot, P>` or a bare policy whose tag names its slot.
template <class O> struct override_of {
  using slot_type = typename slot_of_tag<typename policy_tag<O>::type>::type;
  using policy_type = O;
  static constexpr bool explicit_slot = false;
};
template <class S, class P> struct override_of<use<S, P>> {
  using slot_type = S;
  using policy_type = P;
  static constexpr bool explicit_slot = true;
};


// One diagnosis per slot, next to its concept: the first requirement the policy misses.
template <class P> constexpr bool diagnose(slot::cost) { return diagnose_cost_model<P>(); }
template <class P> constexpr bool diagnose(slot::bucketing) { return diagnose_bucketing<P>(); }
template <class P> constexpr bool diagnose(slot::groups) { return diagnose_group_manager<P>(); }
template <class P> constexpr bool diagnose(slot::recompute) { return diagnose_recompute_policy<P>(); }
template <class P> constexpr bool diagnose(slot::planner) { return diagnose_planner<P>(); }

template <class O>
constexpr bool check_override() {
  using ov = override_of<O>;
  using S = typename ov::slot_type;
  using P = typename ov::policy_type;
  if constexpr (std::is_void_v<S>) {
    static_assert(!std::is_void_v<S>,
                  "dcp::policies: this type is not a dcp policy (it has no `policy_concept` tag naming a slot). "
                  "Fix: opt in with `using policy_concept = dcp::cost_model_tag;` (or bucketing_tag, "
                  "group_manager_tag, recompute_policy_tag, planner_tag) or, for a type you cannot change, specialise "
                  "dcp::policy_concept_of; or name the slot with dcp::use<dcp::slot::..., P>.");
    return false;
  } else {
    return diagnose<P>(S{});
  }
}

inline constexpr auto default_policy_map = boost::hana::make_map(
    boost::hana::make_pair(boost::hana::type_c<slot::cost>, boost::hana::type_c<analytic_cost>),
    boost::hana::make_pair(boost::hana::type_c<slot::bucketing>, boost::hana::type_c<geometric_bucketing>),
    boost::hana::make_pair(boost::hana::type_c<slot::groups>, boost::hana::type_c<buddy_groups>),
    boost::hana::make_pair(boost::hana::type_c<slot::recompute>, boost::hana::type_c<selective_recompute>),
    boost::hana::make_pair(boost::hana::type_c<slot::planner>, boost::hana::type_c<dcp_planner>));

// Replaces each overridden slot of the defaults (only called once every override checked out).
template <class... Overrides>
constexpr auto make_policy_map() {
  return boost::hana::fold_left(
      boost::hana::make_tuple(boost::hana::type_c<override_of<Overrides>>...), default_policy_map,
      [](auto map, auto ov) {
        using O = typename decltype(ov)::type;
        auto key = boost::hana::type_c<typename O::slot_type>;
        return boost::hana::insert(boost::hana::erase_key(map, key),
                                   boost::hana::make_pair(key, boost::hana::type_c<typename O::policy_type>));
      });
}

template <bool Ok, class... Overrides>
struct policy_map {
  using type = decltype(default_policy_map);
};
template <class... Overrides>
struct policy_map<true, Overrides...> {
  using type = decltype(make_policy_map<Overrides...>());
};

}  // namespace detail

/// The policy bundle: one policy type and value per slot; defaults where not overridden.
template <class... Overrides>
struct policies {
  /// True when every override models its slot's concept (otherwise one static_assert fired).
  static constexpr bool valid = (detail::check_override<Overrides>() && ...);
  /// Slot tag -> policy type, a Boost.Hana map of types.
  using map_type = typename detail::policy_map<valid, Overrides...>::type;

  /// The policy type in `Slot`.
  template <class Slot>
  using at = typename decltype(+boost::hana::at_key(map_type{}, boost::hana::type_c<Slot>))::type;

  at<slot::cost> cost{};
  at<slot::bucketing> bucketing{};
  at<slot::groups> groups{};
  at<slot::recompute> recompute{};
  at<slot::planner> planner{};

  /// The value in `Slot`.
  template <class Slot>
  constexpr auto& get() noexcept {
    if constexpr (std::is_same_v<Slot, slot::cost>) return cost;
    else if constexpr (std::is_same_v<Slot, slot::bucketing>) return bucketing;
    else if constexpr (std::is_same_v<Slot, slot::groups>) return groups;
    else if constexpr (std::is_same_v<Slot, slot::recompute>) return recompute;
    else return planner;
  }
  template <class Slot>
  constexpr const auto& get() const noexcept {
    return const_cast<policies*>(this)->template get<Slot>();
  }

  friend bool operator==(const policies&, const policies&) = default;
  friend std::ostream& operator<<(std::ostream& os, const policies& p) {
    return os << "policies{cost=" << p.cost << ", bucketing=" << p.bucketing << ", groups=" << p.groups
              << ", recompute=" << p.recompute << ", planner=" << p.planner << "}";
  }
};

/// Every slot at its default.
using default_policies = policies<>;

}  // namespace dcp
