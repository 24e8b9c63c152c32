// dualcast/distributed/sampler.hpp: which items of a data set each rank trains on.
//
//   dualcast::distributed::sampler s(n_items, global_batch, comm.rank(), comm.size(), seed);
//   std::vector<dualcast::index_t> mine = s.next();   // this rank's part of the next batch
//
// Every rank shuffles the same way (one seed, one permutation per epoch) and takes its own slice
// of each global batch, so the ranks together see exactly the batches one process would with the
// same seed, and the mean of the ranks' mean losses is the batch's mean loss (the global batch
// divides evenly among the ranks: checked).
#pragma once

#include <dualcast/arrays/shape.hpp>
#include <dualcast/core/errors.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace dualcast::distributed {

// Rank `rank`'s contiguous part [begin, end) of n items split among `size` ranks as evenly as can
// be (the first n % size ranks get one more).
struct item_range {
  index_t begin, end;
};
inline item_range shard_of(index_t n, int rank, int size) {
  if (size <= 0 || rank < 0 || rank >= size || n < 0)
    throw index_error("dualcast::distributed::shard_of: rank " + std::to_string(rank) + " of " +
                      std::to_string(size) + " ranks, " + std::to_string(n) + " items");
  index_t const base = n / size, extra = n % size;
  index_t const begin = rank * base + std::min<index_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

class sampler {
public:
  sampler(index_t items, index_t global_batch, int rank, int size, std::uint64_t seed)
      : items_(items), batch_(global_batch), rank_(rank), size_(size), rng_(seed) {
    if (items <= 0 || global_batch <= 0 || global_batch > items)
      throw shape_error("dualcast::distributed::sampler: a global batch of " +
                        std::to_string(global_batch) + " from " + std::to_string(items) + " items");
    if (global_batch % size != 0)
      throw shape_error("dualcast::distributed::sampler: the global batch (" +
                        std::to_string(global_batch) + ") must divide evenly among the " +
                        std::to_string(size) + " ranks, so that every rank's mean has one weight");
    (void)shard_of(global_batch, rank, size); // (checks rank and size)
    order_.resize(std::size_t(items));
  }
  // This rank's items of the next global batch (a new permutation when an epoch runs out; the
  // items left over at an epoch's end are skipped).
  std::vector<index_t> next() {
    if (at_ == 0 || at_ + batch_ > items_) {
      std::iota(order_.begin(), order_.end(), index_t(0));
      std::shuffle(order_.begin(), order_.end(), rng_);
      at_ = 0;
      ++epoch_;
    }
    item_range const r = shard_of(batch_, rank_, size_);
    std::vector<index_t> mine(order_.begin() + (at_ + r.begin), order_.begin() + (at_ + r.end));
    at_ += batch_;
    return mine;
  }
  index_t epoch() const { return epoch_; }

private:
  index_t items_, batch_;
  int rank_, size_;
  std::mt19937_64 rng_;
  std::vector<index_t> order_;
  index_t at_ = 0, epoch_ = 0;
};

} // namespace dualcast::distributed
