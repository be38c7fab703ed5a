#include "model/lora.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <ggml-cpu.h>
#include <sys/mman.h>
#include <unistd.h>

#include "io/prefault.h"
#include "model/model.h"

namespace graft {

const char* lora_target_name(LoraTarget target) {
  switch (target) {
    case LoraTarget::attn_q:
      return "attn_q";
    case LoraTarget::attn_k:
      return "attn_k";
    case LoraTarget::attn_v:
      return "attn_v";
    case LoraTarget::attn_output:
      return "attn_output";
    case LoraTarget::ffn_gate:
      return "ffn_gate";
    case LoraTarget::ffn_up:
      return "ffn_up";
    case LoraTarget::ffn_down:
      return "ffn_down";
    case LoraTarget::attn_qkv:
      return "attn_qkv";
    case LoraTarget::attn_gate:
      return "attn_gate";
    case LoraTarget::ssm_alpha:
      return "ssm_alpha";
    case LoraTarget::ssm_beta:
      return "ssm_beta";
    case LoraTarget::ssm_out:
      return "ssm_out";
  }
  return "?";
}

bool lora_target_exists(const ModelConfig& config, int layer, LoraTarget target) {
  switch (target) {
    case LoraTarget::ffn_gate:
    case LoraTarget::ffn_up:
    case LoraTarget::ffn_down:
      return true;
    case LoraTarget::attn_qkv:
    case LoraTarget::attn_gate:
    case LoraTarget::ssm_alpha:
    case LoraTarget::ssm_beta:
    case LoraTarget::ssm_out:
      return config.is_recurrent(layer);
    default:
      return !config.is_recurrent(layer);
  }
}

namespace {

// Stacks live in anonymous memory reserved for many slots at once: pages are
// zero until written and cost nothing until then, so mounting never clears
// or copies what is already mounted (unless a larger rank re-pads them).
constexpr int kReservedSlots = 32;
// The memory is laid out slot by slot (each stack tensor strides over slots),
// so one slot's matrices are one run of whole huge pages: mounting faults in
// a dozen 2 MiB pages instead of thousands of 4 KiB ones. (On VMs the first
// write to a fresh 4 KiB page is slow: a 10 MiB copy into fresh small pages
// took 20-40 ms here, into huge pages 1-2 ms; memory the VM has not used
// before still costs its zeroing.)
constexpr size_t kHugePage = size_t(2) << 20;

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

// Reserves bytes at a huge-page boundary; *mapped and *mapped_bytes are what to munmap.
uint8_t* reserve(size_t bytes, void** mapped, size_t* mapped_bytes) {
  const size_t n = bytes + kHugePage;
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  *mapped = p;
  *mapped_bytes = n;
  auto* aligned = reinterpret_cast<uint8_t*>(round_up(reinterpret_cast<uintptr_t>(p), kHugePage));
#ifdef MADV_HUGEPAGE
  ::madvise(aligned, bytes, MADV_HUGEPAGE);  // best effort
#endif
  return aligned;
}

// Zeroes [p, p+n), handing whole pages back to the system.
void zero_range(uint8_t* p, size_t n) {
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  uint8_t* begin = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + page - 1) / page * page);
  uint8_t* end = reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(p + n) / page * page);
  if (end <= begin) {
    std::memset(p, 0, n);
    return;
  }
  std::memset(p, 0, size_t(begin - p));
  ::madvise(begin, size_t(end - begin), MADV_DONTNEED);  // reads back as zeros
  std::memset(end, 0, size_t(p + n - end));
}

}  // namespace

LoraSet::~LoraSet() {
  if (buffer_) ggml_backend_buffer_free(buffer_);
  if (mapped_) ::munmap(mapped_, mapped_bytes_);
  if (ctx_) ggml_free(ctx_);
}

void LoraSet::init(const ModelConfig& config, ggml_type type) {
  config_ = &config;
  type_ = type;
  stacks_.assign(size_t(config.n_layer * kLoraTargetCount), Stack{});
}

int LoraSet::n_in(LoraTarget target) const {
  switch (target) {
    case LoraTarget::attn_output:
      return config_->n_embd_q();
    case LoraTarget::ffn_down:
      return config_->n_ff;
    case LoraTarget::ssm_out:
      return config_->ssm.inner;
    default:
      return config_->n_embd;
  }
}

