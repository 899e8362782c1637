# The one place where CUDA code generation is decided.
#
# The sm80 rule: every kernel is compiled from the compute_80 virtual
# architecture only, so an H100/H200 runs exactly the code an A100 would.
#   SPAR_CUDA_CODE=all   (default) sm_80, sm_86, sm_90 machine code + compute_80 PTX
#   SPAR_CUDA_CODE=sm80  sm_80 machine code only (CI: fastest compile)
#   SPAR_CUDA_CODE=sm90  sm_90 machine code only, still from compute_80 (H200 test runs)
set(SPAR_CUDA_CODE all CACHE STRING "CUDA code targets, all from compute_80 (all, sm80, sm90)")
set_property(CACHE SPAR_CUDA_CODE PROPERTY STRINGS all sm80 sm90)

set(SPAR_HAVE_CUDA OFF)
if(NOT SPAR_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(SPAR_HAVE_CUDA ON)
  elseif(SPAR_CUDA STREQUAL "ON")
    message(FATAL_ERROR "SPAR_CUDA=ON but no CUDA compiler was found")
  endif()
endif()

if(SPAR_HAVE_CUDA)
  # Architectures are set by the -gencode flags below, not by CMake.
  set(CMAKE_CUDA_ARCHITECTURES OFF)
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)  # CMake 3.25 knows no CUDA20 dialect for nvcc
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  if(SPAR_CUDA_CODE STREQUAL "all")
    set(SPAR_CUDA_GENCODE "-gencode arch=compute_80,code=[sm_80,sm_86,sm_90,compute_80]")
  elseif(SPAR_CUDA_CODE STREQUAL "sm80")
    set(SPAR_CUDA_GENCODE "-gencode arch=compute_80,code=sm_80")
  elseif(SPAR_CUDA_CODE STREQUAL "sm90")
    set(SPAR_CUDA_GENCODE "-gencode arch=compute_80,code=sm_90")
  else()
    message(FATAL_ERROR "SPAR_CUDA_CODE must be all, sm80 or sm90")
  endif()
  string(APPEND CMAKE_CUDA_FLAGS " ${SPAR_CUDA_GENCODE} --expt-relaxed-constexpr -Xcompiler=-Wall,-Wno-unused-parameter")
  message(STATUS "spar: CUDA ${CMAKE_CUDA_COMPILER_VERSION}, ${SPAR_CUDA_GENCODE}")
  # Why CUDA code is a separate set of libraries: see kernels/CMakeLists.txt.
  find_library(SPAR_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
else()
  message(STATUS "spar: CUDA part disabled (CPU-only tree)")
endif()
