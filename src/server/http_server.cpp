// The only translation unit that includes Beast (it compiles slowly). Beast
// parses requests and frames answers: its serializer writes status lines and
// headers, chunk_body the chunks of a streamed (SSE) body.
#include "server/http_server.h"

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "util/log.h"
#include "util/strings.h"

namespace graft::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

class Session;

// One piece of an answer waiting its turn on the socket, alive until written.
// Beast frames it: the status line and headers from a message, chunk sizes
// from chunk_body.
class Output {
 public:
  using Done = std::function<void(beast::error_code, size_t)>;
  virtual ~Output() = default;
  virtual void write(beast::tcp_stream& stream, Done done) = 0;
};

// A whole response: headers and body.
class WholeResponse : public Output {
 public:
  explicit WholeResponse(http::response<http::string_body> message) : message_(std::move(message)) {}
  void write(beast::tcp_stream& stream, Done done) override {
    http::async_write(stream, message_, std::move(done));
  }

 private:
  http::response<http::string_body> message_;
};

// The headers of a streamed response; its body follows as EventData.
class EventsHead : public Output {
 public:
  explicit EventsHead(http::response<http::empty_body> message) : message_(std::move(message)) {}
  void write(beast::tcp_stream& stream, Done done) override {
    http::async_write_header(stream, serializer_, std::move(done));
  }

 private:
  http::response<http::empty_body> message_;
  http::response_serializer<http::empty_body> serializer_{message_};
};

// Bytes of a streamed body: one chunk (HTTP/1.1), or as they are (HTTP/1.0,
// where the end of the body is the end of the connection).
class EventData : public Output {
 public:
  EventData(std::string data, bool chunked) : data_(std::move(data)), chunked_(chunked) {}
  void write(beast::tcp_stream& stream, Done done) override {
    if (chunked_) {
      net::async_write(stream, http::make_chunk(net::buffer(data_)), std::move(done));
    } else {
      net::async_write(stream, net::buffer(data_), std::move(done));
    }
  }

 private:
  std::string data_;
  bool chunked_;
};

// The last chunk, which ends a chunked body.
class LastChunk : public Output {
 public:
  void write(beast::tcp_stream& stream, Done done) override {
    net::async_write(stream, http::make_chunk_last(), std::move(done));
  }
};

// The Exchange a handler holds. It keeps its session alive until released,
// and forwards every call to the session's strand.
class SessionExchange : public Exchange {
 public:
  SessionExchange(std::shared_ptr<Session> session, uint64_t serial)
      : session_(std::move(session)), serial_(serial) {}
  void send(HttpResponse response) override;
  void start_events() override;
  void send_event(std::string payload) override;
  void send_event_with_id(std::string id, std::string payload) override;
  void send_named_event(std::string event, std::string payload) override;
  void end_events() override;
  void post(std::function<void()> fn) override;
  void on_disconnect(std::function<void()> fn) override;

