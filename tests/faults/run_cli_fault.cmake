# Runs one program under `mpirun -np 2` that must fail (see examples/cpu_train/CMakeLists.txt):
#   -DMPIEXEC -DNP_FLAG -DPREFLAGS (;-list) -DARGS (;-list: the program and its arguments)
#   -DREGEX (what its error must say) -DLIMIT (seconds)
# Passes only when the job ended by itself within LIMIT seconds (a hang fails), with a non-zero
# exit status, and its output matches REGEX.
set(_flags)
execute_process(COMMAND "${MPIEXEC}" --version OUTPUT_VARIABLE _version ERROR_QUIET)
if(_version MATCHES "Open MPI|OpenRTE")
  list(APPEND _flags --timeout ${LIMIT})  # Open MPI's own limit kills every rank and says so
endif()
math(EXPR _outer "${LIMIT} + 10")
string(TIMESTAMP _t0 "%s")
execute_process(COMMAND "${MPIEXEC}" ${NP_FLAG} 2 ${PREFLAGS} ${_flags} ${ARGS}
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err TIMEOUT ${_outer})
string(TIMESTAMP _t1 "%s")
math(EXPR _took "${_t1} - ${_t0}")
set(_all "${_out}${_err}")
if(_rc STREQUAL "Process terminated due to timeout" OR _took GREATER_EQUAL LIMIT OR _all MATCHES "time limit for job execution")
  message(FATAL_ERROR "HUNG: the job did not end within ${LIMIT} s (${_took} s, ${_rc}):\n${_all}")
endif()
if(_rc EQUAL 0)
  message(FATAL_ERROR "the job exited 0 on an error path:\n${_all}")
endif()
if(NOT _all MATCHES "${REGEX}")
  message(FATAL_ERROR "the output does not say '${REGEX}':\n${_all}")
endif()
message(STATUS "ended in ${_took} s with status ${_rc}: ${REGEX}")
