#include "server/chat_output.h"

namespace graft::server {

ChatOutput::ChatOutput(const std::string&, bool tools, bool thinking) : tools_(tools), thinking_(thinking) {}

ChatOutput::~ChatOutput() = default;

std::vector<RequestJson> ChatOutput::push(const std::string& text) {
  if (text.empty()) return {};
  return {RequestJson{{"content", text}}};
}

std::vector<RequestJson> ChatOutput::finish() {
  return {};
}

RequestJson ChatOutput::message(const std::string& text) const {
  return RequestJson{{"role", "assistant"}, {"content", text}};
}

}  // namespace graft::server
