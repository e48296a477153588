// Lengths files: reading, writing, round trips and every malformed input.

#include <dcp/workload/embedded.hpp>
#include <dcp/workload/lengths_file.hpp>

#include <dcp_test/support.hpp>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

dcp::dataset parse(const std::string& text, const std::string& name = "test.txt") {
  std::istringstream in(text);
  return dcp::read_lengths(in, name);
}

// Renumbers ids to positions, as a lengths file does.
dcp::dataset reindexed(dcp::dataset d) {
  for (std::size_t i = 0; i < d.size(); ++i) d[i].id = static_cast<std::int64_t>(i);
  return d;
}

TEST(LengthsFile, ReadsBothFormsCommentsAndBlankLines) {
  const auto d = parse(
      "# header comment\n"
      "\n"
      "4096\n"
      "   30 920   # a 360p video\n"
      "\t7\t144\r\n"
      "   \n"
      "#only comment\n"
      "1#tight comment\n"
      "12");  // no final newline
  ASSERT_EQ(d.size(), 5u);
  EXPECT_EQ(d[0], dcp::make_sequence(0, 4096));
  EXPECT_EQ(d[1], dcp::make_sequence(1, 30, 920));
  EXPECT_EQ(d[2], dcp::make_sequence(2, 7, 144));
  EXPECT_EQ(d[3], dcp::make_sequence(3, 1));
  EXPECT_EQ(d[4], dcp::make_sequence(4, 12));
  EXPECT_EQ(parse("12").at(0), dcp::make_sequence(0, 12));
  // A UTF-8 byte order mark at the start of the file is not data; anywhere else it is.
  EXPECT_EQ(parse("\xEF\xBB\xBF" "1000\n12\n"), (dcp::dataset{dcp::make_sequence(0, 1000), dcp::make_sequence(1, 12)}));
  EXPECT_THROW((void)parse("1000\n\xEF\xBB\xBF" "12\n"), dcp::error);
}

TEST(LengthsFile, AcceptsTheLimits) {
  const std::int64_t lim = std::int64_t{1} << 40;
  const auto d = parse(std::to_string(lim) + "\n1 " + std::to_string(lim) + "\n" + std::to_string(1 << 20) + " " +
                       std::to_string(1 << 20) + "\n");
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[2].shape_tokens(), lim);
}

struct bad_case {
  std::string text;
  int line;
  std::string mentions;
};

TEST(LengthsFile, EveryMalformedInputNamesFileAndLine) {
  const std::string over = std::to_string((std::int64_t{1} << 40) + 1);
  const std::vector<bad_case> cases{
      {"100\nabc\n", 2, "'abc'"},
      {"100\n12x\n", 2, "'12x'"},
      {"1.5\n", 1, "'1.5'"},
      {"1e5\n", 1, "'1e5'"},
      {"0x10\n", 1, "'0x10'"},
      {"+5\n", 1, "'+5'"},
      {"# c\n\n1 2 3\n", 3, "third value"},
      {"1 2 3 4\n", 1, "third value"},
      {"0\n", 1, "positive"},
      {"5\n3 0\n", 2, "positive"},
      {"-7\n", 1, "positive"},
      {"1 -7\n", 1, "positive"},
      {over + "\n", 1, "2^40"},
      {"99999999999999999999999\n", 1, "out of range"},
      {"-99999999999999999999999\n", 1, "out of range"},
      {"10\n20\n2000000 2000000\n", 3, "over 2^40"},
      {"", 0, "no sequences"},
      {"# just a comment\n\n   \n", 3, "no sequences"},
  };
  for (const auto& c : cases) {
    EXPECT_DCP_ERROR((void)parse(c.text, "data/lengths.txt"), dcp::errc::parse_error,
                     "data/lengths.txt:" + std::to_string(c.line) + ":", c.mentions)
        << "input: " << c.text;
  }
}

