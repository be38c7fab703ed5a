// `graft make-test-model`: writes a deterministic random-weight GGUF model.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/paths.h"
#include "tools/test_model.h"

namespace graft::cli {

namespace {

// The options only some families read, and those families.
struct FamilyOption {
  const char* flag;
  std::vector<std::string> families;
};
const FamilyOption kFamilyOptions[] = {
    {"--full-attention-interval", {"qwen35"}},
    {"--ssm-conv", {"qwen35"}},
    {"--ssm-head-dim", {"qwen35"}},
    {"--ssm-k-heads", {"qwen35"}},
    {"--ssm-v-heads", {"qwen35"}},
    {"--sliding-window", {"gemma3", "gemma4"}},
    {"--sliding-window-pattern", {"gemma3", "gemma4"}},
    {"--rope-base-local", {"gemma3", "gemma4"}},
    {"--logit-softcap", {"gemma3", "gemma4"}},
    {"--head-dim-local", {"gemma4"}},
    {"--shared-kv-layers", {"gemma4"}},
    {"--per-layer-embd", {"gemma4"}},
    {"--double-wide-ffn", {"gemma4"}},
    {"--scale-emb", {"minicpm"}},
    {"--scale-depth", {"minicpm"}},
    {"--dim-model-base", {"minicpm"}},
};

}  // namespace

void add_make_test_model_command(CLI::App& app) {
  auto spec = std::make_shared<TestModelSpec>();
  auto out = std::make_shared<std::string>();
  auto template_file = std::make_shared<std::string>();
  auto* cmd =
      app.add_subcommand("make-test-model", "Write a random-weight GGUF model for tests and benchmarks");
  cmd->add_option("output", *out, "Path of the GGUF file to write")->required();
  cmd->add_option("--arch", spec->arch,
                  "Architecture: llama, qwen2, qwen3, qwen35, gemma3, gemma4 or minicpm")
      ->capture_default_str();
  cmd->add_option("--vocab", spec->vocab_path,
                  "GGUF to copy the tokenizer from (default: the bundle's ggml-vocab-llama-bpe.gguf)");
  cmd->add_option("--name", spec->name, "general.name")->capture_default_str();
  cmd->add_option("--embd", spec->n_embd, "Embedding width")->capture_default_str();
  cmd->add_option("--layers", spec->n_layer, "Number of layers")->capture_default_str();
  cmd->add_option("--heads", spec->n_head, "Attention heads")->capture_default_str();
  cmd->add_option("--kv-heads", spec->n_head_kv, "Key/value heads")->capture_default_str();
  cmd->add_option("--head-dim", spec->head_dim, "Head width (0: embd / heads)")->capture_default_str();
  cmd->add_option("--ffn", spec->n_ff, "Feed-forward width")->capture_default_str();
  cmd->add_option("--ctx", spec->n_ctx, "Context length")->capture_default_str();
  cmd->add_option("--rope-base", spec->rope_freq_base, "RoPE frequency base")->capture_default_str();
  cmd->add_option("--rope-scaling", spec->rope_scaling, "RoPE scaling: linear or llama3 (default none)");
  cmd->add_option("--rope-scale", spec->rope_scaling_factor, "RoPE scaling factor")->capture_default_str();
  cmd->add_option("--type", spec->type, "Weight type: f32, f16, bf16, q8_0, q4_0, q4_1, q4_k, q5_k, q6_k")
      ->capture_default_str();
  cmd->add_flag("--tied", spec->tied_output, "Reuse the embedding as the output matrix");
  cmd->add_option("--rope-dims", spec->rope_dims,
                  "Rotated dimensions of each head (0: all; qwen35: a quarter)")
      ->capture_default_str();
  cmd->add_option("--full-attention-interval", spec->full_attention_interval,
                  "qwen35: every n-th layer is full attention, the others linear attention")
      ->capture_default_str();
  cmd->add_option("--ssm-conv", spec->ssm_conv_kernel, "qwen35: taps of the linear attention's convolution")
      ->capture_default_str();
  cmd->add_option("--ssm-head-dim", spec->ssm_head_dim,
                  "qwen35: width of the linear attention's heads (0: head-dim / 2)")
      ->capture_default_str();
  cmd->add_option("--ssm-k-heads", spec->ssm_k_heads, "qwen35: linear-attention key heads (0: kv-heads)")
      ->capture_default_str();
  cmd->add_option("--ssm-v-heads", spec->ssm_v_heads,
                  "qwen35: linear-attention value heads (0: twice the key heads)")
      ->capture_default_str();
  cmd->add_option("--sliding-window", spec->sliding_window,
                  "gemma3, gemma4: positions a local layer attends to (0: every layer global)")
      ->capture_default_str();
  cmd->add_option("--sliding-window-pattern", spec->sliding_window_pattern,
                  "gemma3, gemma4: every n-th layer is global, the others local")
      ->capture_default_str();
  cmd->add_option("--rope-base-local", spec->rope_freq_base_local,
                  "gemma3, gemma4: RoPE base of the local layers")
      ->capture_default_str();
  cmd->add_option("--logit-softcap", spec->final_logit_softcap,
                  "gemma3, gemma4: final logit softcapping (0: none)")
      ->capture_default_str();
  cmd->add_option("--head-dim-local", spec->head_dim_local,
                  "gemma4: head width of the local layers (0: half the global ones)")
      ->capture_default_str();
  cmd->add_option("--shared-kv-layers", spec->shared_kv_layers,
                  "gemma4: last layers that reuse earlier layers' keys and values")
      ->capture_default_str();
  cmd->add_option("--per-layer-embd", spec->n_embd_per_layer,
                  "gemma4: width of each layer's per-layer token input (0: none)")
      ->capture_default_str();
  cmd->add_option("--double-wide-ffn", spec->double_wide_ffn,
                  "gemma4: the shared-KV layers' FFN is twice as wide (true/false)")
      ->capture_default_str();
  cmd->add_option("--scale-emb", spec->scale_emb, "minicpm: embedding scale")->capture_default_str();
  cmd->add_option("--scale-depth", spec->scale_depth, "minicpm: residual scale x sqrt(layers)")
      ->capture_default_str();
  cmd->add_option("--dim-model-base", spec->dim_model_base, "minicpm: logits are divided by embd / this")
      ->capture_default_str();
  cmd->add_option("--unreadable-scale", spec->unreadable_scale,
                  "Scale of the output rows of non-word tokens (special tokens included); 1 lets a "
                  "trained adapter make the model end its answers")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 1.0f));
  cmd->add_option("--seed", spec->seed, "Random seed")->capture_default_str();
  cmd->add_option("--chat-template", *template_file,
                  "File with the chat template to embed, or 'none' (default: the vocab's own)");
  cmd->callback([=] {
    // A family's own option given with another --arch would be ignored: refuse it.
    for (const FamilyOption& o : kFamilyOptions) {
      if (cmd->count(o.flag) == 0 || std::ranges::find(o.families, spec->arch) != o.families.end()) continue;
      std::string families = o.families[0];
      if (o.families.size() > 1) families += " and " + o.families[1];
      std::fprintf(stderr, "graft: %s is an option of %s models only; --arch %s does not take it\n", o.flag,
                   families.c_str(), spec->arch.c_str());
      throw CLI::RuntimeError(2);
    }
    if (spec->vocab_path.empty()) spec->vocab_path = bundle_vocab("llama-bpe");
    if (*template_file == "none") {
      spec->chat_template = "none";
    } else if (!template_file->empty()) {
      auto text = read_file(*template_file);
      if (!text) {
        std::fprintf(stderr, "graft: %s\n", text.error().message.c_str());
        throw CLI::RuntimeError(1);
      }
      spec->chat_template = *text;
    }
    Status status = write_test_model(*spec, *out);
    if (!status) {
      std::fprintf(stderr, "graft: %s\n", status.error().message.c_str());
      throw CLI::RuntimeError(1);
    }
    std::printf("wrote %s\n", out->c_str());
  });
}

}  // namespace graft::cli
