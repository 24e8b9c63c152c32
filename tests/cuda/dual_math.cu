// Compile check: the whole math library in device code (and in the host pass of the same file).
//
// Every function of dualcast/math (with every mixed dual / constant form) is instantiated on
// float, double, dual<float, 4>, dual<double, 2> and dual<dual<float, 1>, 2> inside a __global__
// function whose results (values and every partial, at every nesting level) are written to an
// output pointer, so nothing is optimised away. Built compile-only for sm_80 and sm_90 with
// warnings as errors and the ptxas resource report (tests/CMakeLists.txt).
#include <dualcast/math/functions.hpp>

#include <cuda_runtime.h>

namespace dc = dualcast;

namespace {

// Folds a result into one double: the value and every partial, recursively.
template <class T> __host__ __device__ double flatten(T const &x) {
  if constexpr (dc::is_dual_v<T>) {
    double s = flatten(x.val);
    for (int i = 0; i < T::size; ++i)
      s += flatten(x.d[i]);
    return s;
  } else {
    return static_cast<double>(x);
  }
}

struct sink {
  double *out;
  int n = 0;
  template <class R> __host__ __device__ void operator()(R const &r) { out[n++] = flatten(r); }
};

// Every function on T, with constants of T's innermost scalar type S on either side.
template <class T>
__host__ __device__ int all_math(T const &x, T const &y, T const &z, double *out) {
  using S = dc::scalar_of_t<T>;
  sink put{out};
  // arithmetic and comparisons
  put(x + y), put(x - y), put(x * y), put(x / y), put(-x), put(+x);
  put(x + S(1)), put(S(1) + x), put(x - S(2)), put(S(2) - x), put(x * S(3)), put(S(3) * x);
  put(x / S(4)), put(S(4) / x), put(x * 2), put(2.0 * x);
  T a = x;
  a += y, a -= S(1), a *= y, a /= S(2);
  put(a);
  put(static_cast<S>((x < y) + (x <= y) + (x > y) + (x >= y) + (x == y) + (x != y) + (x < S(0)) +
                     (S(0) < x)));
  put(dc::value_of(x));
  // exponentials and logarithms
  put(dc::exp(x)), put(dc::expm1(x)), put(dc::exp2(x));
  put(dc::log(x)), put(dc::log1p(x)), put(dc::log2(x)), put(dc::log10(x));
  // roots and powers: dual ^ dual, dual ^ scalar, scalar ^ dual, dual ^ int
  put(dc::sqrt(x)), put(dc::rsqrt(x)), put(dc::cbrt(x));
  put(dc::pow(x, y)), put(dc::pow(x, S(2.5))), put(dc::pow(S(2), y)), put(dc::pow(x, 3)),
      put(dc::pow(x, -2));
  put(dc::pow(x, 0));
  // trigonometric and hyperbolic
  put(dc::sin(x)), put(dc::cos(x)), put(dc::tan(x));
  put(dc::asin(x)), put(dc::acos(x)), put(dc::atan(x));
  put(dc::atan2(x, y)), put(dc::atan2(x, S(1))), put(dc::atan2(S(1), y));
  put(dc::sinh(x)), put(dc::cosh(x)), put(dc::tanh(x));
  put(dc::asinh(x)), put(dc::acosh(x + S(2))), put(dc::atanh(x));
  put(dc::hypot(x, y)), put(dc::hypot(x, S(3))), put(dc::hypot(S(3), y));
  // error function and the normal CDF
  put(dc::erf(x)), put(dc::erfc(x)), put(dc::normcdf(x));
  // piecewise
  put(dc::abs(x)), put(dc::relu(x)), put(dc::floor(x)), put(dc::ceil(x)), put(dc::round(x));
  put(dc::min(x, y)), put(dc::min(x, S(0))), put(dc::min(S(0), y));
  put(dc::max(x, y)), put(dc::max(x, S(0))), put(dc::max(S(0), y));
  put(dc::clamp(x, y, z)), put(dc::clamp(x, S(-1), S(1))), put(dc::clamp(S(0), y, z)),
      put(dc::clamp(x, y, S(1)));
  put(dc::fma(x, y, z)), put(dc::fma(x, S(2), z)), put(dc::fma(S(2), y, S(1))),
      put(dc::fma(x, y, S(1)));
  // activations
  put(dc::sigmoid(x)), put(dc::softplus(x));
  // selection
  put(dc::select(x > y, x, y)), put(dc::select(x > S(0), x, S(0))),
      put(dc::select(x < S(0), S(1), y));
  put(dc::where(x < y, x * y, x / y)), put(dc::where(true, x, S(2)));
  return put.n;
}

template <class T> __host__ __device__ int run_all(double const *in, double *out) {
  using S = dc::scalar_of_t<T>;
  S x = static_cast<S>(in[0]), y = static_cast<S>(in[1]), z = static_cast<S>(in[2]);
  if constexpr (!dc::is_dual_v<T>) {
    return all_math<T>(x, y, z, out);
  } else if constexpr (!dc::is_dual_v<typename T::value_type>) {
    // x, y, z are the first three independent variables (dual<float, 4> has one spare partial;
    // dual<double, 2> sees z as a constant).
    T xd = T::variable(x, 0), yd = T::variable(y, 1), zd(z);
    if constexpr (T::size > 2)
      zd = T::variable(z, 2);
    return all_math<T>(xd, yd, zd, out);
  } else {
    // dual<dual<float, 1>, 2>: x seeded at both levels (second derivatives in x), y at the outer.
    using I = typename T::value_type;
    T xd = T::variable(I::variable(x, 0), 0), yd = T::variable(I(y), 1), zd{I(z)};
    return all_math<T>(xd, yd, zd, out);
  }
}

} // namespace

// Room for every result of one type.
constexpr int dual_math_results = 128;

__global__ void dual_math_kernel(double const *in, double *out) {
  int n = 0;
  n += run_all<float>(in, out + 0 * dual_math_results);
  n += run_all<double>(in, out + 1 * dual_math_results);
  n += run_all<dc::dual<float, 4>>(in, out + 2 * dual_math_results);
  n += run_all<dc::dual<double, 2>>(in, out + 3 * dual_math_results);
  n += run_all<dc::dual<dc::dual<float, 1>, 2>>(in, out + 4 * dual_math_results);
  out[5 * dual_math_results] = n;
}

// Host-side stub: launches the kernel (never run by the test, which only compiles) and runs the
// same instantiations in the host pass.
cudaError_t dual_math_launch(double const *device_in, double *device_out, cudaStream_t stream) {
  dual_math_kernel<<<1, 1, 0, stream>>>(device_in, device_out);
  return cudaGetLastError();
}

int dual_math_host(double const *in, double *out) {
  int n = 0;
  n += run_all<float>(in, out + 0 * dual_math_results);
  n += run_all<double>(in, out + 1 * dual_math_results);
  n += run_all<dc::dual<float, 4>>(in, out + 2 * dual_math_results);
  n += run_all<dc::dual<double, 2>>(in, out + 3 * dual_math_results);
  n += run_all<dc::dual<dc::dual<float, 1>, 2>>(in, out + 4 * dual_math_results);
  return n;
}
