#include "server/fine_tuning_request.h"

#include <cmath>
#include <random>

#include <fmt/format.h>

#include "adapters/store.h"
#include "server/router.h"

namespace graft::server {

namespace {

struct FieldError {
  ApiError error;
};

[[noreturn]] void fail(const std::string& field, const std::string& message,
                       ApiCode code = ApiCode::kInvalidValue) {
  throw FieldError{bad_request(message, field, code)};
}

const RequestJson* find(const RequestJson& object, const std::string& name) {
  auto it = object.find(name);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

void only_known(const RequestJson& object, const std::string& prefix,
                std::initializer_list<const char*> known) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (!ok) {
      fail(prefix + it.key(), fmt::format("unknown field '{}{}'", prefix, it.key()),
           ApiCode::kUnknownParameter);
    }
  }
}

std::string read_string(const RequestJson& object, const std::string& name, const std::string& field) {
  const RequestJson* v = find(object, name);
  if (!v) return {};
  if (!v->is_string()) fail(field, fmt::format("'{}' must be a string", field));
  return v->get<std::string>();
}

bool integral(const RequestJson& v) {
  return v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                   v.get<double>() == std::floor(v.get<double>()));
}

// "auto" (or absent) → nullopt; else an integer in [min, max].
std::optional<int64_t> auto_or_integer(const RequestJson& object, const char* name, const std::string& field,
                                       int64_t min, int64_t max) {
  const RequestJson* v = find(object, name);
  if (!v || (v->is_string() && v->get<std::string>() == "auto")) return std::nullopt;
  if (!v->is_number() || !integral(*v))
    fail(field, fmt::format("'{}' must be \"auto\" or an integer", field));
  const double x = v->get<double>();
  if (x < static_cast<double>(min) || x > static_cast<double>(max)) {
    fail(field, fmt::format("'{}' must be between {} and {} (got {})", field, min, max, v->dump()));
  }
  return static_cast<int64_t>(x);
}

std::optional<double> auto_or_number(const RequestJson& object, const char* name, const std::string& field,
                                     double min, double max) {
  const RequestJson* v = find(object, name);
  if (!v || (v->is_string() && v->get<std::string>() == "auto")) return std::nullopt;
  if (!v->is_number()) fail(field, fmt::format("'{}' must be \"auto\" or a number", field));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x <= min || x > max) {
    fail(field, fmt::format("'{}' must be above {} and at most {} (got {})", field, min, max, v->dump()));
  }
  return x;
}

void read_hyperparameters(const RequestJson& h, const std::string& prefix, JobSpec& spec) {
  if (!h.is_object())
    fail(prefix.substr(0, prefix.size() - 1),
         fmt::format("'{}' must be an object", prefix.substr(0, prefix.size() - 1)));
  only_known(h, prefix, {"n_epochs", "batch_size", "learning_rate_multiplier"});
  spec.n_epochs = auto_or_integer(h, "n_epochs", prefix + "n_epochs", 1, 1000);
  spec.batch_size = auto_or_integer(h, "batch_size", prefix + "batch_size", 1, 1024);
  spec.learning_rate_multiplier =
      auto_or_number(h, "learning_rate_multiplier", prefix + "learning_rate_multiplier", 0, 1000);
}

void read_file_id(const RequestJson& body, const char* name, const FineTuningContext& context,
                  std::string& id, fs::path& path) {
  id = read_string(body, name, name);
  if (id.empty()) return;
  auto file = context.find_file(id);
  if (!file) {
    ApiError e = api_error(file.error(), name);
    if (e.status() == 404) e.message = fmt::format("no file '{}': upload it first with POST /v1/files", id);
    throw FieldError{e};
  }
  if (file->purpose != "fine-tune")
    fail(name, fmt::format("file '{}' is not for fine-tuning (its purpose is '{}')", id, file->purpose));
  path = file->path;
}

