// dualcast/nn/loss_scaler.hpp: dynamic loss scaling for half-precision training, with the rules
// of PyTorch's torch.cuda.amp.GradScaler.
//
//   dualcast::parameters<float> ps;                  // float master weights
//   auto w = ps.add("w", tp.variable(W0));
//   dualcast::adam opt(ps, {.lr = 1e-3});
//   dualcast::loss_scaler<float> scaler(ps);
//   for (...) {
//     auto wh = dualcast::cast<dualcast::half>(w);   // the half copy the forward uses
//     auto loss = model(wh, x);                      // a half (or float) scalar
//     scaler.backward(tp, loss);                     // backward seeded with scale(), not 1
//     scaler.step(opt);                              // unscale; step unless a gradient is inf/NaN
//     tp.zero_grad(); tp.clear();
//   }
//
// Half's largest finite value is 65504 and its smallest subnormal 2^-24 (6e-8): gradients of a
// loss of order 1 underflow to zero in half. Scaling the loss by s (the seed of backward) scales
// every gradient by s and lifts them into half's range; step() divides the parameters' (float)
// gradients by s again before the optimizer reads them. When s is too large, some gradient
// overflows to inf (or becomes NaN): then step() skips the update, leaves the parameters as they
// were, and halves s (backoff_factor). After growth_interval steps in a row without overflow it
// doubles s (growth_factor). So s settles near the largest scale that does not overflow.
// bfloat16 has float's exponent range and needs no scaling (enabled = false: scale 1, every
// step taken, the finiteness check kept).
#pragma once

#include <dualcast/core/errors.hpp>
#include <dualcast/nn/parameters.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace dualcast {

struct loss_scaler_options {
  double init_scale = 65536.0; // 2^16, as PyTorch
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000; // good steps in a row before the scale grows
  bool enabled = true;                 // false: scale 1 (bfloat16, float)
};

inline namespace DUALCAST_TAPE_ABI { // see tensor/detail/device_dispatch.hpp

// T: the element type of the parameters whose gradients are unscaled (the float master weights).
template <class T> class loss_scaler {
public:
  explicit loss_scaler(parameters<T> const &ps, loss_scaler_options o = {}) : opt_(o) {
    for (auto const &p : ps)
      vars_.push_back(p.v);
    if (!(o.init_scale > 0) || !std::isfinite(o.init_scale) || !(o.growth_factor > 1) ||
        !(o.backoff_factor > 0 && o.backoff_factor < 1) || o.growth_interval < 1)
      throw error("dualcast::loss_scaler: init_scale must be finite and positive, growth_factor "
                  "> 1, backoff_factor in (0, 1) and growth_interval >= 1");
    scale_ = o.enabled ? o.init_scale : 1.0;
  }

  // The current scale (1 when disabled).
  double scale() const { return scale_; }
  // Steps skipped so far because a gradient was inf or NaN.
  std::int64_t skipped() const { return skipped_; }

  // Backward of scale() * loss: the seed is scale() in the loss's precision (a half seed above
  // 65504 is inf, which the next step() finds and backs off from).
  template <class L> void backward(tape &tp, var<L> const &loss, bool keep_graph = false) {
    if (loss.value().size() != 1)
      throw shape_error("dualcast::loss_scaler::backward: the loss must be one element (shape " +
                        to_string(loss.dims()) + ")");
    tp.backward(std::vector<var<L>>{loss},
                std::vector<tensor<L>>{
                    tensor<L>::full(loss.dims(), seed_of<L>(scale_), loss.value().dev())},
                keep_graph);
    unscaled_ = false;
  }

  // Divides the parameters' gradients by scale() in place (once per backward) and returns
  // whether all of them are finite. step() calls it; call it yourself to clip the true
  // gradients before step().
  bool unscale() {
    if (unscaled_)
      return finite_;
    finite_ = true;
    for (auto const &v : vars_) {
      if (!v.requires_grad() || !v.has_grad())
        continue;
      tensor<T> const g = v.grad();
      if (scale_ != 1.0)
        g.scale_(T(1.0 / scale_));
      for (T x : g.to_vector())
        finite_ = finite_ && std::isfinite(double(x));
    }
    unscaled_ = true;
    return finite_;
  }

  // Unscales (if not done), runs opt.step() when every gradient is finite, and updates the
  // scale. Returns whether the step was taken.
  template <class Opt> bool step(Opt &opt) {
    bool const ok = unscale();
    if (ok)
      opt.step();
    update(ok);
    unscaled_ = false;
    return ok;
  }

private:
  template <class L> static L seed_of(double s) {
    if constexpr (std::is_same_v<L, double>)
      return s;
    else
      return L(float(s));
  }
  void update(bool ok) {
    if (!ok) {
      ++skipped_;
      good_ = 0;
      if (opt_.enabled)
        scale_ *= opt_.backoff_factor;
      return;
    }
    if (opt_.enabled && ++good_ >= opt_.growth_interval) {
      scale_ *= opt_.growth_factor;
      good_ = 0;
    }
  }

  loss_scaler_options opt_;
  std::vector<var<T>> vars_;
  double scale_ = 1.0;
  std::int64_t good_ = 0, skipped_ = 0;
  bool unscaled_ = false, finite_ = true;
};

} // namespace DUALCAST_TAPE_ABI
} // namespace dualcast
