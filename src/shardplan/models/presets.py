"""The model presets: shapes copied from each model's Hugging Face ``config.json`` or from the paper table.

Every entry names its source twice: in a comment next to it and in ``source=`` (shown by
``shardplan models show``). Numbers are facts from those sources; nothing here is estimated.
"""

from __future__ import annotations

from typing import Any

from shardplan.models.kinds import MlpKind, NormKind, PositionKind, RopeScaling, RouterScore
from shardplan.models.parts import MLASpec, MoESpec, RopeSpec
from shardplan.models.presets_2025 import PRESETS_2025
from shardplan.models.spec import ModelSpec

HF = "https://huggingface.co/{}/blob/main/config.json"


def megatron_gpt(name: str, *, layers: int, hidden: int, heads: int, source: str) -> ModelSpec:
    """GPT shape of the Megatron-LM papers: MHA, GeLU MLP of 4h, learned positions, V=51200, tied."""
    return ModelSpec(
        name=name, family="gpt", num_layers=layers, hidden_size=hidden, num_heads=heads,
        ffn_hidden_size=4 * hidden, mlp=MlpKind.GELU, vocab_size=51200, tied_embeddings=True,
        position=PositionKind.LEARNED, max_position_embeddings=2048, norm=NormKind.LAYERNORM,
        qkv_bias=True, out_bias=True, mlp_bias=True, dtype="fp16", source=source,
    )


def _opt(name: str, *, layers: int, hidden: int, heads: int, source: str) -> ModelSpec:
    """OPT (Zhang et al. 2022): ReLU MLP of 4h, biases, learned positions (2048), tied, V=50272, fp16."""
    return ModelSpec(
        name=name, family="opt", num_layers=layers, hidden_size=hidden, num_heads=heads,
        ffn_hidden_size=4 * hidden, mlp=MlpKind.RELU, vocab_size=50272, tied_embeddings=True,
        position=PositionKind.LEARNED, max_position_embeddings=2048, norm=NormKind.LAYERNORM,
        qkv_bias=True, out_bias=True, mlp_bias=True, dtype="fp16", source=source,
    )


def _rms_swiglu(name: str, *, family: str, layers: int, hidden: int, heads: int, kv: int, ffn: int, vocab: int,
                ctx: int, source: str, theta: float = 10000.0, **extra: Any) -> ModelSpec:
    """A Llama-style decoder: RMSNorm, RoPE (base ``theta``), SwiGLU, no biases, untied (override with ``extra``)."""
    fields: dict[str, Any] = dict(
        name=name, family=family, num_layers=layers, hidden_size=hidden, num_heads=heads, num_kv_heads=kv,
        ffn_hidden_size=ffn, mlp=MlpKind.SWIGLU, vocab_size=vocab, tied_embeddings=False,
        position=PositionKind.ROPE, max_position_embeddings=ctx, norm=NormKind.RMSNORM, dtype="bf16", source=source,
        rope=RopeSpec(theta=theta),
    )
    return ModelSpec(**(fields | extra))


_LLAMA31_ROPE = RopeSpec(theta=500000.0, scaling=RopeScaling.LLAMA3, factor=8.0, low_freq_factor=1.0,
                         high_freq_factor=4.0, original_max_position_embeddings=8192)

_NARAYANAN_T1 = "Narayanan et al. 2021 (arXiv 2104.04473) Table 1"

# Narayanan et al. 2021 (arXiv 2104.04473) Table 1: (heads, hidden, layers) of the weak-scaling GPT runs.
_MEGATRON_T1: dict[str, tuple[int, int, int]] = {
    "gpt-1.7b": (24, 2304, 24),
    "gpt-3.6b": (32, 3072, 30),
    "gpt-7.5b": (32, 4096, 36),
    "gpt-18.4b": (48, 6144, 40),
    "gpt-39.1b": (64, 8192, 48),
    "gpt-76.1b": (80, 10240, 60),
    "gpt-145.6b": (96, 12288, 80),
    "gpt-310.1b": (128, 16384, 96),
    "gpt-529.6b": (128, 20480, 105),
    "gpt-1008b": (160, 25600, 128),
}

