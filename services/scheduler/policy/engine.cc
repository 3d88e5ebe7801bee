#include "services/scheduler/policy/engine.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "services/scheduler/policy/placement.h"
#include "services/scheduler/policy/preemption.h"
#include "services/scheduler/policy/pricing.h"

namespace trainyard::scheduler::policy::internal {
namespace {

// The most workers of one shape a node may hold for the index to be used; a
// shape that fits more (tiny workers) is placed by PlaceGang instead.
constexpr int64_t kMaxIndexedWorkers = 64;

// Children per node of the heap of queue heads (4 measured no faster than 2
// in BM_SchedulerSteadyState).
constexpr size_t kHeapArity = 2;

struct HeadKey {
  // The leading keys packed into one integer, smallest first: whether the
  // job would borrow (PolicyConfig::nominal_before_borrowing; always 0
  // without it), then its negated priority, then not aged (0 = aged).
  uint64_t major;
  double share;
  TimeMicros submit_time;
  // Unique among heads: it decides every tie (the queue never has to).
  JobId job;
  QueueId queue;
  // Not compared: the job's class, so that what its attempt reads can be
  // prefetched from the heap alone.
  int32_t job_class;
  static uint64_t Major(bool borrows, int64_t neg_priority, bool not_aged) {
    // Priority values are 32-bit: neg_priority + 2^31 is in [1, 2^32].
    return (uint64_t{borrows} << 40) |
           (static_cast<uint64_t>(neg_priority + (int64_t{1} << 31)) << 1) |
           uint64_t{not_aged};
  }
  bool operator<(const HeadKey& o) const {
    if (major != o.major) return major < o.major;
    if (share < o.share) return true;
    if (o.share < share) return false;
    if (submit_time != o.submit_time) return submit_time < o.submit_time;
    return job < o.job;
  }
};

// Worker shape as placement sees it (the GPU model only matters with GPUs).
using ShapeKey = std::tuple<FlavorId, int64_t, GpuModelId, int64_t, int64_t>;

ShapeKey KeyOfShape(FlavorId f, const WorkerShape& w) {
  return {f, w.gpus, w.gpus > 0 ? w.gpu_model : kAnyGpuModel, w.cpu_millis,
          w.memory_bytes};
}

// Free-capacity index of one (flavor, worker shape): for every eligible node
// how many workers it holds (k), and per rack and for the flavor a histogram
// of k. PlaceGang's rule caps each node's k at the gang size, so a group's
// capacity for a gang of n is sum over k of hist[k] * min(k, n). Usable only
// when every eligible node is labelled with a rack and a block and every rack
// lies in one block (then grouping does not depend on which nodes are
// candidates), and no node holds more than kMaxIndexedWorkers workers.
class ShapeIndex {
 public:
  ShapeIndex(const Snapshot& s, const std::vector<Resources>& free,
             const std::vector<NodeId>& nodes, const WorkerShape& shape)
      : shape_(shape) {
    rack_of_node_.assign(s.nodes.size(), -1);
    k_of_node_.assign(s.nodes.size(), 0);
    absl::flat_hash_map<TopologyLabel, int> rack_slot, block_slot;
    // The slots of the last node's rack and block.
    TopologyLabel last_rack = kNoLabel, last_block = kNoLabel;
    int rack = -1, block = -1;
    for (NodeId id : nodes) {
      const Node& node = s.nodes[id];
      if (!node.schedulable) continue;
      if (shape.gpus > 0 && shape.gpu_model != kAnyGpuModel &&
          node.gpu_model != shape.gpu_model) {
        continue;
      }
      if (node.rack == kNoLabel || node.block == kNoLabel) {
        usable_ = false;
        return;
      }
      // One cluster only: choosing among clusters is PlaceGang's.
      if (cluster_ == kUnset) cluster_ = node.cluster;
      if (node.cluster != cluster_) {
        usable_ = false;
        return;
      }
      const int64_t k = WorkersThatFit(free[id], shape, kMaxIndexedWorkers + 1);
      if (k > kMaxIndexedWorkers) {
        usable_ = false;
        return;
      }
      // Nodes of a rack are usually consecutive: the last node's slots are
      // reused without hashing.
      if (node.block != last_block) {
        auto [bit, bnew] = block_slot.try_emplace(
            node.block, static_cast<int>(blocks_.size()));
        if (bnew) blocks_.push_back({.label = node.block});
        last_block = node.block;
        block = bit->second;
      }
      if (node.rack != last_rack) {
        auto [rit, rnew] =
            rack_slot.try_emplace(node.rack, static_cast<int>(racks_.size()));
        if (rnew) {
          racks_.push_back({.label = node.rack, .block = block});
          blocks_[block].racks.push_back(rit->second);
        }
        last_rack = node.rack;
        rack = rit->second;
      }
      if (racks_[rack].block != block) {
        usable_ = false;
        return;
      }
      racks_[rack].nodes.push_back(id);
      rack_of_node_[id] = rack;
      k_of_node_[id] = k;
    }
    for (NodeId id : nodes) {
      if (rack_of_node_[id] >= 0) max_k_ = std::max(max_k_, k_of_node_[id]);
    }
    // k never grows during a cycle, so max_k_ bounds every histogram.
    total_hist_.assign(max_k_ + 1, 0);
    for (Block& block : blocks_) block.hist.assign(max_k_ + 1, 0);
    for (Rack& rack : racks_) {
      rack.hist.assign(max_k_ + 1, 0);
      for (NodeId id : rack.nodes) {
        ++rack.hist[k_of_node_[id]];
        ++blocks_[rack.block].hist[k_of_node_[id]];
        ++total_hist_[k_of_node_[id]];
      }
    }
  }

  bool usable() const { return usable_; }

  // Grows whenever a node's count of workers changes (and on Touch()): a
  // failed placement (its kind, capacity_workers, best_group_workers)
  // depends on the counts alone.
  uint64_t epoch() const { return epoch_; }
  void Touch() { ++epoch_; }
  // Dense among the engine's usable indexes (Engine::index_by_id_).
  int32_t id = -1;

  // Sum over the eligible nodes of the workers each holds, at most `cap` per
  // node (PlaceGang's capacity check).
  int64_t Workers(int64_t cap) const { return Capped(total_hist_, cap); }

  // Node `id`'s free resources changed (decreased) to `free`.
  void Update(NodeId id, const Resources& free) {
    const int r = rack_of_node_[id];
    if (r < 0) return;
    Move(id, r, WorkersThatFit(free, shape_, max_k_));
  }

  // Node `id`'s free resources are now `free`, more or less than before
  // (between cycles). Returns false if the index is no longer usable (the
  // node holds more than kMaxIndexedWorkers workers).
  bool Set(NodeId id, const Resources& free) {
    const int r = rack_of_node_[id];
    if (r < 0) return true;
    const int64_t k = WorkersThatFit(free, shape_, kMaxIndexedWorkers + 1);
    if (k > kMaxIndexedWorkers) {
      usable_ = false;
      return false;
    }
    if (k > max_k_) {
      max_k_ = k;
      total_hist_.resize(max_k_ + 1, 0);
      for (Rack& rack : racks_) rack.hist.resize(max_k_ + 1, 0);
      for (Block& block : blocks_) block.hist.resize(max_k_ + 1, 0);
    }
    Move(id, r, k);
    return true;
  }

 private:
  // Moves node `id` (of rack r) to the histograms' bucket k.
  void Move(NodeId id, int r, int64_t k) {
    const int64_t old = k_of_node_[id];
    if (k == old) return;
    const int b = racks_[r].block;
    --racks_[r].hist[old];
    --blocks_[b].hist[old];
    --total_hist_[old];
    ++racks_[r].hist[k];
    ++blocks_[b].hist[k];
    ++total_hist_[k];
    k_of_node_[id] = k;
    ++epoch_;
  }

 public:
  // Same result as PlaceGang(snapshot, free, ..., job) for a job of this
  // index's flavor and shape.
  PlacementResult Place(const std::vector<Resources>& free,
                        const PendingJob& job) const {
    // Called only with job.workers >= 1.
    PlacementResult result;
    const int64_t need = job.workers;
    const int64_t total = Capped(total_hist_, need);
    result.capacity_workers = std::min(total, need);
    if (total < need) {
      result.failure = PlacementFailure::kNoCapacity;
      return result;
    }
    const bool rack_level = job.required_topology == TopologyLevel::kRack;
    // Rack capacities are computed only where they are needed.
    std::vector<int64_t> rack_workers(racks_.size(), -1);
    if (rack_level) {
      for (size_t r = 0; r < racks_.size(); ++r)
        rack_workers[r] = Capped(racks_[r].hist, need);
    }
    std::vector<int64_t> block_workers(blocks_.size(), 0);
    for (size_t b = 0; b < blocks_.size(); ++b)
      block_workers[b] = Capped(blocks_[b].hist, need);
    std::vector<NodeId>& out = result.worker_nodes;
    if (job.required_topology == TopologyLevel::kRack ||
        job.required_topology == TopologyLevel::kBlock) {
      const std::vector<int64_t>& workers =
          rack_level ? rack_workers : block_workers;
      int best = -1;
      for (size_t g = 0; g < workers.size(); ++g) {
        if (workers[g] <= 0) continue;
        result.best_group_workers =
            std::max(result.best_group_workers, workers[g]);
        if (workers[g] < need) continue;
        if (best < 0 || workers[g] < workers[best] ||
            (workers[g] == workers[best] &&
             Label(rack_level, g) < Label(rack_level, best))) {
          best = static_cast<int>(g);
        }
      }
      result.best_group_workers = std::min(result.best_group_workers, need);
      if (best < 0) {
        result.failure = PlacementFailure::kNoFitTopology;
        return result;
      }
      if (rack_level) {
        PlaceOnNodes(free, best, need, need, out);
      } else {
        PlaceOnRacks(free, rack_workers, best, need, need, out);
      }
      std::sort(out.begin(), out.end());
      return result;
    }
    std::vector<int64_t> caps, tie;
    std::vector<int> items;
    for (size_t b = 0; b < blocks_.size(); ++b) {
      if (block_workers[b] <= 0) continue;
      items.push_back(static_cast<int>(b));
      caps.push_back(block_workers[b]);
      tie.push_back(blocks_[b].label);
    }
    for (const auto& [i, n] : ChooseFewest(caps, tie, need)) {
      PlaceOnRacks(free, rack_workers, items[i], n, need, out);
    }
    std::sort(out.begin(), out.end());
    return result;
  }

 private:
  struct Rack {
    TopologyLabel label;
    int block;
    std::vector<NodeId> nodes;  // Id order.
    std::vector<int32_t> hist;
  };
  struct Block {
    TopologyLabel label;
    std::vector<int> racks;
    std::vector<int32_t> hist;
  };

  static int64_t Capped(const std::vector<int32_t>& hist, int64_t cap) {
    int64_t sum = 0;
    for (size_t k = 1; k < hist.size(); ++k) {
      if (hist[k] != 0) sum += hist[k] * std::min<int64_t>(k, cap);
    }
    return sum;
  }

