// Helpers for tests: bundle paths and small cached test models.
#pragma once

#include <string>

#include "tools/test_model.h"

namespace graft::testing {

// The llama.cpp release tree the build was configured with.
std::string bundle_dir();
std::string bundle_vocab(const std::string& name);     // models/ggml-vocab-<name>.gguf
std::string bundle_template(const std::string& name);  // models/templates/<name>.jinja

// A small spec (2 layers, 128 wide) for fast tests, with the given vocab.
TestModelSpec tiny_spec(const std::string& arch = "llama", const std::string& vocab = "llama-bpe",
                        const std::string& type = "f32");

// A small hybrid (qwen35) spec: 4 layers of which the last is full attention,
// 128 wide, tied output, with the given vocab.
TestModelSpec tiny_qwen35_spec(const std::string& vocab = "llama-spm", const std::string& type = "f16");

// A small Gemma 3 spec: 3 layers (two local, sliding over 8 positions, then
// a global one), heads 64 wide (4 query heads, 1 key/value head: wider than
// the embedding, as Gemma's are), with the given vocab. Its own output
// matrix: a random tied one makes every continuation repeat its last token.
TestModelSpec tiny_gemma3_spec(const std::string& vocab = "llama-spm", const std::string& type = "f16");
// A small Gemma 4 spec in E2B's layout: 6 layers (two local, sliding over 8
// positions, then a global one, twice), local heads 32 wide and global ones
// 64 (1 key/value head), the last 3 layers sharing layers 1's and 2's keys
// and values with a twice as wide FFN, 32-wide per-layer inputs, a logit
// softcap of 30. Its own output matrix, as for gemma3.
TestModelSpec tiny_gemma4_spec(const std::string& vocab = "llama-spm", const std::string& type = "f16");

// Writes the model once per ctest run into a folder shared by all tests
// (atomically, so parallel tests are safe) and returns its path. The file
// name encodes the spec.
std::string test_model_path(const TestModelSpec& spec);

std::string test_models_dir();

// The parity goldens recorded with llama.cpp on a CPU of this one's kind:
// tests/data/goldens/<kind>, where the kind (avx512 or avx2) is what ggml
// was built for. Greedy tokens follow the kernels' order of summation, and
// ggml's AVX-512 and AVX2 kernels sum in different orders, so a near tie can
// break differently on each; scripts/make-goldens.sh and
// make-adapter-goldens.sh record into the folder of the CPU they run on.
std::string goldens_cpu_kind();
std::string goldens_dir();

// A per-process folder for files a test makes.
std::string scratch_dir();

}  // namespace graft::testing
