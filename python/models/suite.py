"""The real-model suite (issue 30): models people train, built from the config objects of
Hugging Face transformers, timm, torchvision and diffusers at small sizes (no weights or
data downloaded, nothing fetched), each as `FUNC(batch=2) -> (model, example_inputs)` whose
`model(*example_inputs)` returns the training loss first, as memplan-torch exports it.

Dropout is off in every model (`no_dropout`): the suite compares memplan's training with
PyTorch's bit for bit where the arithmetic allows, and dropout masks are each framework's
own draw. Everything else is the library's own module code. The versions are pinned in
requirements-models.txt. `MODELS` names every builder; benches/real_models.py runs the
whole suite, python/tests/test_real_models.py a smoke subset.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

# Images of the CNNs are 64 pixels square (2 · IMAGE): at 32 ResNet's last stage is 1x1,
# and a BatchNorm over two numbers per channel is ill-conditioned (f32 and f64 differ).
SEQ, VOCAB, IMAGE = 16, 128, 32


def no_dropout(model: nn.Module) -> nn.Module:
    """`model` with every dropout probability 0: `nn.Dropout` modules, and the float
    attributes library code reads its probabilities from (`attention_dropout`, ...)."""
    for module in model.modules():
        if isinstance(module, nn.modules.dropout._DropoutNd) or type(module).__name__ == "StochasticDepth":
            module.p = 0.0
        for name, value in list(vars(module).items()):
            if "drop" in name and isinstance(value, float) and not isinstance(value, bool):
                setattr(module, name, 0.0)
        config = getattr(module, "config", None)
        if config is not None:
            for name in list(vars(config)):
                if "drop" in name and isinstance(getattr(config, name), float):
                    setattr(config, name, 0.0)
    return model


def _tokens(batch: int, vocab: int = VOCAB, seq: int = SEQ):
    torch.manual_seed(0)
    return torch.randint(0, vocab, (batch, seq))


class Classify(nn.Module):
    """A classifier's training step: cross-entropy of `model(x)` (a tensor of logits, or a
    library output holding them) against `y`."""

    def __init__(self, model: nn.Module, key: str | None = None):
        super().__init__()
        self.model, self.key = model, key

    def forward(self, x, y):
        out = self.model(x)
        if self.key is not None:
            out = out[self.key]
        elif isinstance(out, (tuple, list)):
            out = out[0]
        elif not isinstance(out, torch.Tensor):
            out = out.logits
        return F.cross_entropy(out, y)


class Segment(nn.Module):
    """A segmentation model's step: per-pixel cross-entropy of its `out` map."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x, y):
        return F.cross_entropy(self.model(x)["out"], y)


def _images(batch: int, size: int = IMAGE, classes: int = 10):
    torch.manual_seed(0)
    return torch.randn(batch, 3, size, size), torch.randint(0, classes, (batch,))


# -- Hugging Face transformers -------------------------------------------------------------

def _causal_lm(config, batch, attention="sdpa"):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = no_dropout(AutoModelForCausalLM.from_config(config, attn_implementation=attention))
    ids = _tokens(batch, config.vocab_size)
    return HFLoss(model), (ids, ids.clone())


class HFLoss(nn.Module):
    """A transformers model's training step: its own loss, from `labels`."""

    def __init__(self, model: nn.Module, **extra):
        super().__init__()
        self.model, self.extra = model, extra

    def forward(self, inputs, labels):
        return self.model(inputs, labels=labels, **self.extra).loss


SMALL = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=64)


def gpt2(batch=2):
    from transformers import GPT2Config

    return _causal_lm(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64), batch)


def llama(batch=2):
    from transformers import LlamaConfig

    return _causal_lm(LlamaConfig(**SMALL, num_key_value_heads=2), batch)


def mistral(batch=2):
    from transformers import MistralConfig

    return _causal_lm(MistralConfig(**SMALL, num_key_value_heads=2, sliding_window=8), batch)


def qwen2(batch=2):
    from transformers import Qwen2Config

    return _causal_lm(Qwen2Config(**SMALL, num_key_value_heads=2), batch)


def phi(batch=2):
    from transformers import PhiConfig

    return _causal_lm(PhiConfig(**SMALL), batch)


def gemma(batch=2):
    from transformers import GemmaConfig

    return _causal_lm(GemmaConfig(**SMALL, num_key_value_heads=1, head_dim=8), batch)


def gpt_neox(batch=2):
    from transformers import GPTNeoXConfig

    return _causal_lm(GPTNeoXConfig(**SMALL), batch)


def opt(batch=2):
    from transformers import OPTConfig

    return _causal_lm(OPTConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                ffn_dim=64, max_position_embeddings=64, word_embed_proj_dim=32), batch)


