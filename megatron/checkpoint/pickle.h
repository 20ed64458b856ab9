#pragma once
// A restricted unpickler for the Python pickles inside PyTorch and Megatron-LM checkpoints
// (torch.save's data.pkl, torch.distributed.checkpoint's .metadata, Megatron's args). It reads
// the pickle into plain data and never calls anything: a REDUCE, NEWOBJ or BUILD of a class
// becomes an Object node naming the class, its arguments and its state, for the caller to
// interpret. Only the classes these files hold may appear (tensor and parameter rebuilds, torch
// storages and dtypes, the distributed-checkpoint metadata and save-plan classes, OrderedDict,
// argparse.Namespace, Megatron's enums in its args, numpy's arrays in saved RNG states, ...);
// any other global, such as os.system, is refused with an InputError naming it. Sizes, nesting and memo are bounded, so hostile input costs bounded memory.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace megatron::checkpoint {

struct PickleValue;
using PickleRef = std::shared_ptr<PickleValue>;

struct PickleValue {
  enum class Kind {
    None,
    Bool,
    Int,
    Float,
    String,  // text (UTF-8)
    Bytes,   // binary strings
    Tuple,
    List,
    Dict,        // in insertion order
    Set,         // set and frozenset
    Global,      // a class or function reference: `name` = "module.qualname"
    Object,      // `name` called on `items[0]` (a tuple), with `state` (BUILD) and dict/list items
    Persistent,  // a persistent id (torch: a storage reference), `items[0]`
  };
  Kind kind = Kind::None;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  std::string text;              // String, Bytes; Global and Object: the class or function
  std::vector<PickleRef> items;  // Tuple, List, Set; Object: {args}
  std::vector<std::pair<PickleRef, PickleRef>> dict;  // Dict; Object: SETITEMS on it
  PickleRef state;  // Object: BUILD's argument; Dict: an OrderedDict's attributes (BUILD)

  bool is(Kind k) const { return kind == k; }
  // Dict and Object dict items: the value under a string key, or null.
  const PickleValue* get(const std::string& key) const;
  std::string describe() const;  // a short description for error messages
};

// Parses one pickle (protocols 0-5 as torch and Python write them). `where` names the file in
// errors. InputError for anything malformed, truncated, over the limits or not allowed.
PickleRef read_pickle(std::span<const uint8_t> bytes, const std::string& where);

// Whether `module.name` may appear in a checkpoint pickle (the allowlist read_pickle applies).
bool pickle_global_allowed(const std::string& module, const std::string& name);

}  // namespace megatron::checkpoint
