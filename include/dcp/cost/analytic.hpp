#pragma once
/// \file
/// `analytic_cost`: the embedded default cost model, exactly DESIGN section 4.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>

#include <dcp/cost/cost_concepts.hpp>
#include <dcp/cost/device.hpp>
#include <dcp/error.hpp>
#include <dcp/layout.hpp>
#include <dcp/model/transformer.hpp>
#include <dcp/sequence.hpp>

namespace dcp {

/// Additive summary of a micro-step's sequences for `analytic_cost`.
struct analytic_load {
  double sequences = 0;  ///< b
  double tokens = 0;     ///< N_tok = sum n_j
  double attention = 0;  ///< A: forward attention FLOPs (all blocks)
  /// A_ring: the part of A whose K/V a Ulysses x Ring step passes around its ring (DESIGN 4.3):
  /// self-attention (1D), the temporal blocks' (2D); cross-attention to text stays local.
  double ring_attention = 0;
  /// On a kernel clock (DESIGN 4.6), W_f and W_b: the attention's forward and backward FLOPs each
  /// divided by its kernel's efficiency on its sequence (peak-FLOP equivalents); 0 otherwise.
  double attention_forward_work = 0;
  double attention_backward_work = 0;

  friend constexpr analytic_load operator+(analytic_load a, const analytic_load& b) noexcept {
    return {a.sequences + b.sequences,
            a.tokens + b.tokens,
            a.attention + b.attention,
            a.ring_attention + b.ring_attention,
            a.attention_forward_work + b.attention_forward_work,
            a.attention_backward_work + b.attention_backward_work};
  }
  friend constexpr analytic_load operator-(analytic_load a, const analytic_load& b) noexcept {
    return {a.sequences - b.sequences,
            a.tokens - b.tokens,
            a.attention - b.attention,
            a.ring_attention - b.ring_attention,
            a.attention_forward_work - b.attention_forward_work,
            a.attention_backward_work - b.attention_backward_work};
  }
  friend constexpr bool operator==(const analytic_load&, const analytic_load&) = default;
};

/// Time and memory of a micro-step from FLOPs, bytes and a few device constants.
/// A regular value: the model, the device and the job's `parallel_layout` (N GPUs, over which
/// memory shards; the tensor parallel size tp, the expert parallel size ep, the sharding and the
/// ring cap). With tp > 1 the planner's unit is a TP group of tp GPUs on one node (DESIGN
/// section 4.2): `gpus()`, `gpus_per_node()`, `heads()`, sp, the tokens per "GPU" x and the
/// GPU-seconds of `work_floor` all count units.
struct analytic_cost {
  using policy_concept = cost_model_tag;
  using load_type = analytic_load;

  transformer_spec model = models::cogvideox_5b();
  device_spec device = devices::h200();
  /// The job it prices: N GPUs, G per node, tp, ep, sharding, ring cap (`<dcp/layout.hpp>`);
  /// optimizer state shards over all N GPUs. Its G is the device's `gpus_per_node`.
  parallel_layout parallel{};

  /// Throws a `dcp::error` unless model, device and N are valid and the static memory fits.
  void validate() const {
    dcp::validate(model);
    dcp::validate(device);
    check(parallel.gpus_per_node == device.gpus_per_node, errc::invalid_argument, [&] {
      return "the layout has gpus_per_node = " + std::to_string(parallel.gpus_per_node) + " but device '" +
             device.name + "' has gpus_per_node = " + std::to_string(device.gpus_per_node) +
             "; lay the job out on the device's nodes (make_analytic_cost(model, device, gpus) does)";
    });
    parallel.validate();
    check(model.pipeline_stages == parallel.pp, errc::invalid_argument, [&] {
      return "the layout has pp = " + std::to_string(parallel.pp) + " but model '" + model.name + "' prices " +
             std::to_string(model.pipeline_stages) +
             " stage(s); price one stage of the whole model, pipeline_stage(model, pp) "
             "(make_analytic_cost(model, device, layout) does)";
    });
    check(model.heads % parallel.tp == 0 && model.key_value_heads() % parallel.tp == 0, errc::invalid_argument, [&] {
      return "tp = " + std::to_string(parallel.tp) + " must divide heads = " + std::to_string(model.heads) +
             " and kv_heads = " + std::to_string(model.key_value_heads()) + " of model '" + model.name +
             "'; use a smaller tp";
    });
    check(parallel.ep >= 1 && (parallel.ep == 1 || model.is_moe()), errc::invalid_argument, [&] {
      return "ep = " + std::to_string(parallel.ep) + " needs a MoE model (experts > 0); model '" + model.name +
             "' is dense, use ep = 1";
    });
    check(model.experts % parallel.ep == 0 || !model.is_moe(), errc::invalid_argument, [&] {
      return "ep = " + std::to_string(parallel.ep) + " must divide experts = " + std::to_string(model.experts);
    });
    check(static_memory() < capacity(), errc::invalid_argument, [&] { return static_memory_refusal(); });
    // The text's keys and values of a cross-attention (`block_beta`) are per sequence, not per
    // token: held here to what one sequence's of every block, its heads split over every GPU of
    // a stage, leaves of the memory beside the static.
    const double text_kv = model.blocks * 2.0 * (model.key_value_width() + model.value_width());
    const double room = (capacity() - static_memory()) * parallel.stage_gpus();
    check(model.cross_attention_tokens * text_kv <= room, errc::invalid_argument, [&] {
      return "cross_attention_tokens = " + std::to_string(model.cross_attention_tokens) + " of model '" + model.name +
             "': the text's keys and values of one sequence alone, " +
             std::to_string(model.cross_attention_tokens * text_kv / 1e9) + " GB over its " +
             std::to_string(model.blocks) + " blocks, exceed the " + std::to_string(room / 1e9) + " GB the " +
             std::to_string(parallel.stage_gpus()) + " GPUs of a stage hold beside static memory; at most " +
             std::to_string(static_cast<std::int64_t>(room / text_kv)) +
             " text tokens fit (a cross-attention attends to a few hundred: Wan 2.1's 512)";
    });
  }

