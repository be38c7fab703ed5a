// Result<T>: a value or an Error, returned across layers instead of throwing.
// A small stand-in for C++23 std::expected.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace graft {

// What went wrong, in words a user can act on. `code` is a short machine
// token (e.g. "invalid_argument", "not_found") the server maps to HTTP.
struct Error {
  std::string code;
  std::string message;
};

inline Error make_error(std::string code, std::string message) {
  return Error{std::move(code), std::move(message)};
}

template <typename... Args>
Error errorf(std::string code, fmt::format_string<Args...> format, Args&&... args) {
  return Error{std::move(code), fmt::format(format, std::forward<Args>(args)...)};
}

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}      // NOLINT(implicit)
  Result(Error error) : state_(std::move(error)) {}  // NOLINT(implicit)

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    assert(ok());
    return std::get<0>(state_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(state_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(state_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const {
    assert(!ok());
    return std::get<1>(state_);
  }

 private:
  std::variant<T, Error> state_;
};

// Result<void>: success or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), failed_(true) {}  // NOLINT(implicit)

  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const Error& error() const {
    assert(failed_);
    return error_;
  }

 private:
  Error error_;
  bool failed_ = false;
};

}  // namespace graft

// Propagate an error: `GRAFT_TRY(auto x, make_x());` or `GRAFT_TRY_STATUS(do_y());`.
#define GRAFT_CONCAT_INNER(a, b) a##b
#define GRAFT_CONCAT(a, b) GRAFT_CONCAT_INNER(a, b)
#define GRAFT_TRY(decl, expr)                                                                            \
  auto GRAFT_CONCAT(graft_result_, __LINE__) = (expr);                                                   \
  if (!GRAFT_CONCAT(graft_result_, __LINE__).ok()) return GRAFT_CONCAT(graft_result_, __LINE__).error(); \
  decl = std::move(GRAFT_CONCAT(graft_result_, __LINE__)).value()
#define GRAFT_TRY_STATUS(expr)                             \
  do {                                                     \
    auto graft_status_ = (expr);                           \
    if (!graft_status_.ok()) return graft_status_.error(); \
  } while (0)
