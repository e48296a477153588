// A group manager named for slot 'bucketing': the bundle rejects it with the readable message of slot 'bucketing'.
// Twin: the same scheduler with a model of the slot's concept.
// dcp-expect-error: slot 'bucketing' needs a model of dcp::bucketing
#include <type_traits>

#include <dcp/comm/local.hpp>
#include <dcp/bucketing/quantile_bucketing.hpp>
#include <dcp/scheduler.hpp>

#ifdef DCP_FAIL
using bundle = dcp::policies<dcp::use<dcp::slot::bucketing, dcp::buddy_groups>>;
#else
using bundle = dcp::policies<dcp::use<dcp::slot::bucketing, dcp::quantile_bucketing>>;
static_assert(std::is_same_v<bundle::at<dcp::slot::bucketing>, dcp::quantile_bucketing>);
#endif

using sched = dcp::scheduler<dcp::transformer_spec, dcp::local_comm, bundle>;
static_assert(sizeof(sched) > 0);
