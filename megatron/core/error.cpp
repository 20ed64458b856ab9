#include "megatron/core/error.h"

namespace megatron {

void throw_check_failure(const char* condition, const char* file, int line,
                         const std::string& message) {
  std::ostringstream os;
  os << message;
  if (!message.empty()) os << " ";
  os << "[check '" << condition << "' failed at " << file << ":" << line << "]";
  throw Error(os.str());
}

}  // namespace megatron
