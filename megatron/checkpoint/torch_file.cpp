#include "megatron/checkpoint/torch_file.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "megatron/core/error.h"

namespace megatron::checkpoint {
namespace {

using Kind = PickleValue::Kind;

DType storage_dtype(const std::string& cls, const std::string& where) {
  static const std::map<std::string, DType> types = {
      {"torch.FloatStorage", DType::F32}, {"torch.DoubleStorage", DType::F64},
      {"torch.HalfStorage", DType::F16},  {"torch.BFloat16Storage", DType::BF16},
      {"torch.LongStorage", DType::I64},  {"torch.IntStorage", DType::I32},
      {"torch.ShortStorage", DType::I16}, {"torch.CharStorage", DType::I8},
      {"torch.ByteStorage", DType::U8},   {"torch.BoolStorage", DType::U8}};
  auto it = types.find(cls);
  MT_INPUT_CHECK(it != types.end(), where, ": storage of class ", cls, " is not supported");
  return it->second;
}

std::vector<int64_t> int_tuple(const PickleValue& v, const std::string& where, const char* what) {
  MT_INPUT_CHECK(v.is(Kind::Tuple), where, ": tensor ", what, " is not a tuple");
  std::vector<int64_t> out;
  for (const PickleRef& i : v.items) {
    MT_INPUT_CHECK(i->is(Kind::Int) && i->integer >= 0, where, ": tensor ", what, " holds ",
                   i->describe());
    out.push_back(i->integer);
  }
  return out;
}

// The _rebuild_tensor_v2 node itself (a parameter wraps it as its first argument).
const PickleValue* rebuild_node(const PickleValue& v) {
  if (!v.is(Kind::Object) || v.items.empty()) return nullptr;
  if (v.text == "torch._utils._rebuild_tensor_v2") return &v;
  if (v.text == "torch._utils._rebuild_parameter" ||
      v.text == "torch._utils._rebuild_parameter_with_state") {
    const auto& args = v.items[0]->items;
    return args.empty() ? nullptr : rebuild_node(*args[0]);
  }
  return nullptr;
}

}  // namespace

TorchFile::TorchFile(const std::string& path) : zip_(path) { read_root(); }

TorchFile::TorchFile(const std::string& path, uint64_t base, uint64_t length)
    : zip_(path, base, length) {
  read_root();
}

void TorchFile::read_root() {
  const ZipArchive::Entry* pkl = zip_.find_suffix("data.pkl");
  MT_INPUT_CHECK(pkl != nullptr, path(), ": no data.pkl: not a torch.save file");
  root_ = read_pickle(zip_.read(*pkl), path() + ":" + pkl->name);
}

bool TorchFile::is_tensor(const PickleValue& v) { return rebuild_node(v) != nullptr; }

TorchTensorRef TorchFile::tensor_ref(const PickleValue& v, const std::string& what) const {
  const std::string where = concat(path(), ": ", what);
  const PickleValue* node = rebuild_node(v);
  MT_INPUT_CHECK(node != nullptr, where, ": not a tensor (", v.describe(), ")");
  const auto& args = node->items[0]->items;  // storage, offset, size, stride, ...
  MT_INPUT_CHECK(args.size() >= 4 && args[0]->is(Kind::Persistent) && args[1]->is(Kind::Int), where,
                 ": malformed tensor rebuild");
  const auto& id = args[0]->items[0]->items;  // ('storage', class, key, location, numel)
  MT_INPUT_CHECK(id.size() == 5 && id[0]->text == "storage" && id[1]->is(Kind::Global) &&
                     id[2]->is(Kind::String) && id[4]->is(Kind::Int),
                 where, ": malformed storage id");
  TorchTensorRef t;
  t.dtype = storage_dtype(id[1]->text, where);
  t.storage = id[2]->text;
  t.storage_numel = id[4]->integer;
  t.offset = args[1]->integer;
  t.shape = int_tuple(*args[2], where, "size");
  t.stride = int_tuple(*args[3], where, "stride");
  MT_INPUT_CHECK(t.shape.size() == t.stride.size() && t.offset >= 0 &&
                     t.shape.size() <= static_cast<size_t>(Shape::kMaxDims),
                 where, ": size and stride of different ranks, or more than ", Shape::kMaxDims,
                 " dimensions");
  int64_t last = t.offset;  // the largest element index the view reaches
  bool empty = false;
  for (size_t d = 0; d < t.shape.size(); ++d) {
    empty = empty || t.shape[d] == 0;
    MT_INPUT_CHECK(t.shape[d] <= (int64_t{1} << 40) && t.stride[d] <= (int64_t{1} << 40), where,
                   ": implausible size or stride");
    if (t.shape[d] > 0) last += (t.shape[d] - 1) * t.stride[d];
  }
  MT_INPUT_CHECK(empty || last < t.storage_numel, where, ": the view reaches element ", last,
                 " of a storage of ", t.storage_numel);
  // More elements than the storage holds means overlapping strides (an expanded view), which
  // no checkpoint stores and which could ask for unbounded memory.
  int64_t numel = 1;
  for (int64_t d : t.shape) numel = d == 0 ? 0 : std::min<int64_t>(numel * d, int64_t{1} << 50);
  MT_INPUT_CHECK(numel <= t.storage_numel, where, ": a view of ", numel,
                 " elements over a storage of ", t.storage_numel, " (overlapping strides)");
  return t;
}

Tensor TorchFile::tensor(const PickleValue& v, const std::string& what) {
  const TorchTensorRef t = tensor_ref(v, what);
  const ZipArchive::Entry* entry = zip_.find_suffix("data/" + t.storage);
  MT_INPUT_CHECK(entry != nullptr, path(), ": ", what, ": storage '", t.storage, "' missing");
  const auto size = static_cast<int64_t>(dtype_size(t.dtype));
  MT_INPUT_CHECK(static_cast<int64_t>(entry->size) == t.storage_numel * size, path(), ": ", what,
                 ": storage '", t.storage, "' has ", entry->size, " bytes, its id says ",
                 t.storage_numel, " elements of ", dtype_name(t.dtype));
  Tensor out = Tensor::empty(Shape(t.shape.begin(), t.shape.end()), t.dtype);
  const int64_t n = out.numel(), rank = static_cast<int64_t>(t.shape.size());
  auto* dst = static_cast<uint8_t*>(out.raw());
  int64_t dense = 1;  // row-major strides: one copy
  bool contiguous = true;
  for (int64_t d = rank - 1; d >= 0; --d) {
    const auto du = static_cast<size_t>(d);
    contiguous = contiguous && (t.shape[du] == 1 || t.stride[du] == dense);
    dense *= t.shape[du];
  }
  // The whole storage as the tensor (what a saved weight is): read straight into it.
  if (contiguous && t.offset == 0 && n == t.storage_numel) {
    zip_.read_into(*entry, dst);  // its CRC-32 checked
    return out;
  }
  const std::vector<uint8_t> storage = zip_.read(*entry);  // whole: its CRC-32 is checked
  if (contiguous) {
    if (n > 0) std::memcpy(dst, storage.data() + t.offset * size, static_cast<size_t>(n * size));
    return out;
  }
  // A strided view: gathered element by element in row-major order.
  std::vector<int64_t> index(static_cast<size_t>(rank), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t at = t.offset;
    for (int64_t d = 0; d < rank; ++d)
      at += index[static_cast<size_t>(d)] * t.stride[static_cast<size_t>(d)];
    std::memcpy(dst + i * size, storage.data() + at * size, static_cast<size_t>(size));
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++index[static_cast<size_t>(d)] < t.shape[static_cast<size_t>(d)]) break;
      index[static_cast<size_t>(d)] = 0;
    }
  }
  return out;
}

}  // namespace megatron::checkpoint
