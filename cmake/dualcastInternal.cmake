# Helpers for dualcast's own targets (tests, examples, benchmarks).
# Not installed: nothing here affects the dualcast::dualcast interface target.

include_guard(GLOBAL)

# The optimisation of the test executables (dualcast_test_options): -O0 with g++, where the other
# compilers keep the build's own level (the sanitizer build is at -O0 already).
set(DUALCAST_TEST_OPT "$<$<CXX_COMPILER_ID:GNU>:-O0>")

# dualcast_target_options(<target>)
#   Warnings as errors for our own C++ code, -O2 in Release, and -march=native
#   when DUALCAST_NATIVE is ON. Applies to the CXX sources of <target> only.
function(dualcast_target_options target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "^(GNU|Clang|AppleClang)$")
    target_compile_options(${target} PRIVATE
      "$<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra;-Wpedantic;-Werror>")
    # Release builds of our tests and examples at -O2 (after CMake's -O3, so it wins): they check
    # results, and g++ compiles them in about two thirds of -O3's time (examples/char_lstm.cpp:
    # 52 s against 82 s). The benchmarks set -O3 again (bench/CMakeLists.txt).
    target_compile_options(${target} PRIVATE
      "$<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:Release>>:-O2>")
    if(DUALCAST_NATIVE)
      target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-march=native>")
    endif()
  endif()
endfunction()

# dualcast_use_pch(<target> [CHECK])
#   Where DUALCAST_PCH is on: <target>'s C++ sources use one of our precompiled headers
#   (dualcast.hpp, autodiff.hpp; dualcast_precompile), built once by an object library with the
#   flags of every target that links dualcast::compiled and takes dualcast_target_options:
#   dualcast_pch for the examples and the GradBench tool (-O2), dualcast_pch_check for the tests
#   (CHECK: the tests' level, DUALCAST_TEST_OPT). A source with other flags (another level,
#   -ffp-contract=off) is marked SKIP_PRECOMPILE_HEADERS: g++ refuses a header built at -O0 in an
#   optimised compile and the reverse (-Winvalid-pch).
function(dualcast_use_pch target)
  if(NOT DUALCAST_PCH)
    return()
  endif()
  set(pch dualcast_pch)
  if("CHECK" IN_LIST ARGN)
    set(pch dualcast_pch_check)
  endif()
  if(NOT TARGET ${pch})
    set(src "${PROJECT_BINARY_DIR}/${pch}.cpp")
    file(CONFIGURE OUTPUT "${src}" CONTENT "// the precompiled header's own object: empty\n")
    add_library(${pch} OBJECT "${src}")
    # (dualcast::compiled's usage requirements without its build: the header is built beside
    # the component's two long compiles, not after them)
    target_link_libraries(${pch} PRIVATE dualcast::dualcast)
    target_compile_definitions(${pch} PRIVATE DUALCAST_COMPILED)
    dualcast_target_options(${pch})
    if("CHECK" IN_LIST ARGN)
      dualcast_test_options(${pch})
    endif()
    dualcast_precompile(${pch})
  endif()
  target_precompile_headers(${target} REUSE_FROM ${pch})
  dualcast_precompile_options(${target})
endfunction()

# dualcast_checked_program_options(<target>)
#   For a program the tests run that is also run for its speed (an example, the GradBench tool),
#   after dualcast_target_options: its precompiled header, and in a check build
#   (DUALCAST_CHECK_BUILD) the tests' optimisation and theirs.
function(dualcast_checked_program_options target)
  if(DUALCAST_CHECK_BUILD)
    dualcast_test_options(${target})
    dualcast_use_pch(${target} CHECK)
  else()
    dualcast_use_pch(${target})
  endif()
endfunction()

# dualcast_test_options(<target>)
#   The tests' optimisation, after dualcast_target_options: DUALCAST_TEST_OPT (-O0 with g++), for
#   the test executables (and, in a check build only, the examples, the GradBench tool and
#   dualcast::compiled). The tests check values, gradients and errors, not speed; g++ spent most
#   of CI's test stage optimising them (tests/CMakeLists.txt has the figures).
function(dualcast_test_options target)
  target_compile_options(${target} PRIVATE
    "$<$<COMPILE_LANGUAGE:CXX>:${DUALCAST_TEST_OPT}>")
endfunction()

# dualcast_cuda_options(<target> [CHECK])
# Our nvcc settings: sm_80 and sm_90 (DUALCAST_CUDA_ARCHITECTURES; a kernel check, CHECK,
# DUALCAST_CUDA_CHECK_ARCHITECTURES), warnings as errors, the ptxas resource report.
function(dualcast_cuda_options target)
  set(archs "${DUALCAST_CUDA_ARCHITECTURES}")
  if("CHECK" IN_LIST ARGN)
    set(archs "${DUALCAST_CUDA_CHECK_ARCHITECTURES}")
  endif()
  set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES "${archs}")
  # -std=c++20 is given by hand: CMake 3.25 knows no CUDA20 flag for nvcc, so
  # CUDA_STANDARD 20 fails at generate time.
  target_compile_options(${target} PRIVATE
    "$<$<COMPILE_LANGUAGE:CUDA>:-std=c++20;--expt-relaxed-constexpr;--extended-lambda>"
    "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:-Werror all-warnings>"
    "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Werror>"
    "$<$<COMPILE_LANGUAGE:CUDA>:SHELL:-Xptxas -v>")
endfunction()

# dualcast_add_mpi_test(NAME <name> RANKS <n> COMMAND <target> [ARGS <args...>]
#                       [PASS_REGULAR_EXPRESSION <re>])
#   A ctest test (labels mpi, cpu) running <target> on <n> MPI ranks with mpiexec: one OpenMP
#   thread per rank, more ranks than cores allowed (OpenMPI's --oversubscribe), as root too
#   (OpenMPI refuses root without being told). TIMEOUT 120 s: a hang fails the test.
function(dualcast_add_mpi_test)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "NAME;RANKS;COMMAND;PASS_REGULAR_EXPRESSION" "ARGS")
  set(flags ${MPIEXEC_PREFLAGS})
  if(NOT DEFINED CACHE{DUALCAST_MPIEXEC_IS_OPENMPI})
    execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE version
      ERROR_QUIET RESULT_VARIABLE failed)
    set(open_mpi OFF)
    if(NOT failed AND version MATCHES "Open MPI|OpenRTE")
      set(open_mpi ON)
    endif()
    set(DUALCAST_MPIEXEC_IS_OPENMPI ${open_mpi} CACHE INTERNAL "")
  endif()
  if(DUALCAST_MPIEXEC_IS_OPENMPI)
    list(APPEND flags --oversubscribe)
  endif()
  add_test(NAME ${arg_NAME} COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${arg_RANKS}
    ${flags} $<TARGET_FILE:${arg_COMMAND}> ${MPIEXEC_POSTFLAGS} ${arg_ARGS})
  # (RUN_SERIAL: the ranks oversubscribe the cores; beside other tests the timeouts of the
  # communicator would measure the machine's load)
  set_tests_properties(${arg_NAME} PROPERTIES LABELS "mpi;cpu" TIMEOUT 120 RUN_SERIAL TRUE
    ENVIRONMENT
    "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
  if(arg_PASS_REGULAR_EXPRESSION)
    set_tests_properties(${arg_NAME} PROPERTIES
      PASS_REGULAR_EXPRESSION "${arg_PASS_REGULAR_EXPRESSION}")
  endif()
endfunction()
