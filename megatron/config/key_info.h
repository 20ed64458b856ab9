#pragma once
#include <string>

namespace megatron::config {

// What a section's fields() says about one key beyond its name and member. Every section
// declares its keys once, in `template <class Self, class V> static void fields(Self&, V&)`,
// calling v(name, member[, KeyInfo]) per key and v.section(name, sub) per nested section: the
// parser, to_yaml, to_json and the key origins all walk it, in that order.
struct KeyInfo {
  bool required = false;      // an error when absent or null
  std::string note;           // a comment beside the key in to_yaml
  bool zero_is_auto = false;  // 0 is written and read as `auto`
  bool keep_empty = false;    // a string written as itself when empty (not as null)
};
inline KeyInfo required_key() { return {true, "", false, false}; }
inline KeyInfo noted(std::string note) { return {false, std::move(note), false, false}; }
inline std::string auto_note(int64_t stored, int64_t resolved) {
  return stored == 0 ? "auto: " + std::to_string(resolved) : "";
}

}  // namespace megatron::config
