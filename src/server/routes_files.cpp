// The /v1/files routes of TrainingService (routes_jobs.h).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "server/multipart.h"
#include "server/openai_params.h"
#include "server/routes_jobs.h"

namespace graft::server {

namespace {

json file_json(const FileRecord& f) {
  return json{{"id", f.id},
              {"object", "file"},
              {"bytes", f.bytes},
              {"created_at", f.created_at},
              {"filename", f.filename},
              {"purpose", f.purpose},
              {"status", "processed"},
              {"status_details", nullptr},
              {"expires_at", nullptr},
              {"sha256", f.sha256},
              {"rows", f.rows}};
}

// The fields of an upload: "file" (with a file name) and "purpose".
std::optional<ApiError> read_upload(const std::vector<FormPart>& parts, const FormPart*& file,
                                    std::string& purpose) {
  file = nullptr;
  bool has_purpose = false;
  for (const FormPart& part : parts) {
    if (part.name == "file") {
      if (file) return bad_request("send one 'file' per upload", "file");
      if (!part.filename)
        return bad_request("'file' must be a file (with a file name), not a text field", "file");
      file = &part;
    } else if (part.name == "purpose") {
      purpose = std::string(part.data);
      has_purpose = true;
    } else {
      return bad_request(fmt::format("unknown upload field '{}': send 'file' and 'purpose'", part.name),
                         part.name, ApiCode::kUnknownParameter);
    }
  }
  if (!file) return bad_request("the upload has no 'file' field", "file", ApiCode::kMissingParameter);
  if (!has_purpose)
    return bad_request("the upload has no 'purpose' field (\"fine-tune\")", "purpose",
                       ApiCode::kMissingParameter);
  if (purpose != "fine-tune") {
    return bad_request(
        fmt::format("graft keeps files for fine-tuning only: 'purpose' must be \"fine-tune\" (got '{}')",
                    purpose),
        "purpose");
  }
  return std::nullopt;
}

// Nearest-rank percentile of sorted values.
int64_t percentile(const std::vector<int64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

json inspection_json(const Dataset& data, int max_seq_length) {
  std::vector<int64_t> lengths;
  for (const TrainExample& e : data.examples) lengths.push_back(static_cast<int64_t>(e.tokens.size()));
  std::sort(lengths.begin(), lengths.end());
  const DatasetStats& s = data.stats;
  return json{
      {"object", "file.inspection"},
      {"rows", s.lines},
      {"examples", data.examples.size()},
      {"formats", {{"messages", s.chat}, {"prompt_completion", s.completion}, {"text", s.text}}},
      {"tokens",
       {{"total", s.tokens},
        {"min", lengths.empty() ? 0 : lengths.front()},
        {"max", lengths.empty() ? 0 : lengths.back()},
        {"mean", lengths.empty() ? 0.0 : static_cast<double>(s.tokens) / static_cast<double>(lengths.size())},
        {"p50", percentile(lengths, 0.5)},
        {"p95", percentile(lengths, 0.95)}}},
      {"target_tokens", s.targets},
      {"max_seq_length", max_seq_length},
      {"truncated", s.truncated},
      {"dropped", s.dropped},
      {"sha256", s.sha256}};
}

}  // namespace

void TrainingService::add_file_routes(Router& router) {
  TrainingService* self = this;

  RouteOptions upload_options;
  upload_options.body_limit = options_.max_upload;
  router.add(
      "POST", "/v1/files",
      [self](HttpRequest& http, std::shared_ptr<Exchange> exchange) {
        auto boundary = multipart_boundary(http.header("content-type"));
        if (!boundary) {
          return exchange->send_error(bad_request(
              "upload a file as multipart/form-data with the fields 'file' and 'purpose' (\"fine-tune\")",
              "file", ApiCode::kInvalidValue));
        }
        auto body = std::make_shared<std::string>(std::move(http.body));
        self->worker_->post(exchange, [self, exchange, body, boundary = *boundary] {
          auto parts = parse_multipart(*body, boundary);
          if (!parts)
            return exchange->send_error(bad_request(parts.error().message, "file", ApiCode::kInvalidValue));
          const FormPart* file = nullptr;
          std::string purpose;
          if (auto error = read_upload(*parts, file, purpose)) return exchange->send_error(*error);
          auto added = self->files_->add(*file->filename, purpose, file->data);
          if (!added) return exchange->send_error(api_error(added.error(), "file"));
          exchange->send_json(200, file_json(*added));
        });
      },
      upload_options);

  router.add("GET", "/v1/files", [self](HttpRequest& http, std::shared_ptr<Exchange> exchange) {
    const auto query = parse_query(http.query);
    if (auto error = check_query_names(query, {"after", "limit", "order", "purpose"}))
      return exchange->send_error(*error);
    int limit = 0;
    if (auto error = read_query_limit(query, 10000, 10000, limit)) return exchange->send_error(*error);
    const std::string order = query.count("order") ? query.at("order") : "desc";
    if (order != "asc" && order != "desc") {
      return exchange->send_error(bad_request("'order' must be \"asc\" or \"desc\"", "order"));
    }
    const std::string purpose = query.count("purpose") ? query.at("purpose") : "";
    const std::string after = query.count("after") ? query.at("after") : "";
    self->worker_->post(exchange, [self, exchange, limit, order, purpose, after] {
      json data = json::array();
      bool has_more = false;
      if (purpose.empty() || purpose == "fine-tune") {  // the only purpose graft keeps
        auto page = self->store_->list_files(after, limit, order == "asc");
        if (!page) return exchange->send_error(api_error(page.error(), "after"));
        for (const FileRecord& f : page->items) data.push_back(file_json(f));
        has_more = page->has_more;
      }
      json body = {{"object", "list"}, {"data", data}, {"has_more", has_more}};
      body["first_id"] = data.empty() ? json(nullptr) : data.front()["id"];
      body["last_id"] = data.empty() ? json(nullptr) : data.back()["id"];
      exchange->send_json(200, body);
    });
  });

  router.add("POST", "/v1/files/inspect", [self](HttpRequest& http, std::shared_ptr<Exchange> exchange) {
    auto body = std::make_shared<RequestJson>();
    if (auto error = parse_body(http.body, *body)) return exchange->send_error(*error);
    for (auto it = body->begin(); it != body->end(); ++it) {
      if (it.key() != "file_id" && it.key() != "path" && it.key() != "max_seq_length" &&
          it.key() != "mask_prompt") {
        return exchange->send_error(
            bad_request(fmt::format("unknown field '{}'", it.key()), it.key(), ApiCode::kUnknownParameter));
      }
    }
    const bool by_id = body->contains("file_id"), by_path = body->contains("path");
    if (by_id == by_path) {
      return exchange->send_error(bad_request("give \"file_id\" (an uploaded file) or \"path\"", "file_id"));
    }
    const char* param = by_id ? "file_id" : "path";
    if (!(*body)[param].is_string()) {
      return exchange->send_error(bad_request(fmt::format("'{}' must be a string", param), param));
    }
    const int model_limit = TrainConfig{}.seq_limit(self->model_.model().config());
    EncodeOptions encode;
    encode.max_seq_length = model_limit;
    if (body->contains("max_seq_length")) {
      const RequestJson& v = (*body)["max_seq_length"];
      if (!v.is_number_integer() || v.get<int64_t>() < 2 || v.get<int64_t>() > (1 << 24)) {
        return exchange->send_error(
            bad_request("'max_seq_length' must be an integer of at least 2", "max_seq_length"));
      }
      encode.max_seq_length = static_cast<int>(v.get<int64_t>());
    }
    if (body->contains("mask_prompt")) {
      if (!(*body)["mask_prompt"].is_boolean()) {
        return exchange->send_error(bad_request("'mask_prompt' must be true or false", "mask_prompt"));
      }
      encode.mask_prompt = (*body)["mask_prompt"].get<bool>();
    }
    const std::string target = (*body)[param].get<std::string>();
    self->inspect_worker_->post(exchange, [self, exchange, by_id, param, target, encode] {
      fs::path path;
      if (by_id) {
        auto file = self->store_->file(target);
        if (!file) return exchange->send_error(api_error(file.error(), param));
        path = file->path;
      } else {
        std::error_code ec;
        path = fs::weakly_canonical(target, ec);
        bool allowed = false;
        for (const fs::path& dir : self->options_.data_dirs) {
          const fs::path root = fs::weakly_canonical(dir, ec);
          const auto rel = path.lexically_relative(root);
          allowed = allowed || (!rel.empty() && *rel.begin() != "..");
        }
        if (!allowed) {
          ApiError e =
              api_error(make_error("forbidden", fmt::format("'{}' is outside the folders this server may "
                                                            "read data from (--train-data-dir)",
                                                            target)),
                        param);
          return exchange->send_error(e);
        }
      }
      DataLocation where;
      auto dataset = self->read_dataset(path, encode, &where);
      if (!dataset) {
        std::string message = dataset.error().message;
        if (by_id) {
          const std::string prefix = path.string();
          for (size_t at = message.find(prefix); at != std::string::npos; at = message.find(prefix)) {
            message.replace(at, prefix.size(), target);
          }
        }
        // "<file>:17: what" → "<file>, line 17: what", as a failed job says it.
        const std::string located = fmt::format("{}:{}: ", by_id ? target : where.file, where.line);
        if (where.line > 0 && message.rfind(located, 0) == 0) {
          message = fmt::format("{}, line {}: {}", by_id ? target : where.file, where.line,
                                message.substr(located.size()));
        }
        ApiError e = bad_request(message, param);
        if (dataset.error().code == "not_found") e = api_error(dataset.error(), param);
        return exchange->send_error(e);
      }
      json answer = inspection_json(*dataset, encode.max_seq_length);
      answer[param] = target;
      exchange->send_json(200, answer);
    });
  });

  router.add("GET", "/v1/files/{id}", [self](HttpRequest& http, std::shared_ptr<Exchange> exchange) {
    self->worker_->post(exchange, [self, exchange, id = http.params["id"]] {
      auto file = self->store_->file(id);
      if (!file) return exchange->send_error(api_error(file.error(), "file_id"));
      exchange->send_json(200, file_json(*file));
    });
  });

  router.add("GET", "/v1/files/{id}/content", [self](HttpRequest& http, std::shared_ptr<Exchange> exchange) {
    self->worker_->post(exchange, [self, exchange, id = http.params["id"]] {
      auto file = self->store_->file(id);
      if (!file) return exchange->send_error(api_error(file.error(), "file_id"));
      auto content = read_file(file->path);
      if (!content) return exchange->send_error(api_error(content.error()));
      HttpResponse response;
      response.content_type = "application/octet-stream";
      response.body = std::move(*content);
      exchange->send(std::move(response));
    });
  });

  router.add("DELETE", "/v1/files/{id}", [self](HttpRequest& http, std::shared_ptr<Exchange> exchange) {
    self->worker_->post(exchange, [self, exchange, id = http.params["id"]] {
      auto removed = self->files_->remove(id);
      if (!removed) return exchange->send_error(api_error(removed.error(), "file_id"));
      exchange->send_json(200, json{{"id", id}, {"object", "file"}, {"deleted", true}});
    });
  });
}

}  // namespace graft::server
