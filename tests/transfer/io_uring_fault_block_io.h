// A BlockIo wrapper that injects faults into chosen requests (the disk tier's fault seam):
// errors (EIO, ENOSPC...), short reads and writes, torn writes (only the first N bytes land but
// the write reports success), bytes flipped after a read, and requests held until released.
#pragma once

#include <cerrno>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "transfer/block_io.h"

namespace cachepawl::testing {

class FaultInjectingBlockIo final : public BlockIo {
 public:
  enum class Action {
    kError,  // complete with -err, nothing moves
    kShort,  // only `bytes` move; the result says so
    kTorn,   // writes: only `bytes` move, the result claims the full length
    kFlip,   // reads: after the read, flip the byte at `bytes` in the buffer
    kHold,   // keep the request until Release()
  };
  struct Rule {
    BlockIoOp op = BlockIoOp::kRead;
    Action action = Action::kError;
    int err = EIO;
    uint32_t bytes = 0;
    uint64_t skip = 0;   // matching requests let through before the rule applies
    uint64_t times = 1;  // requests it applies to, then it is spent
  };

  explicit FaultInjectingBlockIo(std::unique_ptr<BlockIo> inner) : inner_(std::move(inner)) {
    inner_->SetCompletionHandler([this](std::span<const BlockIoCompletion> c) { OnInner(c); });
  }
  ~FaultInjectingBlockIo() override { Shutdown(); }

  void AddRule(const Rule& r) {
    std::lock_guard<std::mutex> lock(mu_);
    rules_.push_back(r);
  }
  // Lets every held request go.
  void Release() {
    std::vector<BlockIoRequest> held;
    {
      std::lock_guard<std::mutex> lock(mu_);
      held.swap(held_);
    }
    inner_->Submit(held);
  }
  size_t held() const {
    std::lock_guard<std::mutex> lock(mu_);
    return held_.size();
  }
  uint64_t injected() const {
    std::lock_guard<std::mutex> lock(mu_);
    return injected_;
  }

  void SetCompletionHandler(CompletionHandler handler) override {
    std::lock_guard<std::mutex> lock(mu_);
    handler_ = std::move(handler);
  }
  Status RegisterBuffers(std::span<const std::span<std::byte>> regions) override {
    return inner_->RegisterBuffers(regions);
  }
  void Submit(std::span<const BlockIoRequest> requests) override {
    std::vector<BlockIoRequest> pass;
    std::vector<BlockIoCompletion> failed;
    CompletionHandler handler;
    {
      std::lock_guard<std::mutex> lock(mu_);
      handler = handler_;
      for (BlockIoRequest r : requests) {
        Rule* rule = Match(r);
        if (rule == nullptr) {
          pass.push_back(r);
          continue;
        }
        ++injected_;
        switch (rule->action) {
          case Action::kError:
            failed.push_back({r.tag, -rule->err});
            continue;
          case Action::kShort:
            r.len = std::min(r.len, rule->bytes);
            break;
          case Action::kTorn:
            overrides_[r.tag] = Override{r.len, nullptr};
            r.len = std::min(r.len, rule->bytes);
            break;
          case Action::kFlip:
            overrides_[r.tag] = Override{0, r.buf + rule->bytes};
            break;
          case Action::kHold:
            held_.push_back(r);
            continue;
        }
        if (r.len == 0) {  // nothing lands (a torn write still claims success)
          const auto o = overrides_.find(r.tag);
          failed.push_back({r.tag, o == overrides_.end() ? 0 : o->second.claim_len});
          if (o != overrides_.end()) overrides_.erase(o);
          continue;
        }
        pass.push_back(r);
      }
    }
    if (!failed.empty()) handler(failed);
    if (!pass.empty()) inner_->Submit(pass);
  }
  void Shutdown() override {
    Release();
    inner_->Shutdown();
  }
  size_t pending() const override { return inner_->pending() + held(); }

 private:
  struct Override {
    uint32_t claim_len = 0;     // torn: the length to report
    std::byte* flip = nullptr;  // flip: the byte to flip after the read
  };

  Rule* Match(const BlockIoRequest& r) {
    for (Rule& rule : rules_) {
      if (rule.op != r.op || rule.times == 0) continue;
      if (rule.skip > 0) {
        --rule.skip;
        continue;
      }
      --rule.times;
      return &rule;
    }
    return nullptr;
  }

  void OnInner(std::span<const BlockIoCompletion> completions) {
    std::vector<BlockIoCompletion> out(completions.begin(), completions.end());
    CompletionHandler handler;
    {
      std::lock_guard<std::mutex> lock(mu_);
      handler = handler_;
      for (BlockIoCompletion& c : out) {
        auto it = overrides_.find(c.tag);
        if (it == overrides_.end()) continue;
        if (c.result >= 0 && it->second.claim_len != 0) c.result = it->second.claim_len;
        if (c.result > 0 && it->second.flip != nullptr) *it->second.flip ^= std::byte{0x20};
        overrides_.erase(it);
      }
    }
    handler(out);
  }

  std::unique_ptr<BlockIo> inner_;
  mutable std::mutex mu_;
  CompletionHandler handler_;                         // guarded by mu_
  std::vector<Rule> rules_;                           // guarded by mu_
  std::vector<BlockIoRequest> held_;                  // guarded by mu_
  std::unordered_map<uint64_t, Override> overrides_;  // guarded by mu_
  uint64_t injected_ = 0;                             // guarded by mu_
};

}  // namespace cachepawl::testing
