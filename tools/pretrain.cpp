// pretrain --recipe R.yaml [--set section.key=value ...] [--print-recipe]
// Loads and validates a recipe, builds tokenizer, data and model, and trains.
#include <cstdlib>
#include <iostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "data/bert_dataset.h"
#include "data/blended_dataset.h"
#include "data/gpt_dataset.h"
#include "data/tokenizer.h"
#include "kernels/cpu/cpu_features.h"
#include "megatron/config/recipe.h"
#include "megatron/core/device_memory.h"
#include "megatron/core/error.h"
#include "megatron/parallel/launch.h"
#include "megatron/parallel/mesh.h"
#include "megatron/parallel/mpi_communicator.h"
#include "megatron/training/bert_source.h"
#include "megatron/training/mock_source.h"
#include "megatron/training/trainer.h"
#if MEGATRON_WITH_CUDA
#include "megatron/backend/cuda/device.h"
#include "megatron/backend/cuda/nccl_communicator.h"
#endif

namespace {

using namespace megatron;

constexpr const char* kUsage =
    "usage: pretrain --recipe FILE.yaml [--set section.key=value ...] [--print-recipe]\n"
    "  --recipe FILE     the training recipe (YAML; may `extends:` another)\n"
    "  --set K=V         override a recipe key, e.g. --set training.train_iters=100\n"
    "  --print-recipe    print the resolved recipe and exit\n";

struct Args {
  std::string recipe;
  std::vector<std::string> overrides;
  bool print_only = false;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* flag) -> std::string {
      MT_INPUT_CHECK(i + 1 < argc, "pretrain: ", flag, " needs a value\n", kUsage);
      return argv[++i];
    };
    if (arg == "--recipe") {
      a.recipe = value("--recipe");
    } else if (arg == "--set") {
      a.overrides.push_back(value("--set"));
    } else if (arg.rfind("--set=", 0) == 0) {
      a.overrides.push_back(arg.substr(6));
    } else if (arg == "--print-recipe") {
      a.print_only = true;
    } else if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      std::exit(0);
    } else {
      throw InputError(concat("pretrain: unknown argument '", arg, "'\n", kUsage));
    }
  }
  MT_INPUT_CHECK(!a.recipe.empty(), "pretrain: --recipe is required\n", kUsage);
  return a;
}

// Adapts one split of the (blended) Megatron GPT datasets to the trainer's sample source.
class DatasetSource final : public training::SampleSource {
 public:
  explicit DatasetSource(std::shared_ptr<const data::SampleDataset> dataset)
      : dataset_(std::move(dataset)) {}
  int64_t seq_length() const override { return dataset_->seq_length(); }
  int64_t samples_per_epoch() const override { return dataset_->num_samples(); }
  void get(int64_t index, int32_t* tokens) const override { dataset_->get(index, tokens); }

 private:
  std::shared_ptr<const data::SampleDataset> dataset_;
};

using Sources = std::pair<std::shared_ptr<const training::BatchSource>,
                          std::shared_ptr<const training::BatchSource>>;

// Megatron's GPT datasets: split, index (built once by rank 0, cached), blended by weight.
Sources gpt_sources(const config::Recipe& recipe, const parallel::LaunchInfo& launch,
                    parallel::Communicator& world, std::ostream& out) {
  const auto& d = recipe.data;
  const auto& tr = recipe.training;
  data::GPTDatasetsSpec dspec;
  for (const auto& entry : d.train)
    dspec.paths_weights.emplace_back(config::resolve_path(recipe, entry.path), entry.weight);
  dspec.split = d.split;
  dspec.seq_length = recipe.model.seq_length;
  dspec.seed = tr.seed;
  dspec.num_samples = {tr.train_iters * tr.global_batch_size,
                       tr.eval_iters > 0 ? tr.eval_iters * tr.global_batch_size : 0, 0};
  dspec.cache_dir = d.cache_dir.empty() ? "" : config::resolve_path(recipe, d.cache_dir);
  dspec.is_builder = launch.world_rank == 0;
  dspec.barrier = [&] { world.barrier(); };
  dspec.log = [&](const std::string& line) { out << "[data] " << line << "\n"; };
  const data::GPTDatasets datasets = data::build_gpt_datasets(dspec);
  out << "dataset: " << datasets.train()->describe() << "\n";
  Sources s;
  s.first = std::make_shared<DatasetSource>(datasets.train());
  if (datasets.valid()) s.second = std::make_shared<DatasetSource>(datasets.valid());
  return s;
}