  /// Why the static memory does not fit, and the fixes that can work: more GPUs where they
  /// shrink it enough (the least count that fits), else a sharding that divides what each GPU
  /// holds unsharded, or a larger tp or ep.
  std::string static_memory_refusal() const {
    const double c = capacity(), held = parameters_per_gpu(), p = model.total_parameters();
    std::string out = "memory capacity " + std::to_string(c) + " B is below the static memory " +
                      std::to_string(static_memory()) + " B of model '" + model.name + "' on " +
                      std::to_string(parallel.gpus) + " GPUs (" + to_string(parallel.sharding) +
                      (parallel.pp > 1 ? ", a stage of " + std::to_string(parallel.pp) : std::string()) + "); ";
    // static = fixed + divided / (N / pp) (section 4.2): what more GPUs leave, and what they divide.
    double fixed = 4 * held, divided = 12 * p;
    if (parallel.sharding == sharding_kind::replicated) fixed = 16 * held, divided = 0;
    if (parallel.sharding == sharding_kind::zero3) fixed = zero3_gathered(), divided = 16 * p;
    if (fixed < c && divided > 0) {
      // Fewer GPUs than a node, or whole nodes (the layouts `parallel_layout` accepts).
      const double g = parallel.gpus_per_node, n = std::ceil(divided / (c - fixed));
      const double least = (n <= g ? n : std::ceil(n / g) * g) * parallel.pp;
      return out + "it fits from " + std::to_string(static_cast<long long>(least)) + " GPUs; use that many or more, " +
             (parallel.sharding == sharding_kind::zero3 ? "" : "sharding = zero3, ") + "or a device with more memory";
    }
    std::string fixes = parallel.sharding == sharding_kind::zero3 ? "" : "sharding = zero3";
    const int wider = 2 * parallel.tp;
    if (model.heads % wider == 0 && model.key_value_heads() % wider == 0 && wider <= parallel.gpus_per_node)
      fixes += (fixes.empty() ? "" : ", ") + std::string("tp = ") + std::to_string(wider);
    if (model.is_moe() && model.experts % (2 * parallel.ep) == 0)
      fixes += (fixes.empty() ? "" : ", ") + std::string("ep = ") + std::to_string(2 * parallel.ep);
    return out + "no GPU count fits: the " + std::to_string(fixed) +
           " B each GPU holds whatever their number exceed it; " +
           (fixes.empty() ? "use a device with more memory" : "use " + fixes + " or a device with more memory");
  }

  /// True for the dense, data x sequence parallel, zero1 model of DESIGN section 4 (before 4.1).
  bool is_classic() const noexcept {
    return has_fitted_form() && model.kv_heads == 0 && model.head_dim == 0 && model.vocab == 0 && model.window == 0 &&
           model.value_dim == 0 && model.q_rank == 0 && model.kv_rank == 0 && !device.kernel.enabled();
  }
  /// True where `fitted_cost` mirrors this model: data x sequence parallel (tp = ep = ring = pp = 1),
  /// zero1, self-attention only and a dense MLP; GQA, decoupled head and value widths, latent
  /// attention, windows and a vocabulary are in its form (they shape its features).
  bool has_fitted_form() const noexcept {
    return parallel.tp == 1 && parallel.ep == 1 && parallel.ring == 1 && parallel.pp == 1 &&
           parallel.sharding == sharding_kind::zero1 && model.cross_attention_tokens == 0 && !model.is_moe();
  }

  int blocks() const noexcept { return model.blocks; }
  /// The layout it prices (`cost_model`'s one accessor of the job).
  const parallel_layout& layout() const noexcept { return parallel; }
  /// Planner units: TP groups (GPUs when tp = 1).
  int gpus() const noexcept { return parallel.units(); }
  int gpus_per_node() const noexcept { return parallel.units_per_node(); }
  /// Heads of one TP rank: Ulysses over sp units must divide them.
  int heads() const noexcept { return model.heads / parallel.tp; }
  /// The largest ring size a step may use (`ring_cost_model`).
  int max_ring() const noexcept { return parallel.ring; }
  /// The ring r of a step on sp units when the caller names none: the smallest, `ring_of(sp)`,
  /// when rings are enabled, else 1 (so a Ulysses-only model prices every sp as section 4 does).
  /// `time(l, sp, k, r)` prices any ring of `legal_ring`.
  int step_ring(int sp) const noexcept { return parallel.ring > 1 ? ring_of(*this, sp) : 1; }
  /// C: the device's, or on a cluster of named nodes (`parallel_layout::nodes`) the smallest
  /// node's, the one capacity a planner that does not know the cluster may assume.
  double capacity() const noexcept { return parallel.smallest_capacity(device.capacity()); }
  /// The capacity of a block of units: its smallest member's (`mixed_cluster_cost_model`).
  double capacity_of(rank_block units) const noexcept { return parallel.capacity_of(units, device.capacity()); }
  /// This model on the same layout with every node device `d`: the cost model a step sees on
  /// blocks of `d`'s capacity (the speed it leaves to the planner, which divides times by it).
  analytic_cost as_uniform(const unit_device& d) const {
    analytic_cost out = *this;
    if (!out.parallel.nodes.empty())
      out.parallel.nodes.assign(out.parallel.nodes.size(), d);
    else
      out.parallel.nodes.assign(static_cast<std::size_t>(out.parallel.node_count()), d);
    return out;
  }

  std::int64_t tokens_of(const sequence& s) const noexcept { return model.tokens_of(s.frames, s.spatial); }

