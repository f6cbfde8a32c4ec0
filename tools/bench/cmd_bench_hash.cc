// cachepawl bench hash [--tokens N] [--page-size P] [--json] [--min-time S]
//
// Google Benchmark of the page hash chain over N-token prompts (default 32K, page 16), against
// raw OpenSSL SHA-256 over exactly the same messages in the same run:
//   ours        PageHasher::HashTokens
//   raw_chain   EVP_DigestInit_ex2/Update/Final per page with one context and a digest fetched
//               once: the same bytes, the least work OpenSSL allows for a chained hash
//   raw_bulk    one SHA-256 over the prompt's token bytes (no chaining; the compression-function
//               limit, for scale)
// Prints ours/raw_chain (goal >= 0.90) and ours/raw_bulk as throughput ratios.
#include <benchmark/benchmark.h>
#include <openssl/evp.h>

#include <CLI/CLI.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "index/page_hasher.h"
#include "tools/cli_args.h"
#include "tools/command.h"

namespace cachepawl::tools {
namespace {

class CollectingReporter final : public benchmark::ConsoleReporter {
 public:
  explicit CollectingReporter(bool quiet) : quiet_(quiet) {}
  bool ReportContext(const Context& context) override {
    return quiet_ ? true : ConsoleReporter::ReportContext(context);
  }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration || r.error_occurred) continue;
      ns_per_iter_[r.run_name.function_name] = r.GetAdjustedRealTime();  // in ns (kNanosecond)
    }
    if (!quiet_) ConsoleReporter::ReportRuns(runs);
  }
  const std::map<std::string, double>& ns_per_iter() const { return ns_per_iter_; }

 private:
  bool quiet_;
  std::map<std::string, double> ns_per_iter_;
};

int RunBenchHash(const std::vector<std::string>& args, CommandIo& io) {
  CLI::App app{"Benchmarks the page hash chain against raw OpenSSL SHA-256 on the same bytes.",
               "cachepawl bench hash"};
  uint32_t tokens = 32768;
  uint32_t page_size = 16;
  double min_time = 0.5;
  bool json = false;
  app.add_option("--tokens", tokens, "tokens per prompt (default 32768)")
      ->check(CLI::Range(1u, 1u << 26));
  app.add_option("--page-size", page_size, "tokens per page (default 16)")
      ->check(CLI::Range(1u, 1u << 20));
  app.add_option("--min-time", min_time, "seconds per benchmark (default 0.5)")
      ->check(CLI::Range(0.01, 60.0));
  app.add_flag("--json", json, "print one JSON object instead of the table");
  if (auto exit = ParseArgs(app, args, io)) return *exit;
  auto hasher_or = PageHasher::Create(page_size);
  if (!hasher_or.ok()) {
    io.err << "cachepawl bench hash: " << hasher_or.status().ToString() << "\n";
    return kExitUsage;
  }
  const PageHasher& hasher = *hasher_or;
  std::vector<uint32_t> prompt(tokens);
  std::mt19937 rng(42);
  for (auto& t : prompt) t = rng() % 151936;  // a real vocabulary's range
  const size_t pages = tokens / page_size;
  const size_t page_bytes = static_cast<size_t>(page_size) * 4;

  EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (md == nullptr || ctx == nullptr) {
    io.err << "cachepawl bench hash: OpenSSL has no SHA-256\n";
    return kExitFailure;
  }
  // The same chain computed the raw way, to check ours against it before timing anything.
  auto raw_chain = [&](std::vector<PageHash>* out) {
    out->clear();
    unsigned int len = 0;
    for (size_t i = 0; i < pages; ++i) {
      PageHash h;
      EVP_DigestInit_ex2(ctx, md, nullptr);
      if (i > 0) EVP_DigestUpdate(ctx, out->back().bytes.data(), 32);
      EVP_DigestUpdate(ctx, prompt.data() + i * page_size, page_bytes);
      EVP_DigestFinal_ex(ctx, h.bytes.data(), &len);
      out->push_back(h);
    }
  };
  std::vector<PageHash> check;
  raw_chain(&check);
  if (check != hasher.HashTokens("", prompt)) {
    io.err << "cachepawl bench hash: PageHasher disagrees with raw OpenSSL: not timing it\n";
    return kExitFailure;
  }

  benchmark::ClearRegisteredBenchmarks();
  const int64_t bytes_per_iter = static_cast<int64_t>(pages * page_bytes);
  benchmark::RegisterBenchmark("ours", [&](benchmark::State& st) {
    for (auto _ : st) {
      auto h = hasher.HashTokens("", prompt);
      benchmark::DoNotOptimize(h.data());
    }
    st.SetBytesProcessed(st.iterations() * bytes_per_iter);
  })->MinTime(min_time);
  benchmark::RegisterBenchmark("raw_chain", [&](benchmark::State& st) {
    std::vector<PageHash> out;
    out.reserve(pages);
    for (auto _ : st) {
      raw_chain(&out);
      benchmark::DoNotOptimize(out.data());
    }
    st.SetBytesProcessed(st.iterations() * bytes_per_iter);
  })->MinTime(min_time);
  benchmark::RegisterBenchmark("raw_bulk", [&](benchmark::State& st) {
    PageHash h;
    unsigned int len = 0;
    for (auto _ : st) {
      EVP_Digest(prompt.data(), pages * page_bytes, h.bytes.data(), &len, md, nullptr);
      benchmark::DoNotOptimize(h.bytes.data());
    }
    st.SetBytesProcessed(st.iterations() * bytes_per_iter);
  })->MinTime(min_time);

  CollectingReporter reporter(json);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::ClearRegisteredBenchmarks();
  EVP_MD_CTX_free(ctx);
  EVP_MD_free(md);

  const auto& t = reporter.ns_per_iter();
  if (!t.count("ours") || !t.count("raw_chain") || !t.count("raw_bulk")) {
    io.err << "cachepawl bench hash: a benchmark did not report\n";
    return kExitFailure;
  }
  const double ours = t.at("ours"), chain = t.at("raw_chain"), bulk = t.at("raw_bulk");
  const double ns_per_page = ours / static_cast<double>(pages);
  nlohmann::json j = {
      {"tokens", tokens},
      {"page_size", page_size},
      {"pages", pages},
      {"ours_us_per_prompt", ours / 1e3},
      {"raw_chain_us_per_prompt", chain / 1e3},
      {"raw_bulk_us_per_prompt", bulk / 1e3},
      {"ours_ns_per_page", ns_per_page},
      {"ours_pages_per_second", 1e9 / ns_per_page},
      {"ratio_ours_to_raw_chain", chain / ours},
      {"ratio_ours_to_raw_bulk", bulk / ours},
  };
  if (json) {
    io.out << j.dump(2) << "\n";
  } else {
    io.out << "\nprompt " << tokens << " tokens, " << pages << " pages of " << page_size
           << "\n  ours " << ns_per_page << " ns/page (" << 1e9 / ns_per_page / 1e6
           << " M pages/s)\n  ours / raw_chain throughput: " << chain / ours
           << " (goal >= 0.90)\n  ours / raw_bulk throughput:  " << bulk / ours << "\n";
  }
  return kExitOk;
}

const CommandRegistration kRegistration("bench hash",
                                        "benchmark page hashing against raw OpenSSL SHA-256",
                                        &RunBenchHash);

}  // namespace
}  // namespace cachepawl::tools