def bloom(batch=2):
    from transformers import BloomConfig

    # Bloom has no SDPA path in transformers: its own (eager) attention with ALiBi.
    return _causal_lm(BloomConfig(vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4), batch, attention="eager")


def falcon(batch=2):
    from transformers import FalconConfig

    return _causal_lm(FalconConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                   new_decoder_architecture=False, multi_query=True), batch)


def mixtral(batch=2):
    """Mixtral with transformers' `batched_mm` experts: each token's experts' weights
    gathered and multiplied in one batch (what transformers itself switches to for
    generation on a GPU). The default on the CPU, `grouped_mm`, sorts the tokens into
    groups by expert (`sort`, `histc`, a grouped matmul over data-dependent offsets): same
    values, ops memplan does not have (export writes them as extern)."""
    from transformers import MixtralConfig

    config = MixtralConfig(**SMALL, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                           experts_implementation="batched_mm")
    return _causal_lm(config, batch)


def t5(batch=2):
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    config = T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                      decoder_start_token_id=0, pad_token_id=0)
    model = no_dropout(T5ForConditionalGeneration(config))
    ids = _tokens(batch)
    return HFLoss(model), (ids, ids.clone())


def bart(batch=2):
    from transformers import BartConfig, BartForConditionalGeneration

    torch.manual_seed(0)
    config = BartConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)
    model = no_dropout(BartForConditionalGeneration(config))
    ids = _tokens(batch)
    return HFLoss(model), (ids, ids.clone())


class WhisperLoss(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, features, labels):
        return self.model(input_features=features, labels=labels).loss


def whisper(batch=2):
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    torch.manual_seed(0)
    config = WhisperConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                           decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=16,
                           max_source_positions=16, max_target_positions=32, pad_token_id=0, decoder_start_token_id=1)
    model = no_dropout(WhisperForConditionalGeneration(config))
    return WhisperLoss(model), (torch.randn(batch, 16, 32), _tokens(batch, seq=8))


def _encoder(config_cls, model_cls, batch, **extra):
    torch.manual_seed(0)
    config = config_cls(**SMALL, num_labels=4, **extra)
    model = no_dropout(model_cls(config))
    return HFLoss(model), (_tokens(batch), torch.randint(0, 4, (batch,)))


def bert(batch=2):
    from transformers import BertConfig, BertForSequenceClassification

    return _encoder(BertConfig, BertForSequenceClassification, batch)


def roberta(batch=2):
    from transformers import RobertaConfig, RobertaForSequenceClassification

    return _encoder(RobertaConfig, RobertaForSequenceClassification, batch, pad_token_id=1)


def distilbert(batch=2):
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    torch.manual_seed(0)
    config = DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=64,
                              num_labels=4)
    model = no_dropout(DistilBertForSequenceClassification(config))
    return HFLoss(model), (_tokens(batch), torch.randint(0, 4, (batch,)))


def albert(batch=2):
    from transformers import AlbertConfig, AlbertForSequenceClassification

    return _encoder(AlbertConfig, AlbertForSequenceClassification, batch, embedding_size=16)


def deberta_v2(batch=2):
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

    # Without a problem type DeBERTa's loss picks its branch from the labels' values.
    return _encoder(DebertaV2Config, DebertaV2ForSequenceClassification, batch,
                    problem_type="single_label_classification")


def electra(batch=2):
    from transformers import ElectraConfig, ElectraForSequenceClassification

    return _encoder(ElectraConfig, ElectraForSequenceClassification, batch, embedding_size=16)


def _vision(config, model_cls, batch, size=IMAGE):
    torch.manual_seed(0)
    model = no_dropout(model_cls(config))
    x, y = _images(batch, size, 4)
    return HFLoss(model), (x, y)


def vit(batch=2):
    from transformers import ViTConfig, ViTForImageClassification

    return _vision(ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                             image_size=IMAGE, patch_size=8, num_labels=4), ViTForImageClassification, batch)


def swin(batch=2):
    from transformers import SwinConfig, SwinForImageClassification

    return _vision(SwinConfig(image_size=IMAGE, patch_size=2, embed_dim=16, depths=[2, 2], num_heads=[2, 4],
                              window_size=4, num_labels=4), SwinForImageClassification, batch)


def convnext(batch=2):
    from transformers import ConvNextConfig, ConvNextForImageClassification

    return _vision(ConvNextConfig(num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], num_labels=4),
                   ConvNextForImageClassification, batch)


class CLIPLoss(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids, pixels):
        return self.model(input_ids=ids, pixel_values=pixels, return_loss=True).loss


def clip(batch=2):
    from transformers import CLIPConfig, CLIPModel

    torch.manual_seed(0)
    config = CLIPConfig(text_config=dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=64, max_position_embeddings=SEQ),
                        vision_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                           intermediate_size=64, image_size=IMAGE, patch_size=8),
                        projection_dim=16)
    model = no_dropout(CLIPModel(config))
    return CLIPLoss(model), (_tokens(batch), _images(batch)[0])


