// bench/divergence.cpp: SIMD batches whose lanes take different branches -- the HM-LSTM cell
// update of the mixed-mode paper (float32, n x n, values + the four Jacobian diagonals, and the
// VJP), with the masks z, zb laid out so that batches are uniform or divergent:
//
//   FLUSH  (z == 1):            c' = sigmoid(i) * tanh(g)
//   COPY   (z == 0, zb == 0):   c' = c
//   UPDATE (otherwise):         c' = sigmoid(f) * c + sigmoid(i) * tanh(g)
//
// masks n x 1: constant along each row (the contiguous dimension): every batch takes one path;
// masks 1 x n: change along the row (the paper's layout, which ran column-major): nearly every
//   batch takes all three paths; masks n x n: random per element.
// Variants (each interleaved with the others in every repetition):
//   fused_partials     one dualcast pass: value and d/dc, d/df, d/di, d/dg (5 output arrays)
//   fused_vjp          one dualcast pass: the four input cotangents for a given output cotangent
//   select_partials    one dualcast pass of the branch-free formulation: every branch evaluated,
//                      the result chosen with dc::select (no divergence, three times the math)
//   separate_partials  all branches in separate passes, then a selecting pass (TF / XLA style:
//                      FLUSH and UPDATE values + partials into temporaries, then a select)
//   branch_partials    the library's cell, dc::cells::hmlstm_update, written with dc::branch
//   branch_vjp         (math/branch.hpp: one branch where a batch's lanes agree, both and a
//                      blend where they disagree), values + partials and VJP
//   select_vjp         the VJP of the select formulation
// fused_* above are the same cell written with `if` statements: a divergent batch is evaluated
// once per path (numbers/simd.hpp), so FLUSH and UPDATE each compute sigmoid(i) tanh(g).
// guarded_log (after them): y = log(x) * w where x > 0, else w + w, 1024 x 1024 floats, x all
//   positive (uniform) or every third one negative (divergent), values + partials and VJP.
// Output: CSV rows benchmark,variant,size,threads,median_ms,mask_layout,ratio_to_uniform; the
// rows of benchmark `vs_select` (issue 41: divergent batches no slower than select) hold in the
// last column the paired ratio (median over repetitions) of the variant to the select
// formulation in the same mode and layout (select_partials, select_vjp).
//   divergence [--reps N] [--threads N] [--quick]
#include "common.hpp"

#include <dualcast/dualcast.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace dc = dualcast;

