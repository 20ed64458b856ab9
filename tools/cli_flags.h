#pragma once
// Command-line flags of the tools (convert_checkpoint, generate): walks argv flag by flag; a
// missing or malformed value is a usage error (the message and the usage text on stderr,
// exit status 2); -h/--help prints the usage and exits 0.
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "megatron/core/error.h"

namespace megatron::tools {

class FlagReader {
 public:
  FlagReader(const char* tool, const char* usage, int argc, char** argv)
      : tool_(tool), usage_(usage), argc_(argc), argv_(argv) {}

  // Advances to the next flag; false after the last. Handles -h/--help itself.
  bool next() {
    if (++i_ >= argc_) return false;
    flag_ = argv_[i_];
    if (flag_ == "-h" || flag_ == "--help") {
      std::fputs(usage_, stdout);
      std::exit(0);
    }
    return true;
  }
  const std::string& flag() const { return flag_; }
  std::string value() {
    if (i_ + 1 >= argc_) fail(flag_ + " needs a value");
    return argv_[++i_];
  }
  int64_t integer(long long least = LLONG_MIN) {
    const std::string v = value();
    char* end = nullptr;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < least)
      fail(least == LLONG_MIN ? concat(flag_, " needs an integer, got '", v, "'")
                              : concat(flag_, " needs an integer >= ", least, ", got '", v, "'"));
    return n;
  }
  double number() {
    const std::string v = value();
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0') fail(concat(flag_, " needs a number, got '", v, "'"));
    return x;
  }
  [[noreturn]] void fail(const std::string& what) const {
    std::fprintf(stderr, "%s: %s\n%s", tool_, what.c_str(), usage_);
    std::exit(2);
  }

 private:
  const char* tool_;
  const char* usage_;
  int argc_;
  char** argv_;
  int i_ = 0;
  std::string flag_;
};

}  // namespace megatron::tools