  int64_t Label(bool rack_level, size_t g) const {
    return rack_level ? racks_[g].label : blocks_[g].label;
  }

  void PlaceOnNodes(const std::vector<Resources>& free, int rack, int64_t n,
                    int64_t cap, std::vector<NodeId>& out) const {
    std::vector<int64_t> caps, tie;
    std::vector<NodeId> items;
    for (NodeId id : racks_[rack].nodes) {
      const int64_t k = std::min<int64_t>(k_of_node_[id], cap);
      if (k <= 0) continue;
      items.push_back(id);
      caps.push_back(k);
      tie.push_back(free[id].gpus);
    }
    for (const auto& [i, m] : ChooseFewest(caps, tie, n)) {
      for (int64_t w = 0; w < m; ++w) out.push_back(items[i]);
    }
  }

  void PlaceOnRacks(const std::vector<Resources>& free,
                    std::vector<int64_t>& rack_workers, int block, int64_t n,
                    int64_t cap, std::vector<NodeId>& out) const {
    std::vector<int64_t> caps, tie;
    std::vector<int> items;
    for (int r : blocks_[block].racks) {
      if (rack_workers[r] < 0) rack_workers[r] = Capped(racks_[r].hist, cap);
      if (rack_workers[r] <= 0) continue;
      items.push_back(r);
      caps.push_back(rack_workers[r]);
      tie.push_back(racks_[r].label);
    }
    for (const auto& [i, m] : ChooseFewest(caps, tie, n)) {
      PlaceOnNodes(free, items[i], m, cap, out);
    }
  }

  WorkerShape shape_;
  bool usable_ = true;
  static constexpr int64_t kUnset = INT64_MIN;
  int64_t cluster_ = kUnset;
  std::vector<Rack> racks_;
  std::vector<Block> blocks_;
  std::vector<int32_t> rack_of_node_;
  std::vector<int64_t> k_of_node_;
  std::vector<int32_t> total_hist_;
  // The most workers any eligible node held when the index was built.
  int64_t max_k_ = 0;
  uint64_t epoch_ = 0;
};

// Why one candidate flavor failed, compactly: an explanation's text is a
// function of the job's class and its details (Engine::AppendDetails).
struct Detail {
  enum Kind : uint8_t {
    kNoEligibleFlavor,
    kBudget,         // a: budget remaining, b: expected cost
    kQuota,          // a: usage, b: nominal, c: cohort lends
    kRebalancing,    // a: usage, b: nominal
    kHeld,           // a: usage, b: nominal, c: holding priority
    kNoFitCluster,   // a: best group's workers
    kNoFitTopology,  // a: best group's workers
    kNoCapacity,     // a: workers the free nodes hold
  };
  Kind kind = kNoEligibleFlavor;
  // For kRebalancing and kHeld: whether some resource exceeds the nominal
  // quota (the detail is empty otherwise).
  bool has_resource = true;
  // The resource (kQuota, kRebalancing, kHeld); the job needs
  // AsResources() * workers of it.
  uint8_t resource = 0;
  FlavorId flavor = 0;
  int64_t a = 0, b = 0, c = 0;
  friend bool operator==(const Detail&, const Detail&) = default;
};

// Details kept per class; an explanation with more is not kept.
constexpr size_t kKeptDetails = 4;

// Per class. What it got when it last failed in this cycle, and the state it
// saw: the quota epoch of the queue's cohort tree and the capacity epoch of
// each candidate flavor. And, across cycles, its last explanation with the
// details it was formatted from (a failure's reason and message are these).
// One record, so that a job's attempt reads one (prefetched) cache line.
struct alignas(64) ClassFailure {
  // The first cache line holds everything a job that reuses the failure
  // reads (ScanRun() included); the static_assert below keeps it so.
  // The cycle (Engine::cycle_) of its failure: valid in that cycle only.
  uint32_t cycle = 0;
  PendingReason reason = PendingReason::kNoCapacity;
  // Whether it went on to a reservation search (which failed); a job that
  // reuses the failure counts that search too, so that the search limit is
  // reached exactly as without the shortcut.
  bool searched = false;
  // The last explanation: `message` was formatted from `details`.
  bool text_valid = false;
  uint8_t num_details = 0;
  // For speculative runs (flavor ids below 32): the flavors whose capacity
  // its placements depended on (where no index says more), and those whose
  // quota state it read (its candidate flavors).
  uint32_t flavor_mask = 0;
  uint32_t quota_mask = 0;
  // The state it depended on when it failed (Engine::Stamp): the quota
  // epochs of its cohort tree on its candidate flavors, its budget's epoch,
  // and the capacity epochs of its candidate flavors, less those at
  // positions in `skip` (where it failed before placement: on budget or
  // quota).
  uint64_t stamp = 0;
  const std::vector<FlavorId>* flavors = nullptr;
  uint64_t skip = 0;
  // For speculative runs: the placement indexes (by id, below 64) whose
  // counts its placements depended on.
  uint64_t index_mask = 0;
  Message message;
  Detail details[kKeptDetails];
};
static_assert(offsetof(ClassFailure, message) + sizeof(Message) <= 64,
              "a reused failure is read from one cache line");

// Appends text pieces and integers to a string: explanations are formatted
// through a buffer on the stack, string literals with copies of known size,
// so that formatting one costs about 1,000 instructions instead of 1,700
// (a string::append() call per piece) or 2,000 (StrAppend()).
class Appender {
 public:
  explicit Appender(std::string& out) : out_(out) {}
  ~Appender() { Flush(); }
  Appender(const Appender&) = delete;
  Appender& operator=(const Appender&) = delete;

  template <size_t N>
  Appender& operator<<(const char (&literal)[N]) {
    Put(literal, N - 1);
    return *this;
  }
  Appender& operator<<(absl::string_view piece) {
    Put(piece.data(), piece.size());
    return *this;
  }
  template <typename T>
  requires std::is_integral_v<T> Appender& operator<<(T value) {
    return *this << absl::AlphaNum(value).Piece();
  }

 private:
  ABSL_ATTRIBUTE_ALWAYS_INLINE void Put(const char* data, size_t size) {
    if (ABSL_PREDICT_FALSE(size > sizeof(buffer_) - used_)) {
      Overflow(data, size);
      return;
    }
    std::memcpy(buffer_ + used_, data, size);
    used_ += size;
  }
  ABSL_ATTRIBUTE_NOINLINE void Overflow(const char* data, size_t size) {
    Flush();
    if (size > sizeof(buffer_)) {
      out_.append(data, size);
    } else {
      std::memcpy(buffer_, data, size);
      used_ = size;
    }
  }
  void Flush() {
    out_.append(buffer_, used_);
    used_ = 0;
  }

  std::string& out_;
  size_t used_ = 0;
  char buffer_[1024];
};

// One cycle (engine.h).
class Engine final : public CycleRunner {
 public:
  // One cycle. `s` must be valid; `running_quota` charges its running work;
  // `jobs` lists each queue's pending jobs in queue order with `num_classes`
  // classes. State from an earlier Run() only lends its memory, except the
  // per-class candidate flavors (ForgetClasses() drops them).
  void Run(const Snapshot& s, const PolicyConfig& config,
           const QuotaTree& running_quota,
           const std::vector<std::vector<QueueEntry>>& jobs,
           const ClassTable& classes, Decisions& out) override {
    Reset(s, config, running_quota, jobs, classes);
    Run(out);
  }

 private:
  void Reset(const Snapshot& s, const PolicyConfig& config,
             const QuotaTree& running_quota,
             const std::vector<std::vector<QueueEntry>>& jobs,
             const ClassTable& classes) {
    s_ = &s;
    config_ = &config;
    jobs_of_queue_ = &jobs;
    if (quota_.has_value()) {
      *quota_ = running_quota;
    } else {
      quota_.emplace(running_quota);
    }
    const size_t num_flavors = s.flavors.size();
    // The placement indexes of the last cycle describe its free_ at its
    // end: kept, and brought up to date node by node, while the nodes are
    // the same but for their use.
    const bool keep_indexes = SameNodes(s);
    if (!keep_indexes) {
      indexes_.clear();
      index_by_id_.clear();
      indexes_of_flavor_.assign(num_flavors, {});
      nodes_of_flavor_.assign(num_flavors, {});
      for (size_t n = 0; n < s.nodes.size(); ++n)
        nodes_of_flavor_[s.nodes[n].flavor].push_back(static_cast<NodeId>(n));
    }
    free_.resize(s.nodes.size());
    total_ = Resources{};
    // Whether an index updated here is no longer usable.
    bool unusable = false;
    for (size_t n = 0; n < s.nodes.size(); ++n) {
      const Node& node = s.nodes[n];
      Resources free = node.capacity;
      free -= node.used;
      if (node.schedulable) total_ += node.capacity;
      if (keep_indexes && !(free == free_[n])) {
        for (ShapeIndex* index : indexes_of_flavor_[node.flavor]) {
          if (!index->Set(static_cast<NodeId>(n), free)) unusable = true;
        }
      }
      free_[n] = free;
    }
    if (unusable) {
      // Dropped: built again (usable or not) when next asked for.
      index_by_id_.clear();
      for (auto& indexes : indexes_of_flavor_) {
        indexes.erase(std::remove_if(indexes.begin(), indexes.end(),
                                     [](const ShapeIndex* index) {
                                       return !index->usable();
                                     }),
                      indexes.end());
        for (ShapeIndex* index : indexes) {
          index->id = static_cast<int32_t>(index_by_id_.size());
          index_by_id_.push_back(index);
        }
      }
      absl::erase_if(indexes_,
                     [](const auto& entry) { return !entry.second->usable(); });
    }
    // Quota epochs are per root of the cohort tree.
    root_of_queue_.resize(s.queues.size());
    for (size_t q = 0; q < s.queues.size(); ++q) {
      const auto& cohort = s.queues[q].cohort;
      if (!cohort.has_value()) {
        root_of_queue_[q] = static_cast<int>(s.cohorts.size() + q);
        continue;
      }
      CohortId c = *cohort;
      while (s.cohorts[c].parent.has_value()) c = *s.cohorts[c].parent;
      root_of_queue_[q] = c;
    }
    quota_epoch_.assign((s.cohorts.size() + s.queues.size()) * num_flavors, 0);
    flavor_epoch_.assign(num_flavors, 0);
    classes_ = &classes;
    // Explanations depend only on the class and its records, and names do
    // not change while the class table is the same: keep them, and their
    // block, unless the block has grown well past what a cycle needs (then
    // it is freed once the last Decisions using it are).
    const size_t block_limit = 65536 + 2 * classes.size();
    if (texts_generation_ != classes.generation() || block_ == nullptr ||
        block_->texts.size() > block_limit) {
      failures_.clear();
      texts_generation_ = classes.generation();
      block_ = std::make_shared<TextBlock>();
    }
    // Failures of earlier cycles are no longer valid.
    if (++cycle_ == 0) {
      for (ClassFailure& failure : failures_) failure.cycle = 0;
      for (QuotaAvailable& available : available_) available.cycle = 0;
      cycle_ = 1;
    }
    failures_.resize(classes.size());
    available_.resize(s.queues.size() * num_flavors);
    index_of_shape_.assign(classes.num_shapes() * num_flavors, nullptr);
    index_looked_up_.assign(classes.num_shapes() * num_flavors, 0);
    share_.assign(s.queues.size(), 0.0);
    share_valid_.assign(s.queues.size(), false);
    budget_remaining_.clear();
    for (const Budget& b : s.budgets)
      budget_remaining_.push_back(b.remaining_micros);
    budget_epoch_.assign(s.budgets.size(), 0);
    // Per-job state is indexed by slot: the job's position in the
    // concatenation of the queues' orders, so a queue's jobs are contiguous.
    offset_.assign(s.queues.size() + 1, 0);
    for (size_t q = 0; q < s.queues.size(); ++q)
      offset_[q + 1] = offset_[q] + jobs[q].size();
    reservations_.clear();
    searches_ = 0;
    ends_built_ = false;
    awaited_.clear();
    awaited_attempts_.clear();
    preempted_.clear();
    rebalancing_.clear();
    held_for_priority_.clear();
  }

