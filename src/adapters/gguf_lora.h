// GGUF LoRA adapters: general.type = "adapter", adapter.type = "lora",
// adapter.lora.alpha, and tensor pairs "blk.N.attn_q.weight.lora_a" (ggml
// shape [n_in, rank]) / ".lora_b" ([rank, n_out]) in any ggml type.
#pragma once

#include <string>

#include "adapters/lora_adapter.h"

namespace graft {

// Whether a GGUF file declares itself an adapter (reads the header only).
bool is_gguf_adapter(const fs::path& path);

// Reads the metadata and tensor directory; no weights.
Result<AdapterDescription> describe_gguf_lora(const fs::path& path);
// Reads the weights (in place, in their own types), checking them as describe does.
Result<LoraAdapter> read_gguf_lora(const fs::path& path);

struct GgufLoraWriteOptions {
  std::string architecture = "llama";  // general.architecture: must match the base model's
  std::string name;                    // general.name, optional
  std::string type = "f32";            // tensor type: f32, f16 or bf16
};

// Writes the adapter as one GGUF file, atomically. Its scaling must not use
// rsLoRA (GGUF LoRA has no key for it).
Status write_gguf_lora(const fs::path& path, const LoraAdapter& adapter,
                       const GgufLoraWriteOptions& options = {});

}  // namespace graft
