// Integer tensors (tensor<std::int32_t> / <std::int64_t>) as indices: storage, views and copies;
// each index operation with int32 and int64 index tensors against its std::vector / index_array
// overload, gradients against central differences, and the errors for misuse. Host tensors: the
// CUDA paths run the same code with the indices in device memory (tests/cuda, labelled gpu).
#include "tape_support.hpp"

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

using namespace tape_support;
using I32 = dc::tensor<std::int32_t>;
using I64 = dc::tensor<std::int64_t>;

namespace {
std::vector<double> vals(V64 const &v) { return v.value().to_vector(); }

template <class I> dc::tensor<I> as_index(shape const &s, std::vector<dc::index_t> const &v) {
  std::vector<I> w(v.begin(), v.end());
  return dc::tensor<I>::from(s, w);
}

std::vector<dc::index_t> random_index_values(std::size_t n, dc::index_t lo, dc::index_t hi,
                                             unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<dc::index_t> u(lo, hi - 1);
  std::vector<dc::index_t> v(n);
  for (auto &k : v)
    k = u(g);
  return v;
}
} // namespace

TEST_CASE("index tensors: int32 and int64 storage, views, copies and host transfer") {
  auto a = I32::from({2, 3}, {1, -2, 3, 4, 5, -6});
  CHECK(a.dims() == shape{2, 3});
  CHECK(a.nbytes() == 6 * sizeof(std::int32_t));
  CHECK(a.transposed().contiguous().to_vector() == std::vector<std::int32_t>{1, 4, -2, 5, 3, -6});
  CHECK(a.slice(1, 1, 3).clone().to_vector() == std::vector<std::int32_t>{-2, 3, 5, -6});
  CHECK(a.select(0, 1).to_vector() == std::vector<std::int32_t>{4, 5, -6});
  CHECK(a.reshape({3, 2}).to_vector() == a.to_vector());
  auto b = I64::full({2, 3}, std::int64_t(1) << 40);
  CHECK(b(1, 2) == (std::int64_t(1) << 40));
  b.copy_(I64::from({3}, {7, 8, 9})); // broadcast along axis 0
  CHECK(b.to_vector() == std::vector<std::int64_t>{7, 8, 9, 7, 8, 9});
  auto v0 = b.slice(1, 0, 3, 2); // a strided view, written in place
  auto before = v0.to_vector();
  v0.fill_(-1);
  CHECK(b.to_vector() == std::vector<std::int64_t>{-1, 8, -1, -1, 8, -1});
  CHECK(before == std::vector<std::int64_t>{7, 9, 7, 9});
  CHECK(I32::zeros({0}).size() == 0);
  CHECK(I64::scalar(5).item() == 5);
  CHECK(b.to(dc::device::host()).to_vector() == b.to_vector());
  CHECK_THROWS_AS(I32::from({2}, {1, 2, 3}), dc::shape_error);
  CHECK_THROWS_AS(b.copy_(I64::from({2}, {1, 2})), dc::shape_error);
}

TEST_CASE_TEMPLATE("index tensors: index_select and gather equal the vector overloads", I,
                   std::int32_t, std::int64_t) {
  auto x = random_tensor({4, 5}, 101);
  dc::tape tp;
  auto v = tp.variable(x);
  std::vector<dc::index_t> const sel{3, -1, 0, 3, -5};
  CHECK(vals(dc::index_select(v, 1, as_index<I>({5}, sel))) == vals(dc::index_select(v, 1, sel)));
  CHECK(vals(dc::index_select(v, 0, as_index<I>({0}, {}))).empty());
  dc::index_array const g{{4, 3}, {0, 4, -1, 2, 2, 1, -5, 3, 0, 1, 1, 1}};
  CHECK(vals(dc::gather(v, 1, as_index<I>(g.dims, g.values))) == vals(dc::gather(v, 1, g)));
  // A non-contiguous index tensor (a transposed view) gathers as its contiguous copy.
  std::vector<dc::index_t> const tv{0, 3, -1, 2, 1, 1, -4, 0, 3, 2, 2, 0, 1, 3, -2};
  auto tt = as_index<I>({5, 3}, tv).transposed(); // (3, 5)
  std::vector<dc::index_t> tc;
  for (auto k : tt.contiguous().to_vector())
    tc.push_back(dc::index_t(k));
  CHECK(vals(dc::gather(v, 0, tt)) == vals(dc::gather(v, 0, dc::index_array{{3, 5}, tc})));
  check_gradients(
      [&](auto const &w) {
        return dc::index_select(w[0], 1, as_index<I>({5}, sel)) *
               dc::gather(w[0], 1, as_index<I>({4, 5}, {0,  1, 2, 3, 4, 4, 4, 0, 0, 1,
                                                        -1, 2, 2, 2, 2, 1, 0, 3, 3, 3}));
      },
      {x});
}

