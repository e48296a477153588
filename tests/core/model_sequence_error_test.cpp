// Model presets and validation, sequence validation, and the error family.

#include <dcp/error.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/sequence.hpp>

#include <gtest/gtest.h>

#include "core_test_support.hpp"

#include <cstdint>
#include <sstream>
#include <string>
#include <system_error>
#include <type_traits>

namespace {

using dcp_test::message_of;

// --- model presets -------------------------------------------------------------------------------

TEST(ModelPresets, CogVideoX5B) {
  const auto m = dcp::models::cogvideox_5b();
  EXPECT_EQ(m.name, "cogvideox-5b");
  EXPECT_EQ(m.blocks, 42);
  EXPECT_EQ(m.hidden, 3072);
  EXPECT_EQ(m.heads, 48);
  EXPECT_EQ(m.mlp_width, 12288);
  EXPECT_EQ(m.mlp_matrices, 2);
  EXPECT_EQ(m.attention, dcp::attention_kind::full);
  EXPECT_EQ(m.text_tokens, 226);
  EXPECT_EQ(m.tokens_of(13, 1350), 13 * 1350 + 226);
}

TEST(ModelPresets, Stdit3XL) {
  const auto m = dcp::models::stdit3_xl();
  EXPECT_EQ(m.name, "stdit3-xl");
  EXPECT_EQ(m.blocks, 56);
  EXPECT_EQ(m.hidden, 1152);
  EXPECT_EQ(m.heads, 16);
  EXPECT_EQ(m.mlp_width, 4608);
  EXPECT_EQ(m.mlp_matrices, 2);
  EXPECT_EQ(m.attention, dcp::attention_kind::factorized_2d);
  EXPECT_EQ(m.text_tokens, 0);
}

TEST(ModelPresets, Llama3_8B) {
  const auto m = dcp::models::llama3_8b();
  EXPECT_EQ(m.name, "llama3-8b");
  EXPECT_EQ(m.blocks, 32);
  EXPECT_EQ(m.hidden, 4096);
  EXPECT_EQ(m.heads, 32);
  EXPECT_EQ(m.mlp_width, 14336);
  EXPECT_EQ(m.mlp_matrices, 3);
  EXPECT_EQ(m.attention, dcp::attention_kind::causal);
  EXPECT_EQ(m.text_tokens, 0);
  // 4 h^2 + 3 h f, times L: about 7.8 billion parameters outside the embeddings.
  EXPECT_EQ(m.block_parameters(), 4.0 * 4096 * 4096 + 3.0 * 4096 * 14336);
  EXPECT_EQ(m.parameters(), 32 * (4.0 * 4096 * 4096 + 3.0 * 4096 * 14336));
}

TEST(ModelPresets, ByNameRoundTripsAndValidates) {
  ASSERT_EQ(dcp::models::preset_names.size(), 6u);
  for (auto name : dcp::models::preset_names) {
    const auto m = dcp::models::preset(name);
    EXPECT_EQ(m.name, name);
    EXPECT_NO_THROW(dcp::validate(m)) << name;
    std::ostringstream os;
    os << m;
    EXPECT_NE(os.str().find(std::string(name)), std::string::npos) << os.str();
  }
  EXPECT_EQ(dcp::models::preset("llama3-8b"), dcp::models::llama3_8b());
  EXPECT_NE(dcp::models::preset("llama3-8b"), dcp::models::cogvideox_5b());
}

TEST(ModelPresets, UnknownNameIsAnErrorListingThePresets) {
  EXPECT_DCP_ERROR((void)dcp::models::preset("gpt-5"), dcp::errc::invalid_argument, "'gpt-5'");
  for (auto name : dcp::models::preset_names)
    EXPECT_DCP_ERROR((void)dcp::models::preset("gpt-5"), dcp::errc::invalid_argument, name) << "lists the presets";
  EXPECT_THROW((void)dcp::models::preset(""), dcp::error);
  EXPECT_THROW((void)dcp::models::preset("Llama3-8B"), dcp::error);  // names are exact
}

TEST(ModelValidation, EachBadFieldIsNamedWithItsValue) {
  struct bad {
    void (*mutate)(dcp::transformer_spec&);
    const char* needle;
  };
  const bad cases[] = {
      {[](dcp::transformer_spec& m) { m.blocks = 0; }, "blocks = 0"},
      {[](dcp::transformer_spec& m) { m.blocks = -4; }, "blocks = -4"},
      {[](dcp::transformer_spec& m) { m.hidden = 0; }, "hidden = 0"},
      {[](dcp::transformer_spec& m) { m.heads = 0; }, "heads = 0"},
      {[](dcp::transformer_spec& m) { m.heads = 7; }, "heads = 7"},  // 7 does not divide 1152
      {[](dcp::transformer_spec& m) { m.mlp_width = -1; }, "mlp_width = -1"},
      {[](dcp::transformer_spec& m) { m.mlp_matrices = 4; }, "mlp_matrices = 4"},
      {[](dcp::transformer_spec& m) { m.text_tokens = -1; }, "text_tokens = -1"},
      {[](dcp::transformer_spec& m) { m.blocks = 55; }, "55"},  // factorized_2d needs an even L
  };
  for (const auto& c : cases) {
    auto m = dcp::models::stdit3_xl();
    c.mutate(m);
    const auto msg = message_of([&] { dcp::validate(m); });
    EXPECT_NE(msg.find(c.needle), std::string::npos) << "expected '" << c.needle << "' in: " << msg;
    EXPECT_NE(msg.find("stdit3-xl"), std::string::npos) << msg;
  }
  auto odd_1d = dcp::models::cogvideox_5b();
  odd_1d.blocks = 41;  // an odd L is fine for 1D attention
  EXPECT_NO_THROW(dcp::validate(odd_1d));
}

// --- sequences -----------------------------------------------------------------------------------

TEST(SequenceValidation, PositiveShapesPass) {
  EXPECT_NO_THROW(dcp::validate(dcp::make_sequence(1, 1)));
  EXPECT_NO_THROW(dcp::validate(dcp::make_sequence(2, 408, 3600)));
  EXPECT_NO_THROW(dcp::validate(dcp::make_sequence(3, 1, dcp::max_shape_tokens)));
  const auto s = dcp::make_sequence(4, 7, 11);
  EXPECT_EQ(s.shape_tokens(), 77);
  EXPECT_EQ(dcp::make_sequence(5, 9).frames, 1);
  EXPECT_EQ(dcp::make_sequence(5, 9).spatial, 9);
}

TEST(SequenceValidation, ZeroOrNegativeLengthsNameTheSequence) {
  struct bad {
    dcp::sequence s;
    const char* needle;
  };
  const bad cases[] = {
      {dcp::make_sequence(17, 0), "sequence 17 has shape 1 x 0"},
      {dcp::make_sequence(18, -5), "sequence 18 has shape 1 x -5"},
      {dcp::make_sequence(19, 0, 100), "sequence 19 has shape 0 x 100"},
      {dcp::make_sequence(20, -2, 100), "sequence 20 has shape -2 x 100"},
      {dcp::make_sequence(-3, 4, 0), "sequence -3 has shape 4 x 0"},
  };
  for (const auto& c : cases) {
    EXPECT_DCP_ERROR(dcp::validate(c.s), dcp::errc::invalid_argument, c.needle);
  }
}

TEST(SequenceValidation, ShapesBeyondTheTokenLimitAreRejected) {
  const auto msg = message_of([] { dcp::validate(dcp::make_sequence(9, 2, dcp::max_shape_tokens)); });
  EXPECT_NE(msg.find("sequence 9"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2^40"), std::string::npos) << msg;
  // Overflowing T * S must be caught without computing it.
  EXPECT_THROW(dcp::validate(dcp::make_sequence(10, std::int64_t{1} << 40, std::int64_t{1} << 40)), dcp::error);
}

// --- errors --------------------------------------------------------------------------------------

static_assert(std::is_base_of_v<std::system_error, dcp::error>);
static_assert(std::is_error_code_enum_v<dcp::errc>);

TEST(Errors, DcpCategoryNamesEveryCondition) {
  EXPECT_STREQ(dcp::dcp_category().name(), "dcp");
  const dcp::errc all[] = {dcp::errc::invalid_argument, dcp::errc::infeasible, dcp::errc::parse_error,
                           dcp::errc::io_error,         dcp::errc::mismatch,   dcp::errc::timeout,
                           dcp::errc::aborted,          dcp::errc::unsupported};
  for (auto e : all) {
    const std::error_code ec = e;  // implicit: errc is an error code enum
    EXPECT_EQ(&ec.category(), &dcp::dcp_category());
    EXPECT_NE(ec.message(), "unknown dcp error") << static_cast<int>(e);
    EXPECT_FALSE(ec.message().empty());
    EXPECT_TRUE(static_cast<bool>(ec));
  }
  EXPECT_EQ(dcp::make_error_code(dcp::errc::infeasible).message(), "infeasible sequence");
  EXPECT_EQ(dcp::dcp_category().message(999), "unknown dcp error");
}

TEST(Errors, ForeignCategoriesCarryTheLibraryCode) {
  EXPECT_STREQ(dcp::mpi_category().name(), "mpi");
  EXPECT_STREQ(dcp::nccl_category().name(), "nccl");
  EXPECT_STREQ(dcp::cuda_category().name(), "cuda");
  EXPECT_EQ(dcp::nccl_category().message(5), "nccl error 5");
  const dcp::error e(std::error_code(2, dcp::cuda_category()), "cudaMalloc failed");
  EXPECT_EQ(&e.code().category(), &dcp::cuda_category());
  EXPECT_EQ(e.code().value(), 2);
  EXPECT_NE(std::string(e.what()).find("cudaMalloc failed"), std::string::npos);
  // Distinct categories never compare equal, even with the same value.
  EXPECT_NE(std::error_code(1, dcp::mpi_category()), std::error_code(1, dcp::nccl_category()));
  EXPECT_NE(std::error_code(1, dcp::mpi_category()), dcp::make_error_code(dcp::errc::invalid_argument));
}

TEST(Errors, CheckThrowsWithTheMessageAndBuildsItOnlyOnFailure) {
  int built = 0;
  dcp::check(true, dcp::errc::timeout, [&] {
    ++built;
    return std::string("never");
  });
  EXPECT_EQ(built, 0);
  try {
    dcp::check(false, dcp::errc::timeout, [&] {
      ++built;
      return std::string("peer 3 did not answer in 5 s");
    });
    FAIL() << "no error";
  } catch (const std::system_error& e) {  // catchable as the standard base
    EXPECT_EQ(built, 1);
    EXPECT_EQ(e.code(), dcp::errc::timeout);
    EXPECT_NE(std::string(e.what()).find("peer 3 did not answer in 5 s"), std::string::npos);
  }
}

}  // namespace
