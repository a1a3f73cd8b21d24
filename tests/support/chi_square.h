// Chi-square p-values for the distribution tests (the rejection sampler's, the engine's
// speculative sampling): the regularised upper incomplete gamma function, ours. Header-only.
#ifndef VLLM_TESTS_SUPPORT_CHI_SQUARE_H_
#define VLLM_TESTS_SUPPORT_CHI_SQUARE_H_

#include <cmath>

namespace vllm::testing {

// Regularised upper incomplete gamma Q(a, x): the series for P below x = a + 1, a continued
// fraction (modified Lentz) above it; both to double precision.
inline double UpperGammaQ(double a, double x) {
  if (x <= 0.0) return 1.0;
  const double log_prefix = a * std::log(x) - x - std::lgamma(a);
  if (x < a + 1.0) {
    double term = 1.0 / a;
    double sum = term;
    for (int n = 1; n < 10000 && std::abs(term) > std::abs(sum) * 1e-16; ++n) {
      term *= x / (a + n);
      sum += term;
    }
    return 1.0 - sum * std::exp(log_prefix);
  }
  constexpr double kTiny = 1e-300;
  double b = x + 1.0 - a;
  double c = 1.0 / kTiny;
  double d = 1.0 / b;
  double h = d;
  for (int n = 1; n < 10000; ++n) {
    const double an = -n * (n - a);
    b += 2.0;
    d = an * d + b;
    if (std::abs(d) < kTiny) d = kTiny;
    c = b + an / c;
    if (std::abs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::abs(delta - 1.0) < 1e-16) break;
  }
  return std::exp(log_prefix) * h;
}

// P(X >= statistic) for X ~ chi-square with `dof` degrees of freedom.
inline double ChiSquarePValue(double statistic, int dof) {
  return UpperGammaQ(dof / 2.0, statistic / 2.0);
}

}  // namespace vllm::testing

#endif  // VLLM_TESTS_SUPPORT_CHI_SQUARE_H_
