#pragma once
// Errors that carry context. MT_CHECK(cond, parts...) throws megatron::Error with the failed
// condition, the source location and the message parts streamed together, so callers at API
// boundaries can name the file, key or value that was wrong.
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace megatron {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Raised for user input (recipes, data files, checkpoints, CLI): tools print it and exit 1.
class InputError : public Error {
 public:
  explicit InputError(const std::string& what) : Error(what) {}
};

template <typename... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<Parts>(parts));
  return os.str();
}

// The items of a range, streamed and separated by `sep` ("1 2 3", "a, b"), for messages.
template <typename Range>
std::string join(const Range& items, const char* sep = ", ") {
  std::ostringstream os;
  const char* between = "";
  for (const auto& item : items) {
    os << between << item;
    between = sep;
  }
  return os.str();
}

[[noreturn]] void throw_check_failure(const char* condition, const char* file, int line,
                                      const std::string& message);

}  // namespace megatron

#define MT_CHECK(cond, ...)                                                               \
  do {                                                                                    \
    if (!(cond)) [[unlikely]]                                                             \
      ::megatron::throw_check_failure(#cond, __FILE__, __LINE__,                          \
                                      ::megatron::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)

// For bad user input: no source location, just the message (which must name the input).
#define MT_INPUT_CHECK(cond, ...)                                                      \
  do {                                                                                 \
    if (!(cond)) [[unlikely]]                                                          \
      throw ::megatron::InputError(::megatron::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
