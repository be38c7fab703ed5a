#include "cli/model_arg.h"

#include "io/hf_cache.h"

namespace graft::cli {

Result<std::string> resolve_model_arg(const std::string& arg) {
  if (!hf::looks_like_repo(arg)) return arg;
  GRAFT_TRY(hf::ModelRef ref, hf::parse_model_ref(arg));
  auto path = hf::HubCache().resolve_gguf(ref);
  if (!path)
    return errorf(path.error().code, "{}: no such file; as a Hugging Face model: {}", arg,
                  path.error().message);
  return path->string();
}

}  // namespace graft::cli
