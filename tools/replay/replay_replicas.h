// `cachepawl replay --remote SEEDS --replicas N`: N engine replicas behind a round-robin router,
// each a store process of its own, all sharing one remote tier. Runs this program N times at
// once (`replay ... --replica I/N --json`), waits for all, and reports each replica's hits by
// tier (remote hits are what the others saved) and the remote tier's counters.
//
// Thread safety: called once, from the command's thread. Children inherit stderr (their progress
// lines); their stdout goes to files in a temporary folder, removed afterwards.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace cachepawl::tools {

// `self`: this program's path; `args`: the replay's arguments without --replicas. Prints a table
// (or, with `json`, one object {"ok", "replicas": [each replica's report]}) to `out`, errors to
// `err`. Returns 0 when every replica exited 0, 1 when one found something wrong, 2 when one
// could not start or refused its arguments.
// Runs this program `shares` times at once (`replay ARGS --replica I/N --json`), waits for all,
// and puts each one's JSON report (null when it printed none) in *reports. Returns as
// RunReplicas. `what` names the flag in messages (--replicas, --processes).
int RunReplayShares(const std::string& self, const std::vector<std::string>& args, uint32_t shares,
                    const char* what, std::ostream& err, nlohmann::json* reports);

int RunReplicas(const std::string& self, const std::vector<std::string>& args, uint32_t replicas,
                bool json, std::ostream& out, std::ostream& err);

}  // namespace cachepawl::tools
