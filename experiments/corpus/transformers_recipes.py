"""Hugging Face ``transformers`` models for the corpus, built from configs with random weights.

The rule: every model is built from its config class (never ``from_pretrained``; no hub
download, ``HF_HUB_OFFLINE=1``) after ``torch.manual_seed(0)``, with one fixed shrink --
hidden size 64 (convolutional stages 16-256), 2 layers (vision stages 1-2 blocks each),
4 attention heads (2 key/value heads where the architecture groups them, 1 for
multi-query), intermediate size 4x hidden, text vocabulary 4000 (CTC heads 32). The
decoders, T5, BEiT, Swin and DINOv2 use eager attention (the default SDPA path fails the
dynamo exporter on T5, BEiT and Swin); the others keep the default SDPA. BatchNorm
layers get seeded O(1) statistics (MobileViT's init otherwise zeroes its output). Text
inputs are batch 1, sequence 32, with an all-ones attention mask (without one, the causal
mask code calls ``torch.diff``, which the legacy exporter lacks); a KV-cache decode step
feeds 1 new token at position 16 after a 16-token past given as explicit tensors; an
encoder-decoder runs its encoder on 32 tokens and its decoder once on an 8-token prefix,
without a cache; images are 224x224 (SegFormer and MobileViT 256, DETR 320); audio is 1 s
at 16 kHz; Whisper's log-mel is 80x200 (max_source_positions 100). Shapes are static.
Each builder returns ``(wrapper module, example args, input specs)``: the wrapper takes
plain tensors and returns a tuple of tensors (see ``transformers_wrappers``).

Text families live here, speech, vision and multimodal ones in
``transformers_recipes_media``; ``RECIPES`` maps the model name to its builder.
"""

from __future__ import annotations

from collections.abc import Callable

import transformers as tf
from transformers_recipes_media import MEDIA
from transformers_wrappers import (
    SEQ,
    VOCAB,
    Built,
    IdsMask,
    IdsMaskTypes,
    Seq2Seq,
    decode_step,
    ids,
    inputs,
    mask,
)

DECODER_PREFIX = 8  # decoder_input_ids length of the encoder-decoders
SMALL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
BERTISH = {**SMALL, "vocab_size": VOCAB, "intermediate_size": 256, "max_position_embeddings": 128}
EAGER = {"attn_implementation": "eager"}
GPT2_IDS = {"vocab_size": VOCAB, "bos_token_id": 1, "eos_token_id": 2}
GPT2 = {**GPT2_IDS, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 128}
CAUSAL = {**BERTISH, **EAGER, "bos_token_id": 1, "eos_token_id": 2}


def _bert_like(model: object, types: bool = True) -> Built:
    """An encoder fed ids, an all-ones mask and (optionally) all-zero token types."""
    specs = [ids(), mask()]
    if types:
        specs.append(("token_type_ids", (1, SEQ), "zeros", "single-segment input"))
    args, listed = inputs(*specs)
    wrapper = IdsMaskTypes(model) if types else IdsMask(model)
    return wrapper, args, listed


def bert() -> Built:
    """BERT encoder (post-LN, GELU, learned positions, pooler)."""
    return _bert_like(tf.BertModel(tf.BertConfig(**BERTISH)))


def roberta() -> Built:
    """RoBERTa encoder (positions from the non-padding cumulative sum of the ids)."""
    return _bert_like(tf.RobertaModel(tf.RobertaConfig(**BERTISH, pad_token_id=1)), types=False)


def xlm_roberta() -> Built:
    """XLM-RoBERTa encoder (RoBERTa architecture, multilingual config)."""
    config = tf.XLMRobertaConfig(**BERTISH, pad_token_id=1)
    return _bert_like(tf.XLMRobertaModel(config), types=False)


def distilbert() -> Built:
    """DistilBERT encoder (no token types, no pooler)."""
    config = tf.DistilBertConfig(vocab_size=VOCAB, dim=64, n_layers=2, n_heads=4, hidden_dim=256)
    return _bert_like(tf.DistilBertModel(config), types=False)


def albert() -> Built:
    """ALBERT encoder (factorised 32-d embedding, one layer group shared by both layers)."""
    config = tf.AlbertConfig(**BERTISH, embedding_size=32)
    return _bert_like(tf.AlbertModel(config))


