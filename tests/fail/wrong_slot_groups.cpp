// A bucketing policy named for slot 'groups': the bundle rejects it with the readable message of slot 'groups'.
// Twin: the same scheduler with a model of the slot's concept.
// dcp-expect-error: slot 'groups' needs a model of dcp::group_manager
#include <type_traits>

#include <dcp/comm/local.hpp>
#include <dcp/scheduler.hpp>

#ifdef DCP_FAIL
using bundle = dcp::policies<dcp::use<dcp::slot::groups, dcp::geometric_bucketing>>;
#else
using bundle = dcp::policies<dcp::use<dcp::slot::groups, dcp::buddy_groups>>;
static_assert(std::is_same_v<bundle::at<dcp::slot::groups>, dcp::buddy_groups>);
#endif

using sched = dcp::scheduler<dcp::transformer_spec, dcp::local_comm, bundle>;
static_assert(sizeof(sched) > 0);
