// torch.save archives and pickles written here (megatron/checkpoint/torch_save.h,
// pickle_writer.h) read back through the restricted unpickler and the zip reader: plain values,
// tensors with their shapes and bytes, two archives in one file at their offsets. (That PyTorch
// loads them is checked by tools/check_megatron_export.py, run by hand.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "megatron/checkpoint/pickle.h"
#include "megatron/checkpoint/pickle_writer.h"
#include "megatron/checkpoint/torch_file.h"
#include "megatron/checkpoint/torch_save.h"

namespace {

using namespace megatron;
using namespace megatron::checkpoint;
namespace fs = std::filesystem;
using Kind = PickleValue::Kind;

TEST(PickleWriter, PlainValuesReadBack) {
  const Py v = Py::dictionary(
      {{Py::str("i"), Py::integer_value(-7)},
       {Py::str("big"), Py::integer_value(int64_t{1} << 40)},
       {Py::str("neg"), Py::integer_value(-(int64_t{1} << 40))},
       {Py::str("f"), Py::real_value(0.25)},
       {Py::str("t"), Py::tuple({Py::boolean_value(true), Py::none(), Py::str("é")})},
       {Py::str("l"), Py::list({Py::integer_value(1), Py::integer_value(2)})},
       {Py::str("ns"),
        Py::new_object("argparse", "Namespace",
                       Py::dictionary({{Py::str("hidden_size"), Py::integer_value(32)}}))}});
  const std::string bytes = write_pickle(v);
  const PickleRef r =
      read_pickle({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "x.pkl");
  ASSERT_TRUE(r->is(Kind::Dict));
  EXPECT_EQ(r->get("i")->integer, -7);
  EXPECT_EQ(r->get("big")->integer, int64_t{1} << 40);
  EXPECT_EQ(r->get("neg")->integer, -(int64_t{1} << 40));
  EXPECT_EQ(r->get("f")->real, 0.25);
  EXPECT_TRUE(r->get("t")->items[0]->boolean);
  EXPECT_TRUE(r->get("t")->items[1]->is(Kind::None));
  EXPECT_EQ(r->get("t")->items[2]->text, "é");
  EXPECT_EQ(r->get("l")->items.size(), 2u);
  const PickleValue* ns = r->get("ns");
  EXPECT_EQ(ns->text, "argparse.Namespace");
  EXPECT_EQ(ns->state->get("hidden_size")->integer, 32);
}

TEST(TorchSave, ArchivesReadBackAtTheirOffsets) {
  const fs::path path = fs::temp_directory_path() / ("torch_save_" + std::to_string(getpid()));
  std::vector<uint64_t> starts, sizes;
  {
    std::ofstream out(path, std::ios::binary);
    for (int a = 0; a < 2; ++a) {
      starts.push_back(static_cast<uint64_t>(out.tellp()));
      TorchArchiveWriter w(out, "archive", path.string());
      const std::vector<float> x = {1, 2, 3, 4, 5, static_cast<float>(a)};
      w.write_pickle(write_pickle(
          Py::ordered_dict({{Py::str("w"), torch_tensor_reference(0, DType::F32, {2, 3})},
                            {Py::str("step"), Py::integer_value(a)}})));
      w.begin_storage(0, x.size() * 4);
      w.write(x.data(), 8);  // in two pieces
      w.write(x.data() + 2, 16);
      w.end_storage();
      sizes.push_back(w.finish());
    }
  }
  for (int a = 0; a < 2; ++a) {
    TorchFile f(path.string(), starts[a], sizes[a]);
    ASSERT_TRUE(f.root().is(Kind::Dict));
    EXPECT_EQ(f.root().get("step")->integer, a);
    const Tensor w = f.tensor(*f.root().get("w"), "w");
    EXPECT_EQ(w.shape(), (Shape{2, 3}));
    EXPECT_EQ(w.data<float>()[5], static_cast<float>(a));
    EXPECT_EQ(w.data<float>()[2], 3.0f);
  }
  fs::remove(path);
}

}  // namespace
