// dualcast/backend/stream.hpp: which CUDA stream a thread's device work goes on.
//
//   cudaStream_t s;  cudaStreamCreate(&s);
//   dualcast::tape tp{s};                      // the tape's operations and backward run on s
//   {
//     dualcast::stream_scope scope(s);         // tensor work on this thread runs on s
//     auto x = X.to(dualcast::device::cuda()); // (a copy on s)
//   }                                          // the stream from before comes back
//
// A stream_handle is a CUDA stream as an opaque pointer, so that host code (and the tape's
// headers) name streams without the CUDA headers; null is the default stream. current_stream() is
// the stream of this thread's CUDA work outside an executor's explicit `dualcast::cuda{stream}`:
// the tape's operations on CUDA tensors, tensor copies and fills, the memory pool's allocations.
// It is thread-local (the default stream unless a stream_scope is open), so two threads may drive
// two tapes on two streams. Host tensors ignore streams.
#pragma once

namespace dualcast {

class stream_handle {
public:
  constexpr stream_handle() = default;
  // Any stream pointer (cudaStream_t is a pointer to an incomplete type); implicit, so that
  // `dualcast::tape tp{s}` and `tp.stream = s` take a cudaStream_t as it is.
  template <class S>
  constexpr stream_handle(S *s) noexcept // NOLINT(google-explicit-constructor)
      : s_(static_cast<void *>(s)) {}

  // The stream as a pointer (a cudaStream_t after static_cast); null: the default stream.
  constexpr void *get() const noexcept { return s_; }
  constexpr bool is_default() const noexcept { return s_ == nullptr; }
  friend constexpr bool operator==(stream_handle const &, stream_handle const &) = default;

private:
  void *s_ = nullptr;
};

namespace detail {
inline stream_handle &current_stream_slot() noexcept {
  thread_local stream_handle s{};
  return s;
}
} // namespace detail

// The stream this thread's CUDA work goes on (the default stream unless a stream_scope is open).
inline stream_handle current_stream() noexcept { return detail::current_stream_slot(); }

// Makes s this thread's current stream for its lifetime, then puts back the one it found. Scopes
// nest; a scope belongs to the thread that opened it.
class stream_scope {
public:
  explicit stream_scope(stream_handle s) noexcept : saved_(detail::current_stream_slot()) {
    detail::current_stream_slot() = s;
  }
  stream_scope(stream_scope const &) = delete;
  stream_scope &operator=(stream_scope const &) = delete;
  ~stream_scope() { detail::current_stream_slot() = saved_; }

private:
  stream_handle saved_;
};

namespace detail {
// A stream_scope that is opened only when `on` (otherwise it touches no thread-local state): the
// tape opens its stream around work on CUDA tensors only, so host tensors' paths stay as they were.
class stream_scope_if {
public:
  stream_scope_if(stream_handle s, bool on) noexcept : on_(on) {
    if (on_) {
      saved_ = current_stream_slot();
      current_stream_slot() = s;
    }
  }
  stream_scope_if(stream_scope_if const &) = delete;
  stream_scope_if &operator=(stream_scope_if const &) = delete;
  ~stream_scope_if() {
    if (on_)
      current_stream_slot() = saved_;
  }

private:
  stream_handle saved_{};
  bool on_;
};
} // namespace detail

} // namespace dualcast
