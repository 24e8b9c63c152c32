// Instantiates the fused LSTM-cell kernels for the CUDA backend (forward with diagonal partials,
// and VJP), plus a broadcast VJP, so CI compiles them for sm_80/sm_90 and checks ptxas' report
// for register spills. Nothing here runs: there is no GPU on our machines.
#include <dualcast/cuda.cuh>

namespace dc = dualcast;

namespace {
// For nvcc a kernel is a function object with a DUALCAST_HD call operator: nvcc runs a generic
// lambda on the device only as a __device__ extended lambda, whose type the host cannot inspect.
struct lstm_update {
  template <class I, class F, class G, class O, class C>
  DUALCAST_HD auto operator()(I i, F f, G g, O o, C c) const {
    auto c2 = dc::sigmoid(f) * c + dc::sigmoid(i) * dc::tanh(g);
    return dc::outputs(dc::sigmoid(o) * dc::tanh(c2), c2);
  }
};
constexpr dc::kernel<lstm_update> lstm{lstm_update{}};
struct biased_tanh {
  template <class X, class B, class S> DUALCAST_HD auto operator()(X x, B b, S s) const {
    return dc::tanh(x + b) * s;
  }
};
constexpr dc::kernel<biased_tanh> biased{biased_tanh{}};
} // namespace

// Host entry points (never called in CI); they force the kernels to be instantiated.
void lstm_forward_partials(dc::cuda ex, dc::view<const float> const *x, dc::view<float> const *y,
                           dc::view<float> const *d) {
  dc::apply(ex, lstm, dc::active<0, 1, 2, 3, 4>, dc::out(y[0], y[1]),
            dc::out(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], d[9]), x[0], x[1], x[2],
            x[3], x[4]);
}
void lstm_forward(dc::cuda ex, dc::view<const float> const *x, dc::view<float> const *y) {
  dc::apply(ex, lstm, dc::out(y[0], y[1]), x[0], x[1], x[2], x[3], x[4]);
}
void lstm_vjp(dc::cuda ex, dc::view<const float> const *x, dc::view<const float> const *ybar,
              dc::view<float> const *xbar, bool accumulate) {
  dc::vjp(ex, lstm, dc::out(xbar[0], xbar[1], xbar[2], xbar[3], xbar[4]),
          dc::in(x[0], x[1], x[2], x[3], x[4]), dc::in(ybar[0], ybar[1]), accumulate);
}
void biased_vjp(dc::cuda ex, dc::view<const double> x, dc::view<const double> b,
                dc::view<const double> ybar, dc::view<double> xbar, dc::view<double> bbar) {
  dc::vjp(ex, biased, dc::active<0, 1>, dc::out(xbar, bbar), dc::in(x, b, 0.5), dc::in(ybar));
}