def mamba(batch=2):
    from transformers import MambaConfig

    # No attention at all: the slow (sequential) selective scan, as on a CPU.
    return _causal_lm(MambaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, state_size=4,
                                  use_mambapy=False), batch, attention="eager")


def wav2vec2(batch=2):
    """Wav2Vec2 classifying audio (its CTC head checks the labels' values in Python, which
    no planned step can: `labels.max() >= vocab_size`)."""
    from transformers import Wav2Vec2Config, Wav2Vec2ForSequenceClassification

    torch.manual_seed(0)
    config = Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                            conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=8,
                            num_conv_pos_embedding_groups=4, do_stable_layer_norm=True, mask_time_prob=0.0,
                            feat_extract_norm="layer", num_labels=4, classifier_proj_size=16)
    model = no_dropout(Wav2Vec2ForSequenceClassification(config))
    torch.manual_seed(0)
    return HFLoss(model), (torch.randn(batch, 400), torch.randint(0, 4, (batch,)))


# -- timm ------------------------------------------------------------------------------------

def _timm(name, batch, size=2 * IMAGE, **kwargs):
    import timm

    torch.manual_seed(0)
    model = no_dropout(timm.create_model(name, pretrained=False, num_classes=10, **kwargs))
    return Classify(model), _images(batch, size)


def timm_resnet(batch=4):
    return _timm("resnet10t", batch)


def timm_efficientnet(batch=4):
    return _timm("efficientnet_b0", batch)


def timm_convnext(batch=4):
    return _timm("convnext_atto", batch)


def timm_vit(batch=4):
    return _timm("vit_tiny_patch16_224", batch, size=IMAGE, img_size=IMAGE, patch_size=8)


def timm_mobilenetv3(batch=4):
    return _timm("mobilenetv3_small_050", batch)


def timm_regnet(batch=4):
    return _timm("regnetx_002", batch)


def timm_densenet(batch=4):
    return _timm("densenet121", batch)


# -- torchvision -------------------------------------------------------------------------------

def _torchvision(name, batch, size=2 * IMAGE, **kwargs):
    import torchvision

    torch.manual_seed(0)
    model = no_dropout(getattr(torchvision.models, name)(weights=None, num_classes=10, **kwargs))
    return Classify(model), _images(batch, size)


def tv_resnet(batch=4):
    return _torchvision("resnet18", batch)


def tv_mobilenetv3(batch=4):
    return _torchvision("mobilenet_v3_small", batch)


def tv_efficientnet(batch=4):
    return _torchvision("efficientnet_b0", batch)


def tv_squeezenet(batch=4):
    return _torchvision("squeezenet1_0", batch, size=64)


def tv_inception(batch=4):
    return _torchvision("inception_v3", batch, size=75, aux_logits=False, init_weights=True)


def tv_deeplabv3(batch=4):
    import torchvision

    torch.manual_seed(0)
    model = no_dropout(torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=4, aux_loss=False))
    x, _ = _images(batch)
    return Segment(model), (x, torch.randint(0, 4, (batch, IMAGE, IMAGE)))


def tv_swin(batch=4):
    return _torchvision("swin_t", batch)


# -- diffusers ---------------------------------------------------------------------------------

class Denoise(nn.Module):
    """A diffusion UNet's training step: mean squared error of its noise prediction."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, noisy, timestep, text, noise):
        return F.mse_loss(self.model(noisy, timestep, encoder_hidden_states=text).sample, noise)


def diffusers_unet(batch=2):
    from diffusers import UNet2DConditionModel

    torch.manual_seed(0)
    model = no_dropout(UNet2DConditionModel(sample_size=8, in_channels=4, out_channels=4, layers_per_block=1,
                                            block_out_channels=(32, 64), norm_num_groups=8, cross_attention_dim=16,
                                            attention_head_dim=8,
                                            down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                            up_block_types=("UpBlock2D", "CrossAttnUpBlock2D")))
    torch.manual_seed(0)
    return Denoise(model), (torch.randn(batch, 4, 8, 8), torch.tensor([10] * batch), torch.randn(batch, 4, 16),
                            torch.randn(batch, 4, 8, 8))


MODELS = [gpt2, llama, mistral, qwen2, phi, gemma, gpt_neox, opt, bloom, falcon, mixtral, t5, bart, whisper, bert,
          roberta, distilbert, albert, deberta_v2, electra, vit, swin, convnext, clip, mamba, wav2vec2, timm_resnet,
          timm_efficientnet, timm_convnext, timm_vit, timm_mobilenetv3, timm_regnet, timm_densenet, tv_resnet,
          tv_mobilenetv3, tv_efficientnet, tv_squeezenet, tv_inception, tv_deeplabv3, tv_swin, diffusers_unet]
