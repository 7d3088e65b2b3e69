// Turns fuzzer bytes into values: each Take reads the next bytes (zeros once exhausted), so
// every input decodes to something and the decoders never fail.
#ifndef MLAPS_TESTS_FUZZ_BYTE_READER_H_
#define MLAPS_TESTS_FUZZ_BYTE_READER_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace mlaps::fuzz {

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  template <typename T>
  T Take() {
    T v{};
    const size_t n = std::min(sizeof(T), size_ - pos_);
    if (n > 0) std::memcpy(&v, data_ + pos_, n);
    pos_ += n;
    return v;
  }
  // A value in [lo, hi] (inclusive), from one to four bytes.
  int64_t InRange(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    const uint64_t raw = span <= 256     ? Take<uint8_t>()
                         : span <= 65536 ? Take<uint16_t>()
                                         : Take<uint32_t>();
    return lo + static_cast<int64_t>(raw % span);
  }
  bool Bool() { return Take<uint8_t>() & 1; }
  bool empty() const { return pos_ >= size_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// The other direction, for writing seeds that decode to known values.
class ByteWriter {
 public:
  template <typename T>
  void Put(T v) {
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void PutRange(int64_t value, int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    const uint64_t raw = static_cast<uint64_t>(value - lo);
    if (span <= 256) {
      Put<uint8_t>(static_cast<uint8_t>(raw));
    } else if (span <= 65536) {
      Put<uint16_t>(static_cast<uint16_t>(raw));
    } else {
      Put<uint32_t>(static_cast<uint32_t>(raw));
    }
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

}  // namespace mlaps::fuzz

#endif  // MLAPS_TESTS_FUZZ_BYTE_READER_H_
