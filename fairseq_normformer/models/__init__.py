from .normformer_lm import NormFormerDecoder, NormFormerLanguageModel  # noqa: F401
from .normformer_bert import NormFormerBertModel  # noqa: F401
from .normformer_roberta import NormFormerRobertaModel  # noqa: F401
from .normformer_transformer import NormFormerTransformerModel  # noqa: F401
from .lambert import LambertModel  # noqa: F401
from .normformer_lm_classifier import NormFormerLMClassifier  # noqa: F401