// Megatron's BERT datasets over one sentence-split indexed dataset (preprocess_data
// --split-sentences), split by documents. The sample mapping is cheap: every rank builds it.
Sources bert_sources(const config::Recipe& recipe, const data::Tokenizer& tokenizer,
                     std::ostream& out) {
  const auto& d = recipe.data;
  const auto& tr = recipe.training;
  MT_INPUT_CHECK(d.train.size() == 1, recipe.source_path,
                 ": data.train: BERT training takes one sentence-split dataset (got ",
                 d.train.size(), ")");
  const std::string prefix = config::resolve_path(recipe, d.train.front().path);
  auto dataset = std::make_shared<const data::IndexedDataset>(prefix);
  const auto ranges = data::split_document_ranges(d.split, dataset->num_documents());
  data::BERTDatasetConfig cfg;
  cfg.seq_length = recipe.model.seq_length;
  cfg.seed = tr.seed;
  cfg.masking_probability = d.masking_probability;
  cfg.short_seq_probability = d.short_seq_probability;
  cfg.binary_head = d.bert_binary_head;
  cfg.log = [&](const std::string& line) { out << "[data] " << line << "\n"; };
  const data::BertTokenInfo info = data::BertTokenInfo::from_tokenizer(tokenizer);
  Sources s;
  cfg.num_samples = tr.train_iters * tr.global_batch_size;
  auto train = data::BERTDataset::build(dataset, 0, ranges[0], info, cfg);
  out << "dataset: " << train->describe() << "\n";
  s.first = std::make_shared<training::BertBatchSource>(train);
  if (tr.eval_iters > 0 && ranges[1].size() > 0) {
    cfg.num_samples = tr.eval_iters * tr.global_batch_size;
    s.second = std::make_shared<training::BertBatchSource>(
        data::BERTDataset::build(dataset, 1, ranges[1], info, cfg));
  }
  return s;
}

// data.mock: synthetic samples (validation from another seed), no files.
Sources mock_sources(const config::Recipe& recipe, int64_t vocab, std::ostream& out) {
  const int64_t S = recipe.model.seq_length;
  const uint64_t seed = recipe.training.seed;
  out << "dataset: mock (synthetic " << recipe.model.arch << " samples, vocab " << vocab << ")\n";
  if (recipe.model.arch == "bert") {
    const bool nsp = recipe.data.bert_binary_head;
    return {std::make_shared<training::MockBertSource>(S, vocab, seed, nsp),
            std::make_shared<training::MockBertSource>(S, vocab, seed + 1, nsp)};
  }
  return {std::make_shared<training::MockTokenSource>(S, vocab, seed),
          std::make_shared<training::MockTokenSource>(S, vocab, seed + 1)};
}

// Discards output on ranks other than 0.
struct NullBuffer : std::streambuf {
  int overflow(int c) override { return c; }
};

