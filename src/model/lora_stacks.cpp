#include "model/lora_stacks.h"

#include <algorithm>
#include <cstring>

#include <ggml-cpu.h>

#include "io/prefault.h"
#include "model/lora_convert.h"
#include "model/lora_ops.h"
#include "model/model.h"

namespace graft {

namespace {

// Slots reserved at a time (address space only: reserved pages cost nothing until written).
constexpr int kReservedSlots = 32;

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

}  // namespace

LoraStacks::LoraStacks(const ModelConfig& config, ggml_type type)
    : config_(config), type_(type), stacks_(size_t(config.n_layer * kLoraTargetCount)) {}

Result<int> LoraStacks::make_room(const LoraWeights& weights, bool* relaid) {
  *relaid = false;
  int slot = 0;
  while (slot < int(used_.size()) && used_[size_t(slot)]) ++slot;
  int rank = max_rank_;
  std::vector<bool> wanted(stacks_.size(), false);
  bool grow = slot >= n_slots_;
  for (size_t i = 0; i < stacks_.size(); ++i) wanted[i] = stacks_[i].a != nullptr;
  for (const LoraPair& p : weights.pairs) {
    rank = std::max(rank, p.rank);
    const int i = index(p.layer, p.target);
    if (!wanted[size_t(i)]) grow = true;
    wanted[size_t(i)] = true;
  }
  if (grow || rank > max_rank_) {
    const int n_slots = slot >= n_slots_ ? std::max(kReservedSlots, n_slots_ * 2) : n_slots_;
    GRAFT_TRY_STATUS(lay_out(std::max(n_slots, slot + 1), rank, wanted));
    *relaid = true;
  }
  return slot;
}

Status LoraStacks::lay_out(int n_slots, int max_rank, const std::vector<bool>& wanted) {
  const size_t n_stacks = size_t(std::count(wanted.begin(), wanted.end(), true));
  ggml_init_params params{};
  params.mem_size = ggml_tensor_overhead() * (2 * n_stacks + 1);
  params.no_alloc = true;
  ggml_context_ptr ctx(ggml_init(params));
  if (!ctx) return errorf("out_of_memory", "cannot allocate the headers of {} LoRA stacks", 2 * n_stacks);
  std::vector<LoraSet::Stack> stacks(stacks_.size());
  for (size_t i = 0; i < stacks.size(); ++i) {
    if (!wanted[i]) continue;
    const LoraTarget target = LoraTarget(int(i) % kLoraTargetCount);
    const int layer = int(i) / kLoraTargetCount;
    stacks[i].a = ggml_new_tensor_3d(ctx.get(), type_, lora_n_in(config_, layer, target), max_rank, n_slots);
    stacks[i].b = new_lora_b_stack(ctx.get(), type_, lora_n_out(config_, layer, target), max_rank, n_slots);
    ggml_format_name(stacks[i].a, "lora_a.%s.%zu", ggml_type_name(type_), i);
    ggml_format_name(stacks[i].b, "lora_b.%s.%zu", ggml_type_name(type_), i);
  }
  // Slot by slot: within a slot, each stack's matrices in turn.
  const size_t align = 64;
  size_t slot_bytes = 0;
  std::vector<size_t> offsets;  // per stack tensor, within a slot
  for (const LoraSet::Stack& st : stacks) {
    if (!st.a) continue;
    for (const ggml_tensor* t : {st.a, st.b}) {
      offsets.push_back(slot_bytes);
      slot_bytes += round_up(size_t(t->nb[2]), align);
    }
  }
  const size_t stride = round_up(std::max<size_t>(slot_bytes, 1), ReservedMemory::kHugePage);
  const size_t total = stride * size_t(n_slots);
  auto reserved = ReservedMemory::reserve(total);
  if (!reserved) {
    return errorf("out_of_memory", "cannot reserve {} MiB for {} LoRA adapters of type {}: {}", total >> 20,
                  n_slots, ggml_type_name(type_), reserved.error().message);
  }
  ReservedMemory memory = std::move(reserved).value();
  ggml_backend_buffer_ptr buffer(ggml_backend_cpu_buffer_from_ptr(memory.data(), total));
  if (!buffer) return errorf("out_of_memory", "cannot make a buffer of the LoRA stacks' memory");
  size_t k = 0;
  for (const LoraSet::Stack& st : stacks) {
    if (!st.a) continue;
    for (ggml_tensor* t : {st.a, st.b}) {
      t->nb[2] = stride;
      t->nb[3] = stride * size_t(n_slots);
      if (ggml_backend_tensor_alloc(buffer.get(), t, memory.data() + offsets[k++]) != GGML_STATUS_SUCCESS) {
        return errorf("out_of_memory", "cannot place LoRA stack '{}' in its memory", ggml_get_name(t));
      }
    }
  }

  // Carry the mounted adapters over, padding their rank: the rows of A (one
  // per rank index) and each block of B's rows keep their layout, and the
  // new rows stay zero.
  for (size_t i = 0; i < stacks.size(); ++i) {
    const LoraSet::Stack& old = stacks_[i];
    if (!old.a) continue;
    for (int s = 0; s < int(old.a->ne[2]); ++s) {
      if (!used(s)) continue;
      for (auto [from, to] : {std::pair{old.a, stacks[i].a}, std::pair{old.b, stacks[i].b}}) {
        const auto* src = static_cast<const uint8_t*>(from->data) + size_t(s) * from->nb[2];
        auto* dst = static_cast<uint8_t*>(to->data) + size_t(s) * to->nb[2];
        // A: one run of the old rank's rows; B: one per block of outputs.
        const int64_t runs = from == old.a ? 1 : from->ne[1];
        const size_t run_bytes = from == old.a ? size_t(from->ne[1]) * from->nb[1] : from->nb[1];
        for (int64_t j = 0; j < runs; ++j)
          std::memcpy(dst + size_t(j) * to->nb[1], src + size_t(j) * from->nb[1], run_bytes);
      }
    }
  }
  // Old before new: the buffer over the old memory, then the memory, then the headers.
  buffer_ = std::move(buffer);
  memory_ = std::move(memory);
  ctx_ = std::move(ctx);
  slot_stride_ = stride;
  slot_used_bytes_ = slot_bytes;
  stacks_ = std::move(stacks);
  n_slots_ = n_slots;
  max_rank_ = max_rank;
  return {};
}

void LoraStacks::write(int slot, const LoraWeights& weights) {
  if (slot >= int(used_.size())) used_.resize(size_t(slot + 1), false);
  used_[size_t(slot)] = true;
  for (const LoraPair& p : weights.pairs) write_pair(slot, p);
}

void LoraStacks::write_pair(int slot, const LoraPair& p) {
  const LoraSet::Stack& st = stacks_[size_t(index(p.layer, p.target))];
  auto* a = static_cast<uint8_t*>(st.a->data) + size_t(slot) * st.a->nb[2];
  prefault_writable(a, size_t(p.rank) * st.a->nb[1]);
  copy_rows(p.a, type_, a, scratch_);
  // B is stored transposed (row k holds column k of the n_out x rank
  // matrix) and blocked by outputs (lora_ops.h lora_b_index).
  auto* b = static_cast<uint8_t*>(st.b->data) + size_t(slot) * st.b->nb[2];
  prefault_writable(b, size_t(st.b->ne[1]) * st.b->nb[1]);
  copy_columns(p.b, lora_n_out(config_, p.layer, p.target), p.rank, st.b->ne[0] / kLoraBBlock, type_, b,
               scratch_);
}

void LoraStacks::clear(int slot) {
  if (!used(slot)) return;
  memory_.zero(size_t(slot) * slot_stride_, slot_stride_);
  used_[size_t(slot)] = false;
}

}  // namespace graft
