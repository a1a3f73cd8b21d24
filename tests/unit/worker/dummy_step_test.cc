// DummyStep: the batch a backend's profile run and graph capture feed the model (written once,
// here, for both).
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/model_backend.h"

namespace vllm::worker {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;

template <typename T>
std::vector<T> V(std::span<const T> s) {
  return {s.begin(), s.end()};
}

TEST(DummyStepTest, ProfileShapeSpreadsTheTokensOverTheSequences) {
  const DummyStep d(/*num_tokens=*/10, /*num_seqs=*/3, /*max_seq_len=*/4096);
  const StepInputs& in = d.inputs();
  EXPECT_EQ(in.token_ids.size(), 10u);
  EXPECT_THAT(V(in.query_start_loc), ElementsAre(0, 4, 7, 10));  // 4, 3, 3
  EXPECT_THAT(V(in.positions), ElementsAre(0, 1, 2, 3, 0, 1, 2, 0, 1, 2));
  EXPECT_THAT(V(in.logits_indices), ElementsAre(3, 6, 9));  // each sequence's last token
  EXPECT_EQ(in.max_query_len, 4);
  EXPECT_EQ(in.max_seq_len, 4096);
  // Nothing cached or attended to.
  EXPECT_THAT(V(in.slot_mapping), Each(-1));
  EXPECT_THAT(V(in.seq_lens), ElementsAre(0, 0, 0));
  EXPECT_EQ(in.max_blocks_per_seq, 1);
  EXPECT_EQ(in.block_tables.size(), 3u);
  ASSERT_EQ(in.sampling.size(), 3u);
  EXPECT_FALSE(in.sampling[0].on_host);
  EXPECT_FLOAT_EQ(in.sampling[2].temperature, RowSampling{}.temperature);
}

TEST(DummyStepTest, GraphShapeIsOneTokenPerSequence) {
  const DummyStep d(/*num_tokens=*/4, /*num_seqs=*/4, /*max_seq_len=*/1);
  const StepInputs& in = d.inputs();
  EXPECT_THAT(V(in.query_start_loc), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_THAT(V(in.positions), ElementsAre(0, 0, 0, 0));
  EXPECT_THAT(V(in.logits_indices), ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(in.max_query_len, 1);
  EXPECT_EQ(in.max_seq_len, 1);
}

TEST(DummyStepTest, ArraysAgreeWithEachOther) {
  // The last query_start_loc is the token count; one sampling entry per logits row.
  const DummyStep d(/*num_tokens=*/7, /*num_seqs=*/2, /*max_seq_len=*/16);
  EXPECT_EQ(d.inputs().query_start_loc.back(), static_cast<int32_t>(d.inputs().token_ids.size()));
  EXPECT_EQ(d.inputs().logits_indices.size(), d.inputs().sampling.size());
}

}  // namespace
}  // namespace vllm::worker
