#include "train/lora_params.h"

#include <cmath>
#include <cstring>
#include <random>

#include <ggml-cpu.h>

#include "io/safetensors.h"

namespace graft {

namespace {

std::pair<int64_t, int64_t> projection_shape(const ModelConfig& c, int layer, LoraTarget target) {
  return {lora_n_in(c, layer, target), lora_n_out(c, layer, target)};
}

float* data(ggml_tensor* t) {
  return static_cast<float*>(t->data);
}

std::string pair_name(const LoraParams::Pair& p, const char* what) {
  return "blk." + std::to_string(p.layer) + "." + lora_target_name(p.target) + "." + what;
}

}  // namespace

Result<std::unique_ptr<LoraParams>> LoraParams::create(const ModelConfig& config, int rank,
                                                       const std::vector<int>& layers,
                                                       const std::vector<LoraTarget>& targets) {
  if (rank <= 0) return errorf("invalid_argument", "rank must be at least 1 (got {})", rank);
  if (layers.empty() || targets.empty())
    return errorf("invalid_argument", "no layers or no targets to train");
  std::unique_ptr<LoraParams> p(new LoraParams());
  p->rank_ = rank;
  const size_t n_tensors = layers.size() * targets.size() * 8;
  ggml_init_params params{};
  params.mem_size = ggml_tensor_overhead() * (n_tensors + 1);
  params.no_alloc = true;
  p->ctx_.reset(ggml_init(params));
  if (!p->ctx_) return errorf("out_of_memory", "cannot allocate the LoRA parameter tensors");
  for (int layer : layers) {
    for (LoraTarget target : targets) {
      Pair pair;
      pair.layer = layer;
      pair.target = target;
      std::tie(pair.n_in, pair.n_out) = projection_shape(config, layer, target);
      if (pair.n_in == 0)
        return errorf("invalid_argument", "graft does not train '{}'", lora_target_name(target));
      auto make = [&](int64_t ne0, int64_t ne1, const char* what) {
        ggml_tensor* t = ggml_new_tensor_2d(p->ctx_.get(), GGML_TYPE_F32, ne0, ne1);
        ggml_set_name(t, pair_name(pair, what).c_str());
        return t;
      };
      pair.a = make(pair.n_in, rank, "lora_a");
      pair.b = make(rank, pair.n_out, "lora_b");
      pair.grad_a = make(pair.n_in, rank, "grad_a");
      pair.grad_b = make(rank, pair.n_out, "grad_b");
      pair.m_a = make(pair.n_in, rank, "m_a");
      pair.v_a = make(pair.n_in, rank, "v_a");
      pair.m_b = make(rank, pair.n_out, "m_b");
      pair.v_b = make(rank, pair.n_out, "v_b");
      p->pairs_.push_back(pair);
    }
  }
  p->buffer_.reset(ggml_backend_alloc_ctx_tensors_from_buft(p->ctx_.get(), ggml_backend_cpu_buffer_type()));
  if (!p->buffer_)
    return errorf("out_of_memory", "cannot allocate {} LoRA pairs of rank {}", p->pairs_.size(), rank);
  ggml_backend_buffer_clear(p->buffer_.get(), 0);
  return p;
}

LoraParams::~LoraParams() = default;

int64_t LoraParams::n_params() const {
  int64_t n = 0;
  for (const Pair& p : pairs_) n += ggml_nelements(p.a) + ggml_nelements(p.b);
  return n;
}

size_t LoraParams::bytes() const {
  return buffer_ ? ggml_backend_buffer_get_size(buffer_.get()) : 0;
}

std::vector<ggml_tensor*> LoraParams::all_tensors() const {
  std::vector<ggml_tensor*> out;
  for (const Pair& p : pairs_) {
    for (ggml_tensor* t : {p.a, p.b, p.grad_a, p.grad_b, p.m_a, p.v_a, p.m_b, p.v_b}) out.push_back(t);
  }
  return out;
}

void LoraParams::init(uint64_t seed) {
  ggml_backend_buffer_clear(buffer_.get(), 0);
  std::mt19937_64 rng(seed);
  for (const Pair& p : pairs_) {
    // Uniform floats from the top 24 bits of each draw: the same on every platform.
    const double bound = 1.0 / std::sqrt(double(p.n_in));
    float* a = data(p.a);
    for (int64_t i = 0; i < ggml_nelements(p.a); ++i) {
      const double u = double(rng() >> 40) / double(1 << 24);  // [0, 1)
      a[i] = float((2.0 * u - 1.0) * bound);
    }
  }
}

std::vector<TrainingInputs::Pair> LoraParams::table(int n_layer) const {
  std::vector<TrainingInputs::Pair> t(size_t(n_layer * kLoraTargetCount));
  for (const Pair& p : pairs_) t[size_t(p.layer * kLoraTargetCount + int(p.target))] = {p.a, p.b};
  return t;
}

void LoraParams::zero_grads() {
  for (const Pair& p : pairs_) {
    std::memset(p.grad_a->data, 0, ggml_nbytes(p.grad_a));
    std::memset(p.grad_b->data, 0, ggml_nbytes(p.grad_b));
  }
}

double LoraParams::grad_norm() const {
  double sum = 0.0;
  for (const Pair& p : pairs_) {
    for (ggml_tensor* g : {p.grad_a, p.grad_b}) {
      const float* v = data(g);
      for (int64_t i = 0; i < ggml_nelements(g); ++i) sum += double(v[i]) * double(v[i]);
    }
  }
  return std::sqrt(sum);
}

void LoraParams::scale_grads(float factor) {
  for (const Pair& p : pairs_) {
    for (ggml_tensor* g : {p.grad_a, p.grad_b}) {
      float* v = data(g);
      for (int64_t i = 0; i < ggml_nelements(g); ++i) v[i] *= factor;
    }
  }
}

LoraAdapter LoraParams::to_adapter(float scale) const {
  LoraAdapter adapter;
  adapter.scaling.rank = rank_;
  adapter.scaling.alpha = scale * float(rank_);
  for (const Pair& p : pairs_) {
    LoraPair out;
    out.layer = p.layer;
    out.target = p.target;
    out.rank = rank_;
    out.a = LoraMatrix::of_floats(std::vector<float>(data(p.a), data(p.a) + ggml_nelements(p.a)));
    out.b = LoraMatrix::of_floats(std::vector<float>(data(p.b), data(p.b) + ggml_nelements(p.b)));
    adapter.pairs.push_back(std::move(out));
  }
  return adapter;
}

Status LoraParams::save_state(const std::string& path, bool with_moments) const {
  SafetensorsWriter writer;
  for (const Pair& p : pairs_) {
    std::vector<std::pair<ggml_tensor*, const char*>> tensors = {{p.a, "lora_a"}, {p.b, "lora_b"}};
    if (with_moments) {
      tensors.insert(tensors.end(), {{p.m_a, "m_a"}, {p.v_a, "v_a"}, {p.m_b, "m_b"}, {p.v_b, "v_b"}});
    }
    for (auto [t, what] : tensors) {
      GRAFT_TRY_STATUS(writer.add(pair_name(p, what), {t->ne[1], t->ne[0]},
                                  std::span<const float>(data(t), size_t(ggml_nelements(t)))));
    }
  }
  writer.set_metadata("rank", std::to_string(rank_));
  return writer.write(path);
}

Status LoraParams::load_state(const std::string& path, bool with_moments) {
  GRAFT_TRY(SafetensorsFile file, SafetensorsFile::open(path));
  for (const Pair& p : pairs_) {
    std::vector<std::pair<ggml_tensor*, const char*>> tensors = {{p.a, "lora_a"}, {p.b, "lora_b"}};
    if (with_moments) {
      tensors.insert(tensors.end(), {{p.m_a, "m_a"}, {p.v_a, "v_a"}, {p.m_b, "m_b"}, {p.v_b, "v_b"}});
    }
    for (auto [t, what] : tensors) {
      const std::string name = pair_name(p, what);
      const SafetensorsTensor* entry = file.find(name);
      if (!entry) return errorf("invalid_checkpoint", "{}: missing tensor '{}'", path, name);
      if (entry->dtype != "F32" || entry->shape != std::vector<int64_t>{t->ne[1], t->ne[0]}) {
        return errorf("invalid_checkpoint", "{}: tensor '{}' is not F32 [{}, {}]", path, name, t->ne[1],
                      t->ne[0]);
      }
      std::memcpy(t->data, file.bytes(*entry).data(), ggml_nbytes(t));
    }
  }
  return {};
}

}  // namespace graft
