#pragma once
// Python pickles written without Python (protocol 2, as torch.save writes them), for the files
// other frameworks load: Megatron-LM's common.pt and model_optim_rng.pt, a distributed
// checkpoint's .metadata. A value is a small tree: plain data, references to classes and
// functions, and the two ways Python rebuilds an object (a call of a function or class with
// arguments, REDUCE; an instance made with cls.__new__ and given its state, NEWOBJ + BUILD).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace megatron::checkpoint {

struct PyItem;  // a dict item: key, value

struct Py {
  enum class Kind {
    None,
    Bool,
    Int,
    Float,
    Str,
    Tuple,
    List,
    Dict,
    Global,
    Reduce,
    NewObj,
    PersId
  };
  Kind kind = Kind::None;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  std::string text;          // Str; Global: "module.name" split at the last '.'
  std::vector<Py> items;     // Tuple, List; Reduce: {callable, args tuple}
  std::vector<PyItem> dict;  // Dict; Reduce/NewObj: SETITEMS after building
  std::vector<Py> state;     // Reduce/NewObj: BUILD's argument (0 or 1)

  static Py none();
  static Py boolean_value(bool b);
  static Py integer_value(int64_t v);
  static Py real_value(double v);
  static Py str(std::string s);
  static Py tuple(std::vector<Py> items);
  static Py list(std::vector<Py> items);
  static Py dictionary(std::vector<PyItem> items);
  static Py global(const std::string& module, const std::string& name);
  // callable(*args), then BUILD(state) when given.
  static Py reduce(Py callable, std::vector<Py> args);
  // module.name.__new__(module.name) given `state` by BUILD (dataclasses, argparse.Namespace).
  static Py new_object(const std::string& module, const std::string& name, Py state);
  // collections.OrderedDict with these items.
  static Py ordered_dict(std::vector<PyItem> items);
  // A persistent id (torch.save's storage references).
  static Py persistent(Py id);
};

struct PyItem {
  Py key, value;
};

// The pickle (protocol 2) of `value`.
std::string write_pickle(const Py& value);

}  // namespace megatron::checkpoint
