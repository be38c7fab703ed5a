#include "model/model.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <ggml-cpu.h>
#include <gtest/gtest.h>

#include "model/gguf_rewrite.h"
#include "testing/address_space_limit.h"
#include "testing/test_models.h"

namespace graft {
namespace {

using testing::GgufEdits;
using testing::rewrite_gguf;

std::string tiny(const std::string& arch = "llama", const std::string& type = "f16") {
  return testing::test_model_path(testing::tiny_spec(arch, "llama-bpe", type));
}

TEST(ModelLoad, ReadsTheConfigOfALlamaModel) {
  auto model = Model::load(tiny("llama"));
  ASSERT_TRUE(model.ok()) << model.error().message;
  const ModelConfig& c = (*model)->config();
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.n_vocab, 128256);
  EXPECT_EQ(c.n_embd, 128);
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_head_kv, 2);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.n_ff, 256);
  EXPECT_EQ(c.rope.mode, GGML_ROPE_TYPE_NORMAL);
  EXPECT_FALSE(c.tied_output);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
}

TEST(ModelLoad, Qwen3UsesNeoxRopeAndHeadNorms) {
  auto model = Model::load(tiny("qwen3"));
  ASSERT_TRUE(model.ok()) << model.error().message;
  EXPECT_EQ((*model)->config().rope.mode, GGML_ROPE_TYPE_NEOX);
  EXPECT_TRUE((*model)->config().qk_norm);
  EXPECT_NE((*model)->weights().layers[0].q_norm, nullptr);
}

TEST(ModelLoad, Gemma3ReadsItsLocalAndGlobalLayers) {
  auto model = Model::load(testing::test_model_path(testing::tiny_gemma3_spec("llama-bpe", "f16")));
  ASSERT_TRUE(model.ok()) << model.error().message;
  const ModelConfig& c = (*model)->config();
  EXPECT_EQ(c.rope.mode, GGML_ROPE_TYPE_NEOX);
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_EQ(c.sliding, (std::vector<bool>{true, true, false}));  // every 3rd layer global
  EXPECT_FLOAT_EQ(c.rope.freq_base, 1000000.0f);
  EXPECT_FLOAT_EQ(c.rope_local.freq_base, 10000.0f);
  EXPECT_FLOAT_EQ(c.embd_scale, std::sqrt(128.0f));
  EXPECT_FLOAT_EQ(c.kq_scale, 1.0f / 8.0f);  // 1 / sqrt(head_dim 64)
  EXPECT_EQ(c.logit_softcap, 0.0f);
  EXPECT_EQ(c.n_embd_q(), 256);  // heads wider than the embedding
  EXPECT_NE((*model)->weights().layers[0].attn_post_norm, nullptr);
  EXPECT_NE((*model)->weights().layers[0].ffn_post_norm, nullptr);
}