int LoraSet::n_out(LoraTarget target) const {
  switch (target) {
    case LoraTarget::attn_q:
      return config_->n_embd_q_proj();
    case LoraTarget::attn_k:
    case LoraTarget::attn_v:
      return config_->n_embd_kv();
    case LoraTarget::ffn_gate:
    case LoraTarget::ffn_up:
      return config_->n_ff;
    case LoraTarget::attn_qkv:
      return int(config_->ssm.conv_dim());
    case LoraTarget::attn_gate:
      return config_->ssm.inner;
    case LoraTarget::ssm_alpha:
    case LoraTarget::ssm_beta:
      return config_->ssm.n_v_heads;
    default:
      return config_->n_embd;
  }
}

Status LoraSet::check(const LoraWeights& weights) const {
  if (weights.pairs.empty()) return errorf("invalid_adapter", "the adapter has no LoRA matrices");
  if (!std::isfinite(weights.scale))
    return errorf("invalid_adapter", "the adapter's scale is not a finite number");
  std::vector<bool> seen(stacks_.size(), false);
  for (const LoraPair& p : weights.pairs) {
    const char* name = lora_target_name(p.target);
    if (p.layer < 0 || p.layer >= config_->n_layer) {
      return errorf("invalid_adapter", "LoRA pair for layer {} ({}): the model has {} layers", p.layer, name,
                    config_->n_layer);
    }
    if (!lora_target_exists(*config_, p.layer, p.target)) {
      return errorf("invalid_adapter", "LoRA pair blk.{}.{}: layer {} of the model has no {}", p.layer, name,
                    p.layer, name);
    }
    if (p.rank <= 0)
      return errorf("invalid_adapter", "LoRA pair blk.{}.{}: rank must be positive", p.layer, name);
    const int64_t want_a = int64_t(p.rank) * n_in(p.target);
    const int64_t want_b = int64_t(n_out(p.target)) * p.rank;
    if (p.a_size() != want_a) {
      return errorf("invalid_adapter",
                    "LoRA pair blk.{}.{}: lora_a has {} values, expected rank {} x {} = {}", p.layer, name,
                    p.a_size(), p.rank, n_in(p.target), want_a);
    }
    if (p.b_size() != want_b) {
      return errorf("invalid_adapter",
                    "LoRA pair blk.{}.{}: lora_b has {} values, expected {} x rank {} = {}", p.layer, name,
                    p.b_size(), n_out(p.target), p.rank, want_b);
    }
    for (const LoraSource* source : {&p.a_source, &p.b_source}) {
      if (source->data && source->type != GGML_TYPE_F32 && !ggml_get_type_traits(source->type)->to_float) {
        return errorf("invalid_adapter", "LoRA pair blk.{}.{}: values of type {} cannot be read", p.layer,
                      name, ggml_type_name(source->type));
      }
    }
    const int i = index(p.layer, p.target);
    if (seen[size_t(i)]) return errorf("invalid_adapter", "LoRA pair blk.{}.{} appears twice", p.layer, name);
    seen[size_t(i)] = true;
  }
  return {};
}

Result<int> LoraSet::mount(const LoraWeights& weights) {
  if (!config_) return errorf("internal", "LoRA set not initialized");
  GRAFT_TRY_STATUS(check(weights));
  int slot = 0;
  while (slot < int(slots_.size()) && slots_[size_t(slot)].used) ++slot;

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
    GRAFT_TRY_STATUS(rebuild(std::max(n_slots, slot + 1), rank, wanted));
  }
  if (slot >= int(slots_.size())) slots_.resize(size_t(slot + 1));
  Slot& s = slots_[size_t(slot)];
  s.used = true;
  s.scale = weights.scale;
  s.rank = 0;
  s.touches.assign(stacks_.size(), false);
  for (const LoraPair& p : weights.pairs) {
    write_pair(slot, p);
    s.rank = std::max(s.rank, p.rank);
    s.touches[size_t(index(p.layer, p.target))] = true;
  }
  return slot;
}

Status LoraSet::unmount(int slot) {
  if (!mounted(slot)) return errorf("not_found", "no LoRA adapter is mounted in slot {}", slot);
  zero_slot(slot);
  slots_[size_t(slot)] = Slot{};
  return {};
}