TEST(LengthsFile, RoundTripsEmbeddedWorkloads) {
  for (const char* name : {"opensora-zipf10", "cogvideox-zipf1", "text-longtail"}) {
    const auto d = dcp::workloads::make(name, 3);
    std::stringstream io;
    dcp::write_lengths(io, d);
    EXPECT_EQ(dcp::read_lengths(io, name), reindexed(d)) << name;
  }
}

TEST(LengthsFile, RoundTripsRandomDatasets) {
  dcp::xoshiro256ss g(99);
  for (int trial = 0; trial < 50; ++trial) {
    dcp::dataset d;
    const auto n = 1 + dcp::uniform_below(g, 200);
    for (std::uint64_t i = 0; i < n; ++i) {
      // Mix 1D, 2D and extreme shapes.
      const auto t = dcp::uniform_below(g, 3) == 0 ? std::int64_t{1} : 1 + static_cast<std::int64_t>(dcp::uniform_below(g, 1000));
      const auto kind = dcp::uniform_below(g, 10);
      const std::int64_t max_s = dcp::max_shape_tokens / t;
      const std::int64_t s = kind == 0 ? max_s : 1 + static_cast<std::int64_t>(dcp::uniform_below(g, 1u << 20));
      d.push_back(dcp::make_sequence(static_cast<std::int64_t>(i), t, s));
    }
    std::stringstream io;
    dcp::write_lengths(io, d);
    ASSERT_EQ(dcp::read_lengths(io, "random"), d) << "trial " << trial;
  }
}

TEST(LengthsFile, AWrittenFileCutShortAnywhereIsAParseError) {
  dcp::dataset d;
  for (std::int64_t i = 0; i < 12; ++i)
    d.push_back(i % 3 ? dcp::make_sequence(i, 1000 + 37 * i) : dcp::make_sequence(i, 1 + i, 120 + i));
  std::ostringstream os;
  dcp::write_lengths(os, d);
  const std::string text = os.str();
  for (std::size_t cut = 0; cut < text.size(); ++cut) {
    std::istringstream in(text.substr(0, cut));
    EXPECT_DCP_ERROR((void)dcp::read_lengths(in, "cut.txt"), dcp::errc::parse_error)
        << "a file cut at byte " << cut << " of " << text.size();
  }
  std::istringstream whole(text);
  EXPECT_EQ(dcp::read_lengths(whole, "whole.txt").size(), d.size());
}

TEST(LengthsFile, WriteRejectsInvalidSequences) {
  std::ostringstream out;
  EXPECT_THROW(dcp::write_lengths(out, {dcp::make_sequence(0, 0)}), dcp::error);
  EXPECT_THROW(dcp::write_lengths(out, {dcp::make_sequence(0, -1, 4)}), dcp::error);
}

class LengthsFileOnDisk : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("dcp_lengths_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::filesystem::path dir_;
};

TEST_F(LengthsFileOnDisk, ReadsAFile) {
  const auto p = dir_ / "lengths.txt";
  {
    std::ofstream f(p);
    dcp::write_lengths(f, {dcp::make_sequence(0, 10), dcp::make_sequence(1, 3, 4)});
  }
  EXPECT_EQ(dcp::read_lengths_file(p), (dcp::dataset{dcp::make_sequence(0, 10), dcp::make_sequence(1, 3, 4)}));
}

TEST_F(LengthsFileOnDisk, ErrorsNameTheFile) {
  const auto p = dir_ / "broken.txt";
  {
    std::ofstream f(p);
    f << "10\n\n1 2 three\n";
  }
  EXPECT_DCP_ERROR((void)dcp::read_lengths_file(p), dcp::errc::parse_error, p.string() + ":3:");
  for (const auto& missing : {dir_ / "missing.txt", dir_}) {
    EXPECT_DCP_ERROR((void)dcp::read_lengths_file(missing), dcp::errc::io_error, missing.string());
  }
}

}  // namespace
