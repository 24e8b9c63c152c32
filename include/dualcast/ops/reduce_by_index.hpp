// dualcast/ops/reduce_by_index.hpp: reduce-by-index (a histogram) with +, *, min or max, on tape
// variables and on tensors.
//
//   dualcast::reduce_by_index(v, idx, bins, dualcast::bin_op::plus);  // y[idx[i]] += v[i]
//   dualcast::reduce_by_index(v, idx, bins, dualcast::bin_op::max);   // y[b] = max of its v[i]
//
// `values` has shape (n, ...) and `indices` n entries (a std::vector<index_t>, as for
// index_select): row i of the values goes to bin indices[i] along axis 0, so the result has
// shape (bins, ...) (the trailing axes are reduced elementwise, bin by bin). An index outside
// [0, bins) is ignored: its row contributes to no bin and gets no gradient (Futhark's
// semantics). An empty bin keeps the neutral element: 0 for plus, 1 for times, +inf for min,
// -inf for max. The rows of one bin combine in increasing index order (plus with few bins: in
// chunks of 65536 rows, each chunk's sum in row order, the chunks' sums then in order).
//
// Adjoints (Futhark's rules):
//   plus   a gather: vbar_i = ybar[indices[i]] (0 out of range) -- no atomics;
//   min / max  through the arg-min / arg-max per bin: the winning row gets ybar, the others 0;
//          the winner is the FIRST row reaching the extremum (ties: the lowest index, as
//          dualcast::max / cummax); NaN propagates (a NaN row wins, the first one);
//   times  the zero-count rule per bin (z zeros, p the product of the non-zeros): v_i gets
//          ybar * p / v_i where z == 0, ybar * p at the one zero where z == 1, 0 otherwise --
//          never a division by zero.
// A term ybar * partial is 0 where ybar is 0.
//
// Work: plus with few bins (chunks of 65536 rows times bins <= rows) needs no sort: each chunk of
// rows adds into a histogram of its own, in parallel, then the chunks' histograms are added bin
// by bin (one pass over the values, no gather; 10^7 rows into 1000 bins took 143 ms on two CPU
// cores through the sort). Otherwise the rows are sorted by bin once on the host (a counting sort
// of the indices, O(n + bins)) and the forward reduces each (bin, trailing position) in
// parallel, its rows in order. Either way the result is the same bits at any number of threads.
// Backward: plus one gather per element; times / min / max one thread per (bin, trailing position)
// recomputing from the saved values (two passes over the bin's rows), each writing only its own
// rows' gradients. A bin holding most rows runs on one thread.
#pragma once

#include <dualcast/core/errors.hpp>
#include <dualcast/ops/detail/dual_parts.hpp>
#include <dualcast/ops/detail/float16_tape.hpp>
#include <dualcast/ops/groups.hpp>
#include <dualcast/ops/indexing.hpp>
#include <dualcast/tape/custom_op.hpp>
#include <dualcast/tape/tape.hpp>
#include <dualcast/tensor/detail/device_dispatch.hpp>
#include <dualcast/tensor/tensor.hpp>

#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace dualcast {

// The operator of reduce_by_index.
enum class bin_op { plus, times, min, max };

