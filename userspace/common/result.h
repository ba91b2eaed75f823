// A value or a one-line error, for functions whose failure is an expected case
// (a malformed file, a vanished process) rather than a bug. Where callers must
// tell failures apart (a vanished process is routine, a refused file is not),
// the error also carries a kind, an enum: code decides on the kind, people read
// the message, and nobody matches on the message's text.
#pragma once
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace argus {

struct Error {
  std::string message;
};

// An error with a kind that callers decide on.
template <typename Kind>
struct KindError {
  Kind kind;
  std::string message;
};

template <typename T, typename E = Error>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(E err) : v_(std::move(err)) {}      // NOLINT
  // A kinded error where only the message is wanted (the kind is dropped).
  template <typename Kind, typename Plain = E, std::enable_if_t<std::is_same_v<Plain, Error>, int> = 0>
  Result(KindError<Kind> err) : v_(Error{std::move(err.message)}) {}  // NOLINT
  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  T& value() { return std::get<T>(v_); }
  const T& value() const { return std::get<T>(v_); }
  T& operator*() { return value(); }
  const T& operator*() const { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const std::string& error() const { return std::get<E>(v_).message; }
  const E& failure() const { return std::get<E>(v_); }

 private:
  std::variant<T, E> v_;
};

inline Error make_error(std::string msg) { return Error{std::move(msg)}; }

template <typename Kind>
KindError<Kind> make_error(Kind kind, std::string msg) {
  return KindError<Kind>{kind, std::move(msg)};
}

}  // namespace argus