  load_type load_of(const sequence& s) const noexcept {
    // p = 2 (q + o) = 4 h for today's models (section 4.1), so they price exactly as before.
    const double L = model.blocks, p = model.pair_flops();
    const double n = static_cast<double>(tokens_of(s));
    load_type out{1, n, 0, 0};
    // Each part of the attention with the keys its queries see on average (DESIGN 4.6).
    auto part = [&](double flops, double keys, bool rings, bool causal) {
      out.attention += flops;
      if (rings) out.ring_attention += flops;
      if (!device.kernel.enabled() || flops == 0) return;
      const kernel_clock& kc = device.kernel;
      const double d = model.head_width();
      out.attention_forward_work += flops / kc.efficiency(false, keys, d, causal);
      out.attention_backward_work += kernel_clock::backward_flops * flops / kc.efficiency(true, keys, d, causal);
    };
    switch (model.attention) {
      case attention_kind::full: part(L * p * n * n, n, true, false); break;
      case attention_kind::causal: {
        const double windowed = model.window_blocks(), pairs = model.windowed_pairs(n);
        part((L - windowed) * p / 2 * n * n, n / 2, true, true);
        part(windowed * p * pairs, pairs / n, true, true);
        break;
      }
      case attention_kind::factorized_2d: {
        const double t = static_cast<double>(s.frames), sz = static_cast<double>(s.spatial);
        part((L / 2) * p * t * sz * sz, sz, false, false);
        part((L / 2) * p * sz * t * t, t, true, false);  // temporal: a ring splits the frames
        break;
      }
    }
    if (model.cross_attention_tokens > 0) {
      // Scores and values against the c text keys, and the text's K/V projections (GEMMs of c
      // rows: on a kernel clock at their GEMM efficiency, forward once and backward twice).
      const double c = static_cast<double>(model.cross_attention_tokens);
      const double h = static_cast<double>(model.hidden);
      out.attention += L * (p * n * c + 2 * h * (model.key_value_width() + model.value_width()) * c);
      if (device.kernel.enabled()) {
        const kernel_clock& kc = device.kernel;
        const double scores = L * p * n * c, d = model.head_width();
        const double projections = L * 2 * h * (model.key_value_width() + model.value_width()) * c;
        out.attention_forward_work += scores / kc.efficiency(false, c, d, false) + projections / efficiency(c);
        out.attention_backward_work +=
            kernel_clock::backward_flops * scores / kc.efficiency(true, c, d, false) + 2 * projections / efficiency(c);
      }
    }
    return out;
  }

