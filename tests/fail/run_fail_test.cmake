# Runs one diagnostic of tests/fail (see CMakeLists.txt there).
#   -DCXX=<compiler> -DFLAGS_FILE=<response file> -DSOURCE=<file.cpp> -DMODE=fail|twin [-DEXPECT=<regex>]
#   [-DPRELUDE=<header>]  (included first; GCC reads its precompiled <header>.gch when there is one)
# fail: prints the compiler's output; prints "dcp-fail-test: UNEXPECTED ..." (which fails the test
#       through FAIL_REGULAR_EXPRESSION) when it compiled, or when its first error is not EXPECT.
# twin: exits non-zero unless the source compiles.
foreach(_var CXX FLAGS_FILE SOURCE MODE)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "run_fail_test.cmake: -D${_var}=... is required")
  endif()
endforeach()

set(_args "@${FLAGS_FILE}" -fsyntax-only)
if(DEFINED PRELUDE)
  list(APPEND _args -Winvalid-pch -include "${PRELUDE}")
endif()
if(MODE STREQUAL "fail")
  list(APPEND _args -DDCP_FAIL=1)
endif()
execute_process(COMMAND "${CXX}" ${_args} "${SOURCE}" RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
message("${_out}")

if(MODE STREQUAL "twin")
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "dcp-fail-test: the twin of ${SOURCE} must compile (exit code ${_rc})")
  endif()
  message("dcp-fail-test: twin compiled")
  return()
endif()

if(_rc EQUAL 0)
  message("dcp-fail-test: UNEXPECTED success: ${SOURCE} compiled with -DDCP_FAIL=1 but must not")
  return()
endif()
# The readable message must be the first error a user reads, not buried under a cascade.
string(REGEX MATCH "[^\n]*: (fatal )?error: [^\n]*" _first "${_out}")
if(NOT _first MATCHES "${EXPECT}")
  message("dcp-fail-test: UNEXPECTED first error (the expected message is not the first one):\n  ${_first}")
endif()
