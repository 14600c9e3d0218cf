"""Model presets of 2025: Gemma 3, Llama 4, gpt-oss, Qwen3 / Qwen3-Next, Kimi-K2, GLM-4.5, OLMo 2, Nemotron 3 Nano.

Shapes from each model's Hugging Face ``config.json`` (named in ``source=`` and in the comment above
each entry); ``tests/models`` checks every entry against an import of that same config. ``vision_params``
is the multimodal wrapper's vision tower and projector as ``models.hf_types.vision`` counts it.
"""

from __future__ import annotations

from shardplan.models.kinds import MlpKind, NormKind, PositionKind, RopeScaling, RouterScore
from shardplan.models.parts import LinearAttnSpec, MambaSpec, MLASpec, MoESpec, RopeSpec
from shardplan.models.pattern import compress
from shardplan.models.spec import ModelSpec

HF = "https://huggingface.co/{}/blob/main/config.json"


def _gemma3(name: str, *, layers: int, hidden: int, heads: int, kv: int, head_dim: int, ffn: int, vision: int,
            repo: str) -> ModelSpec:
    """Gemma 3 text model: GeGLU, tied 262208 vocab, 4 norms + per-head qk-norm, 5 local (1024) : 1 global,
    rope_theta 1e6 with linear ×8 scaling on global layers, 1e4 on local ones."""
    return ModelSpec(
        name=name, family="gemma", num_layers=layers, hidden_size=hidden, num_heads=heads, num_kv_heads=kv,
        head_dim=head_dim, ffn_hidden_size=ffn, mlp=MlpKind.GEGLU, vocab_size=262_208, tied_embeddings=True,
        max_position_embeddings=131_072, norms_per_layer=4, qk_norm=True, sliding_window=1024,
        layer_pattern=("S*5", "F"),
        rope=RopeSpec(theta=1e6, scaling=RopeScaling.LINEAR, factor=8.0, local_theta=10000.0),
        vision_params=vision, source=HF.format(repo),
    )


def _llama4(name: str, *, experts: int, first_dense: int, freq: int, ctx: int, rope: RopeSpec, repo: str) -> ModelSpec:
    """Llama 4 text model: 48 layers of width 5120, GQA 40/8; chunked attention (8192) with RoPE on three of
    four layers, global NoPE attention on the fourth; sigmoid top-1 routing plus one shared expert."""
    return ModelSpec(
        name=name, family="llama", num_layers=48, hidden_size=5120, num_heads=40, num_kv_heads=8, head_dim=128,
        ffn_hidden_size=16384, mlp=MlpKind.SWIGLU, vocab_size=202_048, max_position_embeddings=ctx,
        attention_chunk_size=8192, layer_pattern=("C*3", "F"),
        moe=MoESpec(num_experts=experts, experts_per_token=1, expert_ffn_hidden_size=8192, num_shared_experts=1,
                    first_dense_layers=first_dense, layer_freq=freq, score_function=RouterScore.SIGMOID,
                    norm_topk_prob=False),
        rope=rope, vision_params=871_932_416, source=HF.format(repo),
    )


def _gpt_oss(name: str, *, layers: int, experts: int, repo: str) -> ModelSpec:
    """gpt-oss: width 2880, 64 query / 8 KV heads of 64 with biases and sinks, sliding (128) and full
    attention alternating, every layer MoE (top-4, biased router and experts), MXFP4 experts, YaRN ×32."""
    return ModelSpec(
        name=name, family="gpt-oss", num_layers=layers, hidden_size=2880, num_heads=64, num_kv_heads=8,
        head_dim=64, ffn_hidden_size=2880, mlp=MlpKind.SWIGLU, vocab_size=201_088, max_position_embeddings=131_072,
        qkv_bias=True, out_bias=True, mlp_bias=True, sliding_window=128, layer_pattern=("S", "F"),
        attention_sinks=True, activation_clamp=7.0,  # config.json swiglu_limit
        moe=MoESpec(num_experts=experts, experts_per_token=4, expert_ffn_hidden_size=2880, router_bias=True),
        rope=RopeSpec(theta=150000.0, scaling=RopeScaling.YARN, factor=32.0, original_max_position_embeddings=4096,
                      beta_fast=32.0, beta_slow=1.0),
        dtype="mxfp4", source=HF.format(repo),
    )


