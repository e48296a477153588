#pragma once
// `ready_for(p, where, batch)`: `p` as a test plans `batch` with it. A static baseline left
// untuned is tuned on the batch itself (`dcp::tune`: a planner never tunes itself); any other
// planner is returned as it is. `where` is a planning context or a cost model.

#include <span>

#include <dcp/sequence.hpp>
#include <dcp/workload/tuning.hpp>

namespace dcp_test {

template <class P, class Where>
P ready_for(const P& p, const Where& where, std::span<const dcp::sequence> batch) {
  if constexpr (requires { dcp::tune(p, where, batch); })
    return dcp::tune(p, where, batch);
  else
    return p;
}

}  // namespace dcp_test
