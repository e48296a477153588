# cmake -DBUILD_DIR=<dcp build> -DPREFIX=<dir> -P install_prefix.cmake
# A fresh install of the `dcp` component (headers and package files) into PREFIX.
file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}" --component dcp
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install ${BUILD_DIR} failed (exit ${rc})")
endif()
if(NOT EXISTS "${PREFIX}/include/dcp/dcp.hpp")
  message(FATAL_ERROR "install left no ${PREFIX}/include/dcp/dcp.hpp")
endif()