_GPT: list[ModelSpec] = [
    *(megatron_gpt(n, layers=lay, hidden=h, heads=a, source=_NARAYANAN_T1) for n, (a, h, lay) in _MEGATRON_T1.items()),
    # Brown et al. 2020 Table 2.1: 96 layers, d_model 12288, 96 heads.
    megatron_gpt("gpt3-175b", layers=96, hidden=12288, heads=96,
                 source="Brown et al. 2020 (arXiv 2005.14165) Table 2.1; Megatron shape"),
    # Korthikanti et al. 2022 (arXiv 2205.05198) Table 3: 22B = 64 heads, h 6144, 48 layers.
    megatron_gpt("gpt-22b", layers=48, hidden=6144, heads=64,
                 source="Korthikanti et al. 2022 (arXiv 2205.05198) Table 3"),
    # Smith et al. 2022 (arXiv 2201.11990) §3: MT-NLG 530B = 105 layers, h 20480, 128 heads (= gpt-529.6b).
    megatron_gpt("turing-530b", layers=105, hidden=20480, heads=128,
                 source="Smith et al. 2022 (arXiv 2201.11990) MT-NLG; Korthikanti et al. 2022 Table 3"),
]

_OPT: list[ModelSpec] = [
    # facebook/opt-*/config.json: hidden_size, num_hidden_layers, num_attention_heads, ffn_dim = 4·hidden.
    _opt("opt-6.7b", layers=32, hidden=4096, heads=32, source=HF.format("facebook/opt-6.7b")),
    _opt("opt-13b", layers=40, hidden=5120, heads=40, source=HF.format("facebook/opt-13b")),
    _opt("opt-30b", layers=48, hidden=7168, heads=56, source=HF.format("facebook/opt-30b")),
    _opt("opt-66b", layers=64, hidden=9216, heads=72, source=HF.format("facebook/opt-66b")),
    # OPT-175B is not on the Hub: Zhang et al. 2022 (arXiv 2205.01068) Table 1 gives 96 layers, 96 heads, 12288.
    _opt("opt-175b", layers=96, hidden=12288, heads=96, source="Zhang et al. 2022 (arXiv 2205.01068) Table 1"),
]

