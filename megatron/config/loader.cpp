// load_recipe / parse_recipe_string: `extends:` resolution, overrides, typed parse, validation;
// and resolve_path.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "megatron/config/parse.h"
#include "megatron/config/recipe.h"
#include "megatron/config/tree.h"
#include "megatron/core/error.h"

namespace megatron::config {
namespace {

namespace fs = std::filesystem;
using detail::Node;

// One file on the current `extends:` chain, for cycle detection and messages.
struct ChainLink {
  fs::path canonical;
  std::string name;
};

Node load_file(const fs::path& path, std::vector<ChainLink>& chain, const std::string& referrer);

// Reads the tree's `extends:` (a path or a list of paths, relative to base_dir), loads those
// recipes recursively, and returns them merged with `tree` on top.
Node resolve_extends(Node tree, const fs::path& base_dir, std::vector<ChainLink>& chain) {
  auto it = std::find_if(tree.entries.begin(), tree.entries.end(),
                         [](const auto& e) { return e.first == "extends"; });
  if (it == tree.entries.end()) return tree;
  Node ext = std::move(it->second);
  tree.entries.erase(it);
  std::vector<const Node*> names;
  if (ext.kind == Node::Kind::Scalar) {
    names.push_back(&ext);
  } else if (ext.kind == Node::Kind::Seq) {
    for (const auto& item : ext.items) names.push_back(&item);
  } else if (ext.kind != Node::Kind::Null) {
    throw InputError(concat(ext.origin.str(),
                            ": extends: expected a recipe path or a list of "
                            "paths, got ",
                            ext.describe()));
  }
  Node merged;
  merged.kind = Node::Kind::Map;
  merged.origin = tree.origin;
  for (const Node* name : names) {
    MT_INPUT_CHECK(name->kind == Node::Kind::Scalar && !name->scalar.empty(), name->origin.str(),
                   ": extends: expected a recipe path, got ", name->describe());
    fs::path p(name->scalar);
    if (p.is_relative()) p = (base_dir / p).lexically_normal();
    detail::merge_into(merged, load_file(p, chain, name->origin.str()));
  }
  detail::merge_into(merged, tree);
  return merged;
}

Node load_file(const fs::path& path, std::vector<ChainLink>& chain, const std::string& referrer) {
  std::string name = path.string();
  std::string prefix = referrer.empty() ? "" : referrer + ": extends: ";
  std::error_code ec;
  fs::path canonical = fs::weakly_canonical(path, ec);
  if (ec) canonical = fs::absolute(path).lexically_normal();
  for (size_t i = 0; i < chain.size(); ++i) {
    if (chain[i].canonical != canonical) continue;
    std::string cycle;
    for (size_t j = i; j < chain.size(); ++j) cycle += chain[j].name + " -> ";
    throw InputError(concat(prefix, "cycle in recipe extends: ", cycle, name));
  }
  MT_INPUT_CHECK(!fs::is_directory(path, ec), prefix, "cannot read recipe '", name,
                 "': it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw InputError(concat(prefix, "cannot read recipe '", name, "': ", std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  MT_INPUT_CHECK(!in.bad(), prefix, "error reading recipe '", name, "'");

  chain.push_back({canonical, name});
  Node tree = resolve_extends(detail::parse_yaml(text.str(), name), path.parent_path(), chain);
  chain.pop_back();
  return tree;
}

// The parent of the nearest ancestor directory named `recipes`, or "" if none.
std::string guess_root(const std::string& recipe_path) {
  if (recipe_path.empty()) return {};
  std::error_code ec;
  fs::path p = fs::absolute(fs::path(recipe_path), ec).lexically_normal();
  if (ec) return {};
  for (fs::path d = p.parent_path(); d.has_relative_path(); d = d.parent_path())
    if (d.filename() == "recipes") return d.parent_path().string();
  return {};
}

Recipe finish(Node tree, const std::string& top, const std::vector<std::string>& overrides) {
  for (const auto& o : overrides) detail::apply_override(tree, o, top);
  Recipe r = detail::parse_tree(tree, top);
  r.source_path = top;
  r.root_dir = guess_root(top);
  r.validate();
  return r;
}

}  // namespace

Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides) {
  MT_INPUT_CHECK(!path.empty(), "no recipe file given");
  std::vector<ChainLink> chain;
  return finish(load_file(fs::path(path), chain, ""), path, overrides);
}

Recipe parse_recipe_string(const std::string& yaml_text, const std::string& name_for_errors,
                           const std::vector<std::string>& overrides) {
  std::vector<ChainLink> chain;
  Node tree = resolve_extends(detail::parse_yaml(yaml_text, name_for_errors), fs::path(), chain);
  return finish(std::move(tree), name_for_errors, overrides);
}

std::string resolve_output_path(const std::string& p) {
  if (p.empty()) return p;
  return fs::absolute(fs::path(p)).lexically_normal().string();
}

std::string resolve_path(const Recipe& recipe, const std::string& p) {
  if (p.empty()) return p;
  fs::path path(p);
  if (path.is_absolute()) return p;
  std::error_code ec;
  if (fs::exists(path, ec)) return p;
  std::string root = recipe.root_dir.empty() ? guess_root(recipe.source_path) : recipe.root_dir;
  if (root.empty()) return p;
  return (fs::path(root) / path).lexically_normal().string();
}

}  // namespace megatron::config