bool LoraSet::mounted(int slot) const {
  return slot >= 0 && slot < int(slots_.size()) && slots_[size_t(slot)].used;
}

int LoraSet::n_mounted() const {
  return int(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.used; }));
}

float LoraSet::scale(int slot) const {
  return mounted(slot) ? slots_[size_t(slot)].scale : 0.0f;
}

size_t LoraSet::bytes() const {
  // What the mounted adapters occupy (the reservation beyond them costs nothing).
  return slot_used_bytes_ * size_t(n_mounted());
}

LoraSet::Stack LoraSet::stack(int layer, LoraTarget target) const {
  if (stacks_.empty()) return {};
  return stacks_[size_t(index(layer, target))];
}

Status LoraSet::rebuild(int n_slots, int max_rank, const std::vector<bool>& wanted) {
  const size_t n_stacks = std::count(wanted.begin(), wanted.end(), true);
  ggml_init_params params{};
  params.mem_size = ggml_tensor_overhead() * (2 * n_stacks + 1);
  params.no_alloc = true;
  ggml_context* ctx = ggml_init(params);
  std::vector<Stack> stacks(stacks_.size());
  for (size_t i = 0; i < stacks.size(); ++i) {
    if (!wanted[i]) continue;
    const LoraTarget target = LoraTarget(int(i) % kLoraTargetCount);
    stacks[i].a = ggml_new_tensor_3d(ctx, type_, n_in(target), max_rank, n_slots);
    stacks[i].b = ggml_new_tensor_3d(ctx, type_, n_out(target), max_rank, n_slots);
    ggml_format_name(stacks[i].a, "lora_a.%zu", i);
    ggml_format_name(stacks[i].b, "lora_b.%zu", i);
  }
  // Slot by slot: within a slot, each stack's matrices in turn.
  const size_t align = 64;
  size_t used = 0;
  std::vector<size_t> offsets;  // per stack tensor, within a slot
  for (const Stack& st : stacks) {
    if (!st.a) continue;
    for (const ggml_tensor* t : {st.a, st.b}) {
      offsets.push_back(used);
      used += round_up(size_t(t->nb[2]), align);
    }
  }
  const size_t slot_bytes = round_up(std::max<size_t>(used, 1), kHugePage);
  const size_t total = slot_bytes * size_t(n_slots);
  void* mapped = nullptr;
  size_t mapped_bytes = 0;
  uint8_t* memory = reserve(total, &mapped, &mapped_bytes);
  if (!memory) {
    ggml_free(ctx);
    return errorf("out_of_memory", "cannot reserve {} MiB for LoRA adapters", total >> 20);
  }
  ggml_backend_buffer_t buffer = ggml_backend_cpu_buffer_from_ptr(memory, total);
  size_t k = 0;
  for (const Stack& st : stacks) {
    if (!st.a) continue;
    for (ggml_tensor* t : {st.a, st.b}) {
      t->nb[2] = slot_bytes;
      t->nb[3] = slot_bytes * size_t(n_slots);
      ggml_backend_tensor_alloc(buffer, t, memory + offsets[k++]);
    }
  }

  // Carry the mounted adapters over, padding their rank.
  const size_t es = ggml_type_size(type_);
  for (size_t i = 0; i < stacks.size(); ++i) {
    const Stack& old = stacks_[i];
    if (!old.a) continue;
    const int64_t in = old.a->ne[0], out_rows = old.b->ne[0], r_old = old.a->ne[1];
    for (int s = 0; s < int(old.a->ne[2]); ++s) {
      if (s >= int(slots_.size()) || !slots_[size_t(s)].used) continue;
      const uint8_t* a_src = static_cast<const uint8_t*>(old.a->data) + size_t(s) * old.a->nb[2];
      uint8_t* a_dst = static_cast<uint8_t*>(stacks[i].a->data) + size_t(s) * stacks[i].a->nb[2];
      std::memcpy(a_dst, a_src, size_t(r_old * in) * es);
      // B's rows (one per rank index) keep their layout; the new ones stay zero.
      const uint8_t* b_src = static_cast<const uint8_t*>(old.b->data) + size_t(s) * old.b->nb[2];
      uint8_t* b_dst = static_cast<uint8_t*>(stacks[i].b->data) + size_t(s) * stacks[i].b->nb[2];
      std::memcpy(b_dst, b_src, size_t(r_old * out_rows) * es);
    }
  }
  if (buffer_) ggml_backend_buffer_free(buffer_);
  if (mapped_) ::munmap(mapped_, mapped_bytes_);
  if (ctx_) ggml_free(ctx_);
  ctx_ = ctx;
  buffer_ = buffer;
  memory_ = memory;
  mapped_ = mapped;
  mapped_bytes_ = mapped_bytes;
  slot_bytes_ = slot_bytes;
  slot_used_bytes_ = used;
  stacks_ = std::move(stacks);
  n_slots_ = n_slots;
  max_rank_ = max_rank;
  ++version_;
  return {};
}