_OTHER_DENSE: list[ModelSpec] = [
    # bigscience/bloom config.json: n_layer 70, n_head 112, hidden_size 14336, vocab 250880; ALiBi, embedding
    # LayerNorm, biases, tied, MLP 4h (BloomMLP hard-codes 4·hidden_size).
    ModelSpec(
        name="bloom-176b", family="bloom", num_layers=70, hidden_size=14336, num_heads=112,
        ffn_hidden_size=4 * 14336, mlp=MlpKind.GELU, vocab_size=250880, tied_embeddings=True,
        position=PositionKind.ALIBI, max_position_embeddings=2048, norm=NormKind.LAYERNORM, qkv_bias=True,
        out_bias=True, mlp_bias=True, embedding_norm=True, dtype="bf16", source=HF.format("bigscience/bloom"),
    ),
    # EleutherAI/gpt-neox-20b config.json: 44 layers, 64 heads, 6144, intermediate 24576, vocab 50432,
    # use_parallel_residual, untied, rotary_pct 0.25; every linear has a bias; two LayerNorms per block.
    ModelSpec(
        name="gpt-neox-20b", family="gpt-neox", num_layers=44, hidden_size=6144, num_heads=64,
        ffn_hidden_size=24576, mlp=MlpKind.GELU, vocab_size=50432, tied_embeddings=False,
        position=PositionKind.ROPE, max_position_embeddings=2048, norm=NormKind.LAYERNORM, qkv_bias=True,
        out_bias=True, mlp_bias=True, parallel_block=True, dtype="fp16",
        source=HF.format("EleutherAI/gpt-neox-20b"),
    ),
    # tiiuae/falcon-40b config.json: n_layer 60, n_head 128, n_head_kv 8, hidden 8192, vocab 65024,
    # new_decoder_architecture (ln_attn + ln_mlp), parallel_attn, bias false, tied, MLP 4h GeLU.
    ModelSpec(
        name="falcon-40b", family="falcon", num_layers=60, hidden_size=8192, num_heads=128, num_kv_heads=8,
        ffn_hidden_size=4 * 8192, mlp=MlpKind.GELU, vocab_size=65024, tied_embeddings=True,
        position=PositionKind.ROPE, max_position_embeddings=2048, norm=NormKind.LAYERNORM, norms_per_layer=2,
        parallel_block=True, dtype="bf16", source=HF.format("tiiuae/falcon-40b"),
    ),
    # Nemotron-4 340B (no config.json on the Hub: a NeMo checkpoint): Nemotron-4 340B Technical Report (arXiv
    # 2406.11704) Table 1 — 96 layers, 18432, 96 heads, 8 KV heads, vocab 256000, seq 4096 — and §2.1: squared ReLU,
    # RoPE, no biases, untied embeddings; ffn 73728 from dgxc-benchmarking's nemotron4-340b-synth.yaml at 0b71cfda
    # (the shape the validation records cite), the width that gives the report's 331.6B non-embedding parameters.
    ModelSpec(
        name="nemotron-4-340b", family="nemotron", num_layers=96, hidden_size=18432, num_heads=96, num_kv_heads=8,
        ffn_hidden_size=73728, mlp=MlpKind.RELU2, vocab_size=256_000, tied_embeddings=False,
        position=PositionKind.ROPE, max_position_embeddings=4096, norm=NormKind.LAYERNORM, dtype="bf16",
        source="Nemotron-4 340B Technical Report (arXiv 2406.11704) Table 1 and §2.1",
    ),
    # tiiuae/falcon-180B config.json: 80 layers, 232 heads, num_kv_heads 8, hidden 14848, vocab 65024.
    ModelSpec(
        name="falcon-180b", family="falcon", num_layers=80, hidden_size=14848, num_heads=232, num_kv_heads=8,
        ffn_hidden_size=4 * 14848, mlp=MlpKind.GELU, vocab_size=65024, tied_embeddings=True,
        position=PositionKind.ROPE, max_position_embeddings=2048, norm=NormKind.LAYERNORM, norms_per_layer=2,
        parallel_block=True, dtype="bf16", source=HF.format("tiiuae/falcon-180B"),
    ),
]

