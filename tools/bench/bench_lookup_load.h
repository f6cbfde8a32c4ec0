// LookupLoad: another process that attaches to an owner and looks up a 2,048-page prompt of its
// own without pause (`cachepawl bench store --lookup-load SOCKET`), so that `bench store
// --processes N` measures its lookups while N - 1 other engine processes look up too. Start
// returns once the process is attached and looking up; the destructor SIGKILLs and reaps it.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "vocab/status.h"

namespace cachepawl::tools::bench_store {

class LookupLoad {
 public:
  static StatusOr<std::unique_ptr<LookupLoad>> Start(const std::string& self,
                                                     const std::string& socket);
  ~LookupLoad();
  LookupLoad(const LookupLoad&) = delete;
  LookupLoad& operator=(const LookupLoad&) = delete;

 private:
  LookupLoad() = default;
  pid_t pid_ = -1;
};

// The load process's body: attaches to `socket`, looks up until the owner goes (exit 0) or it is
// killed. Prints "looking up" once attached. Returns the exit code.
int RunLookupLoad(const std::string& socket);

}  // namespace cachepawl::tools::bench_store