TEST(ModelLoad, Gemma4ReadsItsLayerKindsSharedKvAndPerLayerInputs) {
  auto model = Model::load(testing::test_model_path(testing::tiny_gemma4_spec("llama-bpe", "f16")));
  ASSERT_TRUE(model.ok()) << model.error().message;
  const ModelConfig& c = (*model)->config();
  const ModelWeights& w = (*model)->weights();
  EXPECT_EQ(c.rope.mode, GGML_ROPE_TYPE_NEOX);
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_EQ(c.sliding, (std::vector<bool>{true, true, false, true, true, false}));
  EXPECT_EQ(c.head_dim_of(0), 32);   // local heads
  EXPECT_EQ(c.head_dim_of(2), 64);   // global heads
  EXPECT_EQ(c.n_embd_kv(), 64);      // the global layers' keys
  EXPECT_EQ(c.n_embd_kv_of(0), 32);  // each layer's cache is as wide as its keys
  EXPECT_EQ(c.rope_local.n_rot, 32);
  EXPECT_FLOAT_EQ(c.rope.freq_base, 1000000.0f);
  EXPECT_FLOAT_EQ(c.rope_local.freq_base, 10000.0f);
  EXPECT_FLOAT_EQ(c.kq_scale, 1.0f);
  EXPECT_FLOAT_EQ(c.logit_softcap, 30.0f);
  // Layers 3..5 attend over the last local (1) and global (2) layer before them.
  EXPECT_EQ(c.kv_shared_from, 3);
  EXPECT_EQ(c.kv_layer_of(1), 1);
  EXPECT_EQ(c.kv_layer_of(3), 1);
  EXPECT_EQ(c.kv_layer_of(4), 1);
  EXPECT_EQ(c.kv_layer_of(5), 2);
  EXPECT_TRUE(c.stores_kv(2));
  EXPECT_FALSE(c.stores_kv(3));  // no cells of its own
  EXPECT_EQ(w.layers[3].wk, nullptr);
  EXPECT_EQ(c.n_ff_of(2), 256);
  EXPECT_EQ(c.n_ff_of(3), 512);  // double-wide FFN in the shared-KV layers
  EXPECT_EQ(c.n_embd_per_layer, 32);
  ASSERT_NE(w.per_layer_tok_embd, nullptr);
  EXPECT_EQ(w.per_layer_tok_embd->ne[0], 32 * 6);
  EXPECT_NE(w.layers[0].per_layer_gate, nullptr);
  EXPECT_NE(w.layers[0].out_scale, nullptr);
  EXPECT_NE(w.rope_freqs, nullptr);
}

TEST(ModelLoad, MiniCpmReadsItsScalings) {
  auto model = Model::load(tiny("minicpm"));
  ASSERT_TRUE(model.ok()) << model.error().message;
  const ModelConfig& c = (*model)->config();
  EXPECT_EQ(c.rope.mode, GGML_ROPE_TYPE_NORMAL);
  EXPECT_FLOAT_EQ(c.embd_scale, 12.0f);
  EXPECT_FLOAT_EQ(c.residual_scale, 1.4f / std::sqrt(2.0f));
  EXPECT_FLOAT_EQ(c.logit_scale, 64.0f / 128.0f);  // logits / (n_embd / dim_model_base)
}

TEST(ModelLoad, TiedOutputReusesTheEmbedding) {
  TestModelSpec spec = testing::tiny_spec("llama", "llama-bpe", "f16");
  spec.tied_output = true;
  auto model = Model::load(testing::test_model_path(spec));
  ASSERT_TRUE(model.ok()) << model.error().message;
  EXPECT_TRUE((*model)->config().tied_output);
  EXPECT_EQ((*model)->weights().output, (*model)->weights().tok_embd);
}

// The first 64 bytes of a tensor's data in the file.
std::vector<char> file_bytes(const std::string& path, const Model& model, const std::string& name) {
  const GgufTensorInfo* info = model.gguf().find_tensor(name);
  std::ifstream file(path, std::ios::binary);
  file.seekg(std::streamoff(info->offset));
  std::vector<char> bytes(64);
  file.read(bytes.data(), 64);
  return bytes;
}