  /// P_gpu,b = (P - P_E) / tp + P_E / (tp ep): the block parameters one GPU holds unsharded,
  /// P_E = L_e P_bE the routed experts'.
  double block_parameters_per_gpu() const noexcept {
    const double p = model.parameters(), pe = model.moe_blocks() * model.expert_parameters();
    return (p - pe) / parallel.tp + pe / (parallel.tp * parallel.ep);
  }
  /// The parameters one GPU holds of its largest block: P_gpu,b / L, or with dense blocks in a
  /// MoE stack the larger of a dense block's P_b,dense / tp and a MoE block's.
  double largest_block_per_gpu() const noexcept {
    if (model.dense_blocks == 0) return block_parameters_per_gpu() / model.blocks;
    const double pbe = model.expert_parameters(), pb = model.block_parameters();
    return std::max(model.dense_block_parameters() / parallel.tp,
                    (pb - pbe) / parallel.tp + pbe / (parallel.tp * parallel.ep));
  }
  /// P_gpu = P_gpu,b + P_V / tp: with the embedding and the LM head, split over tp by vocabulary.
  double parameters_per_gpu() const noexcept {
    return block_parameters_per_gpu() + model.vocabulary_parameters() / parallel.tp;
  }
  /// zero3's gathered weights: 6 max(P_gpu,b / L, V h / tp) bytes, the largest unit it gathers
  /// (a block, or a vocabulary matrix) with its prefetched successor and its gradient.
  double zero3_gathered() const noexcept {
    const double vocab_matrix = static_cast<double>(model.vocab) * static_cast<double>(model.hidden) / parallel.tp;
    return std::max(6 * largest_block_per_gpu(), 6 * vocab_matrix);
  }
  /// zero1: 4 P_gpu + 12 P_all / N; replicated: 16 P_gpu; zero3: 16 P_all / N + `zero3_gathered`,
  /// P_all = P + P_V. Under pp > 1 the model is a stage's and N its N / pp GPUs.
  double static_memory() const noexcept {
    const double p = model.total_parameters();
    switch (parallel.sharding) {
      case sharding_kind::replicated: return 16 * parameters_per_gpu();
      case sharding_kind::zero3: return 16 * p / parallel.stage_gpus() + zero3_gathered();
      case sharding_kind::zero1: break;
    }
    return 4 * parameters_per_gpu() + 12 * p / parallel.stage_gpus();
  }
  /// F = L 2 P_act N_tok + A (P_act = P_b for a dense model without cross-attention; L P_act
  /// sums the dense and MoE blocks of a mixed stack): the blocks'.
  double forward_flops(const load_type& l) const noexcept { return linear_flops_per_token() * l.tokens + l.attention; }
  /// L 2 P_act: the blocks' linear forward FLOPs per token.
  double linear_flops_per_token() const noexcept {
    if (model.dense_blocks == 0) return model.blocks * 2 * model.active_block_parameters();
    return 2 * model.active_parameters();
  }
  /// F_V = 2 V h N_tok: the LM head's forward FLOPs (run once a step, never recomputed).
  double head_flops(const load_type& l) const noexcept { return model.head_flops_per_token() * l.tokens; }
  /// beta_b = beta + beta_x: bytes a block that is not checkpointed stores per token per hidden
  /// unit. beta_x prices a cross-attention to text (0 without one): per token it keeps its query
  /// projection's input, its queries and its output in bf16, 2 (h + w_q + w_o) bytes (every
  /// linear layer keeps its input: Korthikanti et al., 2022, section 4), and its softmax's
  /// log-sum-exp per head in fp32, 4 H bytes (FlashAttention's backward reads Q, K, V, O and the
  /// log-sum-exp: Dao et al., 2022, algorithm 2). The text's keys and values, 2 c (w_k + w_v)
  /// bytes per sequence and block (Wan 2.1: as much as 51 of its tokens), are not priced per step;
  /// `validate` refuses a c whose keys and values of one sequence cannot fit the job at all.
  double block_beta() const noexcept {
    if (model.cross_attention_tokens <= 0) return device.beta;
    const double h = static_cast<double>(model.hidden);
    return device.beta + (2 * (h + model.query_width() + model.output_width()) + 4.0 * model.heads) / h;
  }
  /// beta' = max(beta_b, lambda V / h): bytes per token per hidden unit of the step's peak working
  /// set, a block's activations or the loss's logits, whichever is larger (beta without a vocabulary
  /// or cross-attention).
  double working_beta() const noexcept {
    return std::max(block_beta(), model.loss_bytes_per_token() / static_cast<double>(model.hidden));
  }
  /// Tensor-parallel collectives of the vocabulary per step: the embedding's reduce-scatter and
  /// its gradient's all-gather, the LM head's all-gather and its gradient's reduce-scatter.
  int tp_vocabulary_collectives() const noexcept { return parallel.tp > 1 && model.vocab > 0 ? 4 : 0; }
  /// Per-GPU width w of one Ulysses all-to-all: 1D ((q + o) / tp + k_sp + v_sp) / 4 with
  /// k_sp = kv / tp and v_sp = kv_v / tp, or d sp and d_v sp when kv_heads / tp < sp (key/value
  /// heads replicated up to sp); 2D h / tp. h for today's models.
  double all_to_all_width(int sp) const noexcept {
    const double h = static_cast<double>(model.hidden);
    if (model.attention == attention_kind::factorized_2d) return h / parallel.tp;
    const bool whole = model.key_value_heads() / parallel.tp >= sp;
    const double k = whole ? model.key_value_width() / parallel.tp : model.head_width() * sp;
    const double v = whole ? model.value_width() / parallel.tp : model.value_head_width() * sp;
    return ((model.query_width() + model.output_width()) / parallel.tp + (k + v)) / 4;
  }
  /// Megatron sequence-parallel collectives per block pass inside a TP group: an all-gather
  /// and a reduce-scatter around each attention and the MLP.
  int tp_collectives_per_pass() const noexcept { return model.cross_attention_tokens > 0 ? 6 : 4; }
  /// Expert-parallel all-to-alls per block pass: dispatch and combine.
  int ep_all_to_alls_per_pass() const noexcept { return parallel.ep > 1 ? 2 : 0; }
  /// Block passes that route through experts in a step with k checkpointed blocks: 2 L + k for
  /// a MoE stack, (2 + k / L) L_e with L_d dense blocks (a checkpointed block is as likely dense).
  double moe_passes(int k) const noexcept {
    const double L = model.blocks, le = model.moe_blocks();
    return 2 * le + k * le / L;
  }
  /// Bandwidth of the data-parallel domain (all N GPUs of a stage).
  double dp_bandwidth() const noexcept {
    return parallel.stage_gpus() <= device.gpus_per_node ? device.bw_intra : device.bw_inter;
  }
  /// Bandwidth between adjacent pipeline stages: a stage of whole nodes sends to the next node.
  double stage_bandwidth() const noexcept {
    return parallel.stage_gpus() < device.gpus_per_node ? device.bw_intra : device.bw_inter;
  }
  /// x_pp: seconds to send one micro-batch's activations at a stage boundary (and their gradient
  /// back), alpha + 2 h N_tok / (sp tp) / bw_pp: each GPU sends its bf16 shard of the block
  /// output to its peer on the next stage (DESIGN section 4.5). 0 without pipeline stages.
  double stage_transfer(const load_type& l, int sp) const noexcept {
    if (parallel.pp == 1) return 0;
    const double bytes = 2 * static_cast<double>(model.hidden) * l.tokens / (sp * parallel.tp);
    return device.alpha + bytes / stage_bandwidth();
  }
  /// zero3's per-step floor t_z3 = 3 L (alpha + V_b / bw_dp) + 3 n_V (alpha + V_V / bw_dp): two
  /// weight all-gathers and one gradient reduce-scatter per block and per vocabulary matrix,
  /// V_b = 2 [(P_b - P_bE) / tp (D-1)/D + P_bE / (tp ep) (D_e-1)/D_e], V_V = 2 V h / tp (D-1)/D,
  /// D = N / tp, D_e = D / ep, n_V = `vocabulary_matrices`; a MoE stack's L_d dense blocks gather
  /// V_d = 2 P_b,dense / tp (D-1)/D each. 0 unless zero3.
  double step_floor() const noexcept {
    if (parallel.sharding != sharding_kind::zero3) return 0;
    const double pbe = model.expert_parameters(), pb = model.block_parameters();
    const double d = static_cast<double>(parallel.units()), de = d / parallel.ep;
    const double v = 2 * ((pb - pbe) / parallel.tp * (d - 1) / d + pbe / (parallel.tp * parallel.ep) * (de - 1) / de);
    double blocks = 0;
    if (model.dense_blocks == 0) {
      blocks = 3 * model.blocks * (device.alpha + v / dp_bandwidth());
    } else {
      const double vd = 2 * model.dense_block_parameters() / parallel.tp * (d - 1) / d;
      blocks = 3 * model.moe_blocks() * (device.alpha + v / dp_bandwidth()) +
               3 * model.dense_blocks * (device.alpha + vd / dp_bandwidth());
    }
    if (model.vocab == 0) return blocks;
    const double vv =
        2 * static_cast<double>(model.vocab) * static_cast<double>(model.hidden) / parallel.tp * (d - 1) / d;
    return blocks + 3 * model.vocabulary_matrices() * (device.alpha + vv / dp_bandwidth());
  }
  /// t_pad: a micro-step with no tokens on one unit (DESIGN section 3.7), which runs no GEMM and
  /// no attention but every collective of its passes, at latency where it moves no tokens: the
  /// expert all-to-alls `2 (2 L_e)` alpha (ep > 1), the TP collectives
  /// `tp_exposed (c_tp 2L + c_V)` alpha (tp > 1) and the launches `tau 3L`; under zero3 at least
  /// `t_z3`, the gathers and reduce-scatters of every block at their full volume.
  double padding_time() const noexcept {
    const double L = model.blocks;
    double t = device.tau * 3 * L;
    if (parallel.ep > 1) t += ep_all_to_alls_per_pass() * moe_passes(0) * device.alpha;
    if (parallel.tp > 1)
      t += device.kernel.tp_exposed * (tp_collectives_per_pass() * 2 * L + tp_vocabulary_collectives()) * device.alpha;
    return parallel.sharding == sharding_kind::zero3 ? std::max(t, step_floor()) : t;
  }
  /// eff(x) = eff_max x / (x + x_half).
  double efficiency(double x) const noexcept { return device.eff_max * x / (x + device.x_half); }
  /// All-to-alls per block pass: 4 for 1D Ulysses, 2 for 2D DSP.
  int all_to_alls_per_pass() const noexcept { return model.attention == attention_kind::factorized_2d ? 2 : 4; }
  /// Bandwidth of an sp group of units (sp tp GPUs).
  double bandwidth(int sp) const noexcept {
    return sp * parallel.tp <= device.gpus_per_node ? device.bw_intra : device.bw_inter;
  }
  /// x_max: the most tokens per unit any feasible step holds (all blocks checkpointed).
  double max_tokens_per_gpu() const noexcept {
    return (capacity() - static_memory()) /
           ((2.0 * model.blocks + working_beta()) * static_cast<double>(model.hidden)) * parallel.tp;
  }

