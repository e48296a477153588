#pragma once
/// \file
/// Opt-in umbrella for the MPI tier: everything in `<dcp/dcp.hpp>` plus `mpi_comm`
/// (`<dcp/comm/mpi.hpp>`) and `mpi_environment` (`<dcp/comm/mpi_environment.hpp>`). Link `dcp::mpi`; without MPI the backend is absent
/// and this header is the host umbrella alone.

#include <dcp/comm/mpi.hpp>
#include <dcp/comm/mpi_environment.hpp>
#include <dcp/dcp.hpp>
