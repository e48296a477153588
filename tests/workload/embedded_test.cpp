// The embedded workloads of DESIGN section 5 and the portable PRNG they are generated with.

#include <dcp/workload/embedded.hpp>

#include <dcp_test/support.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace wl = dcp::workloads;

// --- PRNG: fixed outputs, so a change of algorithm (or a platform difference) is caught -------

TEST(Random, SplitmixMatchesReferenceOutput) {
  // First outputs of splitmix64 seeded with 0, as published with the reference implementation.
  std::uint64_t s = 0;
  EXPECT_EQ(dcp::splitmix64(s), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(dcp::splitmix64(s), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(dcp::splitmix64(s), 0x06c45d188009454fULL);
}

TEST(Random, XoshiroIsDeterministicAndCopiesFork) {
  dcp::xoshiro256ss a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a(), b());
  EXPECT_NE(a(), c());
  dcp::xoshiro256ss d = a;
  EXPECT_EQ(d, a);
  EXPECT_EQ(d(), a());
}

TEST(Random, UniformBelowStaysInRangeAndCoversIt) {
  dcp::xoshiro256ss g(7);
  for (std::uint64_t n : {1ULL, 2ULL, 3ULL, 7ULL, 1000ULL, (1ULL << 63) + 5}) {
    std::set<std::uint64_t> seen;
    for (int i = 0; i < 2000; ++i) {
      const auto v = dcp::uniform_below(g, n);
      ASSERT_LT(v, n);
      if (n <= 7) seen.insert(v);
    }
    if (n <= 7) {
      EXPECT_EQ(seen.size(), n);
    }
  }
  EXPECT_THROW(dcp::uniform_below(g, 0), dcp::error);
}

TEST(Random, UniformAndNormalMoments) {
  dcp::xoshiro256ss g(1);
  const int n = 200000;
  double su = 0, sz = 0, szz = 0;
  for (int i = 0; i < n; ++i) {
    const double u = dcp::uniform01(g);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    su += u;
    const double z = dcp::standard_normal(g);
    ASSERT_TRUE(std::isfinite(z));
    sz += z;
    szz += z * z;
  }
  EXPECT_NEAR(su / n, 0.5, 0.005);
  EXPECT_NEAR(sz / n, 0.0, 0.01);
  EXPECT_NEAR(szz / n, 1.0, 0.02);
}

TEST(Random, PermutationIsAPermutationAndSeedDependent) {
  for (std::int64_t n : {0, 1, 2, 10, 1000}) {
    auto p = dcp::random_permutation(n, 5);
    ASSERT_EQ(static_cast<std::int64_t>(p.size()), n);
    std::sort(p.begin(), p.end());
    for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(p[static_cast<std::size_t>(i)], i);
  }
  EXPECT_EQ(dcp::random_permutation(100, 5), dcp::random_permutation(100, 5));
  EXPECT_NE(dcp::random_permutation(100, 5), dcp::random_permutation(100, 6));
  EXPECT_THROW(dcp::random_permutation(-1, 0), dcp::error);
}

TEST(Random, FisherYatesIsUniformOnThreeElements) {
  dcp::xoshiro256ss g(3);
  std::map<std::array<int, 3>, int> counts;
  const int n = 60000;
  for (int i = 0; i < n; ++i) {
    std::array<int, 3> a{0, 1, 2};
    dcp::fisher_yates(std::span<int>(a), g);
    ++counts[a];
  }
  ASSERT_EQ(counts.size(), 6u);
  for (const auto& [perm, c] : counts) EXPECT_NEAR(c, n / 6, n / 6 * 0.05) << perm[0] << perm[1] << perm[2];
}

TEST(Random, CategoricalFollowsWeights) {
  const std::array<double, 4> w{1, 0, 3, 6};
  const dcp::categorical cat{std::span<const double>(w)};
  EXPECT_DOUBLE_EQ(cat.probability(0), 0.1);
  EXPECT_DOUBLE_EQ(cat.probability(1), 0.0);
  dcp::xoshiro256ss g(11);
  std::array<int, 4> counts{};
  const int n = 100000;
  for (int i = 0; i < n; ++i) ++counts[cat(g)];
  EXPECT_EQ(counts[1], 0);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_NEAR(counts[i], n * w[i] / 10, n * 0.01) << i;

  const std::array<double, 2> bad{1, -1};
  EXPECT_THROW(dcp::categorical{std::span<const double>(bad)}, dcp::error);
  const std::array<double, 2> zero{0, 0};
  EXPECT_THROW(dcp::categorical{std::span<const double>(zero)}, dcp::error);
}

// --- the workload definitions ------------------------------------------------------------------

TEST(Workload, SpatialTokensPerResolution) {
  const std::array<std::int64_t, 5> want{9 * 16, 15 * 27, 23 * 40, 30 * 54, 45 * 80};
  for (std::size_t r = 0; r < wl::resolutions.size(); ++r) EXPECT_EQ(wl::resolutions[r].spatial_tokens(), want[r]);
}

TEST(Workload, LatentFrames) {
  EXPECT_EQ(wl::latent_frames(wl::video_family::opensora, 51), 15);
  EXPECT_EQ(wl::latent_frames(wl::video_family::opensora, 102), 30);
  EXPECT_EQ(wl::latent_frames(wl::video_family::opensora, 204), 60);
  EXPECT_EQ(wl::latent_frames(wl::video_family::opensora, 408), 120);
  EXPECT_EQ(wl::latent_frames(wl::video_family::cogvideox, 25), 7);
  EXPECT_EQ(wl::latent_frames(wl::video_family::cogvideox, 49), 13);
  EXPECT_EQ(wl::latent_frames(wl::video_family::cogvideox, 73), 19);
  EXPECT_EQ(wl::latent_frames(wl::video_family::cogvideox, 97), 25);
}

TEST(Workload, BucketsAscendWithDeterministicTies) {
  for (auto f : {wl::video_family::opensora, wl::video_family::cogvideox}) {
    const auto b = wl::video_buckets(f);
    std::set<std::pair<std::size_t, std::int64_t>> distinct;
    for (std::size_t i = 0; i < b.size(); ++i) {
      distinct.insert({b[i].resolution_index, b[i].video_frames});
      EXPECT_EQ(b[i].spatial, wl::resolutions[b[i].resolution_index].spatial_tokens());
      EXPECT_EQ(b[i].frames, wl::latent_frames(f, b[i].video_frames));
      if (i > 0) {
        EXPECT_LE(b[i - 1].shape_tokens(), b[i].shape_tokens());
        if (b[i - 1].shape_tokens() == b[i].shape_tokens()) {
          EXPECT_LT(b[i - 1].resolution_index, b[i].resolution_index);
        }
      }
    }
    EXPECT_EQ(distinct.size(), 20u);
  }
  // Open-Sora has two exact ties (24300 and 48600 tokens): the lower resolution ranks first.
  const auto o = wl::video_buckets(wl::video_family::opensora);
  EXPECT_EQ(o[0].shape_tokens(), 15 * 144);
  EXPECT_EQ(o[19].shape_tokens(), 120 * 3600);
  EXPECT_EQ(o[10], (wl::video_bucket{1, 408, 120, 405}));
  EXPECT_EQ(o[11], (wl::video_bucket{3, 102, 30, 1620}));
}

// --- generated datasets ------------------------------------------------------------------------

struct counts {
  std::int64_t videos = 0, images = 0;
};

counts count_kinds(const dcp::dataset& d) {
  counts c;
  for (const auto& s : d) (s.frames == 1 ? c.images : c.videos)++;
  return c;
}

void expect_ids_are_a_permutation(const dcp::dataset& d) {
  std::vector<std::int64_t> ids;
  for (const auto& s : d) ids.push_back(s.id);
  std::sort(ids.begin(), ids.end());
  for (std::size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(ids[i], static_cast<std::int64_t>(i));
}

TEST(Workload, VideoWorkloadSizes) {
  const std::map<std::string, std::int64_t> images{{"1", 2000}, {"10", 20000}, {"50", 100000}};
  for (const std::string family : {"opensora", "cogvideox"}) {
    for (const auto& [suffix, n_images] : images) {
      const auto d = wl::make(family + "-zipf" + suffix);
      const auto c = count_kinds(d);
      EXPECT_EQ(c.videos, 2000) << family << suffix;
      EXPECT_EQ(c.images, n_images) << family << suffix;
      expect_ids_are_a_permutation(d);
      for (const auto& s : d) ASSERT_NO_THROW(dcp::validate(s));
    }
  }
}

TEST(Workload, VideosAndImagesInterleaveAndIdsFollowGenerationOrder) {
  const auto d = wl::make("opensora-zipf10");
  // Videos were generated first: ids below 2000 are exactly the videos.
  for (const auto& s : d) EXPECT_EQ(s.frames > 1, s.id < wl::video_count) << s.id;
  // Shuffled: the first 10% of the dataset holds both kinds, in about the overall proportion.
  const dcp::dataset head(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(d.size() / 10));
  const auto c = count_kinds(head);
  EXPECT_NEAR(static_cast<double>(c.videos) / static_cast<double>(head.size()), 2000.0 / 22000.0, 0.03);
}

TEST(Workload, BucketProportionsFollowThePowerLaw) {
  // Pool several seeds: 20 buckets at 2000 draws each is too few for tight per-bucket bounds.
  for (auto f : {wl::video_family::opensora, wl::video_family::cogvideox}) {
    const auto buckets = wl::video_buckets(f);
    std::map<std::pair<std::int64_t, std::int64_t>, std::size_t> rank;
    for (std::size_t k = 0; k < buckets.size(); ++k) rank[{buckets[k].frames, buckets[k].spatial}] = k;
    std::array<std::int64_t, 20> video_counts{};
    std::array<std::int64_t, 5> image_counts{};
    std::int64_t videos = 0, images = 0;
    for (std::uint64_t seed = 0; seed < 10; ++seed) {
      for (const auto& s : wl::make(f == wl::video_family::opensora ? "opensora-zipf10" : "cogvideox-zipf10", seed)) {
        if (s.frames == 1) {
          const auto it = std::find_if(wl::resolutions.begin(), wl::resolutions.end(),
                                       [&](const wl::resolution& r) { return r.spatial_tokens() == s.spatial; });
          ASSERT_NE(it, wl::resolutions.end());
          ++image_counts[static_cast<std::size_t>(it - wl::resolutions.begin())];
          ++images;
        } else {
          const auto it = rank.find({s.frames, s.spatial});
          ASSERT_NE(it, rank.end()) << s.frames << "x" << s.spatial;
          ++video_counts[it->second];
          ++videos;
        }
      }
    }
    double total = 0;
    for (int k = 1; k <= 20; ++k) total += wl::zipf_weight(k);
    for (std::size_t k = 0; k < 20; ++k) {
      const double p = wl::zipf_weight(static_cast<std::int64_t>(k) + 1) / total;
      const double sd = std::sqrt(p * (1 - p) / static_cast<double>(videos));
      EXPECT_NEAR(static_cast<double>(video_counts[k]) / static_cast<double>(videos), p, 5 * sd) << "bucket " << k;
    }
    EXPECT_GT(video_counts[0], video_counts[19] * 20);  // (6/25)^-3 = 72x
    double itotal = 0;
    for (int r = 1; r <= 5; ++r) itotal += wl::zipf_weight(r);
    for (std::size_t r = 0; r < 5; ++r) {
      const double p = wl::zipf_weight(static_cast<std::int64_t>(r) + 1) / itotal;
      const double sd = std::sqrt(p * (1 - p) / static_cast<double>(images));
      EXPECT_NEAR(static_cast<double>(image_counts[r]) / static_cast<double>(images), p, 5 * sd) << "resolution " << r;
    }
  }
}

TEST(Workload, CogvideoxIsStoredAsFramesTimesSpatial) {
  std::set<std::int64_t> frames;
  for (const auto& s : wl::make("cogvideox-zipf1")) frames.insert(s.frames);
  EXPECT_EQ(frames, (std::set<std::int64_t>{1, 7, 13, 19, 25}));
}

TEST(Workload, TextLongtail) {
  const auto d = wl::make("text-longtail");
  ASSERT_EQ(d.size(), 20000u);
  expect_ids_are_a_permutation(d);
  std::vector<std::int64_t> n;
  double log_sum = 0, log_sq = 0;
  std::int64_t at_min = 0, at_max = 0;
  for (const auto& s : d) {
    EXPECT_EQ(s.frames, 1);
    ASSERT_GE(s.spatial, 128);
    ASSERT_LE(s.spatial, 262144);
    at_min += s.spatial == 128;
    at_max += s.spatial == 262144;
    n.push_back(s.spatial);
    const double l = std::log(static_cast<double>(s.spatial));
    log_sum += l;
    log_sq += l * l;
  }
  std::nth_element(n.begin(), n.begin() + 10000, n.end());
  EXPECT_NEAR(static_cast<double>(n[10000]), 2048, 2048 * 0.06);
  // The clipped tails: P(n < 128) = Phi(-ln 16 / 1.5) ~ 3.2%, P(n > 262144) = Phi(-ln 128 / 1.5) ~ 0.06%.
  EXPECT_NEAR(static_cast<double>(at_min) / 20000, 0.032, 0.006);
  EXPECT_GT(at_max, 0);
  EXPECT_LT(at_max, 40);
  const double mean = log_sum / 20000, var = log_sq / 20000 - mean * mean;
  EXPECT_NEAR(mean, std::log(2048.0), 0.05);
  EXPECT_NEAR(std::sqrt(var), 1.45, 0.06);  // a little below 1.5: clipping shrinks the spread
}

TEST(Workload, DeterministicFromSeed) {
  for (auto name : wl::names) {
    if (name.ends_with("50")) continue;  // same code path as zipf1/10, just larger
    const auto a = wl::make(name), b = wl::make(name, 0), c = wl::make(name, 1);
    EXPECT_EQ(a, b) << name;
    EXPECT_NE(a, c) << name;
  }
}

// Pins the generated data: any change of PRNG, sampling or construction order changes these.
std::uint64_t digest(const dcp::dataset& d) {
  std::uint64_t h = 0;
  for (const auto& s : d) {
    for (auto v : {s.id, s.frames, s.spatial}) {
      std::uint64_t x = h ^ static_cast<std::uint64_t>(v);
      h = dcp::splitmix64(x);
    }
  }
  return h;
}

TEST(Workload, GoldenPrefixes) {
  const auto o = wl::make("opensora-zipf1");
  const auto t = wl::make("text-longtail");
  std::ostringstream got;
  for (std::size_t i = 0; i < 4; ++i) got << o[i].id << ":" << o[i].frames << "x" << o[i].spatial << " ";
  for (std::size_t i = 0; i < 4; ++i) got << t[i].id << ":" << t[i].spatial << " ";
  EXPECT_EQ(got.str(), "36:30x920 2841:1x144 518:15x144 2851:1x3600 11157:4766 7860:128 15516:36068 2778:26343 ");
  EXPECT_EQ(digest(o), 0x584ed2511de9e256ULL);
  EXPECT_EQ(digest(t), 0xc090500479bb010bULL);
}

TEST(Workload, UnknownNameListsTheValidOnes) {
  for (const char* bad : {"opensora", "opensora-zipf2", "text", "", "OPENSORA-ZIPF1"}) {
    for (auto n : wl::names) EXPECT_DCP_ERROR((void)wl::make(bad), dcp::errc::invalid_argument, n) << "lists the names";
  }
  EXPECT_THROW((void)wl::default_model("opensora-zipf7"), dcp::error);
}

TEST(Workload, DefaultModels) {
  EXPECT_EQ(wl::default_model("opensora-zipf50"), "stdit3-xl");
  EXPECT_EQ(wl::default_model("cogvideox-zipf1"), "cogvideox-5b");
  EXPECT_EQ(wl::default_model("text-longtail"), "llama3-8b");
}

}  // namespace
