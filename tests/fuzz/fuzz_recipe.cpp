// YAML recipes (megatron/config): parse, resolve keys, validate; a valid one also prints.
#include "megatron/config/recipe.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace megatron;
  return fuzz::refuse_or_accept([&] {
    const config::Recipe r = config::parse_recipe_string(
        std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
    (void)r.to_yaml();
    (void)r.to_json();
  });
}
