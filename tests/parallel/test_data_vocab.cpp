// mpirun-np: 1 2
// Token ids outside the model's real vocabulary are an error naming the data on every layout:
// under tensor parallelism (here tp = every rank) an id in the vocabulary padding or beyond
// would otherwise meet a zero embedding row and a loss term no vocabulary shard sees, and the
// run would train on in silence (at tp 1 only the cross-entropy kernel noticed the labels).
#include <gmock/gmock.h>

#include "equivalence_fixture.h"

namespace megatron {
namespace {

namespace eq = megatron::equivalence;
using megatron::parallel::testing::world;

TEST(DataVocabulary, IdsBeyondTheVocabularyAreAnErrorOnEveryLayout) {
  eq::RecipeSpec s;
  s.tp = world().size();
  s.iters = 2;
  s.warmup = 1;
  const config::Recipe r = eq::make_recipe(s);
  // Ids up to 59 for a model whose real vocabulary is eq::kVocab = 37 (padded to 128 * tp).
  auto data = std::make_shared<eq::SyntheticTokens>(eq::TokenRule{}, s.seq, 60);
  try {
    eq::train_on_world(r, data, data);
    FAIL() << "ids 37..59 must not train with a vocabulary of 37 (tp " << s.tp << ")";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("outside the model's vocabulary of 37"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("data (data.train: "));
  }
  // The same model on data within its vocabulary trains.
  auto good = std::make_shared<eq::SyntheticTokens>(eq::TokenRule{}, s.seq, eq::kVocab);
  EXPECT_EQ(eq::train_on_world(r, good, good).steps.size(), 2u);
}

}  // namespace
}  // namespace megatron