TEST_CASE_TEMPLATE("index tensors: index_add, scatter_add and scatter equal the vector overloads",
                   I, std::int32_t, std::int64_t) {
  auto x = random_tensor({4, 3}, 111), s = random_tensor({4, 5}, 112);
  dc::tape tp;
  auto vx = tp.variable(x), vs = tp.variable(s);
  std::vector<dc::index_t> const ia{2, 0, -1, 2, 0};
  CHECK(vals(dc::index_add(vx, 1, as_index<I>({5}, ia), vs)) == vals(dc::index_add(vx, 1, ia, vs)));
  // Into a constant tensor of zeros: a segment sum.
  CHECK(vals(dc::index_add(T64::zeros({4, 3}), 1, as_index<I>({5}, ia), vs)) ==
        vals(dc::index_add(T64::zeros({4, 3}), 1, ia, vs)));
  dc::index_array const index{{3, 3}, {1, 3, 1, 0, 0, 2, -1, 2, 0}}; // rows 0 and 1: duplicates
  auto src = random_tensor({3, 3}, 113);
  auto vsrc = tp.variable(src);
  auto ti = as_index<I>(index.dims, index.values);
  CHECK(vals(dc::scatter_add(vx, 0, ti, vsrc)) == vals(dc::scatter_add(vx, 0, index, vsrc)));
  CHECK(vals(dc::scatter(vx, 0, ti, vsrc)) == vals(dc::scatter(vx, 0, index, vsrc)));
  auto t4 = dc::slice(vx, 1, 0, 3); // (4, 3)
  auto src4 = random_tensor({4, 3}, 114);
  dc::index_array const i4{{4, 3}, {0, 2, 2, 1, 1, 0, 2, 0, 1, 0, 0, 0}};
  CHECK(vals(dc::scatter(t4, 1, as_index<I>(i4.dims, i4.values), src4)) ==
        vals(dc::scatter(t4, 1, i4, src4)));
  check_gradients(
      [&](auto const &w) {
        return dc::index_add(w[0], 1, as_index<I>({5}, ia), w[1]) +
               dc::scatter_add(w[0], 0, as_index<I>(index.dims, index.values),
                               dc::slice(dc::slice(w[1], 0, 0, 3), 1, 0, 3) * 0.5);
      },
      {x, s});
  // scatter's gradient: dx is 0 at the overwritten elements, only the last duplicate's src gets
  // it (the same rule as the index_array overload).
  check_gradients(
      [&](auto const &w) { return dc::scatter(w[0], 1, as_index<I>(i4.dims, i4.values), w[1]); },
      {x, src4});
}

TEST_CASE_TEMPLATE("index tensors: reduce_by_index equals the vector overload", I, std::int32_t,
                   std::int64_t) {
  // Out-of-range indices are ignored, as with the vector (-1 and 7 here).
  auto idx = random_index_values(40, -1, 8, 121);
  auto x = random_tensor({40, 2}, 122, 0.5, 1.5);
  for (auto op : {dc::bin_op::plus, dc::bin_op::times, dc::bin_op::min, dc::bin_op::max}) {
    INFO("op " << int(op));
    CHECK(dc::reduce_by_index(x, as_index<I>({40}, idx), 7, op).to_vector() ==
          dc::reduce_by_index(x, idx, 7, op).to_vector());
    dc::tape tp;
    auto v = tp.variable(x);
    CHECK(vals(dc::reduce_by_index(v, as_index<I>({40}, idx), 7, op)) ==
          vals(dc::reduce_by_index(v, idx, 7, op)));
    check_gradients(
        [&](auto const &w) { return dc::reduce_by_index(w[0], as_index<I>({40}, idx), 7, op); },
        {x});
  }
  // The privatized plus (chunks * bins <= rows): 70000 rows into 3 bins.
  auto big = random_index_values(70000, 0, 3, 123);
  auto bx = random_tensor({70000}, 124);
  CHECK(dc::reduce_by_index(bx, as_index<I>({70000}, big), 3, dc::bin_op::plus).to_vector() ==
        dc::reduce_by_index(bx, big, 3, dc::bin_op::plus).to_vector());
}