  void Run(Decisions& out) {
    out.admissions.clear();
    out.preemptions.clear();
    out.reservations.clear();
    std::vector<size_t>& cursor = cursor_;
    cursor.assign(s_->queues.size(), 0);
    admitted_.assign(s_->pending.size(), 0);
    reason_.assign(s_->pending.size(), PendingReason::kNoCapacity);
    message_.assign(s_->pending.size(), Message());
    // A min-heap (kHeapArity-ary) of queue heads: keys are unique (job ids
    // are), so the smallest is well defined. The processed head is replaced in
    // place by its queue's next job (one sift-down instead of a pop and a
    // push).
    std::vector<HeadKey>& heads = heads_;
    heads.clear();
    heads.reserve(s_->queues.size());
    for (size_t q = 0; q < s_->queues.size(); ++q) {
      if (!(*jobs_of_queue_)[q].empty())
        heads.push_back(Key((*jobs_of_queue_)[q][0], static_cast<QueueId>(q)));
    }
    // Every node with a child, deepest first (none in a heap of 0 or 1).
    for (size_t i = heads.size() < 2 ? 0 : (heads.size() - 2) / kHeapArity + 1;
         i-- > 0;) {
      SiftDown(heads, i);
    }
    BeginRuns();
    while (!heads.empty()) {
      const HeadKey head = heads.front();
      const QueueId q = head.queue;
      const QueueEntry& entry = (*jobs_of_queue_)[q][cursor[q]];
      const size_t j = offset_[q] + cursor[q]++;
      // Whatever its run holds comes before this job: confirmed.
      run_begin_[q] = cursor[q];
      const uint64_t events_before = events_;
      const Outcome outcome = TryAdmit(entry, head.job_class, q, j, out);
      if (events_ != events_before) {
        pops_since_event_ = 0;
        RewindRuns(head);
      } else {
        ++pops_since_event_;
      }
      if (outcome == Outcome::kAdmitted) {
        admitted_[j] = 1;
      } else if (s_->queues[q].strategy == QueueingStrategy::kStrictFifo) {
        const Message message = NewMessage(absl::StrCat(
            "BLOCKED_BY_STRICT_FIFO: queue ", s_->queues[q].name,
            " is StrictFIFO and job ", heads.front().job, " ahead is pending (",
            PendingReasonCode(reason_[j]), ")"));
        for (; cursor[q] < (*jobs_of_queue_)[q].size(); ++cursor[q]) {
          const size_t k = offset_[q] + cursor[q];
          reason_[k] = PendingReason::kBlockedByStrictFifo;
          message_[k] = message;
        }
      } else if (speculate_ && pops_since_event_ >= quiet_pops_ &&
                 2 * taken_back_ <= scanned_ + quiet_pops_) {
        ScanRun(q, out);
      }
      if (cursor[q] < (*jobs_of_queue_)[q].size()) {
        const QueueEntry& next = (*jobs_of_queue_)[q][cursor[q]];
        // It is popped about one round of all queues later: fetch what its
        // attempt reads now, so that it is in cache by then.
        // (Not the PendingJob: a failed attempt reads the class's
        // representative instead.)
        __builtin_prefetch(&failures_[next.job_class]);
        __builtin_prefetch(&message_[offset_[q] + cursor[q]], 1);
        heads.front() = Key(next, q);
      } else {
        heads.front() = heads.back();
        heads.pop_back();
      }
      if (!heads.empty()) SiftDown(heads, 0);
      // One of the root's children is usually the head after next.
      if (heads.size() > kHeapArity) {
        for (size_t h = 1; h <= kHeapArity; ++h) {
          Prefetch(heads[h].job_class);
          // Its queue's next entry, which becomes the queue's head then.
          const QueueId hq = heads[h].queue;
          __builtin_prefetch(&(*jobs_of_queue_)[hq].data()[cursor[hq] + 1]);
          // And what a failed attempt reads of its queue: its quota
          // availability and (for its budget) its Queue.
          __builtin_prefetch(
              &available_[static_cast<size_t>(hq) * s_->flavors.size()]);
          __builtin_prefetch(&s_->queues[hq].budget);
        }
      }
    }
    // Written over out.pending's old entries where it has them: its memory
    // (several MB) is reused rather than allocated again, which in a
    // long-running process often means fresh pages, each a page fault.
    std::vector<PendingDecision>& pending = out.pending;
    const size_t count = s_->pending.size() - out.admissions.size();
    if (pending.size() > count) pending.resize(count);
    pending.reserve(count);
    size_t k = 0;
    for (size_t q = 0; q < s_->queues.size(); ++q) {
      int32_t position = 0;
      for (size_t j = offset_[q]; j < offset_[q + 1]; ++j) {
        if (admitted_[j]) continue;
        PendingDecision decision{.job = (*jobs_of_queue_)[q][j - offset_[q]].id,
                                 .queue = static_cast<QueueId>(q),
                                 .reason = reason_[j],
                                 .message = std::move(message_[j]),
                                 .position = ++position};
        if (k < pending.size()) {
          pending[k] = std::move(decision);
        } else {
          pending.push_back(std::move(decision));
        }
        ++k;
      }
    }
  }

 private:
  // Fetches what an attempt for a job of the class reads first: its
  // failure record and its representative (queue, gang, shape).
  void Prefetch(int32_t job_class) const {
    __builtin_prefetch(&failures_[job_class]);
    __builtin_prefetch(classes_->InfoAddress(job_class));
    const char* job =
        reinterpret_cast<const char*>(&classes_->RepresentativeOf(job_class));
    __builtin_prefetch(job + offsetof(PendingJob, queue));
    __builtin_prefetch(job + offsetof(PendingJob, required_topology));
  }

  // --- Speculative runs ---
  //
  // Most of a cycle's attempts fail, and once admissions stop (in the
  // steady state, after the first fifth of the attempts) every failure
  // leaves the state as it was. A queue's next jobs would then fail exactly
  // as they do now, whenever their turn comes, as long as the state does not
  // change before it: ScanRun() takes them at once, from the queue's own
  // (contiguous) order, without a round through the heap of heads each, and
  // stops at the first one whose attempt would change the state (it is made
  // in order). The jobs taken form the queue's run. Keys grow along a
  // queue's order (HeadKey; not with nominal_before_borrowing, where the
  // borrowing flag depends on the class), so the heap pops jobs in
  // ascending key order: when an attempt changes the state, a run's jobs
  // with keys below that attempt's key came before it, and the others are
  // taken back (RewindRuns) and attempted again in order, in the new state.
  // A run is confirmed when its queue's next head is popped.
  // So every job gets the decision and explanation it gets without runs;
  // PolicyConfig::use_equivalence_classes = false turns runs off too, which
  // the property tests compare against.

  struct SpecRun {
    QueueId queue;
    // The state its jobs saw (RunStamp) and the share its keys had.
    uint64_t stamp;
    uint32_t flavor_mask;
    uint32_t quota_mask;
    uint64_t index_mask;
    double share;
  };

  void BeginRuns() {
    speculate_ = config_->use_equivalence_classes &&
                 !config_->nominal_before_borrowing && s_->flavors.size() <= 32;
    run_begin_.assign(s_->queues.size(), 0);
    run_of_queue_.assign(s_->queues.size(), -1);
    runs_.clear();
    pops_since_event_ = 0;
    quiet_pops_ = std::max<size_t>(heads_.size(), 16);
    scanned_ = taken_back_ = 0;
  }

  // The state the jobs of a run of q depend on: as Stamp(), over the
  // flavors and placement indexes of the run (the union of its failures'
  // masks).
  uint64_t RunStamp(const SpecRun& run) const {
    const QueueId q = run.queue;
    uint64_t stamp = 0;
    for (uint64_t mask = run.quota_mask; mask != 0; mask &= mask - 1)
      stamp += QuotaEpoch(root_of_queue_[q], __builtin_ctzll(mask));
    for (uint64_t mask = run.flavor_mask; mask != 0; mask &= mask - 1)
      stamp += flavor_epoch_[__builtin_ctzll(mask)];
    for (uint64_t mask = run.index_mask; mask != 0; mask &= mask - 1)
      stamp += index_by_id_[__builtin_ctzll(mask)]->epoch();
    if (const std::optional<BudgetId>& b = s_->queues[q].budget; b.has_value())
      stamp += budget_epoch_[*b];
    return stamp;
  }

  // Takes q's next jobs (after the one just attempted in order) while each
  // fails without changing the state.
  void ScanRun(QueueId q, Decisions& out) {
    const std::vector<QueueEntry>& jobs = (*jobs_of_queue_)[q];
    size_t c = cursor_[q];
    uint32_t mask = 0;
    uint32_t quota_mask = 0;
    uint64_t index_mask = 0;
    while (c < jobs.size()) {
      const QueueEntry& e = jobs[c];
      if (c + 1 < jobs.size()) Prefetch(jobs[c + 1].job_class);
      if (TryAdmit(e, e.job_class, q, offset_[q] + c, out,
                   /*speculative=*/true) != Outcome::kFailed) {
        break;
      }
      const ClassFailure& failure = failures_[e.job_class];
      mask |= failure.flavor_mask;
      quota_mask |= failure.quota_mask;
      index_mask |= failure.index_mask;
      ++c;
    }
    if (c == cursor_[q]) return;
    run_begin_[q] = cursor_[q];
    scanned_ += c - cursor_[q];
    cursor_[q] = c;
    if (run_of_queue_[q] < 0) {
      run_of_queue_[q] = static_cast<int32_t>(runs_.size());
      runs_.push_back({.queue = q});
    }
    SpecRun& run = runs_[run_of_queue_[q]];
    run.flavor_mask = mask;
    run.quota_mask = quota_mask;
    run.index_mask = index_mask;
    run.stamp = RunStamp(run);
    run.share = CachedShare(q);
  }

