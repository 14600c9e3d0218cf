"""Parameter counts of the vision towers of multimodal wrappers, from their ``vision_config``.

Only counted and shown (``ModelSpec.vision_params``); the text model is what gets planned. Each
function follows the transformers module it names, weight by weight.
"""

from __future__ import annotations

from shardplan.models.hf_types.config import HFConfig


def _vit_layers(c: HFConfig, *, layers: int, h: int, ffn: int, bias: bool, gated: bool, ln_bias: bool) -> int:
    attn = 4 * h * h + (4 * h if bias else 0)
    mlp = (3 if gated else 2) * h * ffn + ((ffn + h) if bias else 0)
    norms = 2 * h * (2 if ln_bias else 1)
    return layers * (attn + mlp + norms)


def siglip(c: HFConfig, text_hidden: int) -> int:
    """Gemma 3: SiglipVisionModel (conv patch embedding with bias, learned positions, LayerNorms with bias,
    post_layernorm) + Gemma3MultiModalProjector (mm_input_projection_weight, mm_soft_emb_norm RMSNorm)."""
    h, p, img = c.num("hidden_size", default=1152), c.num("patch_size", default=14), c.num("image_size", default=896)
    embed = 3 * p * p * h + h + (img // p) ** 2 * h
    layers = _vit_layers(c, layers=c.num("num_hidden_layers", default=27), h=h,
                         ffn=c.num("intermediate_size", default=4304), bias=True, gated=False, ln_bias=True)
    return embed + layers + 2 * h + h * text_hidden + h


def llama4_vision(c: HFConfig, text_hidden: int) -> int:
    """Llama 4: Llama4VisionModel (unfold patch linear without bias, class embedding, positions for
    (img/p)²+1 tokens, pre/post LayerNorms, ViT layers with biases, pixel-shuffle MLP without biases) +
    Llama4MultiModalProjector (vision_output_dim → text hidden, no bias)."""
    h, p, img = c.num("hidden_size", default=1408), c.num("patch_size", default=14), c.num("image_size", default=336)
    ffn = c.num("intermediate_size", default=5632)
    ratio = c.real("pixel_shuffle_ratio", 0.5)
    embed = 3 * p * p * h + h + ((img // p) ** 2 + 1) * h + 2 * 2 * h
    layers = _vit_layers(c, layers=c.num("num_hidden_layers", default=34), h=h, ffn=ffn, bias=True, gated=False,
                         ln_bias=True)
    shuffled = int(h / (ratio * ratio))
    proj_in, proj_out = c.num("projector_input_dim", default=4096), c.num("projector_output_dim", default=4096)
    adapter = shuffled * proj_in + proj_in * proj_out
    return embed + layers + adapter + c.num("vision_output_dim", default=4096) * text_hidden


def pixtral(c: HFConfig, text_hidden: int, *, merge: int, projector_bias: bool) -> int:
    """Mistral 3: PixtralVisionModel (conv patch embedding without bias, ln_pre RMSNorm, layers with gated
    MLP and RMSNorms, no biases) + Mistral3MultiModalProjector (RMSNorm, patch merger merge²·h → h,
    linear_1 h → text, linear_2 text → text)."""
    h, p = c.num("hidden_size", default=1024), c.num("patch_size", default=16)
    layers = _vit_layers(c, layers=c.num("num_hidden_layers", default=24), h=h,
                         ffn=c.num("intermediate_size", default=4096), bias=False, gated=True, ln_bias=False)
    bias = (text_hidden + text_hidden) if projector_bias else 0
    projector = h + merge * merge * h * h + h * text_hidden + text_hidden * text_hidden + bias
    return 3 * p * p * h + h + layers + projector
