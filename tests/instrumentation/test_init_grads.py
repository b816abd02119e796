"""normformer-analyze init-grads (Xiong et al.'s Fig. 3): the per-layer ||grad fc2|| it reports equals a
direct autograd computation of the mean token cross-entropy, for an LM and a translation model."""
import json

import pytest
import torch
import torch.nn.functional as F

from fairseq_normformer.cli.analyze import main as analyze
from fairseq_normformer.instrumentation.init_grads import build_at_init

LM = ["--task", "language_modeling", "--arch", "normformer_lm", "--decoder-layers", "3", "--decoder-embed-dim", "32",
      "--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "2", "--tokens-per-sample", "32",
      "--batch-size", "4", "--post-ln"]  # fmt: skip
TRANSLATION = ["--task", "translation", "--arch", "preln_transformer_iwslt_de_en", "--encoder-layers", "2",
               "--decoder-layers", "3", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
               "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2",
               "--decoder-attention-heads", "2", "--share-all-embeddings", "--max-tokens", "400",
               "--max-source-positions", "64", "--max-target-positions", "64"]  # fmt: skip


def autograd_norms(train_args):
    """{stack: {layer: ||d(mean token NLL)/d fc2.weight||}} from the model's logits, by torch.autograd."""
    model, _, sample = build_at_init(train_args)
    model.eval()
    logits = model(**sample["net_input"])[0]
    target = sample["target"]
    pad = model.decoder.dictionary.pad()
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1), ignore_index=pad, reduction="sum")
    loss = loss / target.ne(pad).sum()
    names = [n for n, _ in model.named_parameters() if n.endswith("fc2.weight")]
    params = dict(model.named_parameters())
    grads = torch.autograd.grad(loss, [params[n] for n in names])
    norms = {}
    for name, grad in zip(names, grads):
        stack, _, layer = name.split(".")[:3]
        norms.setdefault(stack, {})[layer] = grad.norm().item()
    return norms


@pytest.mark.parametrize("model", ["lm", "translation"])
def test_init_grads_equal_autograd(model, tiny_lm_corpus, tiny_translation_corpus, tmp_path, capsys):
    data = tiny_lm_corpus.data_bin if model == "lm" else tiny_translation_corpus.data_bin
    train_args = [str(data), *(LM if model == "lm" else TRANSLATION), "--seed", "3"]
    out = tmp_path / "init_grads.json"
    analyze(["init-grads", str(data), "--out", str(out), "--", *train_args[1:]])
    reported = json.loads(out.read_text())["grad_norm"]
    expected = autograd_norms(train_args)
    assert set(reported) == ({"decoder"} if model == "lm" else {"encoder", "decoder"})
    for stack, by_layer in expected.items():
        assert list(reported[stack]) == list(by_layer)
        assert [reported[stack][k] for k in by_layer] == pytest.approx(list(by_layer.values()), rel=1e-4)
    assert "decoder: layer 0: " in capsys.readouterr().out

    analyze(["init-grads-plot", "--run", f"A={out}", "--run", f"B={out}", "--out-dir", str(tmp_path)])
    table = (tmp_path / "init_grads.md").read_text()
    assert "| A | decoder |" in table and (tmp_path / "init_grads.png").stat().st_size > 0
