// dualcast/nn/parameters.hpp: a named list of the tape variables a model trains.
//
//   dualcast::tape tp;
//   dualcast::parameters<float> ps;
//   auto w = ps.add("layer1.w", tp.variable(dualcast::xavier_uniform<float>({4, 8}, 1)));
//   auto b = ps.add("layer1.b", tp.variable(dualcast::tensor<float>::zeros({8})));
//   for (auto const &[name, v] : ps) ...       // in the order added
//   ps["layer1.w"].grad();  ps.size();  ps.numel();  ps.zero_grad();
//
// An entry is a name and a variable, a handle: the list shares the variable's value and gradient
// with every copy of it (the optimizers of nn/sgd.hpp and nn/adam.hpp update the values in place;
// io/npz.hpp saves and loads them by name). Names are unique (tape_error otherwise); a name that
// is not there is an index_error naming it. Variables that require no gradient may be listed
// (frozen): the optimizers skip them.
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/core/compiled.hpp>
#include <dualcast/core/errors.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dualcast {
inline namespace DUALCAST_TAPE_ABI { // see tensor/detail/device_dispatch.hpp

template <class T> struct named_parameter {
  std::string name;
  var<T> v;
};

template <class T> class parameters {
public:
  using value_type = named_parameter<T>;
  using const_iterator = typename std::vector<named_parameter<T>>::const_iterator;

  parameters() = default;
  parameters(std::initializer_list<named_parameter<T>> list) {
    for (auto const &p : list)
      add(p.name, p.v);
  }

  // Appends v under `name` and returns it (the list's copy of the handle).
  // (Defined below the class: not inline, so that the compiled component can hold it.)
  var<T> const &add(std::string name, var<T> v);

  // The variable named `name` (index_error when there is none).
  var<T> const &operator[](std::string_view name) const {
    for (auto const &p : list_)
      if (p.name == name)
        return p.v;
    throw index_error("dualcast::parameters: no parameter named '" + std::string(name) + "' (" +
                      std::to_string(list_.size()) + " parameters)");
  }
  bool contains(std::string_view name) const {
    for (auto const &p : list_)
      if (p.name == name)
        return true;
    return false;
  }

  // The number of variables.
  std::size_t size() const { return list_.size(); }
  bool empty() const { return list_.empty(); }
  // The number of elements of all variables together.
  index_t numel() const {
    index_t n = 0;
    for (auto const &p : list_)
      n += p.v.size();
    return n;
  }
  const_iterator begin() const { return list_.begin(); }
  const_iterator end() const { return list_.end(); }
  named_parameter<T> const &at(std::size_t i) const { return list_.at(i); }

  // Sets the gradient of every listed variable that holds one to zero (like tape::zero_grad, for
  // these variables only, whatever tapes they belong to).
  void zero_grad() const {
    for (auto const &p : list_)
      if (p.v.has_grad()) {
        auto const on_stream = detail::tape_stream_scope(p.v.owner(), p.v.value().dev());
        p.v.grad().fill_(T(0));
      }
  }

private:
  std::vector<named_parameter<T>> list_;
};

template <class T> var<T> const &parameters<T>::add(std::string name, var<T> v) {
  if (contains(name))
    throw tape_error("dualcast::parameters::add: a parameter named '" + name +
                     "' is already in the list");
  list_.push_back({std::move(name), std::move(v)});
  return list_.back().v;
}
// The compiled component's instantiations (dualcast/core/compiled.hpp).
#define DUALCAST_X(T) DUALCAST_INSTANTIATE var<T> const &parameters<T>::add(std::string, var<T>);
DUALCAST_EACH_FLOAT_TYPE(DUALCAST_X)
#undef DUALCAST_X

} // namespace DUALCAST_TAPE_ABI
} // namespace dualcast
