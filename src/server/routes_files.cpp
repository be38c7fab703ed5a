// The /v1/files routes of TrainingService (routes_jobs.h).
#include <fmt/format.h>

#include "server/multipart.h"
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
                         part.name, "unknown_parameter");
    }
  }
  if (!file) return bad_request("the upload has no 'file' field", "file", "missing_parameter");
  if (!has_purpose)
    return bad_request("the upload has no 'purpose' field (\"fine-tune\")", "purpose", "missing_parameter");
  if (purpose != "fine-tune") {
    return bad_request(
        fmt::format("graft keeps files for fine-tuning only: 'purpose' must be \"fine-tune\" (got '{}')",
                    purpose),
        "purpose");
  }
  return std::nullopt;
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
              "file", "invalid_content_type"));
        }
        auto body = std::make_shared<std::string>(std::move(http.body));
        self->worker_->post([self, exchange, body, boundary = *boundary] {
          auto parts = parse_multipart(*body, boundary);
          if (!parts)
            return exchange->send_error(bad_request(parts.error().message, "file", "invalid_multipart"));
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
    self->worker_->post([self, exchange, limit, order, purpose, after] {
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

  router.add("GET", "/v1/files/{id}", [self](HttpRequest& http, std::shared_ptr<Exchange> exchange) {
    self->worker_->post([self, exchange, id = http.params["id"]] {
      auto file = self->store_->file(id);
      if (!file) return exchange->send_error(api_error(file.error(), "file_id"));
      exchange->send_json(200, file_json(*file));
    });
  });

  router.add("GET", "/v1/files/{id}/content", [self](HttpRequest& http, std::shared_ptr<Exchange> exchange) {
    self->worker_->post([self, exchange, id = http.params["id"]] {
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
    self->worker_->post([self, exchange, id = http.params["id"]] {
      auto removed = self->files_->remove(id);
      if (!removed) return exchange->send_error(api_error(removed.error(), "file_id"));
      exchange->send_json(200, json{{"id", id}, {"object", "file"}, {"deleted", true}});
    });
  });
}

}  // namespace graft::server
