#include "megatron/checkpoint/pickle.h"

#include <charconv>
#include <cstring>
#include <set>
#include <unordered_map>

#include "megatron/core/error.h"

namespace megatron::checkpoint {
namespace {

using Kind = PickleValue::Kind;

constexpr size_t kMaxDepth = 200;      // nesting of containers
constexpr size_t kMaxStack = 1 << 20;  // values on the stack
constexpr size_t kMaxMemo = 1 << 22;   // memo entries

// The classes and functions checkpoints hold. Nothing here is ever called.
bool allowed(const std::string& module, const std::string& name) {
  static const std::set<std::string> exact = {
      "collections.OrderedDict",
      "builtins.set",
      "builtins.frozenset",
      "__builtin__.set",
      "__builtin__.frozenset",
      "_codecs.encode",  // protocol 2's bytes: encode(text, "latin1")
      "argparse.Namespace",
      "pathlib.PosixPath",  // StorageMeta.checkpoint_id
      "pathlib.PurePosixPath",
      "torch._utils._rebuild_tensor",
      "torch._utils._rebuild_tensor_v2",
      "torch._utils._rebuild_parameter",
      "torch._utils._rebuild_parameter_with_state",
      "torch.Size",
      "torch.device",
      "torch.distributed.checkpoint.metadata.Metadata",
      "torch.distributed.checkpoint.metadata.TensorStorageMetadata",
      "torch.distributed.checkpoint.metadata.BytesStorageMetadata",
      "torch.distributed.checkpoint.metadata.ChunkStorageMetadata",
      "torch.distributed.checkpoint.metadata.TensorProperties",
      "torch.distributed.checkpoint.metadata.MetadataIndex",
      "torch.distributed.checkpoint.metadata.StorageMeta",
      "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING",  // an enum
      "torch.distributed.checkpoint.filesystem._StorageInfo",
      // Megatron-Core keeps the save plans in its .metadata (to reuse them on the next save)
      "torch.distributed.checkpoint.planner.SavePlan",
      "torch.distributed.checkpoint.planner.WriteItem",
      "torch.distributed.checkpoint.planner.WriteItemType",  // an enum
      "torch.distributed.checkpoint.planner.TensorWriteData",
      "torch.serialization._get_layout",  // a layout by name: torch.strided
      // Megatron-LM's args: enum members (read as the member's value, never looked up)
      "signal.Signals",  // exit_signal
      "megatron.core.enums.ModelType",
      "megatron.core.transformer.enums.AttnBackend",
      "megatron.core.transformer.enums.AttnMaskType",
      "megatron.core.transformer.enums.CudaGraphScope",
      // Megatron-LM's saved RNG state: numpy's generator state, an array (never rebuilt)
      "numpy.ndarray",
      "numpy.dtype",
      "numpy.core.multiarray._reconstruct",
      "numpy._core.multiarray._reconstruct",
      "numpy.core.multiarray.scalar",
      "numpy._core.multiarray.scalar",
  };
  if (exact.count(module + "." + name)) return true;
  if (module == "torch") {  // storage classes and dtypes: torch.FloatStorage, torch.bfloat16, ...
    static const std::set<std::string> torch_names = {
        "FloatStorage",   "DoubleStorage", "HalfStorage",    "BFloat16Storage",
        "LongStorage",    "IntStorage",    "ShortStorage",   "CharStorage",
        "ByteStorage",    "BoolStorage",   "UntypedStorage", "float32",
        "float64",        "float16",       "bfloat16",       "int64",
        "int32",          "int16",         "int8",           "uint8",
        "bool",           "float",         "double",         "half",
        "long",           "int",           "strided",        "contiguous_format",
        "preserve_format"};
    return torch_names.count(name) > 0;
  }
  return false;
}

class Machine {
 public:
  Machine(std::span<const uint8_t> in, const std::string& where) : in_(in), where_(where) {}
  PickleRef run();

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(concat(where_, ": pickle byte ", pos_, ": ", what));
  }
  uint8_t byte() {
    if (pos_ >= in_.size()) fail("truncated");
    return in_[pos_++];
  }
  std::span<const uint8_t> take(uint64_t n) {
    if (n > in_.size() - pos_) fail(concat("truncated (", n, " bytes wanted)"));
    auto s = in_.subspan(pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }
  uint64_t le(int n) {
    const auto b = take(static_cast<uint64_t>(n));
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | b[static_cast<size_t>(i)];
    return v;
  }
  std::string line() {
    const size_t start = pos_;
    while (pos_ < in_.size() && in_[pos_] != '\n') ++pos_;
    if (pos_ >= in_.size()) fail("unterminated text line");
    std::string s(reinterpret_cast<const char*>(in_.data()) + start, pos_ - start);
    ++pos_;
    return s;
  }
  // Every value made lives until the end of the parse, so no address the bookkeeping below
  // holds is reused by another value.
  PickleRef make(Kind k) {
    auto v = std::make_shared<PickleValue>();
    v->kind = k;
    made_.push_back(v);
    return v;
  }
  PickleRef text(Kind k, std::span<const uint8_t> b) {
    PickleRef v = make(k);
    v->text.assign(reinterpret_cast<const char*>(b.data()), b.size());
    return v;
  }
  void push(PickleRef v) {
    if (stack_.size() >= kMaxStack) fail("stack deeper than the limit");
    stack_.push_back(std::move(v));
  }
  PickleRef pop() {
    if (stack_.size() <= floor()) fail("stack underflow");
    PickleRef v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  PickleRef& top() {
    if (stack_.size() <= floor()) fail("stack underflow");
    return stack_.back();
  }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  std::vector<PickleRef> pop_mark() {
    if (marks_.empty()) fail("no MARK");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<PickleRef> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  // A value goes into a container: it is sealed (never changed again), which rules out cycles;
  // the container's depth grows past it.
  void adopt(PickleValue& parent, const PickleRef& child) {
    if (child.get() == &parent) fail("a value put inside itself");
    sealed_.insert(child.get());
    const size_t d = depth_of(child.get()) + 1;
    if (d > kMaxDepth) fail(concat("containers nested deeper than ", kMaxDepth));
    size_t& pd = depth_[&parent];
    pd = std::max(pd, d);
  }
  size_t depth_of(const PickleValue* v) const {
    auto it = depth_.find(v);
    return it == depth_.end() ? 0 : it->second;
  }
  PickleValue& mutable_target(PickleRef& v, const char* op) {
    if (sealed_.count(v.get())) fail(concat(op, " on a value already inside another one"));
    return *v;
  }
  PickleRef tuple(std::vector<PickleRef> items) {
    PickleRef t = make(Kind::Tuple);
    for (const PickleRef& i : items) adopt(*t, i);
    t->items = std::move(items);
    return t;
  }
  void memo_put(uint64_t key) {
    if (memo_.size() >= kMaxMemo && !memo_.count(key)) fail("memo larger than the limit");
    memo_[key] = top();
  }
  PickleRef memo_get(uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) fail(concat("memo key ", key, " was never stored"));
    return it->second;
  }
  PickleRef global(const std::string& module, const std::string& name) {
    if (!allowed(module, name))
      fail(concat("refers to ", module, ".", name,
                  ", which a checkpoint has no use for: refused (nothing in it is run)"));
    PickleRef g = make(Kind::Global);
    g->text = module + "." + name;
    return g;
  }
  PickleRef object_of(const PickleRef& callable, PickleRef args) {
    if (!callable->is(Kind::Global)) fail("REDUCE or NEWOBJ of something not a class");
    if (!args->is(Kind::Tuple)) fail("REDUCE or NEWOBJ with arguments that are not a tuple");
    if (PickleRef plain = plain_data(callable->text, args->items)) return plain;
    PickleRef o = make(Kind::Object);
    o->text = callable->text;
    adopt(*o, args);
    o->items.push_back(std::move(args));
    return o;
  }
  // Constructors of plain data, read as that data: OrderedDict() is a dict, set(list) a set,
  // _codecs.encode(text, "latin1") (protocol 2's bytes) the bytes. Null for anything else.
  PickleRef plain_data(const std::string& callable, const std::vector<PickleRef>& args) {
    if (callable == "collections.OrderedDict" && args.empty()) return make(Kind::Dict);
    if ((callable == "builtins.set" || callable == "__builtin__.set") && args.size() == 1 &&
        args[0]->is(Kind::List)) {
      PickleRef set = make(Kind::Set);
      for (const PickleRef& i : args[0]->items) adopt(*set, i);
      set->items = args[0]->items;
      return set;
    }
    if (callable == "_codecs.encode" && args.size() == 2 && args[0]->is(Kind::String) &&
        args[1]->is(Kind::String) && args[1]->text == "latin1")
      return text(Kind::Bytes, latin1_bytes(args[0]->text));
    return nullptr;
  }
  // UTF-8 text of code points < 256 as those bytes.
  std::span<const uint8_t> latin1_bytes(const std::string& utf8) {
    scratch_.clear();
    for (size_t i = 0; i < utf8.size(); ++i) {
      const auto c = static_cast<uint8_t>(utf8[i]);
      if (c < 0x80) {
        scratch_.push_back(c);
      } else if ((c & 0xE0) == 0xC0 && c <= 0xC3 && i + 1 < utf8.size()) {
        scratch_.push_back(static_cast<uint8_t>(((c & 0x1F) << 6) | (utf8[++i] & 0x3F)));
      } else {
        fail("_codecs.encode of text outside latin-1");
      }
    }
    return scratch_;
  }
  int64_t parse_int(const std::string& s) {
    std::string t = s;
    if (!t.empty() && t.back() == 'L') t.pop_back();
    int64_t v = 0;
    const auto r = std::from_chars(t.data(), t.data() + t.size(), v);
    if (r.ec != std::errc() || r.ptr != t.data() + t.size()) fail(concat("bad integer '", s, "'"));
    return v;
  }
  PickleRef int_value(int64_t i) {
    PickleRef v = make(Kind::Int);
    v->integer = i;
    return v;
  }
  PickleRef bool_value(bool b) {
    PickleRef v = make(Kind::Bool);
    v->boolean = b;
    return v;
  }
  PickleRef long_bytes(uint64_t n) {
    if (n > 8) fail(concat("integer of ", n, " bytes: wider than 64 bits"));
    const auto b = take(n);
    uint64_t v = 0;
    for (size_t i = b.size(); i-- > 0;) v = (v << 8) | b[i];
    if (n > 0 && n < 8 && (b[n - 1] & 0x80)) v |= ~uint64_t{0} << (8 * n);  // sign-extend
    return int_value(static_cast<int64_t>(v));
  }
  void set_items(PickleRef& target, std::vector<PickleRef> kv);
  bool step(uint8_t op);
  bool scalar(uint8_t op);
  bool strings(uint8_t op);
  bool container(uint8_t op);
  bool fill(uint8_t op);
  bool object(uint8_t op);
  bool memo(uint8_t op);

  std::span<const uint8_t> in_;
  std::string where_;
  size_t pos_ = 0;
  std::vector<PickleRef> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, PickleRef> memo_;
  std::vector<PickleRef> made_;
  std::vector<uint8_t> scratch_;
  std::set<const PickleValue*> sealed_;
  std::unordered_map<const PickleValue*, size_t> depth_;
};

void Machine::set_items(PickleRef& target, std::vector<PickleRef> kv) {
  if (kv.size() % 2 != 0) fail("SETITEMS with an odd number of values");
  if (!target->is(Kind::Dict) && !target->is(Kind::Object)) fail("SETITEM(S) on a non-dict");
  PickleValue& d = mutable_target(target, "SETITEM");
  for (size_t i = 0; i < kv.size(); i += 2) {
    adopt(d, kv[i]);
    adopt(d, kv[i + 1]);
    d.dict.emplace_back(kv[i], kv[i + 1]);
  }
}

// Protocol, framing, stack marks and numbers; false: not one of them.
bool Machine::scalar(uint8_t op) {
  switch (op) {
    case 0x80:
      if (byte() > 5) fail("pickle protocol above 5");
      return true;  // PROTO
    case 0x95:
      le(8);
      return true;  // FRAME
    case '(':
      marks_.push_back(stack_.size());
      return true;  // MARK
    case '0':
      pop();
      return true;  // POP
    case '1':
      pop_mark();
      return true;  // POP_MARK
    case '2':
      push(top());
      return true;  // DUP
    case 'N':
      push(make(Kind::None));
      return true;
    case 0x88:
    case 0x89:
      push(bool_value(op == 0x88));
      return true;
    case 'I': {  // protocol 0: I01 / I00 are True / False
      const std::string s = line();
      push(s == "01" || s == "00" ? bool_value(s == "01") : int_value(parse_int(s)));
      return true;
    }
    case 'L':
      push(int_value(parse_int(line())));
      return true;
    case 'J':
      push(int_value(static_cast<int32_t>(le(4))));
      return true;
    case 'K':
      push(int_value(static_cast<int64_t>(le(1))));
      return true;
    case 'M':
      push(int_value(static_cast<int64_t>(le(2))));
      return true;
    case 0x8a:
      push(long_bytes(le(1)));
      return true;  // LONG1
    case 0x8b:
      push(long_bytes(le(4)));
      return true;  // LONG4
    case 'G': {     // big-endian IEEE double
      uint64_t bits = 0;
      for (uint8_t b : take(8)) bits = (bits << 8) | b;
      PickleRef v = make(Kind::Float);
      std::memcpy(&v->real, &bits, 8);
      push(v);
      return true;
    }
    case 'F': {
      const std::string s = line();
      PickleRef v = make(Kind::Float);
      const auto r = std::from_chars(s.data(), s.data() + s.size(), v->real);
      if (r.ec != std::errc()) fail(concat("bad float '", s, "'"));
      push(v);
      return true;
    }
    default:
      return false;
  }
}

// Text and binary strings; false: not one of them.
bool Machine::strings(uint8_t op) {
  switch (op) {
    case 'X':
      push(text(Kind::String, take(le(4))));
      return true;  // BINUNICODE
    case 0x8c:
      push(text(Kind::String, take(le(1))));
      return true;  // SHORT_BINUNICODE
    case 0x8d:
      push(text(Kind::String, take(le(8))));
      return true;  // BINUNICODE8
    case 'T':
      push(text(Kind::Bytes, take(le(4))));
      return true;  // BINSTRING
    case 'U':
      push(text(Kind::Bytes, take(le(1))));
      return true;  // SHORT_BINSTRING
    case 'B':
      push(text(Kind::Bytes, take(le(4))));
      return true;  // BINBYTES
    case 'C':
      push(text(Kind::Bytes, take(le(1))));
      return true;  // SHORT_BINBYTES
    case 0x8e:
    case 0x96:
      push(text(Kind::Bytes, take(le(8))));
      return true;  // BINBYTES8, BYTEARRAY8
    default:
      return false;
  }
}

// Tuples, lists, dicts and sets made; false: not one of them.
bool Machine::container(uint8_t op) {
  switch (op) {
    case ')':
      push(make(Kind::Tuple));
      return true;
    case 't':
      push(tuple(pop_mark()));
      return true;
    case 0x85: {
      auto a = pop();
      push(tuple({a}));
      return true;
    }
    case 0x86: {
      auto b = pop(), a = pop();
      push(tuple({a, b}));
      return true;
    }
    case 0x87: {
      auto c = pop(), b = pop(), a = pop();
      push(tuple({a, b, c}));
      return true;
    }
    case ']':
      push(make(Kind::List));
      return true;
    case 'l': {
      auto items = pop_mark();
      PickleRef l = make(Kind::List);
      for (auto& i : items) adopt(*l, i);
      l->items = std::move(items);
      push(l);
      return true;
    }
    case '}':
      push(make(Kind::Dict));
      return true;
    case 'd': {
      auto kv = pop_mark();
      PickleRef d = make(Kind::Dict);
      push(d);
      set_items(top(), std::move(kv));
      return true;
    }
    case 0x8f:
      push(make(Kind::Set));
      return true;
    case 0x91: {
      auto items = pop_mark();
      PickleRef s = make(Kind::Set);
      for (auto& i : items) adopt(*s, i);
      s->items = std::move(items);
      push(s);
      return true;
    }
    default:
      return false;
  }
}

// Filling a list, dict, set or object made earlier; false: not one of them.
bool Machine::fill(uint8_t op) {
  switch (op) {
    case 'a':
    case 'e': {  // APPEND, APPENDS
      std::vector<PickleRef> items = op == 'a' ? std::vector<PickleRef>{pop()} : pop_mark();
      PickleRef& target = top();
      if (!target->is(Kind::List) && !target->is(Kind::Object)) fail("APPEND on a non-list");
      PickleValue& l = mutable_target(target, "APPEND");
      for (auto& i : items) adopt(l, i);
      if (l.is(Kind::Object))
        for (auto& i : items) l.dict.emplace_back(nullptr, i);
      else
        l.items.insert(l.items.end(), items.begin(), items.end());
      return true;
    }
    case 's': {
      auto v = pop(), k = pop();
      set_items(top(), {k, v});
      return true;
    }
    case 'u': {
      auto kv = pop_mark();
      set_items(top(), std::move(kv));
      return true;
    }
    case 0x90: {  // ADDITEMS
      auto items = pop_mark();
      PickleRef& target = top();
      if (!target->is(Kind::Set)) fail("ADDITEMS on a non-set");
      PickleValue& s = mutable_target(target, "ADDITEMS");
      for (auto& i : items) adopt(s, i);
      s.items.insert(s.items.end(), items.begin(), items.end());
      return true;
    }
    default:
      return false;
  }
}

// Globals (checked against the allowlist), REDUCE/NEWOBJ/BUILD as data, persistent ids.
bool Machine::object(uint8_t op) {
  switch (op) {
    case 'c': {
      const std::string module = line();
      push(global(module, line()));
      return true;
    }
    case 0x93: {  // STACK_GLOBAL
      auto name = pop(), module = pop();
      if (!module->is(Kind::String) || !name->is(Kind::String)) fail("STACK_GLOBAL of non-strings");
      push(global(module->text, name->text));
      return true;
    }
    case 'R':
    case 0x81: {
      auto args = pop(), callable = pop();
      push(object_of(callable, args));
      return true;
    }
    case 0x92: {  // NEWOBJ_EX: cls, args, kwargs
      auto kwargs = pop(), args = pop(), callable = pop();
      PickleRef o = object_of(callable, args);
      adopt(*o, kwargs);
      o->state = kwargs;
      push(o);
      return true;
    }
    case 'b': {  // BUILD
      auto state = pop();
      PickleRef& target = top();
      // An OrderedDict (read as a dict) takes BUILD for its attributes: a module's state dict
      // carries its `_metadata` so.
      if (!target->is(Kind::Object) && !target->is(Kind::Dict))
        fail("BUILD on something not an object");
      PickleValue& o = mutable_target(target, "BUILD");
      adopt(o, state);
      o.state = state;
      return true;
    }
    case 'Q': {
      auto id = pop();
      PickleRef p = make(Kind::Persistent);
      adopt(*p, id);
      p->items.push_back(id);
      push(p);
      return true;
    }
    case 'P': {
      PickleRef p = make(Kind::Persistent);
      PickleRef id = make(Kind::String);
      id->text = line();
      adopt(*p, id);
      p->items.push_back(id);
      push(p);
      return true;
    }
    default:
      return false;
  }
}

// The memo.
bool Machine::memo(uint8_t op) {
  switch (op) {
    case 'q':
      memo_put(le(1));
      return true;
    case 'r':
      memo_put(le(4));
      return true;
    case 'p':
      memo_put(static_cast<uint64_t>(parse_int(line())));
      return true;
    case 0x94:
      memo_put(memo_.size());
      return true;  // MEMOIZE
    case 'h':
      push(memo_get(le(1)));
      return true;
    case 'j':
      push(memo_get(le(4)));
      return true;
    case 'g':
      push(memo_get(static_cast<uint64_t>(parse_int(line()))));
      return true;
    default:
      return false;
  }
}

// One opcode; false at STOP.
bool Machine::step(uint8_t op) {
  if (op == '.') return false;
  if (scalar(op) || strings(op) || container(op) || fill(op) || object(op) || memo(op)) return true;
  fail(concat("opcode 0x", std::hex, static_cast<int>(op), std::dec,
              " is not one a checkpoint needs (refused)"));
}

PickleRef Machine::run() {
  while (step(byte())) {
  }
  if (stack_.size() != 1 || !marks_.empty()) fail("STOP with a malformed stack");
  return stack_.back();
}

}  // namespace

const PickleValue* PickleValue::get(const std::string& key) const {
  for (const auto& [k, v] : dict)
    if (k && k->kind == Kind::String && k->text == key) return v.get();
  return nullptr;
}

std::string PickleValue::describe() const {
  switch (kind) {
    case Kind::None:
      return "None";
    case Kind::Bool:
      return boolean ? "True" : "False";
    case Kind::Int:
      return std::to_string(integer);
    case Kind::Float:
      return std::to_string(real);
    case Kind::String:
      return "'" + text.substr(0, 40) + "'";
    case Kind::Bytes:
      return concat("<", text.size(), " bytes>");
    case Kind::Tuple:
      return concat("<tuple of ", items.size(), ">");
    case Kind::List:
      return concat("<list of ", items.size(), ">");
    case Kind::Dict:
      return concat("<dict of ", dict.size(), ">");
    case Kind::Set:
      return concat("<set of ", items.size(), ">");
    case Kind::Global:
      return text;
    case Kind::Object:
      return text + "(...)";
    case Kind::Persistent:
      return "<persistent id>";
  }
  return "?";
}

bool pickle_global_allowed(const std::string& module, const std::string& name) {
  return allowed(module, name);
}

PickleRef read_pickle(std::span<const uint8_t> bytes, const std::string& where) {
  return Machine(bytes, where).run();
}

}  // namespace megatron::checkpoint
