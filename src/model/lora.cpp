#include "model/lora.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/lora_stacks.h"
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
    case LoraTarget::per_layer_gate:
      return "inp_gate";
    case LoraTarget::per_layer_proj:
      return "proj";
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
    case LoraTarget::per_layer_gate:
    case LoraTarget::per_layer_proj:
      return config.n_embd_per_layer > 0;
    case LoraTarget::attn_k:
    case LoraTarget::attn_v:
      return !config.is_recurrent(layer) && config.kv_layer_of(layer) == layer;
    default:
      return !config.is_recurrent(layer);
  }
}

int lora_n_in(const ModelConfig& config, int layer, LoraTarget target) {
  switch (target) {
    case LoraTarget::attn_output:
      return config.n_head * config.head_dim_of(layer);
    case LoraTarget::ffn_down:
      return config.n_ff_of(layer);
    case LoraTarget::ssm_out:
      return config.ssm.inner;
    case LoraTarget::per_layer_proj:
      return config.n_embd_per_layer;
    default:
      return config.n_embd;
  }
}

int lora_n_out(const ModelConfig& config, int layer, LoraTarget target) {
  switch (target) {
    case LoraTarget::attn_q:
      return config.n_head * config.head_dim_of(layer) * (config.attn_gate ? 2 : 1);
    case LoraTarget::attn_k:
    case LoraTarget::attn_v:
      return config.n_head_kv * config.head_dim_of(layer);
    case LoraTarget::ffn_gate:
    case LoraTarget::ffn_up:
      return config.n_ff_of(layer);
    case LoraTarget::attn_qkv:
      return int(config.ssm.conv_dim());
    case LoraTarget::attn_gate:
      return config.ssm.inner;
    case LoraTarget::ssm_alpha:
    case LoraTarget::ssm_beta:
      return config.ssm.n_v_heads;
    case LoraTarget::per_layer_gate:
      return config.n_embd_per_layer;
    default:
      return config.n_embd;
  }
}

LoraMatrix LoraMatrix::of_floats(std::vector<float> values, ggml_type type) {
  LoraMatrix m;
  m.type = type;
  m.n = int64_t(values.size());
  if (type == GGML_TYPE_F32) {
    auto owned = std::make_shared<const std::vector<float>>(std::move(values));
    m.data = owned->data();
    m.owner = std::move(owned);
    return m;
  }
  GGML_ASSERT(type == GGML_TYPE_F16 || type == GGML_TYPE_BF16);
  auto owned = std::make_shared<std::vector<uint16_t>>(values.size());
  if (type == GGML_TYPE_F16) {
    ggml_fp32_to_fp16_row(values.data(), reinterpret_cast<ggml_fp16_t*>(owned->data()), m.n);
  } else {
    ggml_fp32_to_bf16_row(values.data(), reinterpret_cast<ggml_bf16_t*>(owned->data()), m.n);
  }
  m.data = owned->data();
  m.owner = std::move(owned);
  return m;
}

std::vector<float> LoraMatrix::floats() const {
  std::vector<float> out(static_cast<size_t>(n));
  if (n == 0) return out;
  if (type == GGML_TYPE_F32) {
    std::memcpy(out.data(), data, out.size() * sizeof(float));
  } else {
    ggml_get_type_traits(type)->to_float(data, out.data(), n);
  }
  return out;
}

ggml_type ggml_type_of(LoraType type) {
  switch (type) {
    case LoraType::f16:
      return GGML_TYPE_F16;
    case LoraType::bf16:
      return GGML_TYPE_BF16;
    case LoraType::f32:
      return GGML_TYPE_F32;
  }
  return GGML_TYPE_F32;
}

LoraType lora_type_of(const LoraWeights& weights) {
  bool all_f16 = true, all_bf16 = true;
  for (const LoraPair& p : weights.pairs) {
    for (const LoraMatrix* m : {&p.a, &p.b}) {
      all_f16 = all_f16 && m->type == GGML_TYPE_F16;
      all_bf16 = all_bf16 && m->type == GGML_TYPE_BF16;
    }
  }
  if (weights.pairs.empty()) return LoraType::f32;
  return all_f16 ? LoraType::f16 : all_bf16 ? LoraType::bf16 : LoraType::f32;
}

