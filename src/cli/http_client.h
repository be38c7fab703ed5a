// A small blocking HTTP/1.1 client for the commands that talk to a running
// `graft serve` (graft jobs, adapters use, pi install): whole requests, and
// server-sent event streams.
#pragma once

#include <functional>
#include <string>

#include "util/result.h"

namespace graft::cli {

struct HttpReply {
  int status = 0;
  std::string body;
};

class HttpClient {
 public:
  // url: "http://host:port" (a trailing path is a prefix of every target).
  static Result<HttpClient> connect_to(const std::string& url, std::string api_key);

  // Errors: "unreachable" when no server answers the connection, "unavailable" when the exchange breaks.

  Result<HttpReply> request(const std::string& method, const std::string& target,
                            const std::string& body = "");
  // Reads an SSE stream: `on_event(id, data)` for each event, until the
  // server ends it or on_event returns false. A non-200 answer is an error
  // with the server's message.
  Status stream(const std::string& target, const std::string& last_event_id,
                const std::function<bool(const std::string& id, const std::string& data)>& on_event);

  const std::string& url() const { return url_; }

 private:
  HttpClient(std::string url, std::string host, std::string port, std::string prefix, std::string api_key)
      : url_(std::move(url)),
        host_(std::move(host)),
        port_(std::move(port)),
        prefix_(std::move(prefix)),
        api_key_(std::move(api_key)) {}
  std::string url_, host_, port_, prefix_, api_key_;
};

// The message of an OpenAI-shaped error body, or the body itself.
std::string error_message(const HttpReply& reply);

}  // namespace graft::cli
