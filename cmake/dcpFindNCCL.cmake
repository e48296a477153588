# Finds NCCL next to the CUDA toolkit (or under NCCL_ROOT) and defines the imported target
# NCCL::nccl, unless the project already has one. Used by dcp's own build and by dcpConfig.cmake.
# Needs find_package(CUDAToolkit) first.
if(TARGET NCCL::nccl)
  return()
endif()
find_library(DCP_NCCL_LIBRARY NAMES nccl
             HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}
             PATH_SUFFIXES lib lib64)
find_path(DCP_NCCL_INCLUDE_DIR NAMES nccl.h
          HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}
          PATH_SUFFIXES include)
mark_as_advanced(DCP_NCCL_LIBRARY DCP_NCCL_INCLUDE_DIR)
if(DCP_NCCL_LIBRARY AND DCP_NCCL_INCLUDE_DIR)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION "${DCP_NCCL_LIBRARY}"
                                              INTERFACE_INCLUDE_DIRECTORIES "${DCP_NCCL_INCLUDE_DIR}")
endif()
