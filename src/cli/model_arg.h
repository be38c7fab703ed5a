// A MODEL argument of graft's commands: a GGUF file's path, or a model in
// the Hugging Face cache named org/name[:file.gguf] (graft pull puts them there).
#pragma once

#include <string>

#include "util/result.h"

namespace graft::cli {

// The GGUF file the argument names. Errors say what the cache holds instead.
Result<std::string> resolve_model_arg(const std::string& arg);

}  // namespace graft::cli
