#pragma once
// Errors of the layout layer. Bad input (a slot out of range, zero units, ...)
// is std::invalid_argument with a message naming the field; a valid request
// that cannot be carried out is an InfeasibleError, so callers (the CLI maps it
// to exit code 3, the trainer falls back to a checkpoint) can tell them apart.
#include <stdexcept>
#include <string>

namespace ntp::layout {

class InfeasibleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A transition would lose units: no surviving slot in any replica holds them.
class UnitsLostError : public InfeasibleError {
 public:
  using InfeasibleError::InfeasibleError;
};

// Bad input when value < 1: "<field> must be >= 1, got <value>".
inline void require_positive(long long value, const std::string& field) {
  if (value < 1) throw std::invalid_argument(field + " must be >= 1, got " + std::to_string(value));
}

}  // namespace ntp::layout
