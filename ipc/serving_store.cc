// Store::Serve: an owner store (StoreImpl over a host arena in shared memory) with its server
// (ipc/store_server.h). Every call of this process goes straight to the store; Close stops the
// server first (the attached processes' next calls fail with Unavailable), then closes the store.
#include <memory>

#include "ipc/store_server.h"
#include "layouts/layout_presets.h"
#include "store/store_impl.h"

namespace cachepawl {

namespace {

class ServingStore final : public Store {
 public:
  ServingStore(std::unique_ptr<Store> store, std::unique_ptr<ipc::StoreServer> server)
      : store_(std::move(store)), server_(std::move(server)) {}
  ~ServingStore() override { (void)Close(); }

  const ModelLayout& layout() const override { return store_->layout(); }
  bool gpu_mode() const override { return store_->gpu_mode(); }
  std::vector<PageHash> HashTokens(std::string_view ns,
                                   std::span<const uint32_t> tokens) const override {
    return store_->HashTokens(ns, tokens);
  }
  StatusOr<PrefixMatch> Lookup(std::string_view ns, std::span<const uint32_t> tokens) override {
    return store_->Lookup(ns, tokens);
  }
  StatusOr<PrefixMatch> LookupHashes(std::span<const PageHash> hashes) override {
    return store_->LookupHashes(hashes);
  }
  StatusOr<PrefixLock> Lock(const PrefixMatch& match, size_t pages) override {
    return store_->Lock(match, pages);
  }
  Status Unlock(PrefixLock& lock) override { return store_->Unlock(lock); }
  StatusOr<Fence> Load(const PrefixMatch& match, std::span<const uint64_t> device_pages,
                       std::optional<uint64_t> device_state_slot,
                       const LoadOptions& opts) override {
    return store_->Load(match, device_pages, device_state_slot, opts);
  }
  StatusOr<std::shared_ptr<Prefetch>> StartPrefetch(const PrefixMatch& match) override {
    return store_->StartPrefetch(match);
  }
  StatusOr<Fence> Save(const SaveRequest& request) override { return store_->Save(request); }
  Status RegisterDevicePool(const DevicePoolDescription& pool) override {
    return store_->RegisterDevicePool(pool);
  }
  Status UnregisterDevicePool() override { return store_->UnregisterDevicePool(); }
  StatusOr<uint64_t> AllocateDeviceSlot(Kind kind) override {
    return store_->AllocateDeviceSlot(kind);
  }
  Status FreeDeviceSlot(Kind kind, uint64_t slot) override {
    return store_->FreeDeviceSlot(kind, slot);
  }
  Status WriteDeviceRecord(Kind kind, uint64_t slot, std::span<const std::byte> record) override {
    return store_->WriteDeviceRecord(kind, slot, record);
  }
  Status ReadDeviceRecord(Kind kind, uint64_t slot, std::span<std::byte> record) override {
    return store_->ReadDeviceRecord(kind, slot, record);
  }
  StoreStats Stats() const override {
    StoreStats st = store_->Stats();
    st.serve = server_->stats();
    return st;
  }
  Status Close() override {
    server_->Stop();
    return store_->Close();
  }

 private:
  std::unique_ptr<Store> store_;
  std::unique_ptr<ipc::StoreServer> server_;
};

}  // namespace

StatusOr<std::unique_ptr<Store>> Store::Serve(const StoreOptions& options,
                                              const ServeOptions& serve) {
  CACHEPAWL_RETURN_IF_ERROR(serve.Validate());
  CACHEPAWL_ASSIGN_OR_RETURN(std::unique_ptr<Store> store,
                             StoreImpl::Open(options, {}, /*host_shared=*/true));
  auto server = ipc::StoreServer::Start(static_cast<StoreImpl*>(store.get()), serve);
  if (!server.ok()) return server.status();
  return std::unique_ptr<Store>(
      std::make_unique<ServingStore>(std::move(store), std::move(server).value()));
}

}  // namespace cachepawl
