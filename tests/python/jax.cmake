# The JAX side's tests (label python), included by python/CMakeLists.txt after
# dualcast_add_jax_kernels(dualcast_jax_cells ...). Each test is a Python script run by
# DUALCAST_JAX_PYTHON or Python3_EXECUTABLE (the interpreter JAX is installed for) with the libraries' paths in its
# environment; without JAX it prints DUALCAST_SKIPPED and ctest reports it skipped. The GPU
# variant (label gpu) reports skipped without a CUDA device or without CUDA handlers.
set(_dc_root "${CMAKE_CURRENT_LIST_DIR}/../..")
if(DUALCAST_JAX_FOUND)
  dualcast_add_jax_kernels(dualcast_jax_test_kernels
    SOURCES "${CMAKE_CURRENT_LIST_DIR}/jax_test_kernels.cpp")
  dualcast_add_jax_kernels(dualcast_jax_example
    SOURCES "${_dc_root}/examples/python/jax_user_kernel.cpp")
  set(_dc_env
    "PYTHONPATH=${_dc_root}/python"
    "DUALCAST_JAX_CELLS=$<TARGET_FILE:dualcast_jax_cells>"
    "DUALCAST_JAX_TEST_KERNELS=$<TARGET_FILE:dualcast_jax_test_kernels>"
    "DUALCAST_JAX_EXAMPLE=$<TARGET_FILE:dualcast_jax_example>"
    "OMP_NUM_THREADS=2")
  dualcast_jax_python(_dc_python)
else()
  # No JAX: the scripts still run (and report skipped), so a missing JAX is never a pass.
  set(_dc_env "PYTHONPATH=${_dc_root}/python")
  dualcast_jax_python(_dc_python)
endif()

function(_dualcast_jax_test name script labels)
  add_test(NAME ${name} COMMAND "${_dc_python}" "${script}" ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS "${labels}" ENVIRONMENT "${_dc_env}"
    SKIP_REGULAR_EXPRESSION "DUALCAST_SKIPPED" TIMEOUT 600)
endfunction()

_dualcast_jax_test(python_jax_ops "${CMAKE_CURRENT_LIST_DIR}/test_jax_ops.py" "python")
_dualcast_jax_test(python_jax_cells "${CMAKE_CURRENT_LIST_DIR}/test_jax_cells.py" "python")
_dualcast_jax_test(python_jax_example "${CMAKE_CURRENT_LIST_DIR}/test_jax_example.py" "python")
_dualcast_jax_test(python_jax_gpu "${CMAKE_CURRENT_LIST_DIR}/test_jax_gpu.py" "python;gpu")