  /// Per-GPU key plus value width after the Ulysses all-to-all over u units, k_u + v_u:
  /// (kv + kv_v) / (tp u), or d + d_v when kv_heads / tp < u (one replicated head); 2 kv_u
  /// when d_v = d.
  double ring_key_value_width(int u) const noexcept {
    return model.key_value_heads() / parallel.tp >= u
               ? model.key_value_width() / parallel.tp / u + model.value_width() / parallel.tp / u
               : model.head_width() + model.value_head_width();
  }
  /// Seconds of a step's ring K/V exchange (DESIGN section 4.3), 0 when r = 1: (3L + k) (r - 1)
  /// messages, each a K/V block of N_tok / r tokens in bf16, `alpha + 2 (k_u + v_u) N_tok / r /
  /// bw(sp tp)`; half of them for 2D attention (only the temporal blocks ring). A window still
  /// passes every block around: the keys it needs are spread over the ring's zig-zag shards.
  double ring_time(const load_type& l, int sp, int k, int r) const noexcept {
    if (r == 1) return 0;
    const double L = model.blocks;
    const double bytes = 2 * ring_key_value_width(sp / r) * l.tokens / r;
    const double t = (3 * L + k) * (r - 1) * (device.alpha + bytes / bandwidth(sp));
    return model.attention == attention_kind::factorized_2d ? t / 2 : t;
  }
  /// `ring_time` with the step's smallest ring (`step_ring`).
  double ring_time(const load_type& l, int sp, int k) const noexcept { return ring_time(l, sp, k, step_ring(sp)); }

  /// Seconds of the step with the smallest ring its sp allows (`step_ring`).
  double time(const load_type& l, int sp, int k) const noexcept { return time(l, sp, k, step_ring(sp)); }
  /// Seconds of the step run as u x r = (sp / r) x r, r a `legal_ring` for sp (DESIGN 4.3).
  double time(const load_type& l, int sp, int k, int r) const noexcept {
    const step_terms s = terms(l, sp, k, r);
    const double t = s.compute + s.communication + s.overhead;
    return parallel.sharding == sharding_kind::zero3 ? std::max(t, step_floor()) : t;
  }

  /// The least seconds of any step on sp units with at least k checkpointed blocks and any
  /// legal ring that holds `l` among sequences of `batch` (their summed load, l's included): the
  /// lower bounds' t_i of DESIGN section 3, given `alone_s`, l's time alone with k blocks at its
  /// fastest legal ring. A step computes at eff(x), which grows with its tokens per unit, so a
  /// load whose attention dominates can end sooner in company: with F = c N + A (c = 2 L P_act,
  /// N the step's tokens) the compute is at least (3 + k/L) (A + c N)(1 + x_half sp / N) /
  /// (sp tp peak eff_max), convex in N and least at N* = sqrt(A x_half sp / c), taken within
  /// [N_l, min(sp x_max, N_batch)]. Where that leaves N_l, nothing in company is faster: the floor
  /// is `alone_s`. Else it is that compute, or l's ring exchange where longer, plus l's
  /// collectives and the overhead at k.
  double shared_time_floor(const load_type& l, int sp, int k, double alone_s, const load_type& batch) const noexcept {
    // On a kernel clock attention runs at its own per-sequence rate and the GEMMs' seconds
    // (3 + k/L) c (N + x_half sp) / (sp tp peak eff_max) grow with N: company is never faster.
    if (device.kernel.enabled()) return alone_s;
    // The LM head's 3 F_V joins the linear term: (3 + k/L)(A + c N) + 3 c_V N = (3 + k/L)(A + c' N).
    const double L = model.blocks, b = device.x_half * sp;
    const double c = linear_flops_per_token() + 3 * model.head_flops_per_token() / (3 + k / L);
    const double n = std::min({std::sqrt(l.attention * b / c), sp * max_tokens_per_gpu(), batch.tokens});
    if (!(n > l.tokens)) return alone_s;
    const double compute =
        (3 + k / L) * (l.attention + c * n) * (1 + b / n) / (sp * parallel.tp * device.peak * device.eff_max);
    double best = alone_s;
    for_each_legal_ring(*this, sp, [&](int r) {
      const step_terms s = terms(l, sp, k, r);
      const double t = std::max(compute, ring_time(l, sp, k, r)) + s.communication + s.overhead;
      best = std::min(best, parallel.sharding == sharding_kind::zero3 ? std::max(t, step_floor()) : t);
    });
    return best;
  }

