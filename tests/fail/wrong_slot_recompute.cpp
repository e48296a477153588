// A planner named for slot 'recompute': the bundle rejects it with the readable message of slot 'recompute'.
// Twin: the same scheduler with a model of the slot's concept.
// dcp-expect-error: slot 'recompute' needs a model of dcp::recompute_policy
#include <type_traits>

#include <dcp/comm/local.hpp>
#include <dcp/recompute/full_recompute.hpp>
#include <dcp/scheduler.hpp>

#ifdef DCP_FAIL
using bundle = dcp::policies<dcp::use<dcp::slot::recompute, dcp::dcp_planner>>;
#else
using bundle = dcp::policies<dcp::use<dcp::slot::recompute, dcp::full_recompute>>;
static_assert(std::is_same_v<bundle::at<dcp::slot::recompute>, dcp::full_recompute>);
#endif

using sched = dcp::scheduler<dcp::transformer_spec, dcp::local_comm, bundle>;
static_assert(sizeof(sched) > 0);
