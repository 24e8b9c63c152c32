# Helpers for dualcast's own targets (tests, examples, benchmarks).
# Not installed: nothing here affects the dualcast::dualcast interface target.

include_guard(GLOBAL)

# dualcast_target_options(<target>)
#   Warnings as errors for our own C++ code, and -march=native when
#   DUALCAST_NATIVE is ON. Applies to the CXX sources of <target> only.
function(dualcast_target_options target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "^(GNU|Clang|AppleClang)$")
    target_compile_options(${target} PRIVATE
      "$<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra;-Wpedantic;-Werror>")
    if(DUALCAST_NATIVE)
      target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-march=native>")
    endif()
  endif()
endfunction()
