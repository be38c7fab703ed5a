// `graft inspect`: prints a GGUF file's metadata and tensor directory.
#include <cstdio>
#include <memory>

#include <gguf.h>

#include "cli/commands.h"
#include "io/gguf_file.h"

namespace graft::cli {

namespace {

std::string value_text(const GgufFile& file, const std::string& key) {
  gguf_context* ctx = file.raw();
  int64_t id = gguf_find_key(ctx, key.c_str());
  gguf_type t = gguf_get_kv_type(ctx, id);
  if (t == GGUF_TYPE_STRING) {
    std::string s = gguf_get_val_str(ctx, id);
    if (s.size() > 80) s = s.substr(0, 77) + "...";
    for (char& c : s)
      if (c == '\n') c = ' ';
    return "\"" + s + "\"";
  }
  if (t == GGUF_TYPE_ARRAY) {
    return fmt::format("[{} x {}]", gguf_get_arr_n(ctx, id), gguf_type_name(gguf_get_arr_type(ctx, id)));
  }
  if (t == GGUF_TYPE_BOOL) return gguf_get_val_bool(ctx, id) ? "true" : "false";
  if (t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64) return fmt::format("{}", *file.get_float(key));
  return fmt::format("{}", *file.get_int(key));
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto show_tensors = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("inspect", "Print a GGUF file's metadata (and with --tensors its tensors)");
  cmd->add_option("file", *path, "GGUF file")->required();
  cmd->add_flag("--tensors", *show_tensors, "Also list every tensor");
  cmd->callback([=] {
    auto file = GgufFile::open(*path);
    if (!file) {
      std::fprintf(stderr, "graft: %s\n", file.error().message.c_str());
      throw CLI::RuntimeError(1);
    }
    for (const std::string& key : file->keys()) {
      std::printf("%-48s %s\n", key.c_str(), value_text(*file, key).c_str());
    }
    std::printf("%zu tensors\n", file->tensors().size());
    if (*show_tensors) {
      for (const auto& t : file->tensors()) {
        std::string shape;
        for (int d = 0; d < t.n_dims; ++d) shape += (d ? " x " : "") + std::to_string(t.ne[d]);
        std::printf("  %-40s %-6s %s\n", t.name.c_str(), ggml_type_name(t.type), shape.c_str());
      }
    }
  });
}

}  // namespace graft::cli
