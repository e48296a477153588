#pragma once
// Helpers shared by every test area (linked through the `dcp_test_support` target, which
// `dcp_add_test` adds): a seeded generator that prints its seed and draws the same numbers on
// every standard library, and `EXPECT_DCP_ERROR`, the one way a test says "this input is
// rejected with this error code and a message naming these values".

#include <dcp/error.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <iostream>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace dcp_test {

/// Seeded draws that do not depend on the standard library's distributions (those differ
/// between implementations; mt19937_64's raw output does not). The seed is printed when the
/// generator is made and recorded as the test's `seed` property, so a failure can be replayed.
/// A UniformRandomBitGenerator, so `std::shuffle(v.begin(), v.end(), g)` works directly.
class rng {
 public:
  using result_type = std::uint64_t;

  explicit rng(std::uint64_t seed) : seed_(seed), g_(seed) {
    std::cout << "[     SEED ] " << seed << '\n';
    if (::testing::UnitTest::GetInstance()->current_test_info() != nullptr)
      ::testing::Test::RecordProperty("seed", std::to_string(seed));
  }

  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return ~result_type{0}; }
  result_type operator()() { return g_(); }
  std::uint64_t seed() const { return seed_; }

  /// Uniform integer in [lo, hi].
  std::int64_t between(std::int64_t lo, std::int64_t hi) {
    return lo + static_cast<std::int64_t>(g_() % static_cast<std::uint64_t>(hi - lo + 1));
  }
  /// Uniform double in [0, 1).
  double unit() { return static_cast<double>(g_() >> 11) * 0x1.0p-53; }
  /// Log-uniform integer in [lo, hi]: lengths spread evenly over orders of magnitude.
  std::int64_t log_between(std::int64_t lo, std::int64_t hi) {
    const double a = std::log(static_cast<double>(lo)), b = std::log(static_cast<double>(hi) + 1);
    return std::clamp(static_cast<std::int64_t>(std::exp(a + (b - a) * unit())), lo, hi);
  }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[static_cast<std::size_t>(between(0, static_cast<std::int64_t>(v.size()) - 1))];
  }

 private:
  std::uint64_t seed_;
  std::mt19937_64 g_;
};

/// The message of the `dcp::error` that `f` throws (a marker when it throws none).
inline std::string message_of(auto&& f) {
  try {
    f();
  } catch (const dcp::error& e) {
    return e.what();
  }
  return "<no dcp::error thrown>";
}

/// Success iff `f` throws a `dcp::error` whose code is `code` and whose message contains every
/// fragment; the failure says which of the three went wrong and prints the message.
template <class F>
::testing::AssertionResult throws_dcp_error(const char* statement, F&& f, std::error_code code,
                                            std::initializer_list<std::string_view> fragments) {
  auto describe = [](std::error_code c) { return std::string(c.category().name()) + ":" + c.message(); };
  try {
    f();
  } catch (const dcp::error& e) {
    const std::string what = e.what();
    if (e.code() != code)
      return ::testing::AssertionFailure() << statement << " threw " << describe(e.code()) << ", expected "
                                           << describe(code) << "; message: " << what;
    for (auto fragment : fragments)
      if (what.find(fragment) == std::string::npos)
        return ::testing::AssertionFailure() << statement << " threw a message without \"" << fragment
                                             << "\": " << what;
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << statement << " threw a non-dcp exception: " << e.what();
  }
  return ::testing::AssertionFailure() << statement << " threw nothing; expected " << describe(code);
}

}  // namespace dcp_test

/// EXPECT_DCP_ERROR(statement, code, "fragment", ...): `statement` throws a `dcp::error` with
/// `code` (a `dcp::errc` or any `std::error_code`) whose message contains every fragment
/// (none: any message). ASSERT_DCP_ERROR ends the test on failure.
#define DCP_TEST_ERROR_(statement, code, on_failure, ...)                                          \
  switch (0)                                                                                       \
  case 0:                                                                                          \
  default:                                                                                         \
    if (const ::testing::AssertionResult dcp_test_result_ = ::dcp_test::throws_dcp_error(          \
            #statement, [&] { statement; }, code, {__VA_ARGS__});                                  \
        dcp_test_result_) {                                                                        \
    } else                                                                                         \
      on_failure << dcp_test_result_.message()
#define EXPECT_DCP_ERROR(statement, code, ...) DCP_TEST_ERROR_(statement, code, ADD_FAILURE(), __VA_ARGS__)
#define ASSERT_DCP_ERROR(statement, code, ...) DCP_TEST_ERROR_(statement, code, FAIL(), __VA_ARGS__)
