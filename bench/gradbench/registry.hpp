// bench/gradbench/registry.hpp: the modules the tool implements, as GradBench names them
// (module -> function -> implementation), and the JSON-reading helpers the modules share.
//
// A function is split the way GradBench times it: parse (JSON -> the module's own input structure,
// not timed), prepare (one-time work, timed as "prepare"), run (timed once per evaluation) and
// output (the last run's result as JSON, not timed).
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace gradbench {

using json = nlohmann::json;

// An input the tool cannot use: answered with success false and this message.
struct input_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct job {
  virtual ~job() = default;
  virtual void run() = 0;
  virtual json output() const = 0;
};
struct parsed_input {
  virtual ~parsed_input() = default;
  virtual std::unique_ptr<job> prepare() const = 0;
};
struct function {
  std::function<std::unique_ptr<parsed_input>(json const &)> parse;
};

// A function from an input type (built from JSON by a parse function) and a job type
// (constructed from the input: the prepare step; run(); output()).
template <class Input, class Job> function make_function(Input (*parse)(json const &)) {
  struct holder : parsed_input {
    Input in;
    explicit holder(Input i) : in(std::move(i)) {}
    std::unique_ptr<job> prepare() const override { return std::make_unique<Job>(in); }
  };
  return {[parse](json const &j) -> std::unique_ptr<parsed_input> {
    return std::make_unique<holder>(parse(j));
  }};
}

class registry {
public:
  void add(std::string const &module, std::string const &name, function f) {
    modules_[module][name] = std::move(f);
  }
  bool find(std::string const &module) const { return modules_.count(module) != 0; }
  function const *find(std::string const &module, std::string const &name) const {
    auto m = modules_.find(module);
    if (m == modules_.end())
      return nullptr;
    auto f = m->second.find(name);
    return f == m->second.end() ? nullptr : &f->second;
  }

private:
  std::map<std::string, std::map<std::string, function>> modules_;
};

// ---- bounds on what an input may ask for ------------------------------------------------------
// The sizes an input states beside its numbers (llsq's n, ode's s, ba's n / m / p copies, the
// repetitions of evaluate) are not bounded by the length of its line: past these bounds they are
// an input_error, not an allocation or a loop without end. The defaults are far above GradBench's
// largest inputs; the fuzzer (tests/fuzz/fuzz_gradbench.cpp) lowers them to keep each input fast.
struct limits {
  double max_elements = double(1L << 28); // of the arrays a module builds from stated sizes
  std::int64_t max_runs = 1'000'000;      // evaluate's min_runs
  double max_seconds = 24 * 3600.0;       // evaluate's min_seconds
};
inline limits &input_limits() {
  static limits l;
  return l;
}
inline std::string shortest(double x) { // 2e+15, 268435456, 86400
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", x);
  return buf;
}
// `elements` (computed in double: a product of stated sizes must not overflow first) within
// input_limits().max_elements.
inline void check_size(double elements, std::string const &what) {
  if (!(elements <= input_limits().max_elements))
    throw input_error(what + " asks for " + shortest(elements) + " elements, more than " +
                      shortest(input_limits().max_elements) + " (the tool's limit)");
}

// ---- reading inputs, with errors that name the field --------------------------------------------
inline json const &field(json const &in, char const *name) {
  if (!in.is_object())
    throw input_error("the input must be a JSON object");
  auto it = in.find(name);
  if (it == in.end())
    throw input_error(std::string("the input has no field '") + name + "'");
  return *it;
}
inline double number(json const &v, std::string const &what) {
  if (!v.is_number())
    throw input_error(what + " must be a number");
  double x = v.get<double>();
  if (!std::isfinite(x))
    throw input_error(what + " must be finite");
  return x;
}
inline long integer(json const &v, std::string const &what, long lo = 0) {
  if (!v.is_number_integer() || v.get<long>() < lo)
    throw input_error(what + " must be an integer >= " + std::to_string(lo));
  return v.get<long>();
}
inline std::vector<double> numbers(json const &v, std::string const &what, std::size_t want = 0) {
  if (!v.is_array())
    throw input_error(what + " must be an array of numbers");
  if (want && v.size() != want)
    throw input_error(what + " must have " + std::to_string(want) + " numbers, not " +
                      std::to_string(v.size()));
  std::vector<double> out;
  out.reserve(v.size());
  for (auto const &x : v)
    out.push_back(number(x, what + "[]"));
  return out;
}
// A rectangular array of arrays, row-major; rows = 0 / cols = 0 accept any count.
inline std::vector<double> matrix(json const &v, std::string const &what, std::size_t &rows,
                                  std::size_t &cols) {
  if (!v.is_array() || (rows && v.size() != rows))
    throw input_error(what + " must be an array of " +
                      (rows ? std::to_string(rows) + " " : std::string()) + "rows");
  rows = v.size();
  std::vector<double> out;
  for (auto const &row : v) {
    if (!cols && !row.is_array())
      throw input_error(what + " must be an array of arrays of numbers");
    if (!cols)
      cols = row.size();
    auto r = numbers(row, what + "[]", cols);
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

} // namespace gradbench