void read_all(const RequestJson& body, const FineTuningContext& context, JobSpec& spec) {
  only_known(body, "",
             {"model", "training_file", "validation_file", "suffix", "seed", "hyperparameters", "method",
              "lora", "auto_load", "metadata", "integrations"});
  spec.model = read_string(body, "model", "model");
  if (spec.model.empty())
    fail("model", "'model' is required: the served model's name", ApiCode::kMissingParameter);
  if (spec.model != context.served_model) {
    fail("model",
         fmt::format("graft trains adapters for the model it serves, '{}' (got '{}')", context.served_model,
                     spec.model),
         ApiCode::kInvalidValue);
  }
  spec.model_path = context.model_path;

  if (!find(body, "training_file"))
    fail("training_file", "'training_file' is required: a file id", ApiCode::kMissingParameter);
  read_file_id(body, "training_file", context, spec.training_file, spec.training_path);
  read_file_id(body, "validation_file", context, spec.validation_file, spec.validation_path);

  spec.suffix = read_string(body, "suffix", "suffix");
  if (!spec.suffix.empty()) {
    if (Status valid = validate_adapter_id(spec.suffix); !valid)
      fail("suffix", "'suffix' names the adapter: " + valid.error().message);
    if (context.adapter_exists(spec.suffix)) {
      fail("suffix",
           fmt::format("an adapter '{}' is already in the store: choose another suffix", spec.suffix),
           ApiCode::kInvalidValue);
    }
  }

  if (const RequestJson* seed = find(body, "seed")) {
    if (!integral(*seed) || seed->get<double>() < 0 || seed->get<double>() > 2147483647.0) {
      fail("seed", "'seed' must be an integer from 0 to 2147483647");
    }
    spec.seed = seed->get<int64_t>();
  } else {
    spec.seed = static_cast<int64_t>(std::random_device{}() & 0x7fffffff);
  }

  const RequestJson* hyper = find(body, "hyperparameters");
  if (hyper) read_hyperparameters(*hyper, "hyperparameters.", spec);
  if (const RequestJson* method = find(body, "method")) {
    if (!method->is_object()) fail("method", "'method' must be an object");
    only_known(*method, "method.", {"type", "supervised"});
    const std::string type = read_string(*method, "type", "method.type");
    if (type != "supervised") {
      fail("method.type",
           fmt::format("graft trains supervised LoRA adapters only: 'method.type' must be \"supervised\" "
                       "(got '{}')",
                       type));
    }
    if (const RequestJson* supervised = find(*method, "supervised")) {
      if (!supervised->is_object()) fail("method.supervised", "'method.supervised' must be an object");
      only_known(*supervised, "method.supervised.", {"hyperparameters"});
      if (const RequestJson* h = find(*supervised, "hyperparameters")) {
        if (hyper) {
          fail("method.supervised.hyperparameters",
               "give the hyperparameters once: in 'hyperparameters' or in "
               "'method.supervised.hyperparameters'");
        }
        read_hyperparameters(*h, "method.supervised.hyperparameters.", spec);
      }
    }
  }

  if (const RequestJson* lora = find(body, "lora")) {
    if (!lora->is_object()) fail("lora", "'lora' must be an object of training settings");
    spec.lora = json::parse(lora->dump());
  }

  if (const RequestJson* auto_load = find(body, "auto_load")) {
    if (!auto_load->is_boolean()) fail("auto_load", "'auto_load' must be true or false");
    spec.auto_load = auto_load->get<bool>();
  }

  if (const RequestJson* metadata = find(body, "metadata")) {
    if (!metadata->is_object() || metadata->size() > 16)
      fail("metadata", "'metadata' must be an object of at most 16 strings");
    for (auto it = metadata->begin(); it != metadata->end(); ++it) {
      if (!it.value().is_string() || it.key().size() > 64 || it.value().get<std::string>().size() > 512) {
        fail("metadata." + it.key(),
             "metadata keys are at most 64 characters, values strings of at most 512");
      }
    }
    spec.metadata = json::parse(metadata->dump());
  }

  if (const RequestJson* integrations = find(body, "integrations")) {
    if (!integrations->is_array() || !integrations->empty()) {
      fail("integrations", "graft has no integrations (such as wandb): leave 'integrations' out");
    }
  }

  // The settings together, as `graft train` checks them against the model.
  std::string param;
  auto config = job_train_config(spec, context.model_config, &param);
  if (!config) fail(param, config.error().message);
}

}  // namespace

std::optional<ApiError> read_fine_tuning_request(const RequestJson& body, const FineTuningContext& context,
                                                 JobSpec& spec) {
  try {
    read_all(body, context, spec);
  } catch (const FieldError& e) {
    return e.error;
  } catch (const RequestJson::exception& e) {
    return bad_request(fmt::format("cannot read the request: {}", e.what()));
  }
  return std::nullopt;
}

}  // namespace graft::server
