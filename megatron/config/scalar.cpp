#include "megatron/config/scalar.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <system_error>
#include <vector>

namespace megatron::config::detail {
namespace {

// from_chars rejects a leading '+', which YAML allows.
std::string_view strip_plus(std::string_view t) {
  if (t.size() > 1 && t[0] == '+' && t[1] != '-' && t[1] != '+') t.remove_prefix(1);
  return t;
}

template <typename T>
std::string parse_integer(std::string_view text, T& out) {
  std::string_view t = strip_plus(text);
  if (t.empty()) return "empty value";
  T v{};
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v, 10);
  if (ec == std::errc::result_out_of_range) return "out of range";
  if (ec != std::errc() || ptr != t.data() + t.size()) return "not an integer";
  out = v;
  return {};
}

}  // namespace

std::string parse_int64(std::string_view text, int64_t& out) { return parse_integer(text, out); }

std::string parse_uint64(std::string_view text, uint64_t& out) {
  if (!text.empty() && text[0] == '-') {
    int64_t probe = 0;
    return parse_int64(text, probe).empty() ? "must be a non-negative integer" : "not an integer";
  }
  return parse_integer(text, out);
}

std::string parse_double(std::string_view text, double& out) {
  std::string_view t = strip_plus(text);
  if (t.empty()) return "empty value";
  // from_chars would accept "inf"/"nan"; recipes have no use for them.
  for (char c : t)
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '-' || c == '+'))
      return "not a number";
  double v = 0;
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v, std::chars_format::general);
  if (ec == std::errc::result_out_of_range) return "out of range";
  if (ec != std::errc() || ptr != t.data() + t.size() || !std::isfinite(v)) return "not a number";
  out = v;
  return {};
}

std::string parse_bool(std::string_view text, bool& out) {
  if (text == "true" || text == "True" || text == "TRUE") {
    out = true;
    return {};
  }
  if (text == "false" || text == "False" || text == "FALSE") {
    out = false;
    return {};
  }
  return "not a boolean (true or false)";
}

std::string format_double(double v) {
  std::array<char, 64> buf{};
  auto [ptr, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), v);
  if (ec != std::errc()) return std::to_string(v);
  return std::string(buf.data(), ptr);
}

std::string yaml_quote(const std::string& s) {
  static const std::array<std::string_view, 22> special = {
      "null", "Null", "NULL", "~",  "true", "True", "TRUE", "false", "False", "FALSE", "yes",
      "Yes",  "YES",  "no",   "No", "NO",   "on",   "On",   "ON",    "off",   "Off",   "OFF"};
  bool plain = !s.empty() && std::find(special.begin(), special.end(), s) == special.end();
  for (size_t i = 0; plain && i < s.size(); ++i) {
    char c = s[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '/' || (i > 0 && (c == '-' || c == '+'));
    plain = ok;
  }
  if (plain) return s;
  std::string q = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        q += "\\\"";
        break;
      case '\\':
        q += "\\\\";
        break;
      case '\n':
        q += "\\n";
        break;
      case '\t':
        q += "\\t";
        break;
      case '\r':
        q += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char esc[8];
          std::snprintf(esc, sizeof esc, "\\x%02x", c);
          q += esc;
        } else {
          q += static_cast<char>(c);
        }
    }
  }
  return q + "\"";
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace megatron::config::detail
