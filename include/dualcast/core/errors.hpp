// dualcast/core/errors.hpp: the exceptions dualcast throws. Every message names the operation, the
// argument position and the shapes / devices / dtypes involved, so a user can act on it.
#pragma once

#include <stdexcept>
#include <string>

namespace dualcast {

// Base of every dualcast error.
class error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};
// Shapes that do not broadcast, or an output of the wrong shape.
class shape_error : public error {
public:
  using error::error;
};
// An array on the wrong device (a host array passed to a CUDA kernel, or the reverse).
class device_error : public error {
public:
  using error::error;
};
// Element types that do not match.
class dtype_error : public error {
public:
  using error::error;
};
// An index out of range (gather, index_select, slicing).
class index_error : public error {
public:
  using error::error;
};
// Outputs that overlap inputs or each other in a way the operation cannot handle.
class aliasing_error : public error {
public:
  using error::error;
};
// Memory could not be allocated; the message names the size.
class allocation_error : public error {
public:
  using error::error;
};
// A CUDA runtime or library call failed; the message carries CUDA's error string.
class cuda_error : public error {
public:
  using error::error;
};
// Misuse of the tape: backward twice, backward on a non-scalar without seeds, ...
class tape_error : public error {
public:
  using error::error;
};
// A file could not be opened, read or written, or is not in the format expected (io/npy.hpp,
// io/npz.hpp); the message names the file and what is wrong.
class io_error : public error {
public:
  using error::error;
};
// A tensor saved for backward was modified in place before backward ran.
class version_error : public tape_error {
public:
  using tape_error::tape_error;
};

} // namespace dualcast
