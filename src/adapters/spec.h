// Adapter selection specs (the "selected" state): what one request asks for.
//   "" or "none"   the base model
//   "a"            adapter a at its own scale
//   "a+b"          a and b stacked (the sum of their deltas)
//   "a@0.5+b"      a's delta scaled by 0.5, b's by 1
// Parsing checks only the syntax; whether the ids are loaded is decided by
// MountedAdapters::select.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace graft {

struct AdapterChoice {
  std::string id;
  float scale = 1.0f;
  bool operator==(const AdapterChoice&) const = default;
};

struct AdapterSelection {
  std::vector<AdapterChoice> stack;  // empty: the base model

  bool none() const { return stack.empty(); }
  // The canonical spec: "none", "a", "a@0.5+b".
  std::string to_string() const;
  bool operator==(const AdapterSelection&) const = default;
};

inline constexpr int kMaxAdapterStack = 4;

// Errors ("invalid_argument") quote the spec and say what is wrong: an
// invalid id, a bad or non-finite scale, an empty part, an id given twice,
// "none" inside a stack, or more than kMaxAdapterStack adapters.
Result<AdapterSelection> parse_adapter_spec(std::string_view spec);

}  // namespace graft
