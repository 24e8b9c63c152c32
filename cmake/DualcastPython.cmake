# dualcast kernels as operations of PyTorch (and JAX): a user's kernels built into a library that
# dualcast.torch.load_library (python/dualcast/torch.py) loads.
#
#   find_package(dualcast CONFIG REQUIRED)        # (or add_subdirectory of a dualcast checkout)
#   dualcast_add_python_kernels(my_kernels FRAMEWORK torch SOURCES my_kernels.cpp)
#
# my_kernels.cpp includes <dualcast/interop/torch.hpp> and registers each kernel with
# DUALCAST_TORCH_KERNEL; a .cu source (optional) registers their CUDA half with
# DUALCAST_TORCH_CUDA_KERNEL (<dualcast/interop/torch_cuda.cuh>, no torch headers). The target is a shared module (no "lib" prefix); in Python:
#   ops = dualcast.torch.load_library("path/to/my_kernels.so"); ops.my_kernel(x, y)
#
# FRAMEWORK torch: PyTorch's headers and libraries come from the Python interpreter that has
# torch (Python3_EXECUTABLE, else the first python3 on PATH that imports torch): its
# torch.utils.cpp_extension include and library paths and its C++ ABI flag. Sources ending in .cu
# are compiled by nvcc (CUDA language enabled by the caller, for CMAKE_CUDA_ARCHITECTURES) and
# need a torch built with CUDA; the host sources then get DUALCAST_TORCH_CUDA (torch's current
# stream, the CUDA calls' table).
# FRAMEWORK jax: dualcast_add_jax_kernels(<target> SOURCES ...) of DualcastJax.cmake (next to this
# file, when installed).
#
# Options: NATIVE (default ON) compiles with -march=native: the library is built on the machine
# that runs it (pip install from source), and the kernels' SIMD batches are then as wide as the CPU
# allows. Sets DUALCAST_TORCH_FOUND in the caller's scope (whether torch was found; the target is
# not created otherwise, unless REQUIRED is given, which then fails).
include_guard(GLOBAL)

include("${CMAKE_CURRENT_LIST_DIR}/DualcastJax.cmake" OPTIONAL)

