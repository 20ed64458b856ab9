#pragma once
// The checks recipe validation shares (validate.cpp, moe_config.cpp): each failure names where
// the key came from (KeyOrigins), the full key path and the offending value.
#include <initializer_list>
#include <string>

#include "megatron/config/recipe.h"
#include "megatron/config/scalar.h"
#include "megatron/core/error.h"

namespace megatron::config {
inline std::string num(double v) { return detail::format_double(v); }

class Checker {
 public:
  explicit Checker(const KeyOrigins& origins) : origins_(origins) {}

  [[noreturn]] void fail(const std::string& key, const std::string& msg) const {
    std::string where = origins_.of(key);
    throw InputError(where.empty() ? concat(key, ": ", msg) : concat(where, ": ", key, ": ", msg));
  }
  void check(bool ok, const std::string& key, const std::string& msg) const {
    if (!ok) fail(key, msg);
  }
  void positive(const std::string& key, int64_t v) const {
    check(v > 0, key, concat("must be > 0 (got ", v, ")"));
  }
  void non_negative(const std::string& key, int64_t v) const {
    check(v >= 0, key, concat("must be >= 0 (got ", v, ")"));
  }
  void positive(const std::string& key, double v) const {
    check(v > 0, key, concat("must be > 0 (got ", num(v), ")"));
  }
  void non_negative(const std::string& key, double v) const {
    check(v >= 0, key, concat("must be >= 0 (got ", num(v), ")"));
  }
  void unit_interval(const std::string& key, double v) const {  // [0, 1)
    check(v >= 0 && v < 1, key, concat("must be in [0, 1) (got ", num(v), ")"));
  }
  void one_of(const std::string& key, const std::string& v,
              std::initializer_list<const char*> allowed) const {
    for (const char* a : allowed)
      if (v == a) return;
    std::string list;
    for (const char* a : allowed) list += concat(list.empty() ? "" : ", ", a);
    fail(key, concat("must be one of ", list, " (got '", v, "')"));
  }
  // `key` must be divisible by `by`; `by_name` names the divisor in the message.
  void divisible(const std::string& key, int64_t v, const std::string& by_name, int64_t by) const {
    if (by > 0 && v % by != 0)
      fail(key,
           concat("must be divisible by ", by_name, " (got ", v, " % ", by, " = ", v % by, ")"));
  }

 private:
  const KeyOrigins& origins_;
};

// model.longrope_* (longrope.cpp).
void validate_longrope(const ModelConfig& m, const Checker& c);
// model.no_rope_freq and model.rotary_percent (longrope.cpp, with the other per-model rope keys).
void validate_no_rope_freq(const ModelConfig& m, const Checker& c);
void validate_rotary_percent(const ModelConfig& m, const Checker& c);
void validate_window_skip(const ModelConfig& m, const Checker& c);

}  // namespace megatron::config
