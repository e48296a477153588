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
# The executable links dcp::dcp, GoogleTest and the private warning flags (dcp_warnings).
# Without MPI_RANKS every TEST() becomes its own ctest, named <target>.<Suite>.<Test>, discovered
# when ctest runs (DISCOVERY_MODE PRE_TEST, so building never runs test binaries). With
# MPI_RANKS the executable is one ctest under mpiexec, labelled `mpi`; when dcp::mpi is not
# available the test is not built and a status line says why. GTEST_SKIP() is reported by
# ctest as "Skipped" (for instance a `gpu` test on a machine without a device).
include_guard(GLOBAL)

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
  target_link_libraries(${arg_NAME} PRIVATE dcp::dcp ${_gtest} dcp_warnings ${arg_LIBRARIES})
  if(arg_MPI_RANKS)
    target_link_libraries(${arg_NAME} PRIVATE dcp::mpi)
  endif()

  set(_skip "\\[  SKIPPED \\]")
  if(arg_MPI_RANKS)
    set(_flags ${MPIEXEC_PREFLAGS})
    if(MPI_CXX_LIBRARY_VERSION_STRING MATCHES "Open MPI")
      list(APPEND _flags --oversubscribe)  # more ranks than cores is fine for correctness tests
    endif()
    add_test(NAME ${arg_NAME}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${arg_MPI_RANKS} ${_flags}
                     $<TARGET_FILE:${arg_NAME}> ${MPIEXEC_POSTFLAGS})
    list(APPEND arg_LABELS mpi)
    list(REMOVE_DUPLICATES arg_LABELS)
    set_tests_properties(${arg_NAME} PROPERTIES LABELS "${arg_LABELS}" TIMEOUT ${arg_TIMEOUT}
                                                PROCESSORS ${arg_MPI_RANKS} SKIP_REGULAR_EXPRESSION "${_skip}")
  else()
    gtest_discover_tests(${arg_NAME} TEST_PREFIX "${arg_NAME}." DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60
                         PROPERTIES LABELS "${arg_LABELS}" TIMEOUT ${arg_TIMEOUT}
                                    SKIP_REGULAR_EXPRESSION "${_skip}")
  endif()
endfunction()
