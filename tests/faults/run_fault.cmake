# Runs one fault-injection MPI job and decides whether the fault was handled (see CMakeLists.txt).
#   -DMPIEXEC -DNP_FLAG -DNP -DPREFLAGS (;-list) -DEXE -DSCENARIO -DTIMEOUT_MS -DJOB_LIMIT (s)
#   -DEXPECT=fail|pass -DREPORTERS=<comma-separated ranks> -DREGEX=<what each report says; @R@ = rank>
#   [-DKEEP_SURVIVORS=ON]: the scenario kills a rank; tell Open MPI not to kill the others for it
# Passes only when all of these hold:
#   1. the job ended by itself within JOB_LIMIT seconds (a hang fails, it never passes);
#   2. its exit status is non-zero for EXPECT=fail and zero for EXPECT=pass;
#   3. every rank in REPORTERS printed its report line "dcp-fault: rank R ..." matching REGEX
#      (for faults: a dcp::error of the expected condition, within the communicator timeout);
#   4. no rank printed "LATE" or "unexpected failure".
set(_mpi_flags)
execute_process(COMMAND "${MPIEXEC}" --version OUTPUT_VARIABLE _version ERROR_QUIET)
if(_version MATCHES "Open MPI|OpenRTE")
  # Open MPI's own time limit kills every rank and says so; it fires before ours, so no rank
  # outlives the test.
  list(APPEND _mpi_flags --timeout ${JOB_LIMIT})
  if(KEEP_SURVIVORS)
    # By default mpirun kills every rank the moment one exits with a non-zero status: the survivors
    # would die long before their communicator timeout, which ends the job but shows nothing about
    # dcp. With this, mpirun leaves them running: they must notice the loss through mpi_comm's
    # timeout, report it and end the job themselves (abort_job = MPI_Abort, non-zero exit).
    # (orte_enable_recovery would keep them too, but then mpirun exits 0 even after MPI_Abort.)
    list(APPEND _mpi_flags --mca orte_abort_on_non_zero_status 0)
  endif()
endif()
math(EXPR _outer "${JOB_LIMIT} + 10")
set(_cmd "${MPIEXEC}" ${NP_FLAG} ${NP} ${PREFLAGS} ${_mpi_flags} "${EXE}" ${SCENARIO} ${TIMEOUT_MS})
string(TIMESTAMP _t0 "%s")
execute_process(COMMAND ${_cmd} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err TIMEOUT ${_outer})
string(TIMESTAMP _t1 "%s")
math(EXPR _wall "${_t1} - ${_t0}")
set(_all "${_out}${_err}")
string(REPLACE ";" " " _shown "${_cmd}")
set(_ctx "${_shown}\n(exit ${_rc} after ${_wall} s)\n--- output ---\n${_all}")

if(NOT _rc MATCHES "^-?[0-9]+$" OR _all MATCHES "time limit for job execution has been reached")
  message(FATAL_ERROR "HUNG: the job did not end within ${JOB_LIMIT} s\n${_ctx}")
endif()
if(EXPECT STREQUAL "fail" AND _rc EQUAL 0)
  message(FATAL_ERROR "the job exited 0 but a fault was injected; it must exit non-zero\n${_ctx}")
elseif(EXPECT STREQUAL "pass" AND NOT _rc EQUAL 0)
  message(FATAL_ERROR "the control job (no fault) failed\n${_ctx}")
endif()
if(_all MATCHES "dcp-fault: rank [0-9]+ [^\n]*(LATE|unexpected failure)")
  message(FATAL_ERROR "a rank reported late or failed unexpectedly: '${CMAKE_MATCH_0}'\n${_ctx}")
endif()
string(REPLACE "," ";" _ranks "${REPORTERS}")
foreach(_r IN LISTS _ranks)
  string(REPLACE "@R@" "${_r}" _re "${REGEX}")
  if(NOT _all MATCHES "dcp-fault: rank ${_r} [^\n]*${_re}")
    message(FATAL_ERROR "rank ${_r} printed no report matching 'dcp-fault: rank ${_r} ...${_re}'\n${_ctx}")
  endif()
endforeach()
message(STATUS "${SCENARIO}: exit ${_rc} after ${_wall} s; ranks ${REPORTERS} reported as expected")
