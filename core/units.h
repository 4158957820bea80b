#pragma once
// Strong unit types (FlexFlow's num_bytes_t / milliseconds_t idea, in C++20).
//
// A Quantity<Tag, Rep> wraps one number in one unit. Same-unit + and -, scaling by a plain number
// and same-unit ratios are always allowed; the only cross-dimension operators are declared at the
// bottom of this header. `.value()` is the one way out and belongs at I/O boundaries.
//
// Base units: bytes, seconds, floating-point operations. Everything else is converted once, when
// it is read (spec/json_io.cpp), with the literals and constants below.

#include <compare>
#include <cstdint>
#include <string>

namespace cpt::core {

template <class Tag, class Rep>
class Quantity {
 public:
  using rep = Rep;
  constexpr Quantity() = default;  // zero
  constexpr explicit Quantity(Rep v) : v_(v) {}
  [[nodiscard]] constexpr Rep value() const { return v_; }

  constexpr auto operator<=>(const Quantity&) const = default;

  constexpr Quantity operator+(Quantity o) const { return Quantity(v_ + o.v_); }
  constexpr Quantity operator-(Quantity o) const { return Quantity(v_ - o.v_); }
  constexpr Quantity operator-() const { return Quantity(-v_); }
  constexpr Quantity& operator+=(Quantity o) {
    v_ += o.v_;
    return *this;
  }
  constexpr Quantity& operator-=(Quantity o) {
    v_ -= o.v_;
    return *this;
  }
  // Scaling by a dimensionless count keeps the unit: 4 * weights, bytes / tp.
  constexpr Quantity operator*(Rep k) const { return Quantity(v_ * k); }
  constexpr Quantity operator/(Rep k) const { return Quantity(v_ / k); }
  friend constexpr Quantity operator*(Rep k, Quantity q) { return Quantity(k * q.v_); }
  // Same-unit ratio is dimensionless (a fraction, an efficiency, a speed-up).
  constexpr double operator/(Quantity o) const {
    return static_cast<double>(v_) / static_cast<double>(o.v_);
  }

 private:
  Rep v_{};
};

using Bytes = Quantity<struct BytesTag, std::int64_t>;  // exact memory accounting
using Seconds = Quantity<struct SecondsTag, double>;
using Flops = Quantity<struct FlopsTag, double>;  // 6·N·T overflows int64
using BytesPerSecond = Quantity<struct BytesPerSecondTag, double>;
using FlopsPerSecond = Quantity<struct FlopsPerSecondTag, double>;

// The cross-dimension operators: time to move bytes, time to compute flops, and the converses.
constexpr Seconds operator/(Bytes b, BytesPerSecond r) {
  return Seconds(static_cast<double>(b.value()) / r.value());
}
constexpr Seconds operator/(Flops f, FlopsPerSecond r) { return Seconds(f.value() / r.value()); }
constexpr BytesPerSecond operator/(Bytes b, Seconds t) {
  return BytesPerSecond(static_cast<double>(b.value()) / t.value());
}
constexpr FlopsPerSecond operator/(Flops f, Seconds t) { return FlopsPerSecond(f.value() / t.value()); }

// Conversion constants. GiB (2^30) and GB (10^9) are different units and keep different names.
inline constexpr std::int64_t kKiB = std::int64_t{1} << 10;
inline constexpr std::int64_t kMiB = std::int64_t{1} << 20;
inline constexpr std::int64_t kGiB = std::int64_t{1} << 30;
inline constexpr double kGB = 1e9;
inline constexpr double kTera = 1e12;
inline constexpr double kGiga = 1e9;

// Constructors from the units used in profiles and on the command line. Byte counts round to the
// nearest byte.
constexpr Bytes gibibytes(double v) { return Bytes(static_cast<std::int64_t>(v * kGiB + 0.5)); }
constexpr Bytes gigabytes(double v) { return Bytes(static_cast<std::int64_t>(v * kGB + 0.5)); }
constexpr Seconds microseconds(double v) { return Seconds(v * 1e-6); }
constexpr Seconds nanoseconds(double v) { return Seconds(v * 1e-9); }
constexpr BytesPerSecond gigabytes_per_second(double v) { return BytesPerSecond(v * kGB); }
// Network rates are quoted in bits: 400 Gbit/s = 50 GB/s.
constexpr BytesPerSecond gigabits_per_second(double v) { return BytesPerSecond(v * kGiga / 8.0); }
constexpr FlopsPerSecond teraflops_per_second(double v) { return FlopsPerSecond(v * kTera); }

// Views in display units, for tables and JSON output.
constexpr double to_gibibytes(Bytes b) { return static_cast<double>(b.value()) / kGiB; }
constexpr double to_gigabytes_per_second(BytesPerSecond r) { return r.value() / kGB; }
constexpr double to_gigabits_per_second(BytesPerSecond r) { return r.value() * 8.0 / kGiga; }
constexpr double to_teraflops_per_second(FlopsPerSecond r) { return r.value() / kTera; }
constexpr double to_microseconds(Seconds t) { return t.value() * 1e6; }

namespace literals {
constexpr Bytes operator""_B(unsigned long long v) { return Bytes(static_cast<std::int64_t>(v)); }
constexpr Bytes operator""_GiB(unsigned long long v) {
  return Bytes(static_cast<std::int64_t>(v) * kGiB);
}
constexpr Bytes operator""_MiB(unsigned long long v) {
  return Bytes(static_cast<std::int64_t>(v) * kMiB);
}
constexpr Bytes operator""_GB(unsigned long long v) {
  return Bytes(static_cast<std::int64_t>(v) * 1'000'000'000);
}
constexpr Seconds operator""_s(long double v) { return Seconds(static_cast<double>(v)); }
constexpr Seconds operator""_us(long double v) { return microseconds(static_cast<double>(v)); }
constexpr Seconds operator""_us(unsigned long long v) { return microseconds(static_cast<double>(v)); }
constexpr BytesPerSecond operator""_GB_per_s(unsigned long long v) {
  return gigabytes_per_second(static_cast<double>(v));
}
constexpr FlopsPerSecond operator""_TFLOPs_per_s(long double v) {
  return teraflops_per_second(static_cast<double>(v));
}
constexpr FlopsPerSecond operator""_TFLOPs_per_s(unsigned long long v) {
  return teraflops_per_second(static_cast<double>(v));
}
}  // namespace literals

// Human-readable renderings with the unit: "80.00 GiB", "1.250 ms", "989.4 TFLOP/s".
std::string to_string(Bytes b);
std::string to_string(Seconds t);
std::string to_string(Flops f);
std::string to_string(BytesPerSecond r);
std::string to_string(FlopsPerSecond r);

}  // namespace cpt::core
