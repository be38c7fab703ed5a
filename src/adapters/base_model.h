// What adapters are checked against: a base model's identity (architecture,
// repository id, fingerprint) and the shapes of its adaptable projections,
// all read from its GGUF header.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "adapters/lora_adapter.h"
#include "io/gguf_file.h"

namespace graft {

struct BaseModel {
  std::string architecture;
  std::string repo;         // the best-known repository id; may be empty
  std::string name;         // general.name; may be empty
  std::string fingerprint;  // see model_fingerprint
  int n_layer = 0;
  // (layer, target) -> (n_in, n_out) of the projection's weight.
  std::map<std::pair<int, LoraTarget>, std::pair<int64_t, int64_t>> shapes;
  // qwen35's linear attention: key and value heads and their width (0 otherwise).
  int ssm_k_heads = 0;
  int ssm_v_heads = 0;
  int ssm_head_dim = 0;

  static Result<BaseModel> from_gguf(const GgufFile& file);
  static Result<BaseModel> open(const std::string& path);
  // repo, else name, else the fingerprint's first characters: for messages.
  std::string label() const;
};

// "sha256:<hex>" over the architecture, its "<arch>.*" metadata, the
// tokenizer's token list, and every tensor's name and shape (not its type or
// bytes). A renamed or requantized copy of a model has the same fingerprint;
// a model of another shape, or with another vocabulary, does not.
std::string model_fingerprint(const GgufFile& file);

// Checks that every module fits the base: the layer exists, the projection is
// there and has the same (n_in, n_out), and a GGUF adapter's architecture
// matches. The error names the first mismatch.
Status check_adapter_fits(const AdapterDescription& adapter, const BaseModel& base);

// The first 12 hex digits of a fingerprint, for display.
std::string short_fingerprint(const std::string& fingerprint);

}  // namespace graft
