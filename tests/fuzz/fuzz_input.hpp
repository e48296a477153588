#pragma once
// Reads typed values off a fuzzer's byte string; past the end every read returns 0, so any
// input decodes to something.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace dcp::fuzz {

class input {
 public:
  input(const std::uint8_t* data, std::size_t size) : bytes_(data, size) {}

  bool empty() const noexcept { return pos_ >= bytes_.size(); }
  std::uint8_t byte() noexcept { return pos_ < bytes_.size() ? bytes_[pos_++] : 0; }
  std::uint32_t u16() noexcept { return std::uint32_t{byte()} | (std::uint32_t{byte()} << 8); }
  std::uint32_t u24() noexcept { return u16() | (std::uint32_t{byte()} << 16); }
  std::string rest() {
    std::string s(reinterpret_cast<const char*>(bytes_.data()) + pos_, bytes_.size() - pos_);
    pos_ = bytes_.size();
    return s;
  }

 private:
  std::span<const std::uint8_t> bytes_;
  std::size_t pos_ = 0;
};

}  // namespace dcp::fuzz
