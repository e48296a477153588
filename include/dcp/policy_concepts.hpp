#pragma once
/// \file
/// How a type opts in to a policy concept of dcp (cost model, bucketing, group manager, recompute
/// policy, planner, model, sampler): its `policy_concept` member names the concept's tag
/// (`using policy_concept = dcp::planner_tag;`), or, for a foreign type that cannot gain a member,
/// a specialisation of `dcp::policy_concept_of` does:
/// \code
/// template <> struct dcp::policy_concept_of<their::planner> { using type = dcp::planner_tag; };
/// \endcode
/// Every `*_opts_in` concept and the policy bundle's slots read the tag through this trait.

#include <concepts>

namespace dcp {

/// The opt-in tag of `T` (`type`): `T::policy_concept` where it has one, else none. Specialise it
/// for a foreign type.
template <class T>
struct policy_concept_of {};
template <class T>
  requires requires { typename T::policy_concept; }
struct policy_concept_of<T> {
  using type = typename T::policy_concept;
};

/// Whether `T` opts in with some tag.
template <class T>
concept has_policy_concept = requires { typename policy_concept_of<T>::type; };

/// Whether `T` opts in with `Tag`.
template <class T, class Tag>
concept opts_in_with = has_policy_concept<T> && std::same_as<typename policy_concept_of<T>::type, Tag>;

}  // namespace dcp
