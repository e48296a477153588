#pragma once
/// \file
/// The links of a concept's diagnosis: each concept header follows its concept with a
/// `diagnose_<concept><T>()` that lists the concept's named requirements in order. Only the branch
/// of the first one T misses is instantiated, so the one `static_assert` that fires says what to
/// add; a T that meets every listed requirement but not the concept means the concept gained a
/// requirement its diagnosis does not list, and that is an error too (never a silent default).
/// Macros, because a `static_assert` message must be one string literal.
///
/// \code
/// template <class P>
/// constexpr bool diagnose_bucketing() {
///   if constexpr (false) {
///   }
///   DCP_DIAGNOSE_UNMET("dcp::policies: slot 'bucketing'", "bucketing", bucketing_opts_in, "...")
///   DCP_DIAGNOSE_ALL_LISTED("dcp::policies: slot 'bucketing'", "bucketing", dcp::bucketing, "bucketing_concepts.hpp")
///   return dcp::bucketing<P>;
/// }
/// \endcode

#define DCP_DIAGNOSE_UNMET(subject, concept_name, requirement, members)                                         \
  else if constexpr (!requirement<P>) static_assert(                                                            \
      requirement<P>, subject " needs a model of dcp::" concept_name "; first unmet requirement: " #requirement \
                              " (" members "). Fix: complete the type's interface (a policy also goes in the "  \
                              "slot its concept names).");

#define DCP_DIAGNOSE_ALL_LISTED(subject, concept_name, concept, header)                                        \
  else if constexpr (!concept<P>) static_assert(                                                               \
      concept<P>, subject ": the type meets every requirement the diagnosis lists but does not model dcp::"    \
                  concept_name "; add the concept's new requirement to its diagnosis in " header);
