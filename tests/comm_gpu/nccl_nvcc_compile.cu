// <dcp/nccl.hpp> compiles under nvcc, every member template instantiated (built, not run).
#include <dcp/comm/local.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/nccl.hpp>
#include <dcp/scheduler.hpp>

template void dcp::nccl_comm::all_to_all<float>(std::span<const float>, std::span<float>);
template void dcp::nccl_comm::all_to_all_v<int>(std::span<const int>, std::span<const std::size_t>, std::span<int>,
                                                std::span<const std::size_t>);
template void dcp::nccl_comm::all_gather<char>(std::span<const char>, std::span<char>);
template void dcp::nccl_comm::all_reduce<double>(std::span<const double>, std::span<double>, dcp::reduce_op);
template void dcp::nccl_comm::all_reduce<long>(std::span<long>, dcp::reduce_op);
template void dcp::nccl_comm::broadcast<unsigned>(std::span<unsigned>, int);
template void dcp::nccl_comm::send<char>(std::span<const char>, int, int);
template void dcp::nccl_comm::recv<char>(std::span<char>, int, int);

dcp::nccl_comm dcp_nccl_nvcc_init(dcp::local_comm& c) { return dcp::nccl_comm::init(c, c.rank()); }

// The scheduler on an NCCL world, with the calibration exchange over a host communicator.
template class dcp::scheduler<dcp::transformer_spec, dcp::nccl_comm>;
template dcp::plan dcp::scheduler<dcp::transformer_spec, dcp::nccl_comm>::plan<dcp::local_comm>(
    std::span<const dcp::sequence>, dcp::local_comm&) const;