namespace detail {

// The rows of each bin: order[start[b] .. start[b + 1]) are bin b's rows, increasing; idx the
// indices themselves. All on the values' device. chunk: rows per chunk of the privatized plus.
// privatized: the privatized plus serves (no sort); otherwise start / order are undefined only
// for `plus` of 1-D values on a device, sorted in the forward (bins_forward_run).
struct bin_rows {
  tensor<index_t> start, order, idx;
  index_t n = 0, bins = 0, chunk = 0;
  bool privatized = false;
};

// Rows per chunk of the privatized `plus` forward: chunk c adds its rows into a histogram of its
// own, the chunks' histograms are then added in order. Used where the chunks' histograms take no
// more room than the values (chunks * bins <= n); elsewhere the rows are sorted by bin. A
// decision on the shape and device alone: the same bits at any number of threads. A CPU thread
// takes a chunk of 65536 rows at a time (two threads: 153 chunks for 10^7 rows); a GPU needs
// thousands of chunks in flight, not 153 threads each adding 65536 rows, so there a chunk is
// 1024 rows and the privatized form serves up to 1024 bins (not yet measured on a GPU).
inline index_t bin_chunk_rows(device const &dev) { return dev.is_host() ? 65536 : 1024; }
inline index_t bin_chunks(index_t n, index_t chunk) { return (n + chunk - 1) / chunk; }
inline bool bins_privatized(bin_op op, index_t n, index_t bins, index_t chunk) {
  return op == bin_op::plus && bins > 0 && n > 0 && bin_chunks(n, chunk) * bins <= n;
}

// r.start / r.order from r.idx: on the device where the executor sorts there
// (backend_sort_by_bin: CUDA with cuda_primitives::sorted_histogram == cub; the indices stay on
// the device), else a counting sort on the host (O(n + bins); device indices copied to the host
// and the result back). Either way each bin's rows in increasing order: the same numbers.
template <class Ex> void sort_rows(Ex const &ex, char const *op, bin_rows &r, device const &dev) {
  if (!dev.is_host()) {
    auto start = tensor<index_t>::empty({r.bins + 1}, dev);
    auto order = tensor<index_t>::empty({r.n}, dev);
    if (backend_sort_by_bin(hook{}, ex, r.idx.data(), r.n, r.bins, start.raw_data(),
                            order.raw_data())) {
      r.start = std::move(start), r.order = std::move(order);
      return;
    }
  }
  std::vector<index_t> const host = r.idx.to_vector();
  std::vector<index_t> start(std::size_t(r.bins) + 1, 0), order;
  for (index_t k : host)
    if (k >= 0 && k < r.bins)
      ++start[std::size_t(k) + 1];
  for (index_t b = 0; b < r.bins; ++b)
    start[std::size_t(b) + 1] += start[std::size_t(b)];
  order.resize(std::size_t(start[std::size_t(r.bins)]));
  std::vector<index_t> next(start.begin(), start.end() - 1);
  for (index_t i = 0; i < r.n; ++i) {
    index_t const k = host[std::size_t(i)];
    if (k >= 0 && k < r.bins)
      order[std::size_t(next[std::size_t(k)]++)] = i;
  }
  r.start = upload_indices(op, start, dev);
  r.order = upload_indices(op, order, dev);
}

// The indices on dev (a 1-D integer tensor of n entries there, used in place where it holds
// contiguous index_t, else widened on dev), and unless the privatized `plus` serves op
// (bins_privatized) the rows by bin (sort_rows), except for `plus` of 1-D values (inner == 1)
// on a device: its backward needs no sort, and its forward may sum each bin without one
// (bins_forward_run).
template <class I>
bin_rows sort_by_bin(char const *op, tensor<I> const &indices, index_t n, index_t bins, bin_op bop,
                     device const &dev, index_t inner) {
  require_index_tensor(op, indices, dev);
  if (bins < 0)
    throw shape_error(std::string(op) + ": negative number of bins " + std::to_string(bins));
  if (indices.rank() != 1)
    throw shape_error(std::string(op) + ": indices of shape " + to_string(indices.dims()) +
                      " (want one axis)");
  if (indices.size() != n)
    throw shape_error(std::string(op) + ": " + std::to_string(indices.size()) + " indices for " +
                      std::to_string(n) + " rows of values");
  bin_rows r;
  r.idx = widened_indices(op, ambient_cpu(), indices);
  r.n = n;
  r.bins = bins;
  r.chunk = bin_chunk_rows(dev);
  r.privatized = bins_privatized(bop, n, bins, r.chunk);
  if (r.privatized || (bop == bin_op::plus && inner == 1 && !dev.is_host()))
    return r;
  on_device(op, dev, ambient_cpu(), [&](auto const &ex) { sort_rows(ex, op, r, dev); });
  return r;
}

template <class T, bool Max> DUALCAST_HD bool bin_takes(T prev, T x) {
  return (Max ? x > prev : x < prev) || (x != x && prev == prev);
}

// The rows of bin t / inner at trailing position t % inner.
struct bin_cursor {
  index_t const *start, *order;
  index_t inner;
};

// Forward: y at (bin b, trailing position c) = the bin's rows combined in order.
template <class T> struct bins_forward {
  T const *x;
  T *y;
  bin_cursor rows;
  bin_op op;
  T neutral; // of min / max (set on the host: no std::numeric_limits in device code)
  DUALCAST_HD void operator()(index_t t) const {
    index_t const b = t / rows.inner, c = t % rows.inner;
    index_t const i0 = rows.start[b], i1 = rows.start[b + 1];
    T acc = T(0);
    if (op == bin_op::plus) {
      for (index_t m = i0; m < i1; ++m)
        acc += x[rows.order[m] * rows.inner + c];
    } else if (op == bin_op::times) {
      T p = T(1);
      bool zero = false;
      for (index_t m = i0; m < i1; ++m) {
        T const v = x[rows.order[m] * rows.inner + c];
        if (v == T(0))
          zero = true;
        else
          p *= v;
      }
      acc = zero ? p * T(0) : p;
    } else {
      bool const mx = op == bin_op::max;
      acc = neutral;
      for (index_t m = i0; m < i1; ++m) {
        T const v = x[rows.order[m] * rows.inner + c];
        if (m == i0 || (mx ? bin_takes<T, true>(acc, v) : bin_takes<T, false>(acc, v)))
          acc = v;
      }
    }
    y[t] = acc;
  }
};

// The privatized `plus`, pass 1: chunk c's rows added, in order, into its own histogram
// part[c * bins * inner ...] (out-of-range indices skipped).
template <class T> struct bins_chunk_sums {
  T const *x;
  T *part;
  index_t const *idx;
  index_t n, inner, bins, chunk;
  DUALCAST_HD void operator()(index_t c) const {
    T *p = part + c * bins * inner;
    for (index_t t = 0; t < bins * inner; ++t)
      p[t] = T(0);
    index_t const i1 = n - c * chunk < chunk ? n : (c + 1) * chunk;
    // One loop over the chunk's rows, instantiated without the loop over a row's values where a
    // row holds one (10^7 rows into 1000 bins, 2 CPU threads: the forward 29 -> 19 ms). Not
    // unrolled on CUDA: unrolled, ptxas spilled the double one for sm_90.
    auto add_rows = [&](auto one_value) {
#if defined(__CUDA_ARCH__)
#pragma unroll 1
#endif
      for (index_t i = c * chunk; i < i1; ++i) {
        index_t const k = idx[i];
        if (k < 0 || k >= bins)
          continue;
        if constexpr (decltype(one_value)::value)
          p[k] += x[i];
        else
          for (index_t e = 0; e < inner; ++e)
            p[k * inner + e] += x[i * inner + e];
      }
    };
    if (inner == 1)
      add_rows(std::true_type{});
    else
      add_rows(std::false_type{});
  }
};
// Pass 2: y[t] = the chunks' histograms at t added in chunk order, `group` chunks per item: item
// u = g * size + t adds chunks [g * group, (g + 1) * group) at t in order (one group: y[t] the
// whole sum, one item per bin).
template <class T> struct bins_chunk_total {
  T const *part;
  T *y;
  index_t chunks, size, group; // size: bins * inner
  DUALCAST_HD void operator()(index_t u) const {
    index_t const g = u / size, t = u % size;
    index_t const c0 = g * group, c1 = chunks - c0 < group ? chunks : c0 + group;
    T acc = part[c0 * size + t];
    for (index_t c = c0 + 1; c < c1; ++c)
      acc += part[c * size + t];
    y[u] = acc;
  }
};
// Chunks per group of pass 2: all of them (one item per bin) up to 1024 chunks, as a CPU has (10^7
// rows: 153); a GPU's 1024-row chunks (9766 for 10^7 rows) in groups of 64, the groups' sums then
// added in order: one thread per bin summing 9766 chunks kept 4 of an H100's 132 SMs busy (1.78
// ms). A decision on the shape and the device alone: the same bits at any number of threads.
inline index_t bin_chunk_group(index_t chunks) { return chunks > 1024 ? 64 : chunks; }

// Backward of plus: a gather, one thread per element of the values.
template <class T> struct bins_gather {
  T const *gy;
  T *gx;
  index_t const *idx;
  index_t inner, bins;
  DUALCAST_HD void operator()(index_t e) const {
    index_t const k = idx[e / inner];
    gx[e] = k >= 0 && k < bins ? gy[k * inner + e % inner] : T(0);
  }
};

// Backward of times / min / max: one thread per (bin, trailing position) writes the gradients of
// the bin's rows there (rows outside every bin keep the zeros gx starts with).
template <class T> struct bins_backward {
  T const *x, *gy;
  T *gx;
  bin_cursor rows;
  bin_op op;
  DUALCAST_HD void operator()(index_t t) const {
    index_t const b = t / rows.inner, c = t % rows.inner;
    index_t const i0 = rows.start[b], i1 = rows.start[b + 1];
    T const ybar = gy[t];
    if (op == bin_op::times) {
      T p = T(1);
      index_t z = 0;
      for (index_t m = i0; m < i1; ++m) {
        T const v = x[rows.order[m] * rows.inner + c];
        if (v == T(0))
          ++z;
        else
          p *= v;
      }
      for (index_t m = i0; m < i1; ++m) {
        index_t const e = rows.order[m] * rows.inner + c;
        T d = T(0);
        if (z == 0)
          d = p / x[e];
        else if (z == 1 && x[e] == T(0))
          d = p;
        gx[e] = times_cotangent(ybar, d);
      }
    } else {
      bool const mx = op == bin_op::max;
      index_t w = i0;
      for (index_t m = i0 + 1; m < i1; ++m) {
        T const v = x[rows.order[m] * rows.inner + c], cur = x[rows.order[w] * rows.inner + c];
        if (mx ? bin_takes<T, true>(cur, v) : bin_takes<T, false>(cur, v))
          w = m;
      }
      for (index_t m = i0; m < i1; ++m)
        gx[rows.order[m] * rows.inner + c] = m == w ? times_cotangent(ybar, T(1)) : T(0);
    }
  }
};

inline shape bins_shape(shape s, index_t bins) {
  s.ext[0] = bins;
  return s;
}
inline index_t trailing_size(char const *op, shape const &s) {
  if (s.rank < 1)
    throw shape_error(std::string(op) + ": the values must have at least one axis (got shape " +
                      to_string(s) + ")");
  index_t inner = 1;
  for (int d = 1; d < s.rank; ++d)
    inner *= s.ext[d];
  return inner;
}

template <class Ex, class T>
tensor<T> bins_forward_run(Ex const &ex, tensor<T> const &xc, bin_rows const &br, bin_op op,
                           index_t inner) {
  auto y = tensor<T>::empty(bins_shape(xc.dims(), br.bins), xc.dev());
  if (br.privatized) {
    index_t const chunks = bin_chunks(br.n, br.chunk), size = br.bins * inner;
    auto part = tensor<T>::empty({chunks * size}, xc.dev());
    parallel_for(ex, chunks, br.chunk * inner,
                 bins_chunk_sums<T>{xc.data(), part.raw_data(), br.idx.data(), br.n, inner, br.bins,
                                    br.chunk});
    index_t const group = bin_chunk_group(chunks), groups = bin_chunks(chunks, group);
    if (groups == 1) {
      parallel_for(ex, size, chunks,
                   bins_chunk_total<T>{part.data(), y.raw_data(), chunks, size, chunks});
    } else {
      auto sums = tensor<T>::empty({groups * size}, xc.dev());
      parallel_for(ex, groups * size, group,
                   bins_chunk_total<T>{part.data(), sums.raw_data(), chunks, size, group});
      parallel_for(ex, size, groups,
                   bins_chunk_total<T>{sums.data(), y.raw_data(), groups, size, groups});
    }
    return y;
  }
  bin_rows sorted; // `plus` of 1-D values on a device (sort_by_bin): CUB's sorting histogram
  if (!br.order.defined()) {
    if (backend_histogram_plus(hook{}, ex, xc.data(), br.idx.data(), br.n, br.bins, y.raw_data()))
      return y;
    sorted = br; // else sorted here, for this forward only (the backward is a gather)
    sort_rows(ex, "dualcast::reduce_by_index", sorted, xc.dev());
  }
  bin_rows const &rows = br.order.defined() ? br : sorted;
  index_t const per_bin = br.bins > 0 ? br.n / br.bins + 1 : 1;
  if (br.bins * inner > 0)
    parallel_for(ex, br.bins * inner, per_bin,
                 bins_forward<T>{xc.data(),
                                 y.raw_data(),
                                 {rows.start.data(), rows.order.data(), inner},
                                 op,
                                 op == bin_op::max ? -std::numeric_limits<T>::infinity()
                                                   : std::numeric_limits<T>::infinity()});
  return y;
}

} // namespace detail

