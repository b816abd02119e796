"""EleutherAI's lm-evaluation-harness (``lm_eval``, tested with 0.4.13) on fairseq checkpoints.

Importing this module registers the model name ``normformer``::

    import lm_eval, fairseq_normformer.zeroshot.lm_eval_adapter
    lm_eval.simple_evaluate(model="normformer", tasks=["hellaswag"],
                            model_args="checkpoint=ckpt.pt,spm_model=spm.model")

or from the shell, ``normformer-zero-shot lm-eval --model normformer --model_args ... --tasks ...``
(lm_eval's own command line with this model registered; it defaults to ``--device cuda:0``, so
pass ``--device cpu`` on a machine without a GPU). Model arguments: ``checkpoint``,
``spm_model``, and optionally ``data`` (directory of the checkpoint's dict.txt), ``device``,
``fp16``, ``max_tokens`` (tokens per scoring batch), ``user_dir``. lm_eval's ``batch_size`` is
ignored: batches are sized in tokens.
"""
import logging

try:
    from lm_eval.api.model import LM
    from lm_eval.api.registry import register_model
    from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs
except ImportError as err:  # lm-eval is a test/optional dependency
    raise ImportError("the lm_eval adapter needs lm-eval: pip install lm-eval==0.4.13") from err

from .scorer import PACKAGE_DIR, load_scorer

logger = logging.getLogger(__name__)
DEFAULT_MAX_GEN_TOKS = 256


@register_model("normformer")
class NormFormerLM(LM):
    def __init__(self, checkpoint, spm_model, data=None, device="cpu", fp16=False, max_tokens=4096,
                 user_dir=str(PACKAGE_DIR), batch_size=None, max_batch_size=None):  # fmt: skip
        super().__init__()
        if batch_size not in (None, 1, "1"):
            logger.info(f"batch_size={batch_size} ignored: batches hold up to max_tokens={max_tokens} tokens")
        self.scorer = load_scorer(checkpoint, spm_model, data, user_dir, device, bool(fp16), int(max_tokens))
        self._device = self.scorer.device

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        """(log p(continuation | context), continuation is the greedy output) per request."""
        scores = self.scorer.score([request.args for request in requests])
        results = [(score.logprob, score.is_greedy) for score in scores]
        for request, result in zip(requests, results):
            self.cache_hook.add_partial("loglikelihood", request.args, result)
        return results

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        results = []
        for request in requests:
            (text,) = request.args
            results.append(self.scorer.rolling_logprob(text))
            self.cache_hook.add_partial("loglikelihood_rolling", (text,), results[-1])
        return results

    def generate_until(self, requests, disable_tqdm: bool = False):
        """Greedy decoding only; a request asking for sampling is an error, not silently greedy."""
        results = []
        for request in requests:
            context, gen_kwargs = request.args
            kwargs = normalize_gen_kwargs(gen_kwargs, DEFAULT_MAX_GEN_TOKS)
            if kwargs.get("do_sample"):
                raise ValueError(f"the normformer lm_eval model decodes greedily; got do_sample with {gen_kwargs}")
            until = handle_stop_sequences(kwargs.get("until"), eos=None)
            results.append(self.scorer.generate_greedy(context, until, kwargs["max_gen_toks"]))
            self.cache_hook.add_partial("generate_until", request.args, results[-1])
        return results
