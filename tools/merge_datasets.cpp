// merge_datasets: concatenate several Megatron indexed datasets (same dtype) into one, in the
// order given. Exit codes: 0 ok, 1 bad input, 2 usage.
#include <iostream>

#include "data/cli.h"
#include "data/indexed_dataset.h"
#include "megatron/core/error.h"

namespace {

constexpr const char* kUsage =
    R"(usage: merge_datasets --input PREFIX [PREFIX ...] --output-prefix OUT

Writes OUT.bin/.idx holding every document of the input datasets (PREFIX.bin/.idx), in order.
All inputs must have the same token dtype.
)";

}  // namespace

int main(int argc, char** argv) {
  using megatron::data::cli::Arity;
  return megatron::data::cli::run_tool("merge_datasets", kUsage, [&]() -> int {
    const megatron::data::cli::Args args(argc, argv,
                                         {{"input", Arity::Many}, {"output-prefix", Arity::One}});
    if (args.help()) {
      std::cout << kUsage;
      return 0;
    }
    if (!args.has("input"))
      throw megatron::data::cli::UsageError("missing required flag '--input'");
    const std::string out = args.required("output-prefix");
    const auto& inputs = args.values("input");
    for (const auto& in : inputs)
      if (in == out)
        throw megatron::InputError("merge_datasets: output prefix '" + out + "' is also an input");
    std::unique_ptr<megatron::data::IndexedDatasetWriter> writer;
    for (const auto& in : inputs) {
      const megatron::data::IndexedDataset ds(in);
      if (!writer) writer = std::make_unique<megatron::data::IndexedDatasetWriter>(out, ds.dtype());
      writer->add_index(ds);
      std::cerr << "merge_datasets: added " << in << " (" << ds.num_documents() << " documents, "
                << ds.num_tokens() << " tokens)\n";
    }
    writer->finalize();
    std::cerr << "merge_datasets: wrote " << out << ".{bin,idx}: " << writer->num_documents()
              << " documents, " << writer->num_sequences() << " sequences, " << writer->num_tokens()
              << " tokens\n";
    return 0;
  });
}