  /// `memory(l, sp, k)` as a function of the load and k, its per-model terms (the static memory)
  /// computed once: for callers that price many loads or k on one sp. It holds values, not a
  /// reference, and `memory` itself goes through it, so the two cannot disagree.
  struct memory_on {
    double static_bytes, blocks, hidden, beta, working_beta;
    int sp, tp;
    double operator()(const load_type& l, int k) const noexcept {
      const double L = blocks, h = hidden;
      const double x = l.tokens / sp / tp;  // tokens per GPU: Megatron SP shards activations over tp
      return static_bytes + (L - k) * beta * h * x + k * 2 * h * x + working_beta * h * x;
    }
  };
  memory_on memory_at(int sp) const noexcept {
    return {static_memory(),
            static_cast<double>(model.blocks),
            static_cast<double>(model.hidden),
            block_beta(),
            working_beta(),
            sp,
            parallel.tp};
  }
  double memory(const load_type& l, int sp, int k) const noexcept { return memory_at(sp)(l, k); }
  /// (L - k) beta h / tp + 2 k h / tp: what `memory` stores in flight per token, summed over the
  /// step's sp GPUs of one TP rank (`stored_per_token_cost_model`).
  double stored_per_token(int k) const noexcept {
    const double L = model.blocks, h = static_cast<double>(model.hidden);
    return ((L - k) * block_beta() * h + k * 2 * h) / parallel.tp;
  }
  /// The last term of `memory`, beta' h x: the peak working set, live only while the micro-batch
  /// runs an operation (`pipeline_cost_model`); the terms before it are what it stores in flight.
  double working_memory(const load_type& l, int sp) const noexcept {
    return working_beta() * static_cast<double>(model.hidden) * (l.tokens / sp / parallel.tp);
  }

  /// GPU-seconds floor of DESIGN section 3: compute at eff(x_max), communication bytes at
  /// full bandwidth, no latency or launch overhead (batching can amortise those away).
  double work_floor(const load_type& l, int sp, int k) const noexcept { return work_floor(l, sp, k, step_ring(sp)); }
  /// `work_floor` of the step run with ring r.
  double work_floor(const load_type& l, int sp, int k, int r) const noexcept { return floors().work(l, sp, k, r); }

  /// Unit-seconds of zero3's per-step floor that the load claims in any step (0 unless zero3):
  /// a step on sp units holds at most sp x_max tokens and lasts at least t_z3, so its unit-seconds
  /// are at least `N_tok t_z3 / x_max` summed over its sequences (DESIGN section 3, 4.2).
  double step_floor_share(const load_type& l) const noexcept {
    return parallel.sharding == sharding_kind::zero3 ? l.tokens * step_floor() / max_tokens_per_gpu() : 0;
  }

  /// Unit-seconds of the step's collectives at full bandwidth (no latency): Ulysses, and with
  /// tp > 1 or ep > 1 the TP and EP collectives (sp times their per-GPU seconds).
  double communication_floor(const load_type& l, int sp, int k) const noexcept {
    return communication_floor(l, sp, k, step_ring(sp));
  }
  /// `communication_floor` of the step run with ring r.
  double communication_floor(const load_type& l, int sp, int k, int r) const noexcept {
    const double L = model.blocks, h = static_cast<double>(model.hidden);
    double w = 0;
    const int u = sp / r;  // the ring is overlapped with compute: not in the floor
    if (u > 1)
      w += all_to_all_seconds(all_to_alls_per_pass() * (2 * L + k) * 2 * all_to_all_width(u) * l.tokens * (u - 1) / u,
                              u * parallel.tp);
    if (parallel.tp > 1)
      w += device.kernel.tp_exposed * (tp_collectives_per_pass() * (2 * L + k) + tp_vocabulary_collectives()) * 2 * h *
           l.tokens * (parallel.tp - 1) / parallel.tp / device.bw_intra;
    if (parallel.ep > 1)
      w += all_to_all_seconds(ep_all_to_alls_per_pass() * moe_passes(k) * 2 * h * model.experts_per_token *
                                  (l.tokens / parallel.tp) * (parallel.ep - 1) / parallel.ep,
                              parallel.ep * parallel.tp);
    return w;
  }

  /// GPU-seconds floor of `l` in any step on `sp` GPUs with k or more checkpointed blocks, for
  /// the joint lower bound (DESIGN section 3): memory caps a step with k' blocks at
  /// x_cap(k') = (C - M_static) / (((L - k') beta + 2 k' + beta') h) tokens per GPU, so its
  /// compute costs at least g(k') / (peak eff_max), g(k') = ((3 + k'/L) F + 3 F_V)(1 + x_half / x_cap(k')).
  /// g is a concave quadratic in k', so its least value over [k, L] is at an end; communication
  /// bytes at full bandwidth grow with k'. Never below `work_floor(l, sp, k)` (x_cap(L) = x_max).
  double packed_work_floor(const load_type& l, int sp, int k) const noexcept {
    return packed_work_floor(l, sp, k, step_ring(sp));
  }
  /// `packed_work_floor` of steps run with ring r.
  double packed_work_floor(const load_type& l, int sp, int k, int r) const noexcept {
    return floors().packed(l, sp, k, r);
  }