  // The attempt of `head` changed the state: every run whose jobs depend on
  // what changed gives back its jobs that come after `head`.
  void RewindRuns(const HeadKey& head) {
    size_t kept = 0;

    for (size_t i = 0; i < runs_.size(); ++i) {
      const SpecRun run = runs_[i];
      const QueueId q = run.queue;
      if (run_begin_[q] == cursor_[q]) {  // confirmed
        run_of_queue_[q] = -1;
        continue;
      }
      if (RunStamp(run) == run.stamp) {
        run_of_queue_[q] = static_cast<int32_t>(kept);
        runs_[kept++] = run;
        continue;
      }
      run_of_queue_[q] = -1;
      const std::vector<QueueEntry>& jobs = (*jobs_of_queue_)[q];
      // The run's first job whose key (as it was) exceeds the head's.
      const auto first_after = std::partition_point(
          jobs.begin() + static_cast<std::ptrdiff_t>(run_begin_[q]),
          jobs.begin() + static_cast<std::ptrdiff_t>(cursor_[q]),
          [&](const QueueEntry& e) {
            return KeyWithShare(e, q, run.share) < head;
          });
      const size_t back = static_cast<size_t>(first_after - jobs.begin());
      taken_back_ += cursor_[q] - back;
      const bool in_heap = cursor_[q] < jobs.size();
      cursor_[q] = back;
      run_begin_[q] = back;
      if (back == jobs.size()) continue;  // all of it came before
      const HeadKey key = Key(jobs[back], q);
      size_t h = heads_.size();
      if (in_heap) {
        for (h = 1; h < heads_.size() && heads_[h].queue != q; ++h) {
        }
      }
      if (h == heads_.size()) heads_.push_back(key);
      heads_[h] = key;
      SiftUpBelowRoot(heads_, h);
    }
    runs_.resize(kept);
  }

  // Moves heap[i] (i > 0, whose key just decreased) up, but never into the
  // root: the root is the head being processed, which Run() replaces and
  // sifts down next, and that restores the heap (its subtrees stay heaps).
  static void SiftUpBelowRoot(std::vector<HeadKey>& heap, size_t i) {
    const HeadKey moving = heap[i];
    while (i > 0) {
      const size_t parent = (i - 1) / kHeapArity;
      if (parent == 0 || !(moving < heap[parent])) break;
      heap[i] = heap[parent];
      i = parent;
    }
    heap[i] = moving;
  }

  // A preemption lowered queue q's usage, and so its share: its head moves
  // up in the fair-share order at once, not at its next
  // turn. Called while the preemptor's queue is the root of heads_.
  void RefreshHead(QueueId q) {
    if (cursor_[q] >= (*jobs_of_queue_)[q].size()) return;
    for (size_t i = 1; i < heads_.size(); ++i) {
      if (heads_[i].queue != q) continue;
      const HeadKey key = Key((*jobs_of_queue_)[q][cursor_[q]], q);
      if (key < heads_[i]) {
        heads_[i] = key;
        SiftUpBelowRoot(heads_, i);
      }
      return;
    }
  }

  static void SiftDown(std::vector<HeadKey>& heap, size_t i) {
    const size_t n = heap.size();
    const HeadKey moving = heap[i];
    while (true) {
      const size_t first = kHeapArity * i + 1;
      if (first >= n) break;
      size_t child = first;
      const size_t last = std::min(first + kHeapArity, n);
      for (size_t c = first + 1; c < last; ++c) {
        if (heap[c] < heap[child]) child = c;
      }
      if (!(heap[child] < moving)) break;
      heap[i] = heap[child];
      i = child;
    }
    heap[i] = moving;
  }

  // Share() changes only when the queue's own usage does; cached per queue.
  double CachedShare(QueueId q) {
    if (!share_valid_[q]) {
      share_[q] = WeightedShare(*s_, *quota_, total_, q);
      share_valid_[q] = true;
    }
    return share_[q];
  }

  // Whether a job of `job_class` in queue q would borrow: no candidate
  // flavor takes it within q's nominal quota at q's current usage
  // (PolicyConfig::nominal_before_borrowing). A job without candidate
  // flavors counts as borrowing (it fails either way).
  bool Borrows(int32_t job_class, QueueId q) const {
    const PendingJob& job = classes_->RepresentativeOf(job_class);
    const Resources need = job.worker.AsResources() * job.workers;
    for (FlavorId f : classes_->FlavorsOf(job_class)) {
      if (!OverNominal(q, f, need)) return false;
    }
    return true;
  }

  HeadKey Key(const QueueEntry& e, QueueId q) {
    return KeyWithShare(e, q, CachedShare(q));
  }

  // Key() when q's share is `share`.
  HeadKey KeyWithShare(const QueueEntry& e, QueueId q, double share) const {
    const bool aged = config_->aging_threshold > 0 &&
                      s_->now - e.submit_time >= config_->aging_threshold;
    return {.major = HeadKey::Major(
                config_->nominal_before_borrowing && Borrows(e.job_class, q),
                e.neg_priority, !aged),
            .share = aged ? 0.0 : share,
            .submit_time = e.submit_time,
            .job = e.id,
            .queue = q,
            .job_class = e.job_class};
  }

  // Whether s's nodes are those of the last Reset() but for their use
  // (Node::used); remembers them.
  bool SameNodes(const Snapshot& s) {
    bool same = s.nodes.size() == nodes_.size() &&
                s.flavors.size() == indexes_of_flavor_.size();
    if (nodes_.size() != s.nodes.size()) nodes_.resize(s.nodes.size());
    for (size_t n = 0; n < s.nodes.size(); ++n) {
      const Node& node = s.nodes[n];
      const NodeStatic now{.cluster = node.cluster,
                           .flavor = node.flavor,
                           .gpu_model = node.gpu_model,
                           .schedulable = node.schedulable,
                           .capacity = node.capacity,
                           .block = node.block,
                           .rack = node.rack};
      if (!(now == nodes_[n])) {
        same = false;
        nodes_[n] = now;
      }
    }
    return same;
  }

  ShapeIndex* IndexFor(FlavorId f, const WorkerShape& shape) {
    auto [it, inserted] = indexes_.try_emplace(KeyOfShape(f, shape), nullptr);
    if (inserted) {
      it->second =
          std::make_unique<ShapeIndex>(*s_, free_, nodes_of_flavor_[f], shape);
      if (it->second->usable()) {
        indexes_of_flavor_[f].push_back(it->second.get());
        it->second->id = static_cast<int32_t>(index_by_id_.size());
        index_by_id_.push_back(it->second.get());
      }
    }
    return it->second->usable() ? it->second.get() : nullptr;
  }

  // The placement index Place() used for `shape` on f, if it used one.
  const ShapeIndex* IndexOf(FlavorId f, int32_t shape) const {
    if (!config_->use_placement_index) return nullptr;
    const size_t slot = static_cast<size_t>(shape) * s_->flavors.size() +
                        static_cast<size_t>(f);
    return index_looked_up_[slot] ? index_of_shape_[slot] : nullptr;
  }

  // `shape` is the job's ClassTable::ShapeOf().
  PlacementResult Place(FlavorId f, const PendingJob& job, int32_t shape) {
    if (!config_->use_placement_index)
      return PlaceGang(*s_, free_, nodes_of_flavor_, f, job);
    // IndexFor() memoized per (shape, flavor): no hashing per attempt.
    const size_t slot = static_cast<size_t>(shape) * s_->flavors.size() +
                        static_cast<size_t>(f);
    if (!index_looked_up_[slot]) {
      index_looked_up_[slot] = 1;
      index_of_shape_[slot] = IndexFor(f, job.worker);
    }
    if (ShapeIndex* index = index_of_shape_[slot]; index != nullptr)
      return index->Place(free_, job);
    return PlaceGang(*s_, free_, nodes_of_flavor_, f, job);
  }

  enum class Outcome : uint8_t {
    kAdmitted,
    kFailed,
    // Speculative only: the attempt would change the state (admit, preempt,
    // reserve, hold quota) or count a reservation search; it must be made in
    // order.
    kDeferred,
  };

