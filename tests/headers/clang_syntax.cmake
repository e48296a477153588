# cmake -DCLANGXX=<path or empty> -DFLAGS=<-I...> -DSOURCE=<file> -P clang_syntax.cmake
# Prints "SKIPPED: clang++ not found" (ctest reports the test as skipped) when there is none.
if(NOT CLANGXX)
  message("SKIPPED: clang++ not found; install clang to run this check")
  return()
endif()
execute_process(COMMAND "${CLANGXX}" -std=c++20 -fsyntax-only -Wall -Wextra -Wundef -Werror=undef ${FLAGS} "${SOURCE}"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${CLANGXX} failed on <dcp/dcp.hpp> (exit ${rc})")
endif()
message("${CLANGXX}: <dcp/dcp.hpp> compiles")