def electra() -> Built:
    """ELECTRA discriminator (BERT body, per-token real/replaced head)."""
    config = tf.ElectraConfig(**BERTISH, embedding_size=64)
    return _bert_like(tf.ElectraForPreTraining(config))


def deberta_v2() -> Built:
    """DeBERTa-v2 encoder (disentangled relative-position attention, log buckets)."""
    config = tf.DebertaV2Config(**BERTISH, relative_attention=True, position_buckets=32)
    return _bert_like(tf.DebertaV2Model(config), types=False)  # type_vocab_size 0: no types


def mpnet() -> Built:
    """MPNet encoder (relative position bias on top of absolute positions)."""
    config = tf.MPNetConfig(**BERTISH, pad_token_id=1)
    return _bert_like(tf.MPNetModel(config), types=False)


def _logits(model: object) -> Built:
    """A causal LM run on ``SEQ`` token ids and a mask without a cache; returns the logits."""
    args, specs = inputs(ids(), mask())
    return IdsMask(model, keep=1, use_cache=False), args, specs


def gpt2() -> Built:
    """GPT-2 (pre-LN, Conv1D projections, learned positions, tied head)."""
    config = tf.GPT2Config(**GPT2)
    return _logits(tf.GPT2LMHeadModel(config))


def gpt_neox() -> Built:
    """GPT-NeoX (parallel attention + MLP residual, partial rotary embedding)."""
    return _logits(tf.GPTNeoXForCausalLM(tf.GPTNeoXConfig(**CAUSAL, rotary_pct=0.25)))


def llama() -> Built:
    """Llama (RMSNorm, rotary, SwiGLU MLP, grouped-query attention 4/2)."""
    config = tf.LlamaConfig(**CAUSAL, num_key_value_heads=2)
    return _logits(tf.LlamaForCausalLM(config))


def qwen2() -> Built:
    """Qwen2 (Llama-like with q/k/v biases, grouped-query attention 4/2)."""
    config = tf.Qwen2Config(**CAUSAL, num_key_value_heads=2)
    return _logits(tf.Qwen2ForCausalLM(config))


def phi() -> Built:
    """Phi (parallel attention + MLP, partial rotary, GELU, LayerNorm)."""
    config = tf.PhiConfig(**CAUSAL, partial_rotary_factor=0.5)
    return _logits(tf.PhiForCausalLM(config))


def mistral() -> Built:
    """Mistral (Llama-like with a sliding attention window of 16 < the sequence)."""
    config = tf.MistralConfig(**CAUSAL, num_key_value_heads=2, sliding_window=16, head_dim=16)
    return _logits(tf.MistralForCausalLM(config))


def gemma() -> Built:
    """Gemma (scaled embeddings, RMSNorm with 1 + weight, GeGLU MLP, multi-query 4/1)."""
    config = tf.GemmaConfig(**CAUSAL, num_key_value_heads=1, head_dim=16)
    return _logits(tf.GemmaForCausalLM(config))


def bloom() -> Built:
    """BLOOM (ALiBi position bias, embedding LayerNorm, fused query/key/value)."""
    config = tf.BloomConfig(**GPT2_IDS, hidden_size=64, n_layer=2, n_head=4, **EAGER)
    return _logits(tf.BloomForCausalLM(config))


def opt() -> Built:
    """OPT (pre-LN, ReLU FFN, learned positions offset by 2)."""
    config = tf.OPTConfig(
        **CAUSAL, ffn_dim=256, word_embed_proj_dim=64, pad_token_id=0,
    )  # fmt: skip
    return _logits(tf.OPTForCausalLM(config))


def falcon() -> Built:
    """Falcon-7B style (parallel attention + MLP, multi-query attention, rotary)."""
    config = tf.FalconConfig(
        **CAUSAL, new_decoder_architecture=False, multi_query=True, parallel_attn=True,
    )  # fmt: skip
    return _logits(tf.FalconForCausalLM(config))