namespace {

constexpr auto hm_cell = dc::kernel([](auto z, auto zb, auto c, auto f, auto i, auto g) {
  if (z == 1)
    return dc::sigmoid(i) * dc::tanh(g); // FLUSH
  if (z == 0 && zb == 0)
    return c;                                               // COPY
  return dc::sigmoid(f) * c + dc::sigmoid(i) * dc::tanh(g); // UPDATE
});
// Every branch evaluated and the result selected: no data-dependent control flow.
constexpr auto hm_select = dc::kernel([](auto z, auto zb, auto c, auto f, auto i, auto g) {
  auto flush = dc::sigmoid(i) * dc::tanh(g);
  auto update = dc::sigmoid(f) * c + flush;
  return dc::select(z == 1, flush, dc::select(z == 0 && zb == 0, c, update));
});
constexpr auto flush_k = dc::kernel([](auto i, auto g) { return dc::sigmoid(i) * dc::tanh(g); });
constexpr auto update_k = dc::kernel([](auto c, auto f, auto i, auto g) {
  return dc::sigmoid(f) * c + dc::sigmoid(i) * dc::tanh(g);
});
// Chooses value and partials among the branches' results (c, 1 for COPY).
constexpr auto choose = dc::kernel([](auto z, auto zb, auto a_flush, auto a_update, auto a_copy) {
  return dc::select(z == 1, a_flush, dc::select(z == 0 && zb == 0, a_copy, a_update));
});

using clock_type = std::chrono::steady_clock;
using bench::median;

struct problem {
  dc::index_t n;
  dc::shape s, ms;
  std::vector<float> z, zb, x[4], cbar, y, part[4], xbar[4], tmp[8], zeros, ones;
  problem(dc::index_t n_, std::string const &layout) : n(n_), s{n_, n_} {
    ms = layout == "n_x_1" ? dc::shape{n, 1} : layout == "1_x_n" ? dc::shape{n} : dc::shape{n, n};
    std::mt19937 gen(5);
    std::uniform_int_distribution<int> three(0, 2);
    z.resize(ms.size()), zb.resize(ms.size());
    for (std::size_t j = 0; j < z.size(); ++j) { // FLUSH, COPY, UPDATE about equally often
      int b = three(gen);
      z[j] = b == 0 ? 1.f : 0.f;
      zb[j] = b == 2 ? 1.f : 0.f;
    }
    std::uniform_real_distribution<float> u(-2.f, 2.f);
    std::size_t const e = s.size();
    for (auto &v : x) {
      v.resize(e);
      for (auto &a : v)
        a = u(gen);
    }
    cbar.resize(e);
    for (auto &a : cbar)
      a = u(gen);
    y.assign(e, 0.f);
    for (auto &v : part)
      v.assign(e, 0.f);
    for (auto &v : xbar)
      v.assign(e, 0.f);
    for (auto &v : tmp)
      v.assign(e, 0.f);
    zeros.assign(e, 0.f), ones.assign(e, 1.f);
  }
  dc::view<const float> cv(std::vector<float> const &v) const { return {v.data(), s}; }
  dc::view<const float> mask(std::vector<float> const &v) const { return {v.data(), ms}; }
  dc::view<float> mv(std::vector<float> &v) const { return {v.data(), s}; }
};

void run(int variant, problem &p, dc::cpu const &ex) {
  auto z = p.mask(p.z), zb = p.mask(p.zb);
  auto c = p.cv(p.x[0]), f = p.cv(p.x[1]), i = p.cv(p.x[2]), g = p.cv(p.x[3]);
  switch (variant) {
  case 0:
    dc::apply(ex, hm_cell, dc::active<2, 3, 4, 5>, dc::out(p.mv(p.y)),
              dc::out(p.mv(p.part[0]), p.mv(p.part[1]), p.mv(p.part[2]), p.mv(p.part[3])), z, zb, c,
              f, i, g);
    break;
  case 1:
    dc::vjp(ex, hm_cell, dc::active<2, 3, 4, 5>,
            dc::out(p.mv(p.xbar[0]), p.mv(p.xbar[1]), p.mv(p.xbar[2]), p.mv(p.xbar[3])),
            dc::in(z, zb, c, f, i, g), dc::in(p.cv(p.cbar)));
    break;
  case 2:
    dc::apply(ex, hm_select, dc::active<2, 3, 4, 5>, dc::out(p.mv(p.y)),
              dc::out(p.mv(p.part[0]), p.mv(p.part[1]), p.mv(p.part[2]), p.mv(p.part[3])), z, zb, c,
              f, i, g);
    break;
  case 3: { // FLUSH: value, d/di, d/dg; UPDATE: value, d/dc, d/df, d/di, d/dg; then choose
    auto &t = p.tmp;
    dc::apply(ex, flush_k, dc::active<0, 1>, dc::out(p.mv(t[0])), dc::out(p.mv(t[1]), p.mv(t[2])),
              i, g);
    dc::apply(ex, update_k, dc::active<0, 1, 2, 3>, dc::out(p.mv(t[3])),
              dc::out(p.mv(t[4]), p.mv(t[5]), p.mv(t[6]), p.mv(t[7])), c, f, i, g);
    auto zero = p.cv(p.zeros), one = p.cv(p.ones);
    dc::apply(ex, choose, dc::out(p.mv(p.y)), z, zb, p.cv(t[0]), p.cv(t[3]), c);
    dc::apply(ex, choose, dc::out(p.mv(p.part[0])), z, zb, zero, p.cv(t[4]), one);
    dc::apply(ex, choose, dc::out(p.mv(p.part[1])), z, zb, zero, p.cv(t[5]), zero);
    dc::apply(ex, choose, dc::out(p.mv(p.part[2])), z, zb, p.cv(t[1]), p.cv(t[6]), zero);
    dc::apply(ex, choose, dc::out(p.mv(p.part[3])), z, zb, p.cv(t[2]), p.cv(t[7]), zero);
    break;
  }
  case 4:
    dc::apply(ex, dc::cells::hmlstm_update, dc::active<2, 3, 4, 5>, dc::out(p.mv(p.y)),
              dc::out(p.mv(p.part[0]), p.mv(p.part[1]), p.mv(p.part[2]), p.mv(p.part[3])), z, zb, c,
              f, i, g);
    break;
  case 5:
    dc::vjp(ex, dc::cells::hmlstm_update, dc::active<2, 3, 4, 5>,
            dc::out(p.mv(p.xbar[0]), p.mv(p.xbar[1]), p.mv(p.xbar[2]), p.mv(p.xbar[3])),
            dc::in(z, zb, c, f, i, g), dc::in(p.cv(p.cbar)));
    break;
  case 6:
    dc::vjp(ex, hm_select, dc::active<2, 3, 4, 5>,
            dc::out(p.mv(p.xbar[0]), p.mv(p.xbar[1]), p.mv(p.xbar[2]), p.mv(p.xbar[3])),
            dc::in(z, zb, c, f, i, g), dc::in(p.cv(p.cbar)));
    break;
  default:
    break;
  }
}

// A guarded domain: y = log(x) * w where x > 0, else w + w, n x n floats, with every x positive
// (uniform) or every third x along the rows negative (divergent: each batch takes both paths,
// and the log path's other lanes compute log of a negative x, NaN, blended away). Values + the
// two partials, and the VJP; the divergent variant over the uniform one in the same repetition.
constexpr auto guarded_log = dc::kernel([](auto x, auto w) {
  if (x > 0)
    return dc::log(x) * w;
  return w + w;
});

void guarded_log_rows(dc::index_t n, int reps, dc::cpu const &ex) {
  dc::shape const s{n, n};
  std::size_t const e = s.size();
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(0.1f, 3.f);
  std::vector<float> xu(e), xd(e), w(e), ybar(e), out[5];
  for (std::size_t j = 0; j < e; ++j)
    xu[j] = u(gen), w[j] = u(gen), ybar[j] = u(gen), xd[j] = j % 3 == 0 ? -xu[j] : xu[j];
  for (auto &o : out)
    o.assign(e, 0.f);
  auto mv = [&](std::vector<float> &v) { return dc::view<float>(v.data(), s); };
  auto cv = [&](std::vector<float> const &v) { return dc::view<float const>(v.data(), s); };
  auto partials = [&](std::vector<float> const &x) {
    dc::apply(ex, guarded_log, dc::active<0, 1>, dc::out(mv(out[0])),
              dc::out(mv(out[1]), mv(out[2])), cv(x), cv(w));
  };
  auto vjp = [&](std::vector<float> const &x) {
    dc::vjp(ex, guarded_log, dc::active<0, 1>, dc::out(mv(out[3]), mv(out[4])),
            dc::in(cv(x), cv(w)), dc::in(cv(ybar)));
  };
  auto t = bench::interleaved(
      {[&] { partials(xu); }, [&] { partials(xd); }, [&] { vjp(xu); }, [&] { vjp(xd); }}, reps);
  char const *variant[] = {"fused_partials", "fused_vjp"};
  for (int v = 0; v < 2; ++v) {
    auto const &uniform = t[std::size_t(2 * v)], &divergent = t[std::size_t(2 * v + 1)];
    std::printf("guarded_log,%s,%ld,%d,%.4f,uniform,1.00\n", variant[v], long(n), ex.thread_count(),
                median(uniform));
    std::printf("guarded_log,%s,%ld,%d,%.4f,divergent,%.2f\n", variant[v], long(n),
                ex.thread_count(), median(divergent), bench::paired_ratio(divergent, uniform));
  }
  std::fflush(stdout);
}

} // namespace