int run(const Args& args, const parallel::LaunchInfo& launch) {
  config::Recipe recipe = config::load_recipe(args.recipe, args.overrides);
  NullBuffer null_buffer;
  std::ostream null_stream(&null_buffer);
  std::ostream& out = launch.world_rank == 0 ? std::cout : null_stream;
  if (args.print_only) {  // the recipe as written: a cluster layout needs no cluster to print
    out << recipe.to_yaml();
    return 0;
  }
  recipe.resolve_for_world(launch.world_size);
  out << "# resolved recipe (" << args.recipe << ")\n" << recipe.to_yaml() << std::flush;

  // One process per device: the mesh and its groups, placed by node.
  auto world = launch.world_size > 1
                   ? std::unique_ptr<parallel::Communicator>(parallel::MpiCommunicator::world())
                   : parallel::make_single_process_communicator();
  const auto& p = recipe.parallel;
  parallel::MeshSizes sizes{p.tensor, p.context, p.expert, p.data, p.pipeline, p.order};
  std::unique_ptr<parallel::Mesh> mesh =
      launch.world_size > 1 ? std::make_unique<parallel::Mesh>(sizes, *world, launch)
                            : parallel::Mesh::single_process();
  if (launch.world_size > 1) {
    out << "launch: " << launch.launcher << ", " << launch.world_size << " ranks on "
        << launch.num_nodes << " node(s)\n"
        << mesh->placement().report() << std::flush;
  }
  training::TrainerGroups groups{&mesh->world(), &mesh->tp(),        &mesh->dp(),
                                 &mesh->pp(),    &mesh->embedding(), &mesh->model()};
  // training.device: cuda: one GPU per process, picked by node-local rank, and one NCCL
  // communicator per process group the model's tensors travel through (made from the mesh's MPI
  // group, in the same order on every rank). The world group stays MPI: it carries host-side
  // control values only (stop flags, checkpoints).
  std::vector<std::unique_ptr<parallel::Communicator>> nccl_groups;
  if (recipe.training.device == "cuda") {
    MT_INPUT_CHECK(device_available(Device::CUDA), recipe.source_path,
                   ": training.device: cuda but no CUDA device is visible (or this build has no "
                   "CUDA backend: configure with -DMEGATRON_CUDA=ON)");
#if MEGATRON_WITH_CUDA
    const int gpu = cuda::select_device_for_local_rank(launch.local_rank);
    out << "device: cuda, rank 0 on GPU " << gpu << " (GPU = local rank % visible devices)\n";
    auto to_nccl = [&](parallel::Communicator* c) -> parallel::Communicator* {
      if (c == nullptr || c->size() == 1) return c;
      const auto* mpi = dynamic_cast<const parallel::MpiCommunicator*>(c);
      MT_CHECK(mpi != nullptr, "process group '", c->name(), "' is not an MPI group");
      nccl_groups.push_back(std::make_unique<cuda::NcclCommunicator>(*mpi));
      return nccl_groups.back().get();
    };
    groups.tp = to_nccl(groups.tp);
    groups.dp = to_nccl(groups.dp);
    groups.pp = to_nccl(groups.pp);
    groups.embedding = to_nccl(groups.embedding);
    groups.model = to_nccl(groups.model);
#endif
  }
  if (recipe.training.threads == 0 && std::getenv("OMP_NUM_THREADS") == nullptr)
    recipe.training.threads = parallel::default_cpu_threads(launch);

  const auto& d = recipe.data;
  data::TokenizerSpec tspec{d.tokenizer.type, config::resolve_path(recipe, d.tokenizer.vocab_file),
                            config::resolve_path(recipe, d.tokenizer.merge_file),
                            config::resolve_path(recipe, d.tokenizer.model)};
  // NullTokenizer (pre-tokenized data) only fixes the vocabulary size; mock data with
  // model.vocab_size set needs no tokenizer file either.
  std::unique_ptr<data::Tokenizer> tokenizer;
  int64_t vocab = recipe.model.vocab_size;
  if (d.tokenizer.type == "NullTokenizer") {
    vocab = d.tokenizer.vocab_size;
    out << "tokenizer: NullTokenizer (pre-tokenized data, vocab " << vocab << ")\n";
  } else if (!d.mock || vocab == 0) {
    tokenizer = data::make_tokenizer(tspec);
    out << "tokenizer: " << tokenizer->describe() << "\n";
    vocab = tokenizer->vocab_size();
  }

  std::shared_ptr<const training::BatchSource> train, valid;
  if (d.mock) {
    std::tie(train, valid) = mock_sources(recipe, vocab, out);
  } else if (recipe.model.arch == "bert") {
    MT_INPUT_CHECK(tokenizer != nullptr, recipe.source_path,
                   ": data.tokenizer.type: BERT data needs a WordPiece vocabulary "
                   "(BertWordPieceLowerCase), not NullTokenizer");
    std::tie(train, valid) = bert_sources(recipe, *tokenizer, out);
  } else {
    std::tie(train, valid) = gpt_sources(recipe, launch, *world, out);
  }
  out << "samples: train " << train->samples_per_epoch();
  if (valid) out << ", valid " << valid->samples_per_epoch();
  out << "\n";

  training::Trainer trainer(recipe, vocab, train, valid, groups, out);
  const training::TrainSummary summary = trainer.run();
  if (summary.evals.size() >= 2) {
    const double first = summary.evals.front().loss, last = summary.evals.back().loss;
    out << "validation loss " << first << " -> " << last << " (" << 100.0 * last / first
        << "% of the first)\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int code = 0;
  std::string message;
  try {
    megatron::kernels::cpu::check_compiled_isa();  // before any kernel compiled for -march runs
    megatron::parallel::MpiRuntime mpi(&argc, &argv);
    const auto& launch = mpi.info();
    try {
      return run(parse_args(argc, argv), launch);
    } catch (const megatron::InputError& e) {
      message = std::string("error: ") + e.what();
      code = 1;
    } catch (const std::exception& e) {
      message = std::string("fatal: ") + e.what();
      code = 2;
    }
    // A failure on one rank must not leave the others waiting in a collective (abort prints
    // the message with the rank).
    if (launch.world_size > 1) megatron::parallel::MpiRuntime::abort(code, message);
  } catch (const std::exception& e) {
    message = std::string("fatal: ") + e.what();
    code = 2;
  }
  std::cerr << message << "\n";
  return code;
}
