# dcp_add_test: one GoogleTest executable, registered with ctest.
#
#   dcp_add_test(NAME <target>
#                SOURCES <file>...
#                [LABELS <label>...]        # ctest labels: unit, mpi, gpu, thrust, static, ...
#                [LIBRARIES <target>...]    # extra link libraries (dcp::mpi, dcp::cuda, GTest::gmock)
#                [MPI_RANKS <n>]            # run the whole executable under mpiexec -n <n>
#                [TIMEOUT <seconds>]        # per test; default 120
#                [NO_MAIN])                 # link GTest::gtest instead of GTest::gtest_main
#
# The executable links dcp_own (dcp::compiled or dcp::dcp), GoogleTest, the shared test helpers (dcp_test_support) and the
# private warning flags (dcp_warnings).
# Without MPI_RANKS every TEST() becomes its own ctest, named <target>.<Suite>.<Test>, discovered
# when ctest runs (DISCOVERY_MODE PRE_TEST, so building never runs test binaries). With
# MPI_RANKS the executable is one ctest under mpiexec, labelled `mpi`; when dcp::mpi is not
# available the test is not built and a status line says why. GTEST_SKIP() is reported by
# ctest as "Skipped" (for instance a `gpu` test on a machine without a device).
include_guard(GLOBAL)

# Open MPI refuses more ranks than cores unless told; correctness tests may oversubscribe.
set(DCP_MPIEXEC_PREFLAGS ${MPIEXEC_PREFLAGS})
if(MPIEXEC_EXECUTABLE)
  execute_process(COMMAND "${MPIEXEC_EXECUTABLE}" --version OUTPUT_VARIABLE _dcp_mpiexec_version ERROR_QUIET)
  if(_dcp_mpiexec_version MATCHES "Open MPI|OpenRTE")
    list(APPEND DCP_MPIEXEC_PREFLAGS --oversubscribe)
  endif()
endif()

# Helpers every test area shares (tests/support/dcp_test/support.hpp): the seeded rng and
# EXPECT_DCP_ERROR. Header-only; dcp_add_test links it.
if(NOT TARGET dcp_test_support)
  add_library(dcp_test_support INTERFACE)
  target_include_directories(dcp_test_support INTERFACE "${CMAKE_CURRENT_LIST_DIR}/../tests/support")
  target_link_libraries(dcp_test_support INTERFACE dcp_own)
endif()

# Test executables are built at DCP_TEST_OPTIMIZATION (default -O1) in the optimised
# configurations instead of the build type's -O3: a test file compiles in about 35% less CPU time
# (g++ 12: tests/sim/sim_test.cpp 27.9 s at -O3, 17.3 s at -O1; plan_hash_test.cpp 8.1 s, 5.1 s),
# and the tests run for seconds. Debug keeps its -O0. The examples and benchmarks that ctest also runs keep the
# build type's flags, so the library's code is still tested as a release build compiles it.
# DCP_TEST_OPTIMIZATION_<target> sets one executable's flag instead (scripts/check-sanitizers
# builds the quick-running suites at -O0: under ASan a file then compiles in a third of the time).
set(DCP_TEST_OPTIMIZATION "-O1" CACHE STRING
    "Optimisation flag of dcp's test executables in Release/RelWithDebInfo/MinSizeRel builds (empty: the build type's)")
function(dcp_test_optimization target)
  set(_flag "${DCP_TEST_OPTIMIZATION}")
  if(DEFINED DCP_TEST_OPTIMIZATION_${target})
    set(_flag "${DCP_TEST_OPTIMIZATION_${target}}")
  endif()
  if(_flag)
    target_compile_options(${target} PRIVATE
      "$<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:Release,RelWithDebInfo,MinSizeRel>>:${_flag}>")
  endif()
endfunction()

# A test of several files is compiled as one (UNITY_BUILD): every file parses the same header-only
# library, so merging them saves most of that parse (DCP_TEST_UNITY=OFF compiles them apart).
option(DCP_TEST_UNITY "Compile each multi-file test executable as one translation unit" ON)

function(dcp_add_test)
  cmake_parse_arguments(PARSE_ARGV 0 arg "NO_MAIN" "NAME;MPI_RANKS;TIMEOUT" "SOURCES;LABELS;LIBRARIES")
  if(NOT arg_NAME OR NOT arg_SOURCES)
    message(FATAL_ERROR "dcp_add_test: NAME and SOURCES are required")
  endif()
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "dcp_add_test(${arg_NAME}): unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 120)
  endif()
  if(arg_MPI_RANKS AND NOT TARGET dcp::mpi)
    message(STATUS "dcp: test ${arg_NAME} skipped (needs dcp::mpi)")
    return()
  endif()

  add_executable(${arg_NAME} ${arg_SOURCES})
  if(arg_NO_MAIN)
    set(_gtest GTest::gtest)
  else()
    set(_gtest GTest::gtest_main)
  endif()
  target_link_libraries(${arg_NAME} PRIVATE dcp_own ${_gtest} dcp_test_support dcp_warnings ${arg_LIBRARIES})
  dcp_test_optimization(${arg_NAME})
  list(LENGTH arg_SOURCES _sources)
  if(DCP_TEST_UNITY AND _sources GREATER 1)
    set_target_properties(${arg_NAME} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 0)
  endif()
  if(arg_MPI_RANKS)
    target_link_libraries(${arg_NAME} PRIVATE dcp::mpi)
  endif()

  if(arg_MPI_RANKS)
    add_test(NAME ${arg_NAME}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${arg_MPI_RANKS} ${DCP_MPIEXEC_PREFLAGS}
                     $<TARGET_FILE:${arg_NAME}> ${MPIEXEC_POSTFLAGS})
    list(APPEND arg_LABELS mpi)
    list(REMOVE_DUPLICATES arg_LABELS)
    # Open MPI refuses to start as root without these (CI containers run as root).
    set_tests_properties(${arg_NAME} PROPERTIES LABELS "${arg_LABELS}" TIMEOUT ${arg_TIMEOUT}
                                                PROCESSORS ${arg_MPI_RANKS}
                                                ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
  else()
    gtest_discover_tests(${arg_NAME} TEST_PREFIX "${arg_NAME}." TEST_LIST ${arg_NAME}_TESTS
                         DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT ${arg_TIMEOUT})
    # gtest_discover_tests flattens list-valued properties, so several labels are set by a ctest
    # include file that runs after discovery, on the test names discovery left in <NAME>_TESTS.
    if(arg_LABELS)
      set(_labels_file "${CMAKE_CURRENT_BINARY_DIR}/${arg_NAME}_labels.cmake")
      file(CONFIGURE OUTPUT "${_labels_file}" CONTENT
           "if(@arg_NAME@_TESTS)\n  set_tests_properties(\${@arg_NAME@_TESTS} PROPERTIES LABELS \"@arg_LABELS@\")\nendif()\n"
           @ONLY)
      set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${_labels_file}")
    endif()
  endif()
endfunction()