TEST_CASE_TEMPLATE("index tensors: argmax and argmin as integer tensors feed gather", I,
                   std::int32_t, std::int64_t) {
  auto x = random_tensor({3, 4, 5}, 131);
  dc::tape tp;
  auto v = tp.variable(x);
  for (int axis : {0, 1, -1}) {
    auto am = dc::argmax<I>(v, axis, true);
    auto ref = dc::argmax(v, axis, true);
    CHECK(am.dims() == ref.dims);
    auto const amv = am.to_vector();
    std::vector<dc::index_t> got(amv.begin(), amv.end());
    CHECK(got == ref.values);
    auto an = dc::argmin<I>(x, axis);
    auto rn = dc::argmin(x, axis);
    auto const anv = an.to_vector();
    std::vector<dc::index_t> gn(anv.begin(), anv.end());
    CHECK(gn == rn.values);
    // gather at the argmax positions gives the maxima along the axis
    CHECK(vals(dc::gather(v, axis, am)) == vals(dc::max(v, {axis}, true)));
  }
  CHECK(dc::index_t(dc::argmax<I>(x).item()) == dc::argmax(x).values[0]);
  CHECK(dc::index_t(dc::argmin<I>(v).item()) == dc::argmin(v).values[0]);
  // NaN is the extremum, as in the index_array overload.
  auto n = T64::from({4}, {1.0, std::numeric_limits<double>::quiet_NaN(), 3.0, 0.0});
  CHECK(dc::argmax<I>(n).item() == 1);
  CHECK_THROWS_AS(dc::argmax<I>(T64::zeros({2, 0}), 1), dc::shape_error);
}

TEST_CASE("index tensors: misuse gives clear errors") {
  auto x = random_tensor({4, 3}, 141);
  dc::tape tp;
  auto v = tp.variable(x);
  using doctest::Contains;
  // out of range: the same messages as the vector overloads
  CHECK_THROWS_WITH_AS(dc::index_select(v, 0, I32::from({2}, {1, 4})),
                       Contains("dualcast::index_select: index 4 at position 1"), dc::index_error);
  CHECK_THROWS_WITH_AS(dc::index_select(v, 1, I64::from({2}, {0, -4})), Contains("[-3, 3)"),
                       dc::index_error);
  CHECK_THROWS_WITH_AS(dc::gather(v, 1, I32::from({4, 1}, {0, 3, 0, 0})),
                       Contains("dualcast::gather: index 3 at position 1"), dc::index_error);
  CHECK_THROWS_WITH_AS(dc::index_add(v, 0, I64::from({1}, {9}), T64::zeros({1, 3})),
                       Contains("index 9"), dc::index_error);
  CHECK_THROWS_WITH_AS(dc::scatter(v, 1, I32::from({1, 1}, {4}), T64::zeros({1, 1})),
                       Contains("index 4"), dc::index_error);
  // wrong rank
  CHECK_THROWS_WITH_AS(dc::index_select(v, 0, I32::from({1, 2}, {0, 1})), Contains("want one axis"),
                       dc::shape_error);
  CHECK_THROWS_AS(dc::gather(v, 1, I32::from({4}, {0, 1, 2, 0})), dc::shape_error);
  CHECK_THROWS_AS(dc::index_add(v, 0, I32::from({1, 1}, {0}), T64::zeros({1, 3})), dc::shape_error);
  CHECK_THROWS_WITH_AS(dc::reduce_by_index(x, I32::from({2, 2}, {0, 1, 0, 1}), 2, dc::bin_op::plus),
                       Contains("want one axis"), dc::shape_error);
  CHECK_THROWS_WITH_AS(dc::reduce_by_index(x, I32::from({3}, {0, 1, 0}), 2, dc::bin_op::plus),
                       Contains("3 indices for 4 rows"), dc::shape_error);
  // an undefined index tensor
  CHECK_THROWS_AS(dc::index_select(v, 0, I32{}), dc::error);
  // mixed devices: indices on a CUDA device for a host operand (refused before any copy)
  // (no CUDA tensor can be made in a host translation unit: the check itself, against a CUDA
  // operand's device)
  CHECK_THROWS_WITH_AS(dc::detail::require_index_tensor("dualcast::gather", I64::from({1}, {0}),
                                                        dc::device::cuda(0)),
                       Contains("indices on host but the operand on cuda:0"), dc::device_error);
  CHECK(tp.node_count() == 0);
  // A float tensor as indices, and an integer tape variable, do not compile (static_assert in
  // detail::require_index_tensor and dualcast::var).
}
