// The memory budget of a CPU virtual device, kept where tensors are made: torch's CPU allocator.
//
// Installed in each engine (c10::SetCPUAllocator) in front of torch's own allocator, it counts the bytes
// of every live CPU tensor storage and refuses an allocation that would take the total past the budget
// with torch's own out-of-memory error, exactly as a GPU of that size would. The engine's own memory
// (Python, libraries, gloo's buffers) is not the device's and is not counted. Bytes the engine keeps
// outside the allocator for shards (shared blocks) are charged with mgpu_budget_adjust. Built against
// the installed torch by allocator_budget.py and loaded with ctypes: plain C entry points, no Python API.
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <mutex>
#include <unordered_map>
#include <string>
#include <cstdint>

namespace {

std::atomic<int64_t> g_allocated{0};
std::atomic<int64_t> g_peak{0};
std::atomic<int64_t> g_budget{-1};
std::mutex g_lock;
std::unordered_map<void*, size_t>* g_sizes = new std::unordered_map<void*, size_t>();
c10::Allocator* g_inner = nullptr;
// Called once when an allocation would pass the budget while the last failure's frames hold memory
// (armed by held_failure.py): it lets them go (Python, through ctypes, which takes the GIL), and the
// allocation is tried again.
using ReleaseFn = void (*)();
std::atomic<ReleaseFn> g_release{nullptr};
std::atomic<int> g_armed{0};
c10::DeleterFnPtr g_inner_delete = nullptr;

void note_peak(int64_t now) {
  int64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {}
}

void budget_delete(void* ptr) {
  if (ptr == nullptr) return;
  size_t n = 0;
  {
    std::lock_guard<std::mutex> guard(g_lock);
    auto it = g_sizes->find(ptr);
    if (it != g_sizes->end()) { n = it->second; g_sizes->erase(it); }
  }
  g_allocated -= static_cast<int64_t>(n);
  g_inner_delete(ptr);
}

// Count n more bytes against the budget; false (nothing counted) when that would pass it.
bool count(int64_t n, int64_t budget, int64_t* after) {
  *after = g_allocated.fetch_add(n) + n;
  if (budget >= 0 && *after > budget && n > 0) {
    g_allocated -= n;
    return false;
  }
  return true;
}

// count(), and once more after the last failure's frames were let go, if they held memory.
bool reserve(int64_t n, int64_t budget, int64_t* after) {
  if (count(n, budget, after)) return true;
  ReleaseFn release = g_release.load();
  if (release == nullptr || g_armed.exchange(0) == 0) return false;
  release();
  return count(n, budget, after);
}

struct BudgetAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    int64_t budget = g_budget.load();
    int64_t after = 0;
    if (!reserve(static_cast<int64_t>(n), budget, &after)) {
      // formatted with snprintf, not c10::str: the iostream code c10::str puts in the shim crashed in
      // libstdc++'s locale internals (SIGSEGV under std::ostream::_M_insert<unsigned long>) when built by a
      // CXX wrapper of GCC 13.3 for torch 2.11+cu130; snprintf puts nothing of libstdc++'s in the shim
      char msg[256];
      std::snprintf(msg, sizeof msg,
          "DefaultCPUAllocator: not enough memory: you tried to allocate %zu bytes (this CPU virtual "
          "device's budget is %" PRId64 " bytes, %" PRId64 " bytes in use).",
          n, budget, after - static_cast<int64_t>(n));
      throw c10::OutOfMemoryError(
          c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, std::string(msg));
    }
    c10::DataPtr inner;
    try {
      inner = g_inner->allocate(n);
    } catch (...) {
      g_allocated -= static_cast<int64_t>(n);
      throw;
    }
    void* data = inner.get();
    if (data == nullptr) { g_allocated -= static_cast<int64_t>(n); return inner; }
    {
      std::lock_guard<std::mutex> guard(g_lock);
      (*g_sizes)[data] = n;
    }
    note_peak(after);
    inner.release_context();
    return {data, data, &budget_delete, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &budget_delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

BudgetAllocator g_allocator;

}  // namespace

extern "C" {
int mgpu_budget_install(int64_t budget) {
  if (g_inner == nullptr) {
    c10::Allocator* current = c10::GetCPUAllocator();
    if (current == &g_allocator) return 0;
    c10::DeleterFnPtr d = current->raw_deleter();
    if (d == nullptr) return -1;  // not a simple allocator: leave it alone
    g_inner = current;
    g_inner_delete = d;
    c10::SetCPUAllocator(&g_allocator, /*priority=*/100);
  }
  g_budget = budget;
  return 0;
}
void mgpu_budget_set(int64_t budget) { g_budget = budget; }
void mgpu_budget_on_oom(ReleaseFn release) { g_release = release; }
void mgpu_budget_arm(int armed) { g_armed = armed; }
int64_t mgpu_budget_allocated() { return g_allocated.load(); }
int64_t mgpu_budget_peak() { return g_peak.load(); }
void mgpu_budget_reset_peak() { g_peak = g_allocated.load(); }
int mgpu_budget_adjust(int64_t delta) {
  // bytes held outside the allocator (shard blocks) count too; refused when they would pass the budget
  int64_t budget = g_budget.load();
  if (delta <= 0) { g_allocated += delta; return 0; }
  int64_t after = 0;
  if (!reserve(delta, budget, &after)) return -1;
  note_peak(after);
  return 0;
}
}
