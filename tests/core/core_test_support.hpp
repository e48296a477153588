#pragma once
// Helpers shared by the core tests: relative comparisons and random cost models / loads over
// the shipped presets (the seeded rng and error checks come from the shared test support).

#include <dcp_test/support.hpp>

#include <dcp/cost/analytic.hpp>
#include <dcp/cost/device.hpp>
#include <dcp/error.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/sequence.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace dcp_test {

/// |actual - expected| <= tol * |expected| (an absolute tol when expected is 0).
inline ::testing::AssertionResult rel_near(const char* a_expr, const char* e_expr, double actual, double expected,
                                           double tol = 1e-9) {
  const double err = std::abs(actual - expected);
  const double scale = expected == 0 ? 1.0 : std::abs(expected);
  if (err <= tol * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << a_expr << " = " << std::to_string(actual) << " (" << actual << ") differs from "
                                       << e_expr << " = " << expected << " by " << err / scale << " relative (> "
                                       << tol << ")";
}

#define DCP_EXPECT_REL(actual, expected) EXPECT_PRED_FORMAT2(::dcp_test::rel_near, actual, expected)
#define DCP_ASSERT_REL(actual, expected) ASSERT_PRED_FORMAT2(::dcp_test::rel_near, actual, expected)

inline std::vector<dcp::transformer_spec> model_presets() {
  return {dcp::models::cogvideox_5b(), dcp::models::stdit3_xl(), dcp::models::llama3_8b()};
}
inline std::vector<dcp::device_spec> device_presets() {
  return {dcp::devices::h200_analytic(), dcp::devices::h100_analytic()};
}

/// GPU counts the library accepts with G = 8: 1..8, then whole nodes (24, 40, 72 included).
inline int random_gpus(rng& g, int max_nodes = 128) {
  if (g.between(0, 2) == 0) return static_cast<int>(g.between(1, 8));
  return 8 * static_cast<int>(g.log_between(1, max_nodes));
}

/// A random valid analytic cost model (preset model and device, N for which static memory fits).
inline dcp::analytic_cost random_cost(rng& g) {
  for (;;) {
    dcp::analytic_cost c{g.pick(model_presets()), g.pick(device_presets()), random_gpus(g)};
    if (c.static_memory() < c.capacity()) return c;
  }
}

/// A random sequence the model can see: 1D lengths for 1D models, T x S shapes for 2D ones.
inline dcp::sequence random_sequence(rng& g, const dcp::transformer_spec& m, std::int64_t id,
                                     std::int64_t max_tokens = 1 << 20) {
  if (m.attention == dcp::attention_kind::factorized_2d) {
    const std::int64_t t = g.log_between(1, 512);
    const std::int64_t s = g.log_between(1, std::max<std::int64_t>(1, max_tokens / t));
    return dcp::make_sequence(id, t, s);
  }
  return dcp::make_sequence(id, g.log_between(1, max_tokens));
}

}  // namespace dcp_test