LoraSet::LoraSet() = default;
LoraSet::~LoraSet() = default;

void LoraSet::init(const ModelConfig& config) {
  config_ = &config;
}

Status LoraSet::check(const LoraWeights& weights) const {
  if (weights.pairs.empty()) return errorf("invalid_adapter", "the adapter has no LoRA matrices");
  if (!std::isfinite(weights.scale))
    return errorf("invalid_adapter", "the adapter's scale is not a finite number");
  std::vector<bool> seen(size_t(config_->n_layer * kLoraTargetCount), false);
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
    const int n_in = lora_n_in(*config_, p.layer, p.target), n_out = lora_n_out(*config_, p.layer, p.target);
    const int64_t want_a = int64_t(p.rank) * n_in;
    const int64_t want_b = int64_t(n_out) * p.rank;
    if (p.a.n != want_a) {
      return errorf("invalid_adapter",
                    "LoRA pair blk.{}.{}: lora_a has {} values, expected rank {} x {} = {}", p.layer, name,
                    p.a.n, p.rank, n_in, want_a);
    }
    if (p.b.n != want_b) {
      return errorf("invalid_adapter",
                    "LoRA pair blk.{}.{}: lora_b has {} values, expected {} x rank {} = {}", p.layer, name,
                    p.b.n, n_out, p.rank, want_b);
    }
    for (const LoraMatrix* m : {&p.a, &p.b}) {
      if (!m->data)
        return errorf("invalid_adapter", "LoRA pair blk.{}.{}: a matrix has no data", p.layer, name);
      if (m->type != GGML_TYPE_F32 && !ggml_get_type_traits(m->type)->to_float) {
        return errorf("invalid_adapter", "LoRA pair blk.{}.{}: values of type {} cannot be read", p.layer,
                      name, ggml_type_name(m->type));
      }
    }
    const size_t i = size_t(p.layer * kLoraTargetCount + int(p.target));
    if (seen[i]) return errorf("invalid_adapter", "LoRA pair blk.{}.{} appears twice", p.layer, name);
    seen[i] = true;
  }
  return {};
}

Result<int> LoraSet::mount(const LoraWeights& weights) {
  if (!config_) return errorf("internal", "LoRA set not initialized");
  GRAFT_TRY_STATUS(check(weights));
  const LoraType type = lora_type_of(weights);
  std::unique_ptr<LoraStacks>& stacks = stacks_[size_t(type)];
  if (!stacks) stacks = std::make_unique<LoraStacks>(*config_, ggml_type_of(type));
  bool relaid = false;
  GRAFT_TRY(const int index, stacks->make_room(weights, &relaid));
  stacks->write(index, weights);
  if (relaid) ++version_;

  int slot = 0;
  while (slot < int(slots_.size()) && slots_[size_t(slot)].used) ++slot;
  if (slot >= int(slots_.size())) slots_.resize(size_t(slot + 1));
  slots_[size_t(slot)] = Slot{true, weights.scale, Place{type, index}};
  return slot;
}

Status LoraSet::unmount(int slot) {
  if (!mounted(slot)) return errorf("not_found", "no LoRA adapter is mounted in slot {}", slot);
  const Place p = slots_[size_t(slot)].place;
  stacks_[size_t(p.type)]->clear(p.index);
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

size_t LoraSet::bytes(int slot) const {
  if (!mounted(slot)) return 0;
  return stacks_[size_t(slots_[size_t(slot)].place.type)]->slot_bytes();
}

size_t LoraSet::bytes() const {
  // What the mounted adapters occupy (the reservation beyond them costs nothing).
  size_t total = 0;
  for (int s = 0; s < int(slots_.size()); ++s) total += bytes(s);
  return total;
}

LoraSet::Place LoraSet::place(int slot) const {
  return mounted(slot) ? slots_[size_t(slot)].place : Place{};
}

LoraSet::Stack LoraSet::stack(int layer, LoraTarget target, LoraType type) const {
  const auto& stacks = stacks_[size_t(type)];
  return stacks ? stacks->stack(layer, target) : Stack{};
}

}  // namespace graft
