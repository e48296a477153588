// Compile-time checks of the policy axes: every shipped model satisfies its
// concept and no other, look-alikes without the opt-in tag (or with another axis' tag) satisfy
// none, and the scheduler and its policy bundle accept exactly what they document. Everything
// here is a static_assert; the executable only exists so that ctest (label `static`) shows that
// this translation unit built.
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <type_traits>

#include <dcp/bucketing/fixed_edges_bucketing.hpp>
#include <dcp/bucketing/geometric_bucketing.hpp>
#include <dcp/bucketing/quantile_bucketing.hpp>
#include <dcp/comm/local.hpp>
#include <dcp/config.hpp>
#include <dcp/cost/analytic.hpp>
#include <dcp/group/buddy_groups.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/plan/bucket_planner.hpp>
#include <dcp/plan/dcp_planner.hpp>
#include <dcp/plan/dynamic_cp_planner.hpp>
#include <dcp/plan/packed_planner.hpp>
#include <dcp/policies.hpp>
#include <dcp/recompute/full_recompute.hpp>
#include <dcp/recompute/no_recompute.hpp>
#include <dcp/recompute/selective_recompute.hpp>
#include <dcp/sample/token_budget_sampler.hpp>
#include <dcp/scheduler.hpp>
#include <dcp/workload/tuning.hpp>
#if DCP_HAS_MPI()
#include <dcp/comm/mpi.hpp>
#endif

