# Runs one dcp-sim command line and checks its exit status and output.
#   -DEXE=<dcp-sim> -DARGS=<arguments separated by '|'> -DEXPECT=fail|pass -DREGEX=<regex over stdout+stderr>
#   [-DWORKDIR=<directory to run in>]
string(REPLACE "|" ";" _args "${ARGS}")
if(NOT WORKDIR)
  set(WORKDIR ".")
endif()
execute_process(COMMAND "${EXE}" ${_args} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err
                WORKING_DIRECTORY "${WORKDIR}")
set(_all "${_out}${_err}")
if(EXPECT STREQUAL "fail" AND _rc EQUAL 0)
  message(FATAL_ERROR "dcp-sim ${_args} exited 0 but should fail:\n${_all}")
elseif(EXPECT STREQUAL "pass" AND NOT _rc EQUAL 0)
  message(FATAL_ERROR "dcp-sim ${_args} exited ${_rc}:\n${_all}")
endif()
if(NOT _all MATCHES "${REGEX}")
  message(FATAL_ERROR "dcp-sim ${_args}: output does not match '${REGEX}':\n${_all}")
endif()
message(STATUS "dcp-sim ${_args}: exit ${_rc}, output matches '${REGEX}'")
