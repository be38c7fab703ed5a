// Anonymous memory reserved in address space only: pages read as zeros and
// cost nothing until first written, so a large reservation (room for many
// LoRA adapters) is paid for only as it fills. The start is aligned to a
// huge page and the kernel is asked (best effort) to back it with huge pages:
// faulting in a dozen 2 MiB pages is much cheaper than thousands of 4 KiB
// ones (on VMs the first write to a fresh small page is slow).
#pragma once

#include <cstddef>
#include <cstdint>

#include "util/result.h"

namespace graft {

// Asks the kernel (best effort) to back the whole huge pages inside
// [data, data + size) of anonymous memory with huge pages. Call it before
// the memory is first written.
void advise_huge_pages(void* data, size_t size);

class ReservedMemory {
 public:
  static constexpr size_t kHugePage = size_t(2) << 20;

  // Errors: "out_of_memory" when the address space cannot hold `bytes`.
  static Result<ReservedMemory> reserve(size_t bytes);

  ReservedMemory() = default;
  ReservedMemory(ReservedMemory&& other) noexcept;
  ReservedMemory& operator=(ReservedMemory&& other) noexcept;
  ReservedMemory(const ReservedMemory&) = delete;
  ReservedMemory& operator=(const ReservedMemory&) = delete;
  ~ReservedMemory();

  uint8_t* data() const { return data_; }  // huge-page aligned
  size_t size() const { return size_; }

  // Makes [offset, offset + n) read as zeros again, handing its whole pages
  // back to the system.
  void zero(size_t offset, size_t n);

 private:
  void* mapped_ = nullptr;  // what to unmap
  size_t mapped_bytes_ = 0;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace graft
