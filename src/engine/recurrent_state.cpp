#include "engine/recurrent_state.h"

#include <algorithm>
#include <cstring>

#include <ggml-cpu.h>

namespace graft {

Result<std::unique_ptr<RecurrentState>> RecurrentState::create(const ModelConfig& config, int n_seq,
                                                               int n_snapshots) {
  if (!config.has_recurrent_layers()) return errorf("internal", "the model has no recurrent layers");
  if (n_seq <= 0 || n_snapshots < 0) return errorf("invalid_argument", "bad recurrent state slot counts");
  std::unique_ptr<RecurrentState> state(new RecurrentState());
  state->n_seq_ = n_seq;
  state->snapshots_.resize(size_t(n_snapshots));
  const int64_t n_slots = int64_t(n_seq) + n_snapshots;
  ggml_init_params params{};
  params.mem_size = ggml_tensor_overhead() * (2 * size_t(config.n_layer) + 1);
  params.no_alloc = true;
  state->ctx_.reset(ggml_init(params));
  if (!state->ctx_) return errorf("out_of_memory", "cannot allocate the recurrent state tensors");
  state->layers_.resize(size_t(config.n_layer));
  for (int il = 0; il < config.n_layer; ++il) {
    if (!config.is_recurrent(il)) continue;
    RecurrentInputs::Layer& l = state->layers_[size_t(il)];
    l.conv = ggml_new_tensor_2d(state->ctx_.get(), GGML_TYPE_F32, config.ssm.conv_state_size(), n_slots);
    l.delta = ggml_new_tensor_2d(state->ctx_.get(), GGML_TYPE_F32, config.ssm.delta_state_size(), n_slots);
    ggml_format_name(l.conv, "conv_state.%d", il);
    ggml_format_name(l.delta, "delta_state.%d", il);
    state->bytes_per_state_ += l.conv->nb[1] + l.delta->nb[1];
  }
  // Not cleared: pages are touched only when a slot is first written.
  state->buffer_.reset(
      ggml_backend_alloc_ctx_tensors_from_buft(state->ctx_.get(), ggml_backend_cpu_buffer_type()));
  if (!state->buffer_) {
    return errorf("out_of_memory", "cannot reserve {} MiB for recurrent states",
                  state->bytes_per_state_ * size_t(n_slots) >> 20);
  }
  return state;
}

RecurrentState::~RecurrentState() = default;

int RecurrentState::n_snapshots() const {
  return int(
      std::count_if(snapshots_.begin(), snapshots_.end(), [](const Snapshot& s) { return s.seq >= 0; }));
}

void RecurrentState::reset(SeqId seq) {
  for (const RecurrentInputs::Layer& l : layers_) {
    if (!l.conv) continue;
    for (ggml_tensor* t : {l.conv, l.delta})
      std::memset(static_cast<uint8_t*>(t->data) + size_t(seq) * t->nb[1], 0, t->nb[1]);
  }
}

void RecurrentState::copy_slot(int from, int to) {
  if (from == to) return;
  for (const RecurrentInputs::Layer& l : layers_) {
    if (!l.conv) continue;
    for (ggml_tensor* t : {l.conv, l.delta}) {
      auto* base = static_cast<uint8_t*>(t->data);
      std::memcpy(base + size_t(to) * t->nb[1], base + size_t(from) * t->nb[1], t->nb[1]);
    }
  }
}

void RecurrentState::copy(SeqId src, SeqId dst) {
  copy_slot(src, dst);
}

int RecurrentState::find(SeqId seq, int pos) const {
  for (size_t j = 0; j < snapshots_.size(); ++j) {
    if (snapshots_[j].seq == seq && snapshots_[j].pos == pos) return int(j);
  }
  return -1;
}

Status RecurrentState::save(SeqId seq, int pos) {
  int j = find(seq, pos);
  if (j < 0) {
    auto it = std::find_if(snapshots_.begin(), snapshots_.end(), [](const Snapshot& s) { return s.seq < 0; });
    if (it == snapshots_.end()) {
      return errorf("state_snapshots_full", "all {} recurrent state snapshot slots are in use",
                    snapshots_.size());
    }
    j = int(it - snapshots_.begin());
  }
  copy_slot(seq, n_seq_ + j);
  snapshots_[size_t(j)] = Snapshot{seq, pos};
  return {};
}

bool RecurrentState::has(SeqId seq, int pos) const {
  return find(seq, pos) >= 0;
}

void RecurrentState::restore(SeqId owner, int pos, SeqId dst) {
  const int j = find(owner, pos);
  if (j >= 0) copy_slot(n_seq_ + j, dst);
}

void RecurrentState::drop(SeqId seq, int max_pos) {
  for (Snapshot& s : snapshots_) {
    if (s.seq == seq && s.pos > max_pos) s = Snapshot{};
  }
}

void RecurrentState::drop_all() {
  std::fill(snapshots_.begin(), snapshots_.end(), Snapshot{});
}

std::vector<int> RecurrentState::positions(SeqId seq) const {
  std::vector<int> out;
  for (const Snapshot& s : snapshots_) {
    if (s.seq == seq) out.push_back(s.pos);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace graft
