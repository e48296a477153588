// A user's own model type that opts into model_spec but has no `text_tokens`: the scheduler says
// which model_spec requirement is missing, instead of failing deep inside the cost model. Twin:
// the same type with the member, planned with the default analytic cost model (no conversion to
// transformer_spec needed).
// dcp-expect-error: dcp::scheduler: Model needs a model of dcp::model_spec; first unmet requirement: model_spec_attention
#include <cstdint>
#include <type_traits>

#include <dcp/comm/local.hpp>
#include <dcp/scheduler.hpp>

struct my_model {
  using policy_concept = dcp::model_spec_tag;
  int blocks = 24;
  std::int64_t hidden = 2048;
  int heads = 16;
  std::int64_t mlp_width = 8192;
  int mlp_matrices = 2;
  dcp::attention_kind attention = dcp::attention_kind::causal;
#ifndef DCP_FAIL
  std::int64_t text_tokens = 0;
#endif
  double block_parameters() const noexcept { return 4.0 * hidden * hidden + mlp_matrices * double(hidden) * mlp_width; }
  double parameters() const noexcept { return blocks * block_parameters(); }
};

using sched = dcp::scheduler<my_model, dcp::local_comm>;
static_assert(sizeof(sched) > 0);
#ifndef DCP_FAIL
static_assert(dcp::model_spec<my_model>);
static_assert(dcp::buildable_cost<sched::cost_type, my_model>);
static_assert(std::is_constructible_v<sched, my_model, dcp::local_comm&>);
#endif
