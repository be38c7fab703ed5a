// Where graft finds the ggml bundle's data (tokenizer vocabularies, chat
// templates) and its demo model.
#pragma once

#include <string>

#include "util/files.h"

namespace graft::cli {

// The llama.cpp release tree: $GRAFT_BUNDLE_DIR, else the one graft was built against.
std::string bundle_dir();
// models/ggml-vocab-<name>.gguf inside the bundle.
std::string bundle_vocab(const std::string& name);
// models/templates/<name>.jinja inside the bundle.
std::string bundle_template(const std::string& name);

// The demo model `graft serve` uses when given none: written on first use
// into graft's cache folder. Returns its path.
Result<std::string> ensure_demo_model();

}  // namespace graft::cli