std::vector<float> to_floats(const LoraSource& source) {
  std::vector<float> out(size_t(source.n));
  if (source.type == GGML_TYPE_F32) {
    std::memcpy(out.data(), source.data, out.size() * sizeof(float));
  } else {
    ggml_get_type_traits(source.type)->to_float(source.data, out.data(), source.n);
  }
  return out;
}

namespace {

void store_row(ggml_type type, const float* src, void* dst, int64_t n) {
  if (type == GGML_TYPE_F16) {
    ggml_cpu_fp32_to_fp16(src, static_cast<ggml_fp16_t*>(dst), n);
  } else {
    std::memcpy(dst, src, size_t(n) * sizeof(float));
  }
}

// dst row k = column k of the n_out x rank matrix src (elements of T).
template <typename T>
void transpose(const void* src, int64_t n_out, int rank, uint8_t* dst, size_t row_bytes) {
  const T* in = static_cast<const T*>(src);
  for (int k = 0; k < rank; ++k) {
    T* out = reinterpret_cast<T*>(dst + size_t(k) * row_bytes);
    for (int64_t o = 0; o < n_out; ++o) out[o] = in[o * rank + k];
  }
}

}  // namespace

void LoraSet::write_rows(const std::vector<float>& values, const LoraSource& source, int64_t rows, int64_t n,
                         void* dst) {
  const int64_t count = rows * n;
  if (!source.data) {
    store_row(type_, values.data(), dst, count);
  } else if (source.type == type_) {
    std::memcpy(dst, source.data, size_t(count) * ggml_type_size(type_));
  } else {
    scratch_ = to_floats(source);
    store_row(type_, scratch_.data(), dst, count);
  }
}

void LoraSet::write_columns(const std::vector<float>& values, const LoraSource& source, int64_t n_out,
                            int rank, uint8_t* dst, size_t row_bytes) {
  if (source.data && source.type == type_) {
    if (type_ == GGML_TYPE_F16) {
      transpose<ggml_fp16_t>(source.data, n_out, rank, dst, row_bytes);
    } else {
      transpose<float>(source.data, n_out, rank, dst, row_bytes);
    }
    return;
  }
  if (source.data) scratch_ = to_floats(source);
  const float* in = source.data ? scratch_.data() : values.data();
  std::vector<float> column(static_cast<size_t>(n_out));
  for (int k = 0; k < rank; ++k) {
    for (int64_t o = 0; o < n_out; ++o) column[size_t(o)] = in[o * rank + k];
    store_row(type_, column.data(), dst + size_t(k) * row_bytes, n_out);
  }
}

void LoraSet::write_pair(int slot, const LoraPair& p) {
  const Stack& st = stacks_[size_t(index(p.layer, p.target))];
  const int64_t in = st.a->ne[0], out_rows = st.b->ne[0];
  uint8_t* a = static_cast<uint8_t*>(st.a->data) + size_t(slot) * st.a->nb[2];
  prefault_writable(a, size_t(p.rank) * st.a->nb[1]);
  write_rows(p.a, p.a_source, p.rank, in, a);
  // B is stored transposed: row k holds column k of the n_out x rank matrix.
  uint8_t* b = static_cast<uint8_t*>(st.b->data) + size_t(slot) * st.b->nb[2];
  prefault_writable(b, size_t(p.rank) * st.b->nb[1]);
  write_columns(p.b, p.b_source, out_rows, p.rank, b, st.b->nb[1]);
}

void LoraSet::zero_slot(int slot) {
  if (memory_ && slot < n_slots_) zero_range(memory_ + size_t(slot) * slot_bytes_, slot_bytes_);
}

}  // namespace graft