  // Admits the job of `entry` (of class `job_class`) or explains why not.
  // A speculative attempt (see ScanRun) changes no cycle state: it either
  // fails exactly as an attempt in order would in the same state, or is
  // deferred before it changes anything.
  Outcome TryAdmit(const QueueEntry& entry, int32_t job_class, QueueId q,
                   size_t j, Decisions& out, bool speculative = false) {
    // A class that failed in the same state fails again the same way; this
    // check does not touch the (cold) PendingJob.
    ClassFailure& failure = failures_[job_class];
    if (failure.cycle == cycle_ && config_->use_equivalence_classes &&
        failure.stamp == Stamp(*failure.flavors, failure.skip, q)) {
      if (failure.searched) {
        // The search count must grow in order (CanSearch()).
        if (speculative) return Outcome::kDeferred;
        StartSearch();
      }
      reason_[j] = failure.reason;
      message_[j] = failure.message;
      return Outcome::kFailed;
    }
    if (speculative && config_->hold_borrowing_for_priority)
      return Outcome::kDeferred;
    // Its kept details are compared at the end (TextOf).
    __builtin_prefetch(&failure.details[0]);
    __builtin_prefetch(&failure.details[2]);
    // Everything a failed attempt reads of the job is the same for every job
    // of its class: evaluate the class's compact representative, and touch
    // the job itself only to admit, preempt or reserve (or where a rule reads
    // its priority).
    auto actual = [&]() -> const PendingJob& {
      return s_->pending[entry.index];
    };
    const PendingJob& job = config_->hold_borrowing_for_priority
                                ? actual()
                                : classes_->RepresentativeOf(job_class);
    const Queue& queue = s_->queues[job.queue];
    const std::vector<FlavorId>& flavors = classes_->FlavorsOf(job_class);
    // The epochs before the attempt (HoldBorrowingFor may bump the quota
    // epoch during it).
    const uint64_t quota_sum = QuotaSum(flavors, job.queue);
    // Positions in `flavors` where it got to placement, and where that went
    // through a placement index (with no reservation about: then the
    // failure depends on the index's counts alone).
    uint64_t placed = 0;
    uint64_t indexed = 0;
    const int32_t shape = classes_->ShapeOf(job_class);
    // Why each flavor failed, as a compact record; the text is formatted
    // from it only when the class's last record differs (TextOf).
    std::vector<Detail>& details = details_;
    details.clear();
    if (flavors.empty()) {
      reason_[j] = PendingReason::kNoEligibleFlavor;
      details.push_back({.kind = Detail::kNoEligibleFlavor});
      message_[j] = TextOf(failure, job, reason_[j], details);
      Remember(failure, flavors, placed, indexed, shape, job.queue, quota_sum);
      return Outcome::kFailed;
    }
    const Resources need = job.worker.AsResources() * job.workers;
    auto add_detail = [&](Detail detail) {
      if (details.empty()) reason_[j] = ReasonOf(detail.kind);
      details.push_back(detail);
    };
    // Flavors within budget (preemption may free quota and capacity, not
    // money) and flavors where only capacity is missing (a reservation may
    // wait for it).
    std::vector<FlavorId>& affordable = affordable_;
    std::vector<FlavorId>& reservable = reservable_;
    affordable.clear();
    reservable.clear();
    for (size_t i = 0; i < flavors.size(); ++i) {
      const FlavorId f = flavors[i];
      Resource failed = Resource::kGpu;
      int64_t cost = 0;
      if (!Affordable(job, f, &cost)) {
        add_detail({.kind = Detail::kBudget,
                    .flavor = f,
                    .a = budget_remaining_[*queue.budget],
                    .b = cost});
        continue;
      }
      affordable.push_back(f);
      if (!FitsQuota(job.queue, f, need, &failed)) {
        add_detail(
            {.kind = Detail::kQuota,
             .resource = static_cast<uint8_t>(failed),
             .flavor = f,
             .a = quota_->Usage(job.queue, f, failed),
             .b = quota_->Nominal(job.queue, f, failed),
             .c = quota_->CohortLends(job.queue, f, failed,
                                      AvailableQuota(job.queue, f, failed))});
        HoldBorrowingFor(job, f, need);
      } else if (BorrowsWhileRebalancing(job, f, need)) {
        add_detail(OverNominalDetail(Detail::kRebalancing, job, f, need, 0));
      } else if (const int32_t* held = BorrowsWhileHeld(job, f, need)) {
        add_detail(OverNominalDetail(Detail::kHeld, job, f, need, *held));
      } else {
        placed |= i < 64 ? uint64_t{1} << i : 0;
        PlacementResult placement = Place(f, job, shape);
        if (i < 64 && reservations_.empty() && IndexOf(f, shape) != nullptr)
          indexed |= uint64_t{1} << i;
        if (placement.failure == PlacementFailure::kNone) {
          if (speculative) return Outcome::kDeferred;
          Admit(job, entry.id, f, std::move(placement.worker_nodes), out);
          return Outcome::kAdmitted;
        }
        if (!reservations_.empty()) {
          if (speculative) return Outcome::kDeferred;
          if (TryBackfill(actual(), f, out)) return Outcome::kAdmitted;
        }
        reservable.push_back(f);
        if (placement.failure == PlacementFailure::kNoFitCluster) {
          add_detail({.kind = Detail::kNoFitCluster,
                      .flavor = f,
                      .a = placement.best_group_workers});
        } else if (placement.failure == PlacementFailure::kNoFitTopology) {
          add_detail({.kind = Detail::kNoFitTopology,
                      .flavor = f,
                      .a = placement.best_group_workers});
        } else {
          add_detail({.kind = Detail::kNoCapacity,
                      .flavor = f,
                      .a = placement.capacity_workers});
        }
      }
    }
    if (PreemptionEnabled(queue, *config_)) {
      if (speculative) return Outcome::kDeferred;
      if (TryPreempt(actual(), affordable, out)) return Outcome::kAdmitted;
      // A preemption plan reads the capacity of every flavor.
      placed = ~uint64_t{0};
      indexed = 0;
    }
    bool searched = false;
    if (!reservable.empty() && CanSearch()) {
      if (speculative) return Outcome::kDeferred;
      std::string& message = scratch_;
      message.clear();
      AppendDetails(job, details, message);
      if (TryReserve(actual(), reservable, message, out, &searched)) {
        // Not remembered: the reservation changed the state, and the next
        // job of the class may get one of its own.
        reason_[j] = PendingReason::kWaitingForReservation;
        message_[j] = NewMessage(message);
        return Outcome::kFailed;
      }
    }
    message_[j] = TextOf(failure, job, reason_[j], details);
    Remember(failure, flavors, placed, indexed, shape, job.queue, quota_sum);
    failure.searched = searched;
    return Outcome::kFailed;
  }

  static PendingReason ReasonOf(Detail::Kind kind) {
    switch (kind) {
      case Detail::kNoEligibleFlavor:
        return PendingReason::kNoEligibleFlavor;
      case Detail::kBudget:
        return PendingReason::kBudgetHold;
      case Detail::kQuota:
      case Detail::kRebalancing:
      case Detail::kHeld:
        return PendingReason::kQuotaExhausted;
      case Detail::kNoFitCluster:
      case Detail::kNoFitTopology:
        return PendingReason::kNoFitTopology;
      case Detail::kNoCapacity:
        return PendingReason::kNoCapacity;
    }
    return PendingReason::kNoCapacity;
  }

  // The first resource of which `need` more would take the queue above its
  // nominal quota on f (the job would borrow it), if any.
  std::optional<Resource> OverNominal(QueueId q, FlavorId f,
                                      const Resources& need) const {
    for (Resource r : kAllResources) {
      if (need.Get(r) > 0 && quota_->Tracks(q, f, r) &&
          quota_->Usage(q, f, r) + need.Get(r) > quota_->Nominal(q, f, r)) {
        return r;
      }
    }
    return std::nullopt;
  }

  // The detail of a job that may not borrow on f (rebalancing and held
  // details): its first resource above nominal quota.
  Detail OverNominalDetail(Detail::Kind kind, const PendingJob& job, FlavorId f,
                           const Resources& need, int64_t priority) const {
    Detail detail{.kind = kind, .has_resource = false, .flavor = f};
    if (std::optional<Resource> r = OverNominal(job.queue, f, need)) {
      detail.has_resource = true;
      detail.resource = static_cast<uint8_t>(*r);
      detail.a = quota_->Usage(job.queue, f, *r);
      detail.b = quota_->Nominal(job.queue, f, *r);
      detail.c = priority;
    }
    return detail;
  }

  // "<CODE of the first detail>: <detail>; <detail>..." for a job of the
  // class of `job` (its representative).
  void AppendDetails(const PendingJob& job, const std::vector<Detail>& details,
                     std::string& out) const {
    const Queue& queue = s_->queues[job.queue];
    const Resources need = job.worker.AsResources() * job.workers;
    Appender text(out);
    for (size_t i = 0; i < details.size(); ++i) {
      const Detail& d = details[i];
      const Resource resource = static_cast<Resource>(d.resource);
      if (i == 0) {
        text << PendingReasonCode(ReasonOf(d.kind)) << ": ";
      } else {
        text << "; ";
      }
      const absl::string_view flavor =
          d.kind == Detail::kNoEligibleFlavor
              ? absl::string_view()
              : absl::string_view(s_->flavors[d.flavor].name);
      switch (d.kind) {
        case Detail::kNoEligibleFlavor:
          text << "queue " << queue.name
               << " has no quota for a flavor allowed by spot policy "
               << SpotPolicyName(job.spot_policy);
          break;
        case Detail::kBudget:
          text << "budget " << s_->budgets[*queue.budget].name << " has "
               << FormatMicros(d.a) << " left, expected cost "
               << FormatMicros(d.b) << " (flavor " << flavor << ")";
          break;
        case Detail::kQuota:
          text << "queue " << queue.name << " " << ResourceName(resource) << " "
               << d.a << "/" << d.b << ", cohort lends " << d.c
               << ", job needs " << need.Get(resource) << " (flavor " << flavor
               << ")";
          break;
        case Detail::kRebalancing:
          if (!d.has_resource) break;
          text << "queue " << queue.name << " " << ResourceName(resource) << " "
               << d.a << "/" << d.b << ", job needs " << need.Get(resource)
               << ", cohort lends 0 while preemption frees quota (flavor "
               << flavor << ")";
          break;
        case Detail::kHeld:
          if (!d.has_resource) break;
          text << "queue " << queue.name << " " << ResourceName(resource) << " "
               << d.a << "/" << d.b << ", job needs " << need.Get(resource)
               << ", cohort lends 0 while a job of priority " << d.c
               << " waits for its quota (flavor " << flavor << ")";
          break;
        case Detail::kNoFitCluster:
          text << "no single cluster holds " << job.workers
               << " workers (best holds " << d.a << ") (flavor " << flavor
               << ")";
          break;
        case Detail::kNoFitTopology:
          text << "no single "
               << (job.required_topology == TopologyLevel::kRack ? "rack"
                                                                 : "block")
               << " holds " << job.workers << " workers (best holds " << d.a
               << ") (flavor " << flavor << ")";
          break;
        case Detail::kNoCapacity:
          text << "free nodes hold " << d.a << " of " << job.workers
               << " workers (flavor " << flavor << ")";
          break;
      }
    }
  }

  // A message whose text is stored in the current block.
  Message NewMessage(std::string text) {
    block_->texts.push_back(std::move(text));
    return Message(
        std::shared_ptr<const std::string>(block_, &block_->texts.back()));
  }

  // The explanation of a failure of class c with these details: the class's
  // last one (kept across cycles while the class table is the same) when its
  // records are equal, so that most failures format and allocate nothing.
  Message TextOf(ClassFailure& failure, const PendingJob& job,
                 PendingReason reason, const std::vector<Detail>& details) {
    if (failure.text_valid && failure.reason == reason &&
        failure.num_details == details.size() &&
        std::equal(details.begin(), details.end(), failure.details)) {
      return failure.message;
    }
    std::string& message = scratch_;
    message.clear();
    AppendDetails(job, details, message);
    failure.reason = reason;
    failure.message = NewMessage(message);
    failure.text_valid = details.size() <= kKeptDetails;
    if (failure.text_valid) {
      failure.num_details = static_cast<uint8_t>(details.size());
      std::copy(details.begin(), details.end(), failure.details);
    }
    return failure.message;
  }

  // Whether the job's expected cost on f fits its queue's budget (always
  // without one); `cost` gets the cost.
  bool Affordable(const PendingJob& job, FlavorId f, int64_t* cost) const {
    const std::optional<BudgetId>& budget = s_->queues[job.queue].budget;
    if (!budget.has_value()) return true;
    *cost = ExpectedCostMicros(job, s_->flavors[f], *config_);
    return *cost <= budget_remaining_[*budget];
  }

  // Commits the job's expected cost on f to its queue's budget, if any.
  void Spend(const PendingJob& job, FlavorId f) {
    const std::optional<BudgetId>& budget = s_->queues[job.queue].budget;
    if (!budget.has_value()) return;
    budget_remaining_[*budget] -=
        ExpectedCostMicros(job, s_->flavors[f], *config_);
    ++budget_epoch_[*budget];
    ++events_;
  }

  // --- Backfill and reservations (docs/scheduling.md) ---

  struct Hold {
    NodeId node;
    Resources amount;
  };
  struct ReservationState {
    FlavorId flavor;
    TimeMicros start_time;
    // Free capacity taken now, usable only by jobs that end by start_time.
    std::vector<Hold> held;
  };

