# dualcast_precompile(<target> [<target>...])
#   Opt-in, for shorter compiles: dualcast's headers (dualcast/dualcast.hpp, dualcast/autodiff.hpp)
#   as a precompiled header of the targets' C++ sources. The first target builds it (once, about
#   9 s of g++ CPU and 570 MiB); the others reuse that one (REUSE_FROM), so they must be compiled
#   with the same flags, definitions and options as the first (g++ refuses a header built with
#   other flags, -Winvalid-pch, which CMake adds). Each translation unit then skips parsing the
#   headers: about 4 s of CPU less with g++ 12. Every source of the targets sees the headers, as
#   if it included them first. Leave it out where the flags differ per source file, for clang-tidy
#   and for nvcc (CMake precompiles no CUDA sources).
#
# Defined by dualcast's package config (find_package) and by its CMakeLists.txt
# (add_subdirectory); dualcast's own tests and examples use it too (DUALCAST_PCH).
include_guard(GLOBAL)

function(dualcast_precompile target)
  # (C++ sources only: a C source of the same target gets no header of ours)
  target_precompile_headers(${target} PRIVATE
    "$<$<COMPILE_LANGUAGE:CXX>:<dualcast/dualcast.hpp$<ANGLE-R>>"
    "$<$<COMPILE_LANGUAGE:CXX>:<dualcast/autodiff.hpp$<ANGLE-R>>")
  dualcast_precompile_options(${target})
  foreach(other IN LISTS ARGN)
    target_precompile_headers(${other} REUSE_FROM ${target})
    dualcast_precompile_options(${other})
  endforeach()
endfunction()

# g++ before 13 does not keep the headers' `#pragma GCC diagnostic` in a precompiled header (GCC
# bug 64117): the one warning that dualcast's headers silence, a false -Wmaybe-uninitialized in
# the CPU backend's masked loop (dualcast/backend/cpu/map.hpp), would then fail -Werror builds;
# so it is off for the targets that use the header there.
function(dualcast_precompile_options target)
  target_compile_options(${target} PRIVATE
    "$<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>,$<VERSION_LESS:$<CXX_COMPILER_VERSION>,13>>:-Wno-maybe-uninitialized>")
endfunction()