_LLAMA: list[ModelSpec] = [
    # meta-llama/Llama-2-*-hf config.json (torch_dtype float16, vocab 32000, max_position_embeddings 4096).
    _rms_swiglu("llama-2-7b", family="llama", layers=32, hidden=4096, heads=32, kv=32, ffn=11008, vocab=32000,
                ctx=4096, dtype="fp16", source=HF.format("meta-llama/Llama-2-7b-hf")),
    _rms_swiglu("llama-2-13b", family="llama", layers=40, hidden=5120, heads=40, kv=40, ffn=13824, vocab=32000,
                ctx=4096, dtype="fp16", source=HF.format("meta-llama/Llama-2-13b-hf")),
    _rms_swiglu("llama-2-70b", family="llama", layers=80, hidden=8192, heads=64, kv=8, ffn=28672, vocab=32000,
                ctx=4096, dtype="fp16", source=HF.format("meta-llama/Llama-2-70b-hf")),
    # meta-llama/Llama-3.1-*/config.json (vocab 128256, max_position_embeddings 131072, bfloat16; rope_theta 500000,
# rope_scaling llama3: factor 8, low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192).
    _rms_swiglu("llama-3.1-8b", family="llama", layers=32, hidden=4096, heads=32, kv=8, ffn=14336, vocab=128256,
                ctx=131072, rope=_LLAMA31_ROPE, source=HF.format("meta-llama/Llama-3.1-8B")),
    _rms_swiglu("llama-3.1-70b", family="llama", layers=80, hidden=8192, heads=64, kv=8, ffn=28672, vocab=128256,
                ctx=131072, rope=_LLAMA31_ROPE, source=HF.format("meta-llama/Llama-3.1-70B")),
    _rms_swiglu("llama-3.1-405b", family="llama", layers=126, hidden=16384, heads=128, kv=8, ffn=53248,
                vocab=128256, ctx=131072, rope=_LLAMA31_ROPE, source=HF.format("meta-llama/Llama-3.1-405B")),
    # mistralai/Mistral-7B-v0.1 config.json: sliding_window 4096, max_position_embeddings 32768.
    _rms_swiglu("mistral-7b", family="mistral", layers=32, hidden=4096, heads=32, kv=8, ffn=14336, vocab=32000,
                ctx=32768, sliding_window=4096, source=HF.format("mistralai/Mistral-7B-v0.1")),
    # Qwen/Qwen2.5-*/config.json: Q/K/V biases (no config key: Qwen2Attention always has them), untied.
    _rms_swiglu("qwen2.5-7b", family="qwen", layers=28, hidden=3584, heads=28, kv=4, ffn=18944, vocab=152064,
                ctx=131072, theta=1e6, qkv_bias=True, source=HF.format("Qwen/Qwen2.5-7B")),
    _rms_swiglu("qwen2.5-72b", family="qwen", layers=80, hidden=8192, heads=64, kv=8, ffn=29568, vocab=152064,
                ctx=131072, theta=1e6, qkv_bias=True, source=HF.format("Qwen/Qwen2.5-72B")),
    # google/gemma-2-*/config.json: GeGLU (gelu_pytorch_tanh), explicit head_dim, tied, sliding_window 4096,
    # four RMSNorms per block (input, post-attention, pre- and post-feedforward).
    _rms_swiglu("gemma-2-9b", family="gemma", layers=42, hidden=3584, heads=16, kv=8, ffn=14336, vocab=256000,
                ctx=8192, head_dim=256, mlp=MlpKind.GEGLU, tied_embeddings=True, norms_per_layer=4,
                sliding_window=4096, layer_pattern=("S", "F"), source=HF.format("google/gemma-2-9b")),
    _rms_swiglu("gemma-2-27b", family="gemma", layers=46, hidden=4608, heads=32, kv=16, ffn=36864, vocab=256000,
                ctx=8192, head_dim=128, mlp=MlpKind.GEGLU, tied_embeddings=True, norms_per_layer=4,
                sliding_window=4096, layer_pattern=("S", "F"), source=HF.format("google/gemma-2-27b")),
]

# deepseek-ai/DeepSeek-V3 config.json: scoring_func sigmoid, topk_method noaux_tc, n_group 8, topk_group 4,
# routed_scaling_factor 2.5, norm_topk_prob true; rope_theta 10000 with YaRN factor 40 from 4096 (beta 32/1).
_DEEPSEEK_V3_ROUTER: dict[str, Any] = dict(score_function=RouterScore.SIGMOID, expert_bias=True,
                                           topk_scaling_factor=2.5, num_groups=8, topk_groups=4)
_DEEPSEEK_V3_ROPE = RopeSpec(theta=10000.0, scaling=RopeScaling.YARN, factor=40.0,
                             original_max_position_embeddings=4096, beta_fast=32.0, beta_slow=1.0, mscale=1.0,
                             mscale_all_dim=1.0)

