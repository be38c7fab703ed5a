// A tiny blocking HTTP/1.1 client over POSIX sockets for server tests: whole
// requests, and raw connections for streaming and disconnect tests.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace graft::testing {

struct HttpReply {
  int status = 0;                              // 0: no answer (connection failed or closed early)
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;                            // de-chunked
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) close();
  }
  ~RawConnection() { close(); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool ok() const { return fd_ >= 0; }
  bool send(const std::string& data) {
    size_t off = 0;
    while (fd_ >= 0 && off < data.size()) {
      ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return off == data.size();
  }
  // Reads what arrives within the timeout ("" on timeout; sets closed() on EOF).
  std::string read_some(std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
    if (fd_ < 0) return {};
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return {};
    char buf[65536];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {
      closed_ = true;
      return {};
    }
    return std::string(buf, static_cast<size_t>(n));
  }
  // Reads until `needle` appears in everything read so far (or timeout/EOF).
  bool read_until(std::string& acc, const std::string& needle,
                  std::chrono::milliseconds timeout = std::chrono::milliseconds(20000)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (acc.find(needle) == std::string::npos) {
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || closed_) return false;
      acc += read_some(left);
    }
    return true;
  }
  bool closed() const { return closed_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Reads one whole response (Content-Length, chunked, or until close).
  HttpReply read_reply(std::chrono::milliseconds timeout = std::chrono::milliseconds(30000)) {
    HttpReply reply;
    std::string acc = std::move(leftover_);
    leftover_.clear();
    if (!read_until(acc, "\r\n\r\n", timeout)) return reply;
    size_t head_end = acc.find("\r\n\r\n");
    std::string head = acc.substr(0, head_end);
    std::string rest = acc.substr(head_end + 4);
    size_t line_end = head.find("\r\n");
    std::string status_line = head.substr(0, line_end);
    if (status_line.size() >= 12) reply.status = std::stoi(status_line.substr(9, 3));
    size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
    while (pos < head.size()) {
      size_t end = head.find("\r\n", pos);
      if (end == std::string::npos) end = head.size();
      std::string line = head.substr(pos, end - pos);
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        size_t v = line.find_first_not_of(' ', colon + 1);
        reply.headers[name] = v == std::string::npos ? "" : line.substr(v);
      }
      pos = end + 2;
    }
    if (reply.headers.count("content-length")) {
      size_t len = std::stoul(reply.headers["content-length"]);
      auto deadline = std::chrono::steady_clock::now() + timeout;
      while (rest.size() < len && !closed_ && std::chrono::steady_clock::now() < deadline)
        rest += read_some();
      reply.body = rest.substr(0, len);
      leftover_ = rest.size() > len ? rest.substr(len) : "";
    } else if (reply.header("transfer-encoding") == "chunked") {
      std::string body;
      for (;;) {
        if (!read_until(rest, "\r\n", timeout)) break;
        size_t eol = rest.find("\r\n");
        size_t size = std::stoul(rest.substr(0, eol), nullptr, 16);
        while (rest.size() < eol + 2 + size + 2 && !closed_) rest += read_some(timeout);
        if (rest.size() < eol + 2 + size + 2) break;
        body += rest.substr(eol + 2, size);
        rest.erase(0, eol + 2 + size + 2);
        if (size == 0) break;
      }
      reply.body = body;
      leftover_ = rest;
    } else {
      while (!closed_) rest += read_some(timeout);
      reply.body = rest;
    }
    return reply;
  }

 private:
  int fd_ = -1;
  bool closed_ = false;
  std::string leftover_;
};

inline std::string format_request(const std::string& method, const std::string& path, const std::string& body,
                                  const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (auto& [k, v] : headers) req += k + ": " + v + "\r\n";
  if (!body.empty() || method == "POST") {
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  req += "\r\n" + body;
  return req;
}

inline HttpReply http_request(int port, const std::string& method, const std::string& path,
                              const std::string& body = "",
                              const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  RawConnection c(port);
  if (!c.ok() || !c.send(format_request(method, path, body, headers))) return {};
  return c.read_reply();
}

// The data payloads of an SSE body ("data: x\n\n" → "x").
inline std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end + 2;
  }
  return out;
}

}  // namespace graft::testing