namespace dcp_static_checks {

// ---- how many axes a type models (every shipped model must model exactly one) ------------------
template <class T>
constexpr int axes_modelled =
    int(dcp::cost_model<T>) + int(dcp::bucketing<T>) + int(dcp::group_manager<T>) + int(dcp::recompute_policy<T>) +
    int(dcp::planner<T>) + int(dcp::model_spec<T>) + int(dcp::sampler<T>) + int(dcp::communicator<T>);

template <class T>
constexpr bool models_only(bool own_concept) {
  return own_concept && axes_modelled<T> == 1;
}

// ---- shipped models ----------------------------------------------------------------------------
static_assert(models_only<dcp::analytic_cost>(dcp::cost_model<dcp::analytic_cost>));
static_assert(models_only<dcp::fixed_edges_bucketing>(dcp::bucketing<dcp::fixed_edges_bucketing>));
static_assert(models_only<dcp::geometric_bucketing>(dcp::bucketing<dcp::geometric_bucketing>));
static_assert(models_only<dcp::quantile_bucketing>(dcp::bucketing<dcp::quantile_bucketing>));
static_assert(models_only<dcp::buddy_groups>(dcp::group_manager<dcp::buddy_groups>));
static_assert(models_only<dcp::no_recompute>(dcp::recompute_policy<dcp::no_recompute>));
static_assert(models_only<dcp::full_recompute>(dcp::recompute_policy<dcp::full_recompute>));
static_assert(models_only<dcp::selective_recompute>(dcp::recompute_policy<dcp::selective_recompute>));
static_assert(models_only<dcp::dcp_planner>(dcp::planner<dcp::dcp_planner>));
static_assert(models_only<dcp::bucket_planner>(dcp::planner<dcp::bucket_planner>));
static_assert(models_only<dcp::packed_planner>(dcp::planner<dcp::packed_planner>));
static_assert(models_only<dcp::dynamic_cp_planner>(dcp::planner<dcp::dynamic_cp_planner>));
static_assert(models_only<dcp::transformer_spec>(dcp::model_spec<dcp::transformer_spec>));
static_assert(models_only<dcp::token_budget_sampler>(dcp::sampler<dcp::token_budget_sampler>));
static_assert(models_only<dcp::local_comm>(dcp::communicator<dcp::local_comm>));
static_assert(dcp::host_communicator<dcp::local_comm>);
#if DCP_HAS_MPI()
static_assert(models_only<dcp::mpi_comm>(dcp::communicator<dcp::mpi_comm>));
static_assert(dcp::host_communicator<dcp::mpi_comm>);
#endif

// Policies are regular, printable values (STYLE: "a policy is a regular value").
template <class P>
concept printable = requires(std::ostream& os, const P& p) {
  { os << p } -> std::same_as<std::ostream&>;
};
template <class... P>
constexpr bool regular_printable = ((std::regular<P> && printable<P>) && ...);
static_assert(regular_printable<dcp::analytic_cost, dcp::fixed_edges_bucketing, dcp::geometric_bucketing,
                                dcp::quantile_bucketing, dcp::buddy_groups, dcp::no_recompute, dcp::full_recompute,
                                dcp::selective_recompute, dcp::dcp_planner, dcp::bucket_planner, dcp::packed_planner,
                                dcp::dynamic_cp_planner, dcp::transformer_spec, dcp::default_policies,
                                dcp::policies<dcp::no_recompute>, dcp::device_spec>);
static_assert(std::regular<dcp::scheduler_options>);

// ---- look-alikes: every member, but no opt-in (Tag = void) or another axis' tag ----------------
template <class Tag>
struct opt_in {
  using policy_concept = Tag;
  friend constexpr bool operator==(const opt_in&, const opt_in&) = default;
};
template <>
struct opt_in<void> {  // no `policy_concept` member at all
  friend constexpr bool operator==(const opt_in&, const opt_in&) = default;
};

template <class Tag>
struct cost_look_alike : opt_in<Tag> {
  using load_type = dcp::analytic_load;
  load_type load_of(const dcp::sequence&) const;
  std::int64_t tokens_of(const dcp::sequence&) const;
  double time(const load_type&, int, int) const;
  double memory(const load_type&, int, int) const;
  double work_floor(const load_type&, int, int) const;
  dcp::parallel_layout layout() const;
  double capacity() const;
  int blocks() const;
  int gpus() const;
  int gpus_per_node() const;
  int heads() const;
};
template <class Tag>
struct bucketing_look_alike : opt_in<Tag> {
  std::size_t bucket_count() const;
  std::size_t bucket_of(std::int64_t) const;
  std::int64_t representative(std::size_t) const;
};
template <class Tag>
struct groups_look_alike : opt_in<Tag> {
  int gpus() const;
  int gpus_per_node() const;
  int block_count(int) const;
  dcp::rank_block block(int, int) const;
  dcp::rank_block block_of(int, int) const;
  void validate() const;
  friend bool operator==(const groups_look_alike&, const groups_look_alike&) = default;
};
template <class Tag>
struct recompute_look_alike : opt_in<Tag> {
  template <dcp::cost_model C>
  std::optional<int> choose(const C&, const typename C::load_type&, int) const;
  friend bool operator==(const recompute_look_alike&, const recompute_look_alike&) = default;
};
template <class Tag>
struct planner_look_alike : opt_in<Tag> {
  std::string name() const;
  template <dcp::any_planning_context Ctx>
  dcp::plan plan(const Ctx&, std::span<const dcp::sequence>) const;
  friend bool operator==(const planner_look_alike&, const planner_look_alike&) = default;
};
template <class Tag>
struct model_look_alike : opt_in<Tag> {
  int blocks = 1;
  double hidden = 1;
  int heads = 1;
  double mlp_width = 1;
  int mlp_matrices = 2;
  dcp::attention_kind attention = dcp::attention_kind::full;
  std::int64_t text_tokens = 0;
  double block_parameters() const;
  double parameters() const;
};

template <class Tag>
struct comm_opt_in {
  using communicator_concept = Tag;
};
template <>
struct comm_opt_in<void> {};
template <class Tag>
struct comm_look_alike : comm_opt_in<Tag> {
  static constexpr bool host_memory = true;
  bool valid() const;
  int rank() const;
  int size() const;
  comm_look_alike split(int, int);
  template <class T>
  void all_to_all(std::span<const T>, std::span<T>);
  template <class T>
  void all_to_all_v(std::span<const T>, std::span<const std::size_t>, std::span<T>, std::span<const std::size_t>);
  template <class T>
  void all_gather(std::span<const T>, std::span<T>);
  template <class T>
  void all_reduce(std::span<const T>, std::span<T>, dcp::reduce_op);
  template <class T>
  void all_reduce(std::span<T>, dcp::reduce_op);
  template <class T>
  void broadcast(std::span<T>, int);
  template <class T>
  void send(std::span<const T>, int, int);
  template <class T>
  void recv(std::span<T>, int, int);
  void barrier();
  void abort() noexcept;
  bool aborted() const;
  std::chrono::milliseconds timeout() const;
  void set_timeout(std::chrono::milliseconds);
};

// With their own tag the look-alikes are models: the negative checks below fail only for the tag.
static_assert(models_only<cost_look_alike<dcp::cost_model_tag>>(dcp::cost_model<cost_look_alike<dcp::cost_model_tag>>));
static_assert(models_only<bucketing_look_alike<dcp::bucketing_tag>>(
    dcp::bucketing<bucketing_look_alike<dcp::bucketing_tag>>));
static_assert(models_only<groups_look_alike<dcp::group_manager_tag>>(
    dcp::group_manager<groups_look_alike<dcp::group_manager_tag>>));
static_assert(models_only<recompute_look_alike<dcp::recompute_policy_tag>>(
    dcp::recompute_policy<recompute_look_alike<dcp::recompute_policy_tag>>));
static_assert(models_only<planner_look_alike<dcp::planner_tag>>(dcp::planner<planner_look_alike<dcp::planner_tag>>));
static_assert(models_only<model_look_alike<dcp::model_spec_tag>>(dcp::model_spec<model_look_alike<dcp::model_spec_tag>>));
static_assert(models_only<comm_look_alike<dcp::communicator_tag>>(
    dcp::communicator<comm_look_alike<dcp::communicator_tag>>));

// Without a tag, or with another axis' tag, they model nothing.
template <template <class> class LookAlike, class... Tags>
constexpr bool models_nothing = ((axes_modelled<LookAlike<Tags>> == 0) && ...);
static_assert(models_nothing<cost_look_alike, void, dcp::bucketing_tag, dcp::planner_tag>);
static_assert(models_nothing<bucketing_look_alike, void, dcp::cost_model_tag, dcp::group_manager_tag>);
static_assert(models_nothing<groups_look_alike, void, dcp::bucketing_tag, dcp::recompute_policy_tag>);
static_assert(models_nothing<recompute_look_alike, void, dcp::planner_tag, dcp::cost_model_tag>);
static_assert(models_nothing<planner_look_alike, void, dcp::recompute_policy_tag, dcp::model_spec_tag>);
static_assert(models_nothing<model_look_alike, void, dcp::cost_model_tag>);
static_assert(models_nothing<comm_look_alike, void, dcp::cost_model_tag>);

// A shipped policy given another axis' tag models nothing either.
template <class P, class Tag>
struct retagged : P {
  using policy_concept = Tag;
};
static_assert(axes_modelled<retagged<dcp::geometric_bucketing, dcp::cost_model_tag>> == 0);
static_assert(axes_modelled<retagged<dcp::selective_recompute, dcp::planner_tag>> == 0);
static_assert(axes_modelled<retagged<dcp::dcp_planner, dcp::recompute_policy_tag>> == 0);
static_assert(axes_modelled<retagged<dcp::analytic_cost, dcp::bucketing_tag>> == 0);

// ---- `requires !requires`: what the API refuses ------------------------------------------------
// Planners take only a recompute policy as their third argument.
template <class Planner, class R>
concept refuses_recompute = requires(const Planner& p, const dcp::analytic_cost& c, std::span<const dcp::sequence> b,
                                     const R& r) {
  requires !requires { p.plan(c, b, r); };
};
static_assert(!refuses_recompute<dcp::dcp_planner, dcp::selective_recompute>);
static_assert(refuses_recompute<dcp::dcp_planner, dcp::geometric_bucketing>);
static_assert(refuses_recompute<dcp::dcp_planner, recompute_look_alike<void>>);
static_assert(refuses_recompute<dcp::bucket_planner, dcp::dcp_planner>);
static_assert(refuses_recompute<dcp::packed_planner, dcp::buddy_groups>);
static_assert(refuses_recompute<dcp::dynamic_cp_planner, dcp::analytic_cost>);

// The scheduler takes a model_spec and a communicator, nothing else. A Model that is no
// model_spec is rejected when the scheduler is instantiated, by a static_assert naming the first
// requirement it misses (tests/fail/model_spec_missing_member.cpp), not by a constraint.
template <class Model, class Comm, class Policies = dcp::default_policies>
concept schedulable = requires { typename dcp::scheduler<Model, Comm, Policies>; };
static_assert(schedulable<dcp::transformer_spec, dcp::local_comm>);
static_assert(schedulable<dcp::transformer_spec, dcp::local_comm, dcp::policies<dcp::no_recompute>>);
static_assert(!schedulable<dcp::transformer_spec, comm_look_alike<void>>);
static_assert(!schedulable<dcp::transformer_spec, dcp::analytic_cost>);
#if DCP_HAS_MPI()
static_assert(schedulable<dcp::transformer_spec, dcp::mpi_comm>);
#endif

// A cost model reaches the scheduler through `dcp::cost_factory`; only analytic_cost ships one.
template <class Cost>
concept has_cost_factory = requires(const dcp::transformer_spec& m, const dcp::device_spec& d) {
  { dcp::cost_factory<Cost>::make(m, d, 8) } -> std::same_as<Cost>;
};
static_assert(has_cost_factory<dcp::analytic_cost>);
static_assert(!has_cost_factory<cost_look_alike<dcp::cost_model_tag>>);

// ---- the policy bundle -------------------------------------------------------------------------
template <class Bundle, class Slot>
using at = typename Bundle::template at<Slot>;

// Defaults per slot (DESIGN section 2).
using defaults = dcp::default_policies;
static_assert(std::is_same_v<defaults, dcp::policies<>>);
static_assert(std::is_same_v<at<defaults, dcp::slot::cost>, dcp::analytic_cost>);
static_assert(std::is_same_v<at<defaults, dcp::slot::bucketing>, dcp::geometric_bucketing>);
static_assert(std::is_same_v<at<defaults, dcp::slot::groups>, dcp::buddy_groups>);
static_assert(std::is_same_v<at<defaults, dcp::slot::recompute>, dcp::selective_recompute>);
static_assert(std::is_same_v<at<defaults, dcp::slot::planner>, dcp::dcp_planner>);
static_assert(defaults::valid);

// One override changes its slot and nothing else, by tag or by explicit slot.
using one = dcp::policies<dcp::no_recompute>;
static_assert(std::is_same_v<at<one, dcp::slot::recompute>, dcp::no_recompute>);
static_assert(std::is_same_v<at<one, dcp::slot::cost>, dcp::analytic_cost>);
static_assert(std::is_same_v<at<one, dcp::slot::bucketing>, dcp::geometric_bucketing>);
static_assert(std::is_same_v<at<one, dcp::slot::groups>, dcp::buddy_groups>);
static_assert(std::is_same_v<at<one, dcp::slot::planner>, dcp::dcp_planner>);
using one_explicit = dcp::policies<dcp::use<dcp::slot::recompute, dcp::no_recompute>>;
static_assert(std::is_same_v<at<one_explicit, dcp::slot::recompute>, dcp::no_recompute>);

// Overrides in any order give the same slots.
using ab = dcp::policies<dcp::quantile_bucketing, dcp::full_recompute, dcp::packed_planner>;
using ba = dcp::policies<dcp::packed_planner, dcp::use<dcp::slot::recompute, dcp::full_recompute>,
                         dcp::quantile_bucketing>;
template <class Slot>
constexpr bool same_slot = std::is_same_v<at<ab, Slot>, at<ba, Slot>>;
static_assert(same_slot<dcp::slot::cost> && same_slot<dcp::slot::bucketing> && same_slot<dcp::slot::groups> &&
              same_slot<dcp::slot::recompute> && same_slot<dcp::slot::planner>);
static_assert(std::is_same_v<at<ab, dcp::slot::planner>, dcp::packed_planner>);

// The later of two overrides of one slot wins.
using twice = dcp::policies<dcp::no_recompute, dcp::full_recompute>;
static_assert(std::is_same_v<at<twice, dcp::slot::recompute>, dcp::full_recompute>);

// Values: one per slot, reachable by slot; the scheduler exposes the types it composed.
static_assert(std::is_same_v<decltype(std::declval<one&>().get<dcp::slot::recompute>()), dcp::no_recompute&>);
static_assert(std::is_same_v<decltype(std::declval<const one&>().get<dcp::slot::planner>()), const dcp::dcp_planner&>);
using sched = dcp::scheduler<dcp::transformer_spec, dcp::local_comm, one>;
static_assert(std::is_same_v<sched::cost_type, dcp::analytic_cost>);
static_assert(std::is_same_v<sched::groups_type, dcp::buddy_groups>);
static_assert(std::is_same_v<sched::policies_type, one>);
static_assert(std::is_same_v<decltype(std::declval<sched&>().steps_for(std::declval<const dcp::plan&>())),
                             std::vector<dcp::micro_step<dcp::local_comm>>>);
static_assert(std::is_same_v<decltype(std::declval<dcp::micro_step<dcp::local_comm>&>().comm()), dcp::local_comm&>);

// Optional members are named refinements; the shipped models that have them model them.
static_assert(dcp::validated_cost_model<dcp::analytic_cost> && dcp::token_limited_cost_model<dcp::analytic_cost>);
static_assert(dcp::loss_weighting_planner<dcp::dcp_planner> && dcp::skipping_planner<dcp::dcp_planner>);
static_assert(dcp::loss_weighting_planner<dcp::bucket_planner> && dcp::skipping_planner<dcp::packed_planner>);
// dcp::tune chooses the static baselines' knobs and the dcp planner's pipeline knobs.
static_assert(dcp::tunable_planner<dcp::bucket_planner, dcp::analytic_cost> &&
              dcp::tunable_planner<dcp::packed_planner, dcp::analytic_cost> &&
              dcp::tunable_planner<dcp::dynamic_cp_planner, dcp::analytic_cost> &&
              dcp::tunable_planner<dcp::dcp_planner, dcp::analytic_cost>);
// On a cost model alone the dcp planner's own overload (its default context) is chosen, unambiguously.
static_assert(std::is_same_v<decltype(dcp::tune(dcp::dcp_planner{}, std::declval<const dcp::analytic_cost&>(),
                                                std::span<const dcp::sequence>{})),
                             dcp::dcp_planner>);

// Concepts of one axis are checked against the archetypes of the others: every shipped planner
// and recompute policy takes any cost model, not only the analytic one.
static_assert(dcp::cost_model<dcp::detail::cost_model_archetype>);
static_assert(dcp::recompute_policy_chooses<dcp::no_recompute> && dcp::recompute_policy_chooses<dcp::full_recompute>);
static_assert(dcp::planner_plans<dcp::dcp_planner> && dcp::planner_plans<dcp::dynamic_cp_planner>);

// A foreign type that cannot gain a tag member opts in through the traits instead, and is then a
// model of its axis (and of none other) and a bare override of its slot.
namespace foreign {
struct planner : planner_look_alike<void> {};
struct recompute : recompute_look_alike<void> {};
struct comm : comm_look_alike<void> {
  comm split(int, int);  // a communicator's split returns its own type
};
}  // namespace foreign

}  // namespace dcp_static_checks

template <>
struct dcp::policy_concept_of<dcp_static_checks::foreign::planner> {
  using type = dcp::planner_tag;
};
template <>
struct dcp::policy_concept_of<dcp_static_checks::foreign::recompute> {
  using type = dcp::recompute_policy_tag;
};
template <>
struct dcp::communicator_concept_of<dcp_static_checks::foreign::comm> {
  using type = dcp::communicator_tag;
};

namespace dcp_static_checks {

static_assert(models_only<foreign::planner>(dcp::planner<foreign::planner>));
static_assert(models_only<foreign::recompute>(dcp::recompute_policy<foreign::recompute>));
static_assert(models_only<foreign::comm>(dcp::communicator<foreign::comm>));
static_assert(std::is_same_v<at<dcp::policies<foreign::planner>, dcp::slot::planner>, foreign::planner>);
static_assert(std::is_same_v<at<dcp::policies<foreign::recompute>, dcp::slot::recompute>, foreign::recompute>);

}  // namespace dcp_static_checks

int main() {
  std::puts("dcp static checks: compiled");
  return 0;
}
