#pragma once
/// \file
/// Byte counting for the profiler's peak activation memory (DESIGN section 1): a
/// `memory_counter` keeps the live and peak bytes of the allocations made through
/// `counting_allocator<T>` on the thread that installed it with a `memory_scope`.
///
/// \code
/// dcp::memory_counter counter;
/// {
///   dcp::memory_scope scope(counter);      // this thread now counts
///   std::vector<double, dcp::counting_allocator<double>> a(1000);
/// }
/// assert(counter.peak_bytes() == 8000);
/// \endcode
///
/// Activations of a host model are allocated through `counting_allocator`; parameters and
/// optimizer state (static memory) through the plain allocator. The counter is per thread so
/// the ranks of a `local_world` (one thread each) count their own memory.

#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>

namespace dcp {

/// Live and peak bytes of counted allocations.
class memory_counter {
 public:
  void add(std::size_t bytes) noexcept {
    live_ += static_cast<std::int64_t>(bytes);
    if (live_ > peak_) peak_ = live_;
  }
  void remove(std::size_t bytes) noexcept { live_ -= static_cast<std::int64_t>(bytes); }
  /// Forgets the peak: the next peak is measured from the bytes live now.
  void reset_peak() noexcept { peak_ = live_; }
  std::int64_t live_bytes() const noexcept { return live_; }
  std::int64_t peak_bytes() const noexcept { return peak_; }

  /// The counter of this thread (null when none is installed).
  static memory_counter*& current() noexcept {
    thread_local memory_counter* c = nullptr;
    return c;
  }

 private:
  std::int64_t live_ = 0;
  std::int64_t peak_ = 0;
};

/// Installs `counter` as this thread's counter for the scope's lifetime (restores the previous one).
class memory_scope {
 public:
  explicit memory_scope(memory_counter& counter) noexcept : previous_(memory_counter::current()) {
    memory_counter::current() = &counter;
  }
  memory_scope(const memory_scope&) = delete;
  memory_scope& operator=(const memory_scope&) = delete;
  ~memory_scope() { memory_counter::current() = previous_; }

 private:
  memory_counter* previous_;
};

/// A std allocator that reports its bytes to the counter it was created under (or to none).
/// Memory is returned to the counter that counted it, even on another thread.
template <class T>
struct counting_allocator {
  using value_type = T;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;

  memory_counter* counter = memory_counter::current();

  counting_allocator() noexcept = default;
  template <class U>
  counting_allocator(const counting_allocator<U>& o) noexcept : counter(o.counter) {}

  T* allocate(std::size_t n) {
    T* p = static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{alignof(T)}));
    if (counter) counter->add(n * sizeof(T));
    return p;
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (counter) counter->remove(n * sizeof(T));
    ::operator delete(p, std::align_val_t{alignof(T)});
  }

  template <class U>
  friend bool operator==(const counting_allocator& a, const counting_allocator<U>& b) noexcept {
    return a.counter == b.counter;
  }
};

}  // namespace dcp