  // Reservations on f that a job with this time limit ends before.
  std::vector<ReservationState*> EligibleReservations(const PendingJob& job,
                                                      FlavorId f) {
    std::vector<ReservationState*> eligible;
    if (job.time_limit_micros <= 0) return eligible;
    for (ReservationState& r : reservations_) {
      if (r.flavor == f && s_->now <= r.start_time - job.time_limit_micros) {
        eligible.push_back(&r);
      }
    }
    // Earliest start first: the holds fewer jobs can use go first.
    std::sort(eligible.begin(), eligible.end(),
              [](const ReservationState* a, const ReservationState* b) {
                return a->start_time < b->start_time;
              });
    return eligible;
  }

  // Places `job` on f using also capacity held by reservations it ends
  // before; admits it as backfill.
  bool TryBackfill(const PendingJob& job, FlavorId f, Decisions& out) {
    if (reservations_.empty()) return false;
    std::vector<ReservationState*> eligible = EligibleReservations(job, f);
    if (eligible.empty()) return false;
    for (ReservationState* r : eligible) {
      for (const Hold& h : r->held) free_[h.node] += h.amount;
    }
    PlacementResult placement = PlaceGang(*s_, free_, nodes_of_flavor_, f, job);
    for (ReservationState* r : eligible) {
      for (const Hold& h : r->held) free_[h.node] -= h.amount;
    }
    if (placement.failure != PlacementFailure::kNone) return false;
    // Each worker takes held capacity first (only short jobs can use it),
    // from the earliest reservation first; Commit() takes the rest from the
    // free capacity.
    const Resources worker = job.worker.AsResources();
    for (NodeId n : placement.worker_nodes) {
      Resources want = worker;
      for (ReservationState* r : eligible) {
        for (Hold& h : r->held) {
          if (h.node != n) continue;
          for (Resource res : kAllResources) {
            const int64_t take = std::min(want.Get(res), h.amount.Get(res));
            h.amount.Mutable(res) -= take;
            want.Mutable(res) -= take;
            free_[n].Mutable(res) += take;
          }
        }
      }
    }
    Admit(job, job.id, f, std::move(placement.worker_nodes), out);
    out.admissions.back().backfill = true;
    return true;
  }

  // Running attempts on f with a time limit: (end, index), by end, then job
  // id (not by index: decisions never depend on the order of
  // Snapshot::running).
  const std::vector<std::pair<TimeMicros, int>>& EndsOf(FlavorId f) {
    if (!ends_built_) {
      ends_built_ = true;
      ends_of_flavor_.resize(s_->flavors.size());
      for (auto& ends : ends_of_flavor_) ends.clear();
      for (size_t i = 0; i < s_->running.size(); ++i) {
        const RunningAttempt& r = s_->running[i];
        if (r.time_limit_micros <= 0 || r.placement.empty()) continue;
        ends_of_flavor_[r.flavor].emplace_back(
            std::max(s_->now, r.start_time + r.time_limit_micros),
            static_cast<int>(i));
      }
      for (auto& ends : ends_of_flavor_) {
        std::sort(ends.begin(), ends.end(),
                  [&](const std::pair<TimeMicros, int>& a,
                      const std::pair<TimeMicros, int>& b) {
                    if (a.first != b.first) return a.first < b.first;
                    return s_->running[a.second].job <
                           s_->running[b.second].job;
                  });
      }
    }
    return ends_of_flavor_[f];
  }

  // Where `job` could be placed on f once the first k attempts of EndsOf(f)
  // have ended, keeping what earlier reservations still wait for.
  PlacementResult Probe(const PendingJob& job, FlavorId f, size_t k) {
    const std::vector<std::pair<TimeMicros, int>>& ends = EndsOf(f);
    if (probe_free_.size() != free_.size()) probe_free_.resize(free_.size());
    for (NodeId n : nodes_of_flavor_[f]) {
      probe_free_[n] = free_[n];
      if (!awaited_.empty()) probe_free_[n] -= awaited_[n];
    }
    for (size_t i = 0; i < k; ++i) {
      const int a = ends[i].second;
      if (!preempted_.empty() && preempted_[a]) continue;
      const RunningAttempt& r = s_->running[a];
      for (size_t w = 0; w < r.placement.size(); ++w)
        probe_free_[r.placement[w]] += WorkerShare(r, w);
    }
    return PlaceGang(*s_, probe_free_, nodes_of_flavor_, f, job);
  }

  // Whether the limits allow another reservation search.
  bool CanSearch() const {
    return static_cast<int32_t>(reservations_.size()) <
               config_->max_reservations &&
           searches_ < config_->max_reservation_searches;
  }

  // Counts a reservation search if the limits allow one.
  bool StartSearch() {
    if (!CanSearch()) return false;
    ++searches_;
    return true;
  }

  // Reserves capacity for `job` on the flavor (of `flavors`, which fit its
  // quota and budget) where it can start earliest; appends the explanation
  // to `message` (which holds why it cannot start now).
  bool TryReserve(const PendingJob& job, const std::vector<FlavorId>& flavors,
                  std::string& message, Decisions& out, bool* searched) {
    if (!StartSearch()) return false;
    *searched = true;
    std::optional<FlavorId> best;
    TimeMicros best_start = 0;
    size_t best_ended = 0;
    std::vector<NodeId> best_nodes;
    for (FlavorId f : flavors) {
      const size_t m = EndsOf(f).size();
      if (m == 0) continue;
      PlacementResult all = Probe(job, f, m);
      if (all.failure != PlacementFailure::kNone) continue;
      // Fitting is monotone in the capacity released: binary search for the
      // fewest ended attempts.
      size_t lo = 1, hi = m;
      std::vector<NodeId> nodes = std::move(all.worker_nodes);
      while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        PlacementResult p = Probe(job, f, mid);
        if (p.failure == PlacementFailure::kNone) {
          hi = mid;
          nodes = std::move(p.worker_nodes);
        } else {
          lo = mid + 1;
        }
      }
      const TimeMicros start = EndsOf(f)[hi - 1].first;
      if (!best.has_value() || start < best_start) {
        best = f;
        best_start = start;
        best_ended = hi;
        best_nodes = std::move(nodes);
      }
    }
    if (!best.has_value()) return false;
    const FlavorId f = *best;
    // Hold what is free now on the chosen nodes (up to the gang's need there)
    // and remember the rest as awaited.
    if (awaited_.empty()) awaited_.assign(free_.size(), Resources{});
    ReservationState state{.flavor = f, .start_time = best_start};
    const Resources worker = job.worker.AsResources();
    for (size_t i = 0; i < best_nodes.size();) {
      const NodeId n = best_nodes[i];
      int64_t count = 0;
      while (i < best_nodes.size() && best_nodes[i] == n) {
        ++count;
        ++i;
      }
      const Resources need_here = worker * count;
      Resources held;
      for (Resource r : kAllResources) {
        held.Mutable(r) =
            std::clamp<int64_t>(free_[n].Get(r), 0, need_here.Get(r));
      }
      free_[n] -= held;
      Resources wait = need_here;
      wait -= held;
      awaited_[n] += wait;
      state.held.push_back({.node = n, .amount = held});
      for (ShapeIndex* index : indexes_of_flavor_[f])
        index->Update(n, free_[n]);
    }
    // The attempts whose end it waits for may not be preempted later in the
    // cycle: the preemptor would take what they release.
    if (awaited_attempts_.empty())
      awaited_attempts_.assign(s_->running.size(), false);
    for (size_t k = 0; k < best_ended; ++k) {
      const int a = EndsOf(f)[k].second;
      for (NodeId n : s_->running[a].placement) {
        if (std::binary_search(best_nodes.begin(), best_nodes.end(), n)) {
          awaited_attempts_[a] = true;
          break;
        }
      }
    }
    reservations_.push_back(std::move(state));
    quota_->Add(job.queue, f, worker * job.workers);
    Spend(job, f);
    share_valid_[job.queue] = false;
    ++flavor_epoch_[f];
    // Backfill on f is now possible: failures that depended on f's indexes
    // alone do not hold any more.
    for (ShapeIndex* index : indexes_of_flavor_[f]) index->Touch();
    ++QuotaEpoch(root_of_queue_[job.queue], f);
    ++events_;
    const std::string previous = message;
    message = absl::StrCat(
        "WAITING_FOR_RESERVATION: ", job.workers,
        " workers reserved on flavor ", s_->flavors[f].name, " from ",
        absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMicros(best_start),
                         absl::UTCTimeZone()),
        " (in ", (best_start - s_->now) / 1000000,
        " s), when running jobs reach their time limits; now: ", previous);
    out.reservations.push_back({.job = job.id,
                                .queue = job.queue,
                                .flavor = f,
                                .start_time = best_start,
                                .worker_nodes = std::move(best_nodes)});
    return true;
  }

  // Admits job `id`; `job` is it or its class's representative (everything
  // an admission reads of a job but its id is the same for every job of its
  // class), so that an admission need not touch the (cold) job itself.
  void Admit(const PendingJob& job, JobId id, FlavorId f,
             std::vector<NodeId> nodes, Decisions& out) {
    Commit(job, f, nodes);
    bool borrowing = false;
    for (Resource r : kAllResources) {
      if (quota_->Tracks(job.queue, f, r) &&
          quota_->Usage(job.queue, f, r) > quota_->Nominal(job.queue, f, r)) {
        borrowing = true;
      }
    }
    out.admissions.push_back({.job = id,
                              .queue = job.queue,
                              .flavor = f,
                              .worker_nodes = std::move(nodes),
                              .borrowing = borrowing});
  }

  // After a preemption in the cohort tree of `job` on flavor f, later
  // admissions there in this cycle may not borrow: they would take quota the
  // victims still hold and undo the rebalancing.
  bool BorrowsWhileRebalancing(const PendingJob& job, FlavorId f,
                               const Resources& need) const {
    if (rebalancing_.empty() || !s_->queues[job.queue].cohort.has_value() ||
        !rebalancing_.contains({root_of_queue_[job.queue], f})) {
      return false;
    }
    return OverNominal(job.queue, f, need).has_value();
  }

  // PolicyConfig::hold_borrowing_for_priority: a job whose own queue's
  // limits allow it but whose cohort tree has no room left on f holds the
  // tree's unused quota on f for the rest of the cycle against jobs of lower
  // priority that would borrow it, so that quota freed by ending work
  // collects for it instead of going to borrowers of lower priority.
  void HoldBorrowingFor(const PendingJob& job, FlavorId f,
                        const Resources& need) {
    if (!config_->hold_borrowing_for_priority ||
        !s_->queues[job.queue].cohort.has_value() ||
        !quota_->WithinBorrowingLimit(job.queue, f, need)) {
      return;
    }
    const int32_t priority = s_->priority_classes[job.priority_class].value;
    const int root = root_of_queue_[job.queue];
    auto [it, inserted] = held_for_priority_.try_emplace({root, f}, priority);
    if (!inserted && it->second >= priority) return;
    it->second = priority;
    // Jobs of the tree may now fail where they fitted: no earlier failure of
    // a class there is reused.
    ++QuotaEpoch(root, f);
    ++events_;
  }

