// A recompute policy named for slot 'cost': the bundle rejects it with the readable message of slot 'cost'.
// Twin: the same scheduler with a model of the slot's concept.
// dcp-expect-error: slot 'cost' needs a model of dcp::cost_model
#include <type_traits>

#include <dcp/comm/local.hpp>
#include <dcp/scheduler.hpp>

#ifdef DCP_FAIL
using bundle = dcp::policies<dcp::use<dcp::slot::cost, dcp::selective_recompute>>;
#else
using bundle = dcp::policies<dcp::use<dcp::slot::cost, dcp::analytic_cost>>;
static_assert(std::is_same_v<bundle::at<dcp::slot::cost>, dcp::analytic_cost>);
#endif

using sched = dcp::scheduler<dcp::transformer_spec, dcp::local_comm, bundle>;
static_assert(sizeof(sched) > 0);