 private:
  std::shared_ptr<Session> session_;
  uint64_t serial_;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, std::shared_ptr<const Router> router, const HttpServerOptions& options)
      : stream_(std::move(socket)), router_(std::move(router)), options_(options) {}

  void run() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_request(); });
  }
  net::any_io_executor executor() { return stream_.get_executor(); }

  // Exchange calls, on the strand. Calls for an exchange that is over are ignored.
  void send(uint64_t serial, HttpResponse response) {
    if (!current(serial) || answered_) return;
    answered_ = true;
    complete_ = true;
    http::response<http::string_body> message;
    set_head(message, response.status);
    if (!response.content_type.empty()) message.set(http::field::content_type, response.content_type);
    for (auto& [name, value] : response.headers) message.insert(name, value);
    // A HEAD answer says how long the body would be, and sends none.
    message.content_length(response.body.size());
    if (!head_request_) message.body() = std::move(response.body);
    enqueue(std::make_unique<WholeResponse>(std::move(message)));
  }
  void start_events(uint64_t serial) {
    if (!current(serial) || answered_) return;
    answered_ = true;
    streaming_ = true;
    http::response<http::empty_body> message;
    set_head(message, 200);
    message.set(http::field::content_type, "text/event-stream");
    message.set(http::field::cache_control, "no-cache");
    message.set("X-Accel-Buffering", "no");
    if (chunked_) message.chunked(true);
    enqueue(std::make_unique<EventsHead>(std::move(message)));
  }
  // head: the lines before "data:" ("id: …\n", "event: …\n"), or "".
  void send_event(uint64_t serial, const std::string& payload, const std::string& head = {}) {
    if (!current(serial) || !streaming_ || complete_) return;
    enqueue(std::make_unique<EventData>(head + "data: " + payload + "\n\n", chunked_));
  }
  void end_events(uint64_t serial) {
    if (!current(serial) || !streaming_ || complete_) return;
    complete_ = true;
    if (chunked_) {
      enqueue(std::make_unique<LastChunk>());
    } else {
      keep_alive_ = false;
      maybe_finish();
    }
  }
  void set_on_disconnect(uint64_t serial, std::function<void()> fn) {
    if (!current(serial)) return;
    if (gone_) {
      fn();
      return;
    }
    on_disconnect_ = std::move(fn);
  }

 private:
  bool current(uint64_t serial) const { return serial == serial_ && !gone_; }

  // The status line and the headers every answer carries.
  template <typename Body>
  void set_head(http::response<Body>& message, int status) const {
    message.version(http11_ ? 11 : 10);
    message.result(static_cast<unsigned>(status));
    message.set(http::field::access_control_allow_origin, "*");
    message.set(http::field::server, "graft");
    message.set(http::field::connection, keep_alive_ ? "keep-alive" : "close");
  }

  void read_request() {
    parser_.emplace();
    // The body limit depends on the route: set once the header is read (on_header).
    body_limit_ = options_.body_limit;
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    parser_->header_limit(64 * 1024);
    stream_.expires_after(options_.idle_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            beast::bind_front_handler(&Session::on_header, shared_from_this()));
  }

  void on_header(beast::error_code ec, size_t) {
    if (ec) return on_read_error(ec);
    auto& req = parser_->get();
    std::string_view target(req.target().data(), req.target().size());
    body_limit_ =
        router_->body_limit(std::string_view(req.method_string().data(), req.method_string().size()),
                            target.substr(0, target.find('?')), options_.body_limit);
    parser_->body_limit(body_limit_);
    auto length = parser_->content_length();
    if (length && *length > body_limit_) {
      keep_alive_ = false;
      return reject_body_size();
    }
    if (beast::iequals(req[http::field::expect], "100-continue")) {
      auto self = shared_from_this();
      auto reply = std::make_shared<http::response<http::empty_body>>(http::status::continue_, 11);
      http::async_write(stream_, *reply, [self, reply](beast::error_code ec, size_t) {
        if (ec) return self->close();
        self->read_body();
      });
      return;
    }
    read_body();
  }

  void read_body() {
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Session::on_body, shared_from_this()));
  }

  void on_read_error(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      return reject_body_size();
    }
    if (ec == http::error::header_limit || ec == http::error::bad_method || ec == http::error::bad_target ||
        ec == http::error::bad_version || ec == http::error::bad_field || ec == http::error::bad_value ||
        ec == http::error::bad_line_ending || ec == http::error::bad_chunk) {
      keep_alive_ = false;
      begin_exchange();
      ApiError error = bad_request("malformed HTTP request: " + ec.message());
      send(serial_, HttpResponse{400, "application/json", error.to_json().dump(), {}});
      return;
    }
    close();  // end of stream, timeout, reset: nothing to answer
  }

  void reject_body_size() {
    drain_before_close_ = true;
    begin_exchange();
    const ApiError error =
        api_error(ApiCode::kRequestTooLarge,
                  fmt::format("the request body is larger than the server's limit of {} bytes", body_limit_));
    send(serial_, HttpResponse{error.status(), "application/json", error.to_json().dump(), {}});
  }

  void begin_exchange() {
    ++serial_;
    answered_ = false;
    streaming_ = false;
    complete_ = false;
    on_disconnect_ = nullptr;
    stream_.expires_never();
  }

  void on_body(beast::error_code ec, size_t) {
    if (ec) return on_read_error(ec);
    auto req = parser_->release();
    http11_ = req.version() >= 11;
    chunked_ = http11_;
    keep_alive_ = req.keep_alive();
    head_request_ = req.method() == http::verb::head;
    begin_exchange();

    HttpRequest request;
    request.method = std::string(req.method_string());
    std::string target(req.target());
    size_t q = target.find('?');
    request.path = target.substr(0, q);
    if (q != std::string::npos) request.query = target.substr(q + 1);
    for (const auto& field : req) {
      const auto name = field.name_string();
      request.headers[to_lower_ascii(std::string_view(name.data(), name.size()))] =
          std::string(field.value());
    }
    request.body = std::move(req.body());
    GRAFT_LOG_DEBUG("{} {}", request.method, target);

    watch_for_disconnect();
    auto exchange = std::make_shared<SessionExchange>(shared_from_this(), serial_);
    router_->dispatch(request, exchange);
  }

  // While an answer is pending, notice a client that closes its connection.
  void watch_for_disconnect() {
    if (watching_) return;
    watching_ = true;
    stream_.socket().async_wait(tcp::socket::wait_read,
                                beast::bind_front_handler(&Session::on_readable, shared_from_this()));
  }

  void on_readable(beast::error_code ec) {
    watching_ = false;
    if (ec == net::error::operation_aborted || gone_) return;
    if (!ec) {
      char byte;
      ssize_t n = ::recv(stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n > 0) return;  // the next request (pipelined): it stays buffered in the socket
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!complete_) watch_for_disconnect();
        return;
      }
    }
    client_gone();
  }

  void client_gone() {
    if (gone_) return;
    gone_ = true;
    GRAFT_LOG_DEBUG("client went away");
    out_.clear();
    if (on_disconnect_) {
      auto fn = std::move(on_disconnect_);
      on_disconnect_ = nullptr;
      fn();
    }
    close();
  }

  void enqueue(std::unique_ptr<Output> output) {
    if (gone_) return;
    out_.push_back(std::move(output));
    if (!writing_) write_next();
  }

  void write_next() {
    if (out_.empty()) {
      writing_ = false;
      maybe_finish();
      return;
    }
    writing_ = true;
    out_.front()->write(stream_, beast::bind_front_handler(&Session::on_write, shared_from_this()));
  }

  void on_write(beast::error_code ec, size_t) {
    if (ec) return client_gone();
    if (!out_.empty()) out_.pop_front();
    write_next();
  }

  // After the last byte of a complete answer: next request, or close.
  void maybe_finish() {
    if (!complete_ || writing_ || gone_) return;
    if (!keep_alive_) return drain_before_close_ ? drain() : close();
    complete_ = false;
    if (watching_) stream_.socket().cancel();
    watching_ = false;
    read_request();
  }

  // Reads and drops what the client still sends (the rest of a refused body),
  // so that it gets to read the answer, then closes.
  void drain() {
    if (watching_) stream_.socket().cancel();
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    drained_ = 0;
    drain_more();
  }
  void drain_more() {
    stream_.expires_after(std::chrono::seconds(10));
    stream_.async_read_some(net::buffer(discard_),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              self->drained_ += n;
                              if (ec || self->drained_ > (size_t{256} << 20)) return self->close();
                              self->drain_more();
                            });
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<const Router> router_;
  const HttpServerOptions& options_;

  uint64_t serial_ = 0;
  bool http11_ = true;
  bool chunked_ = true;
  bool keep_alive_ = true;
  bool head_request_ = false;
  bool answered_ = false;
  bool streaming_ = false;
  bool complete_ = false;
  bool watching_ = false;
  bool gone_ = false;
  bool writing_ = false;
  bool drain_before_close_ = false;
  size_t drained_ = 0;
  size_t body_limit_ = 0;  // this request's: the route's own or the server's
  std::array<char, 65536> discard_;
  std::deque<std::unique_ptr<Output>> out_;
  std::function<void()> on_disconnect_;
};