  // The priority that holds the quota `job` would borrow on f, or nullptr.
  const int32_t* BorrowsWhileHeld(const PendingJob& job, FlavorId f,
                                  const Resources& need) const {
    if (held_for_priority_.empty() || !s_->queues[job.queue].cohort.has_value())
      return nullptr;
    auto it = held_for_priority_.find({root_of_queue_[job.queue], f});
    if (it == held_for_priority_.end() ||
        it->second <= s_->priority_classes[job.priority_class].value) {
      return nullptr;
    }
    return OverNominal(job.queue, f, need).has_value() ? &it->second : nullptr;
  }

  // Admits `job` on the first flavor where preempting running work makes it
  // fit (preemption.h) and records the preemptions.
  bool TryPreempt(const PendingJob& job, const std::vector<FlavorId>& flavors,
                  Decisions& out) {
    if (preempted_.empty()) {
      preempted_.assign(s_->running.size(), false);
      running_of_flavor_.resize(s_->flavors.size());
      for (auto& running : running_of_flavor_) running.clear();
      running_of_tree_flavor_.resize((s_->cohorts.size() + s_->queues.size()) *
                                     s_->flavors.size());
      for (auto& running : running_of_tree_flavor_) running.clear();
      for (size_t i = 0; i < s_->running.size(); ++i) {
        const RunningAttempt& r = s_->running[i];
        running_of_flavor_[r.flavor].push_back(static_cast<int>(i));
        running_of_tree_flavor_[static_cast<size_t>(root_of_queue_[r.queue]) *
                                    s_->flavors.size() +
                                r.flavor]
            .push_back(static_cast<int>(i));
      }
    }
    const CycleState state{.quota = &*quota_,
                           .free = &free_,
                           .nodes_of_flavor = &nodes_of_flavor_,
                           .total = total_,
                           .preempted = &preempted_,
                           .awaited = &awaited_attempts_,
                           .running_of_flavor = &running_of_flavor_,
                           .tree_of_queue = &root_of_queue_,
                           .running_of_tree_flavor = &running_of_tree_flavor_,
                           .free_workers = &free_workers_};
    for (FlavorId f : flavors) {
      std::optional<PreemptionPlan> plan =
          PlanPreemption(*s_, *config_, state, job, f);
      if (!plan.has_value()) continue;
      const int32_t priority = s_->priority_classes[job.priority_class].value;
      // Victims keep running through their grace period: what they free
      // beyond what the job takes stays unavailable this cycle.
      std::vector<std::pair<NodeId, Resources>> held;
      for (int v : plan->victims) {
        for (NodeId n : s_->running[v].placement)
          held.emplace_back(n, free_[n]);
      }
      for (size_t k = 0; k < plan->victims.size(); ++k) {
        const RunningAttempt& r = s_->running[plan->victims[k]];
        preempted_[plan->victims[k]] = true;
        ReleaseAttempt(r, *quota_, free_);
        share_valid_[r.queue] = false;
        ++QuotaEpoch(root_of_queue_[r.queue], r.flavor);
        ++flavor_epoch_[r.flavor];
        ++events_;
        const PreemptionReason reason = plan->reasons[k];
        out.preemptions.push_back(
            {.victim = r.job,
             .victim_queue = r.queue,
             .preemptor = job.id,
             .reason = reason,
             .grace_period = config_->preemption_grace_period,
             .message = absl::StrCat(
                 PreemptionReasonCode(reason), ": job ", job.id, " (priority ",
                 priority, ", queue ", s_->queues[job.queue].name,
                 ") preempts job ", r.job, " (priority ",
                 s_->priority_classes[r.priority_class].value, ", queue ",
                 s_->queues[r.queue].name, ") on flavor ", s_->flavors[f].name,
                 "; ", r.resources.gpus, " GPUs lose ",
                 (s_->now - r.last_checkpoint_time.value_or(r.start_time)) /
                     1000000,
                 " s since the last checkpoint")});
      }
      // Commit() only lowers free capacity, as the indexes require: restore
      // the victims' nodes to what they had before (they are still busy), and
      // charge the job's workers on top only where the victims' release does
      // not cover them.
      std::vector<NodeId> nodes = std::move(plan->placement.worker_nodes);
      for (NodeId n : nodes) free_[n] -= job.worker.AsResources();
      for (const auto& [n, before] : held) {
        Resources& free = free_[n];
        free.gpus = std::min(free.gpus, before.gpus);
        free.cpu_millis = std::min(free.cpu_millis, before.cpu_millis);
        free.memory_bytes = std::min(free.memory_bytes, before.memory_bytes);
      }
      for (NodeId n : nodes) free_[n] += job.worker.AsResources();
      Admit(job, job.id, f, std::move(nodes), out);
      for (const auto& [n, before] : held) {
        for (ShapeIndex* index : indexes_of_flavor_[s_->nodes[n].flavor])
          index->Update(n, free_[n]);
      }
      // Nor may a later job of the cohort tree borrow the quota they free.
      rebalancing_.insert({root_of_queue_[job.queue], f});
      for (int v : plan->victims) {
        const QueueId vq = s_->running[v].queue;
        if (vq != job.queue) RefreshHead(vq);
      }
      return true;
    }
    return false;
  }

  // QuotaTree::Available(q, f, r), remembered per (queue, flavor) while the
  // quota epoch of q's cohort tree on f stays the same: the jobs of a queue
  // ask for it again and again (about 2 calls per job class in a cycle
  // between two changes of the tree's quota), and each call walks up the
  // tree. Not remembered without use_equivalence_classes, so that the
  // property tests compare it with QuotaTree's own answers.
  int64_t AvailableQuota(QueueId q, FlavorId f, Resource r) {
    if (!config_->use_equivalence_classes) return quota_->Available(q, f, r);
    QuotaAvailable& a =
        available_[static_cast<size_t>(q) * s_->flavors.size() + f];
    const uint64_t epoch = QuotaEpoch(root_of_queue_[q], f);
    if (a.cycle != cycle_ || a.epoch != epoch) {
      a.cycle = cycle_;
      a.epoch = epoch;
      a.known = 0;
    }
    const int i = static_cast<int>(r);
    if ((a.known >> i & 1) == 0) {
      a.value[i] = quota_->Available(q, f, r);
      a.known |= static_cast<uint8_t>(1 << i);
    }
    return a.value[i];
  }
  // QuotaTree::Fits() through AvailableQuota().
  bool FitsQuota(QueueId q, FlavorId f, const Resources& amount,
                 Resource* failed) {
    return QuotaTree::FitsAvailable(
        amount, [&](Resource r) { return AvailableQuota(q, f, r); }, failed);
  }

  // The quota epoch of (root of a cohort tree, flavor): grows with every
  // change of the tree's quota state on the flavor (its usage, holds and
  // rebalancing).
  uint64_t& QuotaEpoch(int root, FlavorId f) {
    return quota_epoch_[static_cast<size_t>(root) * s_->flavors.size() + f];
  }
  uint64_t QuotaEpoch(int root, FlavorId f) const {
    return quota_epoch_[static_cast<size_t>(root) * s_->flavors.size() + f];
  }
  // The quota epochs of q's tree on the flavors, summed.
  uint64_t QuotaSum(const std::vector<FlavorId>& flavors, QueueId q) const {
    uint64_t sum = 0;
    for (FlavorId f : flavors) sum += QuotaEpoch(root_of_queue_[q], f);
    return sum;
  }

  // Epochs only grow, so their sum changes exactly when one of them does.
  // The state a job of queue q with these candidate flavors depends on:
  // the quota epochs of q's cohort tree on the flavors, their capacity
  // epochs and the epoch of q's budget.
  // (Capacity epochs of flavors at positions in `skip` (below 64) left out.)
  uint64_t Stamp(const std::vector<FlavorId>& flavors, uint64_t skip,
                 QueueId q) const {
    return StampWith(flavors, skip, q, QuotaSum(flavors, q));
  }
  // Stamp() with `quota_sum` as QuotaSum(flavors, q).
  uint64_t StampWith(const std::vector<FlavorId>& flavors, uint64_t skip,
                     QueueId q, uint64_t quota_sum) const {
    uint64_t stamp = quota_sum;
    for (size_t i = 0; i < flavors.size(); ++i) {
      if (i < 64 && (skip >> i & 1) != 0) continue;
      stamp += flavor_epoch_[flavors[i]];
    }
    if (const std::optional<BudgetId>& b = s_->queues[q].budget; b.has_value())
      stamp += budget_epoch_[*b];
    return stamp;
  }

  // Remembers a failure whose reason and message TextOf() just set: it
  // depends on the capacity of the flavors at positions in `placed`
  // (through the placement index at positions in `indexed`), and
  // `quota_sum` was QuotaSum(flavors, q) when it was attempted.
  void Remember(ClassFailure& failure, const std::vector<FlavorId>& flavors,
                uint64_t placed, uint64_t indexed, int32_t shape, QueueId q,
                uint64_t quota_sum) {
    failure.cycle = cycle_;
    failure.flavors = &flavors;
    failure.skip = ~placed;
    failure.stamp = StampWith(flavors, failure.skip, q, quota_sum);
    failure.quota_mask = 0;
    for (FlavorId f : flavors) {
      if (f < 32) failure.quota_mask |= uint32_t{1} << f;
    }
    failure.flavor_mask = 0;
    failure.index_mask = 0;
    for (size_t i = 0; i < flavors.size() && i < 64; ++i) {
      if ((placed >> i & 1) == 0) continue;
      const int32_t id = (indexed >> i & 1) != 0
                             ? IndexOf(flavors[i], shape)->id
                             : int32_t{-1};
      if (id >= 0 && id < 64) {
        failure.index_mask |= uint64_t{1} << id;
      } else if (flavors[i] < 32) {
        failure.flavor_mask |= uint32_t{1} << flavors[i];
      }
    }
    failure.searched = false;
  }

  void Commit(const PendingJob& job, FlavorId f,
              const std::vector<NodeId>& nodes) {
    const Resources worker = job.worker.AsResources();
    for (size_t i = 0; i < nodes.size(); ++i) {
      const NodeId n = nodes[i];
      free_[n] -= worker;
      if (i + 1 < nodes.size() && nodes[i + 1] == n) continue;
      for (ShapeIndex* index : indexes_of_flavor_[f])
        index->Update(n, free_[n]);
    }
    quota_->Add(job.queue, f, worker * job.workers);
    Spend(job, f);
    share_valid_[job.queue] = false;
    ++flavor_epoch_[f];
    ++QuotaEpoch(root_of_queue_[job.queue], f);
    ++events_;
  }

