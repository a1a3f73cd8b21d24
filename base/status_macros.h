// Status plumbing shared by every folder (base/ is header-only and depends on no other folder).
//
//   VLLM_RETURN_IF_ERROR(expr);            returns expr's Status from the enclosing function
//                                          when it is not OK.
//   VLLM_ASSIGN_OR_RETURN(lhs, expr);      evaluates expr (a StatusOr<T>); on error returns its
//                                          Status, otherwise move-assigns the value to lhs
//                                          (lhs may be a declaration: `auto x`).
//   VLLM_CHECK(cond) << "message";         aborts with file:line when a broken invariant (a bug,
//   VLLM_CHECK_OK(status);                 never bad input) is detected.
#ifndef VLLM_BASE_STATUS_MACROS_H_
#define VLLM_BASE_STATUS_MACROS_H_

#include <cstdlib>
#include <iostream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define VLLM_STATUS_CONCAT_INNER(a, b) a##b
#define VLLM_STATUS_CONCAT(a, b) VLLM_STATUS_CONCAT_INNER(a, b)

#define VLLM_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::absl::Status vllm_status_ = (expr);        \
    if (!vllm_status_.ok()) return vllm_status_; \
  } while (0)

#define VLLM_ASSIGN_OR_RETURN(lhs, expr) \
  VLLM_ASSIGN_OR_RETURN_IMPL(VLLM_STATUS_CONCAT(vllm_statusor_, __LINE__), lhs, expr)
#define VLLM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

namespace vllm::internal {
// Collects a message and aborts in its destructor: the body of VLLM_CHECK.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* cond) {
    stream_ << file << ":" << line << ": CHECK failed: " << cond << " ";
  }
  [[noreturn]] ~CheckFailure() {
    std::cerr << stream_.str() << std::endl;
    std::abort();
  }
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};
}  // namespace vllm::internal

#define VLLM_CHECK(cond) \
  if (cond) {            \
  } else                 \
    ::vllm::internal::CheckFailure(__FILE__, __LINE__, #cond).stream()

#define VLLM_CHECK_OK(expr)                                                  \
  if (::absl::Status vllm_check_status_ = (expr); vllm_check_status_.ok()) { \
  } else                                                                     \
    ::vllm::internal::CheckFailure(__FILE__, __LINE__, #expr).stream()       \
        << vllm_check_status_.ToString()

#endif  // VLLM_BASE_STATUS_MACROS_H_