def mamba() -> Built:
    """Mamba (selective state-space scan unrolled over the 32 steps, causal conv1d)."""
    config = tf.MambaConfig(
        **GPT2_IDS, hidden_size=64, state_size=16, num_hidden_layers=2, expand=2,
        conv_kernel=4, pad_token_id=0,
    )  # fmt: skip
    return _logits(tf.MambaForCausalLM(config))


def gpt2_kv() -> Built:
    """GPT-2 decode step: 1 token, a 16-token KV cache in and the 17-token cache out."""
    config = tf.GPT2Config(**GPT2)
    return decode_step(tf.GPT2LMHeadModel(config), kv_heads=4, head_dim=16, max_pos=128)


def llama_kv() -> Built:
    """Llama decode step (grouped-query 4/2): 1 token after a 16-token KV cache."""
    config = tf.LlamaConfig(**CAUSAL, num_key_value_heads=2)
    return decode_step(tf.LlamaForCausalLM(config), kv_heads=2, head_dim=16, max_pos=128)


def qwen2_kv() -> Built:
    """Qwen2 decode step (grouped-query 4/2): 1 token after a 16-token KV cache."""
    config = tf.Qwen2Config(**CAUSAL, num_key_value_heads=2)
    return decode_step(tf.Qwen2ForCausalLM(config), kv_heads=2, head_dim=16, max_pos=128)


def _seq2seq(model: object) -> Built:
    """Encoder on ``SEQ`` ids + mask, one decoder pass on an 8-token prefix; logits out."""
    args, specs = inputs(
        ids(),
        mask(),
        ids("decoder_input_ids", DECODER_PREFIX),
    )
    return Seq2Seq(model, use_cache=False), args, specs


def t5() -> Built:
    """T5 (RMS LayerNorm, bucketed relative position bias, ReLU FFN, no positions)."""
    config = tf.T5Config(
        vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=256, num_layers=2, num_heads=4,
        decoder_start_token_id=0, attn_implementation="eager",
    )  # fmt: skip
    return _seq2seq(tf.T5ForConditionalGeneration(config))


def bart() -> Built:
    """BART (post-LN encoder-decoder, learned positions offset by 2, GELU)."""
    config = tf.BartConfig(
        vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=256,
        decoder_ffn_dim=256, max_position_embeddings=128,
    )  # fmt: skip
    return _seq2seq(tf.BartForConditionalGeneration(config))


def marian() -> Built:
    """Marian (sinusoidal positions, scaled embeddings, SiLU, final logits bias)."""
    config = tf.MarianConfig(
        vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=256,
        decoder_ffn_dim=256, max_position_embeddings=128, pad_token_id=3,
        decoder_start_token_id=3, eos_token_id=0,
    )  # fmt: skip
    return _seq2seq(tf.MarianMTModel(config))


TEXT: dict[str, tuple[str, Callable[[], Built]]] = {
    "bert": ("text-encoder", bert),
    "roberta": ("text-encoder", roberta),
    "xlm_roberta": ("text-encoder", xlm_roberta),
    "distilbert": ("text-encoder", distilbert),
    "albert": ("text-encoder", albert),
    "electra": ("text-encoder", electra),
    "deberta_v2": ("text-encoder", deberta_v2),
    "mpnet": ("text-encoder", mpnet),
    "gpt2": ("text-decoder", gpt2),
    "gpt_neox": ("text-decoder", gpt_neox),
    "llama": ("text-decoder", llama),
    "qwen2": ("text-decoder", qwen2),
    "phi": ("text-decoder", phi),
    "mistral": ("text-decoder", mistral),
    "gemma": ("text-decoder", gemma),
    "bloom": ("text-decoder", bloom),
    "opt": ("text-decoder", opt),
    "falcon": ("text-decoder", falcon),
    "mamba": ("text-decoder", mamba),
    "gpt2_kv": ("text-decoder-kv", gpt2_kv),
    "llama_kv": ("text-decoder-kv", llama_kv),
    "qwen2_kv": ("text-decoder-kv", qwen2_kv),
    "t5": ("encoder-decoder", t5),
    "bart": ("encoder-decoder", bart),
    "marian": ("encoder-decoder", marian),
}

# name -> (family, builder); the builder's module and name form the manifest's recipe.
RECIPES: dict[str, tuple[str, Callable[[], Built]]] = {**TEXT, **MEDIA}