  const Snapshot* s_ = nullptr;
  const PolicyConfig* config_ = nullptr;
  std::optional<QuotaTree> quota_;
  std::vector<Resources> free_;
  std::vector<std::vector<NodeId>> nodes_of_flavor_;
  Resources total_;
  const std::vector<std::vector<QueueEntry>>* jobs_of_queue_ = nullptr;
  std::vector<ClassFailure> failures_;
  // Per (queue, flavor): AvailableQuota() of the resources in `known`,
  // computed in `cycle` at quota epoch `epoch`.
  struct QuotaAvailable {
    uint32_t cycle = 0;
    uint8_t known = 0;
    uint64_t epoch = 0;
    int64_t value[kNumResources] = {};
  };
  std::vector<QuotaAvailable> available_;
  std::vector<size_t> offset_;
  std::vector<uint8_t> admitted_;
  std::vector<PendingReason> reason_;
  std::vector<Message> message_;
  absl::flat_hash_map<ShapeKey, std::unique_ptr<ShapeIndex>> indexes_;
  std::vector<std::vector<ShapeIndex*>> indexes_of_flavor_;
  // What placement indexes read of each node, but its use (SameNodes()).
  struct NodeStatic {
    int32_t cluster = 0;
    FlavorId flavor = -1;
    GpuModelId gpu_model = kAnyGpuModel;
    bool schedulable = false;
    Resources capacity;
    TopologyLabel block = kNoLabel;
    TopologyLabel rack = kNoLabel;
    bool operator==(const NodeStatic&) const = default;
  };
  std::vector<NodeStatic> nodes_;
  // The usable indexes by ShapeIndex::id.
  std::vector<ShapeIndex*> index_by_id_;
  // Per (ClassTable shape, flavor): IndexFor() once looked up.
  std::vector<ShapeIndex*> index_of_shape_;
  std::vector<uint8_t> index_looked_up_;
  std::vector<int> root_of_queue_;
  std::vector<uint64_t> quota_epoch_;
  std::vector<uint64_t> flavor_epoch_;
  const ClassTable* classes_ = nullptr;
  std::vector<HeadKey> heads_;
  // Per queue: its next job in Run().
  std::vector<size_t> cursor_;
  std::vector<double> share_;
  std::vector<bool> share_valid_;
  std::string scratch_;
  std::vector<Detail> details_;
  std::vector<FlavorId> affordable_, reservable_;
  // The texts of explanations, in blocks: every Message of a block shares
  // the block's reference count (one hot counter instead of a cold one per
  // text), and the block lives while a Message of it does.
  struct TextBlock {
    std::deque<std::string> texts;
  };
  std::shared_ptr<TextBlock> block_;
  // ClassTable::generation() of the classes failures_ describes.
  uint64_t texts_generation_ = 0;
  std::vector<int64_t> budget_remaining_;
  std::vector<uint64_t> budget_epoch_;
  std::vector<ReservationState> reservations_;
  int32_t searches_ = 0;
  // Per flavor (built on first use): running attempts with time limits.
  std::vector<std::vector<std::pair<TimeMicros, int>>> ends_of_flavor_;
  bool ends_built_ = false;
  // Per node (sized on first use): what reservations wait to be released.
  std::vector<Resources> awaited_;
  std::vector<Resources> probe_free_;
  // Per flavor: its running attempts (built with preempted_).
  std::vector<std::vector<int>> running_of_flavor_;
  // Per (cohort tree, flavor): its running attempts (built with preempted_).
  std::vector<std::vector<int>> running_of_tree_flavor_;
  // CycleState::free_workers, from the placement index where it is usable.
  std::function<std::optional<int64_t>(FlavorId, const PendingJob&)>
      free_workers_ =
          [this](FlavorId f, const PendingJob& job) -> std::optional<int64_t> {
    if (!config_->use_placement_index || job.workers < 1) return std::nullopt;
    ShapeIndex* index = IndexFor(f, job.worker);
    if (index == nullptr) return std::nullopt;
    return index->Workers(job.workers);
  };
  // Per running attempt: preempted in this cycle (sized on first use).
  std::vector<bool> preempted_;
  // Per running attempt: a reservation waits for its end (sized on first
  // use).
  std::vector<bool> awaited_attempts_;
  // (root of the cohort tree, flavor) pairs where a preemption happened.
  absl::flat_hash_set<std::pair<int, FlavorId>> rebalancing_;
  // (root of the cohort tree, flavor) -> the highest priority of a job that
  // found no room for it in the tree (HoldBorrowingFor).
  absl::flat_hash_map<std::pair<int, FlavorId>, int32_t> held_for_priority_;
  // Counts Reset()s (ClassFailure::cycle); never 0.
  uint32_t cycle_ = 0;
  // Speculative runs (ScanRun).
  bool speculate_ = false;
  // Epoch increments so far (any change of the state a failure depends on).
  uint64_t events_ = 0;
  size_t pops_since_event_ = 0;
  // Pops without a change of the state before runs are scanned.
  size_t quiet_pops_ = 0;
  // Jobs taken into runs and taken back, in this cycle. A job taken back
  // cost its scan for nothing: runs are scanned only while at most half of
  // what they took was taken back.
  size_t scanned_ = 0, taken_back_ = 0;
  // Per queue: where its run begins (== its cursor without one), and its
  // index in runs_ (-1 without one).
  std::vector<size_t> run_begin_;
  std::vector<int32_t> run_of_queue_;
  std::vector<SpecRun> runs_;
};

}  // namespace

bool EntryLess(const QueueEntry& a, const QueueEntry& b) {
  return std::tie(a.neg_priority, a.submit_time, a.id) <
         std::tie(b.neg_priority, b.submit_time, b.id);
}

int32_t ClassTable::ClassOf(const Snapshot& s, const PolicyConfig& config,
                            const PendingJob& job) {
  const Queue& queue = s.queues[job.queue];
  // The candidate flavors depend on the queue, the spot policy, the GPUs and
  // the pricing inputs only: computed once per such combination.
  const PricingKey pricing = {job.queue,
                              job.spot_policy,
                              job.worker.gpus * job.workers,
                              job.expected_runtime_micros,
                              job.time_limit_micros,
                              job.can_checkpoint,
                              job.checkpoint_interval_micros};
  auto [known, added] = list_of_pricing_.try_emplace(pricing, 0);
  if (added) {
    std::vector<FlavorId> flavors = CandidateFlavors(s, job, config);
    // Jobs with no candidate flavor are told which spot policy excluded
    // them: a negative id per policy.
    int32_t id = -1 - static_cast<int32_t>(job.spot_policy);
    if (!flavors.empty()) {
      auto [it, inserted] = list_ids_.try_emplace(
          flavors, static_cast<int32_t>(flavor_lists_.size()));
      if (inserted) flavor_lists_.push_back(std::move(flavors));
      id = it->second;
    }
    known->second = id;
  }
  int32_t list = known->second;
  // Preemption rules compare priorities (and, for LowerOrNewerEqualPriority,
  // start and submit times), so there the class also holds them; so does
  // the borrowing hold (hold_borrowing_for_priority) compare priorities.
  const bool preempts = PreemptionEnabled(queue, config);
  const bool by_priority = preempts || config.hold_borrowing_for_priority;
  // A budget compares each flavor's expected cost.
  const bool budget = queue.budget.has_value();
  const Key key = {
      job.queue,
      job.workers,
      job.worker.gpus,
      job.worker.gpus > 0 ? job.worker.gpu_model : kAnyGpuModel,
      job.worker.cpu_millis,
      job.worker.memory_bytes,
      job.required_topology,
      list,
      budget ? job.expected_runtime_micros : 0,
      job.time_limit_micros,
      budget ? job.can_checkpoint : true,
      budget ? job.checkpoint_interval_micros : 0,
      by_priority ? s.priority_classes[job.priority_class].value : 0,
      preempts && queue.within_queue_preemption ==
                      WithinQueuePreemption::kLowerOrNewerEqualPriority
          ? job.submit_time
          : 0};
  auto [it, inserted] =
      ids_.try_emplace(key, static_cast<int32_t>(info_.size()));
  if (inserted) {
    if (list < 0) {
      // No candidate flavor: FlavorsOf() gives an (interned) empty list.
      if (empty_list_ < 0) {
        empty_list_ = static_cast<int32_t>(flavor_lists_.size());
        flavor_lists_.emplace_back();
      }
      list = empty_list_;
    }
    const WorkerKey shape = {
        job.worker.gpus,
        job.worker.gpus > 0 ? job.worker.gpu_model : kAnyGpuModel,
        job.worker.cpu_millis, job.worker.memory_bytes};
    info_.push_back({.flavors = list,
                     .shape = shape_ids_
                                  .try_emplace(shape, static_cast<int32_t>(
                                                          shape_ids_.size()))
                                  .first->second});
    PendingJob& representative = representatives_.emplace_back(job);
    representative.name.clear();
    representative.name.shrink_to_fit();
  }
  return it->second;
}

void ClassTable::clear() {
  ids_.clear();
  list_ids_.clear();
  list_of_pricing_.clear();
  flavor_lists_.clear();
  info_.clear();
  representatives_.clear();
  shape_ids_.clear();
  empty_list_ = -1;
  generation_ = NewGeneration();
}

uint64_t ClassTable::NewGeneration() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

namespace {

// s.pending[index]'s entry, its class not yet set.
QueueEntry EntryWithoutClass(const Snapshot& s, int index) {
  const PendingJob& job = s.pending[index];
  return {
      .neg_priority = -int64_t{s.priority_classes[job.priority_class].value},
      .submit_time = job.submit_time,
      .id = job.id,
      .index = index,
      .job_class = -1};
}

}  // namespace

QueueEntry MakeEntry(const Snapshot& s, const PolicyConfig& config,
                     ClassTable& classes, int index) {
  QueueEntry e = EntryWithoutClass(s, index);
  e.job_class = classes.ClassOf(s, config, s.pending[index]);
  return e;
}

void BuildQueues(const Snapshot& s, const PolicyConfig& config,
                 ClassTable& classes,
                 std::vector<std::vector<QueueEntry>>& jobs) {
  jobs.assign(s.queues.size(), {});
  for (size_t i = 0; i < s.pending.size(); ++i) {
    jobs[s.pending[i].queue].push_back(
        EntryWithoutClass(s, static_cast<int>(i)));
  }
  // Classes are numbered in queue order, so that the per-class records of
  // a queue's jobs (which a cycle reads in that order) lie close together.
  for (std::vector<QueueEntry>& queue : jobs) {
    std::sort(queue.begin(), queue.end(), EntryLess);
    for (QueueEntry& e : queue)
      e.job_class = classes.ClassOf(s, config, s.pending[e.index]);
  }
}

std::unique_ptr<CycleRunner> NewCycleRunner() {
  return std::make_unique<Engine>();
}

Decisions RunCycle(const Snapshot& s, const PolicyConfig& config,
                   const QuotaTree& running_quota,
                   const std::vector<std::vector<QueueEntry>>& jobs,
                   const ClassTable& classes) {
  Decisions out;
  Engine().Run(s, config, running_quota, jobs, classes, out);
  return out;
}

}  // namespace trainyard::scheduler::policy::internal