  /// `work_floor` and `packed_work_floor` with their per-model terms (static memory, eff(x_max),
  /// FLOPs per token) computed once: for callers that price many loads (the lower bounds). Both
  /// go through it, so they cannot disagree.
  struct floors_on {
    const analytic_cost* cost;
    double flops_per_token;  // L 2 P_act: F = flops_per_token N_tok + A
    double head_per_token;   // 2 V h: F_V = head_per_token N_tok
    double work_beta;        // beta'
    double work_rate;        // tp gemm_peak eff(x_max)
    double room;             // (C - M_static) / h tp: x_cap(k) = room / ((L - k) beta + 2 k + beta')
    double packed_rate;      // tp gemm_peak eff_max
    double attention_rate;   // kernel clock: tp peak (attention at its own rates); 0: section 4
    struct pair {
      double work, packed;
    };
    /// What both floors share: L, the step's FLOPs (section 4 prices attention FLOPs with the
    /// GEMMs; a kernel clock on their own rates), its communication floor and its LM head's FLOPs.
    struct shared {
      double L, flops, comm, head;
    };
    shared shared_of(const load_type& l, int sp, int k, int r) const noexcept {
      const bool kernel = attention_rate > 0;
      return {static_cast<double>(cost->model.blocks), flops_per_token * l.tokens + (kernel ? 0 : l.attention),
              cost->communication_floor(l, sp, k, r), 3 * head_per_token * l.tokens};  // the LM head, never recomputed
    }
    double attention(const load_type& l, double L, double kk) const noexcept {
      return attention_rate > 0 ? ((1 + kk / L) * l.attention_forward_work + l.attention_backward_work) / attention_rate
                                : 0;
    }
    double work_of(const shared& q, const load_type& l, int k) const noexcept {
      return ((3 + k / q.L) * q.flops + q.head) / work_rate + attention(l, q.L, k) + q.comm;
    }
    /// Both floors of one step (they share its FLOPs and communication floor).
    pair both(const load_type& l, int sp, int k, int r) const noexcept {
      const shared q = shared_of(l, sp, k, r);
      const double beta = cost->block_beta();
      auto g = [&](double kk) {
        const double saturation = 1 + cost->device.x_half * ((q.L - kk) * beta + 2 * kk + work_beta) / room;
        return ((3 + kk / q.L) * saturation * q.flops + saturation * q.head) / packed_rate + attention(l, q.L, kk);
      };
      return {work_of(q, l, k), std::min(g(k), g(q.L)) + q.comm};
    }
    /// The work floor alone (a caller that needs no packed floor skips its terms).
    double work(const load_type& l, int sp, int k, int r) const noexcept {
      return work_of(shared_of(l, sp, k, r), l, k);
    }
    double packed(const load_type& l, int sp, int k, int r) const noexcept { return both(l, sp, k, r).packed; }
  };
  floors_on floors() const noexcept {
    return {this,
            linear_flops_per_token(),
            model.head_flops_per_token(),
            working_beta(),
            parallel.tp * device.gemm_peak() * efficiency(max_tokens_per_gpu()),
            (capacity() - static_memory()) / static_cast<double>(model.hidden) * parallel.tp,
            parallel.tp * device.gemm_peak() * device.eff_max,
            device.kernel.enabled() ? parallel.tp * device.peak : 0};
  }

  /// A step's seconds by kind, as `time` sums them (DESIGN 4, 4.2, 4.3): compute (with the ring
  /// exchange where it outlasts the ringing attention), collectives, and per-block overhead.
  struct step_terms {
    double compute, communication, overhead;
  };
  step_terms terms(const load_type& l, int sp, int k, int r) const noexcept {
    const double L = model.blocks, h = static_cast<double>(model.hidden);
    const double x = l.tokens / sp;
    const bool kernel = device.kernel.enabled();
    // Kernel clock: GEMMs on their curve, attention on its own per-sequence rates (DESIGN 4.6).
    const double t_att_kernel = kernel ? attention_seconds(l, sp, k) : 0;
    double t_comp = kernel ? ((3 + k / L) * linear_flops(l) + 3 * head_flops(l)) /
                                     (sp * parallel.tp * device.gemm_peak() * efficiency(x)) +
                                 t_att_kernel
                           : ((3 + k / L) * forward_flops(l) + 3 * head_flops(l)) /
                                 (sp * parallel.tp * device.peak * efficiency(x));
    double t_comm = 0;
    if (r > 1) {
      // Ulysses x Ring: all-to-alls over u = sp / r units, and the ring exchange overlapped
      // with the ringing attention (zig-zag keeps each rank's causal share at A / sp).
      const int u = sp / r;
      if (u > 1) {
        const double v = 2 * all_to_all_width(u) * x * (u - 1) / u;
        t_comm = all_to_alls_per_pass() * (2 * L + k) * (device.alpha + all_to_all_seconds(v, u * parallel.tp));
      }
      const double t_att = kernel ? (l.attention > 0 ? t_att_kernel * l.ring_attention / l.attention : 0)
                                  : (3 + k / L) * l.ring_attention / (sp * parallel.tp * device.peak * efficiency(x));
      t_comp += std::max(t_att, ring_time(l, sp, k, r)) - t_att;
    } else if (sp > 1) {
      const double v = 2 * all_to_all_width(sp) * l.tokens / sp * (sp - 1) / sp;
      const double a = all_to_alls_per_pass() * (2 * L + k);
      t_comm = a * (device.alpha + all_to_all_seconds(v, sp * parallel.tp));
    }
    if (parallel.tp > 1) {
      const double v = 2 * h * x * (parallel.tp - 1) / parallel.tp;
      t_comm += device.kernel.tp_exposed * (tp_collectives_per_pass() * (2 * L + k) + tp_vocabulary_collectives()) *
                (device.alpha + v / device.bw_intra);
    }
    if (parallel.ep > 1) {
      const double v = 2 * h * model.experts_per_token * (x / parallel.tp) * (parallel.ep - 1) / parallel.ep;
      t_comm +=
          ep_all_to_alls_per_pass() * moe_passes(k) * (device.alpha + all_to_all_seconds(v, parallel.ep * parallel.tp));
    }
    const double t_over = device.tau * (3 * L + k);
    return {t_comp, t_comm, t_over};
  }

