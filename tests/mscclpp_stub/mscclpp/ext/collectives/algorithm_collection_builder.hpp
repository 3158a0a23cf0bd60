// Declarations of the MSCCL++ 0.9.0 API that the generated selector uses
// (include/mscclpp/ext/collectives/algorithm_collection_builder.hpp).
#ifndef COLLSYNTH_STUB_MSCCLPP_ALGORITHM_COLLECTION_BUILDER_HPP_
#define COLLSYNTH_STUB_MSCCLPP_ALGORITHM_COLLECTION_BUILDER_HPP_
#include <memory>
#include <mscclpp/algorithm.hpp>

namespace mscclpp {
namespace collective {
class AlgorithmCollectionBuilder {
 public:
  static std::shared_ptr<AlgorithmCollectionBuilder> getInstance();
  void addAlgorithmBuilder(std::shared_ptr<AlgorithmBuilder> builder);
  void setAlgorithmSelector(AlgoSelectFunc selector);
};
}  // namespace collective
}  // namespace mscclpp
#endif
