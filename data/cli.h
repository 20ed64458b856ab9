#pragma once
// A tiny Megatron-style flag parser shared by the data tools (preprocess_data,
// merge_datasets, train_tokenizer). Flags are "--name value", "--name v1 v2 ..." (values run
// until the next "--" flag), "--name=value", or boolean "--name". Unknown flags, missing or
// malformed values raise UsageError; run_tool prints it with the usage text and exits 2.
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace megatron::data::cli {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Arity { Flag, One, Many };

struct FlagSpec {
  std::string name;  // without the leading "--"
  Arity arity;
};

class Args {
 public:
  // Throws UsageError. "--help"/"-h" sets help().
  Args(int argc, char** argv, const std::vector<FlagSpec>& specs);
  bool help() const { return help_; }
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  const std::vector<std::string>& values(const std::string& name) const;
  std::string get(const std::string& name, const std::string& fallback = "") const;
  std::string required(const std::string& name) const;
  int64_t get_int(const std::string& name, int64_t fallback, int64_t min_value) const;
  double get_double(const std::string& name, double fallback) const;

 private:
  std::map<std::string, std::vector<std::string>> values_;
  bool help_ = false;
};

// A tool's main: runs `body` and turns what it throws into the tools' exit codes: UsageError ->
// "<tool>: <message>" and the usage text, 2; InputError (bad files, values) -> "<tool>: error:
// <message>", 1; any other exception -> "<tool>: internal error: <message>", 3.
int run_tool(const char* tool, const char* usage, const std::function<int()>& body);

}  // namespace megatron::data::cli
