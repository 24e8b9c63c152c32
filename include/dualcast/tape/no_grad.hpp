// dualcast/tape/no_grad.hpp: a scope without gradient recording, and variables cut off from the
// graph.
//
//   {
//     dualcast::no_grad guard(tp);           // while alive: tp records nothing
//     auto y = dualcast::sum(w * x);         // a value only: y.requires_grad() == false
//   }                                        // recording resumes (the previous mode comes back)
//   auto c = dualcast::detach(w);            // w's value (the same storage) as a constant
//
// Under no_grad every operation on the tape's variables (fused nodes, lazy expressions, unfused
// mode, matmul, reductions, shape operations, custom operations) computes its values only: no node
// is recorded (tape::node_count() does not grow), nothing is saved for backward, the partials a
// fused node would store are not computed, and the outputs require no gradients. Variables made
// with tape::variable inside the scope still require gradients (they are leaves). Guards nest;
// each puts back the mode it found. A guard belongs to one thread, like its tape.
//
// detach(v) is v's value as a variable of the same tape that requires no gradient: it shares v's
// storage (an in-place write to one is seen through the other), and gradients never flow through
// it into v.
#pragma once

#include <dualcast/tape/tape.hpp>

namespace dualcast {
inline namespace DUALCAST_TAPE_ABI { // see tensor/detail/device_dispatch.hpp

class no_grad {
public:
  explicit no_grad(tape &tp) : tp_(tp), before_(tp.grad_enabled()) { tp.set_grad_enabled(false); }
  no_grad(no_grad const &) = delete;
  no_grad &operator=(no_grad const &) = delete;
  ~no_grad() { tp_.set_grad_enabled(before_); }

private:
  tape &tp_;
  bool before_;
};

template <class T> var<T> detach(var<T> const &v) { return var<T>(v.value(), nullptr, v.owner()); }
// A lazy expression is materialised first (recorded, unless under no_grad), then detached.
template <class E>
requires lazy_expr<E>
auto detach(E const &e) { return detach(e.eval()); }

} // namespace DUALCAST_TAPE_ABI
} // namespace dualcast
