// Declarations of the MSCCL++ 0.9.0 API that the generated selector uses (include/mscclpp/algorithm.hpp).
#ifndef COLLSYNTH_STUB_MSCCLPP_ALGORITHM_HPP_
#define COLLSYNTH_STUB_MSCCLPP_ALGORITHM_HPP_
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mscclpp/executor.hpp>
#include <string>
#include <unordered_map>
#include <vector>

namespace mscclpp {
enum class CollectiveBufferMode { Any = 0, InPlace, OutOfPlace };

class Algorithm {
 public:
  struct Constraint {
    int worldSize;
    int nRanksPerNode;
  };
  virtual ~Algorithm() = default;
};

class AlgorithmBuilder {
 public:
  virtual ~AlgorithmBuilder() = default;
  virtual std::shared_ptr<Algorithm> build() = 0;
};

class DslAlgorithm : public Algorithm, public AlgorithmBuilder, public std::enable_shared_from_this<DslAlgorithm> {
 public:
  DslAlgorithm(std::string id, ExecutionPlan plan, std::unordered_map<std::string, uint64_t> tags = {},
               Constraint constraint = {});
  std::shared_ptr<Algorithm> build() override;
};

struct CollectiveRequest {
  int worldSize;
  int nRanksPerNode;
  int rank;
  const void* inputBuffer;
  void* outputBuffer;
  size_t messageSize;
  void* stream;
  const std::string& collective;
  CollectiveBufferMode bufferMode() const;
};

using AlgoSelectFunc = std::function<std::shared_ptr<Algorithm>(
    const std::unordered_map<std::string, std::unordered_map<std::string, std::shared_ptr<Algorithm>>>&
        algoMapByCollective,
    const CollectiveRequest& request)>;
}  // namespace mscclpp
#endif
