#include "router/prefix_tree.h"

#include <string>

#include "gtest/gtest.h"

namespace vllm::router {
namespace {

TEST(PrefixTreeTest, EmptyTreeMatchesNothing) {
  PrefixTree tree(1000);
  EXPECT_EQ(tree.MatchLength("hello"), 0u);
  EXPECT_EQ(tree.MatchLength(""), 0u);
  EXPECT_EQ(tree.Size(), 0u);
}

TEST(PrefixTreeTest, MatchesLongestInsertedPrefix) {
  PrefixTree tree(1000);
  tree.Insert("hello world");
  EXPECT_EQ(tree.MatchLength("hello world"), 11u);
  EXPECT_EQ(tree.MatchLength("hello world and more"), 11u);
  EXPECT_EQ(tree.MatchLength("hello there"), 6u);
  EXPECT_EQ(tree.MatchLength("help"), 3u);
  EXPECT_EQ(tree.MatchLength("xyz"), 0u);
  EXPECT_EQ(tree.Size(), 11u);
}

TEST(PrefixTreeTest, SplitsEdgesAndSharesPrefixes) {
  PrefixTree tree(1000);
  tree.Insert("abcdef");
  tree.Insert("abcxyz");
  tree.Insert("abc");
  // "abc" is shared: 3 + "def" + "xyz".
  EXPECT_EQ(tree.Size(), 9u);
  EXPECT_EQ(tree.MatchLength("abcdef"), 6u);
  EXPECT_EQ(tree.MatchLength("abcxy"), 5u);
  EXPECT_EQ(tree.MatchLength("abq"), 2u);
  tree.Insert("abcdef");  // already there: no growth
  EXPECT_EQ(tree.Size(), 9u);
}

TEST(PrefixTreeTest, EvictsLeastRecentlyUsedFirst) {
  PrefixTree tree(100);
  const std::string a(40, 'a');
  const std::string b(40, 'b');
  const std::string c(40, 'c');
  tree.Insert(a);
  tree.Insert(b);
  EXPECT_EQ(tree.MatchLength(a), 40u);  // a is now more recent than b
  tree.Insert(c);                       // 120 > 100: evicts b (least recent)
  EXPECT_LE(tree.Size(), 100u);
  EXPECT_EQ(tree.MatchLength(b), 0u);
  EXPECT_EQ(tree.MatchLength(a), 40u);
  EXPECT_EQ(tree.MatchLength(c), 40u);
}

TEST(PrefixTreeTest, StaysBoundedUnderManyDistinctInserts) {
  PrefixTree tree(1000);
  for (int i = 0; i < 5000; ++i) {
    tree.Insert("prefix-" + std::to_string(i * 7919) + std::string(20, 'x'));
    ASSERT_LE(tree.Size(), 1000u);
  }
  // The newest survive.
  const std::string last = "prefix-" + std::to_string(4999 * 7919) + std::string(20, 'x');
  EXPECT_EQ(tree.MatchLength(last), last.size());
}

TEST(PrefixTreeTest, TextLargerThanTheTreeIsNotKept) {
  PrefixTree tree(10);
  tree.Insert(std::string(50, 'z'));
  EXPECT_LE(tree.Size(), 10u);
}

TEST(PrefixTreeTest, ArbitraryBytes) {
  PrefixTree tree(1000);
  const std::string bin("\0\xff\x80\0abc", 7);
  tree.Insert(bin);
  EXPECT_EQ(tree.MatchLength(bin), 7u);
  EXPECT_EQ(tree.MatchLength(std::string("\0\xff", 2)), 2u);
}

}  // namespace
}  // namespace vllm::router
