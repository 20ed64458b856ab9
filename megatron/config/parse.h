#pragma once
// Merged recipe tree -> typed Recipe with strict key/type checking (internal to megatron_config).
#include <string>

#include "megatron/config/recipe.h"
#include "megatron/config/tree.h"

namespace megatron::config::detail {

// Parses every section (unknown keys, wrong types and missing required keys are InputErrors);
// fills recipe.origins. Does not run validate(). `top_file` names keys that were never set.
Recipe parse_tree(const Node& root, const std::string& top_file);

}  // namespace megatron::config::detail
