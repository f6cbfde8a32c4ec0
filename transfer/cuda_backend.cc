// The CUDA backend of the transfer engine (see transfer/transfer_engine.h for the data path).
#include "transfer/transfer_backend.h"
#include "transfer/transfer_engine.h"

namespace cachepawl::internal {

StatusOr<std::unique_ptr<TransferBackend>> MakeCudaBackend(const RecordMap* const maps[kNumKinds],
                                                           const TransferEngineOptions& options,
                                                           int device) {
  (void)maps;
  (void)options;
  (void)device;
  return Status::Unavailable("transfer engine: the CUDA backend is not built yet");
}

}  // namespace cachepawl::internal