_MOE: list[ModelSpec] = [
    # mistralai/Mixtral-8x7B-v0.1 config.json: num_local_experts 8, num_experts_per_tok 2, GQA 8.
    _rms_swiglu("mixtral-8x7b", family="mixtral", layers=32, hidden=4096, heads=32, kv=8, ffn=14336, vocab=32000,
                ctx=32768, theta=1e6, moe=MoESpec(num_experts=8, experts_per_token=2, expert_ffn_hidden_size=14336),
                source=HF.format("mistralai/Mixtral-8x7B-v0.1")),
    # mistralai/Mixtral-8x22B-v0.1 config.json: 56 layers, 48 heads, 6144, intermediate 16384, vocab 32000.
    _rms_swiglu("mixtral-8x22b", family="mixtral", layers=56, hidden=6144, heads=48, kv=8, ffn=16384, vocab=32000,
                ctx=65536, theta=1e6, moe=MoESpec(num_experts=8, experts_per_token=2, expert_ffn_hidden_size=16384),
                source=HF.format("mistralai/Mixtral-8x22B-v0.1")),
    # Qwen/Qwen2-57B-A14B config.json (model_type qwen2_moe): 28 layers, 3584, 28/4 heads, every layer MoE (decoder
    # sparse step 1): 64 experts top-8 of 2560 (norm_topk_prob false), one shared expert of 20480 behind a sigmoid
    # gate; Q/K/V biases (Qwen2Attention), untied, vocab 151936.
    _rms_swiglu("qwen2-57b-a14b", family="qwen", layers=28, hidden=3584, heads=28, kv=4, ffn=18944, vocab=151936,
                ctx=131072, theta=1e6, qkv_bias=True,
                moe=MoESpec(num_experts=64, experts_per_token=8, expert_ffn_hidden_size=2560, num_shared_experts=1,
                            shared_expert_ffn_hidden_size=20480, shared_expert_gate=True, norm_topk_prob=False),
                source=HF.format("Qwen/Qwen2-57B-A14B")),
    # Qwen/Qwen3-30B-A3B config.json: head_dim 128, q/k RMSNorm, 128 experts top-8 of 768, no shared expert.
    _rms_swiglu("qwen3-30b-a3b", family="qwen", layers=48, hidden=2048, heads=32, kv=4, ffn=6144, vocab=151936,
                ctx=40960, theta=1e6, head_dim=128, qk_norm=True,
                moe=MoESpec(num_experts=128, experts_per_token=8, expert_ffn_hidden_size=768),
                source=HF.format("Qwen/Qwen3-30B-A3B")),
    # Qwen/Qwen3-235B-A22B config.json: 94 layers, 64 heads, 4 KV heads, 128 experts top-8 of 1536.
    _rms_swiglu("qwen3-235b-a22b", family="qwen", layers=94, hidden=4096, heads=64, kv=4, ffn=12288, vocab=151936,
                ctx=40960, theta=1e6, head_dim=128, qk_norm=True,
                moe=MoESpec(num_experts=128, experts_per_token=8, expert_ffn_hidden_size=1536),
                source=HF.format("Qwen/Qwen3-235B-A22B")),
    # deepseek-ai/DeepSeek-V3 config.json: MLA (q_lora_rank 1536, kv_lora_rank 512, nope 128, rope 64, v 128),
    # 256 routed experts top-8 of 2048, 1 shared, first_k_dense_replace 3 (dense MLP 18432), vocab 129280,
    # untied; weights released in FP8; one MTP module (num_nextn_predict_layers 1, counted apart); router: sigmoid
    # scores, noaux_tc expert bias, n_group 8 / topk_group 4, routed_scaling_factor 2.5; YaRN rope_scaling.
    ModelSpec(
        name="deepseek-v3", family="deepseek", num_layers=61, hidden_size=7168, num_heads=128,
        ffn_hidden_size=18432, mlp=MlpKind.SWIGLU, vocab_size=129280, tied_embeddings=False,
        position=PositionKind.ROPE, max_position_embeddings=163840, norm=NormKind.RMSNORM,
        mla=MLASpec(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
        moe=MoESpec(num_experts=256, experts_per_token=8, expert_ffn_hidden_size=2048, num_shared_experts=1,
                    first_dense_layers=3, **_DEEPSEEK_V3_ROUTER),
        rope=_DEEPSEEK_V3_ROPE, mtp_layers=1, dtype="fp8", source=HF.format("deepseek-ai/DeepSeek-V3"),
    ),
]

PRESETS: list[ModelSpec] = [*_GPT, *_OPT, *_OTHER_DENSE, *_LLAMA, *_MOE, *PRESETS_2025]
