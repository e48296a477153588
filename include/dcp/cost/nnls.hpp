#pragma once
/// \file
/// `nnls`: the non-negative least-squares solver `fit_cost` (`<dcp/cost/fit.hpp>`) fits with.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <dcp/error.hpp>

namespace dcp {

/// Non-negative least squares: argmin ||A x - b||_2 subject to x >= 0 (Lawson and Hanson,
/// "Solving Least Squares Problems", 1974, chapter 23). `a` is row-major, `rows` x `cols`.
/// Passive-set subproblems are solved by Householder QR; a column that is (numerically) zero
/// keeps coefficient 0.
inline std::vector<double> nnls(std::span<const double> a, std::span<const double> b, std::size_t rows,
                                std::size_t cols) {
  check(a.size() == rows * cols && b.size() == rows, errc::invalid_argument, [&] {
    return "nnls: a has " + std::to_string(a.size()) + " values and b " + std::to_string(b.size()) + " for a " +
           std::to_string(rows) + " x " + std::to_string(cols) + " system";
  });
  for (double v : a)
    check(std::isfinite(v), errc::invalid_argument, [] { return std::string("nnls: A holds a NaN or infinity"); });
  for (double v : b)
    check(std::isfinite(v), errc::invalid_argument, [] { return std::string("nnls: b holds a NaN or infinity"); });
  std::vector<double> x(cols, 0.0);
  if (rows == 0 || cols == 0) return x;
  double scale = 0;
  for (double v : a) scale = std::max(scale, std::abs(v));
  for (double v : b) scale = std::max(scale, std::abs(v));
  const double tol = 1e-12 * std::max(scale, 1e-300) * double(std::max(rows, cols));

  // Unconstrained least squares on the columns in `set` (Householder QR of the sub-matrix).
  auto solve = [&](const std::vector<std::size_t>& set) {
    const std::size_t n = set.size();
    std::vector<double> q(rows * n), y(b.begin(), b.end());
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = 0; j < n; ++j) q[i * n + j] = a[i * cols + set[j]];
    std::vector<double> diag(n, 0.0);
    for (std::size_t j = 0; j < n && j < rows; ++j) {
      double norm = 0;
      for (std::size_t i = j; i < rows; ++i) norm += q[i * n + j] * q[i * n + j];
      norm = std::sqrt(norm);
      if (norm <= tol) continue;  // a zero column: its coefficient stays 0
      const double alpha = q[j * n + j] > 0 ? -norm : norm;
      std::vector<double> v(rows - j);
      for (std::size_t i = j; i < rows; ++i) v[i - j] = q[i * n + j];
      v[0] -= alpha;
      double vv = 0;
      for (double e : v) vv += e * e;
      if (vv <= 0) {
        diag[j] = alpha;
        continue;
      }
      for (std::size_t c = j; c < n; ++c) {
        double d = 0;
        for (std::size_t i = j; i < rows; ++i) d += v[i - j] * q[i * n + c];
        d = 2 * d / vv;
        for (std::size_t i = j; i < rows; ++i) q[i * n + c] -= d * v[i - j];
      }
      double d = 0;
      for (std::size_t i = j; i < rows; ++i) d += v[i - j] * y[i];
      d = 2 * d / vv;
      for (std::size_t i = j; i < rows; ++i) y[i] -= d * v[i - j];
      diag[j] = q[j * n + j];
    }
    std::vector<double> s(n, 0.0);
    for (std::size_t j = std::min(n, rows); j-- > 0;) {
      if (std::abs(diag[j]) <= tol) continue;
      double r = y[j];
      for (std::size_t c = j + 1; c < n; ++c) r -= q[j * n + c] * s[c];
      s[j] = r / diag[j];
    }
    return s;
  };
  auto gradient = [&] {  // w = A^T (b - A x)
    std::vector<double> w(cols, 0.0);
    for (std::size_t i = 0; i < rows; ++i) {
      double r = b[i];
      for (std::size_t j = 0; j < cols; ++j) r -= a[i * cols + j] * x[j];
      for (std::size_t j = 0; j < cols; ++j) w[j] += a[i * cols + j] * r;
    }
    return w;
  };

  std::vector<char> passive(cols, 0);
  const double wtol = tol * scale * double(rows);
  for (std::size_t outer = 0; outer < 3 * cols + 3; ++outer) {
    const auto w = gradient();
    std::size_t best = cols;
    for (std::size_t j = 0; j < cols; ++j)
      if (!passive[j] && w[j] > wtol && (best == cols || w[j] > w[best])) best = j;
    if (best == cols) break;
    passive[best] = 1;
    for (std::size_t inner = 0; inner < 3 * cols + 3; ++inner) {
      std::vector<std::size_t> set;
      for (std::size_t j = 0; j < cols; ++j)
        if (passive[j]) set.push_back(j);
      const auto s = solve(set);
      bool feasible = true;
      for (double v : s) feasible = feasible && v > 0;
      if (feasible) {
        for (std::size_t j = 0; j < set.size(); ++j) x[set[j]] = s[j];
        break;
      }
      // Step from x toward s as far as feasibility allows; drop the coefficients that hit 0.
      double step = 1;
      for (std::size_t j = 0; j < set.size(); ++j)
        if (s[j] <= 0) step = std::min(step, x[set[j]] / std::max(x[set[j]] - s[j], 1e-300));
      double xmax = 0;
      for (std::size_t j = 0; j < set.size(); ++j) {
        x[set[j]] += step * (s[j] - x[set[j]]);
        xmax = std::max(xmax, std::abs(x[set[j]]));
      }
      for (std::size_t j = 0; j < set.size(); ++j)
        if (x[set[j]] <= 1e-14 * xmax) x[set[j]] = 0, passive[set[j]] = 0;
      bool any = false;
      for (char p : passive) any = any || p;
      if (!any) break;
    }
  }
  for (double& v : x) v = std::max(v, 0.0);
  return x;
}

}  // namespace dcp
