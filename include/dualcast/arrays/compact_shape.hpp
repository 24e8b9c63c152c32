// dualcast/arrays/compact_shape.hpp: a shape kept in 16 bytes where a dualcast::shape takes 72.
//
// A tape keeps a shape in every gradient slot and in every fused node, two slots and a node per
// layer-step of a D-LSTM: at 72 bytes each they were about a third of a fused node's bookkeeping
// (issue 36). Nearly every shape there has at most three dimensions of fewer than 2^32 elements,
// which fit inline; any other is kept whole in a block of its own.
#pragma once

#include <dualcast/arrays/shape.hpp>

#include <cstdint>

namespace dualcast::detail {

class compact_shape {
public:
  compact_shape() = default;
  compact_shape(shape const &s) { set(s); } // NOLINT(google-explicit-constructor): as a shape
  // (copied field by field: through a shape on the stack, a wide load of the shape waited on the
  // narrower stores that had just written it -- 4 % of recording a plain-operator D-LSTM)
  compact_shape(compact_shape const &o) { copy(o); }
  compact_shape(compact_shape &&o) noexcept { take(o); }
  compact_shape &operator=(compact_shape const &o) {
    if (this != &o) {
      drop();
      copy(o);
    }
    return *this;
  }
  compact_shape &operator=(compact_shape &&o) noexcept {
    if (this != &o) {
      drop();
      take(o);
    }
    return *this;
  }
  compact_shape &operator=(shape const &s) {
    drop();
    set(s);
    return *this;
  }
  ~compact_shape() { drop(); }

  // The shape itself (a copy: 72 bytes on the stack).
  shape get() const {
    if (rank_ < 0)
      return *whole_;
    shape s;
    s.rank = rank_;
    for (int d = 0; d < rank_; ++d)
      s.ext[d] = at(d);
    return s;
  }
  operator shape() const { return get(); } // NOLINT(google-explicit-constructor)
  int rank() const { return rank_ < 0 ? whole_->rank : rank_; }
  index_t size() const {
    if (rank_ < 0)
      return whole_->size();
    index_t n = 1;
    for (int d = 0; d < rank_; ++d)
      n *= at(d);
    return n;
  }
  // (Compared in place: a shape made on the stack element by element and read back whole soon
  // after waits for those stores -- a store-forwarding stall, 3 % of a small D-LSTM's gradient.)
  friend bool operator==(compact_shape const &a, shape const &b) {
    if (a.rank_ < 0)
      return *a.whole_ == b;
    if (a.rank_ != b.rank)
      return false;
    for (int d = 0; d < a.rank_; ++d)
      if (a.at(d) != b.ext[d])
        return false;
    return true;
  }
  friend bool operator==(shape const &a, compact_shape const &b) { return b == a; }
  friend bool operator==(compact_shape const &a, compact_shape const &b) {
    if (b.rank_ < 0)
      return a == *b.whole_;
    if (a.rank_ < 0)
      return b == *a.whole_;
    if (a.rank_ != b.rank_)
      return false;
    for (int d = 0; d < a.rank_; ++d)
      if (a.at(d) != b.at(d))
        return false;
    return true;
  }

private:
  static constexpr int inline_rank = 3;
  void set(shape const &s) {
    bool fits = s.rank <= inline_rank;
    for (int d = 0; fits && d < s.rank; ++d)
      fits = s.ext[d] <= index_t(UINT32_MAX);
    if (!fits) {
      whole_ = new shape(s);
      rank_ = -1;
      return;
    }
    for (int d = 0; d < s.rank; ++d)
      (d < 2 ? first_[d] : third_) = std::uint32_t(s.ext[d]);
    rank_ = s.rank;
  }
  void copy(compact_shape const &o) {
    if (o.rank_ < 0) {
      whole_ = new shape(*o.whole_);
    } else {
      first_[0] = o.first_[0];
      first_[1] = o.first_[1];
    }
    third_ = o.third_;
    rank_ = o.rank_;
  }
  void take(compact_shape &o) {
    if (o.rank_ < 0) {
      whole_ = o.whole_;
    } else {
      first_[0] = o.first_[0];
      first_[1] = o.first_[1];
    }
    third_ = o.third_;
    rank_ = o.rank_;
    o.rank_ = 0; // (o keeps no block to free)
  }
  void drop() {
    if (rank_ < 0)
      delete whole_;
    rank_ = 0;
  }
  index_t at(int d) const { return index_t(d < 2 ? first_[d] : third_); }
  // The extents, or (rank_ < 0) the whole shape's block in place of the first two.
  union {
    std::uint32_t first_[2] = {};
    shape *whole_;
  };
  std::uint32_t third_ = 0;
  std::int32_t rank_ = 0;
};
static_assert(sizeof(compact_shape) == 16);

} // namespace dualcast::detail