  /// Kernel clock: seconds of the step's attention, ((1 + k/L) W_f + W_b) / (sp tp peak): the
  /// forward once, again in the checkpointed blocks, and the backward (DESIGN 4.6).
  double attention_seconds(const load_type& l, int sp, int k) const noexcept {
    const double L = model.blocks;
    return ((1 + k / L) * l.attention_forward_work + l.attention_backward_work) / (sp * parallel.tp * device.peak);
  }
  /// Kernel clock: the blocks' linear forward FLOPs without attention, L 2 P_act N_tok (the text
  /// K/V projections of a cross-attention are priced with the attention).
  double linear_flops(const load_type& l) const noexcept { return linear_flops_per_token() * l.tokens; }

  /// Seconds for each GPU of an all-to-all over `gpus` GPUs to send `bytes`: at bw_intra inside a
  /// node, bw_inter across nodes; on a kernel clock a group across nodes sends (G - 1) / (gpus - 1)
  /// of its bytes over NVLink and the rest over the network at once, and the slower share paces it.
  double all_to_all_seconds(double bytes, int gpus) const noexcept {
    const int g = device.gpus_per_node;
    if (gpus <= g) return bytes / device.bw_intra;
    if (!device.kernel.enabled()) return bytes / device.bw_inter;
    const double peers = gpus - 1.0;
    return bytes * std::max((g - 1) / peers / device.bw_intra, (gpus - g) / peers / device.bw_inter);
  }

  /// Kernel clock: seconds every global batch pays once, whatever its plan (DESIGN 4.6): the
  /// data-parallel gradient reduce-scatter and parameter all-gather (zero1, or an all-reduce of
  /// the same bytes when replicated; zero3 does both in every step), 2 (alpha + 2 P_dp / bw_dp),
  /// P_dp = (P_gpu - P_E,gpu) (D-1)/D + P_E,gpu (D_e-1)/D_e, and the Adam step over the parameters
  /// a GPU owns, 30 bytes each (fp32 master, main gradient, two moments read; master and moments
  /// written, and the bf16 copy) at HBM bandwidth. 0 on section 4's clock.
  double update_seconds() const noexcept {
    if (!device.kernel.enabled()) return 0;
    const double d = static_cast<double>(parallel.stage_gpus()) / parallel.tp, de = d / parallel.ep;
    const double experts = model.moe_blocks() * model.expert_parameters() / (parallel.tp * parallel.ep);
    const double dense = parameters_per_gpu() - experts;
    double collectives = 0;
    if (parallel.sharding != sharding_kind::zero3 && d > 1) {
      const double bytes = 2 * (dense * (d - 1) / d + experts * (de - 1) / de);
      collectives = 2 * (device.alpha + bytes / dp_bandwidth());
    }
    const double owned = parallel.sharding == sharding_kind::replicated
                             ? parameters_per_gpu()
                             : model.total_parameters() / parallel.stage_gpus();
    return collectives + 30 * owned / device.kernel.hbm_bw;
  }

  friend bool operator==(const analytic_cost&, const analytic_cost&) = default;
  friend std::ostream& operator<<(std::ostream& os, const analytic_cost& c) {
    os << "analytic_cost{" << c.model << ", " << c.device << ", N=" << c.parallel.gpus;
    if (c.parallel.tp > 1) os << ", tp=" << c.parallel.tp;
    if (c.parallel.ep > 1) os << ", ep=" << c.parallel.ep;
    if (c.parallel.sharding != sharding_kind::zero1) os << ", " << c.parallel.sharding;
    if (c.parallel.ring > 1) os << ", ring<=" << c.parallel.ring;
    if (c.parallel.pp > 1) os << ", pp=" << c.parallel.pp;
    return os << "}";
  }
};

/// A validated analytic cost model of `gpus` GPUs on the device's nodes, data x sequence
/// parallel only.
inline analytic_cost make_analytic_cost(transformer_spec model, device_spec device, int gpus) {
  const int g = device.gpus_per_node;
  analytic_cost c{std::move(model), std::move(device), parallel_layout{.gpus = gpus, .gpus_per_node = g}};
  c.validate();
  return c;
}

/// A validated analytic cost model of the job `layout` (its G must be the device's); under
/// pp > 1 it prices the heaviest stage of the whole model `model` (`pipeline_stage`).
inline analytic_cost make_analytic_cost(transformer_spec model, device_spec device, parallel_layout layout) {
  if (layout.pp > 1 && model.pipeline_stages == 1) model = pipeline_stage(model, layout.pp);
  analytic_cost c{std::move(model), std::move(device), layout};
  c.validate();
  return c;
}

static_assert(cost_model<analytic_cost>);
static_assert(mixed_cluster_cost_model<analytic_cost>);
static_assert(ring_cost_model<analytic_cost>);
static_assert(token_memory_cost_model<analytic_cost>);
static_assert(step_floor_cost_model<analytic_cost>);
static_assert(step_floor_share_cost_model<analytic_cost>);
static_assert(work_floors_cost_model<analytic_cost>);
static_assert(shared_time_floor_cost_model<analytic_cost>);
static_assert(pipeline_cost_model<analytic_cost>);
static_assert(stored_per_token_cost_model<analytic_cost>);
static_assert(update_cost_model<analytic_cost>);

}  // namespace dcp
