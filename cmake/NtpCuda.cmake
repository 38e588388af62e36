# CUDA is optional: the project builds and passes its tests without it. When a
# toolkit is found (nvcc on PATH or in /usr/local/cuda), NTP_HAVE_CUDA is set and
# the NCCL / CUDA code is compiled; its tests skip at run time without a GPU.
set(NTP_HAVE_CUDA OFF)
if(NTP_WITH_CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit QUIET)
    find_library(NTP_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
    find_path(NTP_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
    if(CUDAToolkit_FOUND AND NTP_NCCL_LIBRARY AND NTP_NCCL_INCLUDE)
      set(NTP_HAVE_CUDA ON)
      # sm_90 machine code for the H100 / H200 this project targets, and its
      # PTX, which the driver compiles for newer GPUs.
      if(NOT CMAKE_CUDA_ARCHITECTURES)
        set(CMAKE_CUDA_ARCHITECTURES "90-real;90-virtual")
      endif()
      enable_language(CUDA)
    endif()
  endif()
endif()
message(STATUS "ntp: CUDA/NCCL support: ${NTP_HAVE_CUDA}")