TEST(ModelLoad, MatricesAreCopiedIntoHugePagesAndTheRestStaysInTheFileMap) {
  const std::string path = tiny("llama", "f16");
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok());
  const Model& m = **model;
  EXPECT_EQ(m.repacked_bytes(), 0u);  // no repacked layout for F16 on the CPU backend
  EXPECT_LE(m.weight_bytes(), std::filesystem::file_size(path));
  const ggml_tensor* w = m.weights().layers[1].ffn_down;
  const ggml_tensor* norm = m.weights().layers[1].ffn_norm;
  const ggml_tensor* embd = m.weights().tok_embd;
  const auto* map = static_cast<const uint8_t*>(embd->data);  // read by rows in the mapping
  const GgufTensorInfo* norm_info = m.gguf().find_tensor("blk.1.ffn_norm.weight");
  const uint8_t* map_start = map - m.gguf().find_tensor("token_embd.weight")->offset;
  const size_t file_size = std::filesystem::file_size(path);
  auto in_map = [&](const ggml_tensor* t) {
    const auto* p = static_cast<const uint8_t*>(t->data);
    return p >= map_start && p < map_start + file_size;
  };
  // The matrix is a copy (the same bytes, outside the mapping), 64-byte aligned.
  EXPECT_FALSE(in_map(w));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w->data) % 64, 0u);
  EXPECT_EQ(std::memcmp(w->data, file_bytes(path, m, "blk.1.ffn_down.weight").data(), 64), 0);
  EXPECT_GT(m.copied_bytes(), ggml_nbytes(w) * m.config().n_layer);
  // Norms are copied too (a fault on them in the mapping could map a large
  // folio around them); the token embedding, read by rows, stays mapped.
  EXPECT_FALSE(in_map(norm));
  EXPECT_EQ(std::memcmp(norm->data, file_bytes(path, m, "blk.1.ffn_norm.weight").data(), 64), 0);
  EXPECT_EQ(std::memcmp(embd->data, file_bytes(path, m, "token_embd.weight").data(), 64), 0);
  EXPECT_GT(m.copied_bytes(), ggml_nbytes(w) * m.config().n_layer + ggml_nbytes(norm) * m.config().n_layer);

  // Told not to copy: everything is read in place.
  ModelLoadOptions in_place;
  in_place.copy_weights = false;
  auto mapped = Model::load(path, in_place);
  ASSERT_TRUE(mapped.ok());
  EXPECT_EQ((*mapped)->copied_bytes(), 0u);
  EXPECT_EQ((*mapped)->weight_bytes(), m.weight_bytes());
  const ggml_tensor* w2 = (*mapped)->weights().layers[1].ffn_down;
  EXPECT_EQ(std::memcmp(w2->data, file_bytes(path, m, "blk.1.ffn_down.weight").data(), 64), 0);
  EXPECT_EQ(static_cast<const uint8_t*>(w2->data) -
                static_cast<const uint8_t*>((*mapped)->weights().layers[1].ffn_norm->data),
            std::ptrdiff_t(m.gguf().find_tensor("blk.1.ffn_down.weight")->offset) -
                std::ptrdiff_t(norm_info->offset));
}

TEST(ModelLoad, ATiedEmbeddingIsCopiedOnceAndReadByRowsFromTheCopy) {
  TestModelSpec spec = testing::tiny_spec("llama", "llama-spm", "f16");
  spec.tied_output = true;
  auto model = Model::load(testing::test_model_path(spec));
  ASSERT_TRUE(model.ok());
  const ModelWeights& w = (*model)->weights();
  EXPECT_EQ(w.output, w.tok_embd);  // one tensor: the copy
  EXPECT_GE((*model)->copied_bytes(), ggml_nbytes(w.tok_embd));
}

TEST(ModelLoad, Q4_0WeightsAreRepackedWhereTheCpuHasKernelsForIt) {
  auto model = Model::load(tiny("llama", "q4_0"));
  ASSERT_TRUE(model.ok());
  if (ggml_cpu_has_avx2()) {
    EXPECT_GT((*model)->repacked_bytes(), 0u);
  } else {
    EXPECT_EQ((*model)->repacked_bytes(), 0u);
  }
  ModelLoadOptions no_repack;
  no_repack.repack = false;
  auto plain = Model::load(tiny("llama", "q4_0"), no_repack);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->repacked_bytes(), 0u);
}

TEST(ModelLoad, EveryWeightTypeOfTheTestToolLoads) {
  for (const char* type : {"f32", "bf16", "q8_0", "q4_1", "q4_k", "q5_k", "q6_k"}) {
    TestModelSpec spec = testing::tiny_spec("llama", "llama-spm", type);
    spec.n_embd = 256;  // k-quants need rows of 256
    spec.n_ff = 512;
    auto model = Model::load(testing::test_model_path(spec));
    EXPECT_TRUE(model.ok()) << type << ": " << (model.ok() ? "" : model.error().message);
  }
}

TEST(ModelLoadErrors, MissingFileIsNamed) {
  auto model = Model::load(testing::scratch_dir() + "/nope.gguf");
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.error().message.find("nope.gguf"), std::string::npos) << model.error().message;
}

