// Declarations of the MSCCL++ 0.9.0 API that the generated selector uses (include/mscclpp/executor.hpp),
// written from the documented interface so that the tests can compile the selector without MSCCL++.
#ifndef COLLSYNTH_STUB_MSCCLPP_EXECUTOR_HPP_
#define COLLSYNTH_STUB_MSCCLPP_EXECUTOR_HPP_
#include <string>

namespace mscclpp {
class ExecutionPlan {
 public:
  ExecutionPlan(const std::string& planPath, int rank);
  const std::string& name() const;
};
}  // namespace mscclpp
#endif
