#pragma once
// The recipe as a plain tree that remembers where every node came from (internal to
// megatron_config). yaml-cpp nodes are converted into this once, so that merging `extends:`
// bases and applying --set overrides keep each key's file and line for error messages.
#include <string>
#include <utility>
#include <vector>

namespace megatron::config::detail {

struct Origin {
  std::string file;           // recipe file (or name_for_errors)
  int line = -1;              // 0-based; -1 if unknown
  std::string override_text;  // "model.num_layers=5" when the node came from --set
  std::string str() const;    // "file:LINE", "file (--set k=v)", or "file"
};

struct MapEntry;

struct Node {
  enum class Kind { Null, Scalar, Seq, Map };
  Kind kind = Kind::Null;
  std::string scalar;
  bool quoted = false;      // a quoted (or !!str-tagged) scalar: a string, never a number/bool
  std::vector<Node> items;  // Seq
  std::vector<MapEntry> entries;  // Map, in file order
  Origin origin;

  bool is_null() const { return kind == Kind::Null; }
  const Node* find(const std::string& key) const;
  Node* find(const std::string& key);
  // "a map", "a list", or the scalar as written (quoted if it was quoted).
  std::string describe() const;
};

// A key and its value (a struct rather than std::pair, which needs Node complete inside Node).
struct MapEntry {
  MapEntry(std::string key, Node value) : first(std::move(key)), second(std::move(value)) {}
  std::string first;
  Node second;
};

// Parses YAML text (one document; empty text is an empty map). Malformed YAML throws InputError
// naming file and line. Duplicate keys are errors.
Node parse_yaml(const std::string& text, const std::string& file);
// Parses the value of a --set override into a node whose origin names the override.
Node parse_override_value(const std::string& value, const Origin& origin);

// Deep merge: maps merge key by key (child wins), everything else is replaced by the child.
void merge_into(Node& base, const Node& child);

// Applies one "a.b.c=value" override; throws InputError naming the override on bad syntax.
void apply_override(Node& root, const std::string& override_text, const std::string& top_file);

}  // namespace megatron::config::detail
