// Every recipe rule: wrong types, unknown keys, impossible values, missing keys and world-size
// checks each give an InputError naming the file the key came from, the key path and the value.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "megatron/config/recipe.h"
#include "tests/config/recipe_test_util.h"

namespace megatron::config {
namespace {

using testing::fixture;
using ::testing::HasSubstr;
using testing::input_error;
using testing::ScratchDir;

struct Rule {
  const char* name;   // also the recipe file name: <name>.yaml
  const char* yaml;   // merged over tests/fixtures/recipes/valid_base.yaml
  const char* key;    // full key path expected in the message
  const char* value;  // the bad value (or the arithmetic that shows it) expected in the message
};

void PrintTo(const Rule& r, std::ostream* os) { *os << r.name; }

const Rule kRules[] = {
    // wrong types
    {"int_word", "model: {num_layers: four}", "model.num_layers", "'four'"},
    {"int_fraction", "model: {num_layers: 1.5}", "model.num_layers", "'1.5'"},
    {"int_quoted", "model: {hidden_size: \"64\"}", "model.hidden_size", "the string \"64\""},
    {"int_overflow", "model: {num_layers: 99999999999999999999}", "model.num_layers",
     "out of range"},
    {"int_list", "model: {num_layers: [4]}", "model.num_layers", "a list"},
    {"float_word", "optimizer: {lr: fast}", "optimizer.lr", "'fast'"},
    {"bool_word", "model: {tie_embeddings: maybe}", "model.tie_embeddings", "'maybe'"},
    {"string_map", "model: {arch: {a: 1}}", "model.arch", "a map"},
    {"seed_negative", "training: {seed: -1}", "training.seed", "'-1'"},
    {"data_word", "parallel: {data: many}", "parallel.data", "'many'"},
    {"layers_item", "parallel: {pipeline_layers: [1, x]}", "parallel.pipeline_layers[1]", "'x'"},
    {"layers_scalar", "parallel: {pipeline_layers: 4}", "parallel.pipeline_layers", "'4'"},
    {"weight_word", "data: {train: [{path: a, weight: heavy}]}", "data.train[0].weight", "'heavy'"},
    {"train_map", "data: {train: {path: a}}", "data.train", "a map"},
    {"train_item_list", "data: {train: [[a]]}", "data.train[0]", "a list"},
    {"section_scalar", "model: 3", "model", "'3'"},
    {"schedule_scalar", "optimizer: {schedule: cosine}", "optimizer.schedule", "'cosine'"},
    // unknown keys and sections
    {"unknown_key", "model: {num_layer: 4}", "model.num_layer", "did you mean 'num_layers'"},
    {"unknown_section", "modell: {num_layers: 4}", "modell", "did you mean 'model'"},
    {"unknown_nested", "optimizer: {schedule: {warmup: 3}}", "optimizer.schedule.warmup",
     "unknown key"},
    {"unknown_tokenizer_key", "data: {tokenizer: {typ: x}}", "data.tokenizer.typ",
     "did you mean 'type'"},
    {"unknown_train_key", "data: {train: [{path: a, wieght: 2}]}", "data.train[0].wieght",
     "did you mean 'weight'"},
    // model
    {"layers_negative", "model: {num_layers: -2}", "model.num_layers", "got -2"},
    {"hidden_zero", "model: {hidden_size: 0}", "model.hidden_size", "got 0"},
    {"heads_zero", "model: {num_attention_heads: 0}", "model.num_attention_heads", "got 0"},
    {"seq_zero", "model: {seq_length: 0}", "model.seq_length", "got 0"},
    {"groups_negative", "model: {num_query_groups: -1}", "model.num_query_groups", "got -1"},
    {"interpolation_zero",
     "model: {position_embedding: rope, rotary_seq_len_interpolation_factor: 0}",
     "model.rotary_seq_len_interpolation_factor", "must be > 0 (got 0)"},
    {"interpolation_learned", "model: {rotary_seq_len_interpolation_factor: 2}",
     "model.rotary_seq_len_interpolation_factor", "needs position_embedding: rope"},
    {"interpolation_and_llama3",
     "model: {position_embedding: rope, rope_scaling: true, rotary_seq_len_interpolation_factor: "
     "2}",
     "model.rotary_seq_len_interpolation_factor", "exclusive"},
    {"yarn_factor", "model: {position_embedding: yarn, yarn_original_max_position_embeddings: 64}",
     "model.yarn_rotary_scaling_factor", "must be >= 1 with position_embedding: yarn (got 0)"},
    {"yarn_original", "model: {position_embedding: yarn, yarn_rotary_scaling_factor: 4}",
     "model.yarn_original_max_position_embeddings", "must be > 0"},
    {"yarn_beta",
     "model: {position_embedding: yarn, yarn_rotary_scaling_factor: 4, "
     "yarn_original_max_position_embeddings: 64, yarn_beta_slow: 0}",
     "model.yarn_beta_fast", "must be > 0 (got 32, 0)"},
    {"yarn_mscale",
     "model: {position_embedding: yarn, yarn_rotary_scaling_factor: 4, "
     "yarn_original_max_position_embeddings: 64, yarn_mscale: -1}",
     "model.yarn_mscale", "must be > 0 or null (got -1)"},
    {"yarn_with_llama3",
     "model: {position_embedding: yarn, yarn_rotary_scaling_factor: 4, "
     "yarn_original_max_position_embeddings: 64, rope_scaling: true}",
     "model.rope_scaling", "needs position_embedding: rope"},
    {"window_size_length", "model: {window_size: [4]}", "model.window_size",
     "must be [left, right] (got 1 values)"},
    {"window_size_right", "model: {window_size: [4, 1]}", "model.window_size",
     "right must be 0: a sliding window over earlier keys only (got 1)"},
    {"window_size_left", "model: {window_size: [-2, 0]}", "model.window_size",
     "left must be >= 0, or -1 for no limit (got -2)"},
    {"window_size_bert", "model: {arch: bert, window_size: [4, 0]}", "model.window_size",
     "needs a causal model"},
    {"yarn_keys_without_yarn", "model: {position_embedding: rope, yarn_rotary_scaling_factor: 4}",
     "model.yarn_rotary_scaling_factor", "needs position_embedding: yarn"},
    {"yarn_odd_head",
     "model: {position_embedding: yarn, yarn_rotary_scaling_factor: 4, "
     "yarn_original_max_position_embeddings: 64, kv_channels: 7}",
     "model.kv_channels", "must be even"},
    {"ffn_negative", "model: {ffn_hidden_size: -4}", "model.ffn_hidden_size", "got -4"},
    {"heads_groups", "model: {num_attention_heads: 4, num_query_groups: 3}",
     "model.num_query_groups", "4 % 3"},
    {"hidden_heads", "model: {hidden_size: 66, num_attention_heads: 4}", "model.hidden_size",
     "66 % 4"},
    {"rope_scaling_bounds",
     "model: {rope_scaling_low_freq_factor: 4, rope_scaling_high_freq_factor: 2}",
     "model.rope_scaling_high_freq_factor", "must be > model.rope_scaling_low_freq_factor > 0"},
    {"rope_scaling_original", "model: {rope_scaling_original_max_position_embeddings: 0}",
     "model.rope_scaling_original_max_position_embeddings", "must be > 0"},
    {"rope_dynamic_small", "model: {position_embedding: rope, rope_dynamic_factor: 0.5}",
     "model.rope_dynamic_factor", "must be >= 1, or 0 for none (got 0.5)"},
    {"rope_dynamic_with_llama3",
     "model: {position_embedding: rope, rope_dynamic_factor: 2, rope_scaling: true}",
     "model.rope_dynamic_factor", "needs position_embedding: rope without another"},
    {"longrope_count",
     "model: {position_embedding: rope, longrope_short_factor: [1, 1], "
     "longrope_long_factor: [2, 2], longrope_original_max_position_embeddings: 8}",
     "model.longrope_short_factor", "must hold rotary dims / 2 = 8 values"},
    {"longrope_learned",
     "model: {longrope_short_factor: [1, 1, 1, 1], longrope_long_factor: [2, 2, 2, 2], "
     "longrope_original_max_position_embeddings: 8}",
     "model.longrope_short_factor", "needs position_embedding: rope"},
    {"longrope_original_alone", "model: {longrope_original_max_position_embeddings: 8}",
     "model.longrope_original_max_position_embeddings", "needs model.longrope_short_factor"},
    {"longrope_factor_word", "model: {longrope_long_factor: [1, wide]}",
     "model.longrope_long_factor[1]", "expected a number"},
    {"qk_layernorm_layernorm", "model: {qk_layernorm: true, normalization: layernorm}",
     "model.qk_layernorm", "needs normalization: RMSNorm"},
    {"qk_layernorm_word", "model: {qk_layernorm: maybe}", "model.qk_layernorm", "'maybe'"},
    {"kv_channels_word", "model: {kv_channels: wide}", "model.kv_channels", "'wide'"},
    {"kv_channels_negative", "model: {kv_channels: -8}", "model.kv_channels", "got -8"},
    {"kv_channels_huge", "model: {kv_channels: 100000}", "model.kv_channels", "got 100000"},
    {"kv_channels_odd_rope", "model: {position_embedding: rope, kv_channels: 15}",
     "model.kv_channels", "must be even with position_embedding: rope (got 15)"},
    {"rope_odd_head_dim",
     "model: {hidden_size: 60, num_attention_heads: 4, position_embedding: "
     "rope}",
     "model.position_embedding", "hidden_size / num_attention_heads = 15"},
    {"normalization", "model: {normalization: batchnorm}", "model.normalization", "'batchnorm'"},
    {"activation", "model: {activation: relu}", "model.activation", "'relu'"},
    {"position", "model: {position_embedding: alibi}", "model.position_embedding", "'alibi'"},
    {"attention_backend", "model: {attention_backend: cudnn}", "model.attention_backend",
     "'cudnn'"},
    {"arch", "model: {arch: t5}", "model.arch", "'t5'"},
    {"hidden_dropout", "model: {hidden_dropout: 1.0}", "model.hidden_dropout", "got 1)"},
    {"attention_dropout", "model: {attention_dropout: -0.1}", "model.attention_dropout",
     "got -0.1"},
    {"seq_over_positions", "model: {seq_length: 64, max_position_embeddings: 32}",
     "model.seq_length", "64 > 32"},
    {"rope_odd_head", "model: {position_embedding: rope, hidden_size: 60, num_attention_heads: 4}",
     "model.position_embedding", "= 15"},
    {"rope_theta", "model: {rope_theta: 0}", "model.rope_theta", "got 0"},
    {"epsilon", "model: {layernorm_epsilon: 0}", "model.layernorm_epsilon", "got 0"},
    {"init_std", "model: {init_method_std: -0.02}", "model.init_method_std", "got -0.02"},
    {"vocab_negative", "model: {vocab_size: -5}", "model.vocab_size", "got -5"},
    {"vocab_divisor", "model: {make_vocab_size_divisible_by: 0}",
     "model.make_vocab_size_divisible_by", "got 0"},
    {"topk", "model: {num_experts: 4, moe_router_topk: 5}", "model.moe_router_topk", "got 5"},
    {"experts_negative", "model: {num_experts: -2}", "model.num_experts", "got -2"},
    {"moe_on_bert", "model: {arch: bert, num_experts: 4}", "model.num_experts", "arch bert"},
    {"moe_ffn_negative", "model: {num_experts: 4, moe_ffn_hidden_size: -8}",
     "model.moe_ffn_hidden_size", "got -8"},
    {"moe_layer_freq_zero", "model: {num_experts: 4, moe_layer_freq: 0}", "model.moe_layer_freq",
     "got 0"},
    {"moe_layer_freq_length", "model: {num_layers: 2, num_experts: 4, moe_layer_freq: [1, 0, 1]}",
     "model.moe_layer_freq", "3 entries for 2 layers"},
    {"moe_layer_freq_value", "model: {num_layers: 2, num_experts: 4, moe_layer_freq: [1, 2]}",
     "model.moe_layer_freq[1]", "got 2"},
    {"moe_layer_freq_none", "model: {num_layers: 2, num_experts: 4, moe_layer_freq: [0, 0]}",
     "model.moe_layer_freq", "selects no layer"},
    {"moe_layer_freq_type", "model: {num_experts: 4, moe_layer_freq: every}",
     "model.moe_layer_freq", "expected an integer or a list"},
    {"no_rope_negative", "model: {position_embedding: rope, no_rope_freq: -1}",
     "model.no_rope_freq", "got -1"},
    {"no_rope_length", "model: {num_layers: 2, position_embedding: rope, no_rope_freq: [1, 0, 1]}",
     "model.no_rope_freq", "3 entries for 2 layers"},
    {"no_rope_value", "model: {num_layers: 2, position_embedding: rope, no_rope_freq: [0, 2]}",
     "model.no_rope_freq[1]", "got 2"},
    {"rotary_percent_range", "model: {position_embedding: rope, rotary_percent: 1.5}",
     "model.rotary_percent", "must be in (0, 1]"},
    {"rotary_percent_learned", "model: {position_embedding: learned, rotary_percent: 0.5}",
     "model.rotary_percent", "needs position_embedding: rope or yarn"},
    {"rotary_percent_odd",
     "model: {position_embedding: rope, hidden_size: 40, num_attention_heads: 4, rotary_percent: "
     "0.5}",
     "model.rotary_percent", "= 5 rotary dimensions: it must be even"},
    {"window_skip_without_window", "model: {window_attn_skip_freq: 2}",
     "model.window_attn_skip_freq", "it needs model.window_size"},
    {"window_skip_length",
     "model: {num_layers: 2, window_size: [3, 0], window_attn_skip_freq: [1, 0, 1]}",
     "model.window_attn_skip_freq", "3 entries for 2 layers"},
    {"window_skip_value",
     "model: {num_layers: 2, window_size: [3, 0], window_attn_skip_freq: [1, 3]}",
     "model.window_attn_skip_freq[1]", "got 3"},
    {"no_rope_learned", "model: {position_embedding: learned, no_rope_freq: 2}",
     "model.no_rope_freq", "needs position_embedding: rope or yarn"},
    {"moe_score", "model: {num_experts: 4, moe_router_score_function: relu}",
     "model.moe_router_score_function", "'relu'"},
    {"moe_balancing", "model: {num_experts: 4, moe_router_load_balancing_type: sinkhorn}",
     "model.moe_router_load_balancing_type", "'sinkhorn'"},
    {"moe_groups_divide",
     "model: {num_experts: 6, moe_router_num_groups: 4, moe_router_group_topk: 1}",
     "model.num_experts", "6 % 4"},
    {"moe_group_topk",
     "model: {num_experts: 8, moe_router_num_groups: 4, moe_router_group_topk: 5}",
     "model.moe_router_group_topk", "got 5 with 4 groups"},
    {"moe_group_topk_missing", "model: {num_experts: 8, moe_router_group_topk: 2}",
     "model.moe_router_num_groups", "got 0"},
    {"moe_groups_topk_split",
     "model: {num_experts: 8, moe_router_topk: 3, moe_router_num_groups: 4, "
     "moe_router_group_topk: 2}",
     "model.moe_router_topk", "topk 3, group_topk 2"},
    {"moe_scaling", "model: {num_experts: 4, moe_router_topk_scaling_factor: 0}",
     "model.moe_router_topk_scaling_factor", "got 0"},
    {"moe_aux_coeff", "model: {num_experts: 4, moe_aux_loss_coeff: -0.1}",
     "model.moe_aux_loss_coeff", "got -0.1"},
    {"moe_z_coeff", "model: {num_experts: 4, moe_z_loss_coeff: -1}", "model.moe_z_loss_coeff",
     "got -1"},
    {"moe_bias_softmax", "model: {num_experts: 4, moe_router_enable_expert_bias: true}",
     "model.moe_router_enable_expert_bias", "sigmoid"},
    {"moe_capacity", "model: {num_experts: 4, moe_expert_capacity_factor: 0}",
     "model.moe_expert_capacity_factor", "got 0"},
    {"moe_pad_without_capacity", "model: {num_experts: 4, moe_pad_expert_input_to_capacity: true}",
     "model.moe_pad_expert_input_to_capacity", "capacity_factor"},
    {"moe_drop_policy", "model: {num_experts: 4, moe_token_drop_policy: random}",
     "model.moe_token_drop_policy", "'random'"},
    {"vocab_below_tokenizer",
     "model: {vocab_size: 100}\ndata: {tokenizer: {type: NullTokenizer, vocab_size: 200}}",
     "model.vocab_size", "100 < 200"},
    // parallel
    {"tensor_zero", "parallel: {tensor: 0}", "parallel.tensor", "got 0"},
    {"pipeline_negative", "parallel: {pipeline: -1}", "parallel.pipeline", "got -1"},
    {"expert_zero", "parallel: {expert: 0}", "parallel.expert", "got 0"},
    {"context_zero", "parallel: {context: 0}", "parallel.context", "got 0"},
    {"data_negative", "parallel: {data: -1}", "parallel.data", "got -1"},
    {"heads_tensor", "model: {num_attention_heads: 4}\nparallel: {tensor: 3}",
     "model.num_attention_heads", "must be divisible by parallel.tensor (got 4 % 3"},
    {"groups_tensor", "model: {num_attention_heads: 8, num_query_groups: 2}\nparallel: {tensor: 4}",
     "model.num_query_groups", "2 % 4"},
    {"ffn_tensor", "model: {ffn_hidden_size: 102}\nparallel: {tensor: 4}", "model.ffn_hidden_size",
     "102 % 4"},
    {"layers_pipeline", "model: {num_layers: 5}\nparallel: {pipeline: 2}", "model.num_layers",
     "5 % 2"},
    {"layers_virtual", "model: {num_layers: 4}\nparallel: {pipeline: 2, virtual_pipeline: 4}",
     "model.num_layers", "4 % 8"},
    {"pipeline_layers_sum",
     "model: {num_layers: 4}\nparallel: {pipeline: 2, pipeline_layers: [1, 2]}",
     "parallel.pipeline_layers", "1+2 = 3"},
    {"pipeline_layers_length", "parallel: {pipeline: 2, pipeline_layers: [4]}",
     "parallel.pipeline_layers", "got 1 entries"},
    {"pipeline_layers_negative", "parallel: {pipeline: 2, pipeline_layers: [5, -1]}",
     "parallel.pipeline_layers", "got -1"},
    {"virtual_without_pipeline", "parallel: {virtual_pipeline: 2}", "parallel.virtual_pipeline",
     "virtual_pipeline 2 with pipeline 1"},
    {"virtual_zero", "parallel: {virtual_pipeline: 0}", "parallel.virtual_pipeline", "got 0"},
    {"order", "parallel: {order: tp-dp-pp}", "parallel.order", "'tp-dp-pp'"},
    {"order_repeat", "parallel: {order: tp-tp-ep-dp-pp}", "parallel.order", "'tp-tp-ep-dp-pp'"},
    {"sequence_parallel", "model: {seq_length: 30}\nparallel: {tensor: 4, sequence_parallel: true}",
     "model.seq_length", "30 % 4"},
    {"context_seq", "model: {seq_length: 30}\nparallel: {context: 2}", "model.seq_length",
     "30 % 4"},
    {"context_comm", "parallel: {context: 2, cp_comm_type: ring}", "parallel.cp_comm_type",
     "'ring'"},
    {"context_bert", "model: {arch: bert}\nparallel: {context: 2}", "parallel.context",
     "not bert (got parallel.context 2)"},
    {"context_unfused", "model: {attention_backend: unfused}\nparallel: {context: 2}",
     "model.attention_backend", "unfused with parallel.context 2"},
    {"context_fused", "model: {attention_backend: fused}\nparallel: {context: 2}",
     "model.attention_backend", "fused with parallel.context 2"},
    {"parallel_residual_bert", "model: {arch: bert, parallel_residual: true}",
     "model.parallel_residual", "not bert's post-norm layers"},
    {"fused_on_cpu", "model: {attention_backend: fused}\ntraining: {device: cpu}",
     "model.attention_backend", "needs training.device: cuda"},
    {"sinks_unfused", "model: {softmax_type: learnable, attention_backend: unfused}",
     "model.attention_backend", "unfused has no attention sinks"},
    {"sinks_context_a2a",
     "model: {softmax_type: off-by-one}\nparallel: {context: 2, cp_comm_type: a2a}",
     "parallel.cp_comm_type", "a2a keeps no row statistics of a rank's own heads"},
    {"sinks_name", "model: {softmax_type: sinks}", "model.softmax_type", "'sinks'"},
    {"topk_ratio_zero", "parallel: {grad_compression: topk, topk_ratio: 0}", "parallel.topk_ratio",
     "must be in (0, 1] (got 0)"},
    {"topk_ratio_above_one", "parallel: {grad_compression: topk, topk_ratio: 1.5}",
     "parallel.topk_ratio", "must be in (0, 1] (got 1.5)"},
    {"topk_sharded", "parallel: {grad_compression: topk, data_parallel_sharding_strategy: optim}",
     "parallel.grad_compression", "use parallel.data_parallel_sharding_strategy: no_shard"},
    {"compression_name", "parallel: {grad_compression: onebit}", "parallel.grad_compression",
     "'onebit'"},
    {"topk_warmup_negative", "parallel: {grad_compression: topk, topk_warmup_iters: -1}",
     "parallel.topk_warmup_iters", "must be >= 0 (got -1)"},
    {"onebit_no_freeze", "optimizer: {type: onebit_adam}", "optimizer.freeze_step",
     "onebit_adam needs its full-precision warm-up length, at least 1 and below "
     "training.train_iters"},
    {"onebit_freeze_beyond_run", "optimizer: {type: onebit_adam, freeze_step: 10}",
     "optimizer.freeze_step", "below training.train_iters 10 (got 10)"},
    {"qwz_without_zero3",
     "parallel: {zero_quantized_weights: true, data_parallel_sharding_strategy: optim_grads}",
     "parallel.zero_quantized_weights", "which only optim_grads_params has"},
    {"qgz_without_sharded_grads", "parallel: {zero_quantized_gradients: true}",
     "parallel.zero_quantized_gradients", "(got data_parallel_sharding_strategy no_shard)"},
    {"hpz", "parallel: {zero_hpz_partition_size: 8}", "parallel.zero_hpz_partition_size",
     "not implemented yet: leave it at 1 (got 8)"},
    {"onebit_freeze_in_warmup",
     "optimizer: {type: onebit_adam, freeze_step: 2, schedule: {warmup_iters: 3}}",
     "optimizer.freeze_step", "must be at least optimizer.schedule.warmup_iters 3 (got 2)"},
    {"freeze_without_onebit", "optimizer: {freeze_step: 5}", "optimizer.freeze_step",
     "is onebit_adam's (got 5 with optimizer.type: adamw)"},
    {"onebit_sharded",
     "optimizer: {type: onebit_adam, freeze_step: 2}\nparallel: {data_parallel_sharding_strategy: "
     "optim_grads}",
     "optimizer.type", "which the sharding strategy optim_grads splits over the ranks"},
    {"onebit_fp16", "optimizer: {type: onebit_adam, freeze_step: 2}\ntraining: {precision: fp16}",
     "optimizer.type", "fp16's overflow check would differ between ranks"},
    {"onebit_with_topk",
     "optimizer: {type: onebit_adam, freeze_step: 2}\nparallel: {grad_compression: topk}",
     "parallel.grad_compression", "onebit_adam compresses the momentum already"},
    {"zb_v_one_chunk", "parallel: {pipeline: 2, pipeline_schedule: zb_v}",
     "parallel.pipeline_schedule",
     "zb_v places two model chunks per stage in a V: set parallel.virtual_pipeline: 2 (got 1)"},
    {"zb_v_odd_layers",
     "model: {num_layers: 6}\nparallel: {pipeline: 2, virtual_pipeline: 2, pipeline_schedule: "
     "zb_v}",
     "model.num_layers",
     "must be divisible by parallel.pipeline * parallel.virtual_pipeline (got 6 % 4 = 2)"},
    {"zb_v_bert",
     "model: {arch: bert}\nparallel: {pipeline: 2, virtual_pipeline: 2, pipeline_schedule: zb_v}",
     "parallel.pipeline_schedule", "zb_v runs the decoder models (arch gpt, llama) so far"},
    {"dualpipe_v_one_chunk", "parallel: {pipeline: 2, pipeline_schedule: dualpipe_v}",
     "parallel.pipeline_schedule",
     "dualpipe_v places two model chunks per stage in a V: set parallel.virtual_pipeline: 2 (got "
     "1)"},
    {"dualpipe_v_bert",
     "model: {arch: bert}\nparallel: {pipeline: 2, virtual_pipeline: 2, pipeline_schedule: "
     "dualpipe_v}",
     "parallel.pipeline_schedule", "dualpipe_v runs the decoder models (arch gpt, llama) so far"},
    {"dualpipe_v_one_stage", "parallel: {virtual_pipeline: 2, pipeline_schedule: dualpipe_v}",
     "parallel.virtual_pipeline",
     "needs parallel.pipeline >= 2 (got virtual_pipeline 2 with "
     "pipeline 1)"},
    {"pass_times_count",
     "parallel: {pipeline: 2, pipeline_schedule: zb_h1, zero_bubble_pass_times: [1, 1]}",
     "parallel.zero_bubble_pass_times",
     "needs three times [forward, input gradient, weight gradient] (got 2 values)"},
    {"pass_times_zero",
     "parallel: {pipeline: 2, pipeline_schedule: zb_h1, zero_bubble_pass_times: [1, 0, 1]}",
     "parallel.zero_bubble_pass_times", "entries must be finite and > 0 (got 0 at index 1)"},
    {"pass_times_1f1b", "parallel: {pipeline: 2, zero_bubble_pass_times: [1, 1, 1]}",
     "parallel.zero_bubble_pass_times",
     "plans the lists of zb_h1 and zb_v; parallel.pipeline_schedule is 1f1b"},
    {"schedule_name", "parallel: {pipeline: 2, pipeline_schedule: zb_h2}",
     "parallel.pipeline_schedule", "'zb_h2'"},
    {"zb_h1_one_stage", "parallel: {pipeline_schedule: zb_h1}", "parallel.pipeline_schedule",
     "zb_h1 needs parallel.pipeline >= 2 (got 1)"},
    {"zb_h1_chunks", "parallel: {pipeline: 2, virtual_pipeline: 2, pipeline_schedule: zb_h1}",
     "parallel.pipeline_schedule",
     "zb_h1 runs one model chunk per stage: parallel.virtual_pipeline must be unset or 1 (got 2)"},
    {"one_f_one_b_chunks", "parallel: {pipeline: 2, virtual_pipeline: 2, pipeline_schedule: 1f1b}",
     "parallel.pipeline_schedule", "1f1b runs one model chunk per stage"},
    {"interleaved_one_chunk", "parallel: {pipeline: 2, pipeline_schedule: interleaved}",
     "parallel.pipeline_schedule", "interleaved needs parallel.virtual_pipeline >= 2 (got 1)"},
    {"topk_rerun", "parallel: {grad_compression: topk}\ntraining: {rerun_mode: validate}",
     "parallel.grad_compression", "training.rerun_mode validate needs grad_compression: none"},
    {"glu_offset_not_gated", "model: {activation: gelu, glu_linear_offset: 1.0}",
     "model.activation",
     "gelu is not gated: model.glu_linear_offset and "
     "activation_func_clamp_value apply to swiglu, geglu and quick_geglu"},
    {"glu_clamp_negative", "model: {activation: quick_geglu, activation_func_clamp_value: -7}",
     "model.activation_func_clamp_value", "got -7"},
    {"context_moe_etp",
     "model: {num_experts: 4}\nparallel: {context: 2, tensor: 2, expert_tensor: 1, "
     "sequence_parallel: true}",
     "parallel.expert_tensor", "not implemented with context parallelism (got parallel.context 2)"},
    {"context_a2a_heads",
     "model: {num_attention_heads: 4, seq_length: 64}\nparallel: {context: 8, cp_comm_type: a2a}",
     "model.num_attention_heads", "4 % 8"},
    {"context_a2a_groups",
     "model: {num_attention_heads: 8, num_query_groups: 2, seq_length: 64}\nparallel: {tensor: 2, "
     "context: 2, cp_comm_type: a2a}",
     "model.num_query_groups", "2 % 4"},
    {"expert_dense", "parallel: {expert: 2}", "parallel.expert", "expert 2 with num_experts 0"},
    {"experts_expert", "model: {num_experts: 3}\nparallel: {expert: 2}", "model.num_experts",
     "3 % 2"},
    {"expert_tensor_value", "model: {num_experts: 4}\nparallel: {tensor: 4, expert_tensor: 2}",
     "parallel.expert_tensor", "must be auto, 1 or parallel.tensor (got 2 with tensor 4)"},
    {"expert_tensor_without_sp", "model: {num_experts: 4}\nparallel: {tensor: 2, expert_tensor: 1}",
     "parallel.expert_tensor", "needs parallel.sequence_parallel: true"},
    {"expert_tensor_dense", "parallel: {tensor: 2, sequence_parallel: true, expert_tensor: 1}",
     "parallel.expert_tensor", "needs an MoE model"},
    {"moe_ffn_expert_tensor",
     "model: {num_experts: 4, moe_ffn_hidden_size: 30}\nparallel: {tensor: 4, expert_tensor: 4}",
     "model.moe_ffn_hidden_size", "30 % 4"},
    {"expert_tensor_zero", "parallel: {expert_tensor: -1}", "parallel.expert_tensor", "got -1"},
    {"comm_warn_negative", "parallel: {comm_warn_s: -1}", "parallel.comm_warn_s", "got -1"},
    {"comm_timeout_negative", "parallel: {comm_timeout_s: -5}", "parallel.comm_timeout_s",
     "got -5"},
    {"moe_ffn_tensor", "model: {num_experts: 4, moe_ffn_hidden_size: 30}\nparallel: {tensor: 4}",
     "model.moe_ffn_hidden_size", "30 % 4"},
    {"shared_ffn_tensor",
     "model: {num_experts: 4, moe_shared_expert_intermediate_size: 10}\nparallel: {tensor: 4}",
     "model.moe_shared_expert_intermediate_size", "10 % 4"},
    // multi-latent attention
    {"mla_learned_positions", "model: {multi_latent_attention: true}",
     "model.multi_latent_attention", "needs rotary position embeddings"},
    {"mla_v_head_dim",
     "model: {position_embedding: rope, multi_latent_attention: true, v_head_dim: 256}",
     "model.v_head_dim", "must be <= qk_head_dim + qk_pos_emb_head_dim (got 256 > 192)"},
    {"mla_groups",
     "model: {position_embedding: rope, multi_latent_attention: true, num_query_groups: 2}",
     "model.num_query_groups", "must be unset with multi_latent_attention"},
    {"mla_sinks",
     "model: {position_embedding: rope, multi_latent_attention: true, add_bias: false, "
     "softmax_type: learnable}",
     "model.softmax_type", "not implemented with multi_latent_attention"},
    {"mla_rope_odd",
     "model: {position_embedding: rope, multi_latent_attention: true, qk_pos_emb_head_dim: 5}",
     "model.qk_pos_emb_head_dim", "must be even"},
    {"mla_bias", "model: {position_embedding: rope, multi_latent_attention: true}",
     "model.multi_latent_attention", "has no model.qk_layernorm, add_bias or add_qkv_bias"},
    {"mla_lora",
     "model: {arch: llama, normalization: rmsnorm, activation: swiglu, position_embedding: rope, "
     "add_bias: false, multi_latent_attention: true}\npeft: {type: lora}",
     "peft.type", "LoRA on multi-latent attention's projections is not implemented"},
    // training
    {"micro_zero", "training: {micro_batch_size: 0}", "training.micro_batch_size", "got 0"},
    {"global_negative", "training: {global_batch_size: -8}", "training.global_batch_size",
     "got -8"},
    {"iters_zero", "training: {train_iters: 0}", "training.train_iters", "got 0"},
    {"global_micro", "training: {global_batch_size: 10, micro_batch_size: 4}",
     "training.global_batch_size", "10 % 4"},
    {"eval_iters", "training: {eval_interval: 5, eval_iters: 0}", "training.eval_iters",
     "got eval_iters 0 with eval_interval 5"},
    {"eval_interval_negative", "training: {eval_interval: -5}", "training.eval_interval", "got -5"},
    {"device", "training: {device: tpu}", "training.device", "'tpu'"},
    {"precision", "training: {precision: fp8}", "training.precision", "'fp8'"},
    {"recompute", "training: {recompute: partial}", "training.recompute", "'partial'"},
    {"exit_duration", "training: {exit_duration_minutes: 0}", "training.exit_duration_minutes",
     "got 0"},
    {"threads", "training: {threads: -1}", "training.threads", "got -1"},
    {"peak_tflops", "training: {peak_tflops: -3.5}", "training.peak_tflops", "got -3.5"},
    {"initial_loss_scale", "training: {initial_loss_scale: 0}", "training.initial_loss_scale",
     "got 0"},
    {"min_loss_scale", "training: {initial_loss_scale: 1024, min_loss_scale: 4096}",
     "training.min_loss_scale", "4096 > 1024"},
    {"loss_scale_window", "training: {loss_scale_window: 0}", "training.loss_scale_window",
     "got 0"},
    {"hysteresis", "training: {hysteresis: -1}", "training.hysteresis", "got -1"},
    {"rerun_spike_factor", "training: {rerun_spike_factor: 0.5}", "training.rerun_spike_factor",
     "got 0.5"},
    {"rerun_mode", "training: {rerun_mode: sometimes}", "training.rerun_mode", "sometimes"},
    {"error_injection_iteration", "training: {error_injection_type: transient_error}",
     "training.error_injection_iteration", "got 0"},
    {"error_injection_rank", "training: {error_injection_rank: -1}",
     "training.error_injection_rank", "got -1"},
    // optimizer
    {"lr_zero", "optimizer: {lr: 0}", "optimizer.lr", "got 0"},
    {"lr_negative", "optimizer: {lr: -1.0e-3}", "optimizer.lr", "got -0.001"},
    {"min_lr", "optimizer: {lr: 1.0e-3, min_lr: 1.0e-2}", "optimizer.min_lr", "0.01 > 0.001"},
    {"min_lr_negative", "optimizer: {min_lr: -1.0e-5}", "optimizer.min_lr", "got -1e-05"},
    {"beta1", "optimizer: {beta1: 1.0}", "optimizer.beta1", "got 1)"},
    {"beta2", "optimizer: {beta2: -0.5}", "optimizer.beta2", "got -0.5"},
    {"eps", "optimizer: {eps: 0}", "optimizer.eps", "got 0"},
    {"weight_decay", "optimizer: {weight_decay: -0.1}", "optimizer.weight_decay", "got -0.1"},
    {"clip", "optimizer: {clip_grad: -1}", "optimizer.clip_grad", "got -1"},
    // data-parallel sharding and optimizer offload
    {"sharding_unknown", "parallel: {data_parallel_sharding_strategy: zero3}",
     "parallel.data_parallel_sharding_strategy",
     "must be one of no_shard, optim, optim_grads, optim_grads_params (got 'zero3')"},
    {"sharding_contradicts_alias",
     "parallel: {data_parallel_sharding_strategy: no_shard}\noptimizer: {distributed: true}",
     "parallel.data_parallel_sharding_strategy", "no_shard contradicts optimizer.distributed"},
    {"sharding_contradicts_training_alias",
     "parallel: {data_parallel_sharding_strategy: no_shard}\n"
     "training: {use_distributed_optimizer: true}",
     "parallel.data_parallel_sharding_strategy",
     "no_shard contradicts training.use_distributed_optimizer"},
    {"instances_zero", "parallel: {num_distributed_optimizer_instances: 0}",
     "parallel.num_distributed_optimizer_instances", "got 0"},
    {"fsdp_unit_layers_zero", "parallel: {fsdp_unit_layers: 0}", "parallel.fsdp_unit_layers",
     "got 0"},
    {"instances_without_sharding", "parallel: {num_distributed_optimizer_instances: 2}",
     "parallel.num_distributed_optimizer_instances", "needs a sharding strategy"},
    {"instances_with_moe",
     "parallel: {num_distributed_optimizer_instances: 2, data_parallel_sharding_strategy: "
     "optim}\nmodel: {num_experts: 4}",
     "parallel.num_distributed_optimizer_instances", "mixture-of-experts"},
    {"offload_on_cpu", "optimizer: {offload: cpu}", "optimizer.offload",
     "with training.device: cpu the optimizer already lives in host memory"},
    {"offload_unknown", "optimizer: {offload: nvme}", "optimizer.offload",
     "must be one of none, cpu (got 'nvme')"},
    {"offload_fraction", "optimizer: {offload_fraction: 1.5}", "optimizer.offload_fraction",
     "must be in [0, 1] (got 1.5)"},
    {"optimizer_type", "optimizer: {type: lion}", "optimizer.type", "'lion'"},
    {"decay", "optimizer: {schedule: {decay: exponential}}", "optimizer.schedule.decay",
     "'exponential'"},
    {"warmup_negative", "optimizer: {schedule: {warmup_iters: -1}}",
     "optimizer.schedule.warmup_iters", "got -1"},
    {"warmup_long", "optimizer: {schedule: {warmup_iters: 20}}", "optimizer.schedule.warmup_iters",
     "20 > 10"},
    {"warmup_decay", "optimizer: {schedule: {warmup_iters: 5, decay_iters: 4}}",
     "optimizer.schedule.warmup_iters", "5 > 4"},
    {"decay_iters", "optimizer: {schedule: {decay_iters: 0}}", "optimizer.schedule.decay_iters",
     "got 0"},
    // data
    {"tokenizer_type", "data: {tokenizer: {type: WordLevel}}", "data.tokenizer.type",
     "'WordLevel'"},
    {"gpt2_merges", "data: {tokenizer: {type: GPT2BPETokenizer, vocab_file: v.json}}",
     "data.tokenizer.merge_file", "GPT2BPETokenizer (got none)"},
    {"gpt2_vocab", "data: {tokenizer: {type: GPT2BPETokenizer, merge_file: m.txt}}",
     "data.tokenizer.vocab_file", "GPT2BPETokenizer (got none)"},
    {"spm_model", "data: {tokenizer: {type: SentencePieceTokenizer}}", "data.tokenizer.model",
     "SentencePieceTokenizer (got none)"},
    {"hf_tokenizer_model", "data: {tokenizer: {type: HuggingFaceTokenizer}}",
     "data.tokenizer.model", "HuggingFaceTokenizer (got none)"},
    // Sizes no model has are refused before any product of them can overflow.
    {"absurd_hidden", "model: {hidden_size: 1000000000000}", "model.hidden_size",
     "must be <= 1048576 (got 1000000000000)"},
    {"absurd_layers", "model: {num_layers: 1000000000}", "model.num_layers",
     "must be <= 100000 (got 1000000000)"},
    {"absurd_vocab", "model: {vocab_size: 10000000000}", "model.vocab_size", "must be <="},
    {"absurd_global_batch", "training: {global_batch_size: 10000000000}",
     "training.global_batch_size", "must be <="},
    {"bert_vocab", "data: {tokenizer: {type: BertWordPieceLowerCase}}", "data.tokenizer.vocab_file",
     "BertWordPieceLowerCase (got none)"},
    {"bert_cased_vocab", "data: {tokenizer: {type: BertWordPieceCase}}",
     "data.tokenizer.vocab_file", "BertWordPieceCase (got none)"},
    {"null_tokenizer", "data: {tokenizer: {type: NullTokenizer}}", "data.tokenizer.vocab_size",
     "got 0"},
    {"tokenizer_vocab_negative", "data: {tokenizer: {vocab_size: -1}}", "data.tokenizer.vocab_size",
     "got -1"},
    {"train_empty", "data: {train: []}", "data.train", "got none"},
    {"train_weight", "data: {train: [{path: a, weight: 0}]}", "data.train[0].weight", "got 0"},
    {"train_second_weight", "data: {train: [a, {path: b, weight: -1}]}", "data.train[1].weight",
     "got -1"},
    {"train_path_missing", "data: {train: [{weight: 2}]}", "data.train[0].path",
     "required key is missing"},
    {"train_path_empty", "data: {train: [{path: \"\"}]}", "data.train[0].path", "got none"},
    {"split_words", "data: {split: \"a,b\"}", "data.split", "\"a,b\""},
    {"split_four", "data: {split: \"1,2,3,4\"}", "data.split", "\"1,2,3,4\""},
    {"split_zero", "data: {split: \"0,0,0\"}", "data.split", "\"0,0,0\""},
    {"split_no_valid", "training: {eval_interval: 5, eval_iters: 1}\ndata: {split: \"100,0,0\"}",
     "data.split", "\"100,0,0\""},
    // checkpoint and logging
    {"save_interval_no_save", "checkpoint: {save_interval: 10}", "checkpoint.save_interval",
     "save_interval 10"},
    {"async_save_no_save", "checkpoint: {async_save: true}", "checkpoint.async_save",
     "no save directory"},
    {"straggler_interval", "logging: {straggler_interval: -2}", "logging.straggler_interval",
     "got -2"},
    {"save_interval_zero", "checkpoint: {save: d, save_interval: 0}", "checkpoint.save_interval",
     "got 0"},
    {"keep_last", "checkpoint: {keep_last: -1}", "checkpoint.keep_last", "got -1"},
    {"finetune", "checkpoint: {finetune: true}", "checkpoint.finetune", "finetune true"},
    {"log_interval", "logging: {interval: 0}", "logging.interval", "got 0"},
    // required keys explicitly nulled in the child
    {"null_required", "model: {num_layers: null}", "model.num_layers", "required key is missing"},
    {"null_lr", "optimizer: {lr: ~}", "optimizer.lr", "required key is missing"},
};

class ValidationRule : public ::testing::TestWithParam<Rule> {};

TEST_P(ValidationRule, ErrorNamesFileKeyAndValue) {
  const Rule& rule = GetParam();
  ScratchDir dir;
  std::string file = dir.write(std::string(rule.name) + ".yaml",
                               "extends: " + fixture("valid_base.yaml") + "\n" + rule.yaml + "\n");
  std::string msg = input_error([&] { load_recipe(file); });
  EXPECT_THAT(msg, HasSubstr(std::string(rule.name) + ".yaml:"));
  EXPECT_THAT(msg, HasSubstr(std::string(": ") + rule.key + ": "));
  EXPECT_THAT(msg, HasSubstr(rule.value));
}

INSTANTIATE_TEST_SUITE_P(Rules, ValidationRule, ::testing::ValuesIn(kRules),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Validation, BaseIsValid) {
  Recipe r = load_recipe(fixture("valid_base.yaml"));
  EXPECT_EQ(r.model.query_groups(), 4);
  EXPECT_EQ(r.model.ffn(), 256);
  EXPECT_EQ(r.model.head_dim(), 16);
  EXPECT_EQ(r.model.max_positions(), 32);
}

// model.kv_channels (Megatron-Core's; Hugging Face's head_dim): unset or 0 is hidden / heads; set,
// it is the head dimension whatever hidden / heads is, and the heads need not divide hidden.
TEST(Validation, KvChannelsIsTheHeadDimension) {
  ScratchDir dir;
  auto load = [&](const std::string& name, const std::string& model) {
    return load_recipe(
        dir.write(name, "extends: " + fixture("valid_base.yaml") + "\nmodel: {" + model + "}\n"));
  };
  EXPECT_EQ(load("unset.yaml", "kv_channels: null").model.head_dim(), 16);
  EXPECT_EQ(load("zero.yaml", "kv_channels: 0").model.head_dim(), 16);
  const Recipe wide = load("wide.yaml", "kv_channels: 24, position_embedding: rope");
  EXPECT_EQ(wide.model.kv_channels, 24);
  EXPECT_EQ(wide.model.head_dim(), 24);
  EXPECT_EQ(load("odd.yaml", "hidden_size: 66, kv_channels: 15").model.head_dim(), 15);
  EXPECT_THAT(load("shown.yaml", "").to_yaml(), HasSubstr("kv_channels: 0  # auto: 16"));
}

// A cross-section error names the file that set the key it reports, even when another file set
// the value it conflicts with.
TEST(Validation, CrossSectionErrorNamesTheFileOfTheReportedKey) {
  ScratchDir dir;
  std::string file = dir.write(
      "child.yaml", "extends: " + fixture("valid_base.yaml") + "\nparallel: {tensor: 3}\n");
  std::string msg = input_error([&] { load_recipe(file); });
  EXPECT_THAT(msg, HasSubstr("valid_base.yaml:5: model.num_attention_heads: must be divisible by "
                             "parallel.tensor (got 4 % 3 = 1)"));
}

TEST(Validation, MissingRequiredKeysNameTheFile) {
  const char* keys[][2] = {{"model", "num_layers"},          {"model", "hidden_size"},
                           {"model", "num_attention_heads"}, {"model", "seq_length"},
                           {"training", "micro_batch_size"}, {"training", "global_batch_size"},
                           {"training", "train_iters"},      {"optimizer", "lr"}};
  for (auto [section, key] : keys) {
    std::string full =
        "model:\n  num_layers: 4\n  hidden_size: 64\n  num_attention_heads: 4\n  seq_length: 32\n"
        "training:\n  micro_batch_size: 2\n  global_batch_size: 8\n  train_iters: 10\n"
        "optimizer:\n  lr: 0.001\n"
        "data:\n  tokenizer:\n    type: ByteTokenizer\n  train: x\n";
    std::string line = std::string("  ") + key + ":";
    size_t at = full.find(line);
    ASSERT_NE(at, std::string::npos) << key;
    full.erase(at, full.find('\n', at) + 1 - at);
    std::string msg = input_error([&] { parse_recipe_string(full, "no_key.yaml"); });
    EXPECT_THAT(msg, HasSubstr("no_key.yaml:"));
    EXPECT_THAT(msg, HasSubstr(std::string(section) + "." + key + ": required key is missing"));
  }
  std::string msg = input_error([] {
    parse_recipe_string(
        "model: {num_layers: 4, hidden_size: 64, num_attention_heads: 4, seq_length: 32}\n"
        "training: {micro_batch_size: 2, global_batch_size: 8, train_iters: 10}\n"
        "optimizer: {lr: 0.001}\n",
        "no_data.yaml");
  });
  EXPECT_THAT(msg, HasSubstr("no_data.yaml: data.tokenizer.type: required key is missing"));
}

TEST(Validation, SectionValidateWorksWithoutOrigins) {
  ModelConfig m;
  EXPECT_THAT(input_error([&] { m.validate(); }),
              HasSubstr("model.num_layers: must be > 0 (got 0)"));
  OptimizerConfig o;
  EXPECT_THAT(input_error([&] { o.validate(); }), HasSubstr("optimizer.lr: must be > 0 (got 0)"));
  ParallelConfig p;
  p.validate();
  p.order = "pp";
  EXPECT_THAT(input_error([&] { p.validate(); }), HasSubstr("parallel.order"));
  DataConfig d;
  EXPECT_THAT(input_error([&] { d.validate(); }),
              HasSubstr("data.tokenizer.type: required key is missing"));
  CheckpointConfig c;
  c.validate();
  LoggingConfig l;
  l.validate();
}

TEST(Validation, SplitFractions) {
  DataConfig d;
  d.split = "969,30,1";
  auto f = d.split_fractions();
  ASSERT_EQ(f.size(), 3u);
  EXPECT_DOUBLE_EQ(f[0], 0.969);
  EXPECT_DOUBLE_EQ(f[1], 0.030);
  d.split = "1";
  EXPECT_EQ(d.split_fractions(), (std::vector<double>{1.0, 0.0, 0.0}));
  d.split = "3, 1";
  EXPECT_EQ(d.split_fractions(), (std::vector<double>{0.75, 0.25, 0.0}));
  for (const char* bad : {"", ",", "1,", "a", "1,-1", "0", "1,2,3,4"}) {
    d.split = bad;
    EXPECT_TRUE(d.split_fractions().empty()) << bad;
  }
}

// ---- validate_for_world ------------------------------------------------------------------------

Recipe base(const std::vector<std::string>& overrides = {}) {
  return load_recipe(fixture("valid_base.yaml"), overrides);
}

TEST(ValidateForWorld, ResolvesAutoDataParallel) {
  Recipe r = base({"parallel.tensor=2", "parallel.pipeline=2"});  // global 8, micro 2
  EXPECT_EQ(r.data_parallel_size(8), 2);
  EXPECT_EQ(r.num_microbatches(8), 2);
  EXPECT_EQ(r.num_microbatches(4), 4);
  r.resolve_for_world(8);
  EXPECT_EQ(r.parallel.data, 2);
  r.validate_for_world(8);  // an explicit, matching data size is fine
  EXPECT_EQ(base().data_parallel_size(1), 1);
  EXPECT_EQ(base().num_microbatches(1), 4);
}

TEST(ValidateForWorld, WorldNotDivisibleByModelParallel) {
  std::string msg = input_error([] { base({"parallel.tensor=4"}).validate_for_world(6); });
  EXPECT_THAT(msg, HasSubstr("valid_base.yaml (--set parallel.tensor=4): parallel.tensor:"));
  EXPECT_THAT(msg, HasSubstr("(4 * 1 * 1 = 4) must divide the world size (got 6 ranks)"));
}

TEST(ValidateForWorld, ExplicitDataMustMatch) {
  std::string msg = input_error([] {
    base({"parallel.data=3", "parallel.tensor=2"}).validate_for_world(8);
  });
  EXPECT_THAT(msg, HasSubstr("valid_base.yaml (--set parallel.data=3): parallel.data:"));
  EXPECT_THAT(msg, HasSubstr("= 8 / 2 = 4 (got 3)"));
}

TEST(ValidateForWorld, GlobalBatchMustSplitOverDataParallel) {
  std::string msg = input_error([] { base().validate_for_world(8); });
  EXPECT_THAT(msg, HasSubstr("valid_base.yaml:9: training.global_batch_size:"));
  EXPECT_THAT(msg, HasSubstr("(got 8 % (2 * 8) = 8)"));
  msg = input_error([] { base().validate_for_world(3); });
  EXPECT_THAT(msg, HasSubstr("8 % (2 * 3) = 2"));
}

TEST(ValidateForWorld, ExpertMustDivideDataParallel) {
  Recipe r = base({"model.num_experts=4", "parallel.expert=4"});
  r.validate_for_world(4);
  std::string msg = input_error([&] { r.validate_for_world(2); });
  EXPECT_THAT(
      msg,
      HasSubstr("(--set parallel.expert=4): parallel.expert: must divide the data-parallel size"));
  EXPECT_THAT(msg, HasSubstr("dp 2 % expert 4"));
}

// DualPipeV needs 2 pp micro-batches per step; the error names the smallest global batch.
TEST(ValidateForWorld, DualPipeVNeedsTwiceThePipelineInMicroBatches) {
  Recipe r = base({"parallel.pipeline=2", "parallel.virtual_pipeline=2",
                   "parallel.pipeline_schedule=dualpipe_v"});  // global 8, micro 2
  r.validate_for_world(2);                                     // dp 1: 4 micro-batches
  std::string msg = input_error([&] { r.validate_for_world(4); });
  EXPECT_THAT(msg, HasSubstr("valid_base.yaml:9: training.global_batch_size: dualpipe_v needs at "
                             "least 2 * parallel.pipeline = 4 micro-batches per step, got 8 / "
                             "(training.micro_batch_size 2 * data-parallel size 2) = 2: the "
                             "smallest valid training.global_batch_size is 16"));
}

// Whole experts under tp (expert_tensor 1): ep is carved out of tp x dp, not dp alone.
TEST(ValidateForWorld, ExpertWithWholeExpertsMustDivideTensorTimesData) {
  Recipe r = base({"model.num_experts=8", "parallel.expert=4", "parallel.tensor=2",
                   "parallel.sequence_parallel=true", "parallel.expert_tensor=1"});
  r.validate_for_world(4);  // tp 2 x dp 2
  r.validate_for_world(8);
  std::string msg = input_error([&] { r.validate_for_world(2); });
  EXPECT_THAT(msg, HasSubstr("parallel.expert: must divide tensor * data-parallel size with "
                             "expert_tensor 1 (got 2 % expert 4 = 2)"));
}

// With context parallelism ep is carved out of cp x dp (Megatron-Core's expert ranks).
TEST(ValidateForWorld, ExpertWithContextParallelMustDivideContextTimesData) {
  Recipe r = base({"model.num_experts=4", "parallel.expert=4", "parallel.context=2"});
  r.validate_for_world(4);  // cp 2 x dp 2
  r.validate_for_world(8);
  std::string msg = input_error([&] { r.validate_for_world(2); });
  EXPECT_THAT(msg, HasSubstr("parallel.expert: must divide context * data-parallel size (got 2 "
                             "% expert 4 = 2)"));
}

TEST(ValidateForWorld, DistributedOptimizerInstancesMustDivideDataParallel) {
  Recipe r = base({"parallel.data_parallel_sharding_strategy=optim_grads_params",
                   "parallel.num_distributed_optimizer_instances=3",
                   "training.global_batch_size=12", "training.micro_batch_size=1"});
  r.validate_for_world(6);
  std::string msg = input_error([&] { r.validate_for_world(4); });
  EXPECT_THAT(msg, HasSubstr("parallel.num_distributed_optimizer_instances: must divide the "
                             "data-parallel size (got dp 4 % 3 = 1)"));
}

TEST(ShardingStrategy, AliasesAndDefault) {
  EXPECT_EQ(base().sharding_strategy(), ShardingStrategy::NoShard);
  EXPECT_EQ(base({"optimizer.distributed=true"}).sharding_strategy(), ShardingStrategy::Optim);
  EXPECT_EQ(base({"training.use_distributed_optimizer=true"}).sharding_strategy(),
            ShardingStrategy::Optim);
  EXPECT_EQ(base({"optimizer.distributed=true",
                  "parallel.data_parallel_sharding_strategy=optim_grads_params"})
                .sharding_strategy(),
            ShardingStrategy::OptimGradsParams);
  // The resolved recipe writes the strategy back out and reads it again.
  const Recipe r = base({"parallel.data_parallel_sharding_strategy=optim_grads"});
  EXPECT_EQ(parse_recipe_string(r.to_yaml(), "round_trip.yaml").sharding_strategy(),
            ShardingStrategy::OptimGrads);
}

TEST(ValidateForWorld, WorldMustBePositive) {
  EXPECT_THAT(input_error([] { base().validate_for_world(0); }),
              HasSubstr("valid_base.yaml: world size: must be >= 1 (got 0)"));
}

}  // namespace
}  // namespace megatron::config
