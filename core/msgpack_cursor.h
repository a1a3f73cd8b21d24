// A forward-only reader over msgpack bytes for the decoders' fast paths (core/codec.cc,
// worker/worker_protocol.cc): each call reads one value of the expected type, or answers false
// and leaves the cursor where it was. It never throws, never allocates and never reads past
// the end. A fast path that gets a false hands the whole frame to its full decoder (which
// unpacks it under wire::UnpackBounded and names the error), so the cursor only needs to say
// "not the common shape", never why.
//
// Limits mirror msgpack-c's (and so wire::UnpackBounded's): no array holds more elements, and
// no string more bytes, than the frame has bytes or than the caller's limits allow.
#ifndef VLLM_CORE_MSGPACK_CURSOR_H_
#define VLLM_CORE_MSGPACK_CURSOR_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>

namespace vllm::core {

class MsgpackCursor {
 public:
  MsgpackCursor(const void* data, size_t size, size_t max_array = SIZE_MAX,
                size_t max_str = SIZE_MAX)
      : p_(static_cast<const uint8_t*>(data)),
        end_(p_ + size),
        max_array_(max_array < size ? max_array : size),
        max_str_(max_str < size ? max_str : size) {}

  bool at_end() const { return p_ == end_; }
  const uint8_t* position() const { return p_; }

  // Consumes a nil when one is next.
  bool Nil() {
    if (p_ == end_ || *p_ != 0xc0) return false;
    ++p_;
    return true;
  }
  bool Bool(bool* out) {
    if (p_ == end_ || (*p_ != 0xc2 && *p_ != 0xc3)) return false;
    *out = *p_++ == 0xc3;
    return true;
  }
  // An array header: its element count (within the limits) in *n.
  bool Array(uint32_t* n) {
    if (p_ == end_) return false;
    const uint8_t b = *p_;
    uint64_t count;
    size_t width;
    if ((b & 0xf0) == 0x90) {
      count = b & 0x0f;
      width = 0;
    } else if (b == 0xdc) {
      width = 2;
      if (!Big(p_ + 1, width, &count)) return false;
    } else if (b == 0xdd) {
      width = 4;
      if (!Big(p_ + 1, width, &count)) return false;
    } else {
      return false;
    }
    if (count > max_array_) return false;
    p_ += 1 + width;
    *n = static_cast<uint32_t>(count);
    return true;
  }
  // An array header that must announce exactly `n` elements.
  bool ArrayOf(uint32_t n) {
    const uint8_t* start = p_;
    uint32_t got = 0;
    if (Array(&got) && got == n) return true;
    p_ = start;
    return false;
  }
  // A string (a view into the frame) of at most `max_bytes` bytes.
  bool Str(size_t max_bytes, std::string_view* out) {
    if (p_ == end_) return false;
    const uint8_t b = *p_;
    uint64_t len;
    size_t width;
    if ((b & 0xe0) == 0xa0) {
      len = b & 0x1f;
      width = 0;
    } else if (b >= 0xd9 && b <= 0xdb) {
      width = size_t{1} << (b - 0xd9);
      if (!Big(p_ + 1, width, &len)) return false;
    } else {
      return false;
    }
    if (len > max_str_ || len > max_bytes) return false;
    const uint8_t* data = p_ + 1 + width;
    if (len > static_cast<size_t>(end_ - data)) return false;
    *out = std::string_view(reinterpret_cast<const char*>(data), len);
    p_ = data + len;
    return true;
  }
  // An integer of any msgpack width whose value fits T (the range check of
  // wire::FieldReader::ReadInt).
  template <typename T>
  bool Int(T* out) {
    static_assert(std::is_integral_v<T>);
    if (p_ == end_) return false;
    const uint8_t b = *p_;
    uint64_t u = 0;
    bool negative = false;
    size_t width = 0;
    if (b <= 0x7f) {
      u = b;
    } else if (b >= 0xe0) {
      u = static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(b)));
      negative = true;
    } else if (b >= 0xcc && b <= 0xcf) {
      width = size_t{1} << (b - 0xcc);
      if (!Big(p_ + 1, width, &u)) return false;
    } else if (b >= 0xd0 && b <= 0xd3) {
      width = size_t{1} << (b - 0xd0);
      if (!Big(p_ + 1, width, &u)) return false;
      const int shift = static_cast<int>(64 - 8 * width);
      const int64_t s = static_cast<int64_t>(u << shift) >> shift;  // sign-extend
      negative = s < 0;
      u = static_cast<uint64_t>(s);
    } else {
      return false;
    }
    if (negative) {
      const int64_t s = static_cast<int64_t>(u);
      if constexpr (std::is_signed_v<T>) {
        if (s < static_cast<int64_t>(std::numeric_limits<T>::min())) return false;
      } else {
        return false;
      }
      *out = static_cast<T>(s);
    } else {
      if (u > static_cast<uint64_t>(std::numeric_limits<T>::max())) return false;
      *out = static_cast<T>(u);
    }
    p_ += 1 + width;
    return true;
  }
  // An array of integers that fit T, into `out` (std::vector-like: resize, operator[]).
  template <typename Container>
  bool IntList(Container* out) {
    const uint8_t* start = p_;
    uint32_t n = 0;
    if (!Array(&n)) return false;
    out->resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      if (!Int(&(*out)[i])) {
        p_ = start;
        return false;
      }
    }
    return true;
  }
  // An array of strings of at most `max_bytes` each, into `out` (a vector of std::string;
  // existing elements' capacity is reused).
  template <typename Container>
  bool StrList(size_t max_bytes, Container* out) {
    const uint8_t* start = p_;
    uint32_t n = 0;
    if (!Array(&n)) return false;
    out->resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      std::string_view s;
      if (!Str(max_bytes, &s)) {
        p_ = start;
        return false;
      }
      (*out)[i].assign(s.data(), s.size());
    }
    return true;
  }

 private:
  // A big-endian unsigned integer of `width` bytes at `at`, when that many bytes remain.
  bool Big(const uint8_t* at, size_t width, uint64_t* out) const {
    if (width > static_cast<size_t>(end_ - at)) return false;
    uint64_t v = 0;
    for (size_t i = 0; i < width; ++i) v = (v << 8) | at[i];
    *out = v;
    return true;
  }

  const uint8_t* p_;
  const uint8_t* end_;
  size_t max_array_;
  size_t max_str_;
};

}  // namespace vllm::core

#endif  // VLLM_CORE_MSGPACK_CURSOR_H_
