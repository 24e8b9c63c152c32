# cmake/DualcastJax.cmake: dualcast kernels as XLA FFI handlers for JAX
# (dualcast/interop/xla_ffi.hpp).
#
#   dualcast_add_jax_kernels(<target> SOURCES a.cpp [b.cu ...] [NATIVE ON|OFF])
#
# builds <target> as a plain shared library (no Python extension module: dualcast.jax loads it
# with ctypes and registers its handlers with jax.ffi.register_ffi_target) from sources that use
# DUALCAST_XLA_KERNEL. The XLA FFI headers are jaxlib's own: the directory
# `python -c "import jax; print(jax.ffi.include_dir())"` prints, asked of DUALCAST_JAX_PYTHON (the
# interpreter JAX is installed for; default Python3_EXECUTABLE -- a separate variable because
# jax wants numpy 2 and Debian's torch numpy 1, so one program may use two interpreters), or
# DUALCAST_JAX_INCLUDE_DIR (a CMake or
# environment variable: for builds in an isolated environment without JAX, such as pip's build
# isolation). Without JAX the target is not defined,
# DUALCAST_JAX_FOUND is FALSE and a message says why. .cu sources (the CUDA handlers, on XLA's
# stream) need the CUDA language enabled. NATIVE (default ON) compiles with -march=native: the
# kernels' speed depends on the SIMD width (README, "Compile flags decide the speed"); the library
# then runs only on machines with the builder's instruction set. The library records the XLA FFI
# API version it was compiled against; dualcast.jax checks it against the running jaxlib's.
include_guard(GLOBAL)

# The interpreter JAX is installed for: DUALCAST_JAX_PYTHON, else Python3_EXECUTABLE (found if
# not set).
function(dualcast_jax_python out)
  if(DUALCAST_JAX_PYTHON)
    set(${out} "${DUALCAST_JAX_PYTHON}" PARENT_SCOPE)
    return()
  endif()
  if(NOT Python3_EXECUTABLE)
    find_package(Python3 COMPONENTS Interpreter QUIET)
  endif()
  set(${out} "${Python3_EXECUTABLE}" PARENT_SCOPE)
endfunction()

function(_dualcast_jax_include_dir out)
  if(NOT DEFINED DUALCAST_JAX_INCLUDE_DIR AND DEFINED ENV{DUALCAST_JAX_INCLUDE_DIR})
    set(DUALCAST_JAX_INCLUDE_DIR "$ENV{DUALCAST_JAX_INCLUDE_DIR}")
  endif()
  if(DEFINED DUALCAST_JAX_INCLUDE_DIR AND EXISTS "${DUALCAST_JAX_INCLUDE_DIR}/xla/ffi/api/ffi.h")
    set(${out} "${DUALCAST_JAX_INCLUDE_DIR}" PARENT_SCOPE)
    return()
  endif()
  dualcast_jax_python(py)
  if(NOT py)
    set(${out} "" PARENT_SCOPE)
    set(DUALCAST_JAX_WHY "no Python 3 interpreter found" PARENT_SCOPE)
    return()
  endif()
  execute_process(
    COMMAND "${py}" -c "import jax; print(jax.ffi.include_dir())"
    OUTPUT_VARIABLE dir ERROR_VARIABLE err RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0 OR NOT EXISTS "${dir}/xla/ffi/api/ffi.h")
    set(${out} "" PARENT_SCOPE)
    set(DUALCAST_JAX_WHY "${py} cannot import jax (or its jaxlib has no FFI headers)"
      PARENT_SCOPE)
    return()
  endif()
  set(DUALCAST_JAX_INCLUDE_DIR "${dir}" CACHE PATH "jaxlib's XLA FFI headers (jax.ffi.include_dir())")
  set(${out} "${dir}" PARENT_SCOPE)
endfunction()

function(dualcast_add_jax_kernels target)
  cmake_parse_arguments(ARG "" "NATIVE" "SOURCES" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "dualcast_add_jax_kernels(${target}): give SOURCES")
  endif()
  if(NOT DEFINED ARG_NATIVE)
    set(ARG_NATIVE ON)
  endif()
  _dualcast_jax_include_dir(inc)
  if(NOT inc)
    message(STATUS "dualcast: JAX kernels ${target} not built: ${DUALCAST_JAX_WHY}")
    set(DUALCAST_JAX_FOUND FALSE PARENT_SCOPE)
    return()
  endif()
  set(DUALCAST_JAX_FOUND TRUE PARENT_SCOPE)
  add_library(${target} SHARED ${ARG_SOURCES})
  if(TARGET dualcast::dualcast)
    target_link_libraries(${target} PRIVATE dualcast::dualcast)
  else()
    find_package(dualcast CONFIG REQUIRED)
    target_link_libraries(${target} PRIVATE dualcast::dualcast)
  endif()
  # SYSTEM: XLA's header has warnings of its own.
  target_include_directories(${target} SYSTEM PRIVATE "${inc}")
  target_compile_features(${target} PRIVATE cxx_std_20)
  find_package(OpenMP COMPONENTS CXX QUIET)
  if(OpenMP_CXX_FOUND)
    target_link_libraries(${target} PRIVATE OpenMP::OpenMP_CXX)
  endif()
  if(ARG_NATIVE AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-march=native>")
    # (g++: the vectoriser at 256 bits, as for the torch cells: DualcastPython.cmake says why)
    target_compile_options(${target} PRIVATE
      "$<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-mprefer-vector-width=256>")
  endif()
  # Only the handlers, the manifest and the reference entries are exported (they say so
  # themselves); every other symbol stays inside the library, so two kernel libraries loaded into
  # one process never share dualcast's inline functions or their static data.
  set_target_properties(${target} PROPERTIES
    PREFIX "" POSITION_INDEPENDENT_CODE ON
    CXX_VISIBILITY_PRESET hidden CUDA_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  get_target_property(srcs ${target} SOURCES)
  if(srcs MATCHES "\\.cu(;|$)")
    # -std=c++20 by hand: CMake 3.25 knows no C++20 flag for nvcc (as cmake/dualcastInternal.cmake)
    target_compile_options(${target} PRIVATE
      "$<$<COMPILE_LANGUAGE:CUDA>:-std=c++20;--expt-relaxed-constexpr;--extended-lambda>")
    find_package(CUDAToolkit REQUIRED)
    target_link_libraries(${target} PRIVATE CUDA::cudart)
  endif()
endfunction()
