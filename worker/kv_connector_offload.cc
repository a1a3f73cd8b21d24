#include "worker/kv_connector_offload.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "core/kv_connector_offload.h"
#include "spdlog/spdlog.h"

namespace vllm::worker {
namespace {

// An anonymous private mapping, unmapped on destruction.
class HostBuffer {
 public:
  static absl::StatusOr<HostBuffer> Map(size_t bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(
          absl::StrCat("--kv-offloading-size: mapping the host tier's ", bytes,
                       " bytes for this rank failed: ", strerror(errno)));
    }
    return HostBuffer(static_cast<uint8_t*>(p), bytes);
  }
  HostBuffer(HostBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  HostBuffer& operator=(HostBuffer&&) = delete;
  ~HostBuffer() {
    if (data_ != nullptr) munmap(data_, bytes_);
  }
  uint8_t* data() const { return data_; }

 private:
  HostBuffer(uint8_t* data, size_t bytes) : data_(data), bytes_(bytes) {}
  uint8_t* data_;
  size_t bytes_;
};

class OffloadingConnectorWorker final : public KVConnectorWorker {
 public:
  OffloadingConnectorWorker(kv_transfer::KvCacheView view, HostBuffer buffer, int32_t num_slots,
                            kernels::Communicator* comm)
      : view_(std::move(view)),
        buffer_(std::move(buffer)),
        num_slots_(num_slots),
        slot_bytes_(view_.layout.block_bytes()),
        agreement_(comm) {}

  absl::Status BeginStep(const std::optional<kv_transfer::KVConnectorMetadata>& metadata) override {
    if (!metadata.has_value()) return absl::OkStatus();
    for (const kv_transfer::LoadSpec& load : metadata->loads) {
      agreement_.AddLoad(load.req_id);
      const absl::Status s = Load(load);
      if (!s.ok()) {
        spdlog::warn("OffloadingConnector: request {}: loading from the host tier: {}", load.req_id,
                     s.ToString());
      }
      agreement_.LoadDone(load.req_id, s.ok());
    }
    for (const kv_transfer::SaveSpec& save : metadata->saves) saves_.push_back(save);
    return absl::OkStatus();
  }

  absl::StatusOr<kv_transfer::KVConnectorOutput> EndStep() override {
    // In the scheduler's order: a slot given twice in one step ends with the later block.
    for (const kv_transfer::SaveSpec& save : saves_) {
      const absl::Status s = Save(save);
      if (!s.ok()) {  // a missed store costs a later recompute, nothing else
        spdlog::warn("OffloadingConnector: request {}: storing to the host tier: {}", save.req_id,
                     s.ToString());
      }
    }
    saves_.clear();
    return agreement_.Agree();
  }

 private:
  absl::Status CheckSlot(int32_t slot) const {
    if (slot >= 0 && slot < num_slots_) return absl::OkStatus();
    return absl::OutOfRangeError(
        absl::StrFormat("host slot %d is not in [0, %d)", slot, num_slots_));
  }
  uint8_t* SlotData(int32_t slot) const { return buffer_.data() + int64_t{slot} * slot_bytes_; }

  // Checks every block and slot before copying any.
  absl::Status CheckPairs(const std::vector<int32_t>& blocks,
                          const std::vector<int32_t>& slots) const {
    if (blocks.size() != slots.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%d blocks but %d host slots", blocks.size(), slots.size()));
    }
    for (size_t i = 0; i < blocks.size(); ++i) {
      VLLM_RETURN_IF_ERROR(kv_transfer::CheckBlockId(view_, blocks[i]));
      VLLM_RETURN_IF_ERROR(CheckSlot(slots[i]));
    }
    return absl::OkStatus();
  }

  // LoadSpec.remote_block_ids are host slots here.
  absl::Status Load(const kv_transfer::LoadSpec& load) {
    VLLM_RETURN_IF_ERROR(CheckPairs(load.local_block_ids, load.remote_block_ids));
    for (size_t i = 0; i < load.local_block_ids.size(); ++i) {
      kv_transfer::CopyBlockIn(view_, load.local_block_ids[i], SlotData(load.remote_block_ids[i]));
    }
    return absl::OkStatus();
  }

  absl::Status Save(const kv_transfer::SaveSpec& save) {
    VLLM_RETURN_IF_ERROR(CheckPairs(save.block_ids, save.host_slots));
    for (size_t i = 0; i < save.block_ids.size(); ++i) {
      kv_transfer::CopyBlockOut(view_, save.block_ids[i], SlotData(save.host_slots[i]));
    }
    return absl::OkStatus();
  }

  const kv_transfer::KvCacheView view_;
  const HostBuffer buffer_;
  const int32_t num_slots_;
  const int64_t slot_bytes_;
  RankAgreement agreement_;
  std::vector<kv_transfer::SaveSpec> saves_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<KVConnectorWorker>> MakeOffloadingConnectorWorker(
    const config::VllmConfig& config, const kv_transfer::KvCacheView& view,
    kernels::Communicator* comm) {
  VLLM_RETURN_IF_ERROR(kv_transfer::ValidateKvCacheView(view));
  const int64_t block_bytes = view.layout.block_bytes();
  // Every rank holds as many heads (kv_connector_offload.h: the scheduler sizes the tier with
  // the same product).
  VLLM_ASSIGN_OR_RETURN(const int32_t num_slots,
                        core::OffloadingNumSlots(config, block_bytes * view.layout.tp_size));
  VLLM_ASSIGN_OR_RETURN(HostBuffer buffer, HostBuffer::Map(static_cast<size_t>(num_slots) *
                                                           static_cast<size_t>(block_bytes)));
  return std::unique_ptr<KVConnectorWorker>(
      new OffloadingConnectorWorker(view, std::move(buffer), num_slots, comm));
}

}  // namespace vllm::worker
