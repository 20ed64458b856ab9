#pragma once
// Runs a shell command for the end-to-end tests: its exit code and its stdout + stderr.
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace megatron::testing {

struct CommandResult {
  int exit_code;
  std::string output;  // stdout + stderr
};

inline CommandResult run_command(const std::string& command) {
  CommandResult r{-1, ""};
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace megatron::testing
