// Shared by the trainer's tests: tiny models (with a 256-token vocabulary
// when no tokenizer is needed, so a loss costs little and rounds little),
// their dequantized F32 twins, and micro-batches of random tokens.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <ggml-cpp.h>
#include <gguf.h>

#include "testing/test_models.h"
#include "train/micro_batch.h"

namespace graft::testing {

// A vocabulary GGUF of n plain tokens ("a0", "a1", ...), written once.
inline std::string small_vocab(int n = 256) {
  const std::string path = test_models_dir() + "/vocab-" + std::to_string(n) + ".gguf";
  if (std::filesystem::exists(path)) return path;
  gguf_context_ptr ctx(gguf_init_empty());
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) names.push_back(fmt::format("a{}", i));
  std::vector<const char*> ptrs;
  for (const std::string& s : names) ptrs.push_back(s.c_str());
  gguf_set_val_str(ctx.get(), "tokenizer.ggml.model", "gpt2");
  gguf_set_arr_str(ctx.get(), "tokenizer.ggml.tokens", ptrs.data(), ptrs.size());
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  gguf_write_to_file(ctx.get(), tmp.c_str(), false);
  std::filesystem::rename(tmp, path);
  return path;
}

// A tiny model over the small vocabulary.
inline TestModelSpec gradient_spec(const std::string& arch, const std::string& type) {
  TestModelSpec spec;
  spec.arch = arch;
  spec.vocab_path = small_vocab();
  spec.n_embd = 64;
  spec.n_layer = 2;
  spec.n_head = 4;
  spec.n_head_kv = 2;
  spec.n_ff = 128;
  spec.n_ctx = 256;
  spec.type = type;
  spec.logit_scale = 1.0f;
  return spec;
}

// The same GGUF with every tensor turned into F32 (written once).
inline std::string dequantized_copy(const std::string& from) {
  const std::string to = from.substr(0, from.size() - 5) + "-as-f32.gguf";
  if (std::filesystem::exists(to)) return to;
  ggml_context* data_ctx = nullptr;
  gguf_init_params params{};
  params.no_alloc = false;
  params.ctx = &data_ctx;
  gguf_context_ptr src(gguf_init_from_file(from.c_str(), params));
  ggml_context_ptr data(data_ctx);
  gguf_context_ptr dst(gguf_init_empty());
  gguf_set_kv(dst.get(), src.get());
  gguf_set_val_u32(dst.get(), "general.file_type", 0);
  ggml_init_params out_params{};
  out_params.mem_size =
      size_t(gguf_get_n_tensors(src.get())) * (ggml_tensor_overhead() + 64) + (size_t(64) << 20);
  ggml_context_ptr out(ggml_init(out_params));
  for (int64_t i = 0; i < gguf_get_n_tensors(src.get()); ++i) {
    ggml_tensor* t = ggml_get_tensor(data.get(), gguf_get_tensor_name(src.get(), i));
    ggml_tensor* f = ggml_new_tensor(out.get(), GGML_TYPE_F32, GGML_MAX_DIMS, t->ne);
    ggml_set_name(f, t->name);
    if (t->type == GGML_TYPE_F32) {
      std::memcpy(f->data, t->data, ggml_nbytes(t));
    } else {
      ggml_get_type_traits(t->type)->to_float(t->data, static_cast<float*>(f->data), ggml_nelements(t));
    }
    gguf_add_tensor(dst.get(), f);
  }
  const std::string tmp = to + ".tmp" + std::to_string(::getpid());
  gguf_write_to_file(dst.get(), tmp.c_str(), false);
  std::filesystem::rename(tmp, to);
  return to;
}

// n_seqs sequences of seq_len random tokens, every row but each sequence's
// last predicting the next token, weighted to a mean.
inline MicroBatch random_batch(int n_seqs, int seq_len, int n_vocab, uint64_t seed) {
  std::mt19937 rng{uint32_t(seed)};
  MicroBatch b;
  b.n_seqs = n_seqs;
  b.seq_len = seq_len;
  for (int i = 0; i < n_seqs * seq_len; ++i) b.tokens.push_back(int32_t(rng() % uint32_t(n_vocab)));
  for (int s = 0; s < n_seqs; ++s) {
    for (int i = 0; i + 1 < seq_len; ++i) {
      b.loss_rows.push_back(s * seq_len + i);
      b.labels.push_back(b.tokens[size_t(s * seq_len + i + 1)]);
    }
  }
  b.weights.assign(b.loss_rows.size(), 1.0f / float(b.loss_rows.size()));
  b.n_tokens = int64_t(b.tokens.size());
  return b;
}

}  // namespace graft::testing