# Asks Python for torch's build settings once; caches them.
function(_dualcast_find_torch)
  if(DEFINED CACHE{DUALCAST_TORCH_INCLUDE_DIRS})
    return()
  endif()
  set(candidates ${Python3_EXECUTABLE} ${DUALCAST_PYTHON})
  if(NOT candidates)
    find_program(_dualcast_py3 NAMES python3 python)
    set(candidates ${_dualcast_py3})
    if(EXISTS /usr/bin/python3)
      list(APPEND candidates /usr/bin/python3) # Debian's python3-torch lives there
    endif()
  endif()
  if(DEFINED CACHE{_DUALCAST_TORCH_TRIED} AND "$CACHE{_DUALCAST_TORCH_TRIED}" STREQUAL
     "${candidates}")
    return() # (said once: these interpreters have no torch)
  endif()
  foreach(py IN LISTS candidates)
    # One line per field; lists joined with "|" (CMake's ";" would split the lines' list).
    execute_process(
      COMMAND "${py}" -c [[
import torch, torch.utils.cpp_extension as c
print("|".join(c.include_paths()))
print("|".join(c.library_paths()))
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(torch.__version__)
print(torch.version.cuda or "none")
]]
      RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(rc EQUAL 0)
      string(REPLACE "\n" ";" fields "${out}")
      list(GET fields 0 inc)
      list(GET fields 1 lib)
      list(GET fields 2 abi)
      list(GET fields 3 version)
      list(GET fields 4 cuda)
      string(REPLACE "|" ";" inc "${inc}")
      string(REPLACE "|" ";" lib "${lib}")
      set(DUALCAST_TORCH_PYTHON "${py}" CACHE FILEPATH "The Python interpreter that has torch")
      set(DUALCAST_TORCH_INCLUDE_DIRS "${inc}" CACHE INTERNAL "")
      set(DUALCAST_TORCH_LIBRARY_DIRS "${lib}" CACHE INTERNAL "")
      set(DUALCAST_TORCH_CXX11_ABI "${abi}" CACHE INTERNAL "")
      set(DUALCAST_TORCH_VERSION "${version}" CACHE INTERNAL "")
      set(DUALCAST_TORCH_CUDA "${cuda}" CACHE INTERNAL "")
      message(STATUS "dualcast: torch ${version} (CUDA: ${cuda}) from ${py}")
      return()
    endif()
  endforeach()
  set(_DUALCAST_TORCH_TRIED "${candidates}" CACHE INTERNAL "")
  message(STATUS "dualcast: no Python with torch found (tried: ${candidates}); "
    "set Python3_EXECUTABLE to one")
endfunction()

# Enables CUDA where the torch operators get their CUDA half -- a torch built with CUDA, nvcc
# found, DUALCAST_TORCH_CUDA_KERNELS not OFF -- and sets DUALCAST_TORCH_CUDA_ENABLED (TRUE /
# FALSE) in the caller's scope. A macro: a language enabled inside a function or a subdirectory
# does not reach the directory whose targets compile the .cu sources (tests/python calls it
# before adding python/, whose own call then finds CUDA enabled).
macro(_dualcast_enable_torch_cuda)
  _dualcast_find_torch()
  set(DUALCAST_TORCH_CUDA_ENABLED FALSE)
  if((NOT DEFINED DUALCAST_TORCH_CUDA_KERNELS OR DUALCAST_TORCH_CUDA_KERNELS) AND
     DEFINED CACHE{DUALCAST_TORCH_CUDA} AND NOT DUALCAST_TORCH_CUDA STREQUAL "none")
    include(CheckLanguage)
    check_language(CUDA)
    if(CMAKE_CUDA_COMPILER)
      if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
        set(CMAKE_CUDA_ARCHITECTURES "80;90") # A100, H100 / H200
      endif()
      enable_language(CUDA)
      set(DUALCAST_TORCH_CUDA_ENABLED TRUE)
    endif()
  endif()
endmacro()

function(dualcast_add_python_kernels target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "REQUIRED" "FRAMEWORK;NATIVE" "SOURCES")
  if(NOT arg_SOURCES)
    message(FATAL_ERROR "dualcast_add_python_kernels: SOURCES are required")
  endif()
  if(arg_FRAMEWORK STREQUAL "jax")
    if(NOT COMMAND dualcast_add_jax_kernels)
      message(FATAL_ERROR "dualcast_add_python_kernels: FRAMEWORK jax needs DualcastJax.cmake "
        "next to DualcastPython.cmake")
    endif()
    dualcast_add_jax_kernels(${target} SOURCES ${arg_SOURCES})
    return()
  elseif(NOT arg_FRAMEWORK STREQUAL "torch")
    message(FATAL_ERROR "dualcast_add_python_kernels: FRAMEWORK must be torch or jax "
      "(got '${arg_FRAMEWORK}')")
  endif()

  _dualcast_find_torch()
  if(NOT DEFINED CACHE{DUALCAST_TORCH_INCLUDE_DIRS})
    set(DUALCAST_TORCH_FOUND OFF PARENT_SCOPE)
    if(arg_REQUIRED)
      message(FATAL_ERROR "dualcast_add_python_kernels(${target}): torch not found")
    endif()
    return()
  endif()
  set(DUALCAST_TORCH_FOUND ON PARENT_SCOPE)

  add_library(${target} MODULE ${arg_SOURCES})
  set_target_properties(${target} PROPERTIES PREFIX "" CXX_VISIBILITY_PRESET hidden
    CUDA_VISIBILITY_PRESET hidden)
  if(TARGET dualcast::dualcast)
    target_link_libraries(${target} PRIVATE dualcast::dualcast)
  else()
    target_link_libraries(${target} PRIVATE dualcast)
  endif()
  target_compile_features(${target} PRIVATE cxx_std_20)
  # torch's headers as system headers: our warnings flags are not for them.
  target_include_directories(${target} SYSTEM PRIVATE ${DUALCAST_TORCH_INCLUDE_DIRS})
  target_compile_definitions(${target} PRIVATE
    _GLIBCXX_USE_CXX11_ABI=${DUALCAST_TORCH_CXX11_ABI} DUALCAST_NO_SIMD_WARNING)
  set(libs c10 torch_cpu torch)
  set(has_cu OFF)
  foreach(src IN LISTS arg_SOURCES)
    if(src MATCHES "\\.cu$")
      set(has_cu ON)
    endif()
  endforeach()
  if(has_cu)
    if(DUALCAST_TORCH_CUDA STREQUAL "none")
      message(FATAL_ERROR "dualcast_add_python_kernels(${target}): .cu sources need a torch "
        "built with CUDA (this one: ${DUALCAST_TORCH_VERSION}, no CUDA)")
    endif()
    list(APPEND libs c10_cuda torch_cuda)
    find_package(CUDAToolkit REQUIRED)
    target_link_libraries(${target} PRIVATE CUDA::cudart)
    target_include_directories(${target} SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
    target_compile_definitions(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:DUALCAST_TORCH_CUDA>")
    # (-std=c++20 by hand: CMake 3.25 knows no CUDA20 flag for nvcc)
    target_compile_options(${target} PRIVATE
      "$<$<COMPILE_LANGUAGE:CUDA>:-std=c++20;--expt-relaxed-constexpr;--extended-lambda>")
  endif()
  foreach(l IN LISTS libs)
    find_library(_dualcast_torch_${l} ${l} PATHS ${DUALCAST_TORCH_LIBRARY_DIRS} NO_DEFAULT_PATH)
    if(NOT _dualcast_torch_${l})
      message(FATAL_ERROR "dualcast_add_python_kernels: lib${l} not found in "
        "${DUALCAST_TORCH_LIBRARY_DIRS}")
    endif()
    target_link_libraries(${target} PRIVATE "${_dualcast_torch_${l}}")
  endforeach()
  if(TARGET OpenMP::OpenMP_CXX)
    target_link_libraries(${target} PRIVATE OpenMP::OpenMP_CXX)
  endif()
  if(NOT DEFINED arg_NATIVE OR arg_NATIVE)
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-march=native>")
    # g++: the compiler's own vectoriser at 256 bits (dualcast's kernels pick their SIMD width
    # themselves). g++ 12.2 crashes (an internal compiler error in the SLP vectoriser) on the
    # torch cells at -O3 where -march=native enables AVX-512 and prefers 512-bit vectors (an AMD
    # Zen 4, 2026-12-06); Intel CPUs prefer 256 bits already.
    target_compile_options(${target} PRIVATE
      "$<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-mprefer-vector-width=256>")
  endif()
endfunction()
