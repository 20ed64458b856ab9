#include "data/cli.h"

#include <cerrno>
#include <cstdlib>
#include <iostream>

#include "megatron/core/error.h"

namespace megatron::data::cli {

Args::Args(int argc, char** argv, const std::vector<FlagSpec>& specs) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      help_ = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0)
      throw UsageError(concat("unexpected argument '", arg, "' (flags start with --)"));
    std::string name = arg.substr(2);
    std::string inline_value;
    bool has_inline = false;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_inline = true;
    }
    const FlagSpec* spec = nullptr;
    for (const auto& s : specs)
      if (s.name == name) spec = &s;
    if (!spec) throw UsageError(concat("unknown flag '--", name, "'"));
    if (values_.count(name) && spec->arity != Arity::Many)
      throw UsageError(concat("flag '--", name, "' given twice"));
    auto& v = values_[name];
    if (spec->arity == Arity::Flag) {
      if (has_inline) throw UsageError(concat("flag '--", name, "' takes no value"));
      continue;
    }
    if (has_inline) {
      if (inline_value.empty()) throw UsageError(concat("flag '--", name, "' needs a value"));
      v.push_back(inline_value);
      continue;
    }
    const size_t before = v.size();
    while (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) {
      v.emplace_back(argv[++i]);
      if (spec->arity == Arity::One) break;
    }
    if (v.size() == before) throw UsageError(concat("flag '--", name, "' needs a value"));
  }
}

const std::vector<std::string>& Args::values(const std::string& name) const {
  static const std::vector<std::string> kEmpty;
  const auto it = values_.find(name);
  return it == values_.end() ? kEmpty : it->second;
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  const auto& v = values(name);
  return v.empty() ? fallback : v.front();
}

std::string Args::required(const std::string& name) const {
  const auto& v = values(name);
  if (v.empty()) throw UsageError(concat("missing required flag '--", name, "'"));
  return v.front();
}

int64_t Args::get_int(const std::string& name, int64_t fallback, int64_t min_value) const {
  if (!has(name)) return fallback;
  const std::string s = get(name);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno == ERANGE)
    throw UsageError(concat("flag '--", name, "' needs an integer, got '", s, "'"));
  if (v < min_value)
    throw UsageError(concat("flag '--", name, "' must be >= ", min_value, ", got ", v));
  return v;
}

double Args::get_double(const std::string& name, double fallback) const {
  if (!has(name)) return fallback;
  const std::string s = get(name);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0')
    throw UsageError(concat("flag '--", name, "' needs a number, got '", s, "'"));
  return v;
}

int run_tool(const char* tool, const char* usage, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    std::cerr << tool << ": " << e.what() << "\n\n" << usage;
    return 2;
  } catch (const InputError& e) {
    std::cerr << tool << ": error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << tool << ": internal error: " << e.what() << "\n";
    return 3;
  }
}

}  // namespace megatron::data::cli
