#include "megatron/parallel/communicator.h"

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

}  // namespace megatron::parallel