TEST(ModelLoadErrors, TruncatedFileIsRejected) {
  const std::string from = tiny();
  const std::string to = testing::scratch_dir() + "/truncated.gguf";
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(to, std::filesystem::file_size(from) / 2);
  auto model = Model::load(to);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.error().message.find("truncated.gguf"), std::string::npos) << model.error().message;
  // A file cut inside its header is rejected too.
  std::filesystem::resize_file(to, 100);
  EXPECT_FALSE(Model::load(to).ok());
}

TEST(ModelLoadErrors, MissingTensorIsNamed) {
  const std::string to = testing::scratch_dir() + "/missing-tensor.gguf";
  GgufEdits edits;
  edits.drop_tensors = {"blk.1.ffn_down.weight"};
  ASSERT_TRUE(rewrite_gguf(tiny(), to, edits).ok());
  auto model = Model::load(to);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.error().message.find("missing tensor 'blk.1.ffn_down.weight'"), std::string::npos)
      << model.error().message;
}

TEST(ModelLoadErrors, UnknownArchitectureIsNamed) {
  const std::string to = testing::scratch_dir() + "/unknown-arch.gguf";
  GgufEdits edits;
  edits.set_keys = [](gguf_context* ctx) { gguf_set_val_str(ctx, "general.architecture", "mamba9"); };
  ASSERT_TRUE(rewrite_gguf(tiny(), to, edits).ok());
  auto model = Model::load(to);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.error().message.find("unsupported architecture 'mamba9'"), std::string::npos)
      << model.error().message;
  EXPECT_NE(model.error().message.find("llama, qwen2, qwen3, qwen35, gemma3, gemma4, minicpm"),
            std::string::npos)
      << model.error().message;
}

TEST(ModelLoadErrors, MissingKeyIsNamed) {
  const std::string to = testing::scratch_dir() + "/missing-key.gguf";
  GgufEdits edits;
  edits.drop_keys = {"llama.block_count"};
  ASSERT_TRUE(rewrite_gguf(tiny(), to, edits).ok());
  auto model = Model::load(to);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.error().message.find("llama.block_count"), std::string::npos) << model.error().message;
}

TEST(ModelLoadErrors, WrongTensorShapeIsNamed) {
  const std::string to = testing::scratch_dir() + "/wrong-shape.gguf";
  GgufEdits edits;
  edits.set_keys = [](gguf_context* ctx) { gguf_set_val_u32(ctx, "llama.feed_forward_length", 384); };
  ASSERT_TRUE(rewrite_gguf(tiny(), to, edits).ok());
  auto model = Model::load(to);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.error().message.find("blk.0.ffn_gate.weight' has shape [128, 256], expected [128, 384]"),
            std::string::npos)
      << model.error().message;
}

// Repacked weights whose memory cannot be allocated: loading fails with
// "out_of_memory" naming the size, and succeeds once memory allows.
TEST(ModelLoadErrors, RepackMemoryThatCannotBeAllocatedIsNamed) {
  // Large Q4_0 matrices, a small vocabulary: the repacked copy (~36 MiB) is
  // most of what loading needs beyond the file's mapping.
  TestModelSpec spec = testing::tiny_spec("llama", "llama-spm", "q4_0");
  spec.n_embd = 1024;
  spec.n_ff = 4096;
  const std::string path = testing::test_model_path(spec);
  auto loaded = Model::load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  ASSERT_GT((*loaded)->repacked_bytes(), size_t(16) << 20) << "this CPU repacks no Q4_0 weights";
  loaded->reset();
  {
    testing::AddressSpaceLimit limit(std::filesystem::file_size(path) + (size_t(16) << 20));
    auto model = Model::load(path);
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.error().code, "out_of_memory");
    EXPECT_NE(model.error().message.find("MiB for repacked weights"), std::string::npos)
        << model.error().message;
  }
  EXPECT_TRUE(Model::load(path).ok());
}

}  // namespace
}  // namespace graft