void SessionExchange::send(HttpResponse response) {
  net::post(session_->executor(), [s = session_, serial = serial_, r = std::move(response)]() mutable {
    s->send(serial, std::move(r));
  });
}
void SessionExchange::start_events() {
  net::post(session_->executor(), [s = session_, serial = serial_] { s->start_events(serial); });
}
void SessionExchange::send_event(std::string payload) {
  net::post(session_->executor(),
            [s = session_, serial = serial_, p = std::move(payload)] { s->send_event(serial, p); });
}
void SessionExchange::send_event_with_id(std::string id, std::string payload) {
  net::post(session_->executor(), [s = session_, serial = serial_, i = std::move(id),
                                   p = std::move(payload)] { s->send_event(serial, p, "id: " + i + "\n"); });
}
void SessionExchange::send_named_event(std::string event, std::string payload) {
  net::post(session_->executor(),
            [s = session_, serial = serial_, e = std::move(event), p = std::move(payload)] {
              s->send_event(serial, p, "event: " + e + "\n");
            });
}
void SessionExchange::end_events() {
  net::post(session_->executor(), [s = session_, serial = serial_] { s->end_events(serial); });
}
void SessionExchange::post(std::function<void()> fn) {
  net::post(session_->executor(), std::move(fn));
}
void SessionExchange::on_disconnect(std::function<void()> fn) {
  net::post(session_->executor(), [s = session_, serial = serial_, f = std::move(fn)]() mutable {
    s->set_on_disconnect(serial, std::move(f));
  });
}

}  // namespace

