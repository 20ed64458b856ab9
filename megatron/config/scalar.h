#pragma once
// Strict scalar conversions for recipe values (internal to megatron_config). Each parser returns
// an empty string on success, else a short reason ("not an integer", "out of range").
#include <cstdint>
#include <string>
#include <string_view>

namespace megatron::config::detail {

std::string parse_int64(std::string_view text, int64_t& out);
std::string parse_uint64(std::string_view text, uint64_t& out);
std::string parse_double(std::string_view text, double& out);  // finite values only
std::string parse_bool(std::string_view text, bool& out);      // true|True|TRUE|false|False|FALSE

// Shortest text that parses back to exactly v ("0.001", "1e-05", "10000").
std::string format_double(double v);
// A YAML scalar for s: plain when unambiguous, else double-quoted with escapes.
std::string yaml_quote(const std::string& s);
// Levenshtein distance, for "did you mean" hints.
size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace megatron::config::detail
