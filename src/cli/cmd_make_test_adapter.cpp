// `graft make-test-adapter`: writes a deterministic random LoRA adapter for a
// base model, in PEFT form, mlx-lm form, GGUF form, or several (the same weights).
#include <cstdio>
#include <memory>

#include "adapters/gguf_lora.h"
#include "adapters/metadata.h"
#include "adapters/mlx.h"
#include "adapters/peft.h"
#include "adapters/store.h"
#include "cli/commands.h"
#include "tools/test_adapter.h"

namespace graft::cli {

namespace {

struct MakeOptions {
  TestAdapterSpec spec;
  std::string peft_dir;
  std::string mlx_dir;
  std::string gguf_file;
  std::string targets = "all";
  std::vector<int> layers;
  std::string dtype = "f32";
  bool stamp = false;
};

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "graft: %s\n", message.c_str());
  throw CLI::RuntimeError(1);
}

void stamp_beside(const AvailableAdapter& adapter, const BaseModel& base) {
  if (!adapter.readable()) fail(adapter.problem);
  AdapterMetadata m = describe_for_base(adapter.id, *adapter.description, base);
  m.task = "test (random weights)";
  if (Status s = write_adapter_metadata(adapter.metadata_path, m); !s) fail(s.error().message);
}

void make(MakeOptions& o) {
  if (o.peft_dir.empty() && o.mlx_dir.empty() && o.gguf_file.empty()) {
    fail("give --peft DIR, --mlx DIR, --gguf FILE, or several");
  }
  auto base = BaseModel::open(o.spec.base_path);
  if (!base) fail(base.error().message);
  auto targets = test_adapter_targets(o.targets, *base);
  if (!targets) fail(targets.error().message);
  o.spec.targets = *targets;
  o.spec.layers = o.layers;
  auto adapter = make_test_adapter(o.spec, *base);
  if (!adapter) fail(adapter.error().message);
  SafetensorsDtype dtype = SafetensorsDtype::f32;
  if (o.dtype == "f16") {
    dtype = SafetensorsDtype::f16;
  } else if (o.dtype == "bf16") {
    dtype = SafetensorsDtype::bf16;
  } else if (o.dtype != "f32") {
    fail("unknown --dtype '" + o.dtype + "' (f32, f16, bf16)");
  }
  if (!o.mlx_dir.empty()) {
    LoraAdapter mlx = *adapter;  // in Hugging Face's head order
    reorder_value_heads(mlx, *base, HeadOrder::gguf_to_peft);
    if (Status s = write_mlx(o.mlx_dir, mlx, dtype); !s) fail(s.error().message);
    if (o.stamp) stamp_beside(*inspect_adapter(o.mlx_dir), *base);
    std::printf("wrote %s (mlx-lm)\n", o.mlx_dir.c_str());
  }
  if (!o.peft_dir.empty()) {
    PeftWriteOptions options;
    options.base_model_name_or_path = base->label();
    options.dtype = dtype;
    LoraAdapter peft = *adapter;  // in Hugging Face's head order
    reorder_value_heads(peft, *base, HeadOrder::gguf_to_peft);
    if (Status s = write_peft(o.peft_dir, peft, options); !s) fail(s.error().message);
    if (o.stamp) stamp_beside(*inspect_adapter(o.peft_dir), *base);
    std::printf("wrote %s (PEFT)\n", o.peft_dir.c_str());
  }
  if (!o.gguf_file.empty()) {
    GgufLoraWriteOptions options;
    options.architecture = base->architecture;
    options.name = "graft test adapter (seed " + std::to_string(o.spec.seed) + ")";
    options.type = o.dtype;
    if (Status s = write_gguf_lora(o.gguf_file, *adapter, options); !s) fail(s.error().message);
    if (o.stamp) {
      auto inspected = inspect_adapter(o.gguf_file);
      if (!inspected) fail(inspected.error().message);
      stamp_beside(*inspected, *base);
    }
    std::printf("wrote %s (GGUF)\n", o.gguf_file.c_str());
  }
}

}  // namespace

void add_make_test_adapter_command(CLI::App& app) {
  auto o = std::make_shared<MakeOptions>();
  auto* cmd = app.add_subcommand(
      "make-test-adapter",
      "Write a random LoRA adapter for a model, in PEFT, mlx-lm and/or GGUF form (same weights)");
  cmd->add_option("--base", o->spec.base_path, "The base model's GGUF file (gives the shapes)")->required();
  cmd->add_option("--peft", o->peft_dir, "Folder to write the PEFT form into");
  cmd->add_option("--mlx", o->mlx_dir, "Folder to write the mlx-lm form into");
  cmd->add_option("--gguf", o->gguf_file, "File to write the GGUF form to");
  cmd->add_option("--rank", o->spec.rank, "LoRA rank")->capture_default_str();
  cmd->add_option("--alpha", o->spec.alpha, "LoRA alpha (scale = alpha / rank)")->capture_default_str();
  cmd->add_option("--targets", o->targets, "Projections: all, attn, mlp, or a list like q,v,down")
      ->capture_default_str();
  cmd->add_option("--layers", o->layers, "Layers to adapt (default: all)")->delimiter(',');
  cmd->add_option("--seed", o->spec.seed, "Random seed")->capture_default_str();
  cmd->add_option("--strength", o->spec.strength, "Size of the adapter's effect relative to the base output")
      ->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "Storage type: f32, f16 or bf16")->capture_default_str();
  cmd->add_flag(
      "--stamp", o->stamp,
      "Also record the base model: DIR/graft_adapter.json for PEFT, <name>.graft_adapter.json beside a "
      "GGUF file");
  cmd->callback([o] { make(*o); });
}

}  // namespace graft::cli