struct HttpServer::Impl {
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::optional<net::signal_set> signals;
  std::vector<std::thread> threads;
  std::shared_ptr<const Router> router;
  std::mutex mutex;
  std::condition_variable stopped_cv;
  bool stopped = false;
  int port = 0;

  void accept(const HttpServerOptions& options) {
    acceptor.async_accept(net::make_strand(ioc), [this, &options](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
      if (!ec) {
        beast::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        std::make_shared<Session>(std::move(socket), router, options)->run();
      } else {
        GRAFT_LOG_WARN("accept failed: {}", ec.message());
      }
      accept(options);
    });
  }
};

HttpServer::HttpServer(HttpServerOptions options, std::shared_ptr<const Router> router)
    : options_(std::move(options)), impl_(std::make_unique<Impl>()) {
  impl_->router = std::move(router);
}

HttpServer::~HttpServer() {
  stop();
}

Status HttpServer::start() {
  beast::error_code ec;
  auto address = net::ip::make_address(options_.host, ec);
  if (ec) return errorf("invalid_argument", "'{}' is not an IP address: {}", options_.host, ec.message());
  tcp::endpoint endpoint(address, static_cast<unsigned short>(options_.port));
  auto& acceptor = impl_->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    return errorf("unavailable", "cannot listen on {}:{}: {}", options_.host, options_.port, ec.message());
  impl_->port = acceptor.local_endpoint().port();
  impl_->accept(options_);
  for (int i = 0; i < std::max(options_.threads, 1); ++i) {
    impl_->threads.emplace_back([this] { impl_->ioc.run(); });
  }
  return {};
}

int HttpServer::port() const {
  return impl_->port;
}

void HttpServer::stop_on_signals() {
  impl_->signals.emplace(impl_->ioc, SIGINT, SIGTERM);
  impl_->signals->async_wait([this](beast::error_code ec, int) {
    if (ec) return;
    std::lock_guard lock(impl_->mutex);
    impl_->stopped = true;
    impl_->stopped_cv.notify_all();
  });
}

void HttpServer::wait() {
  std::unique_lock lock(impl_->mutex);
  impl_->stopped_cv.wait(lock, [&] { return impl_->stopped; });
}

void HttpServer::stop() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopped = true;
    impl_->stopped_cv.notify_all();
  }
  net::post(impl_->ioc, [this] {
    beast::error_code ec;
    impl_->acceptor.close(ec);
    if (impl_->signals) impl_->signals->cancel(ec);
  });
  impl_->ioc.stop();
  for (auto& t : impl_->threads) {
    if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
  }
  impl_->threads.clear();
}

}  // namespace graft::server