int main(int argc, char **argv) {
  bench::options const o = bench::parse(argc, argv, 11, 3);
  int const reps = o.reps, threads = o.threads;
  bool const quick = o.quick;
  dc::cpu const ex{threads};
  constexpr int NV = 7;
  char const *names[NV] = {"fused_partials",  "fused_vjp",  "select_partials", "separate_partials",
                           "branch_partials", "branch_vjp", "select_vjp"};
  char const *layouts[] = {"n_x_1", "1_x_n", "n_x_n"};
  std::printf("benchmark,variant,size,threads,median_ms,mask_layout,ratio_to_uniform\n");
  for (dc::index_t n : {dc::index_t(512), dc::index_t(1024), dc::index_t(2048)}) {
    if (quick && n > 512)
      break;
    std::vector<problem> probs;
    for (char const *l : layouts)
      probs.emplace_back(n, l);
    std::vector<double> t[3][NV];
    for (auto &pr : probs) // warm up: first touch of every page
      for (int v = 0; v < NV; ++v)
        run(v, pr, ex);
    for (int r = 0; r < reps; ++r)
      for (int l = 0; l < 3; ++l)
        for (int k = 0; k < NV; ++k) { // a rotating order: drifts hit every variant alike
          int const v = (r + k) % NV;
          auto t0 = clock_type::now();
          run(v, probs[std::size_t(l)], ex);
          t[l][v].push_back(
              std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
        }
    for (int v = 0; v < NV; ++v) {
      double uniform = median(t[0][v]);
      for (int l = 0; l < 3; ++l) {
        double m = median(t[l][v]);
        std::printf("divergence,%s,%ld,%d,%.4f,%s,%.2f\n", names[v], long(n), threads, m,
                    layouts[l], m / uniform);
      }
    }
    // Against the select formulation, paired: the `if` cell and the branch() cell.
    for (int v : {0, 4, 1, 5}) {
      int const base = v == 0 || v == 4 ? 2 : 6;
      for (int l = 0; l < 3; ++l)
        std::printf("vs_select,%s,%ld,%d,%.4f,%s,%.3f\n", names[v], long(n), threads,
                    median(t[l][v]), layouts[l], bench::paired_ratio(t[l][v], t[l][base]));
    }
    std::fflush(stdout);
  }
  guarded_log_rows(quick ? 512 : 1024, reps, ex);
}
