from .normformer_lm import GPT3_SIZES, NormFormerDecoder, NormFormerLanguageModel  # noqa: F401
