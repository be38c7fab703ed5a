// AdapterRoute: which mounted LoRA adapters one row of a batch uses, each
// with its scale (a stack is the sum of their deltas, added in this order).
// Slots are the model's LoRA slots (model/lora.h, LoraSet::mount); n == 0 is
// the base model. The engine carries one per batch row; the adapters layer
// resolves a request's selection into one.
#pragma once

namespace graft {

struct AdapterRoute {
  static constexpr int kMaxStack = 4;
  int n = 0;
  int slot[kMaxStack] = {};
  float scale[kMaxStack] = {};

  bool empty() const { return n == 0; }
  bool operator==(const AdapterRoute&) const = default;
};

}  // namespace graft