def _glm45(name: str, *, layers: int, hidden: int, ffn: int, experts: int, expert_ffn: int, first_dense: int,
           qk_norm: bool, repo: str) -> ModelSpec:
    """GLM-4.5: GQA 96/8 of 128 with Q/K/V biases, partial RoPE (0.5, base 1e6); DeepSeek-style MoE (top-8,
    one shared expert, sigmoid router with expert bias, scale 2.5); one MTP layer."""
    return ModelSpec(
        name=name, family="glm", num_layers=layers, hidden_size=hidden, num_heads=96, num_kv_heads=8, head_dim=128,
        ffn_hidden_size=ffn, mlp=MlpKind.SWIGLU, vocab_size=151_552, max_position_embeddings=131_072,
        qkv_bias=True, qk_norm=qk_norm,
        moe=MoESpec(num_experts=experts, experts_per_token=8, expert_ffn_hidden_size=expert_ffn, num_shared_experts=1,
                    first_dense_layers=first_dense, score_function=RouterScore.SIGMOID, expert_bias=True,
                    topk_scaling_factor=2.5),
        rope=RopeSpec(theta=1e6, partial_rotary_factor=0.5), mtp_layers=1, source=HF.format(repo),
    )


PRESETS_2025: list[ModelSpec] = [
    # google/gemma-3-27b-it config.json: text_config 62 layers, 5376, 32/16 heads of 128, intermediate 21504.
    _gemma3("gemma-3-27b", layers=62, hidden=5376, heads=32, kv=16, head_dim=128, ffn=21504, vision=423_060_336,
            repo="google/gemma-3-27b-it"),
    # google/gemma-3-4b-it config.json: 34 layers, 2560, intermediate 10240 (heads 8/4 of 256: class defaults).
    _gemma3("gemma-3-4b", layers=34, hidden=2560, heads=8, kv=4, head_dim=256, ffn=10240, vision=419_816_304,
            repo="google/gemma-3-4b-it"),
    # meta-llama/Llama-4-Scout-17B-16E config.json: 16 experts on every layer; rope llama3 ×16 from 8192.
    _llama4("llama-4-scout", experts=16, first_dense=0, freq=1, ctx=10_485_760, repo="meta-llama/Llama-4-Scout-17B-16E",
            rope=RopeSpec(theta=500000.0, scaling=RopeScaling.LLAMA3, factor=16.0, low_freq_factor=1.0,
                          high_freq_factor=1.0, original_max_position_embeddings=8192)),
    # meta-llama/Llama-4-Maverick-17B-128E config.json: 128 experts, interleave_moe_layer_step 2 (odd layers).
    _llama4("llama-4-maverick", experts=128, first_dense=1, freq=2, ctx=1_048_576,
            repo="meta-llama/Llama-4-Maverick-17B-128E", rope=RopeSpec(theta=500000.0)),
    # openai/gpt-oss-20b and -120b config.json: 24 layers × 32 experts, 36 layers × 128 experts.
    _gpt_oss("gpt-oss-20b", layers=24, experts=32, repo="openai/gpt-oss-20b"),
    _gpt_oss("gpt-oss-120b", layers=36, experts=128, repo="openai/gpt-oss-120b"),
    # Qwen/Qwen3-32B config.json: 64 layers, 5120, 64/8 heads of 128, intermediate 25600, per-head qk-norm.
    ModelSpec(name="qwen3-32b", family="qwen", num_layers=64, hidden_size=5120, num_heads=64, num_kv_heads=8,
              head_dim=128, ffn_hidden_size=25600, mlp=MlpKind.SWIGLU, vocab_size=151_936,
              max_position_embeddings=40960, qk_norm=True, rope=RopeSpec(theta=1e6),
              source=HF.format("Qwen/Qwen3-32B")),
    # Qwen/Qwen3-Next-80B-A3B-Instruct config.json: 3 Gated DeltaNet : 1 gated attention, 512 experts top-10.
    ModelSpec(name="qwen3-next-80b-a3b", family="qwen", num_layers=48, hidden_size=2048, num_heads=16, num_kv_heads=2,
              head_dim=256, ffn_hidden_size=5120, mlp=MlpKind.SWIGLU, vocab_size=151_936,
              max_position_embeddings=262_144, qk_norm=True, layer_pattern=("L*3", "F"), attn_output_gate=True,
              moe=MoESpec(num_experts=512, experts_per_token=10, expert_ffn_hidden_size=512, num_shared_experts=1,
                          shared_expert_ffn_hidden_size=512, shared_expert_gate=True),
              linear_attention=LinearAttnSpec(num_key_heads=16, num_value_heads=32, key_head_dim=128,
                                              value_head_dim=128),
              rope=RopeSpec(theta=1e7, partial_rotary_factor=0.25),
              source=HF.format("Qwen/Qwen3-Next-80B-A3B-Instruct")),
    # moonshotai/Kimi-K2-Instruct config.json: DeepSeek-V3 shape with 64 heads, 384 experts, 1 dense layer,
    # routed_scaling_factor 2.827, no group-limited routing (n_group 1), YaRN ×32 on base 50000; FP8 weights.
    ModelSpec(name="kimi-k2", family="kimi", num_layers=61, hidden_size=7168, num_heads=64, ffn_hidden_size=18432,
              mlp=MlpKind.SWIGLU, vocab_size=163_840, max_position_embeddings=131_072,
              moe=MoESpec(num_experts=384, experts_per_token=8, expert_ffn_hidden_size=2048, num_shared_experts=1,
                          first_dense_layers=1, score_function=RouterScore.SIGMOID, expert_bias=True,
                          topk_scaling_factor=2.827),
              mla=MLASpec(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                          v_head_dim=128),
              rope=RopeSpec(theta=50000.0, scaling=RopeScaling.YARN, factor=32.0, original_max_position_embeddings=4096,
                            beta_fast=1.0, beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0),
              dtype="fp8", source=HF.format("moonshotai/Kimi-K2-Instruct")),
    # zai-org/GLM-4.5 config.json: 92 layers (3 dense), 5120, 160 experts of 1536, qk-norm.
    _glm45("glm-4.5", layers=92, hidden=5120, ffn=12288, experts=160, expert_ffn=1536, first_dense=3, qk_norm=True,
           repo="zai-org/GLM-4.5"),
    # zai-org/GLM-4.5-Air config.json: 46 layers (1 dense), 4096, 128 experts of 1408, no qk-norm.
    _glm45("glm-4.5-air", layers=46, hidden=4096, ffn=10944, experts=128, expert_ffn=1408, first_dense=1,
           qk_norm=False, repo="zai-org/GLM-4.5-Air"),
    # nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 config.json: Nemotron-H with MoE, hybrid_override_pattern
    # MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME (23 Mamba-2 of 64 heads × 64, state 128, 8 groups; 23 MoE of
    # 128 experts × 1856 top-6 with a shared expert of 3712, sigmoid router; 6 NoPE GQA 32/2 of 128), untied 131072.
    ModelSpec(name="nemotron-3-nano-30b-a3b", family="nemotron-h", num_layers=52, hidden_size=2688, num_heads=32,
              num_kv_heads=2, head_dim=128, ffn_hidden_size=1856, mlp=MlpKind.RELU2, vocab_size=131_072,
              position=PositionKind.NOPE, max_position_embeddings=262_144, norm=NormKind.RMSNORM, norms_per_layer=1,
              layer_pattern=compress([{"M": "Mn", "*": "Fn", "E": "Ne"}[c] for c in
                                      "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"]),
              moe=MoESpec(num_experts=128, experts_per_token=6, expert_ffn_hidden_size=1856, num_shared_experts=1,
                          shared_expert_ffn_hidden_size=3712, score_function=RouterScore.SIGMOID, expert_bias=True),
              mamba=MambaSpec(num_heads=64, head_dim=64, d_state=128, n_groups=8, conv_kernel=4, expand=2,
                              chunk_size=128),
              source=HF.format("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")),
    # allenai/OLMo-2-1124-7B config.json: 32 layers, 4096, MHA 32, intermediate 11008, whole-projection qk-norm.
    ModelSpec(name="olmo-2-7b", family="olmo", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=32,
              ffn_hidden_size=11008, mlp=MlpKind.SWIGLU, vocab_size=100_352, max_position_embeddings=4096,
              qk_norm=True, qk_norm_per_head=False, rope=RopeSpec(theta=500000.0), dtype="fp32",
              source=HF.format("allenai/OLMo-2-1124-7B")),
]