// reduce_by_index of a tensor: its value, on the tensor's device; the indices a 1-D integer
// tensor on that device (they stay there).
template <class T, class I>
tensor<T> reduce_by_index(tensor<T> const &values, tensor<I> const &indices, index_t bins,
                          bin_op op) {
  char const *name = "dualcast::reduce_by_index";
  index_t const inner = detail::trailing_size(name, values.dims());
  index_t const n = values.dims().ext[0];
  auto const br = detail::sort_by_bin(name, indices, n, bins, op, values.dev(), inner);
  return detail::on_device(name, values.dev(), detail::ambient_cpu(), [&](auto const &ex) {
    return detail::bins_forward_run(ex, values.contiguous(), br, op, inner);
  });
}

// The convenience: indices from the host, copied to the values' device.
template <class T>
tensor<T> reduce_by_index(tensor<T> const &values, std::vector<index_t> const &indices,
                          index_t bins, bin_op op) {
  return reduce_by_index(
      values, detail::upload_indices("dualcast::reduce_by_index", indices, values.dev()), bins, op);
}

// reduce_by_index of a tape variable or lazy expression.
template <var_like X, class I>
auto reduce_by_index(X const &values, tensor<I> const &indices, index_t bins, bin_op op) {
  DUALCAST_REFUSE_FLOAT16("reduce_by_index", X);
  using T = typename detail::var_of_t<X>::value_type;
  char const *name = "dualcast::reduce_by_index";
  auto const &v = detail::as_var(values);
  index_t const inner = detail::trailing_size(name, v.dims());
  auto const on_stream = detail::tape_stream_scope(v.owner(), v.value().dev());
  index_t const n = v.dims().ext[0];
  if constexpr (is_dual_v<T>) {
    // On a tape over duals (host only) plus only: linear, so the plain histogram (forward) and its
    // gather (backward) run on the value and on each partial apart. The operator is a run-time
    // value, hence a run-time refusal for the others.
    if (op != bin_op::plus)
      throw tape_error(std::string(name) +
                       ": on a tape over duals (dual<T, K> elements) only bin_op::plus is "
                       "supported yet; docs/higher-order.md lists the operations that are");
    using R = detail::real_part_t<T>;
    auto const br = detail::sort_by_bin(name, indices, n, bins, op, v.value().dev(), inner);
    return custom_op(
        "reduce_by_index",
        [&](auto const &ex, auto &, tensor<T> const &xv) {
          return detail::dual_componentwise(xv, [&](tensor<R> const &c) {
            return detail::bins_forward_run(ex, c, br, op, inner);
          });
        },
        [br, inner](auto const &ex, auto const &, auto &g) {
          if (!g.needs(0) || br.n * inner == 0)
            return;
          shape const xs = g.input_shape(0);
          g.add(0, detail::dual_componentwise(g.out(0), [&](tensor<R> const &gy) {
                  auto gx = tensor<R>::empty(xs, gy.dev());
                  detail::parallel_for(ex, br.n * inner, 1,
                                       detail::bins_gather<R>{gy.data(), gx.raw_data(),
                                                              br.idx.data(), inner, br.bins});
                  return gx;
                }));
        },
        v);
  } else {
    auto const br = detail::sort_by_bin(name, indices, n, bins, op, v.value().dev(), inner);
    return custom_op(
        "reduce_by_index",
        [&](auto const &ex, auto &ctx, tensor<T> const &xv) {
          tensor<T> xc = xv.contiguous();
          if (op != bin_op::plus)
            ctx.save(xc, "values");
          return detail::bins_forward_run(ex, xc, br, op, inner);
        },
        [br, op, inner](auto const &ex, auto const &ctx, auto &g) {
          index_t const ne = br.n * inner;
          if (!g.needs(0) || ne == 0)
            return;
          tensor<T> gy = g.out(0).contiguous();
          device const dev = gy.dev();
          if (op == bin_op::plus) {
            auto gx = tensor<T>::empty(g.input_shape(0), dev);
            detail::parallel_for(
                ex, ne, 1,
                detail::bins_gather<T>{gy.data(), gx.raw_data(), br.idx.data(), inner, br.bins});
            g.add(0, std::move(gx));
            return;
          }
          auto gx = tensor<T>::zeros(g.input_shape(0), dev);
          index_t const per_bin = br.bins > 0 ? 2 * (br.n / br.bins + 1) : 1;
          if (br.bins * inner > 0)
            detail::parallel_for(ex, br.bins * inner, per_bin,
                                 detail::bins_backward<T>{ctx.saved(0).data(),
                                                          gy.data(),
                                                          gx.raw_data(),
                                                          {br.start.data(), br.order.data(), inner},
                                                          op});
          g.add(0, std::move(gx));
        },
        v);
  }
}

// The convenience: indices from the host, copied to the values' device.
template <var_like X>
auto reduce_by_index(X const &values, std::vector<index_t> const &indices, index_t bins,
                     bin_op op) {
  auto const &v = detail::as_var(values);
  auto const on_stream = detail::tape_stream_scope(v.owner(), v.value().dev());
  return reduce_by_index(
      v, detail::upload_indices("dualcast::reduce_by_index", indices, v.value().dev()), bins, op);
}

} // namespace dualcast
