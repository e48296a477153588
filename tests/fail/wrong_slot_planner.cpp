// A cost model named for slot 'planner': the bundle rejects it with the readable message of slot 'planner'.
// Twin: the same scheduler with a model of the slot's concept.
// dcp-expect-error: slot 'planner' needs a model of dcp::planner
#include <type_traits>

#include <dcp/comm/local.hpp>
#include <dcp/scheduler.hpp>

#ifdef DCP_FAIL
using bundle = dcp::policies<dcp::use<dcp::slot::planner, dcp::analytic_cost>>;
#else
using bundle = dcp::policies<dcp::use<dcp::slot::planner, dcp::dcp_planner>>;
static_assert(std::is_same_v<bundle::at<dcp::slot::planner>, dcp::dcp_planner>);
#endif

using sched = dcp::scheduler<dcp::transformer_spec, dcp::local_comm, bundle>;
static_assert(sizeof(sched) > 0);
