#include "megatron/parallel/communicator.h"

#include <cstring>

namespace megatron::parallel {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
  }
  return "?";
}

void check_reduce_dtype(DType dtype, ReduceOp op, std::string_view where) {
  MT_CHECK(op != ReduceOp::Avg || dtype_is_float(dtype), where,
           ": avg-reduction needs a floating dtype, got ", dtype_name(dtype),
           " (use sum and divide yourself)");
}

std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& mine,
                                            const char* what, int64_t width) {
  MT_INPUT_CHECK(static_cast<int64_t>(mine.size()) < width, what, " '", mine, "' longer than ",
                 width - 1, " bytes");
  Tensor record = Tensor::zeros(Shape{width}, DType::U8);
  std::memcpy(record.raw(), mine.data(), mine.size());
  Tensor all = Tensor::zeros(Shape{width * comm.size()}, DType::U8);
  comm.all_gather(record, all);
  std::vector<std::string> out;
  for (int r = 0; r < comm.size(); ++r)
    out.emplace_back(static_cast<const char*>(all.raw()) + r * width);
  return out;
}

}  // namespace megatron::parallel
