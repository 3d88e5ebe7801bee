// The informer at the scale it is designed for: 50,000 pods shaped like the
// dispatcher's workers, against the in-process API server
// (kube_test_server.h). Checks the counts at every step and prints the
// time and memory it took.
#include <malloc.h>

#include <cstdint>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "services/dispatcher/adapters/kubernetes/kube_client.h"
#include "services/dispatcher/adapters/kubernetes/kube_test_server.h"
#include "services/dispatcher/adapters/kubernetes/kube_watch.h"

namespace trainyard::dispatcher::kubernetes {
namespace {

using kubetest::FakeApiServer;
using kubetest::kPods;
using json = nlohmann::json;

// Bytes malloc has handed out and not taken back.
int64_t HeapInUse() { return static_cast<int64_t>(mallinfo2().uordblks); }

TEST(InformerScaleTest, FiftyThousandPodsSyncRelistAndFollow) {
  constexpr int kPodCount = 50000;
  FakeApiServer server;
  server.PutMany(kPodCount, "w");
  KubeClient client(KubeConfig{.server = server.url()},
                    {.cluster = "scale", .qps = 0});
  int64_t events = 0;
  absl::Mutex mu;
  Informer informer(&client, kPods,
                    {.page_size = 500,
                     .initial_backoff = absl::Milliseconds(10),
                     .max_backoff = absl::Milliseconds(50)},
                    [&](EventType, const json&) {
                      absl::MutexLock l(&mu);
                      ++events;
                    });
  const int64_t heap_before = HeapInUse();
  absl::Time start = absl::Now();
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(120)));
  const absl::Duration sync = absl::Now() - start;
  EXPECT_EQ(informer.size(), static_cast<size_t>(kPodCount));
  EXPECT_EQ(events, kPodCount);
  ASSERT_TRUE(server.WaitFor([&] { return server.watches().size() == 1; }));
  const int64_t heap_synced = HeapInUse();
  // The share of parsing: the same objects as one JSON list, parsed.
  std::string all = "[";
  for (const ObjectPtr& pod : informer.Snapshot()) {
    all += pod->dump();
    all += ',';
  }
  all.back() = ']';
  const size_t json_bytes = all.size();
  const absl::Time parse_start = absl::Now();
  const json parsed = json::parse(all);
  const absl::Duration parse = absl::Now() - parse_start;
  EXPECT_EQ(parsed.size(), static_cast<size_t>(kPodCount));

  // 1000 changes through the watch.
  start = absl::Now();
  for (int i = 0; i < 1000; ++i) server.Put(absl::StrCat("w", i), "Succeeded");
  ASSERT_TRUE(server.WaitFor(
      [&] {
        absl::MutexLock l(&mu);
        return events == kPodCount + 1000;
      },
      absl::Seconds(60)));
  const absl::Duration follow = absl::Now() - start;

  // Expired: 10 changed, 5 gone, 5 new behind its back; the re-list
  // delivers those 20 and nothing else.
  for (int i = 2000; i < 2010; ++i)
    server.Put(absl::StrCat("w", i), "Failed", true);
  for (int i = 3000; i < 3005; ++i) server.Remove(absl::StrCat("w", i), true);
  for (int i = 0; i < 5; ++i)
    server.Put(absl::StrCat("new", i), "Pending", true);
  start = absl::Now();
  server.Compact(/*error_event_on_live_watch=*/true);
  ASSERT_TRUE(server.WaitFor([&] { return informer.counters().relists == 1; },
                             absl::Seconds(120)));
  const absl::Duration relist = absl::Now() - start;
  informer.Stop();
  {
    absl::MutexLock l(&mu);
    EXPECT_EQ(events, kPodCount + 1000 + 20);
  }
  EXPECT_EQ(informer.size(), static_cast<size_t>(kPodCount));
  std::cout << "informer, " << kPodCount << " pods: sync " << sync << ", heap +"
            << (heap_synced - heap_before) / (1 << 20) << " MiB for "
            << json_bytes / (1 << 20)
            << " MiB of JSON (parsing it at once: " << parse
            << "); 1000 watch events " << follow
            << "; re-list with 20 differences " << relist << "\n";
}

}  // namespace
}  // namespace trainyard::dispatcher::kubernetes
